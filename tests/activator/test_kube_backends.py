"""The cluster side of the backends: objects into endpoints (pure), the indexes, and the list+watch loop.

The loop runs against a scripted list function (what the Kubernetes client's `list_*` would
return: a list page, or a watch stream of JSON lines), through the client's real `Watch`; no API
server. A run against a real API server is left to the local-cluster tier.
"""

from __future__ import annotations

import asyncio
import json
import queue
import threading
from collections.abc import Iterator
from typing import Any

from tailpilot.activator.backends import Endpoint
from tailpilot.activator.kube_backends import (
    MANAGED_SELECTOR,
    SLICE_SELECTOR,
    KubeBackends,
    ServiceIndex,
    SliceIndex,
    model_service,
    private_service_name,
    ready_endpoints,
    service_key_of_slice,
)
from tailpilot.activator.routing import ServiceKey
from tests.activator.harness import eventually

RESNET = ServiceKey(namespace="shop", name="resnet")
MANAGED = {"app.kubernetes.io/managed-by": "tailpilot-operator"}


def service(
    name: str, *, isvc: str | None = None, ips: list[str] | None = None, namespace: str = "shop"
) -> dict[str, Any]:
    labels = {**MANAGED, "tailpilot.io/inferenceservice": isvc or name}
    spec: dict[str, Any] = {"clusterIP": (ips or ["None"])[0], "clusterIPs": ips or ["None"]}
    return {"metadata": {"name": name, "namespace": namespace, "labels": labels}, "spec": spec}


def endpoint(address: str, *, ready: bool | None = True, terminating: bool = False) -> dict[str, Any]:
    conditions: dict[str, Any] = {"terminating": terminating}
    if ready is not None:
        conditions["ready"] = ready
    return {"addresses": [address], "conditions": conditions}


def endpoint_slice(
    name: str,
    *endpoints: dict[str, Any],
    service_name: str = "resnet-pods",
    address_type: str = "IPv4",
    ports: dict[str, int] | None = None,
) -> dict[str, Any]:
    named_ports = ports if ports is not None else {"http": 8000, "grpc": 8001, "metrics": 8002}
    return {
        "metadata": {
            "name": name,
            "namespace": "shop",
            "labels": {**MANAGED, "kubernetes.io/service-name": service_name},
        },
        "addressType": address_type,
        "ports": [
            {"name": port_name, "port": port, "protocol": "TCP"} for port_name, port in named_ports.items()
        ],
        "endpoints": list(endpoints),
    }


def replica(address: str) -> Endpoint:
    return Endpoint(address=address, http_port=8000, grpc_port=8001)


# --- Pure translation -----------------------------------------------------------------------


def test_the_private_service_is_name_dash_pods() -> None:
    assert private_service_name("resnet") == "resnet-pods"


def test_ready_endpoints_take_ready_and_unknown_addresses_with_the_named_ports() -> None:
    found = ready_endpoints(
        endpoint_slice(
            "s",
            endpoint("10.0.0.2"),
            endpoint("10.0.0.1", ready=None),  # unknown readiness: ready, as the API advises
            endpoint("10.0.0.3", ready=False),
            endpoint("10.0.0.4", ready=False, terminating=True),
            {"addresses": [], "conditions": {"ready": True}},
        )
    )
    assert found == (replica("10.0.0.1"), replica("10.0.0.2"))


def test_ready_endpoints_without_one_port_or_of_fqdn_slices() -> None:
    http_only = ready_endpoints(endpoint_slice("s", endpoint("10.0.0.1"), ports={"http": 8000}))
    assert http_only == (Endpoint(address="10.0.0.1", http_port=8000, grpc_port=None),)
    assert ready_endpoints(endpoint_slice("s", endpoint("10.0.0.1"), ports={"metrics": 8002})) == ()
    assert ready_endpoints(endpoint_slice("s", endpoint("pod.example"), address_type="FQDN")) == ()
    ipv6 = ready_endpoints(endpoint_slice("s", endpoint("fd00::5"), address_type="IPv6"))
    assert ipv6 == (replica("fd00::5"),)


def test_a_slice_belongs_to_the_service_of_its_private_service() -> None:
    assert service_key_of_slice(endpoint_slice("s")) == RESNET
    assert service_key_of_slice(endpoint_slice("s", service_name="resnet")) is None  # the public Service
    assert service_key_of_slice(endpoint_slice("s", service_name="resnet-metrics")) is None
    assert service_key_of_slice(endpoint_slice("s", service_name="-pods")) is None


def test_model_services_are_those_named_like_their_inference_service() -> None:
    assert model_service(service("resnet", ips=["10.96.0.7"])) == (RESNET, ("10.96.0.7",))
    dual_stack = model_service(service("resnet", ips=["10.96.0.7", "fd00::7"]))
    assert dual_stack == (RESNET, ("10.96.0.7", "fd00::7"))
    assert model_service(service("resnet")) == (RESNET, ())  # headless: known, no IP to route
    assert model_service(service("resnet-metrics", isvc="resnet")) is None
    assert model_service(service("resnet-pods", isvc="resnet")) is None


def test_the_selectors_take_only_the_operators_objects() -> None:
    assert MANAGED_SELECTOR == "app.kubernetes.io/managed-by=tailpilot-operator"
    assert SLICE_SELECTOR == "app.kubernetes.io/managed-by=tailpilot-operator,kubernetes.io/service-name"


# --- Indexes ------------------------------------------------------------------------------------


