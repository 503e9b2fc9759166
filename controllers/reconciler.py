"""Reconcile one InferenceService: validate, build the engine, roll out Triton, report status.

Level-based and idempotent: every pass reads the object and its children,
computes what should exist with the pure builders (`tailpilot.manifests`),
compares (`drift.plan`) and writes only what differs. Names are deterministic
(the build Job is named by the build request's key), so a pass interrupted at
any point (operator SIGKILLed) is completed by the next one without
duplicates. The engine being served only changes when a new build succeeded,
so a bad update never takes a serving service down.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from pydantic import ValidationError

from tailpilot.api import constants as c
from tailpilot.api.autoscaling import BatchingConfig
from tailpilot.api.engine import BuildOutcome, BuildResult, TensorSpec
from tailpilot.api.v1alpha1 import BatchingMode, BatchingStatus, InferenceService
from tailpilot.api.validation import check_batching, check_spec, format_problems
from tailpilot.controllers import drift
from tailpilot.controllers.build_state import BuildPhase, BuildState, assess_build, profile_notes
from tailpilot.controllers.conditions import ConditionUpdate, derive_ready, merge_conditions
from tailpilot.controllers.kubeapi import (
    DEPLOYMENTS,
    JOBS,
    PODS,
    Kube,
    Resource,
    resource_of,
)
from tailpilot.controllers.settings import OperatorSettings
from tailpilot.manifests import build_job as job_manifests
from tailpilot.manifests.children import ClusterCapabilities, plan_children
from tailpilot.manifests.meta import controlled_by, selector_string
from tailpilot.manifests.service import rotation_selectable

log = logging.getLogger("tailpilot.reconciler")

ISVC = Resource(c.GROUP, c.VERSION, c.PLURAL, c.KIND)


@dataclass(frozen=True)
class EventRecord:
    """A Kubernetes Event to post about the InferenceService."""

    type: str  # Normal | Warning
    reason: str
    message: str


@dataclass(frozen=True)
class ReconcileResult:
    """What a pass did and when the next one is due (seconds)."""

    requeue_after: float
    status_written: bool = False
    children_written: int = 0
    #: The service is served and asks for backlog rotation or surge response (the loop runs the
    #: fast checks that read its pods' metrics).
    fast_checks: bool = False


def iso_time(now: datetime) -> str:
    """RFC 3339 in UTC, seconds precision, as Kubernetes writes times."""
    return now.astimezone(UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")


def _parse_time(text: str | None) -> datetime | None:
    if not text:
        return None
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def served_result(status: dict[str, Any]) -> BuildResult | None:
    """The BuildResult of the engine in service, rebuilt from status.engine."""
    engine = status.get("engine")
    if not engine or not engine.get("key"):
        return None
    return BuildResult(
        outcome=BuildOutcome.SUCCEEDED,
        engine_key=engine["key"],
        artifact=engine.get("artifact", ""),
        triton_backend=engine.get("tritonBackend", ""),
        inputs=tuple(TensorSpec.model_validate(t) for t in engine.get("inputs", [])),
        outputs=tuple(TensorSpec.model_validate(t) for t in engine.get("outputs", [])),
        cache_hit=bool(engine.get("cacheHit", False)),
    )


def engine_status(result: BuildResult, *, request_key: str, built_at: str | None) -> dict[str, Any]:
    """status.engine for a successful build."""
    engine: dict[str, Any] = {
        "key": result.engine_key,
        "requestKey": request_key,
        "artifact": result.artifact,
        "tritonBackend": result.triton_backend,
        "cacheHit": result.cache_hit,
        "inputs": [t.model_dump(by_alias=True) for t in result.inputs],
        "outputs": [t.model_dump(by_alias=True) for t in result.outputs],
    }
    if built_at:
        engine["builtAt"] = built_at
    return engine


def batching_in_force(isvc: InferenceService, status: dict[str, Any]) -> BatchingConfig:
    """Spec values in fixed mode; in auto mode the autoscaler's choice, if still within the spec's bounds."""
    wanted = isvc.spec.batching.to_config()
    if isvc.spec.batching.mode is BatchingMode.FIXED or not status.get("batching"):
        return wanted
    try:
        chosen = BatchingStatus.model_validate(status["batching"]).to_config()
    except ValidationError:
        return wanted
    if (
        check_batching(chosen, engine_max_batch_size=wanted.max_batch_size)
        or chosen.instances_per_replica != wanted.instances_per_replica
    ):
        return wanted
    return chosen


def batching_status(batching: BatchingConfig) -> dict[str, Any]:
    """status.batching for a batching config (camelCase, as the CRD has it)."""
    return BatchingStatus.from_config(batching).model_dump(by_alias=True, mode="json")


def replicas_in_force(isvc: InferenceService, status: dict[str, Any]) -> int:
    """spec.replicas when autoscaling is off; otherwise the autoscaler's count, within bounds."""
    bounds = isvc.spec.autoscaling
    if not bounds.enabled:
        return int(isvc.spec.replicas if isvc.spec.replicas is not None else bounds.min_replicas)
    current = status.get("replicas")
    if current is None:
        current = isvc.spec.replicas if isvc.spec.replicas is not None else bounds.min_replicas
    return int(max(bounds.min_replicas, min(bounds.max_replicas, int(current))))


