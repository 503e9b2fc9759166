"""The SLO control loop of one service: observe (Prometheus) -> decide (pure policy) -> act.

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
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

import httpx
from pydantic import ValidationError

from tailpilot.api import constants as c
from tailpilot.api.autoscaling import BatchingConfig, Decision, Observation, ScalingAction
from tailpilot.api.engine import BatchProfilePoint, EngineProfile, ReloadCost, ServiceTimeModel
from tailpilot.api.v1alpha1 import InferenceService, LearnedStatus
from tailpilot.builders import triton_config
from tailpilot.controllers.batching import apply_batching
from tailpilot.controllers.conditions import ConditionUpdate, is_true, merge_conditions
from tailpilot.controllers.kubeapi import PODS, Kube, ready_pod_ip
from tailpilot.controllers.metrics import OperatorMetrics
from tailpilot.controllers.observe import ObservationError, observe_service
from tailpilot.controllers.reconciler import ISVC, batching_in_force, batching_status, iso_time, served_result
from tailpilot.manifests.meta import selector_string
from tailpilot.policy import PolicyConfig, PolicyState, decide
from tailpilot.policy.surge import SurgeReading

log = logging.getLogger("tailpilot.autoscaler")

_QUIET_ACTIONS = {ScalingAction.NONE, ScalingAction.HOLD}


def policy_config(isvc: InferenceService, *, control_period_s: float) -> PolicyConfig:
    """The policy's bounds and knobs, from the spec (pure)."""
    spec = isvc.spec
    fixed = spec.batching.mode.value == "fixed"
    return PolicyConfig(
        p99_target_ms=spec.slo.p99_latency_ms,
        min_replicas=spec.autoscaling.min_replicas,
        max_replicas=spec.autoscaling.max_replicas,
        batching_mode="fixed" if fixed else "auto",
        max_batch_size_cap=spec.batching.max_batch_size,
        fixed_batching=spec.batching.to_config() if fixed else None,
        max_queue_depth=float(spec.slo.max_queue_depth) if spec.slo.max_queue_depth else None,
        scale_down_stabilization_s=float(spec.autoscaling.scale_down_stabilization_seconds),
        max_scale_up_step=spec.autoscaling.max_scale_up_step,
        control_period_s=control_period_s,
        dry_run=spec.autoscaling.dry_run,
    )


def recent_window_s(isvc: InferenceService, *, control_period_s: float) -> float:
    """The recent-rate window: one control period, but at least two scrapes (`rate` needs two samples)."""
    return max(control_period_s, 2.0 * isvc.spec.monitoring.scrape_interval_seconds)


def arrival_lookback_s(isvc: InferenceService) -> float | None:
    """How far back the arrival curve looks for bursts (None: `spec.autoscaling.absorbBursts` is false).

    As long as a scale-down is held back by the stabilization window: burst capacity goes the way a
    stabilized recommendation does.
    """
    autoscaling = isvc.spec.autoscaling
    return float(autoscaling.scale_down_stabilization_seconds) if autoscaling.absorb_bursts else None


def with_surge(observation: Observation, surge: SurgeReading | None) -> Observation:
    """The observation a surge decision uses: the fast check's completions over its span as the recent rate.

    Prometheus' recent window ends a scrape or more ago and averages seconds before the surge; the
    fast check read the pods a moment ago. Without data (no request rate) nothing is replaced: the
    policy holds on missing metrics, and a few seconds of counters do not make up for them.
    """
    if surge is None or observation.request_rate is None:
        return observation
    return observation.model_copy(
        update={"recent_request_rate": surge.completion_rate_per_s, "recent_window_s": surge.span_s}
    )


