"""The SLO policy: (config, profile, observation, state, now) -> (Decision, new state). Pure.

`decide` runs one call as named stages over a `_Call` context (docs/autoscaling.md has the long
form):

1. Data (`_check_data`): a stale observation (MetricsStale) or one without a request rate, or
   without a P99 while requests flow (MetricsMissing), holds everything; the policy never scales
   down on no data. Replicas below the minimum are still raised to it (the safe direction).
2. Learning (`_learn`): first the replicas' start-up time from the last scale-up, then the
   hardware's speed (replicas sharing CPU cores, a slower GPU than the one profiled): where the
   pods' statistics give the compute time of each executed batch size, a line through those points
   against the profile's (`tailpilot.policy.speed`: `service_scale`, the time of a single request's
   batch over the profile's, and `slope_scale`, the per-item slope's), from every window; else the
   observed compute time per request over the profile's for the batch the average request ran in,
   from steady windows where batch sizes barely spread. Both are smoothed and move the profile's
   service time. Then the model's P99 for what is in force is compared with the observed P99; the
   log of the bounded ratio is smoothed into the correction, which multiplies every prediction. The
   correction is skipped while a change settles; the per-request speed while a backlog's window
   lasts or pods start (a replica or batching change leaves compute time per request as it was).
   Learning comes before demand because demand is sized with what it learned (the start-up time,
   the speed).
3. Demand (`_size_demand`): the observed completion rate (or the recent one on a real rise) plus
   the growth of the queue since the last call (completions are capped at capacity under
   overload; the queue's growth is the unserved part of the demand), a backlog's drain, and the
   bursts of the arrival curve's lookback.
4. Choice (`_choose`): reloads are held when the profile says a reload at the load in force would
   delay requests by more than the SLO's margin (`model.reload_delay_ms`) and replicas within
   bounds meet the SLO with the batching in force: then only that batching is a candidate. For
   every batching candidate, the fewest replicas whose corrected P99 is within the SLO minus the
   margin (`n_up`), and minus margin and hysteresis (`n_down`), and never fewer than absorb the
   bursts with that batching (`tailpilot.policy.bursts`). Scale up to `n_up` when above the
   current size (with a scale-up stabilization window: to the lowest recommendation of that
   window, when that is above the current size); scale down to the maximum recommendation of the
   stabilization window when `n_down` is below it; otherwise keep the size. Guardrails: step
   limits, cooldowns (skipped for scale-up while an alert fires or on a surge), no scale-down during
   an alert.
   Batching is then the candidate that meets the target at the chosen size, keeping the current
   one whenever it qualifies, so batching (a live reload) moves before replicas do; a batching
   cooldown holds reloads.
5. Message (`_message`): the numbers behind the decision, for the Event and the status.

`_conclude` turns the outcome into the `Decision` and the next state, in one place (dry run
included).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from functools import lru_cache

from tailpilot.api.autoscaling import BatchingConfig, Decision, Observation, ScalingAction
from tailpilot.api.engine import EngineProfile, ServiceTimeModel
from tailpilot.policy.bursts import NO_BURSTS, ArrivalCurve, Bursts, burst_rate_per_s
from tailpilot.policy.config import (
    ALLOW_PREFERRED_BATCH_SIZES,
    BATCHING_COOLDOWN_S,
    BURST_FALSE_ALARM,
    CORRECTION_ALPHA,
    CORRECTION_MAX,
    CORRECTION_MIN,
    CORRECTION_SETTLE_S,
    HYSTERESIS,
    MIN_BATCH_SIZE,
    MIN_RATE_FOR_CORRECTION_PER_S,
    QUEUE_DELAY_CANDIDATES_US,
    RATE_RISE_SIGMA,
    SERVICE_SCALE_ALPHA,
    SERVICE_SCALE_MAX,
    SERVICE_SCALE_MIN,
    STABILIZATION_OUTLIERS,
    STALE_AFTER_S,
    Learned,
    PolicyConfig,
    PolicyState,
    Reason,
    Timers,
    WindowMemory,
    slo_margin,
)
from tailpilot.policy.model import (
    BatchShape,
    Correction,
    capacity_per_s,
    corrected_p99_ms,
    heavy_weight,
    min_replicas_for,
    predict_p99_ms,
    reload_delay_ms,
    utilization,
)
from tailpilot.policy.speed import SLOPE_SCALE_MAX, SLOPE_SCALE_MIN, learned_line, speed_sample

_Candidate = tuple[BatchingConfig, BatchShape]


@dataclass(frozen=True)
class _Call:
    """What the stages of one call share.

    `state` carries this call's learning (start-up time, hardware speed) once `_learn` ran;
    `service` is the service time on the hardware serving now and `correction` the model's
    correction after this call's observation. `cands` are the batchings the choice may pick.
    """

    config: PolicyConfig
    profile: EngineProfile
    obs: Observation
    state: PolicyState
    now_s: float
    alert_active: bool
    #: A fast check saw the arrivals above the capacity asked for, and called this decision.
    surge: bool
    #: The factor over the observed arrival rate the fleet is sized for (`tailpilot.policy.headroom`).
    headroom: float
    #: The observation's request rate (present: the data check passed).
    rate: float
    cands: tuple[_Candidate, ...]
    service: ServiceTimeModel
    correction: Correction

    @property
    def margin(self) -> float:
        """The fraction of the SLO kept free at the objective: larger while an alert fires."""
        return slo_margin(self.config.objective, alert=self.alert_active)

    @property
    def up_target_ms(self) -> float:
        """What a candidate must predict: the SLO minus the margin in force."""
        return self.config.p99_target_ms * (1 - self.margin)

    @property
    def keep_target_ms(self) -> float:
        """What the batching in force must predict to be kept: the SLO minus the normal margin.

        Even under an alert: a reload stalls requests for seconds.
        """
        return self.config.p99_target_ms * (1 - self.config.margin)


@dataclass(frozen=True)
class _Demand:
    """What the fleet must serve: arrivals, a backlog's drain, and the recent bursts."""

    arrival: float
    drain: float
    #: Pending requests summed over the ready replicas (None: no queue reading), remembered.
    queue_total: float | None
    bursts: Bursts

    @property
    def sizing(self) -> float:
        """The rate the replicas are sized for."""
        return self.arrival + self.drain


@dataclass(frozen=True)
class _Recommendation:
    """Replicas the load asks for, whether even max_replicas misses the SLO, whether the queue forced it."""

    replicas: int
    infeasible: bool
    queue_forced: bool


@dataclass(frozen=True)
class _Choice:
    """What the choice stage settled on, and why."""

    recommendation: _Recommendation
    replicas: int
    batching: BatchingConfig
    predicted_ms: float
    reason: str
    #: The guardrail that held a wanted change ("" when none did).
    blocked: str
    #: The stabilization window's recommendations, this call's included.
    recommendations: tuple[tuple[float, int], ...]
    #: The scale-up stabilization window's recommendations, this call's included (empty without one).
    up_recommendations: tuple[tuple[float, int], ...]
    #: How long a reload now would delay requests when that holds reloads (ms), else 0.
    reload_delay_ms: float


@dataclass(frozen=True)
class _Memory:
    """What one call learned and remembers, whatever it decides: the state's memory after it."""

    learned: Learned
    timers: Timers
    window: WindowMemory


@dataclass(frozen=True)
class _Outcome:
    """One call's result before it is applied to the state."""

    replicas: int
    batching: BatchingConfig
    reason: str
    message: str
    predicted_ms: float | None
    #: A guardrail or missing data keeps what is in force (a Hold, not a plain no-op).
    hold: bool
    #: None: the call learned and remembered nothing (no data).
    memory: _Memory | None


