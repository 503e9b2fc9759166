"""The GPU product benchmark: where the choice lands, the simulator's move, the money it counts."""

from __future__ import annotations

import numpy as np
import pytest

from tailpilot.api.autoscaling import BatchingConfig
from tailpilot.api.engine import ServiceTimeModel
from tailpilot.bench.gpu_products import (
    CHOICE,
    FIXED,
    H100,
    L4,
    ProductRun,
    best_single,
    default_products,
    money,
    run_on,
)
from tailpilot.bench.simulator import FleetView, SimConfig, Target, simulate
from tailpilot.bench.traces import piecewise_poisson
from tailpilot.policy.gpu_choice import REASON_MOVED_FOR_CAPACITY

SLO_MS = 880.0
PRODUCTS = default_products()


def _run(arrivals: np.ndarray, *, policy: str = CHOICE, duration_s: float, max_replicas: int) -> ProductRun:
    return run_on(
        arrivals,
        products=PRODUCTS,
        policy=policy,
        slo_ms=SLO_MS,
        duration_s=duration_s,
        startup_s=30.0,
        max_replicas=max_replicas,
        seed=1,
    )


def test_the_profiles_make_the_cheaper_product_depend_on_the_load():
    h100, l4 = (p.profile.service_time for p in PRODUCTS)
    assert h100.intercept_ms == pytest.approx(l4.intercept_ms / 3) and h100.per_item_ms == pytest.approx(
        l4.per_item_ms / 8
    )
    assert [p.name for p in PRODUCTS] == [H100, L4]


def test_a_low_constant_rate_lands_on_the_cheap_product_and_stays():
    arrivals = piecewise_poisson(steps=[(300.0, 5.0)], rng=np.random.default_rng(1))
    run = _run(arrivals, duration_s=300.0, max_replicas=8)
    assert run.moves == ()
    assert set(run.replica_seconds) == {L4} and run.replica_seconds[L4] == pytest.approx(300.0)
    assert run.dollars == pytest.approx(300.0 / 3600.0 * 0.80)
    assert run.pct_requests_in_slo > 99.0


def test_a_rate_the_cheap_product_cannot_carry_within_its_bound_moves_to_the_other_at_once():
    # 4 L4 replicas carry about 60 req/s within the SLO: 10 req/s places on the L4, 120 req/s does not fit.
    arrivals = piecewise_poisson(steps=[(60.0, 10.0), (240.0, 120.0)], rng=np.random.default_rng(2))
    run = _run(arrivals, duration_s=300.0, max_replicas=4)
    assert [(m.left, m.to, m.reason) for m in run.moves] == [(L4, H100, REASON_MOVED_FOR_CAPACITY)]
    # Moved as soon as a control period's rate showed it (no dwell for a capacity move).
    assert 60.0 < run.moves[0].at_s <= 120.0
    assert run.replica_seconds[H100] > 0 and run.replica_seconds[L4] > 0


class _MoveOnce:
    """Three L4 replicas, then at t=10 s two H100 replicas."""

    tick_s = 1.0

    def initial(self) -> Target:
        return Target(3, BatchingConfig(max_batch_size=1), L4)

    def decide(self, view: FleetView) -> Target:
        if view.now_s >= 10.0:
            return Target(2, BatchingConfig(max_batch_size=1), H100)
        return Target(3, BatchingConfig(max_batch_size=1))


def _sim_config(duration_s: float, *, startup_s: float) -> SimConfig:
    flat = ServiceTimeModel(intercept_ms=10.0, per_item_ms=0.0)
    return SimConfig(
        service=flat,
        duration_s=duration_s,
        startup_s=startup_s,
        products=((H100, flat), (L4, flat)),
    )


def test_a_move_keeps_the_old_replicas_serving_until_the_new_ones_are_ready_and_pays_for_both():
    arrivals = np.arange(0.0, 60.0, 0.05)
    res = simulate(arrivals_s=arrivals, config=_sim_config(60.0, startup_s=5.0), controller=_MoveOnce())
    assert res.moves == [(10.0, L4, H100)]
    # L4: 3 replicas until the H100s are ready at 15 s; H100: 2 from 10 s (starting included).
    assert res.replica_seconds_by_product[L4] == pytest.approx(3 * 15.0)
    assert res.replica_seconds_by_product[H100] == pytest.approx(2 * 50.0)
    assert res.replica_seconds == pytest.approx(3 * 15.0 + 2 * 50.0)
    assert np.isfinite(res.done_s).all()  # no request failed during the move


def test_money_of_a_fixed_fleet_is_replicas_times_hours_times_price():
    class Fixed:
        tick_s = 1.0

        def initial(self) -> Target:
            return Target(3, BatchingConfig(max_batch_size=1), H100)

        def decide(self, view: FleetView) -> Target:
            return Target(3, BatchingConfig(max_batch_size=1))

    res = simulate(
        arrivals_s=np.arange(0.0, 120.0, 0.5), config=_sim_config(120.0, startup_s=0.0), controller=Fixed()
    )
    assert res.replica_seconds_by_product == {H100: pytest.approx(360.0)}
    assert money(res.replica_seconds_by_product, PRODUCTS) == pytest.approx(3 * 120.0 / 3600.0 * 4.00)


def test_the_best_single_product_is_the_cheapest_holding_the_slo_as_well():
    def run(policy: str, dollars: float, pct: float) -> ProductRun:
        return ProductRun("t", policy, dollars, {}, pct, 100.0, 100.0)

    choice = run(CHOICE, 3.0, 99.9)
    cheap_but_worse, dear = run(FIXED + L4, 2.0, 95.0), run(FIXED + H100, 4.0, 99.95)
    assert best_single(choice, [cheap_but_worse, dear]) == (dear, True)
    assert best_single(run(CHOICE, 3.0, 99.99), [cheap_but_worse, run(FIXED + H100, 4.0, 99.0)])[1] is False
