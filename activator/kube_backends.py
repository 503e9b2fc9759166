"""The services and their ready replicas, from the API server: list+watch in threads, into an `EndpointTable`.

What the activator reads of the cluster, all of it cluster-wide and labelled
`app.kubernetes.io/managed-by=tailpilot-operator` (the label the operator puts on its children):

- the model Services: a Service named like its InferenceService (labelled
  `tailpilot.io/inferenceservice=NAME`). Each makes (NS, NAME) a known service, and its cluster
  IPs route requests sent to the IP;
- the EndpointSlices of each service's private Service `NAME-pods` (label
  `kubernetes.io/service-name=NAME-pods`; the EndpointSlice controller copies the Service's
  labels onto its slices, so the managed-by selector finds them). Their ready addresses, with
  the ports named `http` and `grpc`, are the replicas a held request is forwarded to. The private
  Service always selects the model's pods, whatever the public one routes to (the activator, while
  the service is cold): like Knative's private service, it is how the activator sees replicas
  become ready without going through itself.

The translation of one object into what the table holds is pure (`model_service`,
`service_key_of_slice`, `ready_endpoints`), and so is the index of what the watches delivered
(`ServiceIndex`, `SliceIndex`): both are unit-tested without an API server. `ListWatch`
(`tailpilot.kubewatch`, shared with the operator) is the loop that runs in a thread per kind and
publishes into the event loop with `call_soon_threadsafe`.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from kubernetes import client

from tailpilot.activator.backends import Endpoint, EndpointTable
from tailpilot.activator.routing import ServiceKey
from tailpilot.api.constants import LABEL_ISVC, LABEL_MANAGED_BY, MANAGED_BY, PORT_NAME_GRPC, PORT_NAME_HTTP
from tailpilot.kubewatch import ListWatch
from tailpilot.manifests.activator_routing import ready_addresses

log = logging.getLogger(__name__)

#: The private Service of a model service: `<name>-pods`, selecting its pods always.
PRIVATE_SERVICE_SUFFIX = "-pods"
#: The label the EndpointSlice controller sets to the name of a slice's Service.
LABEL_SERVICE_NAME = "kubernetes.io/service-name"
#: Everything the activator watches is the operator's.
MANAGED_SELECTOR = f"{LABEL_MANAGED_BY}={MANAGED_BY}"
#: The slices of Services, among the operator's objects.
SLICE_SELECTOR = f"{MANAGED_SELECTOR},{LABEL_SERVICE_NAME}"
#: EndpointSlice address types the activator can connect to (FQDN slices are skipped).
_IP_ADDRESS_TYPES = frozenset({"IPv4", "IPv6"})

Change = tuple[ServiceKey, tuple[Endpoint, ...]]


def private_service_name(name: str) -> str:
    """The private Service of service `name`: the one whose slices list its replicas."""
    return f"{name}{PRIVATE_SERVICE_SUFFIX}"


def _metadata(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return obj.get("metadata") or {}


def model_service(service: Mapping[str, Any]) -> tuple[ServiceKey, tuple[str, ...]] | None:
    """The service a model Service stands for and its cluster IPs; None for any other Service.

    A model Service is named like its InferenceService (`tailpilot.io/inferenceservice`), so the
    operator's other Services (`-metrics`, `-canary`, `-pods`) are left out.
    """
    metadata = _metadata(service)
    labels = metadata.get("labels") or {}
    name, namespace = metadata.get("name"), metadata.get("namespace")
    if not name or not namespace or labels.get(LABEL_ISVC) != name:
        return None
    spec = service.get("spec") or {}
    ips = spec.get("clusterIPs") or ([spec["clusterIP"]] if spec.get("clusterIP") else [])
    return ServiceKey(namespace=namespace, name=name), tuple(ip for ip in ips if ip and ip != "None")


def service_key_of_slice(endpoint_slice: Mapping[str, Any]) -> ServiceKey | None:
    """The service whose private Service `endpoint_slice` belongs to; None for another Service's slice."""
    metadata = _metadata(endpoint_slice)
    service_name = (metadata.get("labels") or {}).get(LABEL_SERVICE_NAME, "")
    namespace = metadata.get("namespace")
    if not namespace or not service_name.endswith(PRIVATE_SERVICE_SUFFIX):
        return None
    name = service_name.removesuffix(PRIVATE_SERVICE_SUFFIX)
    return ServiceKey(namespace=namespace, name=name) if name else None