def decide(
    *,
    config: PolicyConfig,
    profile: EngineProfile,
    observation: Observation,
    state: PolicyState,
    now_s: float,
    alert_active: bool = False,
    surge: bool = False,
    headroom: float = 1.0,
) -> tuple[Decision, PolicyState]:
    """Decide the replicas and batching for the next control period.

    Args:
        config: Bounds and knobs (from the spec).
        profile: The engine's measured profile (service time model and max batch).
        observation: Service-level metrics over the evaluation window.
        state: What the previous call returned (or `PolicyState.initial(...)`).
        now_s: The current time in seconds (the caller's clock; the policy reads none).
        alert_active: An SLO burn-rate alert is firing: larger margin, no scale-up
            cooldown, no scale-down while requests flow.
        surge: A fast check called this decision: the arrivals exceeded the capacity of the
            replicas asked for in consecutive reads (`tailpilot.policy.surge`). No scale-up cooldown.
        headroom: The factor over the observed arrival rate the fleet is sized for: the rise the
            service's traffic brings within its reaction time at the quantile its attainment
            objective and error budget call for (`tailpilot.policy.headroom`; 1: none).

    Returns:
        The decision and the state to pass to the next call.
    """
    no_data = _check_data(config=config, obs=observation, state=state, now_s=now_s)
    if no_data is not None:
        return _conclude(config, state, now_s, no_data)
    assert observation.request_rate is not None  # the data check holds without one
    call = _learn(
        _Call(
            config=config,
            profile=profile,
            obs=observation,
            state=state,
            now_s=now_s,
            alert_active=alert_active,
            surge=surge,
            headroom=max(1.0, headroom),
            rate=observation.request_rate,
            cands=_allowed(config, profile, state),
            service=profile.service_time,
            correction=state.corrections,
        )
    )
    demand = _size_demand(call)
    call, demand, choice = _choose(call, demand)
    return _conclude(config, call.state, now_s, _outcome(call, demand, choice))


# --- 1. Data ---------------------------------------------------------------------------------


def _check_data(
    *, config: PolicyConfig, obs: Observation, state: PolicyState, now_s: float
) -> _Outcome | None:
    """Hold on stale or missing metrics (None: the data is good).

    Why: a decision on no data would be a guess, and a scale-down on a guess can break the SLO; so
    nothing is learned or remembered, and the one move made is the safe one: replicas below the
    spec's minimum go up to it.
    """
    age = max(obs.data_age_s, now_s - obs.at_s)
    rate = obs.request_rate
    if age > STALE_AFTER_S:
        reason, why = Reason.METRICS_STALE, f"newest sample is {age:.0f} s old (> {STALE_AFTER_S:.0f} s)"
    elif rate is None:
        reason, why = Reason.METRICS_MISSING, "no request rate for the service"
    elif obs.p99_ms is None and rate >= MIN_RATE_FOR_CORRECTION_PER_S:
        reason, why = Reason.METRICS_MISSING, f"no P99 while serving {rate:.1f} req/s"
    else:
        return None
    lo, current = config.min_replicas, state.replicas
    if current < lo:
        return _Outcome(
            replicas=lo,
            batching=state.batching,
            reason=Reason.BOUNDS_ENFORCED,
            message=f"{current} replicas is below the minimum {lo}; metrics unavailable ({why})",
            predicted_ms=None,
            hold=False,
            memory=_Memory(
                learned=state.learned,
                timers=replace(state.timers, first_seen_s=_first_seen(state, now_s)),
                window=state.window,
            ),
        )
    return _Outcome(
        replicas=current,
        batching=state.batching,
        reason=reason,
        message=f"holding: {why}",
        predicted_ms=None,
        hold=True,
        memory=None,
    )


# --- 2. Learning -----------------------------------------------------------------------------


def _learn(call: _Call) -> _Call:
    """This call's learning: the start-up time, the hardware's speed, the model's correction.

    Why first: the demand stage sizes a backlog for the time new replicas take to start, and every
    capacity and prediction after this runs on the hardware's learned speed and the corrected
    model. The profile's own compute-time fit is compared with the observed compute time when the
    build recorded one (the service time also holds the profiling client's transport).
    """
    profile, obs = call.profile, call.obs
    profiled_compute = profile.compute_time or profile.service_time
    state = _learn_service_scale(call.config, _learn_startup(call.state, obs), obs, profiled_compute)
    service = _service_time(profile.service_time, state.learned)
    if _speed_moved(call.state.learned, state.learned):
        # The window's P99 against a model whose speed is still moving would teach the correction
        # the speed's error too, and keep it after the speed has learned it: the heavy-load
        # correction, learned only under heavy load, could keep it for the rest of the run.
        correction = state.corrections
    else:
        correction = _update_correction(
            config=call.config, state=state, obs=obs, service=service, now_s=call.now_s
        )
    return replace(call, state=state, service=service, correction=correction)


#: The learned speed or slope moving more than this in one call means it is still learning.
_SPEED_MOVING = 0.05


def _speed_moved(before: Learned, after: Learned) -> bool:
    """Whether this call's learning moved the speed or the slope by more than `_SPEED_MOVING`."""
    return any(
        abs(math.log(new / old)) > _SPEED_MOVING
        for old, new in (
            (before.service_scale, after.service_scale),
            (before.slope_scale, after.slope_scale),
        )
    )


# --- 3. Demand -------------------------------------------------------------------------------


def _size_demand(call: _Call) -> _Demand:
    """What the fleet must serve: arrivals, a backlog's drain, and the bursts of the lookback.

    Why: the window's completion rate understates demand after a step, under overload and with a
    backlog, and bursts shorter than a start-up can only be absorbed by replicas already there.
    """
    arrival, drain, queue_total = _demand(
        call, top_capacity_per_s=capacity_per_s(call.cands[0][1], call.service)
    )
    bursts = observed_bursts(call.obs, rate_per_s=arrival)
    return _Demand(arrival=arrival, drain=drain, queue_total=queue_total, bursts=bursts)


def observed_bursts(obs: Observation, *, rate_per_s: float) -> Bursts:
    """The bursts of the observation's arrival curve beyond Poisson noise at `rate_per_s`."""
    curve = ArrivalCurve.of(obs.arrival_counts, bin_s=obs.arrival_bin_s or 0.0)
    return Bursts(
        spans=curve.bursts(BURST_FALSE_ALARM, rate_per_s=rate_per_s) if curve is not None else (),
        running_batch=obs.mean_batch_size or 1.0,
    )


# --- 4. Choice -------------------------------------------------------------------------------


def _choose(call: _Call, demand: _Demand) -> tuple[_Call, _Demand, _Choice]:
    """Replicas and batching for the next period, through the guardrails.

    Returns the call and demand the choice was made with: when reloads are held, only the
    batching in force is a candidate and the backlog is sized for it.
    """
    call, demand, reload_delay = _hold_reloads(call, demand)
    recommendation = _recommend_with_alert(call, demand)
    recs, stabilized = _stabilize(call, demand, recommendation.replicas)
    up_recs, up_floor = _stabilize_up(call, recommendation.replicas)
    n, reason, blocked = _guard_replicas(call, recommendation, stabilized, up_floor)
    batching, predicted = _choose_batching(call, demand, n)
    batching, predicted, blocked = _batching_cooldown(call, demand, n, batching, predicted, blocked)
    if batching != call.state.batching and n == call.state.replicas:
        # Only batching moves (a replica change may be held by a guardrail): say why it moves.
        if not _in_bounds(call.config, call.profile, call.state.batching):
            reason = Reason.BOUNDS_ENFORCED
        else:
            reason = Reason.REBATCH_FOR_SLO if not recommendation.infeasible else Reason.AT_MAX_REPLICAS
    return (
        call,
        demand,
        _Choice(
            recommendation=recommendation,
            replicas=n,
            batching=batching,
            predicted_ms=predicted,
            reason=reason,
            blocked=blocked,
            recommendations=recs,
            up_recommendations=up_recs,
            reload_delay_ms=reload_delay,
        ),
    )


