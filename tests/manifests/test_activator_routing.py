"""Routing a service at zero replicas to the activator (`tailpilot.manifests.activator_routing`)."""

from __future__ import annotations

from tailpilot.api import constants as c
from tailpilot.manifests.activator_routing import (
    ActivatorEndpoints,
    ActivatorRouting,
    activator_slice,
    pods_service,
    ready_endpoints,
    routes_to_activator,
)
from tailpilot.manifests.children import ClusterCapabilities, plan_children
from tailpilot.manifests.meta import selector_labels

from .fixtures import SETTINGS, admin_key, build_result, make_isvc

ACTIVATOR = ActivatorEndpoints(addresses=("10.0.0.7", "10.0.0.9"), ports={"http": 8000, "grpc": 8001})


def plan(routing: ActivatorRouting | None, replicas: int = 0):
    isvc = make_isvc("zero").autoscaling(minReplicas=0).obj()
    return plan_children(
        isvc=isvc,
        result=build_result(),
        batching=isvc.spec.batching.to_config(),
        replicas=replicas,
        settings=SETTINGS,
        capabilities=ClusterCapabilities(),
        admin_key=admin_key("zero"),
        routing=routing,
    )


def kinds_names(objs) -> list[tuple[str, str]]:
    return [(o["kind"], o["metadata"]["name"]) for o in objs]


def test_the_pods_service_is_headless_over_the_serving_pods_with_the_inference_ports():
    svc = pods_service(isvc=make_isvc("zero").obj())
    assert svc["metadata"]["name"] == "zero-pods"
    assert svc["spec"]["clusterIP"] == "None" and svc["spec"]["selector"] == selector_labels("zero")
    assert [(p["name"], p["port"]) for p in svc["spec"]["ports"]] == [("http", 8000), ("grpc", 8001)]


def test_the_slice_belongs_to_the_service_and_points_at_the_activators_ready_pods():
    slice_ = activator_slice(isvc=make_isvc("zero").obj(), activator=ACTIVATOR)
    labels = slice_["metadata"]["labels"]
    assert slice_["metadata"]["name"] == "zero-activator"
    assert labels["kubernetes.io/service-name"] == "zero"
    assert labels["endpointslice.kubernetes.io/managed-by"] == c.ENDPOINT_SLICE_MANAGER
    assert [e["addresses"] for e in slice_["endpoints"]] == [["10.0.0.7"], ["10.0.0.9"]]
    assert [(p["name"], p["port"]) for p in slice_["ports"]] == [("http", 8000), ("grpc", 8001)]


def test_only_ready_and_not_terminating_activator_addresses_are_routed_to():
    slices = [
        {
            "addressType": "IPv4",
            "ports": [{"name": "http", "port": 8000}, {"name": "grpc", "port": 8001}],
            "endpoints": [
                {"addresses": ["10.0.0.1"], "conditions": {"ready": True}},
                {"addresses": ["10.0.0.2"], "conditions": {"ready": False}},
                {"addresses": ["10.0.0.3"], "conditions": {"ready": True, "terminating": True}},
                {"addresses": ["10.0.0.4"]},
            ],
        },
        {"addressType": "IPv6", "endpoints": [{"addresses": ["fd00::1"]}]},
    ]
    found = ready_endpoints(slices)
    assert found.addresses == ("10.0.0.1", "10.0.0.4")
    assert dict(found.ports) == {"http": 8000, "grpc": 8001}


def test_the_service_routes_to_the_activator_while_no_replica_is_ready_or_it_goes_to_zero():
    assert routes_to_activator(replicas=0, ready_replicas=1)
    assert routes_to_activator(replicas=1, ready_replicas=0)
    assert not routes_to_activator(replicas=1, ready_replicas=1)


def test_routed_the_slice_comes_first_so_the_activator_is_in_before_the_last_pod_goes():
    wanted = kinds_names(plan(ActivatorRouting(scale_to_zero=True, route_to=ACTIVATOR)).wanted)
    assert wanted[:2] == [("EndpointSlice", "zero-activator"), ("Service", "zero-pods")]
    assert wanted.index(("EndpointSlice", "zero-activator")) < wanted.index(("Deployment", "zero"))


def test_serving_the_slice_is_turned_off_and_without_zero_both_are():
    serving = plan(ActivatorRouting(scale_to_zero=True), replicas=1)
    assert ("Service", "zero-pods") in kinds_names(serving.wanted)
    assert ("EndpointSlice", "zero-activator") in kinds_names(serving.turned_off)
    one = plan(ActivatorRouting(scale_to_zero=False), replicas=1)
    assert {("Service", "zero-pods"), ("EndpointSlice", "zero-activator")} <= set(kinds_names(one.turned_off))


def test_without_an_activator_neither_is_wanted_nor_turned_off():
    none = plan(None, replicas=1)
    names = {n for _, n in kinds_names([*none.wanted, *none.turned_off])}
    assert not names & {"zero-pods", "zero-activator"}