def ready_endpoints(endpoint_slice: Mapping[str, Any]) -> tuple[Endpoint, ...]:
    """The ready replicas `endpoint_slice` lists, with its `http` and `grpc` ports.

    An endpoint whose `ready` condition is unset counts as ready (the API's advice for consumers);
    a terminating one is not ready. A slice with neither port lists nothing the activator can use.
    """
    if endpoint_slice.get("addressType", "IPv4") not in _IP_ADDRESS_TYPES:
        return ()
    ports = {port.get("name"): port.get("port") for port in endpoint_slice.get("ports") or []}
    http_port, grpc_port = ports.get(PORT_NAME_HTTP), ports.get(PORT_NAME_GRPC)
    if http_port is None and grpc_port is None:
        return ()
    ready = [
        Endpoint(address=address, http_port=http_port, grpc_port=grpc_port)
        for address in ready_addresses(endpoint_slice)
    ]
    return tuple(sorted(ready, key=Endpoint.sort_key))


def _object_id(obj: Mapping[str, Any]) -> tuple[str, str]:
    metadata = _metadata(obj)
    return str(metadata.get("namespace", "")), str(metadata.get("name", ""))


class ServiceIndex:
    """The model Services delivered so far; what changed with each event (pure, one thread)."""

    def __init__(self) -> None:
        self._services: dict[tuple[str, str], tuple[ServiceKey, tuple[str, ...]]] = {}

    def apply(self, event_type: str, service: Mapping[str, Any]) -> dict[ServiceKey, tuple[str, ...] | None]:
        """Take one watch event; return the services it changed (None: the service is gone)."""
        object_id = _object_id(service)
        before = self._services.pop(object_id, None)
        after = None if event_type == "DELETED" else model_service(service)
        if after is not None:
            self._services[object_id] = after
        if before == after:
            return {}
        changes: dict[ServiceKey, tuple[str, ...] | None] = {}
        if before is not None:
            changes[before[0]] = None
        if after is not None:
            changes[after[0]] = after[1]
        return changes

    def replace(self, services: Iterable[Mapping[str, Any]]) -> dict[ServiceKey, tuple[str, ...] | None]:
        """Take a full list (after a relist); return every service that changed or went away."""
        before = {key: ips for key, ips in self._services.values()}
        self._services = {}
        for service in services:
            found = model_service(service)
            if found is not None:
                self._services[_object_id(service)] = found
        after = {key: ips for key, ips in self._services.values()}
        changes: dict[ServiceKey, tuple[str, ...] | None] = {
            key: None for key in before.keys() - after.keys()
        }
        changes.update({key: ips for key, ips in after.items() if before.get(key) != ips})
        return changes


class SliceIndex:
    """The private Services' slices delivered so far; each service's ready endpoints (pure, one thread)."""

    def __init__(self) -> None:
        self._slices: dict[tuple[str, str], tuple[ServiceKey, tuple[Endpoint, ...]]] = {}

    def endpoints(self, key: ServiceKey) -> tuple[Endpoint, ...]:
        """`key`'s ready endpoints: the union of its slices'."""
        union = {
            endpoint for slice_key, found in self._slices.values() if slice_key == key for endpoint in found
        }
        return tuple(sorted(union, key=Endpoint.sort_key))

    def apply(self, event_type: str, endpoint_slice: Mapping[str, Any]) -> list[Change]:
        """Take one watch event; return the services whose ready endpoints it changed, with the new ones."""
        object_id = _object_id(endpoint_slice)
        touched = set()
        before = self._slices.pop(object_id, None)
        if before is not None:
            touched.add(before[0])
        key = None if event_type == "DELETED" else service_key_of_slice(endpoint_slice)
        if key is not None:
            self._slices[object_id] = (key, ready_endpoints(endpoint_slice))
            touched.add(key)
        return [(service, self.endpoints(service)) for service in sorted(touched)]

    def replace(self, slices: Iterable[Mapping[str, Any]]) -> list[Change]:
        """Take a full list (after a relist); return every service whose ready endpoints changed."""
        before_keys = {key for key, _ in self._slices.values()}
        before = {key: self.endpoints(key) for key in before_keys}
        self._slices = {}
        for endpoint_slice in slices:
            key = service_key_of_slice(endpoint_slice)
            if key is not None:
                self._slices[_object_id(endpoint_slice)] = (key, ready_endpoints(endpoint_slice))
        keys = before_keys | {key for key, _ in self._slices.values()}
        return [(key, now) for key in sorted(keys) if (now := self.endpoints(key)) != before.get(key, ())]