def _hold_reloads(call: _Call, demand: _Demand) -> tuple[_Call, _Demand, float]:
    """Keep the batching in force when a reload now would cost more than replicas do.

    Why: replicas are the cheaper knob on an engine whose profile says a reload at the load in
    force delays requests by more than the SLO's margin; then only the batching in force is a
    candidate, and the backlog is sized again for what the replicas in force serve (the bursts
    stay as seen). Returns the reload's delay (ms) when it holds reloads, else 0.
    """
    delay = _reload_held_ms(call, rate=demand.sizing, bursts=demand.bursts)
    if delay <= 0:
        return call, demand, delay
    batching = call.state.batching
    call = replace(call, cands=((batching, _shape(batching)),))
    arrival, drain, queue_total = _demand(
        call, top_capacity_per_s=capacity_per_s(call.cands[0][1], call.service)
    )
    return call, replace(demand, arrival=arrival, drain=drain, queue_total=queue_total), delay


def _recommend_with_alert(call: _Call, demand: _Demand) -> _Recommendation:
    """The replicas the load asks for; under an alert, at least those carrying its margin.

    Why: the batching in force is kept while it meets the normal margin, so the alert's larger
    margin is met with replicas, not with a reload that stalls requests for seconds.
    """
    found = _recommend(call, rate=demand.sizing, bursts=demand.bursts)
    if not call.alert_active or not _in_bounds(call.config, call.profile, call.state.batching):
        return found
    alert_n = _alert_replicas_keeping_batching(
        call, n=max(found.replicas, call.state.replicas), rate=demand.sizing
    )
    return replace(found, replicas=max(found.replicas, alert_n))


def _stabilize(
    call: _Call, demand: _Demand, recommendation: int
) -> tuple[tuple[tuple[float, int], ...], int]:
    """(the stabilization window with this call's recommendation, the window's robust max).

    Why: a scale-down goes to the highest recommendation of the window, so a short dip does not
    remove replicas the next minute needs again. The window remembers what the arrivals alone need:
    replicas added to drain a backlog go again once it is drained, without waiting out the window.
    The robust max applies only once the last scale-up has left the window: right after one, any
    higher recommendation holds, so noise around a replica boundary cannot reverse it.
    """
    steady = recommendation
    if demand.drain > 0:
        steady = _recommend(call, rate=demand.arrival, bursts=demand.bursts).replicas
    window = call.config.scale_down_stabilization_s
    now_s = call.now_s
    recs = tuple(r for r in call.state.window.recommendations if now_s - r[0] <= window) + ((now_s, steady),)
    settled = _since(call.state.timers.last_scale_up_s, now_s) > window
    return recs, _stabilized(recs, outliers=STABILIZATION_OUTLIERS if settled else 0)


def _stabilize_up(call: _Call, recommendation: int) -> tuple[tuple[tuple[float, int], ...], int]:
    """(the scale-up stabilization window with this call's recommendation, the window's minimum).

    Why: like the HPA's scale-up stabilization, a scale-up goes only as far as every recommendation
    of the window asks, so a rise must be wanted for the whole window (a user trading a slower
    reaction for fewer short-lived replicas). The window holds what the state has seen; a fresh
    state starts it empty. Without a window (0, the default) the minimum is this call's
    recommendation and nothing is remembered.
    """
    window = call.config.scale_up_stabilization_s
    if window <= 0:
        return (), recommendation
    now_s = call.now_s
    recs = tuple(r for r in call.state.window.up_recommendations if now_s - r[0] <= window)
    recs += ((now_s, recommendation),)
    return recs, min(n for _, n in recs)


def _guard_replicas(
    call: _Call, rec: _Recommendation, stabilized: int, up_floor: int
) -> tuple[int, str, str]:
    """(replicas, reason, the guardrail that held a wanted change or "").

    Why: replicas outside the spec's bounds go back at once (below the minimum straight to what
    the load needs; above the maximum only to the maximum, anything further down goes through the
    scale-down guardrails next time); other changes pass the step limits and cooldowns.
    """
    lo, hi, current = call.config.min_replicas, call.config.max_replicas, call.state.replicas
    if current < lo or current > hi:
        return (max(lo, min(hi, rec.replicas)) if current < lo else hi), Reason.BOUNDS_ENFORCED, ""
    if rec.replicas > current:
        return _scale_up(call, rec, up_floor)
    if rec.replicas < current:
        return _scale_down(call, stabilized)
    return current, (Reason.AT_MAX_REPLICAS if rec.infeasible else Reason.WITHIN_SLO), ""


def _scale_up(call: _Call, rec: _Recommendation, up_floor: int) -> tuple[int, str, str]:
    """Up to the recommendation, by at most a step, once the scale-up cooldown is over.

    With a scale-up stabilization window, only up to the window's lowest recommendation (`up_floor`),
    and not at all while that is not above the current size.

    Why: the cooldown lets the last change show in the metrics before the next; an alert skips it,
    since the SLO's budget is already burning, and so does a surge: the pods' own counters already
    show that the last change is short of the arrivals, and waiting only lets the queue grow
    (`make bench` at defaults: T9's requests within the SLO from 90.8/81.9/61.4% to 93.7/83.4/62.6%
    at Ts = 5/30/90 s; T8 4-12% cheaper for 3.5 points fewer minutes within it; every trace without
    surges unchanged). The
    stabilization window is the user's own choice of how long a rise must last, so neither skips it.
    """
    current = call.state.replicas
    if rec.queue_forced:
        reason = Reason.QUEUE_DEPTH_HIGH
    else:
        reason = Reason.AT_MAX_REPLICAS if rec.infeasible else Reason.SLO_AT_RISK
    wanted = min(rec.replicas, up_floor)
    if wanted <= current:
        return current, reason, Reason.STABILIZING
    cooling = _since(call.state.timers.last_replica_change_s, call.now_s) < call.config.scale_up_cooldown_s
    if cooling and not (call.alert_active or call.surge):
        return current, reason, Reason.COOLDOWN
    return min(wanted, current + call.config.max_scale_up_step), reason, ""


def _scale_down(call: _Call, stabilized: int) -> tuple[int, str, str]:
    """Down to the stabilization window's robust max, by at most a step, when no guardrail holds it.

    Why: until the policy has watched a whole window, the unseen part counts as "keep the current
    size". A burn alert looks back minutes to an hour; while requests flow it holds the size, but a
    service that no longer gets traffic has nothing left to protect. After a scale-up the cooldown
    keeps the new replicas for a while (successive scale-downs need only a period each).
    """
    current, now_s, first_seen = call.state.replicas, call.now_s, call.state.timers.first_seen_s
    if first_seen is None or now_s - first_seen < call.config.scale_down_stabilization_s:
        stabilized = max(stabilized, current)
    target_n = max(stabilized, current - call.config.max_scale_down_step)
    reason = Reason.OVER_PROVISIONED
    serving = call.rate >= MIN_RATE_FOR_CORRECTION_PER_S
    if call.alert_active and serving:
        return current, reason, Reason.ALERT_ACTIVE
    if serving and _missing_slo_at_this_load(call):
        # The model says fewer replicas would do, the service says the SLO is missed at the load it
        # has now: the model is wrong somewhere, and removing capacity would only deepen the miss.
        return current, reason, Reason.SLO_MISSED
    if call.obs.pods_unobserved > 0:
        return current, reason, Reason.PODS_UNOBSERVED
    if target_n >= current:
        return current, reason, Reason.STABILIZING
    if _since(call.state.timers.last_scale_up_s, now_s) < call.config.cooldown_s:
        return current, reason, Reason.COOLDOWN
    return target_n, reason, ""


