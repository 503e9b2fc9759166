"""The regression gate's comparison: is a new engine worse where the service runs? (pure).

Both engines are judged by their profiles' fitted service times through the same
queueing model the autoscaler sizes with (`model.predict_p99_ms`,
`model.capacity_per_s`), at the service's operating point: the observed request
rate shared by the replicas in force, with the batching in force (its max batch
size clipped to each engine's own). Two figures per engine:

- the predicted P99 at that rate (at no traffic: one request alone), and
- the capacity of one replica (requests per second at full batches).

The regression is the worse of the P99's relative rise and the capacity's
relative fall, in percent. An engine that cannot carry the current rate on the
current replicas at all has an infinite P99, hence an infinite regression.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from tailpilot.api.autoscaling import BatchingConfig
from tailpilot.api.engine import ServiceTimeModel
from tailpilot.policy.model import BatchShape, capacity_per_s, predict_p99_ms


@dataclass(frozen=True)
class EngineFigures:
    """One engine at the operating point."""

    p99_ms: float
    capacity_per_s: float


@dataclass(frozen=True)
class EngineComparison:
    """The serving and the candidate engine at one operating point."""

    rate_per_s: float
    replicas: int
    serving: EngineFigures
    candidate: EngineFigures

    @property
    def latency_regression_percent(self) -> float:
        """How much higher the candidate's predicted P99 is (negative: lower)."""
        return _percent_rise(self.serving.p99_ms, self.candidate.p99_ms)

    @property
    def capacity_regression_percent(self) -> float:
        """How much lower the candidate's capacity per replica is (negative: higher)."""
        return -_percent_rise(self.serving.capacity_per_s, self.candidate.capacity_per_s)

    @property
    def regression_percent(self) -> float:
        """The worse of the two regressions."""
        return max(self.latency_regression_percent, self.capacity_regression_percent)

    def describe(self) -> str:
        """Both engines' figures in words, for a condition or an Event."""
        at = (
            f"{self.rate_per_s:.1f} req/s on {self.replicas} replica(s)" if self.rate_per_s > 0 else "no load"
        )
        return (
            f"at {at}: predicted P99 {_ms(self.serving.p99_ms)} serving vs {_ms(self.candidate.p99_ms)} new "
            f"({_signed(self.latency_regression_percent)}), capacity per replica "
            f"{self.serving.capacity_per_s:.1f} vs {self.candidate.capacity_per_s:.1f} req/s "
            f"({_signed(-self.capacity_regression_percent)})"
        )


def compare_engines(
    *,
    serving: ServiceTimeModel,
    serving_max_batch: int,
    candidate: ServiceTimeModel,
    candidate_max_batch: int,
    batching: BatchingConfig,
    rate_per_s: float,
    replicas: int,
) -> EngineComparison:
    """Both engines' predicted P99 and capacity per replica at the operating point."""
    replicas = max(1, replicas)
    rate = max(0.0, rate_per_s)

    def figures(service: ServiceTimeModel, max_batch: int) -> EngineFigures:
        shape = BatchShape.of(_clipped(batching, max_batch))
        return EngineFigures(
            p99_ms=predict_p99_ms(rate_per_s=rate, replicas=replicas, shape=shape, service=service),
            capacity_per_s=capacity_per_s(shape, service),
        )

    return EngineComparison(
        rate_per_s=rate,
        replicas=replicas,
        serving=figures(serving, serving_max_batch),
        candidate=figures(candidate, candidate_max_batch),
    )


def _clipped(batching: BatchingConfig, max_batch: int) -> BatchingConfig:
    if batching.max_batch_size <= max_batch:
        return batching
    preferred = tuple(p for p in batching.preferred_batch_sizes if p <= max_batch)
    return batching.model_copy(update={"max_batch_size": max_batch, "preferred_batch_sizes": preferred})


def _percent_rise(old: float, new: float) -> float:
    if math.isinf(new) and math.isinf(old):
        return 0.0
    if math.isinf(new):
        return math.inf
    if math.isinf(old):
        return -100.0
    if old <= 0:
        return 0.0 if new <= 0 else math.inf
    return (new - old) / old * 100.0


def _ms(value: float) -> str:
    return "unbounded (cannot keep up)" if math.isinf(value) else f"{value:.1f} ms"


def _signed(percent: float) -> str:
    return "n/a" if math.isinf(percent) else f"{percent:+.0f}%"
