"""The Dockerfiles cannot be built here; check what can be checked without a Docker engine."""

from __future__ import annotations

import re
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
