"""Scale to zero in the reconcile pass: a request at zero wakes the service; the Service's routing.

- **The wake.** The activator annotates a service at zero when a request arrives
  (`tailpilot.io/wake-requested-at`, RFC 3339). A pass that finds the annotation newer than
  `status.scaledToZeroAt` asks for one replica at once (`status.replicas`), clears the time and says
  so in an Event; the autoscaler sizes the service from its traffic once that replica serves.
  An annotation older than the last scale to zero is a wake already taken.
- **The routing.** With an activator configured (`--activator-service`), a service with
  `minReplicas: 0` has its `<name>-pods` Service, and while it has no ready replica (or is going to
  zero) the EndpointSlice that routes its Service to the activator's ready pods
  (`tailpilot.manifests.activator_routing`). A pod counts as ready once the Service's own
  EndpointSlices (the Kubernetes controller's) list it, so the slice goes as soon as clients have
  a pod to go to, and never before.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tailpilot.api import constants as c
from tailpilot.api.v1alpha1 import InferenceService
from tailpilot.api.wake import wake_requested_at
from tailpilot.controllers.core.events import EventRecord
from tailpilot.controllers.core.kubeapi import ENDPOINT_SLICES
from tailpilot.controllers.reconcile.deps import PassDeps
from tailpilot.controllers.reconcile.pass_context import ReconcilePass
from tailpilot.manifests.activator_routing import (
    LABEL_SERVICE_NAME,
    LABEL_SLICE_MANAGED_BY,
    ActivatorRouting,
    ready_addresses,
    ready_endpoints,
    routes_to_activator,
)


def take_wake(p: ReconcilePass) -> None:
    """A wake newer than the last scale to zero: one replica asked for now, and an Event."""
    isvc, status = p.isvc, p.status
    zero_at, asked = status.scaled_to_zero_at, wake_requested_at(isvc.metadata.get("annotations"))
    if zero_at is None or asked is None or asked < zero_at.replace(microsecond=0):
        return
    replicas = max(1, isvc.spec.autoscaling.min_replicas)
    p.status = status.model_copy(update={"replicas": replicas, "scaled_to_zero_at": None})
    p.events.append(
        EventRecord(
            "Normal",
            c.EVENT_WOKEN,
            f"a request arrived at zero replicas ({asked.isoformat()}): {replicas} replica asked for; the "
            "activator holds the requests until it is ready",
        )
    )


class ZeroRouting:
    """The routing children's inputs: whether the service may go to zero, and where its Service points."""

    def __init__(self, deps: PassDeps) -> None:
        self.deps = deps

    def routing(self, isvc: InferenceService, *, replicas: int) -> ActivatorRouting | None:
        """None without an activator; else whether to route the Service to it now, and its endpoints."""
        activator = self.deps.settings.activator_service
        if activator is None:
            return None
        if isvc.spec.autoscaling.min_replicas != 0:
            return ActivatorRouting(scale_to_zero=False)
        if not routes_to_activator(replicas=replicas, ready_replicas=self._ready_pod_endpoints(isvc)):
            return ActivatorRouting(scale_to_zero=True)
        namespace, name = activator
        slices = self.deps.kube.list(
            ENDPOINT_SLICES, namespace, label_selector=f"{LABEL_SERVICE_NAME}={name}"
        )
        return ActivatorRouting(scale_to_zero=True, route_to=ready_endpoints(slices))

    def _ready_pod_endpoints(self, isvc: InferenceService) -> int:
        """The ready pod endpoints of the service's Service: in the Kubernetes controller's slices.

        Not the Deployment's ready replicas: a pod counts there before the EndpointSlice controller
        has put it in the Service, and routing away from the activator in between would leave
        clients with no endpoint at all. The slices' changes wake the service (`handlers`).
        """
        slices = self.deps.kube.list(
            ENDPOINT_SLICES, isvc.namespace, label_selector=f"{LABEL_SERVICE_NAME}={isvc.name}"
        )
        theirs = [s for s in slices if _labels(s).get(LABEL_SLICE_MANAGED_BY) != c.ENDPOINT_SLICE_MANAGER]
        return sum(len(ready_addresses(s)) for s in theirs)


def _labels(obj: Mapping[str, Any]) -> Mapping[str, str]:
    return (obj.get("metadata") or {}).get("labels") or {}
