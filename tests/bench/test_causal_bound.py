"""The causal bound: its scoring, its cost arithmetic, and that an unannounced step needs held replicas."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tailpilot.api.autoscaling import BatchingConfig
from tailpilot.bench.causal_bound import _goal_bound, bounds, held_run, score, text_table
from tailpilot.bench.engine_profiles import DEFAULT_PROFILE, load_profile
from tailpilot.bench.oracle import ScheduledOracle, WindowNeed
from tailpilot.bench.suite import Setup, trace_of, trace_seed

SLO_MS = 880.0


def short_step_setup() -> Setup:
    # 600 s: T5's step comes at 200 s and lasts 200 s (a third of the run each).
    return Setup(
        profile=load_profile(DEFAULT_PROFILE),
        slo_ms=SLO_MS,
        duration_s=600.0,
        ts_values=(5.0, 30.0),
        traces=("T5-step",),
        max_replicas=8,
    )


def test_score_counts_requests_and_minutes_like_the_benchmark():
    arrivals = np.arange(0.0, 120.0, 0.5)  # 120 requests per minute, two minutes
    latency = np.zeros_like(arrivals)
    latency[:2] = 2 * SLO_MS / 1000.0  # 2 of minute 0's 120 late: its P99 is over the SLO
    run = score(arrivals, latency, replicas=3, duration_s=120.0, slo_ms=SLO_MS)
    assert run.replicas == 3
    assert run.pct_requests_in_slo == pytest.approx(100.0 * 238 / 240)
    assert run.pct_windows_in_slo == pytest.approx(50.0)
    assert not run.meets_windows_goal()
    latency[1] = 0.0  # 1 of 120 late: under 1%, the minute passes
    run = score(arrivals, latency, replicas=3, duration_s=120.0, slo_ms=SLO_MS)
    assert run.pct_windows_in_slo == pytest.approx(100.0)
    assert run.meets_requests_goal() and run.meets_windows_goal()


def test_goal_bound_adds_the_held_replicas_the_oracle_does_not_pay_for():
    one = BatchingConfig(max_batch_size=1, max_queue_delay_us=0)
    # The oracle needs 1 replica for the first 50 s and 4 for the next 50 s (10 s windows).
    needs = [WindowNeed(1, one)] * 5 + [WindowNeed(4, one)] * 5
    oracle = ScheduledOracle(needs, lead_s=0.0)
    b = _goal_bound(3, onset_s=100.0, oracle=oracle, oracle_replica_seconds=250.0)
    assert b.replicas == 3
    # 2 more than the oracle for 50 s; none where it already has 4.
    assert b.ratio == pytest.approx((250.0 + 2 * 50) / 250.0)
    assert b.strict_ratio == pytest.approx(3 * 100.0 / 250.0)
    none = _goal_bound(None, onset_s=100.0, oracle=oracle, oracle_replica_seconds=250.0)
    assert none.replicas is None and math.isinf(none.ratio)


@pytest.mark.slow
def test_an_unannounced_step_needs_more_held_replicas_than_the_base_load():
    setup = short_step_setup()
    arrivals = trace_of(setup, "T5-step").arrivals
    seed = trace_seed(setup, "T5-step")
    runs = [
        held_run(arrivals, onset_s=200.0, ts_s=30.0, replicas=n, setup=setup, seed=seed) for n in (1, 2, 4)
    ]
    # One replica carries the base load (0.9 of a replica) but not 30 s of the 4x step.
    assert not runs[0].meets_requests_goal()
    assert [r.pct_requests_in_slo for r in runs] == sorted(r.pct_requests_in_slo for r in runs)
    assert runs[-1].meets_requests_goal() and runs[-1].meets_windows_goal()

    rows = bounds(setup, jobs=1)
    assert [(b.trace, b.ts_s, b.onset_s) for b in rows] == [("T5-step", 5.0, 200.0), ("T5-step", 30.0, 200.0)]
    short, long = rows
    for b in rows:
        assert b.requests.replicas is not None and b.windows.replicas is not None
        assert b.requests.replicas <= b.windows.replicas
        # What the step needs is more than what the oracle holds before it: the held replicas cost.
        assert b.windows.replicas > b.oracle_mean_replicas_before
        assert b.windows.ratio > 1.0
    # A longer start-up leaves the held fleet alone with the step for longer.
    assert long.requests.replicas >= short.requests.replicas
    table = text_table(rows)
    assert "T5-step" in table and len(table.splitlines()) == 4
