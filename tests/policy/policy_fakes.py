"""Fakes for the policy tests: a fluent profile builder, a fake clock and a model-driven plant.

The plant stands for a fleet whose true P99 is the analytic model times a bias
(so the online correction has something to learn), observed with optional noise.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

from tailpilot.api.autoscaling import BatchingConfig, Decision, Observation, ScalingAction
from tailpilot.api.engine import BatchProfilePoint, EngineProfile, ServiceTimeModel
from tailpilot.policy import BatchShape, PolicyConfig, PolicyState, decide, predict_p99_ms
from tailpilot.policy.service_fit import FitQuality, ServiceFit, WindowKind


def fitted_service(
    *,
    intercept_ms: float = 0.0,
    per_item_ms: float,
    windows: WindowKind = WindowKind.MIXED,
    samples: int = 6,
    batch_range: tuple[float, float] = (1.0, 1.0),
) -> ServiceFit:
    """A Fitted online service-time fit of `samples` windows of kind `windows`."""
    return ServiceFit(
        model=ServiceTimeModel(intercept_ms=intercept_ms, per_item_ms=per_item_ms, jitter_cv=0.3),
        quality=FitQuality.FITTED,
        samples=samples,
        batch_range=batch_range,
        windows=windows,
    )


def make_profile(
    *, intercept_ms: float = 4.0, per_item_ms: float = 0.5, jitter_cv: float = 0.1, max_batch: int = 32
) -> EngineProfile:
    st = ServiceTimeModel(intercept_ms=intercept_ms, per_item_ms=per_item_ms, jitter_cv=jitter_cv)
    points = [
        BatchProfilePoint(
            batch_size=b,
            p50_ms=st.mean_ms(b),
            p95_ms=st.mean_ms(b) * 1.1,
            p99_ms=st.mean_ms(b) * 1.2,
            throughput_per_s=1000 * b / st.mean_ms(b),
        )
        for b in (1, 2, 4, 8, 16, 32)
        if b <= max_batch
    ]
    return EngineProfile(
        engine_key="k" * 20,
        backend="onnxruntime",
        precision="fp32",
        hardware="cpu",
        max_batch_size=max_batch,
        points=points,
        service_time=st,
    )


@dataclass
class FakeClock:
    now: float = 1000.0

    def advance(self, seconds: float) -> float:
        self.now += seconds
        return self.now


@dataclass
class Plant:
    """Replays a rate schedule against the policy, with the model x bias as the true P99.

    `slowdown` stands for hardware that runs the engine that many times slower than the profile
    says (replicas sharing CPU cores); with `report_compute` the observations carry the compute
    time per batch that such hardware shows.
    """

    config: PolicyConfig
    profile: EngineProfile
    state: PolicyState
    bias: float = 1.0
    rate_noise_cv: float = 0.0
    p99_noise_cv: float = 0.0
    slowdown: float = 1.0
    report_compute: bool = False
    seed: int = 7
    clock: FakeClock = field(default_factory=FakeClock)
    decisions: list[Decision] = field(default_factory=list)
    true_p99: list[float] = field(default_factory=list)
    rng: random.Random = field(init=False)

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)

    def p99(self, rate: float, replicas: int, batching: BatchingConfig) -> float:
        raw = predict_p99_ms(
            rate_per_s=rate,
            replicas=replicas,
            shape=BatchShape.of(batching),
            service=self.true_service_time,
        )
        return self.bias * raw if math.isfinite(raw) else 20 * self.config.p99_target_ms

    @property
    def true_service_time(self) -> ServiceTimeModel:
        st = self.profile.service_time
        return st.model_copy(
            update={
                "intercept_ms": st.intercept_ms * self.slowdown,
                "per_item_ms": st.per_item_ms * self.slowdown,
            }
        )

    def observe(self, rate: float) -> Observation:
        noisy_rate = rate * math.exp(self.rng.gauss(0, self.rate_noise_cv)) if self.rate_noise_cv else rate
        true = self.p99(noisy_rate, self.state.replicas, self.state.batching)
        self.true_p99.append(true)
        p99 = true * math.exp(self.rng.gauss(0, self.p99_noise_cv)) if self.p99_noise_cv else true
        return Observation(
            at_s=self.clock.now,
            request_rate=noisy_rate,
            p99_ms=p99,
            ready_replicas=self.state.replicas,
            queue_depth_per_replica=0.0,
            compute_time_ms=self.true_service_time.mean_ms(1) if self.report_compute else None,
            mean_batch_size=1.0 if self.report_compute else None,
        )

    def step(self, rate: float, *, alert: bool = False, surge: bool = False) -> Decision:
        decision, self.state = decide(
            config=self.config,
            profile=self.profile,
            observation=self.observe(rate),
            state=self.state,
            now_s=self.clock.now,
            alert_active=alert,
            surge=surge,
        )
        self.decisions.append(decision)
        self.clock.advance(self.config.control_period_s)
        return decision

    def run(self, rate: float, periods: int, *, alert: bool = False) -> list[Decision]:
        return [self.step(rate, alert=alert) for _ in range(periods)]


def replica_series(decisions: list[Decision]) -> list[int]:
    return [d.replicas for d in decisions]


def reversals(decisions: list[Decision]) -> list[tuple[float, float]]:
    """(time, seconds since the previous opposite action) of every change of scaling direction."""
    out: list[tuple[float, float]] = []
    last_dir, last_at = 0, 0.0
    for d in decisions:
        if d.action in (ScalingAction.SCALE_UP, ScalingAction.SCALE_UP_AND_REBATCH):
            direction = 1
        elif d.action in (ScalingAction.SCALE_DOWN, ScalingAction.SCALE_DOWN_AND_REBATCH):
            direction = -1
        else:
            continue
        if last_dir and direction != last_dir:
            out.append((d.at_s, d.at_s - last_at))
        last_dir, last_at = direction, d.at_s
    return out
