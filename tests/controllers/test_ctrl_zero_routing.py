"""Scale to zero in the reconcile pass: the activator's wake taken once; where the Service routes."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from tailpilot.api import constants as c
from tailpilot.api.v1alpha1 import InferenceService, InferenceServiceStatus
from tailpilot.api.wake import wake_requested_at
from tailpilot.controllers.core.admin_key import AdminKey
from tailpilot.controllers.core.kubeapi import ENDPOINT_SLICES, Resource
from tailpilot.controllers.core.settings import OperatorSettings
from tailpilot.controllers.reconcile.deps import PassDeps
from tailpilot.controllers.reconcile.pass_context import ReconcilePass
from tailpilot.controllers.reconcile.zero_routing import ZeroRouting, take_wake
from tests.fakes import FakeClock, UnexpectedKube
from tests.manifests.fixtures import SETTINGS, admin_key, make_isvc

ZERO_AT = datetime(2026, 12, 6, 5, 0, 0, 400000, tzinfo=UTC)


def service(*, wake: str | None, min_replicas: int = 0) -> InferenceService:
    builder = make_isvc("zero").autoscaling(minReplicas=min_replicas)
    obj = builder.obj()
    if wake is not None:
        obj.metadata["annotations"] = {c.ANNOTATION_WAKE_REQUESTED: wake}
    return obj


def a_pass(isvc: InferenceService, status: InferenceServiceStatus) -> ReconcilePass:
    admin = AdminKey(ref=admin_key(isvc.name), value="key")
    return ReconcilePass(body={}, isvc=isvc, admin=admin, status=status, generation=1)


def test_a_wake_newer_than_the_scale_to_zero_asks_for_one_replica_once():
    p = a_pass(
        service(wake="2026-12-06T05:03:00Z"), InferenceServiceStatus(replicas=0, scaled_to_zero_at=ZERO_AT)
    )
    take_wake(p)
    assert (p.status.replicas, p.status.scaled_to_zero_at) == (1, None)
    assert [e.reason for e in p.events] == [c.EVENT_WOKEN]
    # The same annotation, read again by the next pass: nothing more.
    again = a_pass(p.isvc, p.status)
    take_wake(again)
    assert again.status == p.status and again.events == []


def test_a_wake_within_the_second_the_service_went_to_zero_still_wakes_it():
    p = a_pass(
        service(wake="2026-12-06T05:00:00Z"), InferenceServiceStatus(replicas=0, scaled_to_zero_at=ZERO_AT)
    )
    take_wake(p)
    assert p.status.replicas == 1


def test_an_older_or_unreadable_annotation_wakes_nothing():
    for wake in ("2026-12-06T04:59:59Z", "yesterday", None):
        p = a_pass(service(wake=wake), InferenceServiceStatus(replicas=0, scaled_to_zero_at=ZERO_AT))
        take_wake(p)
        assert p.status.replicas == 0 and p.events == []
    assert wake_requested_at(service(wake="yesterday").metadata.get("annotations")) is None


class Cluster(UnexpectedKube):
    """The service Service's slices (the Kubernetes controller's and ours), and the activator's."""

    def __init__(self, service_slices: list[dict[str, Any]], slices: list[dict[str, Any]]) -> None:
        self.service_slices, self.slices, self.selectors = service_slices, slices, []

    def list(self, resource: Resource, namespace: str | None, /, **selectors: str) -> list[dict[str, Any]]:
        assert resource is ENDPOINT_SLICES
        self.selectors.append(selectors["label_selector"])
        if namespace == "ml":
            assert selectors["label_selector"] == "kubernetes.io/service-name=zero"
            return self.service_slices
        assert namespace == "tailpilot-system"
        return self.slices


def pod_slice(*, ready: bool) -> dict[str, Any]:
    """A slice of the service's Service as the EndpointSlice controller writes it: one pod."""
    return {
        "metadata": {"labels": {"endpointslice.kubernetes.io/managed-by": "endpointslice-controller.k8s.io"}},
        "endpoints": [{"addresses": ["10.2.0.7"], "conditions": {"ready": ready}}],
    }


#: The operator's own slice of the service's Service, to the activator: never a pod.
ROUTED_SLICE = {
    "metadata": {"labels": {"endpointslice.kubernetes.io/managed-by": "operator.tailpilot.io"}},
    "endpoints": [{"addresses": ["10.1.0.5"], "conditions": {"ready": True}}],
}


ACTIVATOR_SLICE = {
    "ports": [{"name": "http", "port": 8000}, {"name": "grpc", "port": 8001}],
    "endpoints": [{"addresses": ["10.1.0.5"], "conditions": {"ready": True}}],
}


def routing(kube: Cluster, *, activator: bool = True) -> ZeroRouting:
    settings = OperatorSettings(
        manifests=SETTINGS,
        activator_service=("tailpilot-system", "tailpilot-activator") if activator else None,
    )
    return ZeroRouting(PassDeps(kube=kube, settings=settings, clock=FakeClock()))  # type: ignore[arg-type]


def test_no_ready_pod_in_the_services_slices_routes_to_the_activators_ready_pods():
    # A pod not ready yet, and the operator's own slice to the activator: no pod to send clients to.
    kube = Cluster([pod_slice(ready=False), ROUTED_SLICE], slices=[ACTIVATOR_SLICE])
    routed = routing(kube).routing(service(wake=None), replicas=1)
    assert routed is not None and routed.scale_to_zero and routed.route_to is not None
    assert routed.route_to.addresses == ("10.1.0.5",)
    assert kube.selectors == [
        "kubernetes.io/service-name=zero",
        "kubernetes.io/service-name=tailpilot-activator",
    ]


def test_a_ready_pod_in_the_services_slices_routes_to_the_pods_and_going_to_zero_to_the_activator():
    kube = Cluster([pod_slice(ready=True), ROUTED_SLICE], slices=[ACTIVATOR_SLICE])
    serving = routing(kube).routing(service(wake=None), replicas=1)
    assert serving is not None and serving.scale_to_zero and serving.route_to is None
    going = routing(kube).routing(service(wake=None), replicas=0)
    assert going is not None and going.route_to is not None


def test_without_zero_or_without_an_activator_nothing_is_read():
    nothing = UnexpectedKube()
    one = routing(nothing, activator=True).routing(service(wake=None, min_replicas=1), replicas=1)  # type: ignore[arg-type]
    assert one is not None and not one.scale_to_zero and one.route_to is None
    assert routing(nothing, activator=False).routing(service(wake=None), replicas=0) is None  # type: ignore[arg-type]