class KubeBackends:
    """Fills an `EndpointTable` (the activation's `Backends`) from the API server, in two watch threads."""

    def __init__(
        self,
        *,
        list_services: Callable[..., Any],
        list_endpoint_slices: Callable[..., Any],
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        """Watch through the two list functions (`of` takes them from an API client); publish on `loop`."""
        self.table = EndpointTable()
        self._loop = loop
        self._stop = threading.Event()
        self._services = ServiceIndex()
        self._slices = SliceIndex()
        self._listed: set[str] = set()
        self._listed_lock = threading.Lock()
        self._watches = (
            ListWatch(
                kind="services",
                list_function=list_services,
                label_selector=MANAGED_SELECTOR,
                on_list=self._services_listed,
                on_event=self._service_event,
            ),
            ListWatch(
                kind="endpointslices",
                list_function=list_endpoint_slices,
                label_selector=SLICE_SELECTOR,
                on_list=self._slices_listed,
                on_event=self._slice_event,
            ),
        )
        self._threads: list[threading.Thread] = []

    @classmethod
    def of(cls, api_client: client.ApiClient, loop: asyncio.AbstractEventLoop) -> KubeBackends:
        """Watch Services and EndpointSlices in every namespace through `api_client`."""
        return cls(
            list_services=client.CoreV1Api(api_client).list_service_for_all_namespaces,
            list_endpoint_slices=client.DiscoveryV1Api(api_client).list_endpoint_slice_for_all_namespaces,
            loop=loop,
        )

    def start(self) -> None:
        """Start both watch threads (daemons: a blocked watch never holds the process at exit)."""
        for list_watch in self._watches:
            thread = threading.Thread(
                target=list_watch.run,
                args=(self._stop,),
                name=f"activator-watch-{list_watch.kind}",
                daemon=True,
            )
            thread.start()
            self._threads.append(thread)

    def stop(self, *, join_timeout_s: float = 2.0) -> None:
        """Stop both threads: a blocked watch is unblocked; each gets `join_timeout_s` to return."""
        self._stop.set()
        for list_watch in self._watches:
            list_watch.stop()
        for thread in self._threads:
            thread.join(timeout=join_timeout_s)

    # --- In the watch threads ----------------------------------------------------------------

    def _services_listed(self, services: list[dict[str, Any]]) -> None:
        self._publish_services(self._services.replace(services))
        self._listed_one("services")

    def _service_event(self, event_type: str, service: dict[str, Any]) -> None:
        self._publish_services(self._services.apply(event_type, service))

    def _slices_listed(self, slices: list[dict[str, Any]]) -> None:
        self._publish_endpoints(self._slices.replace(slices))
        self._listed_one("endpointslices")

    def _slice_event(self, event_type: str, endpoint_slice: dict[str, Any]) -> None:
        self._publish_endpoints(self._slices.apply(event_type, endpoint_slice))

    def _publish_services(self, changes: Mapping[ServiceKey, tuple[str, ...] | None]) -> None:
        for key, ips in changes.items():
            if ips is None:
                self._call_in_loop(self.table.drop_service, key)
            else:
                self._call_in_loop(self.table.set_service, key, ips)

    def _publish_endpoints(self, changes: Iterable[Change]) -> None:
        for key, endpoints in changes:
            self._call_in_loop(self.table.set_endpoints, key, endpoints)

    def _listed_one(self, kind: str) -> None:
        with self._listed_lock:
            self._listed.add(kind)
            both = len(self._listed) == len(self._watches)
        if both:
            self._call_in_loop(self.table.mark_synced)

    def _call_in_loop(self, function: Callable[..., None], *args: Any) -> None:
        try:
            self._loop.call_soon_threadsafe(function, *args)
        except RuntimeError:
            # The loop is closed: the process is exiting.
            self._stop.set()
