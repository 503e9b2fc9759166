"""Where a cold start's time went: the activator's episode and the first serving pod's timestamps, in parts.

The total is what the first client waited: from the moment the activator held its request
(`heldAt`) to the moment the replica's answer to it was complete (`answeredAt`), both the
activator's, to the millisecond. Between them sit the boundaries, in the order a cold start
passes them:

- `wakeRequest` (heldAt to wokeAt): the activator's wake patch reaching the API server.
- `podCreation` (wokeAt to the pod's creation): the operator's pass, the Deployment and ReplicaSet
  controllers.
- `scheduling` (creation to PodScheduled): the scheduler (and a node or GPU freed or added).
- `podStartAndImagePull` (PodScheduled to the engine fetch's start): the sandbox, the volumes and
  the serving image pulled (the init container runs Triton's image).
- `engineFetch` (the engine fetch's start to Initialized): the init container copying the engine
  from the store into the model repository.
- `containerStart` (Initialized to Triton's start): the Triton container created and started.
- `serverStartAndModelLoad` (Triton's start to Ready): Triton starting, loading the model and
  running its warm-up (which it does before it reports ready), and the wait for the next startup
  and readiness probes.
- `endpointPropagation` (Ready to backendReadyAt): the EndpointSlice listing the pod and the
  activator's watch seeing it.
- `firstInference` (backendReadyAt to answeredAt): the forward, the first inference and its answer.

`wokeAt`, `backendReadyAt`, `heldAt` and `answeredAt` are the activator's clock, to the
millisecond. The pod's boundaries (created, PodScheduled, the init container's start, Initialized,
Triton's start, Ready) are Kubernetes timestamps, **to the second** and truncated (the API server,
the kubelet): each may read up to one second early, so each part next to one of them is exact only
to about a second, and the clocks of the API server, the node and the activator are assumed in sync.
The total is exact.

`break_down` makes the parts add up exactly (integer milliseconds) to `answeredAt - heldAt`, however
the timestamps read: each boundary is clamped into [heldAt, answeredAt] and never before the one
before it, so a part is never negative, and a boundary read a second early only moves
time into the part after it. A boundary that is not known (no wake in this episode, a pod gone, a
container status the kubelet did not write) merges the two parts around it into one, named
`first+second`, rather than guess where it lay.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from tailpilot.api.cold_start import ColdStartEpisode, parse_time

PART_WAKE_REQUEST = "wakeRequest"
PART_POD_CREATION = "podCreation"
PART_SCHEDULING = "scheduling"
PART_POD_START_AND_IMAGE_PULL = "podStartAndImagePull"
PART_ENGINE_FETCH = "engineFetch"
PART_CONTAINER_START = "containerStart"
PART_SERVER_START_AND_MODEL_LOAD = "serverStartAndModelLoad"
PART_ENDPOINT_PROPAGATION = "endpointPropagation"
PART_FIRST_INFERENCE = "firstInference"

#: Every part, in the order a cold start passes them.
PARTS = (
    PART_WAKE_REQUEST,
    PART_POD_CREATION,
    PART_SCHEDULING,
    PART_POD_START_AND_IMAGE_PULL,
    PART_ENGINE_FETCH,
    PART_CONTAINER_START,
    PART_SERVER_START_AND_MODEL_LOAD,
    PART_ENDPOINT_PROPAGATION,
    PART_FIRST_INFERENCE,
)

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MS = timedelta(milliseconds=1)


def epoch_ms(moment: datetime) -> int:
    """`moment` in whole milliseconds since the epoch (floored; exact integer arithmetic)."""
    return (moment - _EPOCH) // _MS


@dataclass(frozen=True)
class PodMilestones:
    """A serving pod's timestamps on its way to Ready (Kubernetes': to the second; None: not known)."""

    name: str = ""
    created: datetime | None = None
    scheduled: datetime | None = None
    #: The init container (the engine fetch) started.
    fetch_started: datetime | None = None
    initialized: datetime | None = None
    #: The Triton container started.
    server_started: datetime | None = None
    ready: datetime | None = None


@dataclass(frozen=True)
class ColdStartPart:
    """One part of a cold start: its name (`first+second` when merged) and its length."""

    name: str
    milliseconds: int

    @property
    def seconds(self) -> float:
        """The part's length in seconds."""
        return self.milliseconds / 1000


@dataclass(frozen=True)
class ColdStartBreakdown:
    """A cold start in consecutive parts that add up to its total exactly."""

    held_at: datetime
    answered_at: datetime
    parts: tuple[ColdStartPart, ...]
    #: The serving pod whose timestamps the parts read ("" when none was found).
    pod: str = ""

    @property
    def total_milliseconds(self) -> int:
        """`answeredAt - heldAt` in milliseconds: the sum of the parts."""
        return epoch_ms(self.answered_at) - epoch_ms(self.held_at)


