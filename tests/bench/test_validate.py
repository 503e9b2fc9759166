"""The validation's verdicts: which runs count, and what the page says about them."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from tailpilot.api.engine import ServiceTimeModel
from tailpilot.bench.engine_profiles import MEASURED_EXAMPLE, load_profile
from tailpilot.bench.validate import (
    CLIENT_CORE,
    MAX_FOREIGN_SHARE,
    MAX_SEND_LAG_MS,
    RunRecord,
    outside_diagnoses,
    render,
    run_speed,
    server_cores,
    tail_burst_share,
)

CLEAN = RunRecord(
    variant="preferred-16-no-delay",
    replicas=1,
    level=0.6,
    rate=180.0,
    requests=10800,
    meas_p99_ms=100.0,
    sim_p99_ms=95.0,
    meas_tp=180.0,
    sim_tp=181.0,
    meas_mean_batch=7.4,
    sim_mean_batch=7.3,
    run_speed=1.01,
    sim_p99_at_speed_ms=97.0,
    sim_p99_draws_ms=(92.0, 104.0),
    meas_queue_ms=20.0,
    sim_queue_ms=18.5,
    send_lag_p99_ms=0.8,
    client_busy=0.05,
    foreign_share=0.01,
    client_overhead_ms=2.5,
    throttled_periods=100,
)


def test_a_clean_run_is_valid_and_its_errors_are_relative_to_the_measurement() -> None:
    assert CLEAN.problems == []
    assert CLEAN.p99_err_pct == -5.0
    assert round(CLEAN.tp_err_pct, 3) == round(100 / 180, 3)


def test_a_client_that_fell_behind_or_a_busy_machine_makes_the_run_invalid() -> None:
    overloaded = dataclasses.replace(CLEAN, errors={"client_overload": 3})
    late = dataclasses.replace(CLEAN, send_lag_p99_ms=MAX_SEND_LAG_MS * 3)
    saturated = dataclasses.replace(CLEAN, client_busy=0.9)
    shared = dataclasses.replace(CLEAN, foreign_share=MAX_FOREIGN_SHARE * 10)
    assert "client_overload" in overloaded.problems[0]
    assert "send lag" in late.problems[0]
    assert "client core 90% busy" in saturated.problems[0]
    assert "other processes" in shared.problems[0]
    unmeasured = dataclasses.replace(CLEAN, send_lag_p99_ms=float("nan"))
    assert unmeasured.problems  # nan is not "small enough"


def test_the_page_counts_only_valid_runs_within_the_tolerance() -> None:
    off = dataclasses.replace(CLEAN, level=0.85, sim_p99_ms=150.0)
    invalid = dataclasses.replace(CLEAN, level=0.3, foreign_share=0.5)
    page = render(
        [CLEAN, off, invalid],
        service=ServiceTimeModel(intercept_ms=28.7, per_item_ms=1.52, jitter_cv=0.1, per_request_ms=0.39),
        job_service=ServiceTimeModel(intercept_ms=30.0, per_item_ms=1.6, jitter_cv=0.12, per_request_ms=0.3),
        argv=["--duration-s", "60"],
        server_millis=500,
        period_us=10_000,
        load_before=0.2,
    )
    assert "**1 of 2 valid runs within 10% on both P99 and throughput** (1 invalid run(s)" in page
    assert "28.700 + 1.520 x b ms per batch of b requests (of which 0.390 ms per request)" in page
    assert "| preferred-16-no-delay | 1 | 85% | 180.0 | 10800 | 100.0 | 150.0 | +50.0% |" in page
    assert "| 7.40 / 7.30 | 20.0 / 18.5 | x1.010 | 97.0 |" in page
    assert "NO: 50% of the run's cores used by other processes" in page
    # The run off by 50% gets its diagnoses; the one within the tolerance none.
    assert "## Valid runs whose P99 is off by more than 10%" in page
    assert "- **preferred-16-no-delay, 1 replica(s), 85%** (+50.0%):" in page
    assert page.count("at that speed the simulator's P99") == 1


def test_a_run_outside_the_tolerance_is_diagnosed_from_its_own_figures() -> None:
    fast_server = dataclasses.replace(
        CLEAN,
        variant="preferred-4-8-delay-5ms",
        meas_p99_ms=100.0,
        sim_p99_ms=125.0,
        run_speed=0.95,
        sim_p99_at_speed_ms=104.0,
        sim_p99_draws_ms=(120.0, 128.0),
        sim_p99_race_ms=(130.0, 90.0),
    )
    speed, chance, race = outside_diagnoses(fast_server)
    assert "x0.950" in speed and "104.0 ms, +4.0%" in speed
    assert "outside them (not chance alone)" in chance
    assert "130.0 / 90.0 ms: the real P99 is between them" in race
    assert outside_diagnoses(CLEAN) == []
    by_chance = dataclasses.replace(CLEAN, sim_p99_ms=115.0, sim_p99_draws_ms=(95.0, 118.0))
    assert "within them (chance)" in outside_diagnoses(by_chance)[1]
    assert len(outside_diagnoses(by_chance)) == 2  # no delay: no race line


def test_the_runs_speed_is_the_factor_whose_simulated_mean_batch_matches_the_measured_one() -> None:
    def mean_batch_at(factor: float) -> float:  # slower service, larger batches: monotonic
        return 4.0 * factor

    assert run_speed(mean_batch_at, 4.4) == pytest.approx(1.1, abs=1e-3)
    assert run_speed(mean_batch_at, 100.0) == 1.25  # outside the search: the bound
    assert run_speed(mean_batch_at, 1.0) == 0.8
    assert run_speed(mean_batch_at, float("nan")) == 1.0


def test_the_committed_measured_profile_is_the_jobs_measurement_of_the_example_engine() -> None:
    profile = load_profile(MEASURED_EXAMPLE)
    assert "SCALED VARIANT" not in profile.method and "tailpilot closed-loop gRPC client" in profile.method
    assert profile.hardware == "cpu" and profile.cpu_limit_millis == 500 and profile.max_batch_size == 16
    assert [p.batch_size for p in profile.points] == [1, 4, 16]
    assert [p.concurrency for p in profile.served_batches] == [4, 16]
    # A weight-bound engine: a batch of 16 costs well under twice a single request.
    assert profile.service_time.mean_ms(16) < 2 * profile.service_time.mean_ms(1)
    assert 0 < profile.service_time.per_request_ms < profile.service_time.per_item_ms


def test_servers_never_share_the_clients_core_and_share_one_only_when_cores_run_out() -> None:
    assert CLIENT_CORE == 0
    # Cores enough beside the client's: one each, from the last.
    assert server_cores([0, 1, 2], servers=2, millis=500) == [frozenset({2}), frozenset({1})]
    # Two cores: both servers on the last, their 500m quotas filling it.
    assert server_cores([0, 1], servers=2, millis=500) == [frozenset({1}), frozenset({1})]
    assert server_cores([0, 1], servers=1, millis=1000) == [frozenset({1})]
    with pytest.raises(SystemExit, match="fit neither"):
        server_cores([0, 1], servers=2, millis=600)


def test_a_tail_packed_into_one_moment_is_told_from_a_spread_one() -> None:
    times = np.arange(0.0, 60.0, 0.01)  # 6000 requests over 60 s
    spread = np.full(times.size, 0.05)
    spread[::100] = 0.5  # the slowest 1%: one request every second
    assert tail_burst_share(times, spread) == pytest.approx(3 / 60, abs=0.01)
    stalled = np.full(times.size, 0.05)
    stalled[(times >= 30.0) & (times < 30.6)] = 0.5  # 60 slow requests within 0.6 s
    assert tail_burst_share(times, stalled) == 1.0
    burst_run = dataclasses.replace(CLEAN, sim_p99_ms=150.0, tail_burst=(1.0, 0.1))
    assert "one event (a stall) made the real tail" in outside_diagnoses(burst_run)[2]
    spread_run = dataclasses.replace(CLEAN, sim_p99_ms=150.0, tail_burst=(0.05, 0.04))
    assert "stall" not in outside_diagnoses(spread_run)[2]