def engine_profile(status: dict[str, Any], *, max_batch_size: int) -> EngineProfile | None:
    """The policy's view of the engine, from the profile summary on the status (pure)."""
    profile, engine = status.get("profile"), status.get("engine") or {}
    if not profile or not profile.get("points"):
        return None
    fit = profile["serviceTime"]
    return EngineProfile(
        engine_key=engine.get("key", ""),
        backend=engine.get("tritonBackend", ""),
        precision="",
        hardware=profile.get("hardware", ""),
        cpu_limit_millis=profile.get("cpuLimitMillis"),
        reload=ReloadCost.model_validate(reload) if (reload := profile.get("reload")) else None,
        max_batch_size=max_batch_size,
        points=[
            BatchProfilePoint(
                batch_size=p["batchSize"],
                p50_ms=p["p99Ms"],
                p95_ms=p["p99Ms"],
                p99_ms=p["p99Ms"],
                throughput_per_s=p["throughputPerS"],
            )
            for p in profile["points"]
        ],
        service_time=_service_time(fit),
        compute_time=_service_time(compute) if (compute := profile.get("computeTime")) else None,
        method="profile summary from the InferenceService status",
    )


def _service_time(fit: Mapping[str, Any]) -> ServiceTimeModel:
    return ServiceTimeModel(
        intercept_ms=fit["interceptMs"], per_item_ms=fit["perItemMs"], jitter_cv=fit.get("jitterCv", 0.0)
    )


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


def _moved(old: float | None, new: float | None) -> bool:
    if old is None or new is None:
        return old != new
    return abs(new - old) > 0.1 * max(abs(old), 1e-9)


def learned_status(state: PolicyState) -> dict[str, float]:
    """status.learned: the model corrections, the hardware's speed and, once timed, the start-up time."""
    learned = {
        "modelCorrectionLightLoad": round(state.correction, 3),
        "modelCorrectionHeavyLoad": round(state.correction_heavy, 3),
        "serviceTimeScale": round(state.service_scale, 3),
    }
    if state.replica_startup_s is not None:
        learned["replicaStartupSeconds"] = round(state.replica_startup_s, 1)
    return learned


def restore_learned(state: PolicyState, learned: Mapping[str, Any] | None) -> PolicyState:
    """The state with what `learned_status` wrote: a restarted operator keeps what it learned."""
    if not learned:
        return state
    # Only the fields this operator knows (a newer one may have written more), and nothing at all
    # from a status it cannot read: what is learned once can be learned again.
    known = {field.alias or name for name, field in LearnedStatus.model_fields.items()}
    try:
        kept = LearnedStatus.model_validate({k: v for k, v in learned.items() if k in known})
    except ValidationError:
        log.warning("ignoring status.learned that does not validate: %s", learned)
        return state

    def either(value: float | None, default: float) -> float:
        return default if value is None else value

    return replace(
        state,
        correction=either(kept.model_correction_light_load, state.correction),
        correction_heavy=either(kept.model_correction_heavy_load, state.correction_heavy),
        service_scale=either(kept.service_time_scale, state.service_scale),
        replica_startup_s=(
            state.replica_startup_s if kept.replica_startup_seconds is None else kept.replica_startup_seconds
        ),
    )


@dataclass
class _Memory:
    state: PolicyState
    last_run_s: float = 0.0


