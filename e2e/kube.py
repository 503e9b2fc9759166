"""Kubernetes API clients for tests, bound to the local cluster's kubeconfig."""

from __future__ import annotations

from pathlib import Path

from kubernetes import client, config


def api_client(kubeconfig: Path) -> client.ApiClient:
    """A client for the kubeconfig's current context (no global config is touched)."""
    configuration = client.Configuration()
    config.load_kube_config(config_file=str(kubeconfig), client_configuration=configuration)
    return client.ApiClient(configuration)


def token_client(*, server: str, ca_file: Path, token: str) -> client.ApiClient:
    """A client that authenticates with a bearer token (e.g. a ServiceAccount's)."""
    configuration = client.Configuration()
    configuration.host = server
    configuration.ssl_ca_cert = str(ca_file)
    configuration.api_key = {"authorization": f"Bearer {token}"}
    return client.ApiClient(configuration)
