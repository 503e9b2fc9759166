"""The oracle against brute force on tiny cases, and its schedules."""

from __future__ import annotations

import numpy as np
import pytest

from tailpilot.api.autoscaling import BatchingConfig
from tailpilot.api.engine import ServiceTimeModel
from tailpilot.bench.oracle import ScheduledOracle, WindowNeed, window_need, window_p99_ms
from tailpilot.bench.simulator import SimConfig, simulate

SERVICE = ServiceTimeModel(intercept_ms=20.0, per_item_ms=10.0, jitter_cv=0.1)
CANDIDATES = [
    BatchingConfig(max_batch_size=4),
    BatchingConfig(max_batch_size=1),
    BatchingConfig(max_batch_size=4, max_queue_delay_us=20_000),
]


def brute_force(arrivals, *, slo_ms, max_replicas, seed, judge_from_s=0.0):
    for n in range(1, max_replicas + 1):
        for cand in CANDIDATES:
            if (
                window_p99_ms(
                    arrivals, replicas=n, batching=cand, service=SERVICE, seed=seed, judge_from_s=judge_from_s
                )
                <= slo_ms
            ):
                return n, cand
    return None


@pytest.mark.parametrize("case", range(6))
def test_window_need_matches_brute_force(case):
    rng = np.random.default_rng(case)
    rate = [5.0, 40.0, 90.0, 150.0, 250.0, 60.0][case]
    arrivals = np.sort(rng.uniform(0.0, 2.0, int(rate * 2)))
    slo = 120.0
    expected = brute_force(arrivals, slo_ms=slo, max_replicas=8, seed=case)
    got = window_need(
        arrivals, window_s=2.0, service=SERVICE, slo_ms=slo, candidates=CANDIDATES, max_replicas=8, seed=case
    )
    assert expected is not None
    assert (got.replicas, got.batching) == expected


def test_window_need_ignores_the_warmup_requests_when_judging():
    rng = np.random.default_rng(7)
    arrivals = np.sort(np.concatenate([rng.uniform(0, 1, 200), rng.uniform(1, 2, 10)]))
    slo = 120.0
    expected = brute_force(arrivals, slo_ms=slo, max_replicas=8, seed=3, judge_from_s=1.0)
    got = window_need(
        arrivals,
        window_s=1.0,
        service=SERVICE,
        slo_ms=slo,
        candidates=CANDIDATES,
        max_replicas=8,
        seed=3,
        judge_from_s=1.0,
        start_at=1,
    )
    assert expected is not None and (got.replicas, got.batching) == expected
    # The burst before the judged window needs more replicas than the light window alone.
    alone = window_need(
        arrivals[arrivals >= 1.0] - 1.0,
        window_s=1.0,
        service=SERVICE,
        slo_ms=slo,
        candidates=CANDIDATES,
        max_replicas=8,
        seed=3,
    )
    assert got.replicas >= alone.replicas


def test_realizable_schedule_has_replicas_ready_when_their_window_starts():
    b = BatchingConfig(max_batch_size=4)
    needs = [WindowNeed(1, b), WindowNeed(1, b), WindowNeed(3, b), WindowNeed(1, b)]
    arrivals = np.arange(0.0, 40.0, 0.5)
    for lead, ready_at_20 in ((0.0, 1), (5.0, 3)):
        res = simulate(
            arrivals_s=arrivals,
            config=SimConfig(service=SERVICE, duration_s=40.0, startup_s=lead),
            controller=ScheduledOracle(needs, lead_s=lead),
        )
        ready = dict(zip(res.sample_s.tolist(), res.sample_ready.tolist(), strict=True))
        assert ready[20.0] == ready_at_20
        assert ready[21.0] == 3
        assert ready[35.0] == 1
