"""Holding requests for a service with no ready replica: the bounds, the count, the wait.

A request for a cold service is held (kept in memory, its client waiting) until a replica is
ready or the hold timeout passes. Held requests cost memory (their bodies) and a slot each, so
they are bounded twice: per service (one cold service cannot take every slot) and in bytes
across all services (the activator's memory stays bounded however many services are cold). A
request over a bound is refused at once, not queued: the client retries after `Retry-After`
rather than waiting for a hold that might never have room.

`hold_refusal` is the pure decision; `Holds` keeps the counts (event loop thread only);
`wait_until_ready` is the bounded wait on the backends' change signal.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from tailpilot.activator.backends import Backends, Endpoint, Transport, serving
from tailpilot.activator.errors import HoldRefused, HoldTimedOut
from tailpilot.activator.routing import ServiceKey

MIB = 1024 * 1024

#: Names of the bounds, as the refusals and the docs call them.
BOUND_PER_SERVICE = "max held requests per service"
BOUND_BYTES = "max held bytes"


@dataclass(frozen=True)
class HoldLimits:
    """The bounds on held requests and on one request's body."""

    #: Requests held at once for one service. A cold start lasts minutes, so a busy service's clients
    #: pile up meanwhile; the byte bound, not this one, is what bounds the memory.
    max_held_per_service: int = 1000
    #: Bytes of request bodies held at once, all services together.
    max_held_bytes: int = 256 * MIB
    #: How long a request is held at most; long enough for a GPU cold start (a pod scheduled, the
    #: engine fetched, Triton loading it), which often exceeds a minute, and equal to Knative's
    #: default request timeout (300 s), so clients written for it wait as long; short enough that a
    #: client is not left waiting on a service that will not come up.
    hold_timeout_s: float = 300.0
    #: The largest request body accepted at all (held or forwarded at once).
    max_body_bytes: int = 64 * MIB

    def __post_init__(self) -> None:
        if self.max_held_per_service < 1 or self.max_held_bytes < 1 or self.max_body_bytes < 1:
            raise ValueError("the hold bounds and the maximum body size must be positive")
        if self.hold_timeout_s <= 0:
            raise ValueError("the hold timeout must be positive")
        if self.max_body_bytes > self.max_held_bytes:
            # Otherwise a body the activator accepts could never be held, even alone.
            raise ValueError(
                f"the maximum body ({self.max_body_bytes} bytes) must not exceed the held-bytes bound "
                f"({self.max_held_bytes} bytes)"
            )


def hold_refusal(
    *, key: ServiceKey, held_here: int, held_bytes: int, body_bytes: int, limits: HoldLimits
) -> HoldRefused | None:
    """Why one more request of `body_bytes` for `key` may not be held, or None when it may.

    Args:
        key: The request's service (named in the message).
        held_here: Requests held now for the request's service.
        held_bytes: Body bytes held now, all services together.
        body_bytes: The new request's body size.
        limits: The bounds.
    """
    if held_here >= limits.max_held_per_service:
        return HoldRefused(
            f"{held_here} requests are already held for {key} while it has no ready replica, the "
            f"activator's bound ({BOUND_PER_SERVICE}: {limits.max_held_per_service}); retry later",
            bound=BOUND_PER_SERVICE,
            limit=limits.max_held_per_service,
        )
    if held_bytes + body_bytes > limits.max_held_bytes:
        return HoldRefused(
            f"holding this request for {key} ({body_bytes} bytes) would take the held bodies over the "
            f"activator's bound ({BOUND_BYTES}: {limits.max_held_bytes}); retry later",
            bound=BOUND_BYTES,
            limit=limits.max_held_bytes,
        )
    return None


class Holds:
    """The requests held now: a count per service and the bytes of all, admitted against the bounds."""

    def __init__(
        self, limits: HoldLimits, *, on_change: Callable[[ServiceKey, int, int], None] | None = None
    ) -> None:
        """Hold within `limits`; `on_change(key, held for key, held bytes)` after each change."""
        self.limits = limits
        self._held: dict[ServiceKey, int] = {}
        self._held_bytes = 0
        self._on_change = on_change

    def held(self, key: ServiceKey) -> int:
        """Requests held now for `key`."""
        return self._held.get(key, 0)

    @property
    def held_bytes(self) -> int:
        """Body bytes held now, all services together."""
        return self._held_bytes

    @property
    def held_total(self) -> int:
        """Requests held now, all services together."""
        return sum(self._held.values())

    def refusal(self, key: ServiceKey, body_bytes: int) -> HoldRefused | None:
        """Why one more request of `body_bytes` for `key` may not be held now, or None."""
        return hold_refusal(
            key=key,
            held_here=self.held(key),
            held_bytes=self._held_bytes,
            body_bytes=body_bytes,
            limits=self.limits,
        )

    @contextmanager
    def holding(self, key: ServiceKey, body_bytes: int) -> Iterator[None]:
        """Count one request of `body_bytes` as held while the block runs; `HoldRefused` over a bound."""
        refusal = self.refusal(key, body_bytes)
        if refusal is not None:
            raise refusal
        self._change(key, +1, +body_bytes)
        try:
            yield
        finally:
            self._change(key, -1, -body_bytes)

    def _change(self, key: ServiceKey, requests: int, body_bytes: int) -> None:
        count = self._held.get(key, 0) + requests
        if count > 0:
            self._held[key] = count
        else:
            self._held.pop(key, None)
        self._held_bytes += body_bytes
        if self._on_change is not None:
            self._on_change(key, count, self._held_bytes)


async def wait_until_ready(
    backends: Backends, key: ServiceKey, transport: Transport, *, timeout_s: float
) -> tuple[Endpoint, ...]:
    """`key`'s ready endpoints for `transport` once there are any; `HoldTimedOut` after `timeout_s`."""

    async def ready() -> tuple[Endpoint, ...]:
        while not (endpoints := serving(backends.ready(key), transport)):
            await backends.changed(key)
        return endpoints

    try:
        return await asyncio.wait_for(ready(), timeout=timeout_s)
    except TimeoutError:
        raise HoldTimedOut.after(key=key, timeout_s=timeout_s) from None
