"""Scale to zero in the simulator: the activator's hold, wake and bounds; KPA's and TailPilot's zero."""

from __future__ import annotations

import numpy as np
import pytest

from tailpilot.api.autoscaling import BatchingConfig
from tailpilot.api.engine import ServiceTimeModel
from tailpilot.bench import scale_to_zero
from tailpilot.bench.simulator import ActivatorModel, FleetView, SimConfig, Target, simulate

SERVICE = ServiceTimeModel(intercept_ms=5.0, per_item_ms=1.0, jitter_cv=0.0)
BATCHING = BatchingConfig(max_batch_size=4)


class FollowTheFleet:
    """A controller that never decides: it keeps whatever size the fleet has (the wake's included)."""

    tick_s = 2.0

    def __init__(self, replicas: int) -> None:
        self._replicas = replicas

    def initial(self) -> Target:
        return Target(self._replicas, BATCHING)

    def decide(self, view: FleetView) -> Target:
        return Target(view.target_replicas, BATCHING)


def run(arrivals: list[float], *, startup_s: float = 10.0, activator: ActivatorModel | None = None):
    config = SimConfig(
        service=SERVICE,
        duration_s=200.0,
        startup_s=startup_s,
        min_replicas=0,
        activator=activator or ActivatorModel(),
    )
    return simulate(arrivals_s=np.asarray(arrivals), config=config, controller=FollowTheFleet(0))


def test_requests_at_zero_are_held_one_wake_asks_for_a_replica_and_they_are_served_when_it_is_ready():
    result = run([50.0, 50.5, 52.0])
    assert result.wakes_s == [51.0]  # the first held request's wake, one delay later; one wake only
    assert result.held.tolist() == [True, True, True]
    assert result.actions == [(51.0, 0, 1)]
    ready = 51.0 + 10.0
    assert np.all(result.done_s >= ready) and np.all(np.isfinite(result.done_s))
    # Once served, a later request goes straight to the replica.
    later = run([50.0, 100.0])
    assert later.held.tolist() == [True, False]
    assert later.latency_s[1] < 0.1


def test_beyond_the_bound_requests_are_refused_and_past_the_timeout_they_fail():
    bounded = run([50.0 + 0.1 * i for i in range(5)], activator=ActivatorModel(hold_limit=3))
    assert np.isfinite(bounded.done_s).tolist() == [True, True, True, False, False]
    late = run([50.0, 50.5], startup_s=30.0, activator=ActivatorModel(hold_timeout_s=20.0))
    assert not np.isfinite(late.done_s).any()  # the replica was ready 31 s after the first wait began


def test_without_an_activator_requests_at_zero_fail_as_before():
    config = SimConfig(service=SERVICE, duration_s=100.0, startup_s=10.0, min_replicas=0)
    result = simulate(arrivals_s=np.asarray([50.0]), config=config, controller=FollowTheFleet(0))
    assert result.wakes_s == [] and result.held.size == 0 and not np.isfinite(result.done_s).any()


class RecordHeld(FollowTheFleet):
    """Follows the fleet, recording what the activator holds at each tick and the ready replicas."""

    def __init__(self, replicas: int) -> None:
        super().__init__(replicas)
        self.seen: list[tuple[float, int, float | None, int]] = []

    def decide(self, view: FleetView) -> Target:
        self.seen.append((view.now_s, view.held_requests, view.held_since_s, view.ready_replicas))
        return super().decide(view)


def test_the_controller_sees_the_requests_held_and_since_when_until_a_replica_serves():
    config = SimConfig(
        service=SERVICE, duration_s=120.0, startup_s=30.0, min_replicas=0, activator=ActivatorModel()
    )
    controller = RecordHeld(0)
    simulate(arrivals_s=np.asarray([50.0 + 0.5 * i for i in range(20)]), config=config, controller=controller)
    holding = [(n, since) for t, n, since, ready in controller.seen if 55.0 <= t < 80.0]
    # Every request of the burst is held from 50 s (the oldest's arrival) until the replica serves.
    assert holding and all(since == 50.0 for _, since in holding)
    assert max(n for n, _ in holding) == 20
    after = [(n, since) for t, n, since, ready in controller.seen if t > 85.0 and ready > 0]
    assert after and all(n == 0 and since is None for n, since in after)


def test_tailpilot_sizes_a_woken_fleet_from_the_requests_held_before_its_replica_serves():
    setup, policy = scale_to_zero.ZeroSetup(), "tailpilot-zero-objective-90"
    controller = scale_to_zero.make_controller(setup, policy)
    arrivals, scored_from = setup.arrivals("Z1-idle-heavy")
    config = scale_to_zero.zero_config(setup, ts=90.0, policy=policy, scored_from_s=scored_from)
    run = simulate(arrivals_s=arrivals, config=config, controller=controller)
    # After each wake (0 -> 1), more replicas are asked for within the 90 s start-up: before the
    # first replica serves, from the requests held.
    assert len(run.wakes_s) >= 2
    for wake in run.wakes_s:
        raised = [(t, new) for t, old, new in run.actions if wake < t < wake + 90.0 and new > old]
        assert raised, (wake, run.actions)
    assert "WakeSized" in controller.reasons


@pytest.mark.slow
def test_a_service_woken_every_few_minutes_stays_up_while_kpa_cycles_through_cold_starts():
    setup = scale_to_zero.ZeroSetup()
    kpa = scale_to_zero.run_one((setup, "Z2-frequent-wakes", 30.0, "knative-kpa-zero"))
    tailpilot = scale_to_zero.run_one((setup, "Z2-frequent-wakes", 30.0, "tailpilot-zero"))
    assert kpa.cold_starts >= 5
    assert tailpilot.cold_starts <= 1 and tailpilot.pct_in_slo > kpa.pct_in_slo


@pytest.mark.slow
def test_an_idle_heavy_service_goes_to_zero_at_a_looser_objective_and_saves_replica_time():
    setup = scale_to_zero.ZeroSetup()
    one = scale_to_zero.run_one((setup, "Z1-idle-heavy", 5.0, "tailpilot-min1"))
    loose = scale_to_zero.run_one((setup, "Z1-idle-heavy", 5.0, "tailpilot-zero-objective-90"))
    assert one.cold_starts == 0 and loose.cold_starts >= 2
    assert loose.replica_seconds < 0.5 * one.replica_seconds
    assert loose.failed == 0 and loose.held > 0


def test_the_curve_joins_neighbouring_points_and_is_undefined_outside_them():
    points = [(100.0, 50.0), (300.0, 90.0), (200.0, 60.0)]
    assert scale_to_zero.curve_at(points, 150.0) == pytest.approx(55.0)
    assert scale_to_zero.curve_at(points, 250.0) == pytest.approx(75.0)
    assert scale_to_zero.curve_at(points, 50.0) is None and scale_to_zero.curve_at(points, 400.0) is None
