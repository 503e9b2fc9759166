"""Fixtures for tests on the real-pods cluster: its CPU node `local-0` runs pods as local processes.

That cluster runs beside the session's KWOK cluster (own state dir, ports +300), so the
simulated fleet's tests and these do not share nodes.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from kubernetes import client

from tailpilot_e2e.cluster import LocalCluster, real_node_cluster
from tailpilot_e2e.operator_harness import OperatorProcess, install_crds
from tailpilot_e2e.pytest_plugin import admin_client, fresh_namespace, running
from tailpilot_e2e.real_pods import MonitoredOperator, start_monitored_operator


@pytest.fixture(scope="package")
def real_cluster() -> Iterator[LocalCluster]:
    """The real-pods cluster (started for these tests unless it already runs)."""
    with running(real_node_cluster()) as cluster:
        yield cluster


@pytest.fixture(scope="package")
def real_api(real_cluster: LocalCluster) -> Iterator[client.ApiClient]:
    """An admin client of the real-pods cluster."""
    with admin_client(real_cluster) as api:
        yield api


@pytest.fixture
def real_namespace(request: pytest.FixtureRequest, real_api: client.ApiClient) -> Iterator[str]:
    """A fresh namespace on the real-pods cluster; its pods (processes) go with it."""
    with fresh_namespace(request, real_api) as name:
        yield name


@pytest.fixture
def operator(real_cluster: LocalCluster, real_namespace: str) -> Iterator[OperatorProcess]:
    """The operator (a local process) for the namespace, at its defaults, with the CRDs installed."""
    install_crds(real_cluster)
    with OperatorProcess(
        real_cluster, namespace=real_namespace, log_dir=real_cluster.paths.root / "logs"
    ) as process:
        yield process


@pytest.fixture
def monitored_operator(
    real_cluster: LocalCluster, real_namespace: str, tmp_path: Path
) -> Iterator[Callable[[float], MonitoredOperator]]:
    """Starts Prometheus, Alertmanager and the operator for the namespace, at a given control period."""
    with contextlib.ExitStack() as stack:

        def start(control_period_s: float) -> MonitoredOperator:
            return start_monitored_operator(
                stack,
                real_cluster,
                namespace=real_namespace,
                work_dir=tmp_path / "monitoring",
                control_period_s=control_period_s,
            )

        yield start
