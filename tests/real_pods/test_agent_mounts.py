"""The node agent's mount helper: volumes at their mountPaths in a private mount namespace, host untouched."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tailpilot_e2e.agent_process import MOUNT_HELPER

TOKEN_PATH = "/var/run/secrets/kubernetes.io/serviceaccount"
MISSING = "/opt/tailpilot-agent-mount-test/data"


@pytest.fixture(scope="module", autouse=True)
def unshare_works() -> None:
    """The tests fail (as the agent's operator pods would wait) where mount namespaces cannot be made."""
    unshare = shutil.which("unshare")
    probe = [str(unshare), "-m", "--propagation", "private", "true"]
    if unshare is None or subprocess.run(probe, capture_output=True, check=False).returncode != 0:
        pytest.fail("`unshare -m` does not work here (needs root): the operator image cannot run on local-0")


def run_in_namespace(plan: dict[str, Any], tmp_path: Path, script: str) -> subprocess.CompletedProcess[str]:
    """What the agent runs for an image with `mount_namespace`: unshare, the helper, the command."""
    plan_file = tmp_path / "mounts.json"
    plan_file.write_text(json.dumps(plan))
    helper = [sys.executable, "-I", "-S", str(MOUNT_HELPER), str(plan_file), "--"]
    argv = [str(shutil.which("unshare")), "-m", "--propagation", "private", *helper, "sh", "-c", script]
    return subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)


def test_volumes_appear_at_their_mount_paths_inside_and_nowhere_outside(tmp_path: Path) -> None:
    token, data, scratch_tmp = tmp_path / "token", tmp_path / "data", tmp_path / "tmp"
    for directory in (token, data, scratch_tmp):
        directory.mkdir()
    (token / "token").write_text("a-service-account-token")
    (data / "model.onnx").write_text("weights")
    plan = {
        "scratch": str(tmp_path / "scratch"),
        # The pod's directory is under /tmp here: a /tmp mount would hide it, so it is left out.
        "keep": [str(tmp_path)],
        "mounts": [
            {"source": str(scratch_tmp), "target": "/tmp", "readOnly": False},
            {"source": str(data), "target": MISSING, "readOnly": False},
            {"source": str(token), "target": TOKEN_PATH, "readOnly": True},
        ],
    }
    script = (
        f"cat {TOKEN_PATH}/token; echo; cat {MISSING}/model.onnx; echo; "
        f"(echo x > {TOKEN_PATH}/new) 2>/dev/null && echo writable || echo read-only; "
        f"echo inside > {MISSING}/written"
    )
    token_path_before = Path(TOKEN_PATH).exists()
    result = run_in_namespace(plan, tmp_path, script)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split("\n")[:3] == ["a-service-account-token", "weights", "read-only"]
    assert "/tmp not mounted: it would hide" in result.stderr
    assert (data / "written").read_text() == "inside\n"  # a real bind mount of the volume
    # Nothing of it on the host: the missing mountPaths were made in overlays, in the scratch dir.
    assert not Path(MISSING).parent.exists()
    assert Path(TOKEN_PATH).exists() == token_path_before


def test_a_mount_path_with_only_the_root_above_it_is_left_out_and_said(tmp_path: Path) -> None:
    (tmp_path / "models").mkdir()
    plan = {
        "scratch": str(tmp_path / "scratch"),
        "keep": [],
        "mounts": [
            {"source": str(tmp_path / "models"), "target": "/tailpilot-agent-no-such-dir", "readOnly": False}
        ],
    }
    result = run_in_namespace(plan, tmp_path, "echo ran")
    # The container runs (its args point into the pod's directory); its log says what is missing.
    assert result.returncode == 0 and "ran" in result.stdout, result.stderr
    assert "/tailpilot-agent-no-such-dir not mounted" in result.stderr
    assert "only / exists above it" in result.stderr
    assert not Path("/tailpilot-agent-no-such-dir").exists()
