"""The SLO control loop of one service: observe (the pods, Prometheus) -> decide (pure policy) -> act.

Runs inside the service's reconcile loop, after a reconcile pass, so the two
never race on the object's status: the autoscaler writes the target
(`status.replicas`, `status.batching`) and the decision; the next reconcile
pass moves the Deployment and the ConfigMap to it. Batching changes are pushed
to the ready Triton pods first (live reload, verified, rolled back if one
refuses) and only recorded once every pod runs them, so new pods start with
the batching the others serve.

Status writes happen only when something a user would want to see changed (a
decision other than "nothing to do", a new reason, a condition flip, or the
observed P99/rate moving by more than 10%): a quiet service causes no writes.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

import httpx
from pydantic import ValidationError

from tailpilot.api import constants as c
from tailpilot.api.autoscaling import BatchingConfig, Decision, Observation, ScalingAction
from tailpilot.api.engine import EngineProfile
from tailpilot.api.v1alpha1 import (
    DecisionRecordStatus,
    GpuCandidateStatus,
    InferenceService,
    InferenceServiceStatus,
    ObservedStatus,
)
from tailpilot.api.wake import wake_requested_at
from tailpilot.controllers.autoscale.breakdown import breakdown_condition
from tailpilot.controllers.autoscale.pod_batching import PodBatching
from tailpilot.controllers.core.clock import SYSTEM_CLOCK, Clock, utc_now
from tailpilot.controllers.core.conditions import ConditionUpdate, condition_of, is_true, merge_conditions
from tailpilot.controllers.core.events import EventRecord, post_events
from tailpilot.controllers.core.metrics import OperatorMetrics
from tailpilot.controllers.core.seams import AutoscalerKube
from tailpilot.controllers.core.settings import DEFAULT_CONTROL_PERIOD_S
from tailpilot.controllers.core.status import (
    MAX_MESSAGE,
    batching_in_force,
    batching_status,
    budget_status,
    decision_status,
    decode_status,
    engine_profile,
    learned_status,
    observed_status,
    served_engine,
    served_result,
    service_without_status,
    status_patch,
    with_decision,
)
from tailpilot.controllers.core.watched import DirectReads, ObjectSource
from tailpilot.controllers.gpu.gpu_inventory import GpuInventory
from tailpilot.controllers.gpu.gpu_products import (
    candidates_serving,
    choice_status,
    chooses_product,
    memory_of,
    options_of,
    serving_spec,
)
from tailpilot.controllers.signals.activator_held import ActivatorHeld
from tailpilot.controllers.signals.observe import (
    LatencyBoard,
    ObservationError,
    client_latency,
    observe_service,
)
from tailpilot.controllers.signals.pod_signals import PodSignals
from tailpilot.controllers.signals.prometheus_client import prometheus_for
from tailpilot.controllers.signals.service_runtime import ClientAnswer, ServiceRuntime, ServiceRuntimes
from tailpilot.manifests import placement
from tailpilot.policy import PolicyState
from tailpilot.policy.from_spec import (
    arrival_lookback_s,
    observation_windows,
    policy_config,
    prometheus_recent_window_s,
)
from tailpilot.policy.gpu_choice import REASON_MOVE_DEFERRED, ProductChoice
from tailpilot.policy.period import PeriodInput, PeriodPlan, ProductContext, run_period
from tailpilot.policy.service_fit import FitQuality, ServiceFit, disagreement
from tailpilot.policy.signals import READ_PERIOD_S, observation_from_reads
from tailpilot.policy.speed import learned_line
from tailpilot.policy.surge import SurgeReading
from tailpilot.policy.wake import HeldRequests, reads_held

log = logging.getLogger("tailpilot.autoscaler")

_QUIET_ACTIONS = {ScalingAction.NONE, ScalingAction.HOLD}

#: A read of the pods older than this many read periods is not used (the fast loop stopped or fell
#: behind): the decision takes Prometheus' rates instead.
FRESH_READS = 3
#: The clients' P99 answer is reused for this share of a control period: a decision the fast checks
#: call early does not query it again (the timer's own periods, a little jittered, do).
CLIENT_QUERY_REUSE = 0.9


def slo_condition(observation: Observation, *, target_ms: float) -> ConditionUpdate:
    """SLOMet from the observed service-level P99 (pure)."""
    if observation.p99_ms is None:
        if observation.request_rate == 0:
            return ConditionUpdate(c.CONDITION_SLO_MET, c.STATUS_UNKNOWN, c.REASON_NO_TRAFFIC, "no requests")
        return ConditionUpdate(
            c.CONDITION_SLO_MET,
            c.STATUS_UNKNOWN,
            c.REASON_METRICS_UNAVAILABLE,
            "no P99 could be read from Prometheus",
        )
    text = f"observed P99 {observation.p99_ms:.1f} ms, target {target_ms:g} ms"
    if observation.p99_ms <= target_ms:
        return ConditionUpdate(c.CONDITION_SLO_MET, c.STATUS_TRUE, c.REASON_SLO_MET, text)
    return ConditionUpdate(c.CONDITION_SLO_MET, c.STATUS_FALSE, c.REASON_SLO_VIOLATED, text)


#: How far the serving pods' fitted service time may be from the profile's before the profile is
#: called wrong: compute times vary 10-20% from one window to the next on a busy CPU.
PROFILE_TOLERANCE = 1.25


def profile_accuracy(
    profile: EngineProfile | None, fit: ServiceFit | None, *, status: InferenceServiceStatus
) -> tuple[ConditionUpdate, list[EventRecord]]:
    """ProfileAccurate, and a Warning Event when the profile is first found wrong (pure).

    The figures in the message are those of the pass that set the condition's status and reason:
    a message that moved with every window would rewrite the status every period.
    """
    if profile is None:
        learned = "once requests flow" if fit is None else f"({fit.quality.value})"
        update = ConditionUpdate(
            c.CONDITION_PROFILE_ACCURATE,
            c.STATUS_FALSE,
            c.REASON_NO_PROFILE,
            f"the engine in service has no profile; the autoscaler sizes replicas with the service time "
            f"learned from the serving pods' Triton counters {learned}",
        )
    elif fit is None or fit.quality is not FitQuality.FITTED:
        update = ConditionUpdate(
            c.CONDITION_PROFILE_ACCURATE,
            c.STATUS_UNKNOWN,
            c.REASON_LEARNING_SERVICE_TIME,
            "not enough traffic at enough batch sizes yet to compare the profile with the serving pods",
        )
    else:
        # The fit is the server's time per request outside its queue; the profile's service time
        # is its client's (a few transport ms more), well inside the tolerance on one machine.
        profiled = profile.service_time
        batch = max(1.0, sum(fit.batch_range) / 2)
        ratio = disagreement(fit, profiled, batch=batch)
        figures = (
            f"the serving pods compute a batch of {batch:.1f} in "
            f"{fit.model.mean_ms(batch):.1f} ms, the profile {profiled.mean_ms(batch):.1f} ms (x{ratio:.2f})"
        )
        if 1 / PROFILE_TOLERANCE <= ratio <= PROFILE_TOLERANCE:
            update = ConditionUpdate(
                c.CONDITION_PROFILE_ACCURATE, c.STATUS_TRUE, c.REASON_PROFILE_MATCHES_SERVING, figures
            )
        else:
            update = ConditionUpdate(
                c.CONDITION_PROFILE_ACCURATE,
                c.STATUS_FALSE,
                c.REASON_PROFILE_DISAGREES,
                f"{figures}; the autoscaler scales the profile by the service-time scale it learns "
                "(status.learned.serviceTimeScale)",
            )
    previous = condition_of(status.conditions, c.CONDITION_PROFILE_ACCURATE)
    if previous is not None and (previous.status, previous.reason) == (update.status, update.reason):
        return ConditionUpdate(update.type, update.status, update.reason, previous.message), []
    if update.reason == c.REASON_PROFILE_DISAGREES:
        return update, [EventRecord("Warning", c.REASON_PROFILE_DISAGREES, update.message)]
    return update, []


def _moved(old: float | None, new: float | None) -> bool:
    if old is None or new is None:
        return old != new
    return abs(new - old) > 0.1 * max(abs(old), 1e-9)


def _condition_states(status: InferenceServiceStatus) -> list[tuple[str, str, str, int | None]]:
    return [(x.type, x.status, x.reason, x.observed_generation) for x in status.conditions]


def significant_change(old: InferenceServiceStatus, new: InferenceServiceStatus) -> bool:
    """Whether a user would want to see the new status: a condition, a target, P99/rate or the reason moved.

    A condition counts when its status, reason or generation changes, not its message alone: the
    messages carry the period's figures (a rate of 39.8/s, then 40.1/s), and a status written every
    period for those would cost a write and a reconcile per service and period (33 writes/s at 500
    services). The messages are brought up to date with the next write.
    """
    old_seen, new_seen = old.observed or ObservedStatus(), new.observed or ObservedStatus()
    return (
        _condition_states(new) != _condition_states(old)
        or new.replicas != old.replicas
        or new.batching != old.batching
        or _moved(old_seen.p99_ms, new_seen.p99_ms)
        or _moved(old_seen.request_rate, new_seen.request_rate)
        # The clients' P99 appearing or going (a query that starts or stops answering) is said at once.
        or (old_seen.client_p99_ms is None) != (new_seen.client_p99_ms is None)
        or _reason(old) != _reason(new)
        or _gpu_choice(old) != _gpu_choice(new)
    )


def _gpu_choice(status: InferenceServiceStatus) -> tuple[str | None, str] | None:
    return (status.gpu.product, status.gpu.reason) if status.gpu else None


#: ScalingActive while no profile sizes the service yet.
_LEARNING_SERVICE_TIME = ConditionUpdate(
    c.CONDITION_SCALING_ACTIVE,
    c.STATUS_UNKNOWN,
    c.REASON_LEARNING_SERVICE_TIME,
    "the engine has no profile; the service time is learned from the serving pods' "
    "metrics once requests flow",
)


def _scaling_active(decision: Decision) -> ConditionUpdate:
    """ScalingActive after a decision: the decision's reason and message (dry run or acting)."""
    return ConditionUpdate(
        c.CONDITION_SCALING_ACTIVE,
        c.STATUS_TRUE,
        c.REASON_AUTOSCALING_DRY_RUN if decision.dry_run else c.REASON_AUTOSCALING_ACTIVE,
        f"{decision.reason}: {decision.message}"[:MAX_MESSAGE],
    )


