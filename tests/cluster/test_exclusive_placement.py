"""Exclusive GPU placement against the real scheduler: a service of the same name in another namespace
is another service, and stays off the node.

Two L4 nodes of 4 GPUs: a filler pod (no InferenceService's) takes one node whole, service `svc` of
namespace A one GPU of the other. Service `svc` of namespace B then has only A's node left: with
exclusive placement it must stay Pending, refused by the anti-affinity, not share A's node.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from kubernetes import client

from tailpilot.api import constants as c
from tailpilot.manifests.placement import affinity, gpu_toleration
from tailpilot_e2e.kube import temporary_namespace
from tailpilot_e2e.wait import eventually
from tests.cluster.gpu_usage import gpus_in_use

pytestmark = pytest.mark.cluster

L4 = "NVIDIA-L4"


def gpu_pod(
    name: str, *, gpus: int, labels: dict[str, str], pod_affinity: dict[str, Any] | None
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "containers": [
            {
                "name": "main",
                "image": "registry.example/triton:test",
                "resources": {"limits": {c.GPU_RESOURCE: str(gpus)}, "requests": {"cpu": "100m"}},
            }
        ],
        "nodeSelector": {c.GPU_PRODUCT_LABEL: L4},
        "tolerations": [gpu_toleration()],
    }
    if pod_affinity:
        spec["affinity"] = pod_affinity
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": labels}, "spec": spec}


def service_pod(namespace: str) -> dict[str, Any]:
    terms = affinity(isvc_name="svc", namespace=namespace, exclusive=True, user=None)
    return gpu_pod("svc-0", gpus=1, labels={c.LABEL_ISVC: "svc"}, pod_affinity=terms)


def l4_gpus_in_use(core: client.CoreV1Api) -> int:
    return gpus_in_use(core, node_prefix="gpu-l4-")


def node_of(core: client.CoreV1Api, namespace: str, name: str) -> str | None:
    pod = core.read_namespaced_pod(name, namespace)
    return pod.spec.node_name if pod.status.phase == "Running" else None


def test_a_same_named_service_of_another_namespace_does_not_share_the_node(k8s, namespace):
    core = client.CoreV1Api(k8s)
    eventually(lambda: l4_gpus_in_use(core) == 0, timeout=90, description="L4 GPUs free of other tests' pods")
    with temporary_namespace(core, f"exclusive-b-{uuid.uuid4().hex[:6]}") as other:
        try:
            core.create_namespaced_pod(namespace, gpu_pod("filler", gpus=4, labels={}, pod_affinity=None))
            filled = eventually(
                lambda: node_of(core, namespace, "filler"), timeout=60, description="filler Running"
            )
            core.create_namespaced_pod(namespace, service_pod(namespace))
            served = eventually(
                lambda: node_of(core, namespace, "svc-0"), timeout=60, description="A's svc Running"
            )
            assert served != filled

            core.create_namespaced_pod(other, service_pod(other))

            def refused() -> str | None:
                pod = core.read_namespaced_pod("svc-0", other)
                assert not pod.spec.node_name, (
                    f"B's svc was placed on {pod.spec.node_name} (A's is on {served})"
                )
                scheduled = next((x for x in pod.status.conditions or [] if x.type == "PodScheduled"), None)
                if scheduled and scheduled.status == "False" and scheduled.reason == "Unschedulable":
                    return str(scheduled.message)
                return None

            message = eventually(refused, timeout=60, description="B's svc refused by the scheduler")
            assert "anti-affinity" in message, message
        finally:
            for ns in (namespace, other):
                core.delete_collection_namespaced_pod(ns, grace_period_seconds=0)
            eventually(lambda: l4_gpus_in_use(core) == 0, timeout=90, description="L4 GPUs freed")
