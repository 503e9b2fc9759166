"""The policy against a model-driven plant with a fake clock: steps, noise, guardrails, data problems."""

from __future__ import annotations

import json
import time
from dataclasses import asdict, replace

import pytest
from policy_fakes import FakeClock, Plant, make_profile, replica_series, reversals

from tailpilot.api.autoscaling import BatchingConfig, Decision, Observation, ScalingAction
from tailpilot.api.engine import ReloadCost
from tailpilot.policy import Learned, PolicyConfig, PolicyState, Reason, decide
from tailpilot.policy.config import (
    ALERT_EXTRA_MARGIN,
    BATCHING_COOLDOWN_S,
    CORRECTION_MAX,
    MARGIN_PER_DECADE,
    MAX_SLO_MARGIN,
    MIN_SLO_MARGIN,
    SERVICE_SCALE_MAX,
    SLO_MARGIN,
    STALE_AFTER_S,
    slo_margin,
)
from tailpilot.policy.core import replica_capacity_per_s
from tailpilot.policy.model import BatchShape, utilization

TARGET = 50.0


def make_plant(
    *,
    replicas: int = 2,
    batch: int = 8,
    bias: float = 1.0,
    slowdown: float = 1.0,
    report_compute: bool = False,
    **cfg: object,
) -> Plant:
    config = PolicyConfig(p99_target_ms=TARGET, min_replicas=1, max_replicas=20, **cfg)  # type: ignore[arg-type]
    state = PolicyState.initial(replicas=replicas, batching=BatchingConfig(max_batch_size=batch))
    return Plant(
        config=config,
        profile=make_profile(),
        state=state,
        bias=bias,
        slowdown=slowdown,
        report_compute=report_compute,
    )


def test_step_up_restores_slo_within_two_periods_then_scales_down_after_stabilization():
    plant = make_plant()
    plant.run(300.0, 30)
    low = plant.state.replicas
    step = plant.run(6000.0, 40)
    # Within two control periods of the step the fleet is sized for it.
    assert plant.p99(6000.0, step[1].replicas, step[1].batching) <= TARGET
    assert plant.true_p99[-1] <= TARGET
    high = plant.state.replicas
    assert high > low
    step_down_at = plant.clock.now
    down = plant.run(300.0, 40)
    first_down = next(d for d in down if d.replicas < high)
    # Nothing is removed before the stabilization window has passed since the last high recommendation.
    assert (
        first_down.at_s - step_down_at
        >= plant.config.scale_down_stabilization_s - plant.config.control_period_s
    )
    assert first_down.reason == Reason.OVER_PROVISIONED
    assert plant.state.replicas == low
    assert all(p <= TARGET for p in plant.true_p99[-20:])


def test_batching_moves_before_replicas():
    plant = make_plant(replicas=2, batch=1)
    # Small batches cannot carry 1600 req/s on 2 replicas; batch 32 can.
    d = plant.step(1600.0)
    assert d.action == ScalingAction.REBATCH
    assert d.reason == Reason.REBATCH_FOR_SLO
    assert d.replicas == 2
    assert d.batching.max_batch_size > 1
    assert plant.p99(1600.0, 2, d.batching) <= TARGET


def test_batching_stays_within_profile_and_spec_bounds():
    config = PolicyConfig(p99_target_ms=TARGET, max_replicas=50, max_batch_size_cap=16)
    plant = Plant(
        config=config,
        profile=make_profile(max_batch=8),
        state=PolicyState.initial(replicas=1, batching=BatchingConfig(max_batch_size=2)),
    )
    decisions = plant.run(200.0, 3) + plant.run(20000.0, 10)
    # The profile's bound (8) wins over the spec's 16.
    assert max(d.batching.max_batch_size for d in decisions) == 8
    config = PolicyConfig(p99_target_ms=TARGET, max_replicas=50, max_batch_size_cap=4)
    plant = Plant(
        config=config,
        profile=make_profile(max_batch=32),
        state=PolicyState.initial(replicas=1, batching=BatchingConfig(max_batch_size=2)),
    )
    decisions = plant.run(20000.0, 10)
    assert max(d.batching.max_batch_size for d in decisions) == 4


def test_batching_in_force_off_the_grid_is_kept_while_it_meets_the_slo():
    plant = make_plant(replicas=4, batch=6)  # 6 is not a power of two but within bounds
    decisions = plant.run(800.0, 10)
    assert {d.batching.max_batch_size for d in decisions} == {6}
    assert all(d.action != ScalingAction.REBATCH for d in decisions)


def test_batching_outside_the_bounds_is_moved_inside():
    config = PolicyConfig(p99_target_ms=TARGET, max_replicas=20, max_batch_size_cap=8)
    plant = Plant(
        config=config,
        profile=make_profile(max_batch=32),
        state=PolicyState.initial(replicas=4, batching=BatchingConfig(max_batch_size=16)),
    )
    d = plant.step(800.0)
    assert (d.action, d.reason, d.replicas) == (ScalingAction.REBATCH, Reason.BOUNDS_ENFORCED, 4)
    assert d.batching.max_batch_size <= 8
    fixed = BatchingConfig(max_batch_size=4)
    plant = make_plant(replicas=4, batch=8, batching_mode="fixed", fixed_batching=fixed)
    d = plant.step(800.0)
    assert (d.action, d.reason, d.batching) == (ScalingAction.REBATCH, Reason.BOUNDS_ENFORCED, fixed)


@pytest.mark.parametrize(("rate_cv", "max_reversals"), [(0.05, 0), (0.10, 12)])
def test_noise_around_the_target_does_not_flap(rate_cv: float, max_reversals: int):
    plant = make_plant(replicas=4)
    plant.rate_noise_cv = rate_cv
    plant.p99_noise_cv = 0.10
    # Two hours at a rate whose fleet sits near a replica boundary, observed with noise.
    plant.run(4200.0, 480)
    flips = reversals(plant.decisions)
    assert len(flips) <= max_reversals, flips  # 12 in two hours: one per 10 minutes
    # The benchmark's flap: a reversal within 5 minutes of the opposite action. None allowed.
    assert [f for f in flips if f[1] <= 300.0] == []
    assert any(d.action != ScalingAction.NONE for d in plant.decisions)  # the run did exercise the policy