@dataclass
class Autoscaler:
    """Observe, decide and act for one service per call; keeps each service's policy state in memory."""

    kube: Kube
    http: httpx.AsyncClient
    metrics: OperatorMetrics
    default_prometheus_url: str | None
    control_period_s: float = 15.0
    clock: Any = time.time
    _memory: dict[tuple[str, str], _Memory] = field(default_factory=dict)

    def _now(self) -> datetime:
        return datetime.fromtimestamp(float(self.clock()), UTC)

    def forget(self, namespace: str, name: str) -> None:
        """Drop a deleted service's state and gauges."""
        self._memory.pop((namespace, name), None)
        self.metrics.forget_service(namespace=namespace, service=name)

    async def step(
        self, namespace: str, name: str, *, alert_active: bool, surge: SurgeReading | None = None
    ) -> tuple[float, bool]:
        """One control period; returns (seconds until the next, whether the Deployment must change).

        `surge`: a fast check saw arrivals above the fleet's capacity; its completion rate over its
        span replaces the recent request rate from Prometheus, whose scrapes are older.
        """
        body = await asyncio.to_thread(self.kube.get, ISVC, namespace, name)
        inputs = await self._inputs(body)
        if inputs is None or body is None:
            return self.control_period_s, False
        isvc, status, prometheus_url, profile = inputs
        now = float(self.clock())
        replicas, batching = int(status.get("replicas") or 1), batching_in_force(isvc, status)
        memory = self._memory.get((namespace, name))
        state = (
            memory.state
            if memory
            else restore_learned(
                PolicyState.initial(replicas=replicas, batching=batching), status.get("learned")
            )
        )
        state = state.with_actual(replicas=replicas, batching=batching)
        try:
            observation = await observe_service(
                self.http,
                prometheus_url=prometheus_url,
                namespace=namespace,
                service=name,
                window_s=float(isvc.spec.slo.evaluation_window_seconds),
                now_s=now,
                recent_window_s=recent_window_s(isvc, control_period_s=self.control_period_s),
                arrival_lookback_s=arrival_lookback_s(isvc),
                arrival_bin_s=float(isvc.spec.monitoring.scrape_interval_seconds),
            )
        except ObservationError as error:
            log.warning("observing %s/%s: %s", namespace, name, error)
            observation = Observation(at_s=now, request_rate=None, p99_ms=None)
        observation = with_surge(observation, surge)
        decision, state = decide(
            config=policy_config(isvc, control_period_s=self.control_period_s),
            profile=profile,
            observation=observation,
            state=state,
            now_s=now,
            alert_active=alert_active,
        )
        self.metrics.record_decision(
            namespace=namespace, service=name, decision=decision, observed_p99_ms=observation.p99_ms
        )
        events: list[tuple[str, str, str]] = []
        scale = False
        if not decision.dry_run and decision.batching != batching:
            applied = await self._rebatch(isvc, status, decision.batching, events)
            if applied:
                status["batching"] = batching_status(decision.batching)
            else:
                state = state.with_actual(replicas=state.replicas, batching=batching)
        if not decision.dry_run and decision.replicas != replicas:
            status["replicas"] = decision.replicas
            scale = True
        self._memory[(namespace, name)] = _Memory(state=state, last_run_s=now)
        if decision.action not in _QUIET_ACTIONS:
            verb = "would " if decision.dry_run else ""
            events.append(
                (
                    "Normal",
                    decision.reason,
                    f"{verb}{decision.action.value}: replicas {replicas}->{decision.replicas}, max batch "
                    f"{batching.max_batch_size}->{decision.batching.max_batch_size}: {decision.message}"
                    + (f" ({surge.describe()})" if surge is not None else ""),
                )
            )
        self._record(status, observation, decision, state)
        updates = [
            slo_condition(observation, target_ms=isvc.spec.slo.p99_latency_ms),
            ConditionUpdate(
                c.CONDITION_SCALING_ACTIVE,
                c.STATUS_TRUE,
                c.REASON_AUTOSCALING_DRY_RUN if decision.dry_run else c.REASON_AUTOSCALING_ACTIVE,
                f"{decision.reason}: {decision.message}"[:4096],
            ),
        ]
        wrote = await self._write(body, status, updates, force=decision.action not in _QUIET_ACTIONS)
        if wrote or events:
            for type_, reason, message in events:
                await asyncio.to_thread(
                    self.kube.post_event,
                    body,
                    type_=type_,
                    reason=reason,
                    message=message,
                    now=iso_time(self._now()),
                )
        return self.control_period_s, scale

    async def _inputs(
        self, body: dict[str, Any] | None
    ) -> tuple[InferenceService, dict[str, Any], str, EngineProfile] | None:
        """What a decision needs, or None (with ScalingActive=False when the user must act)."""
        if body is None:
            return None
        try:
            isvc = InferenceService.model_validate(body)
        except ValueError:
            return None
        status = dict(body.get("status") or {})
        serving = served_result(status) is not None and is_true(
            status.get("conditions", []), c.CONDITION_ROLLOUT_READY
        )
        if not isvc.spec.autoscaling.enabled or not serving:
            return None
        prometheus_url = isvc.spec.monitoring.prometheus_url or self.default_prometheus_url
        profile = engine_profile(status, max_batch_size=isvc.spec.batching.max_batch_size)
        if prometheus_url is None or profile is None:
            missing = (
                "no Prometheus URL (spec.monitoring.prometheusUrl or the operator's --prometheus-url)"
                if prometheus_url is None
                else "the engine has no profile"
            )
            condition = ConditionUpdate(
                c.CONDITION_SCALING_ACTIVE, c.STATUS_FALSE, c.REASON_METRICS_UNAVAILABLE, missing
            )
            await self._write(body, status, [condition])
            return None
        return isvc, status, prometheus_url, profile

    async def _rebatch(
        self,
        isvc: InferenceService,
        status: dict[str, Any],
        target: BatchingConfig,
        events: list[tuple[str, str, str]],
    ) -> bool:
        result = served_result(status)
        if result is None:
            return False
        pods = await asyncio.to_thread(
            self.kube.list, PODS, isvc.namespace, label_selector=selector_string(isvc.name)
        )
        urls = [f"http://{ip}:{c.TRITON_HTTP_PORT}" for p in pods if (ip := ready_pod_ip(p))]
        gpu = isvc.spec.runtime.gpu
        config = triton_config.render_model_config(
            name=isvc.spec.model_name(isvc.name),
            triton_backend=result.triton_backend,
            inputs=result.inputs,
            outputs=result.outputs,
            batching=target,
            device=isvc.spec.runtime.device.value,
            gpu_product=gpu.product if gpu else None,
        )
        outcome = await apply_batching(
            self.http,
            pod_urls=urls,
            model_name=isvc.spec.model_name(isvc.name),
            config_json=triton_config.to_load_override_json(config),
        )
        self.metrics.record_batching_change(outcome.reason)
        if not outcome.ok:
            log.warning("%s/%s: batching change refused: %s", isvc.namespace, isvc.name, outcome.message)
            events.append(
                ("Warning", "BatchingRefused", f"batching change refused, old config kept: {outcome.message}")
            )
        return outcome.ok

    def _record(
        self, status: dict[str, Any], observation: Observation, decision: Decision, state: PolicyState
    ) -> None:
        status["observed"] = {
            k: v
            for k, v in {
                "p99Ms": None if observation.p99_ms is None else round(observation.p99_ms, 2),
                "queueDepth": None
                if observation.queue_depth_per_replica is None
                else round(observation.queue_depth_per_replica, 2),
                "requestRate": None
                if observation.request_rate is None
                else round(observation.request_rate, 2),
            }.items()
            if v is not None
        }
        if decision.predicted_p99_ms is not None:
            status["predictedP99Ms"] = round(decision.predicted_p99_ms, 2)
        status["lastDecision"] = {
            "action": decision.action.value,
            "reason": decision.reason,
            "message": decision.message[:4096],
            "time": iso_time(self._now()),
            "replicas": decision.replicas,
            "dryRun": decision.dry_run,
        }
        status["learned"] = learned_status(state)

    async def _write(
        self,
        body: dict[str, Any],
        status: dict[str, Any],
        updates: list[ConditionUpdate],
        *,
        force: bool = False,
    ) -> bool:
        old = body.get("status") or {}
        generation = int(body["metadata"].get("generation", 0))
        status["conditions"] = merge_conditions(
            old.get("conditions", []), updates, generation=generation, now=iso_time(self._now())
        )
        significant = (
            force
            or status["conditions"] != old.get("conditions")
            or any(status.get(k) != old.get(k) for k in ("replicas", "batching"))
            or any(
                _moved((old.get("observed") or {}).get(k), (status.get("observed") or {}).get(k))
                for k in ("p99Ms", "requestRate")
            )
            or (
                (old.get("lastDecision") or {}).get("reason")
                != (status.get("lastDecision") or {}).get("reason")
            )
        )
        if not significant:
            return False
        meta = body["metadata"]
        await asyncio.to_thread(
            self.kube.merge_patch,
            ISVC,
            meta["namespace"],
            meta["name"],
            {"status": status},
            subresource="status",
        )
        return True
