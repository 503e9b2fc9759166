"""Leader election: the decision on a lease as observed, and the elector's loop on a fake clock.

The store here is in memory but keeps the API server's one rule that matters: an update carrying
another resourceVersion than the stored one is refused (409). The real Lease is exercised by
tests/operator_cluster/test_leader_election.py.
"""

from __future__ import annotations

import threading
from datetime import UTC, datetime

import pytest

from tailpilot.controllers.process.leader_election import (
    Action,
    Conflict,
    ElectionTiming,
    LeaderElector,
    LeaseRecord,
    Observation,
    decide,
    lost,
    next_record,
    observe,
    released_record,
)

TIMING = ElectionTiming()  # client-go's 15 / 10 / 2 s
WALL = datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)


def record(
    holder: str = "pod-a", *, duration: int = 15, renew: str = "t0", version: str = "1"
) -> LeaseRecord:
    return LeaseRecord(
        holder=holder,
        lease_duration_s=duration,
        acquire_time="t0",
        renew_time=renew,
        transitions=3,
        resource_version=version,
    )


# The decision --------------------------------------------------------------------------------


def test_no_lease_is_created() -> None:
    assert decide(None, identity="pod-b", now=100.0) is Action.CREATE


def test_anothers_lease_is_waited_for_until_it_expires_on_our_clock() -> None:
    seen = Observation(record("pod-a"), at=100.0)
    assert decide(seen, identity="pod-b", now=100.0) is Action.WAIT
    assert decide(seen, identity="pod-b", now=114.9) is Action.WAIT
    assert decide(seen, identity="pod-b", now=115.0) is Action.TAKE


def test_expiry_uses_the_records_duration_and_a_released_lease_is_taken_at_once() -> None:
    assert decide(Observation(record("pod-a", duration=1), at=100.0), identity="b", now=101.0) is Action.TAKE
    assert decide(Observation(record(""), at=100.0), identity="pod-b", now=100.0) is Action.TAKE


def test_our_own_lease_is_renewed_even_from_a_restarted_process() -> None:
    # A container restarted in the same pod has the same identity: the lease is its to renew.
    assert decide(Observation(record("pod-a"), at=100.0), identity="pod-a", now=100.0) is Action.RENEW


def test_expiry_is_measured_from_when_the_record_changed_not_from_its_renew_time() -> None:
    first = observe(None, record(renew="t0", version="1"), 100.0)
    # The same record read again (even at another resourceVersion) keeps its observation time...
    again = observe(first, record(renew="t0", version="2"), 110.0)
    assert again.at == 100.0 and decide(again, identity="b", now=116.0) is Action.TAKE
    # ... a renewal (a new renewTime) restarts it, whatever the holder's clock wrote.
    renewed = observe(first, record(renew="t1", version="3"), 110.0)
    assert renewed.at == 110.0 and decide(renewed, identity="b", now=116.0) is Action.WAIT


def test_records_written_keep_acquire_time_and_count_transitions() -> None:
    now = "2026-01-02T03:04:05.678901Z"
    created = next_record(Action.CREATE, None, identity="pod-b", timing=TIMING, wall_now=WALL)
    assert created == LeaseRecord("pod-b", 15, now, now, 0, "")
    renewed = next_record(Action.RENEW, record("pod-b"), identity="pod-b", timing=TIMING, wall_now=WALL)
    assert renewed == LeaseRecord("pod-b", 15, "t0", now, 3, "1")
    taken = next_record(Action.TAKE, record("pod-a"), identity="pod-b", timing=TIMING, wall_now=WALL)
    assert taken == LeaseRecord("pod-b", 15, now, now, 4, "1")
    assert released_record(taken, wall_now=WALL) == LeaseRecord("", 1, now, now, 4, "1")


def test_a_holder_stops_at_the_renew_deadline_before_anyone_may_take_over() -> None:
    assert not lost(100.0, 109.9, TIMING) and lost(100.0, 110.0, TIMING)
    # The margin: a standby that saw the renewal only then still waits 5 s more.
    assert TIMING.lease_duration_s - TIMING.renew_deadline_s == 5.0


@pytest.mark.parametrize(
    ("lease", "renew", "retry"),
    [(10.0, 10.0, 2.0), (15.0, 10.0, 9.0), (15.0, 10.0, 0.0), (15.5, 10.0, 2.0)],
)
def test_timings_that_leave_no_margin_are_refused(lease: float, renew: float, retry: float) -> None:
    with pytest.raises(ValueError):
        ElectionTiming(lease_duration_s=lease, renew_deadline_s=renew, retry_period_s=retry)


# The elector -----------------------------------------------------------------------------------


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def time(self) -> float:
        return 1_760_000_000.0 + self.now

    def monotonic(self) -> float:
        return self.now