def test_online_correction_learns_a_biased_model():
    plant = make_plant(bias=1.6)
    plant.run(2500.0, 30)
    # The plant runs loaded (over 70% of its full-batch capacity): the heavy-load factor learned it.
    assert 1.3 <= plant.state.learned.correction_heavy <= 1.9
    assert all(p <= TARGET for p in plant.true_p99[-10:])
    unbiased = make_plant(bias=1.0)
    unbiased.run(2500.0, 30)
    # The biased plant needs at least as many replicas for the same load.
    assert plant.state.replicas >= unbiased.state.replicas


def test_hardware_slower_than_profiled_is_learned_from_compute_time_and_provisioned_for():
    # Replicas that share CPU cores run the engine 1.8x slower than the build profiled it.
    blind = make_plant(slowdown=1.8)
    seeing = make_plant(slowdown=1.8, report_compute=True)
    blind.run(2500.0, 12)
    seeing.run(2500.0, 12)
    assert seeing.state.learned.service_scale == pytest.approx(1.8, rel=0.05)
    assert "compute x1.80 of the profile" in seeing.decisions[-1].message
    # Learning the speed needs no settling: the SLO is kept from the fourth period on (the EWMA
    # takes two), while the P99 correction alone (which waits for each change to settle) still misses.
    assert all(p <= TARGET for p in seeing.true_p99[3:])
    assert blind.true_p99[-1] > TARGET
    assert sum(p > TARGET for p in blind.true_p99) > sum(p > TARGET for p in seeing.true_p99)
    assert seeing.state.replicas > make_plant(report_compute=True).run(2500.0, 12)[-1].replicas


def test_compute_time_near_the_profile_changes_nothing_and_the_scale_is_bounded():
    near = make_plant(slowdown=1.05, report_compute=True)
    as_profiled = make_plant(slowdown=1.05)
    assert replica_series(near.run(2500.0, 20)) == replica_series(as_profiled.run(2500.0, 20))
    assert near.state.learned.service_scale == pytest.approx(1.05, rel=0.02)
    assert "compute x" not in near.decisions[-1].message
    runaway = make_plant(slowdown=20.0, report_compute=True)
    runaway.run(100.0, 20)
    assert runaway.state.learned.service_scale == pytest.approx(SERVICE_SCALE_MAX, rel=1e-3)


def test_the_speed_is_read_where_batch_sizes_barely_spread_and_only_from_steady_windows():
    plant = make_plant(replicas=2, batch=8)
    st = plant.profile.service_time
    base = {"at_s": plant.clock.now, "request_rate": 1000.0, "p99_ms": 20.0, "ready_replicas": 2}

    def seen(mean_batch: float, compute_ms: float, **extra: float) -> float:
        obs = Observation(**{**base, **extra}, mean_batch_size=mean_batch, compute_time_ms=compute_ms)
        return _decide_at(plant, obs)[1].learned.service_scale

    # Mostly single requests (1 + Poisson(0.2)): the average request ran in a batch of
    # E[b^2]/E[b] = 1.2 + 1 - 1/1.2, so this compute time is a machine as fast as the profile ...
    as_fast = st.mean_ms(1) + (1.2 - 1 / 1.2) * st.per_item_ms
    assert seen(1.2, as_fast) == pytest.approx(1.0)
    # ... and twice it one twice as slow (EWMA 0.5 from 1). Full batches (a saturated replica) too.
    assert seen(1.2, 2 * as_fast) == pytest.approx(2**0.5)
    assert seen(7.5, 2 * st.mean_ms(8)) == pytest.approx(2**0.5)
    # In between, sizes spread as the arrivals do: the batch of the average request is unknown.
    assert seen(4.0, 2 * st.mean_ms(4)) == 1.0
    # Not while a backlog is in the window, nor while pods start.
    assert seen(1.2, 2 * as_fast, queue_depth_per_replica=40.0) == 1.0
    assert seen(1.2, 2 * as_fast, ready_replicas=1) == 1.0


def test_a_machine_faster_than_profiled_is_believed_only_from_busy_replicas():
    plant = make_plant(replicas=2, batch=8)
    full_batch_ms = plant.profile.service_time.mean_ms(8)

    def seen(busy: float, speed: float) -> float:
        """The scale learned from 2 replicas in full batches, `busy` of the time, at `speed` x the profile."""
        compute_ms = speed * full_batch_ms
        rate = 2 * busy * 7.5 * 1000.0 / compute_ms  # requests/s that keep them that busy
        obs = Observation(
            at_s=plant.clock.now,
            request_rate=rate,
            p99_ms=20.0,
            ready_replicas=2,
            mean_batch_size=7.5,
            compute_time_ms=compute_ms,
        )
        return _decide_at(plant, obs)[1].learned.service_scale

    # Twice as fast as profiled, read from replicas 30% busy: a saturated replica would not be.
    assert seen(0.3, 0.5) == 1.0
    # Read from replicas 90% busy it is believed (EWMA 0.5 from 1 in log space).
    assert seen(0.9, 0.5) == pytest.approx(0.5**0.5)
    # Slower than profiled is learned at any load.
    assert seen(0.3, 2.0) == pytest.approx(2**0.5)


