"""One request through the activator, whatever its protocol: route, hold if cold, wake, forward.

The HTTP and gRPC front ends (`http_proxy`, `grpc_proxy`) parse their protocol and hand the
rest here: the host to route by, the body (`RequestBody`: its declared size and how to read it),
and a `send(endpoint, body)` coroutine that forwards the request to one replica and returns the
answer (any answer the replica gave, error statuses included: those are the model's, passed
through) or raises `BackendUnreachable` when the replica could not be reached or dropped the
connection. So the bounds, the wake, the choice of replica
and the retries behave the same for both protocols, and are tested once.

A request for a service with a ready replica is forwarded at once. Otherwise it is held
(`holding.Holds`, within the bounds), the service is woken (`waking.Wakes`, once per cold
episode), and the request waits on the backends' change signal until a replica is ready or the
hold timeout passes; the cold episode is timed, from the first hold to the first answer, and
recorded for the operator (`cold_start.ColdStarts`). A replica that cannot be reached is skipped
for the next one ready, at most `max_tries` replicas per request: inference requests are stateless
(KServe v2), so a request that may have reached a replica which then died is sent again.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

from tailpilot.activator.backends import Backends, Endpoint, LeastOutstanding, Transport, serving
from tailpilot.activator.cold_start import ColdStarts, LoggingColdStartWriter
from tailpilot.activator.errors import (
    ActivationError,
    BackendsFailed,
    BackendTimedOut,
    BackendUnreachable,
    BodyTooLarge,
    ClientDeadlinePassed,
    HoldRefused,
    HoldTimedOut,
    UnknownService,
)
from tailpilot.activator.holding import Holds, wait_until_ready
from tailpilot.activator.metrics import ActivatorMetrics, Outcome
from tailpilot.activator.routing import ServiceKey, service_for_host
from tailpilot.activator.waking import Wakes

log = logging.getLogger(__name__)

T = TypeVar("T")


@dataclass(frozen=True)
class RequestBody:
    """A request's body, not read yet: its size when the request declared it, and how to read it."""

    #: The size the request declared (HTTP's Content-Length; gRPC: the message, already read).
    declared_bytes: int | None
    #: Reads the whole body.
    read: Callable[[], Awaitable[bytes]]

    @classmethod
    def of(cls, payload: bytes) -> RequestBody:
        """A body already read (a gRPC message)."""

        async def read() -> bytes:
            return payload

        return cls(declared_bytes=len(payload), read=read)


#: What each refusal is counted as in `tailpilot_activator_requests_total`.
_OUTCOME_OF_ERROR: dict[type[ActivationError], Outcome] = {
    UnknownService: Outcome.UNKNOWN_SERVICE,
    BodyTooLarge: Outcome.TOO_LARGE,
    HoldRefused: Outcome.REFUSED_BOUND,
    HoldTimedOut: Outcome.TIMED_OUT,
    ClientDeadlinePassed: Outcome.TIMED_OUT,
    BackendsFailed: Outcome.FAILED,
    BackendTimedOut: Outcome.FAILED,
}


