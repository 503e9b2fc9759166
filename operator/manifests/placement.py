"""Where pods go: GPU product pinning, the GPU taint toleration, exclusive placement, user extras.

GPU nodes carry `nvidia.com/gpu.product=<product>` (GPU feature discovery)
and usually the taint `nvidia.com/gpu=present:NoSchedule`. A TensorRT plan
only runs on the product it was built for, so both the build Job and the
serving pods select that product. Exclusive placement is a required pod
anti-affinity against pods of *other* InferenceServices per node: in the
service's namespace those of another name, in every other namespace all of
them; required anti-affinity is symmetric in the scheduler, so other services'
pods also stay off our nodes.

`ServingTarget` says where a model's instances run (the CPU, or GPUs of one
product). It is derived here only: from the InferenceService spec (model
config, live reload, build request) and from a `BuildRequest.target` (the
build Job, which sees only the request).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from tailpilot.api import constants as c
from tailpilot.api.v1alpha1 import Device, InferenceService


@dataclass(frozen=True)
class ServingTarget:
    """Where a model's instances run: the CPU, or GPUs of one product (its node label value)."""

    device: Literal["cpu", "gpu"]
    #: The GPU product the engine is bound to (TensorRT plans run only there); None on the CPU.
    gpu_product: str | None = None
    #: Whole GPUs each replica gets (`spec.runtime.gpu.count`); the device plugin exposes them to the
    #: container as devices 0..count-1, which the model config's instance group lists.
    gpu_count: int = 1

    @classmethod
    def from_service(cls, isvc: InferenceService) -> ServingTarget:
        """The spec's placement: `spec.runtime.device`, and `spec.runtime.gpu` product and count on a GPU."""
        runtime = isvc.spec.runtime
        if runtime.device is not Device.GPU:
            return cls(device="cpu")
        if runtime.gpu is None:
            return cls(device="gpu")
        return cls(device="gpu", gpu_product=runtime.gpu.product, gpu_count=runtime.gpu.count)

    @classmethod
    def from_build_target(cls, target: str) -> ServingTarget:
        """The placement a `BuildRequest.target` names: "cpu", or the GPU product to build for (one GPU)."""
        if target == "cpu":
            return cls(device="cpu")
        return cls(device="gpu", gpu_product=target)

    @property
    def build_target(self) -> str:
        """The `BuildRequest.target` of this placement: the GPU product, or "cpu"."""
        return self.gpu_product or "cpu"


def gpu_toleration() -> dict[str, Any]:
    """Tolerate the GPU taint whatever its value (clouds differ: "present", "true")."""
    return {"key": c.GPU_TAINT_KEY, "operator": "Exists", "effect": c.GPU_TAINT_EFFECT}


def node_selector(*, gpu_product: str | None, user: Mapping[str, str]) -> dict[str, str]:
    """User selector plus the GPU product; the product wins if the user set the same key."""
    merged = dict(user)
    if gpu_product:
        merged[c.GPU_PRODUCT_LABEL] = gpu_product
    return merged


def tolerations(*, gpu: bool, user: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """User tolerations plus the GPU taint toleration (once)."""
    merged = [dict(t) for t in user]
    if gpu and gpu_toleration() not in merged:
        merged.append(gpu_toleration())
    return merged


def exclusive_anti_affinity_terms(isvc_name: str, namespace: str) -> list[dict[str, Any]]:
    """Required anti-affinity terms: no pod of another InferenceService on the node, in any namespace.

    Two terms, because a service is its namespace and its name: in its own namespace every other
    service's pods (the label's value is not this name), in every other namespace every service's
    pods whatever their name. One term keyed on the name alone let a service of the same name in
    another namespace share the node. Pods no InferenceService owns (no label) are not repelled:
    a term that matched them would match the node's DaemonSet pods too and place nothing; keeping
    other workloads off GPU nodes is a taint's job (docs/security.md).
    """
    return [
        {
            "labelSelector": {
                "matchExpressions": [
                    {"key": c.LABEL_ISVC, "operator": "Exists"},
                    {"key": c.LABEL_ISVC, "operator": "NotIn", "values": [isvc_name]},
                ]
            },
            "namespaces": [namespace],
            "topologyKey": c.HOSTNAME_LABEL,
        },
        {
            "labelSelector": {"matchExpressions": [{"key": c.LABEL_ISVC, "operator": "Exists"}]},
            "namespaceSelector": {
                "matchExpressions": [
                    {"key": c.NAMESPACE_NAME_LABEL, "operator": "NotIn", "values": [namespace]}
                ]
            },
            "topologyKey": c.HOSTNAME_LABEL,
        },
    ]


def affinity(
    *, isvc_name: str, namespace: str, exclusive: bool, user: Mapping[str, Any] | None
) -> dict[str, Any] | None:
    """User affinity with the exclusive anti-affinity terms appended; None when both are empty."""
    merged: dict[str, Any] = copy.deepcopy(dict(user or {}))
    if exclusive:
        anti = merged.setdefault("podAntiAffinity", {})
        terms = anti.setdefault("requiredDuringSchedulingIgnoredDuringExecution", [])
        terms.extend(exclusive_anti_affinity_terms(isvc_name, namespace))
    return merged or None
