"""Fixtures for tests on the real-pods cluster: its CPU node `local-0` runs pods as local processes.

That cluster runs beside the session's KWOK cluster (own state dir, ports +300), so the
simulated fleet's tests and these do not share nodes.
"""

from __future__ import annotations

import os
import re
import uuid
from collections.abc import Iterator

import pytest
from kubernetes import client

from tailpilot_e2e.cluster import LocalCluster, real_node_cluster
from tailpilot_e2e.kube import api_client


@pytest.fixture(scope="package")
def real_cluster() -> Iterator[LocalCluster]:
    """The real-pods cluster (started for these tests unless it already runs)."""
    cluster = real_node_cluster()
    started = cluster.up()
    yield cluster
    if started and not os.environ.get("TAILPILOT_KEEP_CLUSTER"):
        cluster.down()


@pytest.fixture(scope="package")
def real_api(real_cluster: LocalCluster) -> Iterator[client.ApiClient]:
    """An admin client of the real-pods cluster."""
    api = api_client(real_cluster.paths.kubeconfig)
    yield api
    api.close()


@pytest.fixture
def real_namespace(request: pytest.FixtureRequest, real_api: client.ApiClient) -> Iterator[str]:
    """A fresh namespace on the real-pods cluster; its pods (processes) go with it."""
    base = re.sub(r"[^a-z0-9-]", "-", request.node.name.lower())[:40].strip("-")
    name = f"{base}-{uuid.uuid4().hex[:6]}"
    core = client.CoreV1Api(real_api)
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    yield name
    core.delete_namespace(name, propagation_policy="Background")
