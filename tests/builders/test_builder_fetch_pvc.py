"""pvc:// sources are read only from inside the claim they name (the build's own check)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tailpilot.builders.errors import BuildError
from tailpilot.builders.fetch import FetchOptions, fetch


@pytest.fixture
def mounts(tmp_path: Path) -> Path:
    (tmp_path / "pvc" / "models" / "v2").mkdir(parents=True)
    (tmp_path / "pvc" / "models" / "v2" / "m.onnx").write_bytes(b"model")
    (tmp_path / "pvc" / "secrets").mkdir()
    (tmp_path / "pvc" / "secrets" / "token").write_bytes(b"another claim's file")
    (tmp_path / "pvc" / "models" / "escape").symlink_to(tmp_path / "pvc" / "secrets" / "token")
    return tmp_path / "pvc"


def test_a_file_inside_the_claim_is_fetched(mounts: Path, tmp_path: Path) -> None:
    got = fetch(
        "pvc://models/v2/m.onnx", tmp_path / "out", expected_sha256=None, options=FetchOptions(mounts)
    )
    assert got.path.read_bytes() == b"model" and got.size == 5


@pytest.mark.parametrize(
    "uri",
    [
        "pvc://models/../secrets/token",  # a `..` segment
        "pvc://models/%2e%2e/secrets/token",  # the same, percent-encoded
        "pvc://models/escape",  # a symlink inside the claim pointing out of it
        "pvc://models/",  # the claim itself, not a file in it
    ],
)
def test_a_path_leaving_its_claim_is_refused(mounts: Path, tmp_path: Path, uri: str) -> None:
    with pytest.raises(BuildError, match="must lie inside the claim 'models'") as raised:
        fetch(uri, tmp_path / "out", expected_sha256=None, options=FetchOptions(mounts))
    assert raised.value.reason == "UnsupportedModelUri"
    assert not (tmp_path / "out").exists()
