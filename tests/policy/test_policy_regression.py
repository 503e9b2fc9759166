"""The regression gate's comparison of two engines at an operating point."""

from __future__ import annotations

import math

import pytest

from tailpilot.api.autoscaling import BatchingConfig
from tailpilot.api.engine import ServiceTimeModel
from tailpilot.policy.regression import compare_engines

BASE = ServiceTimeModel(intercept_ms=2.0, per_item_ms=0.5, jitter_cv=0.05)
BATCHING = BatchingConfig(max_batch_size=16, preferred_batch_sizes=(8, 16), max_queue_delay_us=500)


def scaled(model: ServiceTimeModel, factor: float) -> ServiceTimeModel:
    return model.model_copy(
        update={"intercept_ms": model.intercept_ms * factor, "per_item_ms": model.per_item_ms * factor}
    )


def compare(candidate: ServiceTimeModel, *, rate: float = 0.0, replicas: int = 1, max_batch: int = 16):
    return compare_engines(
        serving=BASE,
        serving_max_batch=16,
        candidate=candidate,
        candidate_max_batch=max_batch,
        batching=BATCHING,
        rate_per_s=rate,
        replicas=replicas,
    )


def test_the_same_engine_does_not_regress():
    same = compare(BASE, rate=300.0, replicas=2)
    assert same.regression_percent == pytest.approx(0.0)
    assert same.serving == same.candidate


@pytest.mark.parametrize("rate", [0.0, 200.0, 800.0])
def test_an_engine_slower_by_a_factor_regresses_by_at_least_that_in_capacity(rate):
    result = compare(scaled(BASE, 1.5), rate=rate, replicas=2)
    # Capacity scales exactly by 1/1.5: a third lower; the P99 rises by half or more (queueing).
    assert result.capacity_regression_percent == pytest.approx(100 / 3, rel=1e-6)
    assert result.latency_regression_percent >= 50.0 - 1e-6
    assert result.regression_percent >= 50.0 - 1e-6


def test_a_faster_engine_is_a_negative_regression():
    result = compare(scaled(BASE, 0.8), rate=400.0, replicas=2)
    assert result.regression_percent < 0
    assert result.candidate.capacity_per_s > result.serving.capacity_per_s


def test_an_engine_that_cannot_carry_the_current_load_is_an_unbounded_regression():
    capacity = compare(BASE).serving.capacity_per_s
    # The serving engine at 80% of one replica's capacity; the candidate, 2x slower, cannot keep up.
    result = compare(scaled(BASE, 2.0), rate=0.8 * capacity, replicas=1)
    assert math.isinf(result.candidate.p99_ms) and math.isinf(result.regression_percent)
    assert "cannot keep up" in result.describe()


def test_a_smaller_max_batch_is_judged_at_its_own_max():
    result = compare(BASE, max_batch=4)
    # Full batches of 4 instead of 16: fewer requests per second per replica.
    assert result.capacity_regression_percent > 0
    assert result.candidate.capacity_per_s == pytest.approx(1000 * 4 / (2.0 + 0.5 * 4))


def test_the_description_names_both_figures():
    text = compare(scaled(BASE, 1.5), rate=300.0, replicas=2).describe()
    assert "at 300.0 req/s on 2 replica(s)" in text
    assert "predicted P99" in text and "capacity per replica" in text and "+" in text