def test_no_learning_from_a_backlog_or_while_its_window_lasts():
    plant = make_plant(replicas=4, batch=8)
    plant.run(1000.0, 12)  # settle; correction learned from steady windows
    learned = plant.state.corrections
    t = plant.clock.now
    # A backlog (more than a full batch queued per replica) with a huge P99 teaches the model nothing ...
    obs = Observation(
        at_s=t, request_rate=1000.0, p99_ms=5000.0, ready_replicas=4, queue_depth_per_replica=40.0
    )
    _, state = decide(config=plant.config, profile=plant.profile, observation=obs, state=plant.state, now_s=t)
    assert state.corrections == learned
    # ... nor does the P99 window that still contains it once the queue is empty again.
    obs = Observation(
        at_s=t + 15, request_rate=1000.0, p99_ms=5000.0, ready_replicas=4, queue_depth_per_replica=0.0
    )
    _, state = decide(config=plant.config, profile=plant.profile, observation=obs, state=state, now_s=t + 15)
    assert state.corrections == learned
    assert state.timers.last_backlog_s == t


def test_successive_scale_downs_need_no_cooldown_but_one_after_a_scale_up():
    plant = make_plant(replicas=1, scale_down_stabilization_s=0.0, max_scale_down_step=1, cooldown_s=120.0)
    plant.run(6000.0, 4)
    up_at = plant.state.timers.last_scale_up_s
    assert up_at is not None and plant.state.replicas > 3
    downs = [d for d in plant.run(100.0, 16) if d.action == ScalingAction.SCALE_DOWN]
    assert downs[0].at_s - up_at >= 120.0
    # After the first, one replica per control period (the step limit), no further cooldown.
    assert [b.at_s - a.at_s for a, b in zip(downs, downs[1:], strict=False)][:2] == [15.0, 15.0]


def test_correction_is_bounded():
    plant = make_plant(bias=50.0)
    plant.run(1000.0, 40)
    assert plant.state.learned.correction_light <= CORRECTION_MAX + 1e-9


def test_missing_rate_holds_and_never_scales_down():
    plant = make_plant(replicas=6)
    plant.run(200.0, 5)  # the policy wants fewer, but is stabilizing
    before = plant.state.replicas
    for _ in range(40):
        obs = Observation(at_s=plant.clock.now, request_rate=None, p99_ms=None, ready_replicas=before)
        d, plant.state = decide(
            config=plant.config,
            profile=plant.profile,
            observation=obs,
            state=plant.state,
            now_s=plant.clock.now,
        )
        plant.clock.advance(15)
        assert d.action == ScalingAction.HOLD
        assert d.reason == Reason.METRICS_MISSING
        assert d.replicas == before
    assert plant.state.replicas == before


def test_missing_p99_with_traffic_holds_but_no_traffic_is_data():
    plant = make_plant(replicas=3)
    obs = Observation(at_s=plant.clock.now, request_rate=500.0, p99_ms=None, ready_replicas=3)
    d, _ = decide(
        config=plant.config, profile=plant.profile, observation=obs, state=plant.state, now_s=plant.clock.now
    )
    assert (d.action, d.reason) == (ScalingAction.HOLD, Reason.METRICS_MISSING)
    # Zero traffic has no P99 (Triton's summary is NaN) and is a valid reason to shrink eventually.
    state = plant.state
    clock = FakeClock()
    for _ in range(40):
        obs = Observation(at_s=clock.now, request_rate=0.0, p99_ms=None, ready_replicas=state.replicas)
        d, state = decide(
            config=plant.config, profile=plant.profile, observation=obs, state=state, now_s=clock.now
        )
        clock.advance(15)
    assert state.replicas == plant.config.min_replicas


@pytest.mark.parametrize("how", ["data_age", "old_observation"])
def test_stale_metrics_hold(how: str):
    plant = make_plant(replicas=5)
    clock = plant.clock
    age = STALE_AFTER_S + 1
    if how == "data_age":
        obs = Observation(at_s=clock.now, request_rate=50.0, p99_ms=10.0, ready_replicas=5, data_age_s=age)
    else:
        obs = Observation(at_s=clock.now - age, request_rate=50.0, p99_ms=10.0, ready_replicas=5)
    d, new = decide(
        config=plant.config, profile=plant.profile, observation=obs, state=plant.state, now_s=clock.now
    )
    assert (d.action, d.reason, d.replicas) == (ScalingAction.HOLD, Reason.METRICS_STALE, 5)
    assert new == plant.state
    assert "old" in d.message


def test_replica_bounds():
    plant = make_plant(replicas=2)
    d = plant.run(1e6, 3)[-1]
    assert d.replicas == plant.config.max_replicas
    assert d.reason == Reason.AT_MAX_REPLICAS
    plant = make_plant(replicas=25)  # above max_replicas=20, e.g. the spec was lowered
    d = plant.step(100.0)
    assert (d.replicas, d.reason) == (20, Reason.BOUNDS_ENFORCED)
    config = PolicyConfig(p99_target_ms=TARGET, min_replicas=3, max_replicas=5)
    plant = Plant(
        config=config,
        profile=make_profile(),
        state=PolicyState.initial(replicas=1, batching=BatchingConfig(max_batch_size=8)),
    )
    d = plant.step(10.0)
    assert (d.replicas, d.reason) == (3, Reason.BOUNDS_ENFORCED)
    plant.run(10.0, 60)
    assert plant.state.replicas == 3


def test_step_limits():
    plant = make_plant(
        replicas=1,
        max_scale_up_step=2,
        max_scale_down_step=1,
        scale_up_cooldown_s=0.0,
        cooldown_s=0.0,
        scale_down_stabilization_s=0.0,
    )
    ups = plant.run(8000.0, 6)
    series = [1] + replica_series(ups)
    assert max(b - a for a, b in zip(series, series[1:], strict=False)) == 2
    downs = plant.run(100.0, 10)
    series = [ups[-1].replicas] + replica_series(downs)
    assert min(b - a for a, b in zip(series, series[1:], strict=False)) == -1


def test_up_cooldown_and_alert_skips_it():
    plant = make_plant(replicas=1, max_scale_up_step=1)
    first = plant.step(5000.0)
    assert first.action in (ScalingAction.SCALE_UP, ScalingAction.SCALE_UP_AND_REBATCH)
    plant.clock.now = first.at_s + 1.0  # the next evaluation comes early (e.g. a webhook)
    held = plant.step(5000.0)
    assert (held.action, held.reason) == (ScalingAction.HOLD, Reason.COOLDOWN)
    plant.clock.now = held.at_s + 1.0
    forced = plant.step(5000.0, alert=True)
    assert forced.replicas == held.replicas + 1


