"""Determinism with a seed, the CSV's columns, and the metrics on hand-made cases."""

from __future__ import annotations

import csv
import math

import numpy as np
import pytest

from tailpilot.bench.engine_profiles import DEFAULT_PROFILE, load_profile
from tailpilot.bench.metrics import count_flaps, p99, recovery_time, settle_time
from tailpilot.bench.report import CSV_COLUMNS, write_csv
from tailpilot.bench.simulator import SimResult
from tailpilot.bench.suite import (
    TAILPILOT,
    WRONG_PROFILE_POLICIES,
    Setup,
    policy_names,
    run_suite,
    scale_profile,
    slope_profile,
    with_learned_scale,
)

TINY_POLICIES = ("static-mean", "hpa-util70", "knative-kpa", "tailpilot", "oracle-realizable")


def tiny_setup(seed: int) -> Setup:
    return Setup(
        profile=load_profile(DEFAULT_PROFILE),
        slo_ms=880.0,
        seed=seed,
        duration_s=240.0,
        ts_values=(5.0, 30.0),
        traces=("T1-poisson", "T6-spike"),
        ref_replicas=2,
        max_replicas=6,
        policies=TINY_POLICIES,
    )


def as_tuples(result):
    return [(r.trace, r.ts_s, r.policy, r.metrics, r.oracle_ratio) for r in result.rows]


@pytest.mark.slow
def test_same_seed_same_numbers_whatever_the_workers():
    a = run_suite(tiny_setup(3), jobs=1)
    b = run_suite(tiny_setup(3), jobs=2)
    assert as_tuples(a) == as_tuples(b)
    assert len(a.rows) == 2 * 2 * len(TINY_POLICIES)
    c = run_suite(tiny_setup(4), jobs=1)
    assert as_tuples(c) != as_tuples(a)


@pytest.mark.slow
def test_results_csv_has_exactly_the_agreed_columns(tmp_path):
    result = run_suite(tiny_setup(5), jobs=1)
    path = tmp_path / "results.csv"
    write_csv(result.rows, path)
    with path.open() as fh:
        reader = csv.reader(fh)
        header = next(reader)
        body = list(reader)
    assert header == [
        "trace",
        "ts_s",
        "policy",
        "pct_requests_in_slo",
        "pct_windows_in_slo",
        "replica_seconds",
        "oracle_ratio",
        "scale_actions",
        "flaps",
        "recovery_s",
        "mean_batch",
        "scale_settle_s",
        "final_service_scale",
        "final_slope_scale",
    ]
    assert tuple(header) == CSV_COLUMNS
    assert len(body) == len(result.rows)
    ratios = {(r[0], r[1]): float(r[6]) for r in body if r[2] == "oracle-realizable"}
    assert all(v == pytest.approx(1.0) for v in ratios.values())
    # The learned speed's columns are TailPilot's alone: filled on its rows, empty on the others.
    assert all((r[11] != "" and r[12] != "") == (r[2] == "tailpilot") for r in body)


def test_flaps_count_reversals_within_five_minutes():
    actions = [(0.0, 2, 3), (60.0, 3, 2), (500.0, 2, 4), (520.0, 4, 5), (900.0, 5, 3)]
    assert count_flaps(actions) == 1  # 0->60 reverses; 520->900 is 380 s apart


def _result(arrival, latency, duration):
    arrival = np.asarray(arrival, dtype=float)
    empty_f = np.empty(0)
    return SimResult(
        arrival_s=arrival,
        start_s=arrival,
        done_s=arrival + np.asarray(latency, dtype=float),
        batch_start_s=empty_f,
        batch_size=np.empty(0, dtype=np.int64),
        sample_s=empty_f,
        sample_ready=np.empty(0, dtype=np.int64),
        sample_provisioned=np.empty(0, dtype=np.int64),
        actions=[],
        batching_changes=[],
        replica_seconds=0.0,
        duration_s=duration,
    )


def test_recovery_time_is_time_until_a_full_minute_meets_the_slo():
    arrival = np.arange(0.0, 300.0, 0.5)
    # Bad (2 s latency) from 100 s to 140 s, good elsewhere.
    latency = np.where((arrival >= 100) & (arrival < 140), 2.0, 0.1)
    res = _result(arrival, latency, 300.0)
    assert recovery_time(res, slo_ms=1000.0, onset_s=100.0) == 40.0
    never = _result(arrival, np.where(arrival >= 100, 2.0, 0.1), 300.0)
    assert math.isinf(recovery_time(never, slo_ms=1000.0, onset_s=100.0))


def test_p99_counts_failed_requests_as_misses():
    lat = np.array([0.1] * 98 + [np.inf] * 2)
    assert math.isinf(p99(lat))