#: The recent rate, as a share of the window's, at which the window's P99 still speaks for the load now.
_SAME_LOAD_SHARE = 0.9


def _missing_slo_at_this_load(call: _Call) -> bool:
    """Whether the observed P99 misses the SLO while the load is what the window saw.

    Why the load matters: the P99 covers the whole evaluation window (and Triton's summaries a
    minute), so once a spike has passed it still shows the spike's queue; holding replicas for it
    then costs without protecting anything (`make bench` with a plain P99 > SLO guard: T6 and T9
    3.6-16% more replica-seconds, within-SLO shares unchanged to 0.3 points). With the recent rate
    still at the window's, the miss is the current load's, and the model sizing it is wrong.
    """
    obs = call.obs
    if obs.p99_ms is None or obs.p99_ms <= call.config.p99_target_ms:
        return False
    recent, window = obs.recent_request_rate, obs.request_rate
    return recent is None or window is None or recent >= _SAME_LOAD_SHARE * window


def _choose_batching(call: _Call, demand: _Demand, n: int) -> tuple[BatchingConfig, float]:
    """(batching at `n` replicas, its corrected P99): the one in force while it qualifies.

    Why: a reload stalls requests for seconds, so batching moves only when the one in force misses
    (`_best_at`). A Service does not move queued requests: a backlog drains only through the
    replicas that hold it. When their batching in force cannot carry the arrivals and the drain,
    they get the most throughput now (a reload takes seconds, a replica Ts). A backlog they can
    drain as they are is not worth a reload. Once drained, the batching in force is kept while it
    meets the SLO, like any other.
    """
    state, service, sizing = call.state, call.service, demand.sizing
    batching, predicted = _best_at(
        n=n,
        rate=sizing,
        target_ms=call.up_target_ms,
        keep_ms=call.keep_target_ms,
        slo_ms=call.config.p99_target_ms,
        hysteresis=HYSTERESIS,
        cands=call.cands,
        current=state.batching,
        service=service,
        correction=call.correction,
        bursts=demand.bursts,
    )
    fastest, fastest_shape = call.cands[0]  # highest capacity first
    in_force_capacity = capacity_per_s(_shape(state.batching), service)
    if (
        demand.drain > 0
        and sizing > _ready_replicas(call.obs, state) * in_force_capacity
        and capacity_per_s(fastest_shape, service) > in_force_capacity
    ):
        batching = fastest
        predicted = corrected_p99_ms(
            call.correction, rate_per_s=sizing, replicas=n, shape=fastest_shape, service=service
        )
    return batching, predicted


def _batching_cooldown(
    call: _Call, demand: _Demand, n: int, batching: BatchingConfig, predicted: float, blocked: str
) -> tuple[BatchingConfig, float, str]:
    """Keep the batching in force within the batching cooldown of the last reload.

    Why: a reload needs the observation window to see its effect; only an SLO at risk under an
    alert jumps the queue.
    """
    state = call.state
    if (
        batching == state.batching
        or _since(state.timers.last_batching_change_s, call.now_s) >= BATCHING_COOLDOWN_S
    ):
        return batching, predicted, blocked
    current_p99 = corrected_p99_ms(
        call.correction,
        rate_per_s=demand.sizing,
        replicas=n,
        shape=_shape(state.batching),
        service=call.service,
    )
    if call.alert_active and current_p99 > call.up_target_ms:
        return batching, predicted, blocked
    return state.batching, current_p99, blocked or Reason.COOLDOWN


# --- 5. Message, and the outcome ---------------------------------------------------------------


def _message(call: _Call, demand: _Demand, choice: _Choice) -> str:
    """The numbers behind the decision, for the Event and the status.

    Why: an operator reading an Event must be able to check the decision: demand, predicted P99 at
    the chosen size and batching, observed P99, target and margin, and what the policy learned.
    """
    config, obs, correction = call.config, call.obs, call.correction
    observed = f"{obs.p99_ms:.1f} ms" if obs.p99_ms is not None else "n/a"
    predicted = choice.predicted_ms
    pred_txt = f"{predicted:.1f} ms" if math.isfinite(predicted) else "unbounded (over capacity)"
    drain_txt = ""
    if demand.drain > 0:
        backlog, queued = demand.drain * config.backlog_drain_s, demand.queue_total or 0.0
        drain_txt = f" + {demand.drain:.1f} req/s to drain {queued:.0f} queued"
        if backlog > queued + 0.5:
            drain_txt += f" and {backlog - queued:.0f} more before new replicas serve"
    message = (
        f"{demand.arrival:.1f} req/s{drain_txt}: predicted P99 {pred_txt} at {choice.replicas} replicas "
        f"({_describe(choice.batching)}), observed {observed} at {call.state.replicas}; "
        f"target {config.p99_target_ms:g} ms with {call.margin:.0%} margin; "
        f"model correction x{correction.light:.2f} (light load) / x{correction.heavy:.2f} (heavy)"
    )
    if call.service is not call.profile.service_time:
        learned = call.state.learned
        message += f"; compute x{learned.service_scale:.2f} of the profile"
        if abs(learned.slope_scale - 1.0) >= SERVICE_SCALE_DEADBAND:
            message += f", per-item slope x{learned.slope_scale:.2f}"
    if call.alert_active:
        message += "; an SLO alert fires: decided with its wider margin, no scale-down while it fires"
    if choice.reload_delay_ms > 0:
        message += f"; reloads held: one now would delay requests ~{choice.reload_delay_ms:.0f} ms"
    if demand.bursts:
        span, peak = max(demand.bursts.spans, key=lambda b: b[1] / b[0])
        message += f"; bursts up to {peak:.0f} requests in {span:g} s"
    if call.headroom > 1.0:
        message += f"; sized for x{call.headroom:.2f} the arrivals (the rise learned within a reaction time)"
    return message + _guidance(call, demand)


#: The mean executed batch below which requests run alone (batching does not shorten their time).
_ALONE_BATCH = 1.1


def _guidance(call: _Call, demand: _Demand) -> str:
    """Where the observed time went, and what each knob is predicted to do about it ("" without a split).

    Queue-dominated: the best batching at the replicas serving, against the fewest replicas at the
    batching in force, both predicted by the same model the decision uses, and which is the cheaper
    fix (batching costs no replica when it meets the target). Compute-dominated with requests
    running alone: neither knob shortens a request's own compute; a faster engine would.
    """
    obs, state = call.obs, call.state
    queue, served = obs.queue_time_ms, obs.service_time_ms
    if queue is None or served is None or queue + served <= 0:
        return ""
    n, rate, target = state.replicas, demand.arrival, call.up_target_ms
    if queue > served:
        batch_cfg, batch_ms = min(
            (
                (
                    cfg,
                    corrected_p99_ms(
                        call.correction, rate_per_s=rate, replicas=n, shape=shape, service=call.service
                    ),
                )
                for cfg, shape in call.cands
            ),
            key=lambda pair: pair[1],
        )
        found = min_replicas_for(
            rate_per_s=rate,
            target_ms=target,
            shape=_shape(state.batching),
            service=call.service,
            correction=call.correction,
            lo=n,
            hi=call.config.max_replicas,
        )
        batching_fix = f"batching alone ({_describe(batch_cfg)}) predicts {_ms(batch_ms)} at {n} replicas"
        replicas_fix = (
            f"replicas alone {_ms(found[1])} at {found[0]}"
            if found is not None
            else f"no replica count up to {call.config.max_replicas} meets {target:.0f} ms at this batching"
        )
        cheaper = "batching" if batch_ms <= target else "replicas" if found is not None else "neither alone"
        return (
            f"; queue dominates ({queue:.1f} of {queue + served:.1f} ms): {batching_fix}, {replicas_fix}; "
            f"the cheaper fix: {cheaper}"
        )
    batch = obs.mean_batch_size
    if batch is not None and batch < _ALONE_BATCH:
        return (
            f"; compute dominates at batch {batch:.1f} ({served:.1f} of {queue + served:.1f} ms): more "
            "replicas or batching do not shorten a request's own compute; a faster engine (a lower "
            "precision, TensorRT on a GPU) would"
        )
    return ""