class Activation:
    """The path of one request: route, bound, hold, wake, pick a replica, forward with retries."""

    def __init__(
        self,
        *,
        backends: Backends,
        holds: Holds,
        wakes: Wakes,
        metrics: ActivatorMetrics,
        balancer: LeastOutstanding | None = None,
        max_tries: int = 3,
        clock: Callable[[], float] = time.monotonic,
        cold_starts: ColdStarts | None = None,
    ) -> None:
        """Serve from `backends` within `holds`' bounds, waking through `wakes`.

        Args:
            backends: The services and their ready replicas.
            holds: The held requests and their bounds.
            wakes: When to ask the operator for a replica.
            metrics: Where outcomes and hold durations are counted.
            balancer: Which replica a request goes to (a fresh `LeastOutstanding` when None).
            max_tries: Replicas tried at most for one request when they cannot be reached.
            clock: Measures hold durations.
            cold_starts: Times each cold episode and records it (only logged when None).
        """
        if max_tries < 1:
            raise ValueError("max_tries must be at least 1")
        self.backends = backends
        self.holds = holds
        self.wakes = wakes
        self.metrics = metrics
        self.balancer = balancer if balancer is not None else LeastOutstanding()
        self._max_tries = max_tries
        self._clock = clock
        self.cold_starts = (
            cold_starts if cold_starts is not None else ColdStarts(LoggingColdStartWriter(), metrics=metrics)
        )

    @property
    def max_body_bytes(self) -> int:
        """The largest body accepted."""
        return self.holds.limits.max_body_bytes

    def route(self, host: str) -> ServiceKey:
        """The TailPilot service `host` names; `UnknownService` when it names none."""
        key = service_for_host(host, service_for_ip=self.backends.service_for_ip)
        if key is None:
            raise UnknownService.unparsable(host)
        if not self.backends.knows(key):
            raise UnknownService.unknown(key, host)
        return key

    def _check_body(self, body_bytes: int | None) -> None:
        """`BodyTooLarge` when a body of `body_bytes` (None: not known yet) is over the maximum."""
        if body_bytes is not None and body_bytes > self.max_body_bytes:
            raise BodyTooLarge.over(body_bytes=body_bytes, max_body_bytes=self.max_body_bytes)

    async def forward(
        self,
        *,
        key: ServiceKey,
        transport: Transport,
        body: RequestBody,
        send: Callable[[Endpoint, bytes], Awaitable[T]],
        deadline_s: float | None = None,
    ) -> T:
        """Forward a request for `key` to one of its replicas, holding it first while none is ready.

        Args:
            key: The request's service (from `route`).
            transport: The protocol it arrived in (which port of the replica it goes to).
            body: Its body, read here: while held, counted against the held-bytes bound from before
                it is read when its size is declared (HTTP's Content-Length), so a burst over the
                bounds is refused without its bodies ever being read.
            send: Forwards it with the body to one endpoint and returns the answer; raises
                `BackendUnreachable` when the endpoint could not be reached.
            deadline_s: Seconds the client still waits, when it said (a gRPC deadline): the hold
                ends then if that comes before the hold timeout.

        Raises:
            ActivationError: The activator's own answer (a bound, the timeout, every replica failing).
        """
        self._check_body(body.declared_bytes)
        if serving(self.backends.ready(key), transport):
            payload = await self._read(body)
            self.wakes.episode_over(key)
            answer = await self._send(key, transport, lambda endpoint: send(endpoint, payload))
            self.count(transport, Outcome.FORWARDED_DIRECT)
            return answer
        # Timed from here, as the client's wait is: the hold, the wake, the replica, the answer.
        ticket = self.cold_starts.held(key)
        try:
            payload = await self._hold(key, transport, body=body, deadline_s=deadline_s)
            answer = await self._send(key, transport, lambda endpoint: send(endpoint, payload))
        except BaseException:  # a bound, the timeout, failed replicas, the client gone (cancelled)
            self.cold_starts.gave_up(ticket)
            raise
        self.cold_starts.answered(ticket)
        self.count(transport, Outcome.FORWARDED_AFTER_HOLD)
        return answer

    def count(self, transport: Transport, outcome: Outcome) -> None:
        """Count one request answered with `outcome`."""
        self.metrics.requests.labels(protocol=transport.value, outcome=outcome).inc()

    def count_error(self, transport: Transport, error: ActivationError) -> None:
        """Count one request the activator answered itself with `error`."""
        self.count(transport, _OUTCOME_OF_ERROR.get(type(error), Outcome.FAILED))

    async def _read(self, body: RequestBody) -> bytes:
        payload = await body.read()
        self._check_body(len(payload))
        return payload

    async def _hold(
        self, key: ServiceKey, transport: Transport, *, body: RequestBody, deadline_s: float | None
    ) -> bytes:
        """Hold the request until `key` has a ready replica; its body, read while held."""
        timeout_s = self.holds.limits.hold_timeout_s
        client_deadline_first = deadline_s is not None and deadline_s < timeout_s
        if deadline_s is not None and client_deadline_first:
            timeout_s = max(0.0, deadline_s)
        started = self._clock()
        # The wake goes out as the first request arrives, before any body is read.
        self.wakes.request(key, still_wanted=lambda: self._still_cold(key))
        payload: bytes | None = None
        if body.declared_bytes is None:  # a chunked body: its size is known once read
            payload = await self._read(body)
            held_bytes = len(payload)
        else:
            held_bytes = body.declared_bytes
        with self.holds.holding(key, held_bytes):
            if payload is None:
                payload = await self._read(body)
            try:
                await wait_until_ready(
                    self.backends, key, transport, timeout_s=max(0.0, timeout_s - (self._clock() - started))
                )
            except HoldTimedOut:
                if client_deadline_first:
                    # The client gives up now whatever the activator says; say what it would see.
                    raise ClientDeadlinePassed.after(key=key, deadline_s=timeout_s) from None
                raise HoldTimedOut.after(key=key, timeout_s=timeout_s) from None
            finally:
                self.metrics.hold_seconds.labels(protocol=transport.value).observe(self._clock() - started)
        self.cold_starts.backend_ready(key)
        self.wakes.episode_over(key)
        return payload

    def _still_cold(self, key: ServiceKey) -> bool:
        return self.holds.held(key) > 0 and not self.backends.ready(key)

    async def _send(
        self, key: ServiceKey, transport: Transport, send: Callable[[Endpoint], Awaitable[T]]
    ) -> T:
        tried: list[Endpoint] = []
        last_error = ""
        while len(tried) < self._max_tries:
            endpoint = self.balancer.pick(key, serving(self.backends.ready(key), transport), excluded=tried)
            if endpoint is None:
                break
            tried.append(endpoint)
            with self.balancer.in_flight(endpoint):
                try:
                    return await send(endpoint)
                except BackendUnreachable as error:
                    last_error = str(error)
                    log.info("replica %s of %s unreachable, trying another: %s", endpoint.address, key, error)
        raise BackendsFailed.after(key=key, tries=len(tried), last_error=last_error)