def test_a_surge_decision_skips_the_up_cooldown_but_not_the_step_limit():
    plant = make_plant(replicas=1, max_scale_up_step=1)
    first = plant.step(5000.0)
    plant.clock.now = first.at_s + 1.0
    held = plant.step(5000.0)
    assert held.reason == Reason.COOLDOWN
    plant.clock.now = held.at_s + 1.0  # still within the cooldown of the first scale-up
    surged = plant.step(5000.0, surge=True)  # a fast check saw the arrivals above the capacity
    assert surged.replicas == first.replicas + 1  # one step: the step limit still holds


def test_alert_uses_a_larger_margin_and_blocks_scale_down():
    plant = make_plant(replicas=3)
    normal = plant.step(3000.0)
    alert_plant = make_plant(replicas=3)
    alerted = alert_plant.step(3000.0, alert=True)
    assert alerted.replicas >= normal.replicas
    assert alerted.predicted_p99_ms is not None and alerted.predicted_p99_ms <= TARGET * 0.7
    light = make_plant(replicas=10, scale_down_stabilization_s=0.0, cooldown_s=0.0)
    d = light.run(100.0, 5, alert=True)[-1]
    assert (d.action, d.reason, d.replicas) == (ScalingAction.HOLD, Reason.ALERT_ACTIVE, 10)
    # The alert looks back minutes; once no requests flow, nothing holds the size any more.
    idle = make_plant(replicas=10, scale_down_stabilization_s=0.0, cooldown_s=0.0)
    d = idle.run(0.0, 5, alert=True)[1]  # the first call starts the stabilization window
    assert (d.action, d.reason) == (ScalingAction.SCALE_DOWN, Reason.OVER_PROVISIONED)


def test_the_objective_sets_the_margin_a_stricter_one_pays_for_more_replicas():
    """The same steady load: 99.9% keeps more of the SLO free (more replicas), 95% less, 99% as before."""

    def settled(objective: float) -> Decision:
        return make_plant(replicas=3, objective=objective).run(4000.0, 12)[-1]

    loose, default, strict = settled(0.95), settled(0.99), settled(0.999)
    assert loose.replicas <= default.replicas < strict.replicas
    for decision, objective in ((loose, 0.95), (default, 0.99), (strict, 0.999)):
        assert decision.predicted_p99_ms is not None
        assert decision.predicted_p99_ms <= TARGET * (1 - slo_margin(objective))


def test_the_margin_grows_by_a_step_for_each_tenfold_smaller_budget_within_its_bounds():
    assert slo_margin(0.99) == pytest.approx(SLO_MARGIN)
    assert slo_margin(0.999) == pytest.approx(SLO_MARGIN + MARGIN_PER_DECADE)
    assert slo_margin(0.9999) == pytest.approx(SLO_MARGIN + 2 * MARGIN_PER_DECADE)
    objectives = (0.5, 0.9, 0.95, 0.97, 0.99, 0.995, 0.999, 0.9999)
    margins = [slo_margin(x) for x in objectives]
    assert margins == sorted(margins) and margins[0] < margins[-1]
    assert all(MIN_SLO_MARGIN <= m <= MAX_SLO_MARGIN for m in margins)
    assert slo_margin(0.5) == MIN_SLO_MARGIN
    # An alert keeps more free, never past the bound.
    assert slo_margin(0.99, alert=True) == pytest.approx(SLO_MARGIN + ALERT_EXTRA_MARGIN)
    assert slo_margin(0.9999, alert=True) == MAX_SLO_MARGIN
    assert PolicyConfig(p99_target_ms=50.0, objective=0.999).margin == slo_margin(0.999)


def test_dry_run_records_without_acting():
    plant = make_plant(replicas=2, dry_run=True)
    decisions = plant.run(6000.0, 5)
    assert all(d.dry_run for d in decisions)
    assert decisions[0].replicas > 2
    assert plant.state.replicas == 2
    assert plant.state.batching == BatchingConfig(max_batch_size=8)
    assert plant.state.timers.last_replica_change_s is None


def test_fixed_batching_is_never_changed():
    fixed = BatchingConfig(max_batch_size=4, max_queue_delay_us=100)
    plant = make_plant(replicas=1, batching_mode="fixed", fixed_batching=fixed)
    decisions = plant.run(200.0, 5) + plant.run(5000.0, 20) + plant.run(200.0, 40)
    assert {d.batching for d in decisions} == {fixed}
    assert max(d.replicas for d in decisions) > 1
    assert all(
        d.action not in (ScalingAction.REBATCH, ScalingAction.SCALE_UP_AND_REBATCH) for d in decisions[1:]
    )


def test_queue_depth_target_adds_replicas():
    plant = make_plant(replicas=2, max_queue_depth=4.0)
    obs = Observation(
        at_s=plant.clock.now, request_rate=100.0, p99_ms=5.0, ready_replicas=2, queue_depth_per_replica=10.0
    )
    d, _ = decide(
        config=plant.config, profile=plant.profile, observation=obs, state=plant.state, now_s=plant.clock.now
    )
    assert (d.replicas, d.reason) == (5, Reason.QUEUE_DEPTH_HIGH)


def test_queue_growth_counts_as_demand():
    plant = make_plant(replicas=2)
    t = plant.clock.now
    # Completions are capped by capacity under overload; the queue's growth is the unserved demand.
    obs1 = Observation(
        at_s=t, request_rate=1000.0, p99_ms=20.0, ready_replicas=2, queue_depth_per_replica=0.0
    )
    d1, state = decide(
        config=plant.config, profile=plant.profile, observation=obs1, state=plant.state, now_s=t
    )
    obs2 = Observation(
        at_s=t + 15, request_rate=1000.0, p99_ms=20.0, ready_replicas=2, queue_depth_per_replica=15000.0
    )
    d2, _ = decide(config=plant.config, profile=plant.profile, observation=obs2, state=state, now_s=t + 15)
    assert d2.replicas > d1.replicas
    assert "3000.0 req/s" in d2.message