def rollout_condition(deployment: dict[str, Any] | None, replicas: int) -> ConditionUpdate:
    """RolloutReady from the Deployment's status: every replica updated and available."""
    if deployment is None:
        return ConditionUpdate(
            c.CONDITION_ROLLOUT_READY, c.STATUS_FALSE, c.REASON_ROLLING_OUT, "creating the Triton Deployment"
        )
    st = deployment.get("status", {})
    for cond in st.get("conditions", []) or []:
        if cond.get("type") == "Progressing" and cond.get("reason") == "ProgressDeadlineExceeded":
            return ConditionUpdate(
                c.CONDITION_ROLLOUT_READY,
                c.STATUS_FALSE,
                c.REASON_ROLLOUT_STALLED,
                cond.get("message", "rollout exceeded its progress deadline"),
            )
    generation_seen = st.get("observedGeneration", 0) >= deployment["metadata"].get("generation", 0)
    updated, available = st.get("updatedReplicas", 0), st.get("availableReplicas", 0)
    total, ready = st.get("replicas", 0), st.get("readyReplicas", 0)
    if generation_seen and updated == replicas and available >= replicas and total == replicas:
        return ConditionUpdate(
            c.CONDITION_ROLLOUT_READY,
            c.STATUS_TRUE,
            c.REASON_ROLLED_OUT,
            f"{ready}/{replicas} replicas ready",
        )
    return ConditionUpdate(
        c.CONDITION_ROLLOUT_READY,
        c.STATUS_FALSE,
        c.REASON_ROLLING_OUT,
        f"{updated}/{replicas} replicas updated, {available} available",
    )


