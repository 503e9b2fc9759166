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
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import httpx
from pydantic import ValidationError

from tailpilot.api import constants as c
from tailpilot.api.autoscaling import BatchingConfig, Decision, Observation, ScalingAction
from tailpilot.api.engine import BuildResult, EngineProfile
from tailpilot.api.v1alpha1 import (
    DecisionRecordStatus,
    GpuCandidateStatus,
    InferenceService,
    InferenceServiceStatus,
    ObservedStatus,
)
from tailpilot.controllers.admin_key import read_admin_key
from tailpilot.controllers.batching import apply_batching, check_config
from tailpilot.controllers.breakdown import breakdown_condition
from tailpilot.controllers.canary_rollout import canary_plan
from tailpilot.controllers.clock import SYSTEM_CLOCK, Clock, utc_now
from tailpilot.controllers.conditions import ConditionUpdate, condition_of, is_true, merge_conditions
from tailpilot.controllers.events import EventRecord, post_events
from tailpilot.controllers.gpu_inventory import GpuInventory
from tailpilot.controllers.gpu_products import (
    candidates_serving,
    choice_status,
    chooses_product,
    memory_of,
    options_of,
    serving_spec,
)
from tailpilot.controllers.kubeapi import PODS, pod_url, ready_pod_ip
from tailpilot.controllers.metrics import OperatorMetrics
from tailpilot.controllers.observe import (
    ClientLatency,
    LatencyBoard,
    ObservationError,
    client_latency,
    observe_service,
)
from tailpilot.controllers.pod_signals import PodSignals
from tailpilot.controllers.prometheus_client import prometheus_for
from tailpilot.controllers.seams import AutoscalerKube
from tailpilot.controllers.settings import DEFAULT_CONTROL_PERIOD_S
from tailpilot.controllers.status import (
    MAX_MESSAGE,
    batching_in_force,
    batching_status,
    budget_status,
    decision_status,
    decode_status,
    engine_profile,
    learned_status,
    observed_status,
    restore_learned,
    restored_memory,
    served_engine,
    served_result,
    service_without_status,
    status_patch,
    with_decision,
)
from tailpilot.controllers.watched import DirectReads, ObjectSource
from tailpilot.manifests import placement, triton_model_config
from tailpilot.manifests.meta import selector_string
from tailpilot.policy import PolicyState
from tailpilot.policy.from_spec import (
    arrival_lookback_s,
    observation_windows,
    policy_config,
    prometheus_recent_window_s,
)
from tailpilot.policy.gpu_choice import REASON_MOVE_DEFERRED, ProductChoice
from tailpilot.policy.period import PeriodInput, PeriodMemory, PeriodPlan, ProductContext, run_period
from tailpilot.policy.service_fit import FitQuality, ServiceFit, disagreement
from tailpilot.policy.signals import READ_PERIOD_S, observation_from_reads
from tailpilot.policy.speed import learned_line
from tailpilot.policy.surge import SurgeReading

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


#: The Event of a pod whose Triton came up with another batching than the one in force, reloaded.
REASON_BATCHING_RESTORED = "BatchingRestored"


def incarnation(pod: dict[str, Any]) -> str:
    """One run of a pod's containers: its uid and restart count (a restarted Triton is a new one)."""
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    restarts = sum(int(s.get("restartCount") or 0) for s in statuses)
    return f"{(pod.get('metadata') or {}).get('uid', '')}/{restarts}"


def _serves(pod: dict[str, Any], engine_key: str) -> bool:
    """Whether a pod is a stable replica of this engine (the label holds the key's first 63 characters)."""
    labels = (pod.get("metadata") or {}).get("labels") or {}
    return not _on_canary_track(pod) and labels.get(c.LABEL_ENGINE_KEY) == engine_key[:63]


