"""The ready replicas of each service, a signal when they change, and which one a request goes to.

`Backends` is what the activation reads: the services TailPilot serves, their ready endpoints,
and an awaitable that returns at the next change of one service's endpoints (a held request
waits on it). `EndpointTable` implements it in memory; the Kubernetes adapter
(`kube_backends.KubeBackends`) fills one from its watches, tests and `--static-service` fill one
by hand. Everything here runs on the event loop's thread: the watches' threads publish through
`loop.call_soon_threadsafe`.

`LeastOutstanding` picks the endpoint with the fewest requests in flight from this activator,
ties taken in turn: a replica that just became ready gets the held requests spread over it and
its peers instead of all on the first one listed.
"""

from __future__ import annotations

import asyncio
import enum
from collections import Counter
from collections.abc import Collection, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Protocol

from tailpilot.activator.routing import ServiceKey


class Transport(enum.Enum):
    """The protocol a request arrived in, and the port of the replica it is forwarded to."""

    HTTP = "http"
    GRPC = "grpc"


@dataclass(frozen=True)
class Endpoint:
    """One ready replica: its address and its HTTP and gRPC ports (None: the port is not published)."""

    address: str
    http_port: int | None
    grpc_port: int | None

    def sort_key(self) -> tuple[str, int, int]:
        """The key endpoints are listed in (a stable order: ties in the pick are taken in turn over it)."""
        return self.address, self.http_port or 0, self.grpc_port or 0

    def port(self, transport: Transport) -> int | None:
        """The port `transport` is served on."""
        return self.http_port if transport is Transport.HTTP else self.grpc_port

    def target(self, transport: Transport) -> str:
        """`address:port` for `transport` (IPv6 in brackets); only for an endpoint that serves it."""
        port = self.port(transport)
        if port is None:
            raise ValueError(f"endpoint {self.address} has no {transport.value} port")
        host = f"[{self.address}]" if ":" in self.address else self.address
        return f"{host}:{port}"


def serving(endpoints: Iterable[Endpoint], transport: Transport) -> tuple[Endpoint, ...]:
    """The endpoints that publish a port for `transport`."""
    return tuple(endpoint for endpoint in endpoints if endpoint.port(transport) is not None)


class Backends(Protocol):
    """What the activation reads of the services and their replicas (event loop thread only)."""

    @property
    def synced(self) -> bool:
        """Whether the first full view has arrived (the activator is ready only after)."""

    def service_for_ip(self, ip: str) -> ServiceKey | None:
        """The model Service whose cluster IP is `ip`."""

    def knows(self, key: ServiceKey) -> bool:
        """Whether `key` is a service TailPilot serves (only those are held and woken)."""

    def ready(self, key: ServiceKey) -> tuple[Endpoint, ...]:
        """The ready endpoints of `key`, in a stable order (empty: scaled to zero or starting)."""

    async def changed(self, key: ServiceKey) -> None:
        """Return at the next change of `key`'s endpoints or of whether it is known."""


class EndpointTable:
    """`Backends` in memory: services, cluster IPs and ready endpoints as last published."""

    def __init__(self) -> None:
        self._cluster_ips: dict[ServiceKey, tuple[str, ...]] = {}
        self._service_by_ip: dict[str, ServiceKey] = {}
        self._endpoints: dict[ServiceKey, tuple[Endpoint, ...]] = {}
        # One event per key someone waits on; set and forgotten at the key's next change, so a
        # waiter always sees a change that happened after it started waiting.
        self._changes: dict[ServiceKey, asyncio.Event] = {}
        self._synced = False

    # --- Backends ---------------------------------------------------------------------------

    @property
    def synced(self) -> bool:
        """Whether `mark_synced` was called."""
        return self._synced

    def service_for_ip(self, ip: str) -> ServiceKey | None:
        """The service whose cluster IPs include `ip`."""
        return self._service_by_ip.get(ip)

    def knows(self, key: ServiceKey) -> bool:
        """Whether `set_service` published `key` (and no `drop_service` since)."""
        return key in self._cluster_ips

    def ready(self, key: ServiceKey) -> tuple[Endpoint, ...]:
        """The endpoints last published for `key`."""
        return self._endpoints.get(key, ())

    async def changed(self, key: ServiceKey) -> None:
        """Return at the next `set_endpoints`, `set_service` or `drop_service` of `key`."""
        event = self._changes.get(key)
        if event is None:
            event = self._changes[key] = asyncio.Event()
        await event.wait()

    # --- What the sources publish -----------------------------------------------------------

    def set_service(self, key: ServiceKey, cluster_ips: Sequence[str] = ()) -> None:
        """Publish that `key` is a TailPilot service, reachable at `cluster_ips` (may be none)."""
        for ip in self._cluster_ips.get(key, ()):
            self._service_by_ip.pop(ip, None)
        self._cluster_ips[key] = tuple(cluster_ips)
        for ip in cluster_ips:
            self._service_by_ip[ip] = key
        self._notify(key)

    def drop_service(self, key: ServiceKey) -> None:
        """Publish that `key` is gone (its endpoints stay until their own source drops them)."""
        for ip in self._cluster_ips.pop(key, ()):
            self._service_by_ip.pop(ip, None)
        self._notify(key)

    def set_endpoints(self, key: ServiceKey, endpoints: Iterable[Endpoint]) -> None:
        """Publish `key`'s ready endpoints (empty: none ready)."""
        ready = tuple(sorted(set(endpoints), key=Endpoint.sort_key))
        if ready:
            self._endpoints[key] = ready
        else:
            self._endpoints.pop(key, None)
        self._notify(key)

    def mark_synced(self) -> None:
        """Publish that every source has delivered its first full view."""
        self._synced = True

    def _notify(self, key: ServiceKey) -> None:
        event = self._changes.pop(key, None)
        if event is not None:
            event.set()


class LeastOutstanding:
    """Pick the endpoint with the fewest requests in flight through this activator; ties in turn."""

    def __init__(self) -> None:
        self._outstanding: Counter[Endpoint] = Counter()
        # The next turn among tied endpoints, per service: a turn shared by all services would
        # let two services alternating always land each on the same one of their endpoints.
        self._turns: dict[ServiceKey, int] = {}

    def outstanding(self, endpoint: Endpoint) -> int:
        """Requests in flight to `endpoint`."""
        return self._outstanding[endpoint]

    def pick(
        self, key: ServiceKey, candidates: Sequence[Endpoint], *, excluded: Collection[Endpoint] = ()
    ) -> Endpoint | None:
        """The endpoint of `candidates` (minus `excluded`) to send `key`'s next request to, or None."""
        usable = [endpoint for endpoint in candidates if endpoint not in excluded]
        if not usable:
            return None
        fewest = min(self._outstanding[endpoint] for endpoint in usable)
        tied = [endpoint for endpoint in usable if self._outstanding[endpoint] == fewest]
        turn = self._turns.get(key, 0)
        self._turns[key] = turn + 1
        return tied[turn % len(tied)]

    @contextmanager
    def in_flight(self, endpoint: Endpoint) -> Iterator[None]:
        """Count one request in flight to `endpoint` while the block runs."""
        self._outstanding[endpoint] += 1
        try:
            yield
        finally:
            self._outstanding[endpoint] -= 1
            if self._outstanding[endpoint] <= 0:
                # Forgotten at zero: replicas come and go, the counter must not keep them all.
                del self._outstanding[endpoint]
