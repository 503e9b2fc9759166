"""Timing each cold start as the first client saw it, and telling the operator once it is over.

A **cold episode** of a service opens when the activator holds a request for it with no
replica ready, and ends when the answer to that first held request, forwarded to the replica that
came up, is complete. `ColdStarts` keeps, per service, the wall-clock times (UTC) the activator saw
in it: the first request held, the wake landed (`woke`, called by `waking.Wakes`), a ready replica
first seen (`backend_ready`), the first answer done (`answered`). At the end of the episode it
writes them once onto the InferenceService as the annotation `tailpilot.io/cold-start`
(`tailpilot.api.cold_start`, a merge patch like the wake's), in the background: a write that fails
is logged and counted (`tailpilot_activator_cold_start_records_total{result="failed"}`) and never
touches the request. The operator breaks the episode down with the pod's own timestamps.

The first held request's answer ends the episode, because its wait is the cold start a client
saw. If that client leaves first (it hangs up, its deadline passes), the next held request's
answer ends it instead, and the total still counts from the first hold. An episode none of whose
requests was answered (all timed out) is dropped: no client saw it end.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

from tailpilot.activator.kube_patch import merge_patch_service
from tailpilot.activator.metrics import ActivatorMetrics, RecordResult
from tailpilot.activator.routing import ServiceKey
from tailpilot.api.cold_start import ColdStartEpisode
from tailpilot.api.constants import ANNOTATION_COLD_START

log = logging.getLogger(__name__)

#: How long the drain waits for cold-start records still being written before dropping them.
CLOSE_GRACE_S = 5.0


class ColdStartWriter(Protocol):
    """Records a finished cold episode where the operator reads it."""

    async def write(self, key: ServiceKey, episode: ColdStartEpisode) -> None:
        """Record `episode` of `key`; raise when the record did not land."""


def cold_start_patch(episode: ColdStartEpisode) -> dict[str, Any]:
    """The merge patch that records `episode`: the cold-start annotation set to its JSON."""
    return {"metadata": {"annotations": {ANNOTATION_COLD_START: episode.to_annotation()}}}


class KubeColdStartWriter:
    """`ColdStartWriter` over the API server: a merge patch of the InferenceService's annotation."""

    def __init__(self, api: Any) -> None:
        """Patch through `api`, a `kubernetes.client.CustomObjectsApi`."""
        self._api = api

    async def write(self, key: ServiceKey, episode: ColdStartEpisode) -> None:
        """Set the cold-start annotation on `key`'s InferenceService (in a thread: the client blocks)."""
        await merge_patch_service(self._api, key, cold_start_patch(episode))


class LoggingColdStartWriter:
    """`ColdStartWriter` with no operator to tell (`--static-service`, benchmarks): only logged."""

    async def write(self, key: ServiceKey, episode: ColdStartEpisode) -> None:
        """Log the episode."""
        log.info("cold start of %s: %s", key, episode.to_annotation())


@dataclass
class _Episode:
    """One open cold episode of a service (times from the wall clock, UTC)."""

    held_at: datetime
    woke_at: datetime | None = None
    backend_ready_at: datetime | None = None
    #: Requests held in this episode whose answer is still to come.
    waiting: int = 1
    #: Whether the request that opened the episode still waits for its answer.
    first_waiting: bool = True


@dataclass(frozen=True)
class HeldTicket:
    """One held request's place in its service's cold episode (what `held` hands back)."""

    key: ServiceKey
    episode: _Episode
    #: The request opened the episode: its answer is the one that ends it.
    first: bool


class ColdStarts:
    """The open cold episode of each service (event loop thread only), recorded once each ends."""

    def __init__(
        self,
        writer: ColdStartWriter,
        *,
        metrics: ActivatorMetrics,
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        """Record through `writer`, count the records in `metrics`, read the wall clock from `now`."""
        self._writer = writer
        self._metrics = metrics
        self._now = now
        self._open: dict[ServiceKey, _Episode] = {}
        self._writing: set[asyncio.Task[None]] = set()

    def held(self, key: ServiceKey) -> HeldTicket:
        """A request for `key` is held: it opens the episode, or joins the one open."""
        episode = self._open.get(key)
        if episode is not None:
            episode.waiting += 1
            return HeldTicket(key, episode, first=False)
        episode = self._open[key] = _Episode(held_at=self._now())
        return HeldTicket(key, episode, first=True)

    def woke(self, key: ServiceKey) -> None:
        """The wake of `key` landed (the first landing of the episode counts)."""
        episode = self._open.get(key)
        if episode is not None and episode.woke_at is None:
            episode.woke_at = self._now()

    def backend_ready(self, key: ServiceKey) -> None:
        """A held request of `key` saw a ready replica (the first sighting of the episode counts)."""
        episode = self._open.get(key)
        if episode is not None and episode.backend_ready_at is None:
            episode.backend_ready_at = self._now()

    def answered(self, ticket: HeldTicket) -> None:
        """The held request of `ticket` got its answer: the episode ends when it is the one that counts."""
        episode = ticket.episode
        if self._open.get(ticket.key) is not episode:
            return  # its episode already ended
        episode.waiting -= 1
        if not ticket.first and episode.first_waiting:
            return  # the first client's answer is still to come: that one ends the episode
        del self._open[ticket.key]
        finished = ColdStartEpisode(
            held_at=episode.held_at,
            answered_at=max(self._now(), episode.held_at),
            woke_at=episode.woke_at,
            backend_ready_at=episode.backend_ready_at,
        )
        task = asyncio.create_task(self._write(ticket.key, finished), name=f"cold start {ticket.key}")
        self._writing.add(task)
        task.add_done_callback(self._writing.discard)

    def gave_up(self, ticket: HeldTicket) -> None:
        """The held request of `ticket` ended without an answer (timed out, refused, the client left)."""
        episode = ticket.episode
        if self._open.get(ticket.key) is not episode:
            return
        episode.waiting -= 1
        if ticket.first:
            episode.first_waiting = False
        if episode.waiting <= 0:
            del self._open[ticket.key]  # nobody saw this cold start end: nothing to record
            log.info("cold start of %s ended with no request answered: not recorded", ticket.key)

    def open(self, key: ServiceKey) -> bool:
        """Whether `key` has a cold episode open."""
        return key in self._open

    async def close(self) -> None:
        """Let the records being written finish (within `CLOSE_GRACE_S`), then stop the rest."""
        tasks = list(self._writing)
        if not tasks:
            return
        _, late = await asyncio.wait(tasks, timeout=CLOSE_GRACE_S)
        for task in late:
            task.cancel()
        await asyncio.gather(*late, return_exceptions=True)

    async def _write(self, key: ServiceKey, episode: ColdStartEpisode) -> None:
        try:
            await self._writer.write(key, episode)
        except Exception as error:  # noqa: BLE001 - a record lost is logged and counted, never raised
            self._metrics.cold_start_records.labels(result=RecordResult.FAILED).inc()
            log.warning("recording the cold start of %s failed: %s", key, error)
            return
        self._metrics.cold_start_records.labels(result=RecordResult.OK).inc()
        log.info("cold start of %s recorded: %s", key, episode.to_annotation())
