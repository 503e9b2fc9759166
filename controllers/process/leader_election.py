"""Leader election on a `coordination.k8s.io/v1` Lease: only the holder runs the operator.

Why not kopf's peering: kopf's peering objects (a CRD of their own) tell operators of different
priorities to pause for the highest one, and operators of equal priority all freeze; nothing
expires, nothing fences a replica that stopped renewing. Here two replicas of one Deployment are
equals, and one of them must act while the other waits, taking over when the first one dies.

The semantics are client-go's `tools/leaderelection`, the one every Kubernetes controller uses:

- the lease names its holder (`holderIdentity`: the pod name), how long it is good for
  (`leaseDurationSeconds`), when it was acquired and last renewed, and how often it changed hands;
- a candidate measures expiry on its own clock, from the moment it *observed* the lease record
  change, never from the holder's `renewTime` (clocks of two nodes need not agree; their rates do);
- every write is an update carrying the `resourceVersion` read, so of two candidates taking an
  expired lease at once, the API server lets one win and answers the other 409 (optimistic
  concurrency; no write is forced);
- the holder renews every retry period; when it has not renewed for the renew deadline it stops
  acting. The defaults (lease 15 s, renew deadline 10 s, retry 2 s) are client-go's: a holder
  stops at least 5 s before any candidate may take over, which is the margin for the two
  processes' clocks to run at different rates and for a write in flight;
- a holder that stops cleanly releases the lease (empty holder, one second), so a standby takes
  over at its next retry instead of after the lease duration.

Stopping is exiting: the operator's reconciles run in worker threads, its loops in kopf's tasks,
and a write already sent cannot be called back, so a replica that lost the lease leaves the process
(`on_lost`), and the Deployment restarts it as a standby. The election runs in its own thread with
its own API client: neither a busy event loop nor a reconcile pool that is all in use can delay
a renewal past the deadline, and each request is bounded by the time left before it.

The decision (given the lease record, when this replica observed it, and now: create, take,
renew or wait) and the records it writes are pure functions below; `LeaseLock` is the only I/O,
`LeaderElector` the loop between them, on an injected clock.
"""

from __future__ import annotations

import enum
import logging
import random
import threading
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any, Final, Protocol

from kubernetes.client.exceptions import ApiException

from tailpilot.controllers.core.clock import SYSTEM_CLOCK, Clock, iso_time
from tailpilot.controllers.core.seams import LeaseKube

log = logging.getLogger(__name__)

#: client-go's defaults (`LeaderElectionConfig`, as kube-controller-manager and controller-runtime use them).
DEFAULT_LEASE_DURATION_S: Final = 15.0
DEFAULT_RENEW_DEADLINE_S: Final = 10.0
DEFAULT_RETRY_PERIOD_S: Final = 2.0
#: client-go requires renewDeadline > JitterFactor * retryPeriod, with JitterFactor 1.2.
JITTER_FACTOR: Final = 1.2


@dataclass(frozen=True, kw_only=True)
class ElectionTiming:
    """How long a lease is good for, how long a holder may fail to renew it, how often to try.

    Raises:
        ValueError: When the three do not leave a holder time to stop before another may take over.
    """

    lease_duration_s: float = DEFAULT_LEASE_DURATION_S
    renew_deadline_s: float = DEFAULT_RENEW_DEADLINE_S
    retry_period_s: float = DEFAULT_RETRY_PERIOD_S

    def __post_init__(self) -> None:
        if not self.lease_duration_s > self.renew_deadline_s:
            raise ValueError(
                f"the lease duration ({self.lease_duration_s} s) must exceed the renew deadline "
                f"({self.renew_deadline_s} s): a holder stops before anyone may take over"
            )
        if not self.renew_deadline_s > JITTER_FACTOR * self.retry_period_s > 0:
            raise ValueError(
                f"the renew deadline ({self.renew_deadline_s} s) must exceed {JITTER_FACTOR} x the retry "
                f"period ({self.retry_period_s} s, above zero): a holder retries before it gives up"
            )
        if self.lease_duration_s != int(self.lease_duration_s) or self.lease_duration_s < 1:
            raise ValueError(
                f"the lease duration is whole seconds (the Lease's field), got {self.lease_duration_s}"
            )


@dataclass(frozen=True)
class LeaseRecord:
    """The Lease's spec as the election reads it, and the version it was read at."""

    holder: str  # "" when released
    lease_duration_s: int
    acquire_time: str | None
    renew_time: str | None
    transitions: int
    resource_version: str = ""

    def same_record(self, other: LeaseRecord | None) -> bool:
        """Whether two reads show the same record (the version aside: a no-op update changes it)."""
        return other is not None and replace(self, resource_version="") == replace(other, resource_version="")


@dataclass(frozen=True)
class Observation:
    """The record a candidate last saw change, and when (its own monotonic clock)."""

    record: LeaseRecord
    at: float


