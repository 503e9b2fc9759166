"""pytest fixtures for tests against the local cluster.

`local_cluster` (session) brings the cluster up, or reuses one that is already
running (then leaves it running); `namespace` gives each test its own
namespace and deletes it afterwards. Tests that use them must carry
`@pytest.mark.cluster`.
"""

from __future__ import annotations

import os
import re
import uuid
from collections.abc import Iterator

import pytest
from kubernetes import client

from tailpilot_e2e.cluster import LocalCluster
from tailpilot_e2e.kube import api_client


@pytest.fixture(scope="session")
def local_cluster() -> Iterator[LocalCluster]:
    """The running local cluster (started for the session if it was not running)."""
    cluster = LocalCluster()
    started = cluster.up()
    yield cluster
    if started and not os.environ.get("TAILPILOT_KEEP_CLUSTER"):
        cluster.down()


@pytest.fixture(scope="session")
def k8s(local_cluster: LocalCluster) -> Iterator[client.ApiClient]:
    """An admin API client for the local cluster."""
    api = api_client(local_cluster.paths.kubeconfig)
    yield api
    api.close()


@pytest.fixture
def namespace(request: pytest.FixtureRequest, k8s: client.ApiClient) -> Iterator[str]:
    """A fresh namespace named after the test; deleted (not awaited) afterwards."""
    if request.node.get_closest_marker("cluster") is None:
        raise pytest.UsageError(f"{request.node.nodeid} uses the cluster: mark it @pytest.mark.cluster")
    base = re.sub(r"[^a-z0-9-]", "-", request.node.name.lower())[:40].strip("-")
    name = f"{base}-{uuid.uuid4().hex[:6]}"
    core = client.CoreV1Api(k8s)
    core.create_namespace(
        client.V1Namespace(metadata=client.V1ObjectMeta(name=name, labels={"tailpilot.io/test": "true"}))
    )
    yield name
    core.delete_namespace(name, propagation_policy="Background")
