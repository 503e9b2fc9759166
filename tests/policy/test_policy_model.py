"""Shape properties of the analytic dynamic-batcher model and the replica search."""

from __future__ import annotations

import math

import pytest
from policy_fakes import make_profile

from tailpilot.api.autoscaling import BatchingConfig
from tailpilot.api.engine import ReloadCost
from tailpilot.policy import BatchShape, capacity_per_s, predict_p99_ms
from tailpilot.policy.model import Correction, min_replicas_for, reload_delay_ms

SERVICE = make_profile(intercept_ms=4.0, per_item_ms=0.5, jitter_cv=0.1).service_time


def shape(batch: int, delay_us: int = 0, instances: int = 1) -> BatchShape:
    return BatchShape.of(
        BatchingConfig(max_batch_size=batch, max_queue_delay_us=delay_us, instances_per_replica=instances)
    )


def p99(rate: float, n: int, s: BatchShape) -> float:
    return predict_p99_ms(rate_per_s=rate, replicas=n, shape=s, service=SERVICE)


def test_capacity_matches_full_batches():
    assert capacity_per_s(shape(8), SERVICE) == pytest.approx(1000 * 8 / (4.0 + 0.5 * 8))
    assert capacity_per_s(shape(8, instances=2), SERVICE) == pytest.approx(2 * 1000 * 8 / 8.0)


@pytest.mark.parametrize("batch", [1, 4, 32])
def test_p99_grows_with_rate_and_falls_with_replicas(batch: int):
    s = shape(batch)
    cap = capacity_per_s(s, SERVICE)
    rates = [cap * f for f in (0.01, 0.2, 0.5, 0.8, 0.95)]
    values = [p99(r, 1, s) for r in rates]
    assert values == sorted(values)
    assert all(math.isfinite(v) for v in values)
    assert p99(cap * 1.01, 1, s) == math.inf
    by_replicas = [p99(cap * 3, n, s) for n in range(4, 12)]
    assert by_replicas == sorted(by_replicas, reverse=True)


def test_light_load_is_about_one_service_time():
    light = p99(1.0, 1, shape(8))
    assert SERVICE.mean_ms(1) <= light <= 2 * SERVICE.mean_ms(1) * (1 + 2.4 * SERVICE.jitter_cv)


def test_queue_delay_costs_latency_at_light_load_but_not_at_saturation_batching():
    assert p99(50.0, 1, shape(8, delay_us=5000)) > p99(50.0, 1, shape(8)) + 3.0
    cap = capacity_per_s(shape(8), SERVICE)
    # Near saturation batches fill on their own; the delay barely matters.
    assert p99(0.9 * cap, 1, shape(8, delay_us=5000)) == pytest.approx(p99(0.9 * cap, 1, shape(8)), rel=0.1)


def test_bigger_batches_carry_more_load():
    rate = 1500.0
    assert p99(rate, 1, shape(2)) == math.inf
    assert math.isfinite(p99(rate, 1, shape(32)))


@pytest.mark.parametrize("rate", [0.0, 10.0, 900.0, 5000.0, 40000.0])
@pytest.mark.parametrize("batch", [1, 8, 32])
def test_min_replicas_matches_a_brute_force_scan(rate: float, batch: int):
    s = shape(batch)
    target = 30.0
    found = min_replicas_for(
        rate_per_s=rate,
        target_ms=target,
        shape=s,
        service=SERVICE,
        correction=Correction(1.2, 1.2),
        lo=1,
        hi=40,
    )
    brute = next((n for n in range(1, 41) if 1.2 * p99(rate, n, s) <= target), None)
    assert (found[0] if found else None) == brute


def test_scale_to_zero_only_without_traffic():
    s = shape(8)
    assert min_replicas_for(
        rate_per_s=0.0, target_ms=30, shape=s, service=SERVICE, correction=Correction(), lo=0, hi=5
    ) == (0, 0.0)
    found = min_replicas_for(
        rate_per_s=5.0, target_ms=30, shape=s, service=SERVICE, correction=Correction(), lo=0, hi=5
    )
    assert found is not None and found[0] == 1


def test_max_batch_one_has_no_batch_size_spread():
    # A CPU engine whose time is nearly all per item (measured: 6 + 48.5 ms/item, jitter CV 0.2).
    per_item = make_profile(intercept_ms=6.0, per_item_ms=48.5, jitter_cv=0.2).service_time
    service_p99 = (6.0 + 48.5) * (1 + 2.326 * 0.2)
    light = predict_p99_ms(rate_per_s=0.1, replicas=1, shape=shape(1), service=per_item)
    # At light load, batch 1 is one service time with its jitter: no spread of a batch that cannot grow.
    assert light == pytest.approx(service_p99, rel=0.05)
    # A max batch of 4 may execute bigger batches, so its light-load tail is longer.
    assert predict_p99_ms(rate_per_s=0.1, replicas=1, shape=shape(4), service=per_item) > light * 1.5


def test_the_correction_blends_its_light_and_heavy_factors_by_utilization():
    c = Correction(light=0.5, heavy=1.5)
    assert c.at(0.1) == c.at(0.3) == 0.5
    assert c.at(0.7) == c.at(2.0) == 1.5
    middle = c.at(0.5)
    assert middle == pytest.approx(math.sqrt(0.5 * 1.5))  # log-linear halfway
    assert all(c.at(u) <= c.at(u + 0.01) for u in (0.3, 0.4, 0.5, 0.6))  # continuous, monotone


def test_a_reload_delays_requests_by_the_load_it_cannot_serve_for_its_duration() -> None:
    cost = ReloadCost(seconds=3.5, served_share=0.4, worst_latency_ms=80.0)
    assert reload_delay_ms(cost, 0.3) == 0.0  # the instance left serving absorbs this load
    assert reload_delay_ms(cost, 0.8) == pytest.approx(0.4 * 3500.0)
    assert reload_delay_ms(cost, 2.5) == pytest.approx(0.6 * 3500.0)  # overloaded: fully busy
    assert reload_delay_ms(None, 0.9) == 0.0  # never timed: free, as the simulator's engines
