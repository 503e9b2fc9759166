"""Routing a service at zero replicas to the activator, and the activator to the service's pods.

A service with `minReplicas: 0` gets two children beside its Service:

- `<name>-pods`, a headless Service over its Triton pods (ready ones only): the activator forwards
  held requests to the ready addresses of its EndpointSlices, whatever the public Service points at;
- `<name>-activator`, an EndpointSlice of the public Service (label `kubernetes.io/service-name`)
  whose endpoints are the activator's ready pods, written while the service has no ready replica or
  is going to zero. kube-proxy merges every slice of a Service, so clients of `<name>` reach the
  activator while no pod is ready, and only the pods once the slice is deleted. The EndpointSlice
  controller leaves it alone: it is managed by the operator (`endpointslice.kubernetes.io/managed-by`).

The slice is written before the Deployment in the same pass (the children's order), so when the
last replica goes the activator is in the Service before the pod leaves it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tailpilot.api import constants as c
from tailpilot.api.v1alpha1 import InferenceService
from tailpilot.manifests.meta import object_meta, selector_labels

#: The label every EndpointSlice of a Service carries, and the one naming who manages it.
LABEL_SERVICE_NAME = "kubernetes.io/service-name"
LABEL_SLICE_MANAGED_BY = "endpointslice.kubernetes.io/managed-by"


@dataclass(frozen=True)
class ActivatorEndpoints:
    """The activator's ready pod addresses and its port numbers by name (http, grpc)."""

    addresses: tuple[str, ...]
    ports: Mapping[str, int]


@dataclass(frozen=True)
class ActivatorRouting:
    """What the operator knows of the activator for one pass (None where none is configured).

    Attributes:
        scale_to_zero: The service may go to zero (`minReplicas: 0`): its `<name>-pods` Service is wanted.
        route_to: The activator's endpoints when the Service must route to it now (None: to the pods).
    """

    scale_to_zero: bool
    route_to: ActivatorEndpoints | None = None


def routing_children(
    *, isvc: InferenceService, routing: ActivatorRouting
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The routing children wanted, and those turned off (to delete if they exist)."""
    pods = pods_service(isvc=isvc)
    empty = ActivatorEndpoints(addresses=(), ports={})
    slice_ = activator_slice(isvc=isvc, activator=routing.route_to or empty)
    route = routing.scale_to_zero and routing.route_to is not None
    wanted = [obj for obj, on in ((slice_, route), (pods, routing.scale_to_zero)) if on]
    off = [obj for obj, on in ((slice_, route), (pods, routing.scale_to_zero)) if not on]
    return wanted, off


def pods_service_name(isvc_name: str) -> str:
    """Name of the headless Service over the service's pods, which the activator forwards to."""
    return f"{isvc_name}{c.PODS_SERVICE_SUFFIX}"


def activator_slice_name(isvc_name: str) -> str:
    """Name of the EndpointSlice that routes the service's Service to the activator."""
    return f"{isvc_name}{c.ACTIVATOR_SLICE_SUFFIX}"


def pods_service(*, isvc: InferenceService) -> dict[str, Any]:
    """Build the headless Service over the service's Triton pods (HTTP and gRPC)."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": object_meta(isvc=isvc, name=pods_service_name(isvc.name), component=c.COMPONENT_SERVER),
        "spec": {
            "clusterIP": "None",
            "selector": selector_labels(isvc.name),
            "ports": [
                {"name": c.PORT_NAME_HTTP, "port": c.TRITON_HTTP_PORT, "targetPort": c.PORT_NAME_HTTP},
                {
                    "name": c.PORT_NAME_GRPC,
                    "port": c.TRITON_GRPC_PORT,
                    "targetPort": c.PORT_NAME_GRPC,
                    "appProtocol": "grpc",
                },
            ],
        },
    }


def activator_slice(*, isvc: InferenceService, activator: ActivatorEndpoints) -> dict[str, Any]:
    """Build the EndpointSlice of the service's Service that points at the activator's pods.

    Its ports carry the Service's port names, so kube-proxy maps the Service's HTTP and gRPC ports to
    the activator's; the metrics port is not routed (nothing to scrape at zero).
    """
    meta = object_meta(isvc=isvc, name=activator_slice_name(isvc.name), component=c.COMPONENT_SERVER)
    meta["labels"] = {
        **meta["labels"],
        LABEL_SERVICE_NAME: isvc.name,
        LABEL_SLICE_MANAGED_BY: c.ENDPOINT_SLICE_MANAGER,
    }
    ports = [
        {"name": name, "port": activator.ports[name], "protocol": "TCP"}
        for name in (c.PORT_NAME_HTTP, c.PORT_NAME_GRPC)
        if name in activator.ports
    ]
    return {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": meta,
        "addressType": "IPv4",
        "endpoints": [
            {"addresses": [address], "conditions": {"ready": True}} for address in activator.addresses
        ],
        "ports": ports,
    }


def ready_addresses(endpoint_slice: Mapping[str, Any]) -> tuple[str, ...]:
    """One address per ready endpoint of an EndpointSlice, in its order (the activator reads it too).

    An endpoint whose `ready` condition is unset counts as ready (the API's advice for consumers); a
    terminating one does not. Every address of one endpoint is the same pod: the first is used.
    """
    found = []
    for endpoint in endpoint_slice.get("endpoints") or []:
        conditions = endpoint.get("conditions") or {}
        addresses = endpoint.get("addresses") or []
        if addresses and conditions.get("ready") is not False and conditions.get("terminating") is not True:
            found.append(str(addresses[0]))
    return tuple(found)


def ready_endpoints(slices: Sequence[Mapping[str, Any]]) -> ActivatorEndpoints:
    """The ready IPv4 addresses and named ports of a Service's EndpointSlices (the activator's)."""
    addresses: set[str] = set()
    ports: dict[str, int] = {}
    for slice_ in slices:
        if slice_.get("addressType", "IPv4") != "IPv4":
            continue  # the routing slice is IPv4
        for port in slice_.get("ports") or []:
            if port.get("name") and port.get("port"):
                ports[str(port["name"])] = int(port["port"])
        addresses.update(ready_addresses(slice_))
    return ActivatorEndpoints(addresses=tuple(sorted(addresses)), ports=ports)


def routes_to_activator(*, replicas: int, ready_replicas: int) -> bool:
    """Whether the Service goes to the activator: no replica ready, or the service going to zero."""
    return replicas == 0 or ready_replicas == 0
