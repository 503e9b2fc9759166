"""Fixtures for tests of the real operator process on the local cluster."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from tailpilot.api.engine import BuildResult
from tailpilot_e2e.cluster import LocalCluster
from tailpilot_e2e.operator_harness import (
    RESNET_H100_PROFILE,
    OperatorProcess,
    create_engine_store,
    install_crds,
    played_resnet_build,
)

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.fixture(scope="session")
def crds(local_cluster: LocalCluster) -> LocalCluster:
    install_crds(local_cluster)
    return local_cluster


@pytest.fixture
def engine_store(k8s: client.ApiClient, namespace: str, tmp_path: Path) -> str:
    create_engine_store(client.CoreV1Api(k8s), namespace, host_path=tmp_path / "engines")
    return "tailpilot-engines"


@pytest.fixture
def operator(
    crds: LocalCluster, namespace: str, engine_store: str, tmp_path: Path
) -> Iterator[OperatorProcess]:
    with OperatorProcess(crds, namespace=namespace, log_dir=crds.paths.root / "logs") as process:
        yield process


@pytest.fixture
def example() -> Callable[..., dict[str, Any]]:
    def load(file: str, *, namespace: str, name: str | None = None) -> dict[str, Any]:
        obj: dict[str, Any] = yaml.safe_load((EXAMPLES / file).read_text())
        obj["metadata"]["namespace"] = namespace
        if name:
            obj["metadata"]["name"] = name
        return obj

    return load


def gpu_build_result(engine_key: str = "e3b0c44298fc1c149afbf4c8996fb924") -> BuildResult:
    """The played ResNet-50 TensorRT build (a build reports no profile: the profile Job measures it)."""
    return played_resnet_build(engine_key)


#: The played profile of the ResNet-50 plan on an H100, as its profile Job would report it.
GPU_PROFILE = RESNET_H100_PROFILE