class Action(enum.Enum):
    """What a candidate does with the lease it just read."""

    CREATE = "create"  # no Lease yet
    TAKE = "take"  # released, or expired on our clock: take it over (one more transition)
    RENEW = "renew"  # ours: renew it
    WAIT = "wait"  # another's, not expired


def observe(previous: Observation | None, record: LeaseRecord, now: float) -> Observation:
    """The observation after reading `record`: its clock restarts only when the record changed."""
    if previous is not None and previous.record.same_record(record):
        return Observation(record=record, at=previous.at)
    return Observation(record=record, at=now)


def expired(observation: Observation, now: float) -> bool:
    """Whether the lease ran out on this candidate's clock (the record's own duration, not ours)."""
    return now >= observation.at + observation.record.lease_duration_s


def decide(observation: Observation | None, *, identity: str, now: float) -> Action:
    """Create, take, renew or wait, from the lease as observed (None: there is no Lease)."""
    if observation is None:
        return Action.CREATE
    record = observation.record
    if record.holder == identity:
        return Action.RENEW
    if not record.holder or expired(observation, now):
        return Action.TAKE
    return Action.WAIT


def next_record(
    action: Action, current: LeaseRecord | None, *, identity: str, timing: ElectionTiming, wall_now: datetime
) -> LeaseRecord:
    """The record `action` writes: this holder, renewed now.

    A renewal keeps the acquire time and the count; a take-over counts one more transition.
    """
    now = _micro_time(wall_now)
    base = LeaseRecord(
        holder=identity,
        lease_duration_s=int(timing.lease_duration_s),
        acquire_time=now,
        renew_time=now,
        transitions=0,
    )
    if current is None:
        return base
    if action is Action.RENEW:
        return replace(
            base,
            acquire_time=current.acquire_time or now,
            transitions=current.transitions,
            resource_version=current.resource_version,
        )
    return replace(base, transitions=current.transitions + 1, resource_version=current.resource_version)


def released_record(current: LeaseRecord, *, wall_now: datetime) -> LeaseRecord:
    """What a holder writes when it stops cleanly: no holder, one second, so a standby takes it at once."""
    now = _micro_time(wall_now)
    return replace(current, holder="", lease_duration_s=1, acquire_time=now, renew_time=now)


def lost(last_renewed_at: float, now: float, timing: ElectionTiming) -> bool:
    """Whether a holder that last renewed at `last_renewed_at` (request sent) must stop acting now."""
    return now - last_renewed_at >= timing.renew_deadline_s


def _micro_time(moment: datetime) -> str:
    """A Lease's MicroTime (RFC 3339 with microseconds, UTC)."""
    seconds = iso_time(moment)
    return f"{seconds[:-1]}.{moment.microsecond:06d}Z"


class Conflict(Exception):
    """The Lease changed since it was read (409), or was created meanwhile: read it again."""


class LeaseStore(Protocol):
    """Where the lease lives: the API server (`LeaseLock`), or an in-memory one in tests."""

    def read(self, *, timeout_s: float) -> LeaseRecord | None:
        """The lease, or None when there is none."""
        ...

    def write(self, record: LeaseRecord, *, create: bool, timeout_s: float) -> LeaseRecord:
        """Create it, or update it at `record.resource_version`; the stored record, or `Conflict`."""
        ...


@dataclass(frozen=True)
class LeaseLock:
    """The Lease `namespace/name` through the API server: the election's only I/O."""

    kube: LeaseKube
    namespace: str
    name: str

    def read(self, *, timeout_s: float) -> LeaseRecord | None:  # noqa: D102
        lease = self.kube.read_lease(self.namespace, self.name, timeout_s=timeout_s)
        return None if lease is None else _record_of(lease)

    def write(self, record: LeaseRecord, *, create: bool, timeout_s: float) -> LeaseRecord:  # noqa: D102
        # A dict, not the typed V1Lease: its times are datetimes, which the client writes without
        # the microseconds when they are zero, and a MicroTime wants them. The times stay strings.
        metadata: dict[str, str] = {"name": self.name, "namespace": self.namespace}
        body: dict[str, Any] = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": metadata,
            "spec": {
                "holderIdentity": record.holder,
                "leaseDurationSeconds": record.lease_duration_s,
                "acquireTime": record.acquire_time,
                "renewTime": record.renew_time,
                "leaseTransitions": record.transitions,
            },
        }
        if not create:
            # The version read: the API server refuses the update (409) if anyone wrote since.
            metadata["resourceVersion"] = record.resource_version
        try:
            return _record_of(self.kube.write_lease(body, create=create, timeout_s=timeout_s))
        except ApiException as error:
            if error.status == 409:
                raise Conflict(f"Lease {self.namespace}/{self.name} changed since it was read") from error
            raise


def _record_of(lease: dict[str, Any]) -> LeaseRecord:
    spec = lease.get("spec") or {}
    return LeaseRecord(
        holder=spec.get("holderIdentity") or "",
        lease_duration_s=int(spec.get("leaseDurationSeconds") or 0),
        acquire_time=spec.get("acquireTime"),
        renew_time=spec.get("renewTime"),
        transitions=int(spec.get("leaseTransitions") or 0),
        resource_version=(lease.get("metadata") or {}).get("resourceVersion", ""),
    )


