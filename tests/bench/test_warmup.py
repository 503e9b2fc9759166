"""The benchmark's unscored warm-up: another realization of the process, served first, not scored."""

from __future__ import annotations

import numpy as np

from tailpilot.api.autoscaling import BatchingConfig
from tailpilot.bench.baselines import Static
from tailpilot.bench.engine_profiles import DEFAULT_PROFILE, load_profile
from tailpilot.bench.simulator import SimConfig, simulate
from tailpilot.bench.suite import UNWARMED_POLICIES, Setup, run_controller, trace_of
from tailpilot.bench.traces import build_trace, warmup_arrivals

PROFILE = load_profile(DEFAULT_PROFILE)


def test_the_scored_part_leaves_the_warm_up_out_and_starts_at_zero():
    warm, scored = 100.0, 300.0
    arrivals = np.arange(0.5, warm + scored, 0.5)  # 2 req/s throughout
    config = SimConfig(
        service=PROFILE.service_time, duration_s=warm + scored, startup_s=5.0, score_from_s=warm
    )
    static = Static(replicas=3, batching=BatchingConfig(max_batch_size=1))
    res = simulate(arrivals_s=arrivals, config=config, controller=static)
    assert res.duration_s == scored
    assert res.replica_seconds == 3 * scored  # the warm-up's 300 replica-seconds are not paid
    assert res.arrival_s.size == np.count_nonzero(arrivals >= warm)
    assert res.arrival_s.min() >= 0 and res.arrival_s.max() < scored
    assert res.sample_s.min() >= 0 and res.batch_start_s.min() >= 0
    assert res.batching_changes[0][0] == 0.0


def test_a_warm_up_is_the_same_process_not_the_same_arrivals():
    kw = {"capacity_rps": 40.0, "duration_s": 1200.0, "seed": 1}
    history = warmup_arrivals("T1-poisson", warmup_s=600.0, **kw)
    scored = build_trace("T1-poisson", **kw).arrivals
    assert history.min() >= 0 and history.max() < 600.0
    # Poisson at 60% of 40/s: the same rate within noise, other arrival times.
    assert abs(history.size / 600.0 - 24.0) < 2.0
    assert not np.isin(np.round(history[:50], 9), np.round(scored, 9)).any()
    assert warmup_arrivals("T1-poisson", warmup_s=0.0, **kw).size == 0


def test_learning_policies_run_the_warm_up_and_schedules_do_not():
    setup = Setup(profile=PROFILE, slo_ms=880.0, duration_s=240.0, ref_replicas=2, max_replicas=6)
    assert setup.warmup_s == 120.0
    assert {"static-peak", "static-mean", "oracle-fluid", "oracle-realizable"} == set(UNWARMED_POLICIES)
    trace = trace_of(setup, "T1-poisson")
    static = Static(replicas=2, batching=BatchingConfig(max_batch_size=1))
    warmed, _ = run_controller(setup, "T1-poisson", static, startup_s=5.0, warmup=True)
    cold, _ = run_controller(setup, "T1-poisson", static, startup_s=5.0)
    # The same scored arrivals either way; only what came before differs.
    assert warmed.arrival_s.size == cold.arrival_s.size == trace.arrivals.size
    assert np.allclose(warmed.arrival_s, trace.arrivals) and warmed.replica_seconds == cold.replica_seconds
