"""The simulator's dynamic batcher against hand-worked cases."""

from __future__ import annotations

import numpy as np
import pytest

from tailpilot.api.autoscaling import BatchingConfig
from tailpilot.api.engine import ServiceTimeModel
from tailpilot.bench.baselines import Static
from tailpilot.bench.simulator import FleetView, SimConfig, SimResult, Target, simulate
from tailpilot.policy.signals import PodRead, arrival_counts

# 100 ms per batch whatever its size, no jitter: every time below is exact.
FLAT = ServiceTimeModel(intercept_ms=100.0, per_item_ms=0.0, jitter_cv=0.0)


def run(
    arrivals: list[float], cfg: BatchingConfig, *, replicas: int = 1, duration_s: float = 5.0
) -> SimResult:
    return simulate(
        arrivals_s=np.asarray(arrivals),
        config=SimConfig(service=FLAT, duration_s=duration_s, startup_s=0.0),
        controller=Static(replicas=replicas, batching=cfg),
    )


def test_batch_forms_at_the_preferred_size():
    cfg = BatchingConfig(max_batch_size=8, preferred_batch_sizes=(4,), max_queue_delay_us=500_000)
    res = run([0.0, 0.01, 0.02, 0.03], cfg)
    assert res.batch_size.tolist() == [4]
    assert res.start_s.tolist() == pytest.approx([0.03] * 4)
    assert res.done_s.tolist() == pytest.approx([0.13] * 4)


def test_queue_delay_releases_a_partial_batch():
    cfg = BatchingConfig(max_batch_size=8, max_queue_delay_us=50_000)
    res = run([0.0, 0.01, 0.02], cfg)
    assert res.batch_size.tolist() == [3]
    assert res.start_s.tolist() == pytest.approx([0.05] * 3)


def test_max_batch_caps_the_batch():
    cfg = BatchingConfig(max_batch_size=4)
    # The first request runs alone (0-0.1 s); six queue behind it and leave as 4 then 2.
    res = run([0.0, 0.01, 0.02, 0.03, 0.04, 0.05, 0.06], cfg)
    assert res.batch_size.tolist() == [1, 4, 2]
    assert res.batch_start_s.tolist() == pytest.approx([0.0, 0.1, 0.2])


def test_instances_run_batches_in_parallel():
    two = BatchingConfig(max_batch_size=1, instances_per_replica=2)
    one = BatchingConfig(max_batch_size=1, instances_per_replica=1)
    assert run([0.0, 0.0], two).done_s.tolist() == pytest.approx([0.1, 0.1])
    assert run([0.0, 0.0], one).done_s.tolist() == pytest.approx([0.1, 0.2])


class _ScaleUpAtFirstTick:
    tick_s = 1.0

    def initial(self) -> Target:
        return Target(1, BatchingConfig(max_batch_size=1))

    def decide(self, view: FleetView) -> Target:
        return Target(2, BatchingConfig(max_batch_size=1))


def test_new_replica_serves_only_after_its_startup_time_and_costs_from_the_request():
    # One request every 50 ms for 10 s; one replica (10/s) cannot keep up with 20/s.
    arrivals = np.arange(0.0, 10.0, 0.05)
    res = simulate(
        arrivals_s=arrivals,
        config=SimConfig(service=FLAT, duration_s=10.0, startup_s=5.0),
        controller=_ScaleUpAtFirstTick(),
    )
    ready = dict(zip(res.sample_s.tolist(), res.sample_ready.tolist(), strict=True))
    assert ready[5.0] == 1 and ready[6.0] == 2
    assert res.actions == [(1.0, 1, 2)]
    assert res.replica_seconds == pytest.approx(10.0 + 9.0)
    # Nothing starts on the second replica before t = 6 s: until then starts are 100 ms apart.
    starts = np.sort(res.start_s[res.start_s < 6.0])
    assert np.all(np.diff(starts) >= 0.1 - 1e-9)
    assert np.any(np.diff(np.sort(res.start_s[res.start_s >= 6.0])) < 0.1 - 1e-9)


