"""The simulated GPU fleet schedules like a real one: products, taints and capacity are enforced."""

from __future__ import annotations

import pytest
from kubernetes import client

from tailpilot_e2e.wait import eventually
from tests.cluster.gpu_usage import gpus_in_use

pytestmark = pytest.mark.cluster

GPU_TOLERATION = client.V1Toleration(
    key="nvidia.com/gpu", operator="Equal", value="present", effect="NoSchedule"
)


def gpu_deployment(name: str, *, replicas: int, product: str, tolerate: bool = True) -> client.V1Deployment:
    labels = {"app": name}
    container = client.V1Container(
        name="main",
        image="registry.example/triton:test",
        resources=client.V1ResourceRequirements(limits={"nvidia.com/gpu": "1"}, requests={"cpu": "100m"}),
    )
    pod_spec = client.V1PodSpec(
        containers=[container],
        node_selector={"nvidia.com/gpu.product": product},
        tolerations=[GPU_TOLERATION] if tolerate else None,
    )
    return client.V1Deployment(
        metadata=client.V1ObjectMeta(name=name),
        spec=client.V1DeploymentSpec(
            replicas=replicas,
            selector=client.V1LabelSelector(match_labels=labels),
            template=client.V1PodTemplateSpec(metadata=client.V1ObjectMeta(labels=labels), spec=pod_spec),
        ),
    )


def pods(core: client.CoreV1Api, namespace: str, app: str) -> list[client.V1Pod]:
    return list(core.list_namespaced_pod(namespace, label_selector=f"app={app}").items)


def test_gpu_pods_land_only_on_the_requested_product(k8s, namespace):
    apps, core = client.AppsV1Api(k8s), client.CoreV1Api(k8s)
    apps.create_namespaced_deployment(namespace, gpu_deployment("l4", replicas=3, product="NVIDIA-L4"))

    def all_running():
        found = pods(core, namespace, "l4")
        return found if len(found) == 3 and all(p.status.phase == "Running" for p in found) else None

    running = eventually(all_running, timeout=60, description="3 L4 pods Running")
    nodes = {p.spec.node_name for p in running}
    assert nodes and all(n.startswith("gpu-l4-") for n in nodes), nodes
    for node_name in nodes:
        labels = core.read_node(node_name).metadata.labels
        assert labels["nvidia.com/gpu.product"] == "NVIDIA-L4"


def test_gpu_pod_without_toleration_stays_pending(k8s, namespace):
    apps, core = client.AppsV1Api(k8s), client.CoreV1Api(k8s)
    apps.create_namespaced_deployment(
        namespace, gpu_deployment("untolerated", replicas=1, product="NVIDIA-L4", tolerate=False)
    )

    def failed_scheduling_event():
        events = core.list_namespaced_event(namespace, field_selector="reason=FailedScheduling").items
        return events[0] if events else None

    event = eventually(failed_scheduling_event, timeout=60, description="FailedScheduling event")
    # The 6 GPU nodes are excluded by their taint, the 2 CPU nodes by the product selector.
    assert "6 node(s) had untolerated taint" in event.message, event.message
    assert "2 node(s) didn't match Pod's node affinity/selector" in event.message, event.message
    (pod,) = pods(core, namespace, "untolerated")
    assert pod.status.phase == "Pending" and pod.spec.node_name is None


def test_gpu_capacity_is_real(k8s, namespace):
    """4 H100 nodes x 8 GPUs = 32: of 33 single-GPU replicas exactly one stays Pending."""
    apps, core = client.AppsV1Api(k8s), client.CoreV1Api(k8s)
    eventually(
        lambda: gpus_in_use(core, node_prefix="gpu-h100-") == 0,
        timeout=60,
        description="H100 GPUs free of other tests' pods",
    )
    apps.create_namespaced_deployment(
        namespace, gpu_deployment("h100", replicas=33, product="NVIDIA-H100-80GB-HBM3")
    )

    def settled():
        found = pods(core, namespace, "h100")
        running = [p for p in found if p.status.phase == "Running"]
        pending = [p for p in found if p.status.phase == "Pending" and not p.spec.node_name]
        return (
            (running, pending)
            if len(found) == 33 and len(running) + len(pending) == 33 and len(running) == 32
            else None
        )

    running, pending = eventually(settled, timeout=90, description="32 running + 1 pending")
    assert len(pending) == 1
    per_node: dict[str, int] = {}
    for pod in running:
        per_node[pod.spec.node_name] = per_node.get(pod.spec.node_name, 0) + 1
    assert sorted(per_node.values()) == [8, 8, 8, 8], per_node