def test_decide_is_fast():
    plant = make_plant(replicas=4)
    plant.run(3000.0, 50)
    start = time.perf_counter()
    plant.run(3500.0, 500)
    per_call = (time.perf_counter() - start) / 500
    assert per_call < 2e-3, per_call


def _decide_at(plant: Plant, obs: Observation) -> tuple[Decision, PolicyState]:
    return decide(
        config=plant.config, profile=plant.profile, observation=obs, state=plant.state, now_s=obs.at_s
    )


def test_a_recent_rate_well_above_the_windows_drives_the_size():
    plant = make_plant(replicas=2)
    t = plant.clock.now
    base = {"at_s": t, "request_rate": 1000.0, "p99_ms": 20.0, "ready_replicas": 2, "recent_window_s": 15.0}
    window_only, _ = _decide_at(plant, Observation(**base))
    # A step 15 s ago: the 60 s window's average has moved a quarter of the way; the recent rate all of it.
    stepped, _ = _decide_at(plant, Observation(**{**base, "recent_request_rate": 4000.0}))
    assert stepped.replicas > window_only.replicas
    assert "4000.0 req/s:" in stepped.message
    # Within Poisson noise of the window's rate (3 sigma of 1030 req/s over 15 s is ~25 req/s): ignored.
    noisy, _ = _decide_at(plant, Observation(**{**base, "recent_request_rate": 1020.0}))
    assert "1000.0 req/s:" in noisy.message
    # A recent rate below the window's never lowers the demand (scale-down stays on the long window).
    calm, _ = _decide_at(plant, Observation(**{**base, "recent_request_rate": 200.0}))
    assert "1000.0 req/s:" in calm.message


def test_a_backlog_is_sized_to_drain_and_the_drain_replicas_do_not_hold_the_window():
    plant = make_plant(replicas=2, backlog_drain_s=30.0)
    t = plant.clock.now
    queued = Observation(
        at_s=t, request_rate=3000.0, p99_ms=400.0, ready_replicas=2, queue_depth_per_replica=30000.0
    )
    d, state = _decide_at(plant, queued)
    # 60000 queued over 30 s: 2000 req/s of capacity on top of the 3000 req/s of arrivals.
    assert "+ 2000.0 req/s to drain 60000 queued" in d.message
    no_drain, _ = decide(
        config=replace(plant.config, backlog_drain_s=0.0),
        profile=plant.profile,
        observation=queued,
        state=plant.state,
        now_s=t,
    )
    assert d.replicas > no_drain.replicas
    # The stabilization window records what the arrivals alone need, not the drain's extra replicas.
    assert state.window.recommendations[-1][1] <= no_drain.replicas
    # Less than a full batch per replica queued is no backlog: nothing extra.
    short = Observation(
        at_s=t, request_rate=1000.0, p99_ms=20.0, ready_replicas=2, queue_depth_per_replica=4.0
    )
    assert "to drain" not in _decide_at(plant, short)[0].message


def test_an_alert_does_not_reload_a_batching_that_meets_the_normal_margin():
    # At 1750 req/s on 2 replicas max batch 8 predicts 36 ms: within 50 ms less the normal 15% margin
    # (42.5 ms), outside the alert's 30% (35 ms). A reload stalls requests for seconds; the alert's
    # extra margin alone is not worth one, so batching stays and replicas carry the margin.
    plant = make_plant(replicas=2, batch=8)
    alerted = plant.step(1750.0, alert=True)
    assert alerted.batching == BatchingConfig(max_batch_size=8)
    assert (alerted.action, alerted.replicas) == (ScalingAction.SCALE_UP, 3)
    assert alerted.predicted_p99_ms is not None and alerted.predicted_p99_ms <= TARGET * 0.7
    # Without the alert the same batching is kept too, and a batching that misses the normal
    # margin is still replaced under an alert.
    assert make_plant(replicas=2, batch=8).step(1750.0).batching == BatchingConfig(max_batch_size=8)
    assert make_plant(replicas=2, batch=1).step(1750.0, alert=True).batching.max_batch_size > 1


def test_a_correction_learned_at_light_load_is_not_applied_to_a_heavily_loaded_candidate():
    # A plant whose P99 is half the model's below half capacity and the model's above (the shape seen
    # on the real-pods runs: 1.7x over-predicted at a third of capacity, close at three quarters).
    # At 1900 req/s, 4 replicas run at 47% (observed 8.5 ms), 3 at 63% (21 ms), 2 at 95% (66 ms,
    # over the 50 ms target). One factor learned on 4 replicas (x0.5) would predict 33 ms for 2.
    fixed = BatchingConfig(max_batch_size=8)
    plant = make_plant(
        replicas=4, batch=8, batching_mode="fixed", scale_down_stabilization_s=0.0, cooldown_s=0.0
    )
    shape = BatchShape.of(fixed)
    sizes = []
    for _ in range(40):
        now = plant.clock.advance(15.0)
        n = plant.state.replicas
        light = (
            utilization(rate_per_s=1900.0, replicas=n, shape=shape, service=plant.profile.service_time) < 0.5
        )
        obs = Observation(
            at_s=now,
            request_rate=1900.0,
            p99_ms=plant.p99(1900.0, n, fixed) * (0.5 if light else 1.0),
            ready_replicas=n,
        )
        _, plant.state = decide(
            config=plant.config, profile=plant.profile, observation=obs, state=plant.state, now_s=now
        )
        sizes.append(plant.state.replicas)
    # 4 replicas were too many and went; 2 would miss the SLO and were never tried.
    assert min(sizes) == plant.state.replicas == 3
    assert plant.p99(1900.0, plant.state.replicas, fixed) <= TARGET


