"""Determinism with a seed, the CSV's columns, and the metrics on hand-made cases."""

from __future__ import annotations

import csv
import math

import numpy as np
import pytest

from tailpilot.bench.engine_profiles import DEFAULT_PROFILE, load_profile
from tailpilot.bench.metrics import count_flaps, p99, recovery_time
from tailpilot.bench.report import CSV_COLUMNS, write_csv
from tailpilot.bench.simulator import SimResult
from tailpilot.bench.suite import Setup, run_suite, scale_profile

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
    ]
    assert tuple(header) == CSV_COLUMNS
    assert len(body) == len(result.rows)
    ratios = {(r[0], r[1]): float(r[6]) for r in body if r[2] == "oracle-realizable"}
    assert all(v == pytest.approx(1.0) for v in ratios.values())


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