def test_the_slice_index_unites_a_services_slices_and_reports_changes() -> None:
    index = SliceIndex()
    assert index.apply("ADDED", endpoint_slice("a", endpoint("10.0.0.1"))) == [
        (RESNET, (replica("10.0.0.1"),))
    ]
    changes = index.apply("ADDED", endpoint_slice("b", endpoint("10.0.0.2")))
    assert changes == [(RESNET, (replica("10.0.0.1"), replica("10.0.0.2")))]
    assert index.apply("DELETED", endpoint_slice("a")) == [(RESNET, (replica("10.0.0.2"),))]
    relisted = index.replace([endpoint_slice("c", endpoint("10.0.0.3"))])
    assert relisted == [(RESNET, (replica("10.0.0.3"),))]
    assert index.replace([endpoint_slice("c", endpoint("10.0.0.3"))]) == []  # nothing changed
    assert index.replace([]) == [(RESNET, ())]


def test_the_service_index_reports_new_changed_and_gone_services() -> None:
    index = ServiceIndex()
    assert index.apply("ADDED", service("resnet", ips=["10.96.0.7"])) == {RESNET: ("10.96.0.7",)}
    assert index.apply("MODIFIED", service("resnet", ips=["10.96.0.7"])) == {}
    assert index.apply("ADDED", service("resnet-metrics", isvc="resnet")) == {}
    assert index.apply("DELETED", service("resnet")) == {RESNET: None}
    bert = ServiceKey(namespace="shop", name="bert")
    index.apply("ADDED", service("resnet", ips=["10.96.0.7"]))
    assert index.replace([service("bert", ips=["10.96.0.9"])]) == {RESNET: None, bert: ("10.96.0.9",)}


# --- The list+watch loop, through the client's Watch --------------------------------------------


class ScriptedResponse:
    """What a `list_*(..., _preload_content=False)` returns: the page's bytes, or a stream of lines."""

    status = 200

    def __init__(self, *, data: bytes = b"", lines: Iterator[bytes] | None = None) -> None:
        self.data = data
        self._lines = lines or iter(())

    def stream(self, amt: object = None, decode_content: object = None) -> Iterator[bytes]:
        yield from self._lines

    def close(self) -> None:
        pass

    def release_conn(self) -> None:
        pass


class ScriptedKind:
    """A `list_*_for_all_namespaces` over a script: each list returns the next page; each watch streams
    the next batch of events, or blocks until released (a quiet watch)."""

    def __init__(self) -> None:
        self.pages: queue.Queue[list[dict[str, Any]]] = queue.Queue()
        self.events: queue.Queue[list[dict[str, Any]]] = queue.Queue()
        self.selectors: list[str] = []
        self.resource_versions: list[str | None] = []
        self.released = threading.Event()
        self._version = 0

    def __call__(
        self, *, label_selector: str, watch: bool = False, resource_version: str | None = None, **_: Any
    ) -> ScriptedResponse:
        self.selectors.append(label_selector)
        if not watch:
            items = self.pages.get(timeout=5.0)
            self._version += 1
            page = {"items": items, "metadata": {"resourceVersion": str(self._version)}}
            return ScriptedResponse(data=json.dumps(page).encode())
        self.resource_versions.append(resource_version)
        return ScriptedResponse(lines=self._watch_lines())

    def _watch_lines(self) -> Iterator[bytes]:
        while not self.released.is_set():
            try:
                batch = self.events.get(timeout=0.05)
            except queue.Empty:
                continue
            for event in batch:
                yield (json.dumps(event) + "\n").encode()
            return


def expired() -> dict[str, Any]:
    return {
        "type": "ERROR",
        "object": {"kind": "Status", "code": 410, "reason": "Expired", "message": "too old"},
    }


def with_version(obj: dict[str, Any], version: str) -> dict[str, Any]:
    return {**obj, "metadata": {**obj["metadata"], "resourceVersion": version}}


def test_the_watches_fill_the_table_follow_changes_and_relist_after_expiry() -> None:
    async def scenario() -> None:
        services, slices = ScriptedKind(), ScriptedKind()
        backends = KubeBackends(
            list_services=services, list_endpoint_slices=slices, loop=asyncio.get_running_loop()
        )
        table = backends.table
        services.pages.put([service("resnet", ips=["10.96.0.7"])])
        slices.pages.put([endpoint_slice("resnet-pods-x")])  # scaled to zero: no endpoint
        backends.start()
        try:
            await eventually(lambda: table.synced)
            assert table.knows(RESNET) and table.ready(RESNET) == ()
            assert table.service_for_ip("10.96.0.7") == RESNET
            assert services.selectors[0] == MANAGED_SELECTOR and slices.selectors[0] == SLICE_SELECTOR

            # A replica becomes ready: the watch delivers the slice.
            ready_slice = with_version(endpoint_slice("resnet-pods-x", endpoint("10.0.0.1")), "5")
            slices.events.put([{"type": "MODIFIED", "object": ready_slice}])
            await eventually(lambda: table.ready(RESNET) == (replica("10.0.0.1"),))

            # The watch expires (410): the loop lists again and resumes from the new list's version.
            slices.pages.put([endpoint_slice("resnet-pods-x", endpoint("10.0.0.2"))])
            slices.events.put([expired()])
            await eventually(lambda: table.ready(RESNET) == (replica("10.0.0.2"),))
            await eventually(lambda: len(slices.resource_versions) >= 3)
            assert slices.resource_versions[:3] == ["1", "5", "2"]

            # The model Service is deleted: the service is no longer known.
            services.events.put([{"type": "DELETED", "object": with_version(service("resnet"), "9")}])
            await eventually(lambda: not table.knows(RESNET))
        finally:
            services.released.set()
            slices.released.set()
            await asyncio.to_thread(backends.stop)

    asyncio.run(scenario())