def test_a_window_teaches_the_factor_of_its_own_load():
    plant = make_plant(replicas=4, batch=8)
    t = plant.clock.now
    shape = BatchShape.of(plant.state.batching)

    def learned(rate: float) -> tuple[float, float, float]:
        obs = Observation(
            at_s=t, request_rate=rate, p99_ms=0.5 * plant.p99(rate, 4, plant.state.batching), ready_replicas=4
        )
        _, state = decide(
            config=plant.config, profile=plant.profile, observation=obs, state=plant.state, now_s=t
        )
        rho = utilization(rate_per_s=rate, replicas=4, shape=shape, service=plant.profile.service_time)
        return rho, state.learned.correction_light, state.learned.correction_heavy

    rho, light, heavy = learned(800.0)
    assert rho < 0.3 and light < 1.0 and heavy == 1.0
    rho, light, heavy = learned(3000.0)
    assert rho > 0.7 and light == 1.0 and heavy < 1.0


def _overloaded(plant: Plant, *, rate: float, queued_per_replica: float, ready: int) -> Observation:
    return Observation(
        at_s=plant.clock.now,
        request_rate=rate,
        p99_ms=400.0,
        ready_replicas=ready,
        queue_depth_per_replica=queued_per_replica,
    )


def test_the_drain_counts_the_backlog_that_builds_while_new_replicas_start():
    # 2 replicas at max batch 32 serve 3200 req/s at most; 6000 req/s arrive. Replicas asked for now
    # serve in 30 s, by when 2800 req/s x 30 s more have queued on top of the 200 queued now.
    plant = make_plant(replicas=2, batch=32, replica_startup_s=30.0)
    obs = _overloaded(plant, rate=6000.0, queued_per_replica=100.0, ready=2)
    d, _ = _decide_at(plant, obs)
    assert "+ 2806.7 req/s to drain 200 queued and 84000 more before new replicas serve" in d.message
    instant = decide(
        config=replace(plant.config, replica_startup_s=0.0),
        profile=plant.profile,
        observation=obs,
        state=plant.state,
        now_s=obs.at_s,
    )[0]
    assert "+ 6.7 req/s to drain 200 queued:" in instant.message
    assert d.replicas > instant.replicas
    # Replicas asked for 20 s ago are still starting: only their remaining 10 s add to the backlog.
    pending = replace(
        plant.state, replicas=6, timers=replace(plant.state.timers, awaiting_ready_since_s=obs.at_s - 20.0)
    )
    d, _ = decide(config=plant.config, profile=plant.profile, observation=obs, state=pending, now_s=obs.at_s)
    assert "to drain 200 queued and 28000 more" in d.message


def test_the_start_up_time_is_learned_from_the_services_own_scale_ups():
    plant = make_plant(replicas=2, batch=32, replica_startup_s=30.0)
    t0 = plant.clock.now
    up, state = _decide_at(plant, _overloaded(plant, rate=6000.0, queued_per_replica=0.0, ready=2))
    assert up.action == ScalingAction.SCALE_UP and state.timers.awaiting_ready_since_s == t0
    plant.state = state
    # Still starting: nothing learned yet.
    plant.clock.advance(15.0)
    _, state = _decide_at(plant, _overloaded(plant, rate=6000.0, queued_per_replica=0.0, ready=2))
    assert state.learned.replica_startup_s is None and state.timers.awaiting_ready_since_s == t0
    plant.state = state
    # Every replica asked for reports 45 s after the decision: that is this service's start-up time.
    plant.clock.advance(30.0)
    _, state = _decide_at(plant, _overloaded(plant, rate=6000.0, queued_per_replica=0.0, ready=up.replicas))
    assert (
        state.learned.replica_startup_s == pytest.approx(45.0) and state.timers.awaiting_ready_since_s is None
    )
    # A later sample of 25 s is averaged in.
    later = replace(state, timers=replace(state.timers, awaiting_ready_since_s=plant.clock.now))
    plant.clock.advance(25.0)
    obs = _overloaded(plant, rate=6000.0, queued_per_replica=0.0, ready=up.replicas)
    _, state = decide(
        config=plant.config, profile=plant.profile, observation=obs, state=later, now_s=obs.at_s
    )
    assert state.learned.replica_startup_s == pytest.approx(35.0)
    # It survives a restart of the operator (the learned part's dict form, as the status keeps it).
    assert Learned(**json.loads(json.dumps(asdict(state.learned)))).replica_startup_s == pytest.approx(35.0)


def test_a_backlog_the_fleet_cannot_carry_gets_the_fastest_batching_until_it_is_drained():
    # 2 replicas at max batch 8 (1000 req/s each at most) get 2100 req/s with 100 requests queued
    # each: the queued requests can only leave through these two (a Service does not move them),
    # and at max batch 8 they cannot even keep up, so they reload to max batch 32 now.
    plant = make_plant(replicas=2, batch=8, replica_startup_s=0.0)
    d, state = _decide_at(plant, _overloaded(plant, rate=2100.0, queued_per_replica=100.0, ready=2))
    assert d.batching.max_batch_size == 32
    plant.state = state
    plant.clock.advance(BATCHING_COOLDOWN_S)
    # Drained: the fastest batching is kept while it meets the SLO (no reload back and forth).
    calm = Observation(
        at_s=plant.clock.now,
        request_rate=2100.0,
        p99_ms=30.0,
        ready_replicas=d.replicas,
        queue_depth_per_replica=2.0,
    )
    d, _ = _decide_at(plant, calm)
    assert d.batching.max_batch_size == 32 and d.action == ScalingAction.NONE


