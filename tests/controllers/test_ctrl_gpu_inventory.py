"""Free GPUs per product, from nodes and the pods bound to them; GPU prices from flags and the table."""

from __future__ import annotations

import pytest

from tailpilot.controllers.core.settings import parse_gpu_prices
from tailpilot.controllers.gpu.gpu_inventory import replicas_available, tolerates

GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
SERVICE = ("ml", "resnet")


def node(name, product, gpus, *, ready=True, unschedulable=False, taints=()):
    return {
        "metadata": {"name": name, "labels": {"nvidia.com/gpu.product": product}},
        "spec": {"unschedulable": unschedulable, "taints": list(taints)},
        "status": {
            "allocatable": {"nvidia.com/gpu": str(gpus)},
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }


def pod(node_name, gpus, *, namespace="other", service=None, phase="Running"):
    labels = {"tailpilot.io/inferenceservice": service} if service else {}
    return {
        "metadata": {"namespace": namespace, "labels": labels},
        "spec": {
            "nodeName": node_name,
            "containers": [{"resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}],
        },
        "status": {"phase": phase},
    }


def available(nodes, pods, *, product="NVIDIA-L4", per_replica=1, tolerations=(GPU_TOLERATION,)):
    return replicas_available(
        nodes, pods, product=product, gpus_per_replica=per_replica, tolerations=tolerations, service=SERVICE
    )


def test_free_gpus_are_allocatable_less_what_other_pods_request_per_node():
    nodes = [node("a", "NVIDIA-L4", 4), node("b", "NVIDIA-L4", 4), node("h", "NVIDIA-H100-80GB-HBM3", 8)]
    pods = [pod("a", 3), pod("b", 1), pod("h", 8)]
    assert available(nodes, pods) == 1 + 3
    # Two GPUs per replica: per node, not summed across nodes (1 free on a, 3 on b: one replica).
    assert available(nodes, pods, per_replica=2) == 1
    assert available(nodes, pods, product="NVIDIA-H100-80GB-HBM3") == 0


def test_the_services_own_pods_and_finished_pods_do_not_count():
    nodes = [node("a", "NVIDIA-L4", 4)]
    pods = [pod("a", 2, namespace="ml", service="resnet"), pod("a", 2, phase="Succeeded"), pod(None, 4)]
    assert available(nodes, pods) == 4


def test_cordoned_not_ready_and_untolerated_nodes_hold_nothing():
    nodes = [
        node("cordoned", "NVIDIA-L4", 4, unschedulable=True),
        node("down", "NVIDIA-L4", 4, ready=False),
        node("reserved", "NVIDIA-L4", 4, taints=[{"key": "team", "value": "a", "effect": "NoSchedule"}]),
        node(
            "gpu-tainted",
            "NVIDIA-L4",
            4,
            taints=[{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}],
        ),
    ]
    assert available(nodes, []) == 4  # only the node whose taint the pods tolerate
    team = {"key": "team", "operator": "Equal", "value": "a", "effect": "NoSchedule"}
    assert available(nodes, [], tolerations=(GPU_TOLERATION, team)) == 8


def test_toleration_matching():
    taint = {"key": "k", "value": "v", "effect": "NoSchedule"}
    assert tolerates(taint, [{"operator": "Exists"}])
    assert tolerates(taint, [{"key": "k", "operator": "Exists"}])
    assert tolerates(taint, [{"key": "k", "value": "v", "effect": "NoSchedule"}])
    assert not tolerates(taint, [{"key": "k", "value": "w"}])
    assert not tolerates(taint, [{"key": "k", "operator": "Exists", "effect": "NoExecute"}])


def test_gpu_prices_from_the_table_with_flags_over_it():
    prices = parse_gpu_prices('{"NVIDIA-L4": 0.8, "NVIDIA-H100-80GB-HBM3": "4"}', ["NVIDIA-L4=0.7"])
    assert prices == {"NVIDIA-L4": 0.7, "NVIDIA-H100-80GB-HBM3": 4.0}
    assert parse_gpu_prices("", []) == {}


@pytest.mark.parametrize(
    ("table", "flags", "message"),
    [
        ("[1]", [], "must be a JSON object"),
        ("", ["NVIDIA-L4"], "takes PRODUCT=PRICE"),
        ("", ["NVIDIA-L4=cheap"], "is not a number"),
        ('{"NVIDIA-L4": 0}', [], "must be above zero"),
    ],
)
def test_bad_gpu_prices_are_refused_with_the_reason(table, flags, message):
    with pytest.raises(ValueError, match=message):
        parse_gpu_prices(table, flags)


SIDECAR = {"restartPolicy": "Always"}


def test_init_containers_gpus_are_not_added_to_the_containers_but_sidecars_are():
    def with_init(gpus, inits):
        p = pod("l4-a", gpus)
        p["spec"]["initContainers"] = [
            {
                "resources": {"limits": {"nvidia.com/gpu": str(n)}},
                **({"restartPolicy": "Always"} if side else {}),
            }
            for n, side in inits
        ]
        return p

    nodes = [node("l4-a", "NVIDIA-L4", 8)]
    # A pod of 2 GPUs whose init container used 2 before it holds 2, not 4: 6 left.
    assert available(nodes, [with_init(2, [(2, False)])]) == 6
    # An init container larger than the containers sets the pod's hold: 5 left.
    assert available(nodes, [with_init(1, [(3, False)])]) == 5
    # A sidecar keeps running beside the containers: 1 + 2 = 3 held, 5 left.
    assert available(nodes, [with_init(2, [(1, True)])]) == 5
    # A plain init after a sidecar runs beside it: max(1 + 4, 1 + 2) = 5 held, 3 left.
    assert available(nodes, [with_init(2, [(1, True), (4, False)])]) == 3