def _ms(value: float) -> str:
    return f"{value:.1f} ms" if math.isfinite(value) else "unbounded"


def _outcome(call: _Call, demand: _Demand, choice: _Choice) -> _Outcome:
    """The decision's content and what this call remembers (a Hold when a guardrail held it all)."""
    state, now_s = call.state, call.now_s
    memory = _Memory(
        learned=replace(
            state.learned, correction_light=call.correction.light, correction_heavy=call.correction.heavy
        ),
        timers=replace(
            state.timers,
            first_seen_s=_first_seen(state, now_s),
            last_backlog_s=_backlog_at(state, call.obs, now_s),
        ),
        window=WindowMemory(
            recommendations=choice.recommendations,
            up_recommendations=choice.up_recommendations,
            last_queue_total=demand.queue_total,
            last_queue_at_s=call.obs.at_s,
        ),
    )
    message = _message(call, demand, choice)
    hold = bool(choice.blocked) and choice.replicas == state.replicas and choice.batching == state.batching
    if hold:
        message = f"wanted {choice.recommendation.replicas} replicas ({choice.reason}); " + message
    return _Outcome(
        replicas=choice.replicas,
        batching=choice.batching,
        reason=choice.blocked if hold else choice.reason,
        message=message,
        predicted_ms=choice.predicted_ms,
        hold=hold,
        memory=memory,
    )


def _conclude(
    config: PolicyConfig, state: PolicyState, now_s: float, outcome: _Outcome
) -> tuple[Decision, PolicyState]:
    """The decision and the next state: the one place the state moves on.

    The call's memory is kept whatever it decided; the size in force and the action times move
    only when the decision acts (not on a Hold, not in a dry run, where the state keeps what is
    actually in force).
    """
    n, batching = outcome.replicas, outcome.batching
    up, down, rebatch = n > state.replicas, n < state.replicas, batching != state.batching
    predicted = outcome.predicted_ms
    decision = Decision(
        at_s=now_s,
        action=ScalingAction.HOLD if outcome.hold else _action(up, down, rebatch),
        replicas=n,
        batching=batching,
        reason=outcome.reason,
        message=outcome.message,
        predicted_p99_ms=predicted if predicted is not None and math.isfinite(predicted) else None,
        dry_run=config.dry_run,
    )
    memory = outcome.memory
    if memory is None:
        return decision, state
    new = replace(state, learned=memory.learned, timers=memory.timers, window=memory.window)
    if outcome.hold or config.dry_run:
        return decision, new
    if up or down:
        timers = replace(
            new.timers,
            last_replica_change_s=now_s,
            last_scale_up_s=now_s if up else new.timers.last_scale_up_s,
            awaiting_ready_since_s=now_s if up else None,
        )
        new = replace(new, replicas=n, timers=timers)
    if rebatch:
        new = replace(new, batching=batching, timers=replace(new.timers, last_batching_change_s=now_s))
    return decision, new


def _action(up: bool, down: bool, rebatch: bool) -> ScalingAction:
    if up:
        return ScalingAction.SCALE_UP_AND_REBATCH if rebatch else ScalingAction.SCALE_UP
    if down:
        return ScalingAction.SCALE_DOWN_AND_REBATCH if rebatch else ScalingAction.SCALE_DOWN
    return ScalingAction.REBATCH if rebatch else ScalingAction.NONE


def _since(t: float | None, now_s: float) -> float:
    return math.inf if t is None else now_s - t


def _first_seen(state: PolicyState, now_s: float) -> float:
    return now_s if state.timers.first_seen_s is None else state.timers.first_seen_s


# --- Candidates ------------------------------------------------------------------------------


def _burst_floor(bursts: Bursts, *, target_ms: float, shape: BatchShape, service: ServiceTimeModel) -> int:
    """Replicas of `shape` that absorb the recent bursts within `target_ms` (0 without bursts)."""
    if not bursts:
        return 0
    running = min(shape.max_batch, max(1, round(bursts.running_batch)))
    need = burst_rate_per_s(
        bursts.spans,
        target_ms=target_ms,
        full_batch_ms=service.mean_ms(shape.max_batch),
        in_progress_ms=service.mean_ms(running),
    )
    return math.ceil(need / capacity_per_s(shape, service))


def _batch_cap(config: PolicyConfig, profile_max_batch: int) -> int:
    """The largest max batch size the policy may choose: the profile's, within the spec's bound."""
    return min(profile_max_batch, config.max_batch_size_cap or profile_max_batch)


@lru_cache(maxsize=256)
def _candidates(cap: int, instances: int, service: ServiceTimeModel) -> tuple[_Candidate, ...]:
    """Batching configs the policy may choose in auto mode, up to the max batch size `cap`."""
    low = min(MIN_BATCH_SIZE, cap)
    sizes = sorted({low, cap} | {2**i for i in range(20) if low <= 2**i <= cap})
    out: list[_Candidate] = []
    for size in sizes:
        for delay in sorted(set(QUEUE_DELAY_CANDIDATES_US)):
            prefs = (size,) if ALLOW_PREFERRED_BATCH_SIZES and delay > 0 and size > 1 else ()
            cfg = BatchingConfig(
                max_batch_size=size,
                preferred_batch_sizes=prefs,
                max_queue_delay_us=delay,
                instances_per_replica=instances,
            )
            out.append((cfg, BatchShape.of(cfg)))
    # Highest capacity first: the first candidate usually sets the replica count and the
    # others are ruled out with a single evaluation in `_fewest`.
    out.sort(key=lambda c: (-capacity_per_s(c[1], service), c[0].max_queue_delay_us))
    return tuple(out)


@lru_cache(maxsize=256)
def _shape(batching: BatchingConfig) -> BatchShape:
    return BatchShape.of(batching)


def _allowed(config: PolicyConfig, profile: EngineProfile, state: PolicyState) -> tuple[_Candidate, ...]:
    """Candidates for this call; the batching in force is one of them whenever it is within bounds."""
    if config.batching_mode == "fixed":
        fixed = config.fixed_batching or state.batching
        return ((fixed, _shape(fixed)),)
    grid = _candidates(
        _batch_cap(config, profile.max_batch_size),
        state.batching.instances_per_replica,
        profile.service_time,
    )
    if _in_bounds(config, profile, state.batching) and all(cfg != state.batching for cfg, _ in grid):
        # e.g. a spec's max batch of 6: kept while it meets the SLO, rather than reloaded onto the grid
        return (*grid, (state.batching, _shape(state.batching)))
    return grid


