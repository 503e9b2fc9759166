"""Fixtures for tests on the real-pods cluster: its CPU node `local-0` runs pods as local processes.

That cluster runs beside the session's KWOK cluster (own state dir, ports +300), so the
simulated fleet's tests and these do not share nodes.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kubernetes import client

from tailpilot_e2e.cluster import LocalCluster, real_node_cluster
from tailpilot_e2e.pytest_plugin import admin_client, fresh_namespace, running


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