def test_scaled_profile_for_the_robustness_run_scales_every_time():
    base = load_profile(DEFAULT_PROFILE)
    fast = scale_profile(base, 0.7)
    assert fast.service_time.mean_ms(8) == pytest.approx(0.7 * base.service_time.mean_ms(8))
    assert fast.points[0].p99_ms == pytest.approx(0.7 * base.points[0].p99_ms)
    assert fast.points[0].throughput_per_s == pytest.approx(base.points[0].throughput_per_s / 0.7)
    assert fast.service_time.jitter_cv == base.service_time.jitter_cv


def test_autoscalers_start_from_the_realizable_oracles_first_fleet():
    from tailpilot.api.autoscaling import BatchingConfig
    from tailpilot.bench.oracle import ScheduledOracle, WindowNeed
    from tailpilot.bench.suite import warm_start_replicas

    one = BatchingConfig(max_batch_size=8)
    needs = [WindowNeed(n, one) for n in (3, 1, 6, 7, 2)]
    # Ts = 5 s: the first 10 s window alone; Ts = 30 s: the windows up to 30 s (the fourth starts there).
    assert warm_start_replicas(needs, ts=5.0) == 3
    assert warm_start_replicas(needs, ts=25.0) == 6
    assert warm_start_replicas(needs, ts=30.0) == 7
    for ts in (5.0, 25.0, 30.0):
        assert warm_start_replicas(needs, ts=ts) == ScheduledOracle(needs, lead_s=ts).initial().replicas


def measured_like(base, *, compute_intercept_ms: float):
    """The default profile plus what a measured one has: a compute fit, a per-request part, served batches."""
    from tailpilot.api.engine import ServedBatchPoint

    return base.model_copy(
        update={
            "service_time": base.service_time.model_copy(update={"per_request_ms": 6.0}),
            "compute_time": base.service_time.model_copy(update={"intercept_ms": compute_intercept_ms}),
            "served_batches": [ServedBatchPoint(concurrency=4, requests=400, executions=100, wall_s=22.0)],
        }
    )


def test_the_scaled_profile_scales_every_time_a_measured_profile_has():
    base = load_profile(DEFAULT_PROFILE)
    measured = measured_like(base, compute_intercept_ms=80.0)
    slow = scale_profile(measured, 1.4)
    assert slow.compute_time is not None
    assert slow.compute_time.mean_ms(4) == pytest.approx(1.4 * measured.compute_time.mean_ms(4))
    assert slow.service_time.per_request_ms == pytest.approx(1.4 * 6.0)
    assert slow.served_batches[0].wall_s == pytest.approx(1.4 * 22.0)
    assert slow.served_batches[0].requests == 400
    assert scale_profile(base, 1.4).compute_time is None


def test_the_slope_profile_halves_the_slope_and_keeps_one_requests_time():
    base = load_profile(DEFAULT_PROFILE)  # t(b) = 100 + 30 b ms
    wrong = slope_profile(base, 0.5)
    assert wrong.service_time.per_item_ms == pytest.approx(15.0)
    assert wrong.service_time.intercept_ms == pytest.approx(115.0)
    assert wrong.service_time.mean_ms(1) == pytest.approx(base.service_time.mean_ms(1))
    assert wrong.service_time.mean_ms(16) == pytest.approx(355.0)  # truth: 580 ms
    assert wrong.service_time.jitter_cv == base.service_time.jitter_cv
    # Every point moves with the line: on it before, on the new one after.
    for old, new in zip(base.points, wrong.points, strict=True):
        ratio = wrong.service_time.mean_ms(old.batch_size) / base.service_time.mean_ms(old.batch_size)
        assert new.batch_size == old.batch_size
        assert new.p99_ms == pytest.approx(old.p99_ms * ratio)
        assert new.p50_ms == pytest.approx(old.p50_ms * ratio)
        assert new.throughput_per_s == pytest.approx(old.throughput_per_s / ratio)
    assert wrong.points[0].p99_ms == pytest.approx(base.points[0].p99_ms)  # batch 1: unchanged
    assert wrong.points[-1].p99_ms < base.points[-1].p99_ms
    measured = slope_profile(measured_like(base, compute_intercept_ms=60.0), 0.5)
    assert measured.compute_time is not None
    compute = measured.compute_time
    assert (compute.intercept_ms, compute.per_item_ms) == pytest.approx((75.0, 15.0))
    # The slope's per-request part is halved with it.
    assert measured.service_time.per_request_ms == pytest.approx(3.0)
    # A served batch of 4 ran 220 ms (on the line: 100 + 30 * 4); on the new line, 115 + 15 * 4.
    assert measured.served_batches[0].wall_s == pytest.approx(22.0 * 175.0 / 220.0)


