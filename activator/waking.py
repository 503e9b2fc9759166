"""Asking the operator for a replica of a cold service: once per cold episode, retried until it lands.

The operator owns the replica decision; the activator only tells it that requests are waiting.
`KubeWaker` does that by stamping the InferenceService with the annotation
`tailpilot.io/wake-requested-at: <RFC 3339 UTC time>` (a merge patch): the operator's watch sees
the change at once, and the annotation's time tells it when demand came back, which an event
alone would not survive a restart with.

`Wakes` decides when to call the waker. Not once per request: a hundred held requests are one
piece of news. One wake per cold episode of a service: the first held request starts it; later
ones join it while it is pending; it is retried with backoff while it fails and requests are still
held; and once `rewake_after_s` (the hold timeout) has passed without a ready replica, the next
held request wakes again (the operator may have missed or refused the first). A ready replica
ends the episode: the next cold start wakes at once.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, Protocol

from tailpilot.activator.kube_patch import merge_patch_service
from tailpilot.activator.metrics import ActivatorMetrics, WakeResult
from tailpilot.activator.routing import ServiceKey
from tailpilot.api.constants import GROUP

log = logging.getLogger(__name__)

#: The annotation the activator sets on an InferenceService whose requests are held.
ANNOTATION_WAKE_REQUESTED_AT = f"{GROUP}/wake-requested-at"


class Waker(Protocol):
    """Tells the operator that `key` has requests waiting for a replica."""

    async def wake(self, key: ServiceKey) -> None:
        """Ask for a replica of `key`; raise when the request did not reach the operator."""


def rfc3339_utc(moment: datetime) -> str:
    """`moment` in RFC 3339, UTC, to the second: `2026-01-31T12:00:00Z` (as Kubernetes writes times)."""
    return moment.astimezone(UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")


def wake_patch(moment: datetime) -> dict[str, Any]:
    """The merge patch that asks for a replica: the wake annotation set to `moment`."""
    return {"metadata": {"annotations": {ANNOTATION_WAKE_REQUESTED_AT: rfc3339_utc(moment)}}}


class KubeWaker:
    """`Waker` over the API server: a merge patch of the InferenceService's wake annotation."""

    def __init__(self, api: Any, *, now: Callable[[], datetime] = lambda: datetime.now(UTC)) -> None:
        """Patch through `api`, a `kubernetes.client.CustomObjectsApi`; `now` stamps the annotation."""
        self._api = api
        self._now = now

    async def wake(self, key: ServiceKey) -> None:
        """Set the wake annotation on `key`'s InferenceService (in a thread: the client blocks)."""
        await merge_patch_service(self._api, key, wake_patch(self._now()))


class LoggingWaker:
    """`Waker` with no operator to tell (`--static-service`, benchmarks): the wake is only logged."""

    async def wake(self, key: ServiceKey) -> None:
        """Log that `key` would be woken."""
        log.info("wake requested for %s (static services: no operator to tell)", key)


def wake_due(*, last_wake_at: float | None, now: float, rewake_after_s: float) -> bool:
    """Whether a held request starts a wake: none yet this episode, or the last is `rewake_after_s` old."""
    return last_wake_at is None or now - last_wake_at >= rewake_after_s


def wake_retry_delay_s(attempt: int, *, first_s: float = 0.5, max_s: float = 10.0) -> float:
    """The pause before retry `attempt` (0-based) of a failed wake: `first_s` doubled, at most `max_s`."""
    return min(max_s, first_s * 2.0**attempt)


class Wakes:
    """When to wake each service: de-duplicated per cold episode, retried while requests wait."""

    def __init__(
        self,
        waker: Waker,
        *,
        rewake_after_s: float,
        metrics: ActivatorMetrics,
        retry_first_s: float = 0.5,
        retry_max_s: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
        on_woken: Callable[[ServiceKey], None] | None = None,
    ) -> None:
        """Call `waker`; wake a service again once `rewake_after_s` passed without a ready replica.

        `on_woken(key)` is called each time a wake of `key` landed (the cold start's record times it).
        """
        self._waker = waker
        self._on_woken = on_woken
        self._rewake_after_s = rewake_after_s
        self._metrics = metrics
        self._retry_first_s = retry_first_s
        self._retry_max_s = retry_max_s
        self._clock = clock
        self._last_wake_at: dict[ServiceKey, float] = {}
        self._pending: dict[ServiceKey, asyncio.Task[None]] = {}

    def request(self, key: ServiceKey, *, still_wanted: Callable[[], bool]) -> None:
        """A request for `key` is held: start a wake unless one is pending or recent.

        `still_wanted()` is asked after each failed try: False (nothing held any more, or a replica
        is ready) ends the retries.
        """
        if key in self._pending:
            return
        now = self._clock()
        if not wake_due(
            last_wake_at=self._last_wake_at.get(key), now=now, rewake_after_s=self._rewake_after_s
        ):
            return
        self._last_wake_at[key] = now
        task = asyncio.create_task(self._wake(key, still_wanted), name=f"wake {key}")
        self._pending[key] = task
        task.add_done_callback(lambda _: self._pending.pop(key, None))

    def episode_over(self, key: ServiceKey) -> None:
        """`key` has a ready replica: its next cold start wakes at once."""
        self._last_wake_at.pop(key, None)

    def pending(self, key: ServiceKey) -> bool:
        """Whether a wake of `key` is being sent or retried."""
        return key in self._pending

    async def close(self) -> None:
        """Stop every pending wake (at shutdown)."""
        tasks = list(self._pending.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _wake(self, key: ServiceKey, still_wanted: Callable[[], bool]) -> None:
        attempt = 0
        while True:
            try:
                await self._waker.wake(key)
            except Exception as error:  # noqa: BLE001 - any failure is retried, and logged with its cause
                self._metrics.wakes.labels(result=WakeResult.FAILED).inc()
                log.warning("waking %s failed (try %d): %s", key, attempt + 1, error)
            else:
                self._metrics.wakes.labels(result=WakeResult.OK).inc()
                log.info("woke %s", key)
                if self._on_woken is not None:
                    self._on_woken(key)
                return
            if not still_wanted():
                return
            await asyncio.sleep(
                wake_retry_delay_s(attempt, first_s=self._retry_first_s, max_s=self._retry_max_s)
            )
            attempt += 1