def _decision_event(
    decision: Decision, *, replicas: int, batching: BatchingConfig, surge: SurgeReading | None
) -> EventRecord:
    """The Event of a decision that acts (or would, in a dry run): what changed and why."""
    verb = "would " if decision.dry_run else ""
    return EventRecord(
        "Normal",
        decision.reason,
        f"{verb}{decision.action.value}: replicas {replicas}->{decision.replicas}, max batch "
        f"{batching.max_batch_size}->{decision.batching.max_batch_size}: {decision.message}"
        + (f" ({surge.describe()})" if surge is not None else ""),
    )


def _decided_status(
    plan: PeriodPlan,
    *,
    state: PolicyState,
    status: InferenceServiceStatus,
    seen: ObservedStatus,
    replicas: int,
    batching: BatchingConfig,
    at: datetime,
) -> dict[str, Any]:
    """The status fields a decided period writes (a record in status.decisions when it acted)."""
    decision, observation = plan.decision, plan.observation
    assert decision is not None
    update: dict[str, Any] = {
        "observed": seen,
        "last_decision": decision_status(decision, at=at),
        "learned": learned_status(
            state.learned, plan.fit, headroom=plan.headroom, rises=plan.memory.rises, idle=plan.memory.idle
        ),
        "error_budget": budget_status(plan.budget, plan.memory.ledger),
    }
    if decision.action not in _QUIET_ACTIONS and not decision.dry_run:
        record = DecisionRecordStatus(
            time=at,
            action=decision.action.value,
            reason=decision.reason,
            replicas_before=replicas,
            replicas_after=decision.replicas,
            max_batch_size_before=batching.max_batch_size,
            max_batch_size_after=decision.batching.max_batch_size,
            request_rate=_rounded(observation.request_rate),
            observed_p99_ms=_rounded(observation.p99_ms),
            predicted_p99_ms=_rounded(decision.predicted_p99_ms),
        )
        update["decisions"] = with_decision(status.decisions, record)
    if decision.predicted_p99_ms is not None:
        update["predicted_p99_ms"] = round(decision.predicted_p99_ms, 2)
    return update