class MemoryLease:
    """One Lease with the API server's optimistic concurrency; `failing` makes every call fail."""

    def __init__(self) -> None:
        self.stored: LeaseRecord | None = None
        self.version = 0
        self.failing = False
        self.writes: list[LeaseRecord] = []

    def read(self, *, timeout_s: float) -> LeaseRecord | None:
        if self.failing:
            raise OSError("API server unreachable")
        return self.stored

    def write(self, record: LeaseRecord, *, create: bool, timeout_s: float) -> LeaseRecord:
        if self.failing:
            raise OSError("API server unreachable")
        if create and self.stored is not None:
            raise Conflict("exists")
        if not create and (self.stored is None or record.resource_version != self.stored.resource_version):
            raise Conflict("stale resourceVersion")
        self.version += 1
        self.stored = LeaseRecord(
            record.holder,
            record.lease_duration_s,
            record.acquire_time,
            record.renew_time,
            record.transitions,
            str(self.version),
        )
        self.writes.append(self.stored)
        return self.stored


def elector(store: MemoryLease, identity: str, clock: FakeClock, lost_reasons: list[str]) -> LeaderElector:
    return LeaderElector(store, identity=identity, timing=TIMING, on_lost=lost_reasons.append, clock=clock)


def test_two_candidates_one_leader_and_a_takeover_only_after_expiry() -> None:
    store, clock, reasons = MemoryLease(), FakeClock(), []
    a, b = elector(store, "pod-a", clock, reasons), elector(store, "pod-b", clock, reasons)
    assert a.try_acquire_or_renew(timeout_s=2) and store.stored and store.stored.holder == "pod-a"
    assert not b.try_acquire_or_renew(timeout_s=2)
    # a dies; b keeps reading the same record and waits the full lease duration from when it saw it.
    clock.now += 14.0
    assert not b.try_acquire_or_renew(timeout_s=2)
    clock.now += 1.0
    assert b.try_acquire_or_renew(timeout_s=2)
    assert store.stored.holder == "pod-b" and store.stored.transitions == 1
    assert reasons == []


def test_two_standbys_racing_for_an_expired_lease_one_wins_by_resource_version() -> None:
    store, clock, reasons = MemoryLease(), FakeClock(), []
    store.write(record("dead-pod", version=""), create=True, timeout_s=1)
    b, c = elector(store, "pod-b", clock, reasons), elector(store, "pod-c", clock, reasons)
    assert not b.try_acquire_or_renew(timeout_s=2) and not c.try_acquire_or_renew(timeout_s=2)
    clock.now += 15.0
    # Both read the expired record; b writes first, c's write carries the old version and is refused.
    stale = store.stored
    assert b.try_acquire_or_renew(timeout_s=2)
    store_read = store.read
    store.read = lambda *, timeout_s: stale  # type: ignore[method-assign]  # c read before b wrote
    assert not c.try_acquire_or_renew(timeout_s=2)
    store.read = store_read  # type: ignore[method-assign]
    assert store.stored.holder == "pod-b"


def test_a_holder_that_cannot_renew_stops_within_the_deadline() -> None:
    store, clock, reasons = MemoryLease(), FakeClock(), []
    a = elector(store, "pod-a", clock, reasons)
    assert a.try_acquire_or_renew(timeout_s=2)
    renewed_at = clock.now
    store.failing = True
    waits: list[float] = []

    def advance(timeout: float | None = None) -> bool:  # the fake clock moves by what run() waits
        waits.append(timeout or 0.0)
        clock.now += timeout or 0.0
        return False

    a.stopped.wait = advance  # type: ignore[method-assign]
    a._last_renewed_at = renewed_at
    assert not a._renew_within_deadline()
    assert clock.now - renewed_at >= TIMING.renew_deadline_s
    # ... and not later than one retry step past it: the last request was bounded by the time left.
    assert clock.now - renewed_at <= TIMING.renew_deadline_s + TIMING.retry_period_s / 4


def test_run_acquires_renews_and_reports_a_lost_lease_to_on_lost() -> None:
    store, reasons = MemoryLease(), []
    started = threading.Event()
    fast = ElectionTiming(lease_duration_s=1, renew_deadline_s=0.5, retry_period_s=0.05)
    a = LeaderElector(
        store, identity="pod-a", timing=fast, on_lost=reasons.append, on_started_leading=started.set
    )
    thread = threading.Thread(target=a.run, daemon=True)
    thread.start()
    assert started.wait(5) and a.leading.is_set()
    # Another process takes the lease (as after a partition): a's next renewal sees it and stops.
    assert store.stored is not None
    store.write(
        LeaseRecord("pod-b", 15, "x", "x", store.stored.transitions + 1, store.stored.resource_version),
        create=False,
        timeout_s=1,
    )
    thread.join(5)
    assert not thread.is_alive() and not a.leading.is_set()
    assert len(reasons) == 1 and "'pod-b'" in reasons[0], reasons


def test_release_hands_over_at_once() -> None:
    store, clock, reasons = MemoryLease(), FakeClock(), []
    a, b = elector(store, "pod-a", clock, reasons), elector(store, "pod-b", clock, reasons)
    assert a.try_acquire_or_renew(timeout_s=2)
    assert not b.try_acquire_or_renew(timeout_s=2)
    assert a.release()
    assert store.stored and store.stored.holder == "" and store.stored.lease_duration_s == 1
    assert b.try_acquire_or_renew(timeout_s=2)  # no wait for the lease duration
    assert store.stored.holder == "pod-b"
    assert not a.release()  # not the holder any more: nothing written
    assert store.stored.holder == "pod-b"