class Reconciler:
    """All cluster I/O of one reconcile pass; decisions come from pure functions."""

    def __init__(
        self, kube: Kube, settings: OperatorSettings, *, clock: Callable[[], datetime] | None = None
    ):
        self.kube = kube
        self.settings = settings
        self.clock = clock or (lambda: datetime.now(UTC))
        self._monitoring_crds: bool | None = None
        #: Turned-off children known gone, per (service uid, kind, name): the spec generation that
        #: was checked. A pass looks one up again only after the spec changes, not on every pass.
        self._gone: dict[tuple[str, str, str], int] = {}

    # ---- entry point ----------------------------------------------------------------------------------
    def reconcile(self, namespace: str, name: str) -> ReconcileResult:
        """One pass over one InferenceService."""
        body = self.kube.get(ISVC, namespace, name)
        if body is None or body["metadata"].get("deletionTimestamp"):
            return ReconcileResult(requeue_after=self.settings.resync_seconds)
        status = dict(body.get("status") or {})
        generation = int(body["metadata"].get("generation", 0))
        events: list[EventRecord] = []
        try:
            isvc = InferenceService.model_validate(body)
        except ValidationError as error:
            message = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in error.errors())
            return self._invalid(body, status, generation, message)
        problems = check_spec(isvc.spec, name=isvc.name)
        if problems:
            return self._invalid(body, status, generation, format_problems(problems))

        request = job_manifests.make_build_request(isvc=isvc)
        request_key = request.request_key()
        engine_cond, requeue = self._engine(isvc, status, request, request_key, events)
        result = served_result(status)

        updates = [engine_cond]
        children_written = 0
        if result is not None:
            rollout, children_written = self._rollout(isvc, status, result, events)
            degraded = engine_cond.status != c.STATUS_TRUE
            updates.append(
                ConditionUpdate(
                    c.CONDITION_DEGRADED,
                    c.STATUS_TRUE if degraded else c.STATUS_FALSE,
                    engine_cond.reason if degraded else "ServingLatestSpec",
                    f"still serving engine {result.engine_key[:12]}: {engine_cond.message}"
                    if degraded
                    else "",
                )
            )
        else:
            rollout = ConditionUpdate(
                c.CONDITION_ROLLOUT_READY, c.STATUS_FALSE, c.REASON_WAITING_FOR_ENGINE, "no engine built yet"
            )
        updates += [
            rollout,
            derive_ready(engine=engine_cond, rollout=rollout, serving_engine=result is not None),
        ]
        if not isvc.spec.autoscaling.enabled:
            updates.append(
                ConditionUpdate(
                    c.CONDITION_SCALING_ACTIVE,
                    c.STATUS_FALSE,
                    c.REASON_AUTOSCALING_DISABLED,
                    "spec.autoscaling.enabled is false",
                )
            )
        if rollout.status != c.STATUS_TRUE:
            requeue = min(requeue, 30.0)
        status_written = self._write_status(body, status, updates, generation)
        self._post_events(body, events)
        return ReconcileResult(
            requeue_after=requeue,
            status_written=status_written,
            children_written=children_written,
            fast_checks=result is not None and isvc.spec.autoscaling.fast_checks(),
        )

    # ---- validation -----------------------------------------------------------------------------------
    def _invalid(
        self, body: dict[str, Any], status: dict[str, Any], generation: int, message: str
    ) -> ReconcileResult:
        updates = [ConditionUpdate(c.CONDITION_READY, c.STATUS_FALSE, c.REASON_INVALID_SPEC, message)]
        written = self._write_status(body, status, updates, generation)
        if written:
            self._post_events(body, [EventRecord("Warning", c.REASON_INVALID_SPEC, message)])
        return ReconcileResult(requeue_after=self.settings.resync_seconds, status_written=written)

    # ---- engine ---------------------------------------------------------------------------------------
    def _engine(
        self,
        isvc: InferenceService,
        status: dict[str, Any],
        request: Any,
        request_key: str,
        events: list[EventRecord],
    ) -> tuple[ConditionUpdate, float]:
        engine = status.get("engine") or {}
        if engine.get("requestKey") == request_key:
            reason = c.REASON_ENGINE_CACHED if engine.get("cacheHit") else c.REASON_ENGINE_BUILT
            return ConditionUpdate(
                c.CONDITION_ENGINE_READY,
                c.STATUS_TRUE,
                reason,
                f"engine {engine['key'][:12]} built for {request.target}",
            ), self.settings.resync_seconds
        ns = isvc.namespace
        job_name = job_manifests.build_job_name(isvc_name=isvc.name, request_key=request_key)
        job = self.kube.get(JOBS, ns, job_name)
        pods = self.kube.list(PODS, ns, label_selector=f"job-name={job_name}") if job else []
        state = assess_build(job, pods)
        build = dict(status.get("build") or {})
        if build.get("requestKey") != request_key:
            build = {"requestKey": request_key, "attempt": 1}
        build["jobName"] = job_name

        if state.phase is BuildPhase.ABSENT:
            self._create_build_job(isvc, request, build["attempt"], events)
            build.update(phase="Running", reason="", message="")
            status["build"] = build
            return ConditionUpdate(
                c.CONDITION_ENGINE_READY,
                c.STATUS_FALSE,
                c.REASON_ENGINE_BUILDING,
                f"build Job {job_name} started (attempt {build['attempt']})",
            ), 10.0
        if state.phase is BuildPhase.RUNNING:
            status["build"] = {**build, "phase": "Running", "reason": state.reason, "message": state.message}
            detail = f"build Job {job_name} running" + (f" on {state.node}" if state.node else "")
            if state.failed_pods:
                if (build.get("reason"), build.get("failedPods")) != (state.reason, state.failed_pods):
                    events.append(
                        EventRecord(
                            "Warning",
                            state.reason or c.REASON_ENGINE_BUILD_FAILED,
                            f"build pod of {job_name} failed: {state.message}; retrying",
                        )
                    )
                status["build"]["failedPods"] = state.failed_pods
                # The Job retries the pod with its own back-off; say why the last attempt failed.
                return ConditionUpdate(
                    c.CONDITION_ENGINE_READY,
                    c.STATUS_FALSE,
                    state.reason or c.REASON_ENGINE_BUILD_FAILED,
                    f"{state.message} ({state.failed_pods} failed build pod(s); {detail}, retrying)",
                ), 30.0
            if state.waiting:  # e.g. no node has the GPU, or the model's PVC does not exist
                return ConditionUpdate(
                    c.CONDITION_ENGINE_READY,
                    c.STATUS_FALSE,
                    c.REASON_ENGINE_BUILD_PENDING,
                    f"build Job {job_name}: {state.waiting}",
                ), 30.0
            return ConditionUpdate(
                c.CONDITION_ENGINE_READY, c.STATUS_FALSE, c.REASON_ENGINE_BUILDING, detail
            ), 30.0
        if state.phase is BuildPhase.SUCCEEDED and state.result is not None:
            return self._engine_built(isvc, status, state, request_key, build, events)
        return self._engine_failed(isvc, status, state, build, events)

    def _create_build_job(
        self, isvc: InferenceService, request: Any, attempt: int, events: list[EventRecord]
    ) -> None:
        job = job_manifests.build_job(isvc=isvc, request=request, settings=self.settings.manifests)
        template_meta = job["spec"]["template"].setdefault("metadata", {})
        template_meta["labels"] = {**template_meta.get("labels", {}), **self.settings.build_pod_labels}
        job["metadata"].setdefault("annotations", {})[f"{c.GROUP}/build-attempt"] = str(attempt)
        if self.kube.create(job) is not None:
            events.append(
                EventRecord(
                    "Normal",
                    c.REASON_ENGINE_BUILDING,
                    f"started engine build Job {job['metadata']['name']} for "
                    f"{request.backend}/{request.precision} on {request.target}",
                )
            )

    def _engine_built(
        self,
        isvc: InferenceService,
        status: dict[str, Any],
        state: BuildState,
        request_key: str,
        build: dict[str, Any],
        events: list[EventRecord],
    ) -> tuple[ConditionUpdate, float]:
        result = state.result
        if result is None:  # assess_build reports SUCCEEDED only with a result
            raise ValueError("a succeeded build without a result")
        status["engine"] = engine_status(result, request_key=request_key, built_at=state.finished_at)
        if result.profile is not None:
            status["profile"] = result.profile.model_dump(by_alias=True, mode="json")
        status["build"] = {**build, "phase": "Succeeded", "reason": "", "message": ""}
        reason = c.REASON_ENGINE_CACHED if result.cache_hit else c.REASON_ENGINE_BUILT
        note, warning = profile_notes(
            result.profile, serving_cpu_limit_millis=job_manifests.serving_cpu_limit_millis(isvc)
        )
        events.append(
            EventRecord(
                "Normal",
                reason,
                f"engine {result.engine_key[:12]} ready at {result.artifact}" + (f"; {note}" if note else ""),
            )
        )
        if warning:
            events.append(EventRecord("Warning", c.EVENT_PROFILE_CPU_LIMIT_MISMATCH, warning))
        return ConditionUpdate(
            c.CONDITION_ENGINE_READY,
            c.STATUS_TRUE,
            reason,
            f"engine {result.engine_key[:12]} built for {isvc.spec.runtime.device.value}",
        ), self.settings.resync_seconds

    def _engine_failed(
        self,
        isvc: InferenceService,
        status: dict[str, Any],
        state: BuildState,
        build: dict[str, Any],
        events: list[EventRecord],
    ) -> tuple[ConditionUpdate, float]:
        attempt = int(build.get("attempt", 1))
        backoff = min(
            self.settings.build_retry_max_seconds, self.settings.build_retry_base_seconds * 2 ** (attempt - 1)
        )
        finished = _parse_time(state.finished_at) or self.clock()
        wait = (finished - self.clock()).total_seconds() + backoff
        reason = state.reason or c.REASON_ENGINE_BUILD_FAILED
        message = state.message or "the engine build failed"
        if build.get("phase") != "Failed":
            events.append(
                EventRecord("Warning", reason, f"engine build {build['jobName']} failed: {message}")
            )
        if wait <= 0:
            # Back-off over: drop the failed Job; the next pass starts attempt n+1 under the same name.
            self.kube.delete(JOBS, isvc.namespace, build["jobName"])
            status["build"] = {
                **build,
                "attempt": attempt + 1,
                "phase": "Retrying",
                "reason": reason,
                "message": message,
            }
            return ConditionUpdate(
                c.CONDITION_ENGINE_READY,
                c.STATUS_FALSE,
                reason,
                f"{message} (retrying, attempt {attempt + 1})",
            ), 2.0
        status["build"] = {**build, "phase": "Failed", "reason": reason, "message": message}
        return ConditionUpdate(
            c.CONDITION_ENGINE_READY,
            c.STATUS_FALSE,
            reason,
            f"{message} (attempt {attempt}; retry in {wait:.0f}s)",
        ), max(1.0, wait)

    # ---- rollout --------------------------------------------------------------------------------------
    def monitoring_crds(self) -> bool:
        """Whether the prometheus-operator CRDs are installed (checked once, then cached)."""
        if self._monitoring_crds is None:
            self._monitoring_crds = self.kube.has_resource("monitoring.coreos.com", "v1", "servicemonitors")
        return self._monitoring_crds

    def _rollout(
        self, isvc: InferenceService, status: dict[str, Any], result: BuildResult, events: list[EventRecord]
    ) -> tuple[ConditionUpdate, int]:
        batching = batching_in_force(isvc, status)
        replicas = replicas_in_force(isvc, status)
        crds = self.monitoring_crds()
        children = plan_children(
            isvc=isvc,
            result=result,
            batching=batching,
            replicas=replicas,
            settings=self.settings.manifests,
            capabilities=ClusterCapabilities(service_monitors=crds, prometheus_rules=crds),
            select_rotation=self._rotation_selectable(isvc),
        )
        written = self._prune(isvc, children.turned_off, events)
        deployment_live: dict[str, Any] | None = None
        for obj in children.wanted:
            resource = resource_of(obj)
            live = self.kube.get(resource, isvc.namespace, obj["metadata"]["name"])
            outcome = drift.plan(obj, live)
            if outcome is drift.Outcome.CREATE:
                created = self.kube.create(obj)
                live = created if created is not None else self.kube.apply(obj)
                written += 1
            elif outcome is drift.Outcome.UPDATE:
                live = self.kube.apply(obj)
                written += 1
                events.append(
                    EventRecord(
                        "Normal",
                        "Updated",
                        f"{resource.kind} {obj['metadata']['name']} brought back to the "
                        "desired state (spec change or drift)",
                    )
                )
            if resource is DEPLOYMENTS:
                deployment_live = live
        status["replicas"] = replicas
        status["selector"] = selector_string(isvc.name)
        status["readyReplicas"] = int(((deployment_live or {}).get("status") or {}).get("readyReplicas", 0))
        status["batching"] = batching_status(batching)
        return rollout_condition(deployment_live, replicas), written

    def _prune(
        self,
        isvc: InferenceService,
        unwanted: Iterable[dict[str, Any]],
        events: list[EventRecord],
    ) -> int:
        """Delete the optional children the spec turned off, only those this service controls.

        One GET per child and spec generation: once a child is gone (or not this service's), it
        stays so until the spec changes, since only this operator creates it, and only when the
        spec turns it on.
        """
        deleted = 0
        uid, generation = str(isvc.metadata.get("uid", "")), int(isvc.metadata.get("generation", 0))
        for obj in unwanted:
            resource, name = resource_of(obj), obj["metadata"]["name"]
            key = (uid, resource.kind, name)
            if self._gone.get(key) == generation:
                continue
            live = self.kube.get(resource, isvc.namespace, name)
            if live is None or not controlled_by(live, isvc):
                self._gone[key] = generation
                continue
            if self.kube.delete(resource, isvc.namespace, name):
                deleted += 1
                events.append(
                    EventRecord(
                        "Normal",
                        c.EVENT_CHILD_REMOVED,
                        f"{resource.kind} {name} removed: the spec turned it off",
                    )
                )
        return deleted

    def _rotation_selectable(self, isvc: InferenceService) -> bool:
        """Whether spec.autoscaling.backlogRotation is on and every pod carries the label (one pod LIST)."""
        if not isvc.spec.autoscaling.backlog_rotation:
            return False
        pods = self.kube.list(PODS, isvc.namespace, label_selector=selector_string(isvc.name))
        return rotation_selectable(pods)

    # ---- status and events ----------------------------------------------------------------------------
    def _write_status(
        self, body: dict[str, Any], status: dict[str, Any], updates: list[ConditionUpdate], generation: int
    ) -> bool:
        now = iso_time(self.clock())
        new_status = dict(status)
        new_status["conditions"] = merge_conditions(
            status.get("conditions", []), updates, generation=generation, now=now
        )
        new_status["observedGeneration"] = generation
        if new_status == (body.get("status") or {}):
            return False
        meta = body["metadata"]
        self.kube.merge_patch(
            ISVC, meta["namespace"], meta["name"], {"status": new_status}, subresource="status"
        )
        return True

    def _post_events(self, body: dict[str, Any], events: list[EventRecord]) -> None:
        now = iso_time(self.clock())
        for event in events:
            self.kube.post_event(body, type_=event.type, reason=event.reason, message=event.message, now=now)