def _rounded(value: float | None) -> float | None:
    """A figure for the status: 2 decimals; None when absent or not finite (the schema takes neither)."""
    return None if value is None or not math.isfinite(value) else round(value, 2)


def _reason(status: InferenceServiceStatus) -> str | None:
    return status.last_decision.reason if status.last_decision else None


def replicas_now(status: InferenceServiceStatus) -> int:
    """The replicas in force by the status (0 at zero; 1 before the first rollout recorded any)."""
    return int(status.replicas) if status.replicas is not None else 1


def _breakdown_reason(status: InferenceServiceStatus) -> str | None:
    """The part LatencyBreakdown named, while it was True (the part it keeps naming while close)."""
    held = condition_of(status.conditions, c.CONDITION_LATENCY_BREAKDOWN)
    return held.reason if held is not None and held.status == c.STATUS_TRUE else None


@dataclass(frozen=True)
class _Inputs:
    """What one decision needs from the object."""

    body: dict[str, Any]
    isvc: InferenceService
    status: InferenceServiceStatus
    prometheus_url: str
    #: The engine's profile from the status; None: the service time is learned online.
    profile: EngineProfile | None
    #: The spec lists several GPU products (`isvc` is pinned to the one serving).
    chooses_product: bool = False


@dataclass(frozen=True)
class _Products:
    """The GPU products of a service that lists several: the choice's input, and their status rows."""

    context: ProductContext
    candidates: list[GpuCandidateStatus]


