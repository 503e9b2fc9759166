"""The Dockerfiles cannot be built here; check what can be checked without a Docker engine."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest
import yaml

from tailpilot import crdgen

REPO = crdgen.REPO_ROOT
DOCKERFILES = sorted((REPO / "docker").glob("*.Dockerfile"))


def test_both_images_have_a_dockerfile() -> None:
    assert {p.name for p in DOCKERFILES} == {"operator.Dockerfile", "builder.Dockerfile"}


@pytest.mark.parametrize("path", DOCKERFILES, ids=[p.name for p in DOCKERFILES])
def test_dockerfile_basics(path: Path) -> None:
    text = path.read_text()
    assert re.search(r"^USER [1-9][0-9]*:[1-9][0-9]*$", text, re.M), "runs as a fixed non-root UID:GID"
    assert '\nENTRYPOINT ["tailpilot"]\n' in text
    for line in re.findall(r"^COPY (?!--from)(.+)$", text, re.M):
        *sources, _dest = line.split()
        for src in sources:
            if src != "README.md":  # the repository README, written by the lead
                assert (REPO / src).exists(), f"{path.name}: COPY source {src} does not exist"
    for ref in re.findall(r"^ARG \w+_IMAGE=(\S+)$", text, re.M):
        assert ":" in ref and not ref.endswith(":latest"), f"{path.name}: base image {ref} is not pinned"


def test_operator_uid_matches_the_chart() -> None:
    values = yaml.safe_load((REPO / "charts/tailpilot/values.yaml").read_text())
    uid = values["podSecurityContext"]["runAsUser"]
    assert f"USER {uid}:{uid}" in (REPO / "docker/operator.Dockerfile").read_text()


def _dockerfile(image: str) -> str:
    return (REPO / f"docker/{image}.Dockerfile").read_text()


@pytest.mark.parametrize("image", ["operator", "builder"])
def test_python_is_installed_by_the_script_from_the_lock(image: str) -> None:
    """One install path per image, tested by tests/images/test_image_installs.py."""
    text = _dockerfile(image)
    assert re.search(r"^COPY .*\brequirements\.lock\b.* \./$", text, re.M), "the lock is in the build context"
    assert re.search(r"^COPY docker/install-python\.sh docker/$", text, re.M)
    runs = re.findall(r"^RUN ((?:.*\\\n)*.*)$", text, re.M)
    calls = [r for r in runs if "docker/install-python.sh" in r]
    assert len(calls) == 1 and re.search(rf"\bsh docker/install-python\.sh {image} /opt/venv\b", calls[0])
    assert not any(re.search(r"\bpip\b.*\binstall\b", r) for r in runs), (
        "every install goes through the script"
    )
    script = (REPO / "docker/install-python.sh").read_text()
    installs = [line for line in script.splitlines() if re.search(r"\bpip install\b", line)]
    assert installs and all('-c "$src/requirements.lock"' in line for line in installs)


def _chart_image(values: dict, app_version: str) -> str:
    return f"{values['repository']}:{values.get('tag') or app_version}"


def test_make_images_builds_what_the_chart_pulls() -> None:
    """`make images` with its defaults, and each Dockerfile's header, tag what the chart pulls by default."""
    values = yaml.safe_load((REPO / "charts/tailpilot/values.yaml").read_text())
    app_version = yaml.safe_load((REPO / "charts/tailpilot/Chart.yaml").read_text())["appVersion"]
    expected = {
        "operator": _chart_image(values["image"], app_version),
        "builder": _chart_image(values["builder"]["image"], app_version),
    }
    for image, ref in expected.items():
        assert f"docker build -f docker/{image}.Dockerfile -t {ref} ." in _dockerfile(image)
    if shutil.which("make") is None:
        pytest.skip("no make")
    env = {k: v for k, v in os.environ.items() if k not in {"REGISTRY", "TAG", "PLATFORM", "DOCKER"}}
    dry_run = subprocess.run(
        ["make", "-n", "-s", "images"], cwd=REPO, env=env, capture_output=True, text=True, check=True
    )
    built = dict(re.findall(r"-f docker/(\w+)\.Dockerfile -t (\S+) \.", dry_run.stdout))
    assert built == expected


@pytest.mark.parametrize("path", DOCKERFILES, ids=[p.name for p in DOCKERFILES])
def test_every_package_folder_is_copied(path: Path) -> None:
    """setuptools refuses a package whose folder (pyproject's package-dir) is missing: the install fails."""
    folders = set(
        tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"].values()
    )
    copied = {
        src.rstrip("/").split("/")[0]
        for line in re.findall(r"^COPY (?!--from)(.+)$", path.read_text(), re.M)
        for src in line.split()[:-1]
    }
    assert folders <= copied, f"{path.name} copies no {sorted(folders - copied)}"


def test_the_charts_activator_runs_the_operator_images_python() -> None:
    """The activator Deployment's `python` is the image's venv (first on PATH), which holds the package."""
    text = _dockerfile("operator")
    assert re.search(r"^ENV PATH=/opt/venv/bin:\$PATH\b", text, re.M)
    assert re.search(r"^COPY activator/ activator/$", text, re.M)
    template = (REPO / "charts/tailpilot/templates/activator-deployment.yaml").read_text()
    assert "command: [python, -P, -m, tailpilot.activator]" in template