def _in_bounds(config: PolicyConfig, profile: EngineProfile, batching: BatchingConfig) -> bool:
    """Whether the policy may keep `batching` (within the profile's and the spec's batch bounds)."""
    if config.batching_mode == "fixed":
        return batching == (config.fixed_batching or batching)
    cap = _batch_cap(config, profile.max_batch_size)
    return min(MIN_BATCH_SIZE, cap) <= batching.max_batch_size <= cap and all(
        p <= batching.max_batch_size for p in batching.preferred_batch_sizes
    )


def _describe(b: BatchingConfig) -> str:
    return f"max batch {b.max_batch_size}, delay {b.max_queue_delay_us} us"


def _best_at(
    *,
    n: int,
    rate: float,
    target_ms: float,
    keep_ms: float,
    slo_ms: float,
    hysteresis: float,
    cands: tuple[_Candidate, ...],
    current: BatchingConfig,
    service: ServiceTimeModel,
    correction: Correction,
    bursts: Bursts = NO_BURSTS,
) -> tuple[BatchingConfig, float]:
    """Batching to run at `n` replicas: the current one if it meets `keep_ms`, else the lowest P99.

    Only batchings that absorb the recent bursts at `n` replicas are considered (all of them when
    none does: the fleet is at its limit).

    `keep_ms` is the target with the normal margin even while an alert widens `target_ms`'s: a
    reload stalls requests for seconds (2-3.5 s on the Python backend, measured), a price not worth
    paying for the alert's extra margin alone. For the same reason a current batching that misses
    is replaced only by one that meets `target_ms`, or, when it is predicted past the SLO itself
    (`slo_ms`), by one that predicts a P99 lower by more than `hysteresis`: at the fleet's limit
    neighbouring batchings predict nearly the same P99, and the rate's noise would otherwise reload
    back and forth; and while the batching in force only eats into the margin, a reload that does
    not restore it costs more than it buys (on real pods a reload at two replicas, 437 against
    ~500 ms predicted, stalled 2.5-3.4 s of requests and failed the SLO-loop test).
    """
    best: tuple[BatchingConfig, float] | None = None
    current_p99: float | None = None
    fit = tuple(
        c for c in cands if _burst_floor(bursts, target_ms=target_ms, shape=c[1], service=service) <= n
    )
    for cfg, shape in fit or cands:
        p99 = corrected_p99_ms(correction, rate_per_s=rate, replicas=n, shape=shape, service=service)
        if cfg == current:
            if p99 <= max(target_ms, keep_ms):
                return cfg, p99
            current_p99 = p99
        if best is None or p99 < best[1]:
            best = (cfg, p99)
    assert best is not None  # cands is never empty
    if current_p99 is not None and best[1] > target_ms:
        if current_p99 <= slo_ms or not best[1] < current_p99 * (1 - hysteresis):
            return current, current_p99
    return best


def _fewest(
    *,
    rate: float,
    target_ms: float,
    cands: tuple[_Candidate, ...],
    config: PolicyConfig,
    service: ServiceTimeModel,
    correction: Correction,
    bursts: Bursts = NO_BURSTS,
) -> int | None:
    """Fewest replicas over all candidates meeting `target_ms` and absorbing the recent bursts.

    None when max_replicas misses it.
    """
    best: int | None = None
    for _, shape in cands:
        hi = config.max_replicas if best is None else best - 1
        if hi < config.min_replicas:
            break
        floor = _burst_floor(bursts, target_ms=target_ms, shape=shape, service=service)
        if floor > hi:
            continue
        found = min_replicas_for(
            rate_per_s=rate,
            target_ms=target_ms,
            shape=shape,
            service=service,
            correction=correction,
            lo=max(config.min_replicas, floor),
            hi=hi,
        )
        if found is not None:
            best = found[0]
    return best


# --- Learning --------------------------------------------------------------------------------


def _ready_replicas(obs: Observation, state: PolicyState) -> int:
    """Replicas serving now: those reporting metrics, or the size in force when none is counted."""
    return obs.ready_replicas or state.replicas


def _update_correction(
    *, config: PolicyConfig, state: PolicyState, obs: Observation, service: ServiceTimeModel, now_s: float
) -> Correction:
    """Smoothed, bounded observed/predicted P99 ratio for what is in force, in its load regime."""
    rate = obs.request_rate
    ready = _ready_replicas(obs, state)
    learned = state.corrections
    # A backlog inflates the P99 of the whole observation window after it clears; learning from it
    # would make the model over-provision for as long as the correction takes to decay.
    timers = state.timers
    changes = [
        t
        for t in (timers.last_replica_change_s, timers.last_batching_change_s, _backlog_at(state, obs, now_s))
        if t is not None
    ]
    settling = bool(changes) and now_s - max(changes) < CORRECTION_SETTLE_S
    if obs.p99_ms is None or rate is None or rate < MIN_RATE_FOR_CORRECTION_PER_S:
        return learned
    if settling or ready != state.replicas:
        return learned
    shape = _shape(state.batching)
    predicted = predict_p99_ms(rate_per_s=rate, replicas=ready, shape=shape, service=service)
    if not math.isfinite(predicted) or predicted <= 0:
        return learned
    ratio = min(CORRECTION_MAX, max(CORRECTION_MIN, obs.p99_ms / predicted))
    w = heavy_weight(utilization(rate_per_s=rate, replicas=ready, shape=shape, service=service))

    def learn(old: float, weight: float) -> float:
        a = CORRECTION_ALPHA * weight
        smoothed = math.exp((1 - a) * math.log(old) + a * math.log(ratio))
        return min(CORRECTION_MAX, max(CORRECTION_MIN, smoothed))

    return Correction(light=learn(learned.light, 1 - w), heavy=learn(learned.heavy, w))


def _has_backlog(state: PolicyState, obs: Observation) -> bool:
    """More than a full batch queued per replica: requests wait for more than the next batch."""
    depth = obs.queue_depth_per_replica
    return depth is not None and depth > state.batching.max_batch_size * state.batching.instances_per_replica


def _backlog_at(state: PolicyState, obs: Observation, now_s: float) -> float | None:
    """When a backlog was last seen, counting this observation."""
    return now_s if _has_backlog(state, obs) else state.timers.last_backlog_s


def _startup_s(config: PolicyConfig, state: PolicyState) -> float:
    """Expected seconds from asking for a replica to its serving: learned, else the configured guess."""
    learned = state.learned.replica_startup_s
    return learned if learned is not None else config.replica_startup_s


#: Within this fraction of the profile, the profile's service time is used as is: compute times
#: vary about that much from one window to the next, and a constant model keeps decisions still.
SERVICE_SCALE_DEADBAND = 0.1
#: The speed is learned only where batch sizes barely spread: mean batch up to this, or at least
#: this fraction of the max batch size (a saturated replica runs full batches).
_NARROW_SPREAD_MEAN_BATCH = 1.25
_NARROW_SPREAD_FILL = 0.9
_SERVICE_SCALE_STEP = 0.05
#: A replica's busy fraction above which a compute time faster than the profile's is believed.
#: The profile is measured at saturation; a lightly loaded replica computes faster than a saturated
#: one (a CPU quota throttles only once its period's share is spent; caches, clocks and memory
#: bandwidth are shared less), so learning "faster" there would size a scale-down for a speed the
#: replicas lose as soon as they are busy (on real pods x0.69 was learned at ~44% busy under a
#: 0.6-core limit, and the fleet went from 2 to 1 replica in the middle of the SLO-loop test's step).
_FASTER_THAN_PROFILED_MIN_BUSY = 0.7