@dataclass(frozen=True)
class _Gathered:
    """What a period gathered before deciding."""

    period: PeriodInput
    products: _Products | None
    #: Pods reloaded to the batching in force on the way.
    pod_events: list[EventRecord]
    #: Why the clients' latency could not be read (None: read, or not asked for).
    client_error: str | None


def with_unobserved(observation: Observation, status_ready: int | None) -> Observation:
    """Prometheus' observation, with the pods Ready by the last reconcile it has no current sample of.

    Such figures are a partial scrape's: summed rates read low, and no scale-down may rest on them
    (`Reason.PODS_UNOBSERVED`). The pods' own reads make up for a missing pod from the others instead.
    """
    unobserved = max(0, int(status_ready or 0) - observation.ready_replicas)
    return observation.model_copy(update={"pods_unobserved": unobserved})


@dataclass
class Autoscaler:
    """Observe, decide and act for one service per call; keeps each service's policy state in memory."""

    kube: AutoscalerKube
    http: httpx.AsyncClient
    metrics: OperatorMetrics
    default_prometheus_url: str | None
    control_period_s: float = DEFAULT_CONTROL_PERIOD_S
    clock: Clock = SYSTEM_CLOCK
    #: The pods' reads (the fast loop's); None: every signal comes from Prometheus.
    signals: PodSignals | None = None
    latency: LatencyBoard = field(default_factory=LatencyBoard)
    #: The service as the watches delivered it; None: a GET per decision.
    objects: ObjectSource | None = None
    #: GPU nodes and their pods, for services listing several products; None: the replicas each
    #: product can hold are those the last reconcile recorded.
    inventory: GpuInventory | None = None
    #: An activator is configured (`--activator-service`): a service with minReplicas 0 may go to
    #: zero. Without one, such a service keeps one replica (a request at zero would find no endpoint).
    scale_to_zero: bool = False
    #: The requests the activator's pods hold (with an activator): a woken service's wake is sized
    #: from them while it has no ready replica. None: the wake is one replica, then the traffic's.
    activator_held: ActivatorHeld | None = None
    #: The services' runtimes when no pods' reader is given (whose runtimes are used otherwise).
    _own_runtimes: ServiceRuntimes = field(default_factory=ServiceRuntimes)

    @property
    def runtimes(self) -> ServiceRuntimes:
        """Where each service's memory is kept: the pods' reader's, so its reads are the decision's."""
        return self.signals.runtimes if self.signals is not None else self._own_runtimes

    @property
    def _pods(self) -> PodBatching:
        return PodBatching(
            kube=self.kube, metrics=self.metrics, objects=self.objects or DirectReads(self.kube)
        )

    def forget(self, namespace: str, name: str) -> None:
        """Drop a deleted service's gauges (its memory goes with its runtime, `ServiceRuntimes.forget`)."""
        self.metrics.forget_service(namespace=namespace, service=name)

    async def step(
        self, namespace: str, name: str, *, alert_active: bool, surge: SurgeReading | None = None
    ) -> tuple[float, bool]:
        """One control period; returns (seconds until the next, whether the Deployment must change).

        `surge`: a fast check saw arrivals above the fleet's capacity; its completion rate over its
        span replaces the recent request rate from Prometheus, whose scrapes are older.
        """
        body = await (self.objects or DirectReads(self.kube)).service(namespace, name)
        inputs = await self._inputs(body)
        if inputs is None:
            return self.control_period_s, False
        isvc, status = inputs.isvc, inputs.status
        now, runtime = self.clock.time(), self.runtimes.get(namespace, name)
        replicas, batching = replicas_now(status), batching_in_force(isvc, status)
        gathered = await self._gather(inputs, runtime, surge=surge, alert_active=alert_active, now=now)
        plan, products = run_period(gathered.period), gathered.products
        runtime.memory = plan.memory
        observation, fit, profile, decision = plan.observation, plan.fit, plan.profile, plan.decision
        profile_condition, profile_events = profile_accuracy(inputs.profile, fit, status=status)
        if profile is None or decision is None or plan.decided is None:
            # No profile and nothing served yet to learn from: nothing to size replicas with.
            await self._write(inputs.body, status, [profile_condition, _LEARNING_SERVICE_TIME])
            return self.control_period_s, False
        state = plan.decided
        seen = observed_status(observation)
        self._record_metrics(namespace, name, plan, profile=profile, state=state, seen=seen)
        events: list[EventRecord] = [*gathered.pod_events, *profile_events]
        scale, target = False, status
        if plan.choice is not None and products is not None:
            target = self._record_choice(inputs, plan.choice, products, events)
            if plan.move is not None:
                # The move is the decision: the replicas and batching the old product needed no longer apply.
                target = self._moved(target, plan, state, replicas)
                await self._write(inputs.body, target, [profile_condition], force=True)
                await asyncio.to_thread(post_events, self.kube, inputs.body, events, now=utc_now(self.clock))
                return self.control_period_s, True
        if plan.batching is not None:
            applied = await self._rebatch(isvc, status, plan.batching, events)
            if applied:
                target = target.model_copy(update={"batching": batching_status(plan.batching)})
            else:
                refused = plan.after_refused_batching(batching)
                runtime.memory, state = refused, refused.state or state
        if plan.replicas is not None:
            target = self._resized(target, plan, events)
            scale = True
        if decision.action not in _QUIET_ACTIONS:
            events.append(_decision_event(decision, replicas=replicas, batching=batching, surge=surge))
        update = _decided_status(
            plan,
            state=state,
            status=status,
            seen=seen,
            replicas=replicas,
            batching=batching,
            at=utc_now(self.clock),
        )
        updates = [
            profile_condition,
            slo_condition(observation, target_ms=isvc.spec.slo.p99_latency_ms),
            breakdown_condition(
                seen, previous_reason=_breakdown_reason(status), client_error=gathered.client_error
            ),
            _scaling_active(decision),
        ]
        wrote = await self._write(
            inputs.body,
            target.model_copy(update=update),
            updates,
            force=decision.action not in _QUIET_ACTIONS,
        )
        if wrote or events:
            await asyncio.to_thread(post_events, self.kube, inputs.body, events, now=utc_now(self.clock))
        return self.control_period_s, scale

    async def _gather(
        self,
        inputs: _Inputs,
        runtime: ServiceRuntime,
        *,
        surge: SurgeReading | None,
        alert_active: bool,
        now: float,
    ) -> _Gathered:
        """The period's inputs: pods kept at the batching in force, observation, products, held requests."""
        batching = batching_in_force(inputs.isvc, inputs.status)
        pod_events = await self._keep_pods_at(runtime, inputs, batching)
        observed, client_error = await self._observed(inputs, now)
        products = await self._products(inputs, observed, now)
        held = await self._held(inputs, observed)
        period = self._period_input(
            inputs, observed, products, surge=surge, alert_active=alert_active, now=now, held=held
        )
        return _Gathered(period=period, products=products, pod_events=pod_events, client_error=client_error)

    def _resized(
        self, target: InferenceServiceStatus, plan: PeriodPlan, events: list[EventRecord]
    ) -> InferenceServiceStatus:
        """The status at the plan's replicas; going to zero is timed and said (the wake reads the time)."""
        resized = target.model_copy(update={"replicas": plan.replicas})
        if plan.replicas == 0 and plan.zero is not None:
            events.append(EventRecord("Normal", c.EVENT_SCALED_TO_ZERO, plan.zero.reason))
            return resized.model_copy(update={"scaled_to_zero_at": utc_now(self.clock)})
        return resized

    async def _keep_pods_at(
        self, runtime: ServiceRuntime, inputs: _Inputs, batching: BatchingConfig
    ) -> list[EventRecord]:
        """The batching in force reloaded on pods that came up running another (not in a dry run)."""
        if inputs.isvc.spec.autoscaling.dry_run:
            return []
        return await self._pods.keep_at(runtime, inputs.isvc, inputs.status, batching)

    def _period_input(
        self,
        inputs: _Inputs,
        observed: Observation,
        products: _Products | None,
        *,
        surge: SurgeReading | None,
        alert_active: bool,
        now: float,
        held: HeldRequests | None = None,
    ) -> PeriodInput:
        """What `run_period` reads for this service: its spec, signals and the memory kept for it.

        The memory is this process's, else what the object's status kept (after a restart).
        """
        isvc, status = inputs.isvc, inputs.status
        replicas, batching = replicas_now(status), batching_in_force(isvc, status)
        runtime = self.runtimes.get(isvc.namespace, isvc.name)
        config = policy_config(isvc.spec, control_period_s=self.control_period_s)
        if not self.scale_to_zero:
            config = replace(config, min_replicas=max(1, config.min_replicas))
        return PeriodInput(
            config=config,
            profile=inputs.profile,
            engine=served_engine(isvc, status),
            observation=observed,
            surge=surge,
            state=runtime.policy_state(status, replicas=replicas, batching=batching),
            memory=runtime.period_memory(status),
            products=products.context if products is not None else None,
            replicas=replicas,
            batching=batching,
            now_s=now,
            alert_active=alert_active,
            held=held,
        )

    async def _held(self, inputs: _Inputs, observed: Observation) -> HeldRequests | None:
        """The requests the activator holds for a woken service with no ready replica (else None).

        Dated from the wake annotation: they arrived since the activator asked for a replica. A
        service at zero is not read (the wake comes first), so idle services cost the activator nothing.
        """
        isvc = inputs.isvc
        since = wake_requested_at(isvc.metadata.get("annotations"))
        if self.activator_held is None or not self.scale_to_zero or since is None:
            return None
        woken = isvc.spec.autoscaling.min_replicas == 0  # the annotation counts where zero is allowed
        if not reads_held(
            woken=woken, ready_replicas=observed.ready_replicas, replicas=replicas_now(inputs.status)
        ):
            return None
        count = await self.activator_held.held(isvc.namespace, isvc.name)
        return None if count is None else HeldRequests(count=count, since_s=since.timestamp())

    async def _observed(self, inputs: _Inputs, now: float) -> tuple[Observation, str | None]:
        """The period's observation (its time on the metrics), with the clients' latency where measured."""
        isvc = inputs.isvc
        started = time.perf_counter()
        observed = await self._observe(
            isvc, inputs.prometheus_url, now, status_ready=inputs.status.ready_replicas
        )
        self.metrics.record_observation(
            rates_from=observed.rates_from or "none", seconds=time.perf_counter() - started
        )
        return await self._client_latency(isvc, inputs.prometheus_url, observed, now)

    def _record_metrics(
        self,
        namespace: str,
        name: str,
        plan: PeriodPlan,
        *,
        profile: EngineProfile,
        state: PolicyState,
        seen: ObservedStatus,
    ) -> None:
        """The period's decision, budget, time breakdown and batch sizes on the operator's metrics."""
        decision, observation = plan.decision, plan.observation
        assert decision is not None
        self.metrics.record_decision(
            namespace=namespace, service=name, decision=decision, observed_p99_ms=observation.p99_ms
        )
        self.metrics.record_budget(
            namespace=namespace, service=name, headroom=plan.headroom, budget_remaining=plan.budget.remaining
        )
        # The profile's line at the hardware's learned speed and slope.
        serving = learned_line(
            profile.service_time, scale=state.learned.service_scale, slope_scale=state.learned.slope_scale
        )
        self.metrics.record_breakdown(
            namespace=namespace,
            service=name,
            observed=seen,
            service_time=(serving.intercept_ms, serving.per_item_ms),
        )
        self.metrics.record_batch_sizes(
            namespace=namespace, service=name, sizes=observation.executed_batch_sizes
        )

    async def _products(self, inputs: _Inputs, observation: Observation, now: float) -> _Products | None:
        """The GPU products a service listing several may move between, with the replicas each holds now.

        None where no choice is made this period: one product, a dry run, no product chosen yet, or
        no request rate to size the products at.
        """
        isvc, status = inputs.isvc, inputs.status
        if (
            not inputs.chooses_product
            or isvc.spec.autoscaling.dry_run
            or status.gpu is None
            or observation.request_rate is None
        ):
            return None
        key = (isvc.namespace, isvc.name)
        candidates = list(status.gpu.candidates)
        gpu = isvc.spec.runtime.gpu
        if self.inventory is not None and gpu is not None:
            inventory = self.inventory
            tolerations = placement.tolerations(gpu=True, user=isvc.spec.runtime.tolerations)
            candidates = [
                x.model_copy(
                    update={
                        "replicas_available": await asyncio.to_thread(
                            inventory.replicas_available,
                            product=x.product,
                            gpus_per_replica=gpu.count,
                            tolerations=tolerations,
                            service=key,
                        )
                    }
                )
                for x in candidates
            ]
        context = ProductContext(
            options=options_of(isvc, candidates),
            current=status.gpu.product,
            serving=candidates_serving(candidates),
            memory=memory_of(status.gpu, now=utc_now(self.clock), now_s=now),
            # Until the reconciler sees every new pod ready (it then deletes the old ones).
            moving=status.gpu.moving_to is not None,
        )
        return _Products(context=context, candidates=candidates)

    def _record_choice(
        self,
        inputs: _Inputs,
        choice: ProductChoice,
        products: _Products,
        events: list[EventRecord],
    ) -> InferenceServiceStatus:
        """The status with the period's product choice, its metrics and its Events."""
        isvc, status = inputs.isvc, inputs.status
        assert status.gpu is not None  # a choice is made only where one was placed
        self.metrics.record_gpu_choice(
            namespace=isvc.namespace,
            service=isvc.name,
            costs={f.product: f.cost_per_hour for f in choice.figures},
            serving=choice.product,
            moved=choice.reason if choice.moved else None,
        )
        chosen = choice_status(status.gpu, choice, products.candidates, now=utc_now(self.clock))
        if not choice.moved:
            if choice.reason != status.gpu.reason and choice.reason == REASON_MOVE_DEFERRED:
                events.append(EventRecord("Normal", choice.reason, choice.message))
        else:
            events.append(
                EventRecord(
                    "Normal",
                    choice.reason,
                    f"moving from {status.gpu.product} to {choice.product}: {choice.message}",
                )
            )
        return status.model_copy(update={"gpu": chosen})

    def _moved(
        self,
        chosen: InferenceServiceStatus,
        plan: PeriodPlan,
        state: PolicyState,
        replicas: int,
    ) -> InferenceServiceStatus:
        """The status of a move to another product: its replicas, a fresh policy state, the record."""
        assert plan.move is not None and plan.choice is not None
        observation = plan.observation
        record = DecisionRecordStatus(
            time=utc_now(self.clock),
            action="MoveGpuProduct",
            reason=plan.choice.reason,
            replicas_before=replicas,
            replicas_after=plan.move.replicas,
            max_batch_size_before=state.batching.max_batch_size,
            max_batch_size_after=state.batching.max_batch_size,
            request_rate=_rounded(observation.request_rate),
            observed_p99_ms=_rounded(observation.p99_ms),
            gpu_product=plan.move.product,
        )
        return chosen.model_copy(
            update={
                "replicas": plan.move.replicas,
                "learned": None,
                "decisions": with_decision(chosen.decisions, record),
            }
        )

    async def _observe(
        self, isvc: InferenceService, prometheus_url: str, now: float, *, status_ready: int | None = None
    ) -> Observation:
        """The service's Observation: rates from its pods' reads, the P99 from Prometheus.

        When no fresh read of a pod exists (the pods' metrics port is unreachable, or the fast loop
        has not read them yet), every signal comes from Prometheus at its scrape interval;
        `status_ready` (status.readyReplicas) then says how many pods it should cover.
        """
        namespace, name = isvc.namespace, isvc.name
        # The fast loop's reads of the pods, handed over on the service's runtime.
        history = self.runtimes.get(namespace, name).reads.history
        newest = history.newest if history is not None else None
        period = self.signals.period_s if self.signals is not None else READ_PERIOD_S
        # Fresh: read within FRESH_READS periods of `now`, on either side. The period took `now`
        # before it waited (its pod list, the API server, the event loop), so the fast loop may have
        # stored a newer read meanwhile; such a read is the freshest there is, not a reason to send
        # the ~14 per-service queries instead (at 500 services that fallback was most of the
        # operator's Prometheus load). Only a read further off, old or from before a clock stepped
        # back, is not fresh.
        fresh = newest is not None and newest.pods and abs(now - newest.at_s) <= FRESH_READS * period
        try:
            if history is not None and fresh:
                latency = await self.latency.latency(
                    self.http, prometheus_url=prometheus_url, namespace=namespace, service=name, now_s=now
                )
                windows = observation_windows(
                    isvc.spec, control_period_s=self.control_period_s, read_period_s=period
                )
                observation = observation_from_reads(
                    history.reads, windows=windows, now_s=now, latency=latency
                )
                return observation.model_copy(update={"rates_from": "Pods"})
            observation = await observe_service(
                self.http,
                prometheus_url=prometheus_url,
                namespace=namespace,
                service=name,
                window_s=float(isvc.spec.slo.evaluation_window_seconds),
                now_s=now,
                recent_window_s=prometheus_recent_window_s(isvc.spec, control_period_s=self.control_period_s),
                arrival_lookback_s=arrival_lookback_s(isvc.spec),
                arrival_bin_s=float(isvc.spec.monitoring.scrape_interval_seconds),
            )
            return with_unobserved(observation.model_copy(update={"rates_from": "Prometheus"}), status_ready)
        except ObservationError as error:
            log.warning("observing %s/%s: %s", namespace, name, error)
            return Observation(at_s=now, request_rate=None, p99_ms=None)

    async def _client_latency(
        self, isvc: InferenceService, prometheus_url: str, observation: Observation, now: float
    ) -> tuple[Observation, str | None]:
        """The observation with the clients' P99 (spec.monitoring.clientLatencyP99Query), and why not.

        One instant query at the observation's time against the service's Prometheus, through the
        observation's client (its timeout). An answer is kept for most of a control period, so a
        decision the fast checks call early reuses it: a failing query is not retried faster than
        the control period. It never fails the decision.
        """
        query = isvc.spec.monitoring.client_latency_p99_query
        runtime = self.runtimes.get(isvc.namespace, isvc.name)
        cached = runtime.client_answer
        if query is None:
            runtime.client_answer = None
            return observation, None
        fresh = cached is not None and 0 <= now - cached.at_s < CLIENT_QUERY_REUSE * self.control_period_s
        if cached is not None and fresh and cached.query == query:
            answer = cached.answer
        else:
            answer = await client_latency(
                self.http, prometheus_url=prometheus_url, query=query, now_s=now, namespace=isvc.namespace
            )
            before = cached.answer.error if cached is not None else None
            if answer.error is not None and answer.error != before:
                log.warning("%s/%s: spec.monitoring.clientLatencyP99Query: %s", *runtime.key, answer.error)
            runtime.client_answer = ClientAnswer(query, now, answer)
        return observation.model_copy(update={"client_p99_ms": answer.p99_ms}), answer.error

    async def _inputs(self, body: dict[str, Any] | None) -> _Inputs | None:
        """What a decision needs, or None (with ScalingActive=False when the user must act)."""
        if body is None:
            return None
        try:
            isvc = service_without_status(body)
        except ValidationError:
            return None
        status = decode_status(body.get("status"))
        choosing = chooses_product(isvc)
        isvc = serving_spec(isvc, status)
        serving = served_result(status) is not None and is_true(status.conditions, c.CONDITION_ROLLOUT_READY)
        if not isvc.spec.autoscaling.enabled or not serving:
            return None
        # A URL the spec names is used only if the platform allows it; one it does not is never contacted.
        prometheus = prometheus_for(
            self.http, isvc.spec.monitoring.prometheus_url, default_url=self.default_prometheus_url
        )
        profile = engine_profile(status, max_batch_size=isvc.spec.batching.max_batch_size)
        if prometheus.url is None:
            condition = ConditionUpdate(
                c.CONDITION_SCALING_ACTIVE, c.STATUS_FALSE, prometheus.reason, prometheus.message
            )
            await self._write(body, status, [condition])
            return None
        return _Inputs(
            body=body,
            isvc=isvc,
            status=status,
            prometheus_url=prometheus.url,
            profile=profile,
            chooses_product=choosing,
        )

    async def _rebatch(
        self,
        isvc: InferenceService,
        status: InferenceServiceStatus,
        target: BatchingConfig,
        events: list[EventRecord],
    ) -> bool:
        """Push `target` to the service's ready pods (`PodBatching.change`); False if refused."""
        return await self._pods.change(isvc, status, target, events)

    async def _write(
        self,
        body: dict[str, Any],
        status: InferenceServiceStatus,
        updates: list[ConditionUpdate],
        *,
        force: bool = False,
    ) -> bool:
        old = decode_status(body.get("status"))
        generation = int(body["metadata"].get("generation", 0))
        new = status.model_copy(
            update={
                "conditions": merge_conditions(
                    old.conditions, updates, generation=generation, now=utc_now(self.clock)
                )
            }
        )
        if not (force or significant_change(old, new)):
            return False
        await asyncio.to_thread(self.kube.patch_status, body, status_patch(body.get("status"), new))
        return True