def test_a_backlog_the_fleet_drains_as_it_is_is_not_worth_a_reload():
    # At 1500 req/s the same two replicas have 500 req/s to spare: 200 queued requests drain in
    # well under a second without a reload (which would stall requests for seconds). On real pods
    # the old rule reloaded max batch 1 <-> 4 every 30-45 s on queues of three requests.
    plant = make_plant(replicas=2, batch=8, replica_startup_s=0.0)
    d, _ = _decide_at(plant, _overloaded(plant, rate=1500.0, queued_per_replica=100.0, ready=2))
    assert d.batching.max_batch_size == 8 and "to drain 200 queued" in d.message


@pytest.mark.parametrize(
    ("rate", "expected_batch"),
    [
        (830.0, 16),  # max batch 16 predicts 41.6 ms: within 50 ms less the 15% margin, kept
        (840.0, 32),  # 16 misses (45.0 ms), 32 meets it (41.9 ms): reloaded although only 7% better
        (850.0, 16),  # both miss (49.0 vs 45.0 ms, 8% apart): not worth a reload
        (880.0, 32),  # both miss (67.8 vs 58.0 ms, 14% apart): reloaded
    ],
)
def test_at_the_fleets_limit_batching_moves_only_for_a_clear_gain(rate, expected_batch):
    # One replica, no more allowed: only batching can move, and near capacity the neighbouring
    # batchings predict nearly the same P99; each reload stalls requests for seconds.
    profile = make_profile(intercept_ms=1.0, per_item_ms=1.0)
    config = PolicyConfig(p99_target_ms=TARGET, min_replicas=1, max_replicas=1)
    state = PolicyState.initial(replicas=1, batching=BatchingConfig(max_batch_size=16))
    current_p99 = Plant(config=config, profile=profile, state=state).p99(rate, 1, state.batching)
    obs = Observation(
        at_s=0.0, request_rate=rate, p99_ms=current_p99, ready_replicas=1, queue_depth_per_replica=0.0
    )
    decision, _ = decide(config=config, profile=profile, observation=obs, state=state, now_s=0.0)
    assert decision.batching.max_batch_size == expected_batch
    assert decision.replicas == 1


def test_a_batching_that_only_eats_into_the_margin_is_not_reloaded_for_one_that_misses_too():
    # Max batch 16 predicts 48.8 ms (within the 50 ms SLO, not its 15% margin), 32 predicts 43.4 ms:
    # 11% better but still short of the margin. A reload stalls requests for seconds; it must
    # restore the margin, or rescue a batching predicted past the SLO itself.
    profile = make_profile(intercept_ms=3.0, per_item_ms=1.0)
    config = PolicyConfig(p99_target_ms=TARGET, min_replicas=1, max_replicas=1)
    state = PolicyState.initial(replicas=1, batching=BatchingConfig(max_batch_size=16))
    plant = Plant(config=config, profile=profile, state=state)

    def decided(rate: float) -> int:
        obs = Observation(
            at_s=0.0,
            request_rate=rate,
            p99_ms=plant.p99(rate, 1, state.batching),
            ready_replicas=1,
            queue_depth_per_replica=0.0,
        )
        return decide(config=config, profile=profile, observation=obs, state=state, now_s=0.0)[
            0
        ].batching.max_batch_size

    assert decided(710.0) == 16
    assert plant.p99(760.0, 1, state.batching) > TARGET  # past the SLO itself: the clear gain is taken
    assert decided(760.0) == 32


def _with_costly_reload(plant: Plant) -> Plant:
    """The engine of the real pods: a reload takes 3.5 s and keeps 40% of a replica's throughput."""
    plant.profile = plant.profile.model_copy(
        update={"reload": ReloadCost(seconds=3.5, served_share=0.4, worst_latency_ms=80.0)}
    )
    return plant


def test_a_costly_reload_is_not_pulled_under_load_while_replicas_can_meet_the_slo():
    plant = _with_costly_reload(make_plant(replicas=2, batch=1))
    # Batch 32 would carry 1600 req/s on these 2 replicas (test_batching_moves_before_replicas), but
    # at their load a 3.5 s reload would delay requests ~2 s: batch 1 on more replicas meets it.
    d = plant.step(1600.0)
    assert d.batching == BatchingConfig(max_batch_size=1)
    assert d.action == ScalingAction.SCALE_UP and d.replicas > 2
    assert "reloads held: one now would delay requests ~2100 ms" in d.message
    plant.run(1600.0, 12)
    assert plant.state.batching == BatchingConfig(max_batch_size=1)
    assert plant.true_p99[-1] <= TARGET


def test_a_costly_reload_is_pulled_when_no_replica_count_within_bounds_meets_the_slo():
    plant = _with_costly_reload(make_plant(replicas=2, batch=1))
    plant.config = replace(plant.config, max_replicas=2)
    d = plant.step(1600.0)
    assert d.batching.max_batch_size > 1 and d.replicas == 2
    assert "reloads held" not in d.message
    assert plant.p99(1600.0, 2, d.batching) <= TARGET


def _held_at_four(*, highs: int, scaled_up_ago_s: float) -> Plant:
    """A fleet of 4 whose load (3000 req/s) needs 3, with `highs` of the window's earlier
    recommendations at 4 and the rest at 3."""
    plant = make_plant(replicas=6)
    plant.run(3000.0, 40)  # settles at 3 replicas
    now = plant.clock.now
    earlier = [(now - 15.0 * i, 4 if i <= highs else 3) for i in range(18, 0, -1)]
    plant.state = replace(
        plant.state,
        replicas=4,
        window=replace(plant.state.window, recommendations=tuple(sorted(earlier))),
        timers=replace(
            plant.state.timers,
            last_scale_up_s=now - scaled_up_ago_s,
            last_replica_change_s=now - scaled_up_ago_s,
        ),
    )
    return plant


def test_one_high_recommendation_in_the_window_does_not_hold_the_fleet():
    """A robust max: on a steady load one period's noisy estimate asked for a replica more."""
    d = _held_at_four(highs=1, scaled_up_ago_s=3600.0).step(3000.0)
    assert (d.action, d.reason, d.replicas) == (ScalingAction.SCALE_DOWN, Reason.OVER_PROVISIONED, 3)


