"""The simulated node fleet: a realistic heterogeneous GPU cluster, as pure data.

GPU nodes carry what the NVIDIA GPU operator puts on real nodes
(`nvidia.com/gpu.product`, `nvidia.com/gpu.present`, `nvidia.com/gpu.count`,
capacity `nvidia.com/gpu`) and the `nvidia.com/gpu=present:NoSchedule` taint
that platform teams use to keep non-GPU work off them. KWOK plays their
kubelets; it only manages nodes with the `kwok.x-k8s.io/node: fake` annotation,
so a real node (the demo's process-running node) can sit beside them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

KWOK_NODE_ANNOTATION = "kwok.x-k8s.io/node"
GPU_RESOURCE = "nvidia.com/gpu"
GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}


@dataclass(frozen=True)
class NodePool:
    """`count` identical nodes named `<prefix>-<i>`."""

    prefix: str
    count: int
    cpu: str
    memory: str
    gpu_product: str | None = None
    gpus: int = 0
    pods: int = 110


DEFAULT_FLEET: tuple[NodePool, ...] = (
    NodePool("gpu-h100", 4, cpu="64", memory="512Gi", gpu_product="NVIDIA-H100-80GB-HBM3", gpus=8),
    NodePool("gpu-l4", 2, cpu="32", memory="128Gi", gpu_product="NVIDIA-L4", gpus=4),
    NodePool("cpu", 2, cpu="32", memory="128Gi"),
)

#: Beside the node agent's real `local-0` (a CPU node whose pods run as processes): GPU nodes only,
#: so every CPU pod lands on `local-0` and really runs.
REAL_NODE_FLEET: tuple[NodePool, ...] = (
    NodePool("gpu-h100", 1, cpu="64", memory="512Gi", gpu_product="NVIDIA-H100-80GB-HBM3", gpus=8),
    NodePool("gpu-l4", 1, cpu="32", memory="128Gi", gpu_product="NVIDIA-L4", gpus=4),
)


def scaled_fleet(
    *, h100_nodes: int, l4_nodes: int = 2, cpu_nodes: int = 2, pods_per_node: int = 110
) -> tuple[NodePool, ...]:
    """The default fleet with more nodes, e.g. for the 500-service benchmark."""
    return (
        NodePool(
            "gpu-h100",
            h100_nodes,
            cpu="64",
            memory="512Gi",
            gpu_product="NVIDIA-H100-80GB-HBM3",
            gpus=8,
            pods=pods_per_node,
        ),
        NodePool(
            "gpu-l4", l4_nodes, cpu="32", memory="128Gi", gpu_product="NVIDIA-L4", gpus=4, pods=pods_per_node
        ),
        NodePool("cpu", cpu_nodes, cpu="32", memory="128Gi", pods=pods_per_node),
    )


def node_manifest(pool: NodePool, index: int) -> dict[str, Any]:
    """One Node object, with its capacity in `status` (KWOK's node-initialize stage keeps it)."""
    name = f"{pool.prefix}-{index}"
    labels = {
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "type": "kwok",
        "tailpilot.io/node-pool": pool.prefix,
    }
    capacity: dict[str, str] = {"cpu": pool.cpu, "memory": pool.memory, "pods": str(pool.pods)}
    spec: dict[str, Any] = {}
    if pool.gpu_product:
        labels |= {
            "nvidia.com/gpu.product": pool.gpu_product,
            "nvidia.com/gpu.present": "true",
            "nvidia.com/gpu.count": str(pool.gpus),
        }
        capacity[GPU_RESOURCE] = str(pool.gpus)
        spec["taints"] = [dict(GPU_TAINT)]
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels, "annotations": {KWOK_NODE_ANNOTATION: "fake"}},
        "spec": spec,
        "status": {"capacity": capacity, "allocatable": dict(capacity)},
    }


def fleet_manifests(fleet: tuple[NodePool, ...] = DEFAULT_FLEET) -> list[dict[str, Any]]:
    """Every Node of the fleet."""
    return [node_manifest(pool, i) for pool in fleet for i in range(pool.count)]