def _learn_service_scale(
    config: PolicyConfig, state: PolicyState, obs: Observation, profiled: ServiceTimeModel
) -> PolicyState:
    """Smooth the observed speed against the profile's into the state.

    From the compute time of each executed batch size where the pods' statistics gave it
    (`_learn_speed_by_size`); else from the compute time per request of the metrics page, below.

    The compute time per request (the average request's batch) is learned only from steady
    windows: a backlog in the window (or pods starting) mixes the requests whose compute time is
    counted with batches counted in other windows, which read as a slower machine (up to 2x in the
    simulator's spikes, on a machine exactly as fast as its profile). A faster machine than
    profiled is only learned from busy replicas (`_FASTER_THAN_PROFILED_MIN_BUSY`).
    """
    compute, batch, rate = obs.compute_time_ms, obs.mean_batch_size, obs.request_rate
    if rate is None or rate < MIN_RATE_FOR_CORRECTION_PER_S:
        return state
    by_size = _learn_speed_by_size(state, obs, profiled)
    if by_size is not None:
        return by_size
    if compute is None or batch is None:
        return state
    m, full = max(1.0, batch), float(state.batching.max_batch_size)
    if _NARROW_SPREAD_MEAN_BATCH < m < _NARROW_SPREAD_FILL * full:
        # Between single requests and full batches the sizes spread as the arrivals do (bursts fill
        # batches, lulls run singles), and the batch the average request ran in is unknown: bursty
        # traces read as a 1.2x+ slower machine in the simulator. Learn only where it is known.
        return state
    backlog_at = _backlog_at(state, obs, obs.at_s)
    if _ready_replicas(obs, state) != state.replicas or (
        backlog_at is not None and obs.at_s - backlog_at < CORRECTION_SETTLE_S
    ):
        return state
    line = learned_line(profiled, scale=1.0, slope_scale=state.learned.slope_scale)
    expected = line.mean_ms(_request_weighted_batch(batch, state))
    if compute <= 0 or expected <= 0:
        return state
    ratio = min(SERVICE_SCALE_MAX, max(SERVICE_SCALE_MIN, compute / expected))
    if ratio < 1.0:
        per_replica = rate / (max(1, _ready_replicas(obs, state)) * state.batching.instances_per_replica)
        if per_replica * compute / m / 1000.0 < _FASTER_THAN_PROFILED_MIN_BUSY:
            return state
    learned = _smoothed(state.learned.service_scale, ratio)
    return replace(state, learned=replace(state.learned, service_scale=learned))


def _learn_speed_by_size(
    state: PolicyState, obs: Observation, profiled: ServiceTimeModel
) -> PolicyState | None:
    """The speed and slope from the window's compute time per executed batch size (`policy.speed`).

    None when the window has no timed sizes, or too few executions (the caller then learns from the
    compute time per request). Every window counts, backlogs and starting pods included: each
    execution's time is counted with its own size. A faster machine (or a gentler slope) than
    profiled is believed only from busy replicas, as below.
    """
    sizes = obs.executed_batch_sizes
    if not sizes:
        return None
    learned = state.learned
    sample = speed_sample(sizes, profiled, slope_scale=learned.slope_scale)
    if sample is None:
        return None
    faster = sample.scale < 1.0 or (sample.slope_scale is not None and sample.slope_scale < 1.0)
    instances = max(1, _ready_replicas(obs, state)) * state.batching.instances_per_replica
    if faster and sample.busy_share / instances < _FASTER_THAN_PROFILED_MIN_BUSY:
        return state
    scale = _smoothed(learned.service_scale, min(SERVICE_SCALE_MAX, max(SERVICE_SCALE_MIN, sample.scale)))
    slope = learned.slope_scale
    if sample.slope_scale is not None:
        slope = _smoothed(slope, min(SLOPE_SCALE_MAX, max(SLOPE_SCALE_MIN, sample.slope_scale)))
    return replace(state, learned=replace(learned, service_scale=scale, slope_scale=slope))


def _smoothed(old: float, new: float) -> float:
    """One EWMA step in log space (`SERVICE_SCALE_ALPHA`): a ratio's halving and doubling weigh alike."""
    a = SERVICE_SCALE_ALPHA
    return math.exp((1 - a) * math.log(old) + a * math.log(new))


def _request_weighted_batch(mean_batch: float, state: PolicyState) -> float:
    """The batch size the average *request* ran in, from the mean per execution.

    Compute time per request weighs each batch by its size, so it is the time of a larger batch
    than the mean per execution whenever sizes vary. With the sizes the model assumes (one plus a
    Poisson count, mean m), that batch is E[b^2]/E[b] = m + 1 - 1/m (1 when every batch is 1),
    and never beyond the max batch size.
    """
    m = max(1.0, mean_batch)
    return min(float(state.batching.max_batch_size), m + 1.0 - 1.0 / m)


def _service_time(profiled: ServiceTimeModel, learned: Learned) -> ServiceTimeModel:
    """The service time on the hardware serving now: the learned speed and slope, stepped, past a deadband."""
    scale, slope = _stepped(learned.service_scale), _stepped(learned.slope_scale)
    if scale == 1.0 and slope == 1.0:
        return profiled
    return _learned_service(profiled, scale, slope)


def _stepped(factor: float) -> float:
    """1 within the deadband, else the factor rounded up to a step.

    The step keeps the model constant while the learned value wanders within it (decisions stay
    still); rounding up never reads the hardware faster, or a batch's items cheaper, than measured
    (to the nearest, a learned x0.714 served as x0.70: 2% optimistic at the SLO's edge).
    """
    if abs(factor - 1.0) < SERVICE_SCALE_DEADBAND:
        return 1.0
    return round(math.ceil(factor / _SERVICE_SCALE_STEP - 1e-9) * _SERVICE_SCALE_STEP, 2)


def replica_capacity_per_s(profile: EngineProfile, state: PolicyState) -> float:
    """One replica's throughput at the batching in force, on the hardware serving now (req/s)."""
    return capacity_per_s(_shape(state.batching), _service_time(profile.service_time, state.learned))


@lru_cache(maxsize=64)
def _learned_service(profiled: ServiceTimeModel, scale: float, slope: float) -> ServiceTimeModel:
    return learned_line(profiled, scale=scale, slope_scale=slope)


def _learn_startup(state: PolicyState, obs: Observation) -> PolicyState:
    """Once every replica of the last scale-up reports, the time that took is a start-up sample.

    The sample is late by up to a control period and a scrape; averaging (EWMA 0.5) keeps one slow
    start (an image pull) from dominating.
    """
    since = state.timers.awaiting_ready_since_s
    if since is None or obs.ready_replicas < state.replicas:
        return state
    took = max(0.0, obs.at_s - since)
    before = state.learned.replica_startup_s
    learned = took if before is None else 0.5 * (before + took)
    return replace(
        state,
        learned=replace(state.learned, replica_startup_s=learned),
        timers=replace(state.timers, awaiting_ready_since_s=None),
    )


# --- Demand ----------------------------------------------------------------------------------


def _growth_until_ready_s(config: PolicyConfig, state: PolicyState, obs: Observation, now_s: float) -> float:
    """How much longer the ready replicas alone serve.

    Until the replicas still starting are ready, or else until replicas asked for now would be.
    """
    ready = _ready_replicas(obs, state)
    since = state.timers.awaiting_ready_since_s
    if state.replicas > ready and since is not None:
        return max(0.0, since + _startup_s(config, state) - now_s)
    return _startup_s(config, state)


