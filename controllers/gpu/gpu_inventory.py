"""How many replicas of a service each GPU product's nodes can hold now: nodes and pods, read every 30 s.

The product choice (`tailpilot.policy.gpu_choice`) must not pick a product whose nodes are full:
its pods would stay Pending. Per node of a product that the service's pods may use (schedulable,
Ready, every NoSchedule/NoExecute taint tolerated), the free GPUs are its allocatable GPUs less
those requested by the pods bound to it, the service's own pods excepted (they move with it);
the replicas it holds are its free GPUs over the GPUs per replica, summed over the nodes.

What this does not see (the scheduler does): other resources than GPUs, quotas, affinity. A
product whose pods then stay Pending is still found by the rollout's progress deadline.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kubernetes.client.exceptions import ApiException

from tailpilot.api import constants as c
from tailpilot.controllers.core.clock import SYSTEM_CLOCK, Clock
from tailpilot.controllers.core.kubeapi import NODES, PODS
from tailpilot.controllers.core.seams import ListsObjects

log = logging.getLogger("tailpilot.gpu_inventory")

#: Seconds a listing of nodes and pods is reused.
INVENTORY_TTL_S = 30.0


def _gpus(quantity: Any) -> int:
    try:
        return int(str(quantity))
    except (TypeError, ValueError):
        return 0


def _container_gpus(container: Mapping[str, Any]) -> int:
    resources = container.get("resources") or {}
    wanted = (resources.get("limits") or {}).get(c.GPU_RESOURCE) or (resources.get("requests") or {}).get(
        c.GPU_RESOURCE
    )
    return _gpus(wanted)


def _requested_gpus(pod: Mapping[str, Any]) -> int:
    """The GPUs the scheduler holds for `pod`, as it counts them (the pod's effective request).

    Init containers run one at a time before the others, so their GPUs are not added to the
    containers': the pod holds the larger of the containers' sum and the largest init container's.
    Sidecars (init containers with `restartPolicy: Always`) keep running, so theirs add to both.
    Summing them all made one tenant's pods look like more GPUs than the node gives them, and a
    product look full to every other tenant.
    """
    spec = pod.get("spec") or {}
    sidecars, init_peak = 0, 0
    for init in spec.get("initContainers") or []:
        if init.get("restartPolicy") == "Always":
            sidecars += _container_gpus(init)
            init_peak = max(init_peak, sidecars)
        else:
            init_peak = max(init_peak, sidecars + _container_gpus(init))
    running = sidecars + sum(_container_gpus(x) for x in spec.get("containers") or [])
    return max(running, init_peak)


def tolerates(taint: Mapping[str, Any], tolerations: Iterable[Mapping[str, Any]]) -> bool:
    """Whether one of `tolerations` tolerates `taint` (Kubernetes' matching rules)."""
    for t in tolerations:
        if t.get("effect") and t.get("effect") != taint.get("effect"):
            continue
        if t.get("operator") == "Exists":
            if not t.get("key") or t.get("key") == taint.get("key"):
                return True
        elif t.get("key") == taint.get("key") and (t.get("value") or "") == (taint.get("value") or ""):
            return True
    return False


def _usable(node: Mapping[str, Any], tolerations: Sequence[Mapping[str, Any]]) -> bool:
    spec, status = node.get("spec") or {}, node.get("status") or {}
    if spec.get("unschedulable"):
        return False
    ready = any(
        cond.get("type") == "Ready" and cond.get("status") == "True"
        for cond in status.get("conditions") or []
    )
    hard = [t for t in spec.get("taints") or [] if t.get("effect") in ("NoSchedule", "NoExecute")]
    return ready and all(tolerates(t, tolerations) for t in hard)


def replicas_available(
    nodes: Sequence[Mapping[str, Any]],
    pods: Sequence[Mapping[str, Any]],
    *,
    product: str,
    gpus_per_replica: int,
    tolerations: Sequence[Mapping[str, Any]],
    service: tuple[str, str],
) -> int:
    """Replicas of `service` (namespace, name) the usable nodes of `product` can hold now (pure)."""
    used: dict[str, int] = {}
    for pod in pods:
        meta, node = pod.get("metadata") or {}, (pod.get("spec") or {}).get("nodeName")
        if not node or (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            continue
        own = (meta.get("namespace"), (meta.get("labels") or {}).get(c.LABEL_ISVC)) == service
        if not own:
            used[node] = used.get(node, 0) + _requested_gpus(pod)
    total = 0
    for node in nodes:
        meta = node.get("metadata") or {}
        if (meta.get("labels") or {}).get(c.GPU_PRODUCT_LABEL) != product or not _usable(node, tolerations):
            continue
        allocatable = _gpus(((node.get("status") or {}).get("allocatable") or {}).get(c.GPU_RESOURCE))
        free = allocatable - used.get(meta.get("name", ""), 0)
        total += max(0, free) // max(1, gpus_per_replica)
    return total


@dataclass
class GpuInventory:
    """The GPU nodes and the pods bound to nodes, listed at most once per `ttl_s`."""

    kube: ListsObjects
    clock: Clock = SYSTEM_CLOCK
    ttl_s: float = INVENTORY_TTL_S
    _at: float | None = None
    _nodes: list[dict[str, Any]] | None = None
    _pods: list[dict[str, Any]] | None = None

    def listing(self) -> tuple[list[dict[str, Any]], list[dict[str, Any]]] | None:
        """(GPU nodes, non-terminated pods), from cache when fresh; None when they cannot be listed.

        An operator without the right to list nodes (or pods in every namespace) still chooses the
        product, without knowing free GPUs: a product whose pods stay Pending then shows in the
        rollout's progress.
        """
        now = self.clock.time()
        if self._at is None or now - self._at >= self.ttl_s:
            self._at = now
            try:
                self._nodes = self.kube.list(NODES, None, label_selector=c.GPU_PRODUCT_LABEL)
                self._pods = self.kube.list(
                    PODS, None, field_selector="status.phase!=Succeeded,status.phase!=Failed"
                )
            except ApiException as error:
                if self._nodes is not None or self._pods is not None or error.status not in (401, 403):
                    log.warning("listing GPU nodes and pods: %s", error.reason)
                else:
                    log.warning("cannot list GPU nodes and pods (%s): free GPUs are not known", error.reason)
                self._nodes = self._pods = None
        if self._nodes is None or self._pods is None:
            return None
        return self._nodes, self._pods

    def replicas_available(
        self,
        *,
        product: str,
        gpus_per_replica: int,
        tolerations: Sequence[Mapping[str, Any]],
        service: tuple[str, str],
    ) -> int | None:
        """`replicas_available` over the current listing; None when it cannot be listed."""
        listing = self.listing()
        if listing is None:
            return None
        nodes, pods = listing
        return replicas_available(
            nodes,
            pods,
            product=product,
            gpus_per_replica=gpus_per_replica,
            tolerations=tolerations,
            service=service,
        )