class LeaderElector:
    """Acquire the lease, then renew it until stopped; `on_lost` when a renewal misses its deadline.

    `run` is the election's thread. `leading` is set while this replica holds the lease;
    `on_started_leading` is called once, from that thread, when it first does.
    """

    def __init__(
        self,
        store: LeaseStore,
        *,
        identity: str,
        timing: ElectionTiming,
        on_lost: Callable[[str], None],
        on_started_leading: Callable[[], None] = lambda: None,
        clock: Clock = SYSTEM_CLOCK,
        rng: random.Random | None = None,
    ):
        if not identity:
            raise ValueError("a leader election identity is required (the pod name)")
        self.store = store
        self.identity = identity
        self.timing = timing
        self.on_lost = on_lost
        self.on_started_leading = on_started_leading
        self.clock = clock
        self.leading = threading.Event()
        self.stopped = threading.Event()
        self._rng = rng or random.Random()
        self._observed: Observation | None = None
        self._last_renewed_at: float | None = None

    @property
    def observed_holder(self) -> str:
        """The holder this replica last read ("" when none or unknown)."""
        return self._observed.record.holder if self._observed else ""

    def try_acquire_or_renew(self, *, timeout_s: float) -> bool:
        """One read and, where the decision says so, one write; whether this replica holds the lease now."""
        sent_at = self.clock.monotonic()
        try:
            current = self.store.read(timeout_s=timeout_s)
            now = self.clock.monotonic()
            self._observed = None if current is None else observe(self._observed, current, now)
            action = decide(self._observed, identity=self.identity, now=now)
            if action is Action.WAIT:
                return False
            record = next_record(
                action,
                current,
                identity=self.identity,
                timing=self.timing,
                wall_now=datetime.fromtimestamp(self.clock.time(), UTC),
            )
            written = self.store.write(record, create=action is Action.CREATE, timeout_s=timeout_s)
        except Conflict as error:
            log.info("lease: %s", error)
            return False
        except (ApiException, OSError) as error:  # urllib3's timeouts and connection errors are OSErrors
            log.warning("lease: %s", getattr(error, "reason", None) or error)
            return False
        self._observed = Observation(record=written, at=self.clock.monotonic())
        # The deadline counts from before the request was sent: the write may have landed at once.
        self._last_renewed_at = sent_at
        if action is not Action.RENEW:
            log.info(
                "lease: %s took it (%s, transition %d)", self.identity, action.value, written.transitions
            )
        return True

    def run(self) -> None:
        """Acquire (a standby waits here), then renew every retry period; return when stopped or lost."""
        while not self.stopped.is_set():
            if self.try_acquire_or_renew(timeout_s=self.timing.retry_period_s):
                break
            # Jittered, as client-go does while acquiring, so standbys do not retry in lockstep.
            self.stopped.wait(self.timing.retry_period_s * (1 + self._rng.uniform(0, 0.2)))
        else:
            return
        self.leading.set()
        self.on_started_leading()
        while not self.stopped.wait(self.timing.retry_period_s):
            if not self._renew_within_deadline():
                self.leading.clear()
                self.on_lost(
                    f"lease not renewed within the renew deadline ({self.timing.renew_deadline_s:g} s)"
                    f"; holder now {self.observed_holder or 'unknown'!r}"
                )
                return

    def _renew_within_deadline(self) -> bool:
        """Retry renewing until it succeeds or the deadline passes; each request bounded by the time left."""
        assert self._last_renewed_at is not None
        while True:
            now = self.clock.monotonic()
            if lost(self._last_renewed_at, now, self.timing):
                return False
            left = self.timing.renew_deadline_s - (now - self._last_renewed_at)
            if self.try_acquire_or_renew(timeout_s=max(0.1, min(self.timing.retry_period_s, left))):
                return True
            if self.observed_holder not in ("", self.identity):
                return False  # another holds it: we were not renewing, stop now
            if self.stopped.wait(min(self.timing.retry_period_s / 4, max(0.0, left))):
                return True  # stopping: `release` decides what to write

    def stop(self) -> None:
        """End `run` (from another thread)."""
        self.stopped.set()

    def release(self, *, timeout_s: float = 2.0) -> bool:
        """Hand the lease over at once (a clean stop, after the operator stopped acting); whether it was."""
        self.stop()
        self.leading.clear()
        observed = self._observed
        if observed is None or observed.record.holder != self.identity:
            return False
        try:
            record = released_record(observed.record, wall_now=datetime.fromtimestamp(self.clock.time(), UTC))
            self._observed = Observation(
                record=self.store.write(record, create=False, timeout_s=timeout_s), at=self.clock.monotonic()
            )
        except (Conflict, ApiException, OSError) as error:
            log.warning("lease: not released (%s); it expires on its own", error)
            return False
        log.info("lease: released by %s", self.identity)
        return True
