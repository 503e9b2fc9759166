"""Scale-up stabilization (`PolicyConfig.scale_up_stabilization_s`) on the fake-clock plant.

Like the HPA's: a scale-up goes to the lowest recommendation over the window, so a rise adds
replicas only once it has been wanted for the whole window; 0 (the default) scales up at once.
"""

from __future__ import annotations

import pytest
from policy_fakes import Plant, make_profile

from tailpilot.api.autoscaling import BatchingConfig, ScalingAction
from tailpilot.policy import PolicyConfig, PolicyState, Reason

TARGET = 50.0
PERIOD = 15.0
LOW, HIGH = 300.0, 6000.0  # req/s: 2 replicas carry LOW; HIGH needs 7 (make_profile's engine)
UP = (ScalingAction.SCALE_UP, ScalingAction.SCALE_UP_AND_REBATCH)


def make_plant(*, replicas: int = 2, **cfg: object) -> Plant:
    config = PolicyConfig(p99_target_ms=TARGET, min_replicas=1, max_replicas=20, **cfg)  # type: ignore[arg-type]
    state = PolicyState.initial(replicas=replicas, batching=BatchingConfig(max_batch_size=8))
    return Plant(config=config, profile=make_profile(), state=state)


def first_scale_up_after(plant: Plant, rate: float, periods: int) -> tuple[float, int]:
    """(seconds from the first call at `rate` to the first scale-up, its replicas)."""
    start = plant.clock.now
    for decision in plant.run(rate, periods):
        if decision.action in UP:
            return decision.at_s - start, decision.replicas
    raise AssertionError(f"no scale-up within {periods} periods")


def test_without_a_window_a_step_scales_up_at_the_first_call():
    plant = make_plant()
    plant.run(LOW, 8)
    waited, replicas = first_scale_up_after(plant, HIGH, 4)
    assert (waited, replicas) == (0.0, 7)
    assert plant.state.window.up_recommendations == ()  # nothing remembered without a window


@pytest.mark.parametrize("window", [PERIOD, 60.0, 120.0])
def test_a_step_scales_up_once_it_has_been_wanted_for_the_whole_window(window: float):
    plant = make_plant(scale_up_stabilization_s=window)
    plant.run(LOW, 12)
    start = plant.clock.now
    waited, replicas = first_scale_up_after(plant, HIGH, 20)
    assert (waited, replicas) == (window, 7)
    # Until then the size holds, and the decision says why and what was wanted.
    held = [d for d in plant.decisions if start <= d.at_s < start + window]
    assert len(held) == window / PERIOD and all(d.replicas == 2 for d in held)
    holds = [d for d in held if d.action is ScalingAction.HOLD]  # the others move batching only
    assert len(holds) >= len(held) - 1
    assert all(d.reason == Reason.STABILIZING for d in holds)
    assert all(d.message.startswith("wanted 7 replicas (SLOAtRisk)") for d in holds)


def test_a_rise_shorter_than_the_window_adds_no_replica():
    plant = make_plant(scale_up_stabilization_s=60.0)
    plant.run(LOW, 12)
    for _ in range(5):
        decisions = plant.run(HIGH, 3) + plant.run(LOW, 2)  # 45 s high, 30 s low, again and again
        assert all(d.replicas == 2 for d in decisions), [(d.action, d.replicas) for d in decisions]
    # The same pattern without the window scales up at the first high call.
    eager = make_plant()
    eager.run(LOW, 12)
    assert eager.step(HIGH).replicas == 7


def test_a_scale_up_goes_to_the_lowest_recommendation_of_the_window():
    plant = make_plant(scale_up_stabilization_s=60.0, scale_up_cooldown_s=0.0)
    plant.run(LOW, 12)
    ramp = [3000.0, 4000.0, 5000.0, 6000.0, 6000.0]
    wanted = []
    for rate in ramp:
        probe = make_plant(replicas=2)  # what the load alone asks for, from the same size
        probe.run(LOW, 12)
        wanted.append(probe.step(rate).replicas)
    assert wanted == sorted(wanted) and wanted[0] > 2 and wanted[-1] > wanted[0]
    decisions = [plant.step(rate) for rate in ramp]
    # 60 s after the ramp started the window holds the whole ramp: its lowest recommendation wins.
    assert decisions[-1].action in UP
    assert decisions[-1].replicas == min(wanted) == wanted[0]
    assert all(d.replicas == 2 for d in decisions[:-1])


def test_a_fresh_state_starts_the_window_empty():
    """An operator restart forgets the window (as the HPA does): the first call sees only itself."""
    plant = make_plant(scale_up_stabilization_s=300.0)
    decision = plant.step(HIGH)
    assert (decision.action in UP, decision.replicas) == (True, 7)


def test_an_alert_does_not_skip_the_window_but_bounds_are_enforced_at_once():
    plant = make_plant(scale_up_stabilization_s=60.0)
    plant.run(LOW, 12)
    alerted = plant.run(HIGH, 4, alert=True)
    assert all(d.replicas == 2 for d in alerted)
    assert plant.step(HIGH, alert=True).action in UP
    # Below min_replicas is not a recommendation to stabilize: it is moved back at once.
    below = Plant(
        config=PolicyConfig(
            p99_target_ms=TARGET, min_replicas=3, max_replicas=20, scale_up_stabilization_s=300.0
        ),
        profile=make_profile(),
        state=PolicyState.initial(replicas=1, batching=BatchingConfig(max_batch_size=8)),
    )
    below.run(LOW, 1)
    assert (below.decisions[0].reason, below.decisions[0].replicas) == (Reason.BOUNDS_ENFORCED, 3)


def test_the_window_keeps_only_its_own_span():
    plant = make_plant(scale_up_stabilization_s=60.0)
    plant.run(LOW, 20)
    times = [t for t, _ in plant.state.window.up_recommendations]
    assert times[-1] - times[0] == 60.0 and len(times) == 5


def test_scale_downs_are_unchanged_by_a_scale_up_window():
    plain, windowed = make_plant(replicas=9), make_plant(replicas=9, scale_up_stabilization_s=120.0)
    assert [d.replicas for d in plain.run(LOW, 40)] == [d.replicas for d in windowed.run(LOW, 40)]
    assert plain.state.replicas < 9


def test_a_negative_window_is_refused():
    with pytest.raises(ValueError, match="scale_up_stabilization_s"):
        PolicyConfig(p99_target_ms=TARGET, scale_up_stabilization_s=-1.0)