def test_batching_change_applies_to_new_batches_after_reload():
    class Rebatch:
        tick_s = 1.0

        def initial(self) -> Target:
            return Target(1, BatchingConfig(max_batch_size=1))

        def decide(self, view: FleetView) -> Target:
            return Target(1, BatchingConfig(max_batch_size=8))

    arrivals = np.arange(0.0, 6.0, 0.02)  # 50/s on a replica serving 10 batches/s
    res = simulate(
        arrivals_s=arrivals,
        config=SimConfig(service=FLAT, duration_s=6.0, startup_s=0.0, reload_s=1.5),
        controller=Rebatch(),
    )
    before = res.batch_size[res.batch_start_s < 2.5 - 1e-9]
    after = res.batch_size[res.batch_start_s > 2.6]
    assert before.max() == 1
    assert after.max() == 8


class _Recorder(Static):
    """A static fleet that reads its pods' counters every second, as the operator's fast loop does."""

    tick_s = 1.0

    def __init__(self, *, replicas: int, batching: BatchingConfig) -> None:
        super().__init__(replicas=replicas, batching=batching)
        self.reads: list[PodRead] = []

    def decide(self, view: FleetView) -> Target:
        self.reads.append(PodRead(at_s=view.now_s, pods=view.pod_counters()))
        return super().decide(view)


def test_arrival_counts_are_completions_plus_queue_growth_per_read():
    # One replica at max batch 1 (10 req/s) gets 20 req/s for 2 s from t = 3.5: the queue holds
    # what it cannot serve yet, and the counts still show the arrivals, not the completions.
    arrivals = [3.5 + i * 0.05 for i in range(40)]
    recorder = _Recorder(replicas=1, batching=BatchingConfig(max_batch_size=1))
    simulate(
        arrivals_s=np.asarray(arrivals),
        config=SimConfig(service=FLAT, duration_s=12.0, startup_s=0.0),
        controller=recorder,
    )
    reads = [r for r in recorder.reads if r.at_s <= 10.0]
    counts = arrival_counts(reads, lookback_s=10.0, bin_s=1.0)
    assert reads[-1].at_s == 10.0
    assert len(counts) == 9  # reads at 1..10 s: the bins between them, oldest first
    # A request runs 100 ms before it counts as done and Triton's pending gauge leaves out the one
    # executing, so a bin is off by at most one at each edge; in all, the 40 arrivals.
    assert counts[:2] == (0.0, 0.0)
    assert [abs(c - want) <= 1 for c, want in zip(counts[2:5], (10, 20, 10), strict=True)] == [True] * 3
    assert sum(counts) == 40


class _HoldReplicaZeroOut:
    """Two replicas from the start; replica 0 held out of the rotation from the first check on."""

    tick_s = 100.0
    rotation_period_s = 1.0

    def __init__(self) -> None:
        #: (check time, requests each pod completed in the second before it)
        self.served: list[tuple[float, dict[str, int]]] = []

    def initial(self) -> Target:
        return Target(2, BatchingConfig(max_batch_size=1))

    def decide(self, view: FleetView) -> Target:
        return self.initial()

    def rotation(self, view: FleetView) -> frozenset[str]:
        assert set(view.pod_counters()) == {"replica-0", "replica-1"}
        self.served.append((view.now_s, {w.pod: w.success_count for w in view.pod_windows(1.0)}))
        return frozenset({"replica-0"})


def test_a_held_replica_gets_no_new_requests_once_the_endpoints_change():
    # 10 req/s over two replicas of 10/s each: round robin alternates until the first check (1 s)
    # reaches the endpoints a second later (rotation_delay_s); from 2 s on replica 1 takes all.
    ctl = _HoldReplicaZeroOut()
    res = simulate(
        arrivals_s=np.arange(0.0, 5.0, 0.1),
        config=SimConfig(service=FLAT, duration_s=5.0, startup_s=0.0, rotation_delay_s=1.0),
        controller=ctl,
    )
    served = dict(ctl.served)
    assert served[1.0] == {"replica-0": 5, "replica-1": 5}
    # (The second up to 3 s may still complete a request replica 0 took just before 2 s.)
    assert served[4.0] == {"replica-0": 0, "replica-1": 10}
    # Replica 1 alone keeps up with 10 req/s: nobody waits.
    assert np.allclose(res.start_s, np.arange(0.0, 5.0, 0.1))