def test_settle_time_is_the_first_decision_after_which_the_value_stays_near_its_final_level():
    # Starts at 1, climbs to ~1.43 by 60 s and stays there.
    series = [(0.0, 1.0), (15.0, 1.1), (30.0, 1.25), (45.0, 1.35), (60.0, 1.41), (75.0, 1.43)]
    series += [(t, 1.43 + (0.01 if k % 2 else -0.01)) for k, t in enumerate(range(90, 600, 15))]
    assert settle_time(series, duration_s=600.0) == 45.0  # 1.35 is within 10% of 1.43, 1.25 is not
    # A value that never leaves its final band settled at the start.
    assert settle_time([(0.0, 1.0), (15.0, 1.02), (300.0, 0.98), (450.0, 1.0)], duration_s=600.0) == 0.0
    # Leaving the band once in the last half restarts the clock.
    bumpy = [(0.0, 1.0), (100.0, 1.0), (350.0, 1.3), (400.0, 1.0), (500.0, 1.0), (550.0, 1.0)]
    assert settle_time(bumpy, duration_s=600.0) == 400.0


def test_settle_time_is_none_when_the_value_never_settles():
    # Still moving at the end: the last values are outside 10% of the last half's median.
    drifting = [(float(t), 1.0 + t / 300.0) for t in range(0, 601, 15)]
    assert settle_time(drifting, duration_s=600.0) is None
    # Swinging between two levels: the median sits between them and neither is within 10%.
    swinging = [(float(t), 0.6 if k % 2 else 1.4) for k, t in enumerate(range(0, 600, 15))]
    assert settle_time(swinging, duration_s=600.0) is None
    # Nothing decided in the last half: no final level to settle to.
    assert settle_time([(0.0, 1.0), (100.0, 1.2)], duration_s=600.0) is None


def test_the_run_metrics_carry_the_settle_time_inf_when_never_and_only_for_a_recorded_scale():
    base = summarize_nothing()
    assert with_learned_scale(base, None, duration_s=600.0) == base
    never = with_learned_scale(base, [(0.0, 1.0), (300.0, 0.6), (600.0, 1.4)], duration_s=600.0)
    assert never.settle_s is not None and math.isinf(never.settle_s)
    assert never.final_scale == 1.4
    settled = with_learned_scale(base, [(0.0, 1.0), (15.0, 1.4), (400.0, 1.42)], duration_s=600.0)
    assert (settled.settle_s, settled.final_scale) == (15.0, 1.42)


def summarize_nothing():
    from tailpilot.bench.metrics import RunMetrics

    return RunMetrics(
        pct_requests_in_slo=100.0,
        pct_windows_in_slo=100.0,
        replica_seconds=1.0,
        scale_actions=0,
        rebatches=0,
        flaps=0,
        recovery_s=None,
        mean_batch=1.0,
    )


def test_the_wrong_profile_policies_are_in_the_default_table():
    names = policy_names(with_tailpilot=True)
    assert all(p in names for p in WRONG_PROFILE_POLICIES)
    assert names.index(TAILPILOT) < min(names.index(p) for p in WRONG_PROFILE_POLICIES)
    assert not set(WRONG_PROFILE_POLICIES) & set(policy_names(with_tailpilot=False))


@pytest.mark.slow
def test_the_three_wrong_profile_policies_run_on_a_short_trace():
    setup = Setup(
        profile=load_profile(DEFAULT_PROFILE),
        slo_ms=880.0,
        seed=2,
        duration_s=600.0,
        ts_values=(30.0,),
        traces=("T5-step",),
        ref_replicas=2,
        max_replicas=8,
        policies=(TAILPILOT, *WRONG_PROFILE_POLICIES, "oracle-realizable"),
    )
    result = run_suite(setup, jobs=1)
    assert not result.errors
    by_policy = {r.policy: r.metrics for r in result.rows}
    assert set(by_policy) == {TAILPILOT, *WRONG_PROFILE_POLICIES, "oracle-realizable"}
    for policy in (TAILPILOT, *WRONG_PROFILE_POLICIES):
        m = by_policy[policy]
        assert m.pct_requests_in_slo > 0 and m.replica_seconds > 0
        assert m.final_scale is not None and m.settle_s is not None
    assert by_policy["oracle-realizable"].final_scale is None
    # The wrong profiles change what TailPilot does: each run differs from the true profile's.
    for policy in WRONG_PROFILE_POLICIES:
        assert by_policy[policy] != by_policy[TAILPILOT]