def _demand(call: _Call, *, top_capacity_per_s: float) -> tuple[float, float, float | None]:
    """(arrival-rate estimate, backlog drain rate, queue total to remember).

    Arrivals: the window's completion rate, or the recent one when it is higher by more than
    noise (a step shows there first), plus the queue's growth since the last call (completions
    are capped at capacity under overload). Drain: a backlog's requests spread over
    `backlog_drain_s`, capacity needed on top of the arrivals to bring the queue back; the backlog
    counted is the one expected when replicas asked for now start serving.
    """
    config, obs, state, rate = call.config, call.obs, call.state, call.rate
    ready = _ready_replicas(obs, state)
    queue_total = obs.queue_depth_per_replica * ready if obs.queue_depth_per_replica is not None else None
    arrival = rate
    recent, span = obs.recent_request_rate, obs.recent_window_s
    if recent is not None and span:
        noise = RATE_RISE_SIGMA * math.sqrt(max(recent, rate) / span)
        if recent > rate + noise:
            arrival = recent
    # The headroom is held over the arrivals seen; the backlog below is sized from what arrives.
    seen = arrival
    arrival *= call.headroom
    last_total, last_at = state.window.last_queue_total, state.window.last_queue_at_s
    if queue_total is not None and last_total is not None and last_at is not None and obs.at_s > last_at:
        growth = (queue_total - last_total) / (obs.at_s - last_at)
        arrival += max(0.0, growth)
        seen += max(0.0, growth)
    drain = 0.0
    if queue_total is not None and config.backlog_drain_s > 0:
        # The queue keeps growing while only the ready replicas serve (at their fastest batching, a
        # reload away): size the drain for the backlog the new replicas will find, not today's.
        ready_capacity = ready * top_capacity_per_s
        backlog = queue_total + max(0.0, seen - ready_capacity) * _growth_until_ready_s(
            config, state, obs, call.now_s
        )
        full = state.batching.max_batch_size * state.batching.instances_per_replica * ready
        if backlog > full:
            drain = backlog / config.backlog_drain_s
    return arrival, drain, queue_total


# --- Choice ----------------------------------------------------------------------------------


def _recommend(call: _Call, *, rate: float, bursts: Bursts) -> _Recommendation:
    """Replicas for `rate`, whether even max_replicas misses the SLO, whether the queue depth forced it.

    Above the current size: the fewest replicas meeting the SLO minus the margin (`n_up`). Below:
    the fewest meeting it minus margin and hysteresis (`n_down`), so a size between the two holds.
    """
    config, current, depth = call.config, call.state.replicas, call.obs.queue_depth_per_replica
    n_up = _fewest(
        rate=rate,
        target_ms=config.p99_target_ms * (1 - call.margin),
        cands=call.cands,
        config=config,
        service=call.service,
        correction=call.correction,
        bursts=bursts,
    )
    n_need = config.max_replicas if n_up is None else n_up
    queue_forced = False
    max_q = config.max_queue_depth
    if max_q is not None and depth is not None and depth > max_q:
        n_q = min(config.max_replicas, math.ceil(max(current, 1) * depth / max_q))
        if n_q > n_need:
            n_need, queue_forced = n_q, True
    if n_need > current:
        return _Recommendation(n_need, n_up is None, queue_forced)
    n_down = _fewest(
        rate=rate,
        target_ms=config.p99_target_ms * (1 - call.margin - HYSTERESIS),
        cands=call.cands,
        config=config,
        service=call.service,
        correction=call.correction,
        bursts=bursts,
    )
    replicas = current if n_down is None else max(n_need, min(current, n_down))
    return _Recommendation(replicas, n_up is None, queue_forced)


def _alert_replicas_keeping_batching(call: _Call, *, n: int, rate: float) -> int:
    """Under an alert, the replicas that carry its extra margin with the batching in force.

    The batching in force is kept while it meets the normal margin (`_best_at`), so the alert's
    larger margin is met with replicas, not with a reload; 0 when that batching misses the normal
    margin anyway (it will be replaced) or no replica count meets the alert's target with it.
    """
    batching, service, correction = call.state.batching, call.service, call.correction
    shape = _shape(batching)
    if corrected_p99_ms(correction, rate_per_s=rate, replicas=n, shape=shape, service=service) > (
        call.keep_target_ms
    ):
        return 0
    found = _fewest(
        rate=rate,
        target_ms=call.up_target_ms,
        cands=((batching, shape),),
        config=call.config,
        service=service,
        correction=correction,
    )
    return found or 0


#: Earlier recommendations a stabilization window needs per ignored outlier (two minutes at the
#: default 15 s period; the default 300 s window holds 20).
_MIN_RECS_FOR_OUTLIERS = 8


def _stabilized(recs: tuple[tuple[float, int], ...], *, outliers: int) -> int:
    """The stabilization window's robust max: the latest recommendation, or an earlier one above it.

    The `outliers` highest earlier recommendations are ignored (never all of them): on a steady
    load a single period's noisy rate estimate asked for one replica more, and with the plain max
    it held that replica for the whole window (T1 of `make bench`: 4 replicas for 1,860 of 3,600 s
    where 3 kept 99.99% of requests within the SLO).
    """
    latest = recs[-1][1]
    earlier = sorted((n for _, n in recs[:-1]), reverse=True)
    if not earlier:
        return latest
    if len(earlier) < _MIN_RECS_FOR_OUTLIERS * max(outliers, 1):
        # A short window (the demo's 30 s holds two earlier periods) has no outlier to spare:
        # dropping one would shrink the stabilization the spec asked for to a period or two.
        outliers = 0
    return max(latest, earlier[min(outliers, len(earlier) - 1)])


def _reload_held_ms(call: _Call, *, rate: float, bursts: Bursts) -> float:
    """How long a reload now would delay requests (ms) when that is reason to hold reloads; else 0.

    Reloads are held when the profile's reload cost at the ready replicas' load
    (`reload_delay_ms`) exceeds the margin the SLO keeps free, the batching in force is within
    bounds, and some replica count within bounds meets the target with the margin in force with
    it. A reload that is the only way to the SLO is never held.
    """
    config, profile, state = call.config, call.profile, call.state
    if profile.reload is None or len(call.cands) < 2 or not _in_bounds(config, profile, state.batching):
        return 0.0
    in_force = _shape(state.batching)
    busy = utilization(
        rate_per_s=rate, replicas=_ready_replicas(call.obs, state), shape=in_force, service=call.service
    )
    delay = reload_delay_ms(profile.reload, busy)
    if delay <= config.p99_target_ms * config.margin:
        return 0.0
    feasible = _fewest(
        rate=rate, target_ms=call.up_target_ms, cands=((state.batching, in_force),), config=config,
        service=call.service, correction=call.correction, bursts=bursts,
    )  # fmt: skip
    return delay if feasible is not None else 0.0


def fewest_replicas_at(
    *,
    config: PolicyConfig,
    profile: EngineProfile,
    rate_per_s: float,
    batching: BatchingConfig,
    most: int,
    bursts: Bursts = NO_BURSTS,
) -> int | None:
    """Fewest replicas (at most `most`) meeting the SLO minus its margin at `rate_per_s`, absorbing `bursts`.

    The same sizing `decide` does, over the same batching candidates, without what a running service
    teaches it about its own engine (no correction): what comparing engines that do not serve yet
    can use. None when `most` replicas miss it.
    """
    bounded = replace(config, max_replicas=max(1, min(config.max_replicas, most)))
    if most < max(1, config.min_replicas):
        return None
    cands = _allowed(bounded, profile, PolicyState.initial(replicas=1, batching=batching))
    return _fewest(
        rate=rate_per_s,
        target_ms=config.p99_target_ms * (1 - config.margin),
        cands=cands,
        config=bounded,
        service=profile.service_time,
        correction=Correction(),
        bursts=bursts,
    )