def _boundaries(episode: ColdStartEpisode, pod: PodMilestones) -> list[tuple[str, datetime | None]]:
    """Each part with the time that ends it (None: unknown), in order; the last ends at answeredAt."""
    return [
        (PART_WAKE_REQUEST, episode.woke_at),
        (PART_POD_CREATION, pod.created),
        (PART_SCHEDULING, pod.scheduled),
        (PART_POD_START_AND_IMAGE_PULL, pod.fetch_started),
        (PART_ENGINE_FETCH, pod.initialized),
        (PART_CONTAINER_START, pod.server_started),
        (PART_SERVER_START_AND_MODEL_LOAD, pod.ready),
        (PART_ENDPOINT_PROPAGATION, episode.backend_ready_at),
        (PART_FIRST_INFERENCE, episode.answered_at),
    ]


def break_down(episode: ColdStartEpisode, pod: PodMilestones | None) -> ColdStartBreakdown:
    """The episode's total in consecutive parts (see the module): never negative, summing exactly."""
    pod = pod or PodMilestones()
    start, end = epoch_ms(episode.held_at), epoch_ms(episode.answered_at)
    parts: list[ColdStartPart] = []
    merged: list[str] = []
    previous = start
    for name, at in _boundaries(episode, pod):
        merged.append(name)
        if at is None:
            continue  # an unknown boundary: this part runs on into the next
        # Clamped into [previous, end]: a timestamp truncated to the second, or from a clock a
        # little off, moves time between neighbouring parts but never makes one negative.
        boundary = min(max(epoch_ms(at), previous), end)
        parts.append(ColdStartPart("+".join(merged), boundary - previous))
        previous, merged = boundary, []
    return ColdStartBreakdown(
        held_at=episode.held_at, answered_at=episode.answered_at, parts=tuple(parts), pod=pod.name
    )


# ---- the pod's timestamps --------------------------------------------------------------------------


def _time(value: object) -> datetime | None:
    try:
        return parse_time(value)
    except ValueError:
        return None


def _condition_true_at(pod: Mapping[str, Any], type_: str) -> datetime | None:
    """When the pod's condition `type_` last turned True (None: not True, or no time)."""
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if condition.get("type") == type_ and condition.get("status") == "True":
            return _time(condition.get("lastTransitionTime"))
    return None


def _first_started(statuses: Iterable[Mapping[str, Any]], container: str) -> datetime | None:
    """When `container` first started, as far as its status tells (its current run or the one before).

    The earliest of the two: a container that crashed and was restarted on the way to Ready spent
    that time in its part too.
    """
    for status in statuses:
        if status.get("name") != container:
            continue
        runs = [status.get("state") or {}, status.get("lastState") or {}]
        starts = [
            _time(run[phase].get("startedAt"))
            for run in runs
            for phase in ("running", "terminated")
            if isinstance(run.get(phase), Mapping)
        ]
        known = [start for start in starts if start is not None]
        return min(known) if known else None
    return None


def pod_milestones(pod: Mapping[str, Any], *, fetch_container: str, server_container: str) -> PodMilestones:
    """The timestamps of a serving pod (its init container `fetch_container`, its `server_container`)."""
    metadata, status = pod.get("metadata") or {}, pod.get("status") or {}
    return PodMilestones(
        name=str(metadata.get("name") or ""),
        created=_time(metadata.get("creationTimestamp")),
        scheduled=_condition_true_at(pod, "PodScheduled"),
        fetch_started=_first_started(status.get("initContainerStatuses") or [], fetch_container),
        initialized=_condition_true_at(pod, "Initialized"),
        server_started=_first_started(status.get("containerStatuses") or [], server_container),
        ready=_condition_true_at(pod, "Ready"),
    )


def first_ready_since(pods: Sequence[Mapping[str, Any]], since: datetime) -> Mapping[str, Any] | None:
    """The pod that turned Ready first at or after `since` (to the second, as Kubernetes keeps it).

    `since` is floored to its second: a Ready time is truncated to the second, so a pod Ready in the
    same second as `since` reads as that second.
    """
    floor = since.astimezone(UTC).replace(microsecond=0)
    ready = [
        (at, str((pod.get("metadata") or {}).get("name") or ""), pod)
        for pod in pods
        if (at := _condition_true_at(pod, "Ready")) is not None and at >= floor
    ]
    if not ready:
        return None
    return min(ready, key=lambda entry: (entry[0], entry[1]))[2]
