"""Kubernetes API clients for tests, bound to the local cluster's kubeconfig."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from kubernetes import client, config

from tailpilot_e2e.wait import eventually


def api_client(kubeconfig: Path) -> client.ApiClient:
    """A client for the kubeconfig's current context (no global config is touched)."""
    configuration = client.Configuration()
    config.load_kube_config(config_file=str(kubeconfig), client_configuration=configuration)
    return client.ApiClient(configuration)


def create_namespace(
    core: client.CoreV1Api, name: str, labels: dict[str, str] | None = None, *, timeout_s: float = 30.0
) -> None:
    """Create a namespace and return once its `default` ServiceAccount exists.

    The controller-manager adds that account asynchronously, and the ServiceAccount admission
    plugin refuses a bare Pod (403 "serviceaccount default not found") until it is there;
    controllers retry, a test that creates a Pod at once would not.
    """
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name, labels=labels)))
    eventually(
        lambda: core.read_namespaced_service_account("default", name),
        timeout=timeout_s,
        description=f"ServiceAccount {name}/default created",
    )


@contextmanager
def temporary_namespace(core: client.CoreV1Api, name: str, *, force_pods: bool = False) -> Iterator[str]:
    """A test namespace (labelled `tailpilot.io/test`), deleted afterwards without waiting for it to go.

    `force_pods` (KWOK nodes only, where a pod is an API object and nothing runs): its pods are
    also deleted at once (grace 0) after the namespace is marked for deletion, so that none can be
    recreated in it. The namespace controller would delete them seconds later, but until then the
    exclusive placement's anti-affinity, which spans namespaces, keeps the next test's GPU pods off
    their nodes.
    """
    create_namespace(core, name, labels={"tailpilot.io/test": "true"})
    try:
        yield name
    finally:
        core.delete_namespace(name, propagation_policy="Background")
        if force_pods:
            core.delete_collection_namespaced_pod(name, grace_period_seconds=0)


def token_client(*, server: str, ca_file: Path, token: str) -> client.ApiClient:
    """A client that authenticates with a bearer token (e.g. a ServiceAccount's)."""
    configuration = client.Configuration()
    configuration.host = server
    configuration.ssl_ca_cert = str(ca_file)
    configuration.api_key = {"authorization": f"Bearer {token}"}
    return client.ApiClient(configuration)


def service_account_kubeconfig(
    api: client.ApiClient,
    *,
    server: str,
    ca_file: Path,
    namespace: str,
    account: str,
    path: Path,
    expiration_seconds: int = 3600,
) -> Path:
    """Write a kubeconfig that authenticates as a ServiceAccount (a TokenRequest token).

    A process run with it has exactly that account's permissions.
    """
    token = (
        client.CoreV1Api(api)
        .create_namespaced_service_account_token(
            account,
            namespace,
            client.AuthenticationV1TokenRequest(
                spec=client.V1TokenRequestSpec(audiences=[], expiration_seconds=expiration_seconds)
            ),
        )
        .status.token
    )
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "local", "cluster": {"server": server, "certificate-authority": str(ca_file)}}],
        "users": [{"name": account, "user": {"token": token}}],
        "contexts": [{"name": "local", "context": {"cluster": "local", "user": account}}],
        "current-context": "local",
    }
    path.write_text(json.dumps(config))
    return path


def is_ready(pod: client.V1Pod) -> bool:
    """Ready condition True and not terminating."""
    conditions = {c.type: c.status for c in pod.status.conditions or []}
    return conditions.get("Ready") == "True" and pod.metadata.deletion_timestamp is None