def test_a_short_window_keeps_the_plain_max():
    """The demo's 30 s window holds two earlier periods: no outlier to spare."""
    plant = _held_at_four(highs=1, scaled_up_ago_s=3600.0)
    now = plant.clock.now
    plant.config = replace(plant.config, scale_down_stabilization_s=30.0)
    plant.state = replace(
        plant.state, window=replace(plant.state.window, recommendations=((now - 30.0, 3), (now - 15.0, 4)))
    )
    d = plant.step(3000.0)
    assert (d.action, d.reason, d.replicas) == (ScalingAction.HOLD, Reason.STABILIZING, 4)


def test_two_high_recommendations_or_a_recent_scale_up_hold_it():
    d = _held_at_four(highs=2, scaled_up_ago_s=3600.0).step(3000.0)
    assert (d.action, d.reason, d.replicas) == (ScalingAction.HOLD, Reason.STABILIZING, 4)
    # Within a window of a scale-up every higher recommendation holds: noise cannot reverse it.
    d = _held_at_four(highs=1, scaled_up_ago_s=200.0).step(3000.0)
    assert (d.action, d.reason, d.replicas) == (ScalingAction.HOLD, Reason.STABILIZING, 4)


@pytest.mark.parametrize(
    ("tweak", "guard"),
    [
        ({"p99_ms": TARGET * 1.2}, Reason.SLO_MISSED),  # the model says too many, the service says too slow
        ({"pods_unobserved": 1}, Reason.PODS_UNOBSERVED),  # a partial scrape: the summed rate reads low
    ],
)
def test_no_scale_down_while_the_slo_is_missed_or_some_pods_are_unobserved(
    tweak: dict[str, object], guard: str
) -> None:
    plant = make_plant(replicas=10, scale_down_stabilization_s=0.0, cooldown_s=0.0)
    observe = plant.observe
    plant.observe = lambda rate: observe(rate).model_copy(update=tweak)  # type: ignore[method-assign]
    held = plant.run(100.0, 5)
    assert (held[-1].action, held[-1].reason, held[-1].replicas) == (ScalingAction.HOLD, guard, 10)
    assert all(d.replicas == 10 for d in held)
    plant.observe = observe  # type: ignore[method-assign]
    assert plant.run(100.0, 5)[-1].replicas < 10  # the figures whole again: the scale-down goes on


def test_a_p99_still_holding_a_past_spike_does_not_hold_the_scale_down() -> None:
    """The window's P99 misses the SLO, but the load it came from is gone (the recent rate fell)."""
    plant = make_plant(replicas=10, scale_down_stabilization_s=0.0, cooldown_s=0.0)
    observe = plant.observe
    plant.observe = lambda rate: observe(rate).model_copy(  # type: ignore[method-assign]
        update={"p99_ms": TARGET * 1.2, "recent_request_rate": 0.5 * rate, "recent_window_s": 15.0}
    )
    assert plant.run(100.0, 5)[-1].replicas < 10


@pytest.mark.parametrize(
    ("over_capacity", "reason"), [(1.2, Reason.SLO_AT_RISK), (1.95, Reason.AT_MAX_REPLICAS)]
)
def test_a_scale_up_to_the_maximum_names_whether_the_maximum_is_predicted_to_hold(
    over_capacity: float, reason: str
):
    """The same ScaleUp 1->max carries SLOAtRisk, or AtMaxReplicas when max is predicted short.

    So a reader of the Events (a user, or a test) matches the action, not one reason: which of the
    two a step gets depends on the step's size against the maximum fleet's capacity.
    """
    plant = Plant(
        config=PolicyConfig(p99_target_ms=TARGET, min_replicas=1, max_replicas=2, max_batch_size_cap=1),
        profile=make_profile(),
        state=PolicyState.initial(replicas=1, batching=BatchingConfig(max_batch_size=1)),
    )
    capacity = replica_capacity_per_s(plant.profile, plant.state)
    d = plant.step(over_capacity * capacity)
    assert (d.action, d.replicas, d.reason) == (ScalingAction.SCALE_UP, 2, reason)


@pytest.mark.parametrize(
    "figures",
    [
        {"queue_depth_per_replica": 1e308},
        {"request_rate": 1e308},
        {"request_rate": 1e308, "recent_request_rate": 1e308, "p99_ms": 1e308, "queue_time_ms": 1e308},
        {"arrival_counts": (1.0, 1e308, float("inf"), 2.0), "arrival_bin_s": 2.0},
    ],
)
def test_absurd_figures_from_a_pod_are_taken_as_very_large_and_every_period_decides(figures):
    """A tenant's serving image writes the pages the figures come from: none may make a period raise."""
    config = PolicyConfig(p99_target_ms=TARGET, min_replicas=1, max_replicas=20)
    state = PolicyState.initial(replicas=2, batching=BatchingConfig(max_batch_size=8))
    base = {"request_rate": 10.0, "p99_ms": 30.0, "queue_depth_per_replica": 1.0, "ready_replicas": 2}
    observation = Observation(at_s=100.0, **{**base, **figures})
    for field_name, value in figures.items():
        if isinstance(value, float) and value > 1e9:
            assert getattr(observation, field_name) == 1e9
    assert all(c <= 1e9 for c in observation.arrival_counts)
    for now in (100.0, 115.0, 130.0):
        decision, state = decide(
            config=config,
            profile=make_profile(),
            observation=observation.model_copy(update={"at_s": now}),
            state=state,
            now_s=now,
        )
        assert 1 <= decision.replicas <= 20
        state = replace(state, replicas=decision.replicas)


def test_a_figure_that_is_not_a_number_is_missing_not_a_number():
    observation = Observation(at_s=1.0, request_rate=float("nan"), p99_ms=float("inf"), queue_time_ms=-1e300)
    assert observation.request_rate is None and observation.p99_ms is None
    assert observation.queue_time_ms == -1e9
