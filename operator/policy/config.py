"""The policy's inputs that persist between calls: its configuration and its state.

Both are frozen dataclasses so a decision is a pure function of its arguments;
the caller (operator timer or benchmark simulator) keeps the `PolicyState`
returned by `decide` and passes it back on the next call. Defaults are chosen
for a 15 s control period and are documented in docs/autoscaling.md.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any, Literal

from tailpilot.api.autoscaling import BatchingConfig
from tailpilot.policy.model import Correction


class Reason:
    """CamelCase reasons carried by `Decision.reason` (and by Events and the status)."""

    #: The current replicas and batching meet the SLO with margin; nothing to do.
    WITHIN_SLO = "WithinSLO"
    #: Predicted (corrected) P99 at the current size is above the SLO minus margin: add replicas.
    SLO_AT_RISK = "SLOAtRisk"
    #: A cheaper batching keeps the SLO at the current replicas (batching is moved before replicas).
    REBATCH_FOR_SLO = "RebatchForSLO"
    #: Fewer replicas keep the SLO with margin and hysteresis over the whole stabilization window.
    OVER_PROVISIONED = "OverProvisioned"
    #: The queue depth per replica exceeds `max_queue_depth`: add replicas.
    QUEUE_DEPTH_HIGH = "QueueDepthHigh"
    #: The current replicas are outside [min, max] (e.g. the spec changed): moved back inside.
    BOUNDS_ENFORCED = "BoundsEnforced"
    #: Even `max_replicas` is predicted to miss the SLO; the policy holds at the maximum.
    AT_MAX_REPLICAS = "AtMaxReplicas"
    #: A scale-down is wanted but a higher recommendation inside the stabilization window holds it.
    STABILIZING = "Stabilizing"
    #: A change is wanted but the cooldown since the last action has not elapsed.
    COOLDOWN = "CooldownActive"
    #: No request rate (or no P99 while requests flow): the state is held; never scale down on no data.
    METRICS_MISSING = "MetricsMissing"
    #: The newest sample is older than `stale_after_s`: the state is held.
    METRICS_STALE = "MetricsStale"
    #: An SLO alert is firing: scale-down is suppressed.
    ALERT_ACTIVE = "AlertActive"


@dataclass(frozen=True)
class PolicyConfig:
    """Spec-derived bounds and tuning knobs of the policy (all times in seconds).

    Attributes:
        p99_target_ms: The service-level P99 latency SLO.
        min_replicas: Lower replica bound (spec).
        max_replicas: Upper replica bound (spec).
        batching_mode: "auto" lets the policy tune batching; "fixed" never changes it.
        max_batch_size_cap: Spec bound on Triton's max batch size; the effective cap is
            min(this, the engine profile's max batch size). None: the profile's.
        min_batch_size: Smallest max batch size the policy may choose.
        fixed_batching: The batching used in fixed mode (None: keep the state's batching).
        allow_preferred_batch_sizes: Whether candidates may set preferred batch sizes.
        queue_delay_candidates_us: Max queue delays the policy may choose from (auto mode).
        max_queue_depth: Optional queue-depth target per replica (pending requests).
        slo_margin: Fraction of the SLO kept free: candidates must predict P99 <= target * (1 - margin).
        alert_slo_margin: The margin while an SLO alert fires (more aggressive).
        hysteresis: Extra fraction required before scaling down or re-batching for cost.
        scale_down_stabilization_s: Scale-down uses the max recommendation over this window.
        stabilization_outliers: How many of the window's highest earlier recommendations the
            scale-down ignores (a robust max): one period's noisy rate estimate does not hold the
            fleet for a whole window. Never below the current recommendation.
        scale_up_cooldown_s: Minimum time after any replica change before a scale-up (skipped on alert).
        cooldown_s: Minimum time after a scale-up before a scale-down (successive scale-downs need only
            a control period each; the stabilization window already guards them).
        batching_cooldown_s: Minimum time between two batching reloads.
        max_scale_up_step: Most replicas added by one decision.
        max_scale_down_step: Most replicas removed by one decision.
        control_period_s: How often `decide` is called (used for the queue-growth estimate).
        stale_after_s: Observations older than this hold the state (MetricsStale).
        correction_alpha: EWMA weight (log space) of a new observed/predicted P99 ratio.
        correction_min: Lower bound of the online model-correction factor.
        correction_max: Upper bound of the online model-correction factor.
        correction_settle_s: No correction update this long after a replica or batching change or a
            backlog: the observed P99's window still contains the transient. Keep it >= the window.
            The service-time scale waits as long after a backlog.
        min_rate_for_correction_per_s: Below this request rate the P99 is too noisy to learn from.
        service_scale_alpha: EWMA weight (log space) of a new observed / profiled compute-time ratio.
        service_scale_min: Lower bound of the learned service-time scale.
        service_scale_max: Upper bound of the learned service-time scale.
        rate_rise_sigma: The recent rate replaces the window's rate when it exceeds it by more than this
            many Poisson standard deviations (a real rise, not noise).
        burst_false_alarm: How often steady Poisson traffic may read as a burst: a span of the arrival
            curve is a burst when its peak is beyond what Poisson noise gives with this probability
            (`tailpilot.policy.bursts`).
        burst_max_span_s: Longest span sized as a burst; longer ones are a sustained rate.
        backlog_drain_s: A backlog (more than a full batch queued per replica) is sized to be drained
            within this long, on top of the arrivals; 0 disables it. The backlog sized is the one the
            new replicas will find: the queue now plus what the ready replicas cannot serve until then.
        replica_startup_s: Seconds from asking for a replica to its serving, until the policy has
            timed a scale-up itself (then `PolicyState.replica_startup_s` is used).
        dry_run: Decisions are recorded (Decision.dry_run=True) but the state keeps the actual size.
    """

    p99_target_ms: float
    min_replicas: int = 1
    max_replicas: int = 10
    batching_mode: Literal["auto", "fixed"] = "auto"
    max_batch_size_cap: int | None = None
    min_batch_size: int = 1
    fixed_batching: BatchingConfig | None = None
    allow_preferred_batch_sizes: bool = False
    queue_delay_candidates_us: tuple[int, ...] = (0,)
    max_queue_depth: float | None = None
    slo_margin: float = 0.15
    alert_slo_margin: float = 0.30
    hysteresis: float = 0.10
    scale_down_stabilization_s: float = 300.0
    stabilization_outliers: int = 1
    scale_up_cooldown_s: float = 15.0
    cooldown_s: float = 60.0
    batching_cooldown_s: float = 30.0
    max_scale_up_step: int = 10
    max_scale_down_step: int = 8
    control_period_s: float = 15.0
    stale_after_s: float = 60.0
    correction_alpha: float = 0.3
    correction_min: float = 0.5
    correction_max: float = 3.0
    correction_settle_s: float = 90.0
    min_rate_for_correction_per_s: float = 1.0
    service_scale_alpha: float = 0.5
    service_scale_min: float = 0.5
    service_scale_max: float = 4.0
    rate_rise_sigma: float = 3.0
    burst_false_alarm: float = 0.01
    burst_max_span_s: float = 60.0
    backlog_drain_s: float = 30.0
    replica_startup_s: float = 30.0
    dry_run: bool = False

    def __post_init__(self) -> None:
        """Reject configurations the policy cannot honour."""
        if self.p99_target_ms <= 0:
            raise ValueError("p99_target_ms must be > 0")
        if not 0 <= self.min_replicas <= self.max_replicas or self.max_replicas < 1:
            raise ValueError("need 0 <= min_replicas <= max_replicas and max_replicas >= 1")
        if self.min_batch_size < 1 or (self.max_batch_size_cap is not None and self.max_batch_size_cap < 1):
            raise ValueError("batch size bounds must be >= 1")
        if self.batching_mode not in ("auto", "fixed"):
            raise ValueError("batching_mode must be 'auto' or 'fixed'")
        if not 0 <= self.slo_margin < 1 or not 0 <= self.alert_slo_margin < 1:
            raise ValueError("SLO margins must be in [0, 1)")
        if not 0 <= self.slo_margin + self.hysteresis < 1:
            raise ValueError("slo_margin + hysteresis must be in [0, 1)")
        if self.max_scale_up_step < 1 or self.max_scale_down_step < 1:
            raise ValueError("step limits must be >= 1")
        self._check_learning()
        if self.rate_rise_sigma < 0 or self.backlog_drain_s < 0 or self.replica_startup_s < 0:
            raise ValueError("rate_rise_sigma, backlog_drain_s and replica_startup_s must be >= 0")
        if not 0 < self.burst_false_alarm < 1 or self.burst_max_span_s <= 0:
            raise ValueError("burst_false_alarm must be in (0, 1) and burst_max_span_s > 0")
        if not self.queue_delay_candidates_us or min(self.queue_delay_candidates_us) < 0:
            raise ValueError("queue_delay_candidates_us needs at least one value >= 0")

    def _check_learning(self) -> None:
        """The online factors: bounds around 1, smoothing weights in [0, 1]."""
        if not 0 < self.correction_min <= 1 <= self.correction_max:
            raise ValueError("need 0 < correction_min <= 1 <= correction_max")
        if not 0 < self.service_scale_min <= 1 <= self.service_scale_max:
            raise ValueError("need 0 < service_scale_min <= 1 <= service_scale_max")
        if not (0 <= self.correction_alpha <= 1 and 0 <= self.service_scale_alpha <= 1):
            raise ValueError("correction_alpha and service_scale_alpha must be in [0, 1]")


@dataclass(frozen=True)
class PolicyState:
    """What the policy remembers between calls (kept by the caller, e.g. on the object's status).

    Attributes:
        replicas: Replicas in force (the policy's target once acted on).
        batching: Batching in force.
        last_replica_change_s: When replicas last changed (None: never).
        last_scale_up_s: When replicas last went up.
        last_batching_change_s: When batching last changed.
        recommendations: (time, replicas) recommendations inside the stabilization window.
        correction: Online factor multiplying the model's P99 (observed / predicted, smoothed) for
            candidates below `HEAVY_UTILIZATION` of their full-batch capacity.
        correction_heavy: The same factor for candidates at or above it (learned from such windows).
        service_scale: Observed compute time per batch over the profile's for the batch size observed
            (smoothed): how much slower (> 1) or faster the serving hardware runs the engine than when
            it was profiled, e.g. replicas sharing CPU cores. Multiplies the profile's service time.
        last_queue_total: Pending requests summed over replicas at the previous observation.
        last_queue_at_s: Time of that observation.
        last_backlog_s: When a backlog (more than a full batch queued per replica) was last seen.
        first_seen_s: Time of the first decision with data (the stabilization window starts there).
        replica_startup_s: Start-up time learned from this service's scale-ups (None: none timed yet).
        awaiting_ready_since_s: When the scale-up still being timed was decided (None: none pending).
    """

    replicas: int
    batching: BatchingConfig
    last_replica_change_s: float | None = None
    last_scale_up_s: float | None = None
    last_batching_change_s: float | None = None
    recommendations: tuple[tuple[float, int], ...] = field(default=())
    correction: float = 1.0
    correction_heavy: float = 1.0
    service_scale: float = 1.0
    last_queue_total: float | None = None
    last_queue_at_s: float | None = None
    first_seen_s: float | None = None
    last_backlog_s: float | None = None
    replica_startup_s: float | None = None
    awaiting_ready_since_s: float | None = None

    @property
    def corrections(self) -> Correction:
        """Both learned factors."""
        return Correction(light=self.correction, heavy=self.correction_heavy)

    @classmethod
    def initial(cls, *, replicas: int, batching: BatchingConfig) -> PolicyState:
        """State of a service the policy has not acted on yet."""
        return cls(replicas=replicas, batching=batching)

    def to_dict(self) -> dict[str, Any]:
        """Return a JSON-ready form, e.g. to keep the state on the object's status across restarts."""
        out: dict[str, Any] = {f.name: getattr(self, f.name) for f in fields(self)}
        out["batching"] = self.batching.model_dump(mode="json")
        out["recommendations"] = [list(r) for r in self.recommendations]
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PolicyState:
        """Rebuild a state written by `to_dict` (unknown keys are ignored, missing ones take defaults)."""
        known = {f.name for f in fields(cls)}
        values = {k: v for k, v in data.items() if k in known}
        values["batching"] = BatchingConfig.model_validate(data["batching"])
        values["recommendations"] = tuple((float(t), int(n)) for t, n in data.get("recommendations", ()))
        return cls(**values)

    def with_actual(self, *, replicas: int, batching: BatchingConfig) -> PolicyState:
        """Return the same memory with the size actually in force (after `kubectl scale`, a failed reload)."""
        return replace(self, replicas=replicas, batching=batching)
