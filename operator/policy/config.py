"""The policy's inputs that persist between calls: its configuration, its fixed tuning and its state.

The configuration and the state are frozen dataclasses so a decision is a pure function of its
arguments; the caller (operator timer or benchmark simulator) keeps the `PolicyState` returned by
`decide` and passes it back on the next call. `PolicyConfig` holds what a spec or a benchmark
variant sets; the tuning nothing varies is module constants below, each with its reason.
Defaults are chosen for a 15 s control period and are documented in docs/autoscaling.md.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Final, Literal

from tailpilot.api.autoscaling import BatchingConfig
from tailpilot.api.constants import REASON_SLO_MET
from tailpilot.policy.model import Correction


class Reason:
    """CamelCase reasons carried by `Decision.reason` (and by Events and the status)."""

    #: The current replicas and batching meet the SLO with margin; nothing to do.
    WITHIN_SLO = REASON_SLO_MET
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
    #: A scale-down is wanted but a higher recommendation inside the stabilization window holds it, or
    #: a scale-up is wanted but a recommendation inside the scale-up stabilization window is lower.
    STABILIZING = "Stabilizing"
    #: A change is wanted but the cooldown since the last action has not elapsed.
    COOLDOWN = "CooldownActive"
    #: No request rate (or no P99 while requests flow): the state is held; never scale down on no data.
    METRICS_MISSING = "MetricsMissing"
    #: The newest sample is older than `STALE_AFTER_S`: the state is held.
    METRICS_STALE = "MetricsStale"
    #: An SLO alert is firing: scale-down is suppressed.
    ALERT_ACTIVE = "AlertActive"
    #: The observed P99 is above the SLO while requests flow: scale-down is suppressed.
    SLO_MISSED = "SLOMissed"
    #: Some Ready pods have no current figures (a partial scrape): scale-down is suppressed.
    PODS_UNOBSERVED = "PodsUnobserved"
    #: A move to another GPU product is under way: the new product's replicas hold at the choice's
    #: size until every one is ready (the pods observed are mostly the old product's).
    MOVING_GPU_PRODUCT = "MovingGpuProduct"


# --- Fixed tuning: values no spec field and no benchmark variant sets (docs/autoscaling.md) ---

#: Candidates (auto mode) start at single requests: the spec bounds only the largest batch
#: (`PolicyConfig.max_batch_size_cap`).
MIN_BATCH_SIZE: Final = 1
#: Max queue delays a candidate may use (us). A delay grows a light-load batch only at the cost of up
#: to that delay of waiting (docs/autoscaling.md section 2); the candidates wait for none.
QUEUE_DELAY_CANDIDATES_US: Final[tuple[int, ...]] = (0,)
#: Candidates set no preferred batch size: one applies only with a queue delay (`_candidates` in
#: core.py), and the candidates use none.
ALLOW_PREFERRED_BATCH_SIZES: Final = False
#: Fraction of the SLO kept free when choosing, at the default objective (99%): candidates must
#: predict P99 <= target * (1 - margin). Other objectives move it (`slo_margin`).
SLO_MARGIN: Final = 0.15
#: How much more of the SLO each tenfold smaller error budget keeps free. The margin covers what the
#: model cannot see: a window's measured P99 scatters around the model's (sampling over the window's
#: requests, the model's error), and the share of windows that scatter pushes past the target falls
#: about tenfold for each such step of margin. With the margin fixed, every objective ran the same
#: fleet on steady traffic: 95% paid what 99% did, and 99.9% kept no more (T1 of `make bench`:
#: 99.992% of requests for 10,800 replica-s at every objective, where 0.25 of the SLO free keeps
#: 100.000% for 14,400; `python -P -m tailpilot.bench.run --traces T1-poisson`, 2026-12-06).
MARGIN_PER_DECADE: Final = 0.10
#: The margin's bounds over the API's objectives (50-99.99%): some of the SLO is always kept free
#: for the model's error, and never so much that a loose target sizes for nothing but margin.
MIN_SLO_MARGIN: Final = 0.05
MAX_SLO_MARGIN: Final = 0.40
#: How much more of the SLO is kept free while an SLO alert fires: its budget is burning.
ALERT_EXTRA_MARGIN: Final = 0.15
#: The error budget at the default objective, where the margin is `SLO_MARGIN`.
_DEFAULT_BUDGET: Final = 0.01


def slo_margin(objective: float, *, alert: bool = False) -> float:
    """The fraction of the SLO kept free at `objective` (a share, 0.99 for 99%); more while an alert fires.

    `SLO_MARGIN` at 99%, `MARGIN_PER_DECADE` more for each tenfold smaller budget (0.25 at 99.9%,
    0.08 at 95%), within `MIN_SLO_MARGIN`..`MAX_SLO_MARGIN`.
    """
    budget = min(1.0, max(1e-6, 1.0 - objective))
    margin = SLO_MARGIN + MARGIN_PER_DECADE * math.log10(_DEFAULT_BUDGET / budget)
    margin = min(MAX_SLO_MARGIN, max(MIN_SLO_MARGIN, margin))
    return min(MAX_SLO_MARGIN, margin + ALERT_EXTRA_MARGIN) if alert else margin


#: Extra fraction of the SLO that must be free before removing replicas or re-batching for cost, so
#: a size between the scale-up and the scale-down targets holds (no flapping at a boundary).
HYSTERESIS: Final = 0.10
#: How many of the stabilization window's highest earlier recommendations a scale-down ignores (a
#: robust max): one period's noisy rate estimate does not hold the fleet for a whole window (on T1
#: of `make bench` it held 4 replicas for 1,860 of 3,600 s where 3 kept 99.99% of requests within
#: the SLO). Never below the current recommendation.
STABILIZATION_OUTLIERS: Final = 1
#: Minimum time between two batching reloads (s): a reload stalls requests for seconds (2-3.5 s on
#: the Python backend, measured) and the observation window needs time to show its effect. Jumped
#: only under an alert when the batching in force misses the target.
BATCHING_COOLDOWN_S: Final = 30.0
#: Observations whose newest sample (or whose own time) is older than this (s) hold the state
#: (MetricsStale): the policy never acts on data that old.
STALE_AFTER_S: Final = 60.0
#: EWMA weight (log space) of a new observed/predicted P99 ratio: one noisy window moves the
#: factor by a part of its error only (docs/autoscaling.md section 2).
CORRECTION_ALPHA: Final = 0.3
#: Bounds of the online model-correction factor, so that no run of bad windows can push the model
#: without limit.
CORRECTION_MIN: Final = 0.5
CORRECTION_MAX: Final = 3.0
#: No correction update this long after a replica or batching change or a backlog (s): the observed
#: P99's window still contains the transient. Kept >= the observation window. The service-time
#: scale waits as long after a backlog.
CORRECTION_SETTLE_S: Final = 90.0
#: Below this request rate (req/s) the P99 is too noisy to learn from; it is also the rate from
#: which a missing P99 means missing data, and from which an alert holds the size.
MIN_RATE_FOR_CORRECTION_PER_S: Final = 1.0
#: EWMA weight (log space) of a new observed / profiled compute-time ratio (docs/autoscaling.md
#: section 2, "The hardware's speed").
SERVICE_SCALE_ALPHA: Final = 0.5
#: Bounds of the learned service-time scale: hardware at most this much faster or slower than
#: profiled.
SERVICE_SCALE_MIN: Final = 0.5
SERVICE_SCALE_MAX: Final = 4.0
#: The recent rate replaces the window's rate when it exceeds it by more than this many Poisson
#: standard deviations (a real rise, not noise).
RATE_RISE_SIGMA: Final = 3.0
#: How often steady Poisson traffic may read as a burst: a span of the arrival curve is a burst when
#: its peak is beyond what Poisson noise gives with this probability (`tailpilot.policy.bursts`).
BURST_FALSE_ALARM: Final = 0.01


@dataclass(frozen=True)
class PolicyConfig:
    """Spec-derived bounds and the knobs a spec or a benchmark variant sets (all times in seconds).

    Attributes:
        p99_target_ms: The service-level P99 latency SLO.
        min_replicas: Lower replica bound (spec).
        max_replicas: Upper replica bound (spec).
        batching_mode: "auto" lets the policy tune batching; "fixed" never changes it.
        max_batch_size_cap: Spec bound on Triton's max batch size; the effective cap is
            min(this, the engine profile's max batch size). None: the profile's.
        fixed_batching: The batching used in fixed mode (None: keep the state's batching).
        max_queue_depth: Optional queue-depth target per replica (pending requests).
        scale_down_stabilization_s: Scale-down uses the max recommendation over this window.
        scale_up_stabilization_s: Scale-up goes to the lowest recommendation over this window (like the
            HPA's scale-up stabilization), so only a rise wanted for the whole window adds replicas;
            0 scales up to the current recommendation at once. The window holds what this state has
            seen: a fresh state (an operator restart) starts it empty.
        scale_up_cooldown_s: Minimum time after any replica change before a scale-up (skipped on alert).
        cooldown_s: Minimum time after a scale-up before a scale-down (successive scale-downs need only
            a control period each; the stabilization window already guards them).
        max_scale_up_step: Most replicas added by one decision.
        max_scale_down_step: Most replicas removed by one decision.
        control_period_s: How often `decide` is called (used for the queue-growth estimate).
        backlog_drain_s: A backlog (more than a full batch queued per replica) is sized to be drained
            within this long, on top of the arrivals; 0 disables it. The backlog sized is the one the
            new replicas will find: the queue now plus what the ready replicas cannot serve until then.
        replica_startup_s: Seconds from asking for a replica to its serving, until the policy has
            timed a scale-up itself (then `Learned.replica_startup_s` is used).
        dry_run: Decisions are recorded (Decision.dry_run=True) but the state keeps the actual size.
        objective: The attainment objective, the share of time whose P99 must meet the target (0.99).
        compliance_period_s: The rolling period its error budget is counted over.
        scale_to_zero_idle_s: With min_replicas 0, the least idle time before the last replica goes
            (the service's idle history and error budget may ask for more: `tailpilot.policy.idle`).
    """

    p99_target_ms: float
    min_replicas: int = 1
    max_replicas: int = 10
    batching_mode: Literal["auto", "fixed"] = "auto"
    max_batch_size_cap: int | None = None
    fixed_batching: BatchingConfig | None = None
    max_queue_depth: float | None = None
    scale_down_stabilization_s: float = 300.0
    scale_up_stabilization_s: float = 0.0
    scale_up_cooldown_s: float = 15.0
    cooldown_s: float = 60.0
    max_scale_up_step: int = 10
    max_scale_down_step: int = 8
    control_period_s: float = 15.0
    backlog_drain_s: float = 30.0
    replica_startup_s: float = 30.0
    dry_run: bool = False
    objective: float = 0.99
    compliance_period_s: float = 168 * 3600.0
    scale_to_zero_idle_s: float = 60.0

    def __post_init__(self) -> None:
        """Reject configurations the policy cannot honour."""
        if self.p99_target_ms <= 0:
            raise ValueError("p99_target_ms must be > 0")
        if not 0 <= self.min_replicas <= self.max_replicas or self.max_replicas < 1:
            raise ValueError("need 0 <= min_replicas <= max_replicas and max_replicas >= 1")
        if self.max_batch_size_cap is not None and self.max_batch_size_cap < 1:
            raise ValueError("batch size bounds must be >= 1")
        if self.batching_mode not in ("auto", "fixed"):
            raise ValueError("batching_mode must be 'auto' or 'fixed'")
        if self.max_scale_up_step < 1 or self.max_scale_down_step < 1:
            raise ValueError("step limits must be >= 1")
        if self.backlog_drain_s < 0 or self.replica_startup_s < 0:
            raise ValueError("backlog_drain_s and replica_startup_s must be >= 0")
        if self.scale_up_stabilization_s < 0:
            raise ValueError("scale_up_stabilization_s must be >= 0")
        if not 0 < self.objective < 1 or self.compliance_period_s <= 0:
            raise ValueError("need 0 < objective < 1 and compliance_period_s > 0")
        if self.scale_to_zero_idle_s <= 0:
            raise ValueError("scale_to_zero_idle_s must be > 0")

    @property
    def margin(self) -> float:
        """The fraction of the SLO kept free at this objective (`slo_margin`)."""
        return slo_margin(self.objective)


@dataclass(frozen=True)
class Learned:
    """What the policy learned from the service's metrics (persisted on the object's status)."""

    correction_light: float = 1.0
    correction_heavy: float = 1.0
    service_scale: float = 1.0
    #: The per-item slope over the profile's, at the learned speed (`tailpilot.policy.speed`).
    slope_scale: float = 1.0
    replica_startup_s: float | None = None


@dataclass(frozen=True)
class Timers:
    """When things happened, on the caller's clock (s; None: not yet), for cooldowns and settling.

    Attributes:
        last_replica_change_s: When replicas last changed.
        last_scale_up_s: When replicas last went up.
        last_batching_change_s: When batching last changed.
        awaiting_ready_since_s: When the scale-up still being timed was decided (None: none pending).
        first_seen_s: Time of the first decision with data (the stabilization window starts there).
        last_backlog_s: When a backlog (more than a full batch queued per replica) was last seen.
    """

    last_replica_change_s: float | None = None
    last_scale_up_s: float | None = None
    last_batching_change_s: float | None = None
    awaiting_ready_since_s: float | None = None
    first_seen_s: float | None = None
    last_backlog_s: float | None = None


@dataclass(frozen=True)
class WindowMemory:
    """What the policy keeps of earlier observations to read the next one against.

    Attributes:
        recommendations: (time, replicas) recommendations inside the stabilization window.
        up_recommendations: (time, replicas) recommendations inside the scale-up stabilization window
            (empty while `scale_up_stabilization_s` is 0). Unlike `recommendations`, these include the
            replicas a backlog's drain asks for: a scale-up is sized for the whole demand.
        last_queue_total: Pending requests summed over replicas at the previous observation.
        last_queue_at_s: Time of that observation.
    """

    recommendations: tuple[tuple[float, int], ...] = ()
    up_recommendations: tuple[tuple[float, int], ...] = ()
    last_queue_total: float | None = None
    last_queue_at_s: float | None = None


@dataclass(frozen=True)
class PolicyState:
    """What the policy remembers between calls (kept by the caller, e.g. on the object's status).

    Attributes:
        replicas: Replicas in force (the policy's target once acted on).
        batching: Batching in force.
        learned: Factors learned from the metrics: the model's P99 correction for light and heavy
            load (observed / predicted, smoothed; `tailpilot.policy.model.Correction`), the service-time
            scale (observed compute time over the profile's: how much slower (> 1) or faster the
            serving hardware runs the engine than when it was profiled) and the replicas' start-up time
            (None: no scale-up timed yet).
        timers: When the policy last acted, and what it is still timing.
        window: Earlier recommendations and the previous queue reading.
    """

    replicas: int
    batching: BatchingConfig
    learned: Learned = field(default_factory=Learned)
    timers: Timers = field(default_factory=Timers)
    window: WindowMemory = field(default_factory=WindowMemory)

    @property
    def corrections(self) -> Correction:
        """Both learned P99 factors."""
        return Correction(light=self.learned.correction_light, heavy=self.learned.correction_heavy)

    @classmethod
    def initial(cls, *, replicas: int, batching: BatchingConfig) -> PolicyState:
        """State of a service the policy has not acted on yet."""
        return cls(replicas=replicas, batching=batching)

    def with_actual(self, *, replicas: int, batching: BatchingConfig) -> PolicyState:
        """Return the same memory with the size actually in force (after `kubectl scale`, a failed reload)."""
        return replace(self, replicas=replicas, batching=batching)
