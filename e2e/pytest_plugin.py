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
from contextlib import contextmanager

import pytest
from kubernetes import client

from tailpilot_e2e.cluster import LocalCluster
from tailpilot_e2e.kube import api_client, temporary_namespace


@contextmanager
def running(cluster: LocalCluster) -> Iterator[LocalCluster]:
    """The cluster up (started here unless it was running); stopped afterwards only if started here."""
    started = cluster.up()
    try:
        yield cluster
    finally:
        if started and not os.environ.get("TAILPILOT_KEEP_CLUSTER"):
            cluster.down()


@contextmanager
def admin_client(cluster: LocalCluster) -> Iterator[client.ApiClient]:
    """An admin API client of the cluster, closed afterwards."""
    api = api_client(cluster.paths.kubeconfig)
    try:
        yield api
    finally:
        api.close()


@contextmanager
def fresh_namespace(
    request: pytest.FixtureRequest, api: client.ApiClient, *, force_pods: bool = False
) -> Iterator[str]:
    """A namespace named after the test, deleted (not awaited) afterwards; the test must be marked cluster.

    `force_pods`: its pods are deleted at once with it (`temporary_namespace`; KWOK clusters only).
    """
    if request.node.get_closest_marker("cluster") is None:
        raise pytest.UsageError(f"{request.node.nodeid} uses the cluster: mark it @pytest.mark.cluster")
    base = re.sub(r"[^a-z0-9-]", "-", request.node.name.lower())[:40].strip("-")
    name = f"{base}-{uuid.uuid4().hex[:6]}"
    with temporary_namespace(client.CoreV1Api(api), name, force_pods=force_pods):
        yield name


@pytest.fixture(scope="session")
def local_cluster() -> Iterator[LocalCluster]:
    """The running local cluster (started for the session if it was not running)."""
    with running(LocalCluster()) as cluster:
        yield cluster


@pytest.fixture(scope="session")
def k8s(local_cluster: LocalCluster) -> Iterator[client.ApiClient]:
    """An admin API client for the local cluster."""
    with admin_client(local_cluster) as api:
        yield api


@pytest.fixture
def namespace(request: pytest.FixtureRequest, k8s: client.ApiClient) -> Iterator[str]:
    """A fresh namespace named after the test on the KWOK cluster; deleted (not awaited) with its pods."""
    with fresh_namespace(request, k8s, force_pods=True) as name:
        yield name
