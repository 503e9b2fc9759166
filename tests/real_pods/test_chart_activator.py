"""The Helm chart's activator Deployment on local-0: two pods Ready as the chart's ServiceAccount.

`helm install` renders the activator's Deployment (2 replicas, the operator's image running `python
-P -m tailpilot.activator`); the node agent runs its pods from this checkout's interpreter (the image
table maps the image's `python`), each bound to its pod IP (the chart's `--bind-address=0.0.0.0`,
which the agent turns into the pod IP, as a pod's own network namespace would make it), with the
ServiceAccount token at the in-cluster path. A pod is Ready only once its watches of Services and
EndpointSlices, through the real API server with the chart's ClusterRole, delivered their first
list (`/readyz`). Then: a request for a service TailPilot does not serve is answered 404 with the
documented message; and with one pod deleted, the other keeps serving (`/readyz` 200 on every
check) while the Deployment brings a second pod back.

The release runs no operator (`replicaCount: 0`): this test is the activator's, and the operator's
own run from the chart is `test_chart_operator.py`.
"""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import pytest
from kubernetes import client

from tailpilot_e2e.cluster import LocalCluster
from tailpilot_e2e.wait import eventually

from .test_chart_operator import installed_chart

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

SELECTOR = "app.kubernetes.io/component=activator"
#: The chart's values here: the operator's image (which the node agent maps), no operator pods.
VALUES = {"image": {"repository": "ghcr.io/tailpilot/tailpilot-operator"}, "replicaCount": 0}


def ready_activators(core: client.CoreV1Api, namespace: str) -> list[client.V1Pod]:
    """The activator pods Ready by their probes and not being deleted."""
    pods = core.list_namespaced_pod(namespace, label_selector=SELECTOR).items
    return [
        pod
        for pod in pods
        if pod.metadata.deletion_timestamp is None
        and {c.type: c.status for c in pod.status.conditions or []}.get("Ready") == "True"
    ]


def two_ready(core: client.CoreV1Api, namespace: str) -> list[client.V1Pod] | None:
    """Both activator pods, once both are Ready."""
    pods = ready_activators(core, namespace)
    return pods if len(pods) == 2 else None


def readyz(pod: client.V1Pod) -> int | str:
    """The status of the pod's `/readyz` (the metrics port, 9090), or the error that stood for it."""
    try:
        return httpx.get(f"http://{pod.status.pod_ip}:9090/readyz", timeout=5, trust_env=False).status_code
    except httpx.HTTPError as error:
        return repr(error)


def infer_unknown(pod: client.V1Pod, namespace: str) -> httpx.Response:
    """A KServe v2 request to the pod's HTTP port for a service that does not exist."""
    return httpx.post(
        f"http://{pod.status.pod_ip}:8000/v2/models/m/infer",
        headers={"Host": f"absent.{namespace}.svc.cluster.local"},
        json={"inputs": []},
        timeout=5,
        trust_env=False,
    )


def test_the_charts_activator_pods_serve_and_one_survives_the_loss_of_the_other(
    real_cluster: LocalCluster, real_api: client.ApiClient, real_namespace: str, tmp_path: Path
) -> None:
    core = client.CoreV1Api(real_api)
    with installed_chart(real_cluster, tmp_path, VALUES) as release:
        namespace = f"{release}-system"
        first, second = eventually(
            lambda: two_ready(core, namespace), timeout=90, description="two activator pods Ready"
        )
        for pod in (first, second):
            assert pod.spec.node_name == "local-0"
            assert pod.spec.service_account_name == f"{release}-tailpilot-activator"

        # A service TailPilot does not serve: 404, with the documented message, from either pod.
        host = f"absent.{real_namespace}.svc.cluster.local"
        for pod in (first, second):
            answer = infer_unknown(pod, real_namespace)
            assert answer.status_code == 404, answer.text
            assert answer.json() == {
                "error": f"no TailPilot InferenceService {real_namespace}/absent (host '{host}')"
            }

        # One pod goes; the other serves on while the Deployment replaces it.
        core.delete_namespaced_pod(first.metadata.name, namespace)
        survivor_readyz: list[int | str] = []

        def replaced() -> list[client.V1Pod] | None:
            survivor_readyz.append(readyz(second))
            pods = two_ready(core, namespace)
            if pods is None or first.metadata.uid in {p.metadata.uid for p in pods}:
                return None
            return pods

        started = time.monotonic()
        pods = eventually(replaced, timeout=60, interval=0.5, description="a new activator pod Ready")
        assert survivor_readyz and set(survivor_readyz) == {200}, survivor_readyz
        (new,) = [p for p in pods if p.metadata.uid != second.metadata.uid]
        assert infer_unknown(new, real_namespace).status_code == 404
        print(f"a new activator pod Ready {time.monotonic() - started:.1f} s after the delete")