def _on_canary_track(pod: dict[str, Any]) -> bool:
    labels = (pod.get("metadata") or {}).get("labels") or {}
    return labels.get(c.LABEL_TRACK) == c.TRACK_CANARY


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
        "learned": learned_status(state.learned, plan.fit, headroom=plan.headroom, rises=plan.memory.rises),
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
    #: What each service's last control period handed the next (`tailpilot.policy.period`).
    _memory: dict[tuple[str, str], PeriodMemory] = field(default_factory=dict)
    #: GPU nodes and their pods, for services listing several products; None: the replicas each
    #: product can hold are those the last reconcile recorded.
    inventory: GpuInventory | None = None
    #: Each service's last client-latency answer: (the query, when, the answer).
    _client_answers: dict[tuple[str, str], tuple[str, float, ClientLatency]] = field(default_factory=dict)
    #: Each service's pod incarnations (`incarnation`) read or made to run the batching in force,
    #: and that batching: a pod not among them is checked once (see `_keep_pods_at`).
    _at_batching: dict[tuple[str, str], tuple[BatchingConfig, frozenset[str]]] = field(default_factory=dict)

    def forget(self, namespace: str, name: str) -> None:
        """Drop a deleted service's state and gauges."""
        self._memory.pop((namespace, name), None)
        self._client_answers.pop((namespace, name), None)
        self._at_batching.pop((namespace, name), None)
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
        now = self.clock.time()
        key = (namespace, name)
        replicas, batching = int(status.replicas or 1), batching_in_force(isvc, status)
        pod_events = [] if isvc.spec.autoscaling.dry_run else await self._keep_pods_at(isvc, status, batching)
        observed, client_error = await self._observed(inputs, now)
        products = await self._products(inputs, observed, now)
        plan = run_period(
            self._period_input(inputs, observed, products, surge=surge, alert_active=alert_active, now=now)
        )
        self._memory[key] = plan.memory
        observation, fit, profile, decision = plan.observation, plan.fit, plan.profile, plan.decision
        profile_condition, profile_events = profile_accuracy(inputs.profile, fit, status=status)
        if profile is None or decision is None or plan.decided is None:
            # No profile and nothing served yet to learn from: nothing to size replicas with.
            await self._write(inputs.body, status, [profile_condition, _LEARNING_SERVICE_TIME])
            return self.control_period_s, False
        state = plan.decided
        seen = observed_status(observation)
        self._record_metrics(namespace, name, plan, profile=profile, state=state, seen=seen)
        events: list[EventRecord] = [*pod_events, *profile_events]
        scale = False
        target = status
        if plan.choice is not None and products is not None:
            target = self._record_choice(inputs, plan.choice, products, replicas, events)
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
                self._memory[key], state = refused, refused.state or state
        if plan.replicas is not None:
            target = target.model_copy(update={"replicas": plan.replicas})
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
            breakdown_condition(seen, previous_reason=_breakdown_reason(status), client_error=client_error),
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

    def _period_input(
        self,
        inputs: _Inputs,
        observed: Observation,
        products: _Products | None,
        *,
        surge: SurgeReading | None,
        alert_active: bool,
        now: float,
    ) -> PeriodInput:
        """What `run_period` reads for this service: its spec, signals and the memory kept for it.

        The memory is this process's, else what the object's status kept (after a restart).
        """
        isvc, status = inputs.isvc, inputs.status
        replicas, batching = int(status.replicas or 1), batching_in_force(isvc, status)
        memory = self._memory.get((isvc.namespace, isvc.name)) or restored_memory(status)
        state = memory.state or restore_learned(
            PolicyState.initial(replicas=replicas, batching=batching), status.learned
        )
        return PeriodInput(
            config=policy_config(isvc.spec, control_period_s=self.control_period_s),
            profile=inputs.profile,
            engine=served_engine(isvc, status),
            observation=observed,
            surge=surge,
            state=state.with_actual(replicas=replicas, batching=batching),
            memory=memory,
            products=products.context if products is not None else None,
            replicas=replicas,
            batching=batching,
            now_s=now,
            alert_active=alert_active,
        )

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
        )
        return _Products(context=context, candidates=candidates)

    def _record_choice(
        self,
        inputs: _Inputs,
        choice: ProductChoice,
        products: _Products,
        replicas: int,
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
        chosen = choice_status(
            status.gpu, choice, products.candidates, now=utc_now(self.clock), replicas_now=replicas
        )
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
        history = self.signals.history(namespace, name) if self.signals is not None else None
        newest = history.newest if history is not None else None
        period = self.signals.period_s if self.signals is not None else READ_PERIOD_S
        # Fresh: read within the last periods, and not stamped after now (a clock stepped back).
        fresh = newest is not None and newest.pods and 0 <= now - newest.at_s <= FRESH_READS * period
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
        key = (isvc.namespace, isvc.name)
        if query is None:
            self._client_answers.pop(key, None)
            return observation, None
        cached = self._client_answers.get(key)
        fresh = cached is not None and 0 <= now - cached[1] < CLIENT_QUERY_REUSE * self.control_period_s
        if cached is not None and fresh and cached[0] == query:
            answer = cached[2]
        else:
            answer = await client_latency(
                self.http, prometheus_url=prometheus_url, query=query, now_s=now, namespace=isvc.namespace
            )
            before = cached[2].error if cached is not None else None
            if answer.error is not None and answer.error != before:
                log.warning("%s/%s: spec.monitoring.clientLatencyP99Query: %s", *key, answer.error)
            self._client_answers[key] = (query, now, answer)
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

    async def _keep_pods_at(
        self, isvc: InferenceService, status: InferenceServiceStatus, batching: BatchingConfig
    ) -> list[EventRecord]:
        """Reload the batching in force on the ready pods that came up running another.

        A Triton restarted in its pod (a crash, an OOM kill) loads the config its init container
        copied when the pod started, and a pod created before the ConfigMap caught up with a live
        change starts with the old one: both would serve another batching than the status says until
        the next change. So every pod incarnation (pod and restart count) not yet known to run the
        batching in force has its config read once (one call each: changes are minutes apart, pods
        restart rarely), and only those running another are reloaded. Only the pods of the engine
        in force: a canary's run another engine (its own config), and so do the old engine's pods
        while a new one rolls out. Returns the Events to post.
        """
        result = served_result(status)
        key = (isvc.namespace, isvc.name)
        if result is None:
            return []
        pods = await (self.objects or DirectReads(self.kube)).pods(isvc.namespace, isvc.name)
        urls = {
            incarnation(p): pod_url(ip, c.TRITON_HTTP_PORT)
            for p in pods
            if _serves(p, result.engine_key) and (ip := ready_pod_ip(p))
        }
        known_batching, known = self._at_batching.get(key, (batching, frozenset()))
        known = (known if known_batching == batching else frozenset()) & set(urls)
        fresh = {pod: url for pod, url in urls.items() if pod not in known}
        self._at_batching[key] = (batching, known)
        if not fresh:
            return []
        admin_key = await asyncio.to_thread(read_admin_key, self.kube, isvc)
        config_json = _override_json(isvc, result, batching)
        check = await check_config(
            pod_urls=list(fresh.values()),
            model_name=isvc.spec.model_name(isvc.name),
            config_json=config_json,
            admin_key=admin_key,
        )
        at_batching: set[str] = set(check.matching)
        events: list[EventRecord] = []
        if check.differing:
            outcome = await apply_batching(
                pod_urls=[d.pod_url for d in check.differing],
                model_name=isvc.spec.model_name(isvc.name),
                config_json=config_json,
                admin_key=admin_key,
            )
            self.metrics.record_batching_change(outcome.reason)
            at_batching.update(outcome.applied)
            names = ", ".join(d.pod_url for d in check.differing)
            if outcome.ok:
                events.append(
                    EventRecord(
                        "Normal",
                        REASON_BATCHING_RESTORED,
                        f"the batching in force (max batch {batching.max_batch_size}) reloaded on "
                        f"{names}, found running another (restarted, or left by a failed change)",
                    )
                )
            else:
                log.warning("%s/%s: restoring the batching refused: %s", *key, outcome.message)
                events.append(
                    EventRecord(
                        "Warning",
                        "BatchingRefused",
                        f"the batching in force could not be reloaded on {names}: {outcome.message}",
                    )
                )
        # A pod that could not be read is a Ready pod that does not answer its config API (one
        # holding an older key is being replaced): not read again each period, where the KWOK
        # cluster's and a partitioned node's pods would cost a Secret read and a call every time.
        # A pod whose reload failed is tried again next period.
        retry = {d.pod_url for d in check.differing} - at_batching
        self._at_batching[key] = (batching, known | {p for p, url in fresh.items() if url not in retry})
        return events

    async def _rebatch(
        self,
        isvc: InferenceService,
        status: InferenceServiceStatus,
        target: BatchingConfig,
        events: list[EventRecord],
    ) -> bool:
        result = served_result(status)
        if result is None:
            return False
        pods = await asyncio.to_thread(
            self.kube.list, PODS, isvc.namespace, label_selector=selector_string(isvc.name)
        )
        # The pods' reload and config APIs answer only the service's admin key (read at each change:
        # changes are minutes apart, and a recreated Secret's new key is then used at once).
        admin_key = await asyncio.to_thread(read_admin_key, self.kube, isvc)
        canary = canary_plan(status)
        # A canary's pods serve another engine: its own config, the same batching (a fair comparison).
        groups = [(result, [p for p in pods if not _on_canary_track(p)])]
        if canary is not None:
            groups.append((canary.result, [p for p in pods if _on_canary_track(p)]))
        for served, members in groups:
            urls = [pod_url(ip, c.TRITON_HTTP_PORT) for p in members if (ip := ready_pod_ip(p))]
            if served is not result and not urls:
                continue  # canary replicas not started yet: they start with the ConfigMap's batching
            outcome = await apply_batching(
                pod_urls=urls,
                model_name=isvc.spec.model_name(isvc.name),
                config_json=_override_json(isvc, served, target),
                admin_key=admin_key,
            )
            self.metrics.record_batching_change(outcome.reason)
            if not outcome.ok:
                on = "the canary's replicas" if served is not result else "the replicas"
                log.warning("%s/%s: batching change refused: %s", isvc.namespace, isvc.name, outcome.message)
                events.append(
                    EventRecord(
                        "Warning",
                        "BatchingRefused",
                        f"batching change refused by {on}, their old config kept: {outcome.message}",
                    )
                )
                if served is result:
                    return False  # nothing changed anywhere (the stable replicas go first)
        # The batching in force is the stable replicas': a canary that kept its own is only compared
        # under another batching until its verdict.
        return True

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


def _override_json(isvc: InferenceService, served: BuildResult, batching: BatchingConfig) -> str:
    """The load override that serves `served` with `batching` (a live reload, or the check against one)."""
    return triton_model_config.to_load_override_json(
        triton_model_config.model_config_for(
            name=isvc.spec.model_name(isvc.name),
            triton_backend=served.triton_backend,
            inputs=served.inputs,
            outputs=served.outputs,
            batching=batching,
            placement=placement.ServingTarget.from_service(isvc),
        )
    )
