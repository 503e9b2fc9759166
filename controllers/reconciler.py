"""Reconcile one InferenceService: validate, build and profile the engine, roll out Triton, report status.

Level-based and idempotent: every pass reads the object and its children,
computes what should exist with the pure builders (`tailpilot.manifests`),
compares (`drift.plan`) and writes only what differs. Names are deterministic
(the build Job is named by the build request's key, the profile Job by the
profile request's), so a pass interrupted at any point (operator SIGKILLed) is
completed by the next one without duplicates.

An engine goes build Job -> profile Job -> served. The profile Job measures it
in the service's own Triton on a node of its hardware (`manifests.profile_job`);
a profile that fails (or cannot be scheduled before its deadline) lets the
engine serve without one, since the autoscaler learns the service time online.
The engine being served only changes when a new engine is built and its profile
step has ended, so a bad update never takes a serving service down. When only
where it serves changes (the Triton image, the GPU count), the served engine is
profiled again in the background and keeps its old profile until then.

Every pass first makes sure the service's admin-key Secret exists (`admin_key`): the profile Job's
Triton and the serving pods read their restricted APIs' key from it, so no pod is started before it,
and none at all while a Secret of its name belongs to someone else (`ChildNameTaken`).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal, TypeVar

from kubernetes.client.exceptions import ApiException
from pydantic import ValidationError

from tailpilot.api import constants as c
from tailpilot.api.autoscaling import Observation
from tailpilot.api.engine import BuildRequest, BuildResult, ProfileRequest, ProfileSummary
from tailpilot.api.v1alpha1 import (
    BuildStatus,
    EngineCandidateStatus,
    EngineStatus,
    GpuCandidateStatus,
    GpuChoiceStatus,
    InferenceService,
    InferenceServiceStatus,
    Precision,
    PrecisionCandidateStatus,
    PrecisionChoiceStatus,
    ProfileStatus,
    ProfilingStatus,
    ServiceTimeStatus,
)
from tailpilot.api.validation import check_spec, format_problems
from tailpilot.controllers import drift
from tailpilot.controllers.admin_key import AdminKey, AdminKeyUnavailable, ensure_admin_key
from tailpilot.controllers.build_state import (
    BuildPhase,
    BuildState,
    assess_build,
    assess_profile,
    describe_profile,
    profile_notes,
)
from tailpilot.controllers.canary_rollout import (
    CANARY_REQUEUE_S,
    SERVING_PHASES,
    canary_applies,
    canary_plan,
    canary_step,
    drop_superseded_canary,
    follow_canary,
)
from tailpilot.controllers.clock import SYSTEM_CLOCK, Clock, utc_now
from tailpilot.controllers.conditions import ConditionUpdate, derive_ready, is_true, merge_conditions
from tailpilot.controllers.events import EventRecord, post_events
from tailpilot.controllers.gpu_inventory import GpuInventory
from tailpilot.controllers.gpu_products import (
    PHASE_BUILDING,
    PHASE_BUILT,
    PHASE_FAILED,
    PHASE_NO_CAPACITY,
    PHASE_PROFILED,
    PHASE_PROFILING,
    PHASE_SERVING,
    SETTLED,
    candidate_profile,
    choice_condition,
    choice_status,
    chooses_product,
    options_of,
    price_of,
    serving_product,
)
from tailpilot.controllers.job_ownership import job_not_owned
from tailpilot.controllers.kubeapi import DEPLOYMENTS, ISVC, JOBS, PODS, resource_of
from tailpilot.controllers.seams import ReconcilerKube
from tailpilot.controllers.settings import OperatorSettings
from tailpilot.controllers.status import (
    applied_spec_replicas,
    batching_in_force,
    batching_status,
    comparison_status,
    decode_status,
    engine_status,
    engines_named,
    fit_status,
    replicas_in_force,
    served_result,
    service_time_of,
    service_without_status,
    status_patch,
)
from tailpilot.manifests import build_job as job_manifests
from tailpilot.manifests import placement
from tailpilot.manifests import profile_job as profile_manifests
from tailpilot.manifests.children import ClusterCapabilities, is_canary_child, plan_children
from tailpilot.manifests.deployment import deployment_name
from tailpilot.manifests.meta import controlled_by, selector_string
from tailpilot.manifests.network_policy import engine_jobs_network_policy
from tailpilot.manifests.service import rotation_selectable
from tailpilot.manifests.spec_check import refusal_in_spec_terms, spec_check_deployment
from tailpilot.manifests.triton_access import admin_key_ref
from tailpilot.policy.from_spec import policy_config
from tailpilot.policy.gpu_choice import REASON_WAITING, MoveMemory, choose_product
from tailpilot.policy.precision_choice import REASON_WAITING as REASON_PRECISION_WAITING
from tailpilot.policy.precision_choice import PrecisionOption, choose_precision
from tailpilot.policy.regression import compare_engines

log = logging.getLogger("tailpilot.reconciler")

#: A candidate engine's record: of a GPU product, or of a precision.
Candidate = TypeVar("Candidate", bound=EngineCandidateStatus)


@dataclass(frozen=True)
class ReconcileResult:
    """What a pass did and when the next one is due (seconds)."""

    requeue_after: float
    status_written: bool = False
    children_written: int = 0
    #: The service is served and its autoscaler is on (or it asks for backlog rotation): its loop
    #: reads the pods' metrics every few seconds and runs the fast rules it asks for.
    fast_checks: bool = False
    #: A canary is being analysed: its loop runs the canary analysis every few seconds.
    canary_analysis: bool = False


@dataclass(frozen=True)
class _EngineJob:
    """An engine Job of the service as read: the Job and its labelled pods, or why it is not its own."""

    job: dict[str, Any] | None
    pods: list[dict[str, Any]]
    #: Why a Job of the name is not this service's ("" when it is, or there is none): never read or deleted.
    not_owned: str = ""

    def taken(self, what: str) -> str:
        """The words of a condition and an Event about a Job of the name that is not the service's."""
        return f"{self.not_owned}: no {what} is read from it and it is never deleted; rename or remove it"


@dataclass(frozen=True)
class _AppliedChild:
    """A child after `_apply_child`: as it now is, how many writes that took, or that its name is taken."""

    live: dict[str, Any] | None
    written: int
    #: An object this service does not control holds the child's name: left alone.
    taken: bool = False


def _api_message(error: ApiException) -> str:
    """The message of the API server's Status in a refusal, or its HTTP reason."""
    try:
        status = json.loads(error.body or "")
    except ValueError:
        status = None
    message = status.get("message") if isinstance(status, dict) else None
    return str(message) if message else f"{error.status} {error.reason}"


def _parse_time(text: str | None) -> datetime | None:
    if not text:
        return None
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def accepts_engine(annotations: Mapping[str, str], engine_key: str) -> bool:
    """Whether the accept annotation names this engine (its full key, or at least its first 12 characters)."""
    named = (annotations.get(c.ANNOTATION_ACCEPT_ENGINE) or "").strip()
    return len(named) >= 12 and engine_key.startswith(named)


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
        self,
        kube: ReconcilerKube,
        settings: OperatorSettings,
        *,
        clock: Clock = SYSTEM_CLOCK,
        inventory: GpuInventory | None = None,
    ):
        self.kube = kube
        self.settings = settings
        self.clock = clock
        #: GPU nodes and the pods on them, for services listing several products.
        self.inventory = inventory or GpuInventory(kube, clock=clock)
        self._monitoring_crds: bool | None = None
        #: Turned-off children known gone, per (service uid, kind, name): the spec generation that
        #: was checked. A pass looks one up again only after the spec changes, not on every pass.
        self._gone: dict[tuple[str, str, str], int] = {}
        #: Per service uid: the spec generation whose pod template the API server judged, and its
        #: refusal ("" when accepted).
        self._spec_judged: dict[str, tuple[int, str]] = {}

    # ---- entry point ----------------------------------------------------------------------------------
    def reconcile(self, namespace: str, name: str) -> ReconcileResult:
        """One pass over one InferenceService."""
        body = self.kube.get(ISVC, namespace, name)
        if body is None or body["metadata"].get("deletionTimestamp"):
            return ReconcileResult(requeue_after=self.settings.resync_seconds)
        status = decode_status(body.get("status"))
        generation = int(body["metadata"].get("generation", 0))
        events: list[EventRecord] = []
        admitted = self._admit(body, status, generation)
        if isinstance(admitted, ReconcileResult):
            return admitted
        isvc, admin = admitted

        chosen = self._choose_candidates(body, isvc, status, generation, events)
        if isinstance(chosen, ReconcileResult):
            return chosen
        isvc, status, gpu_condition = chosen
        request = job_manifests.make_build_request(isvc=isvc)
        request_key = request.request_key()
        status = drop_superseded_canary(status, request_key=request_key, events=events)
        gate: list[ConditionUpdate] = []
        engine_cond, requeue, status = self._engine(isvc, status, request, request_key, events, gate)
        result = served_result(status)

        if not gate and is_true(status.conditions, c.CONDITION_ROLLOUT_BLOCKED):
            # The held engine is no longer what the spec asks for (a later change replaced it).
            gate.append(
                ConditionUpdate(
                    c.CONDITION_ROLLOUT_BLOCKED,
                    c.STATUS_FALSE,
                    c.REASON_NOTHING_HELD,
                    "the spec no longer asks for the engine that was held",
                )
            )
        updates = [engine_cond, *gate, *gpu_condition]
        children_written = 0
        if result is not None:
            rollout, children_written, status = self._rollout(isvc, status, result, admin, events)
            canary = status.canary
            if (
                canary is not None
                and canary.phase == "RolledBack"
                and engine_cond.reason == c.REASON_CANARY_ANALYSIS
            ):
                # Rolled back in this very pass (its name was taken): say so now, not a pass later.
                held = canary_step(
                    isvc,
                    status,
                    canary.engine,
                    stable_replicas=replicas_in_force(isvc, status),
                    accepted=False,
                    now=utc_now(self.clock),
                )
                engine_cond = held.engine_ready or engine_cond  # a rolled-back canary's never serves
                kept = [
                    u
                    for u in updates
                    if u.type not in (c.CONDITION_ENGINE_READY, c.CONDITION_ROLLOUT_BLOCKED)
                ]
                updates = [engine_cond, held.blocked, *kept]
            move = status.gpu
            if rollout.status == c.STATUS_TRUE and move and (move.moving_to or move.replicas_after_move):
                # A move is complete: every pod runs on the new product; shrink to what it needs.
                shrink = move.replicas_after_move
                status = status.model_copy(
                    update={
                        "replicas": min(status.replicas or 1, shrink) if shrink else status.replicas,
                        "gpu": move.model_copy(update={"replicas_after_move": None, "moving_to": None}),
                    }
                )
                requeue = min(requeue, 1.0)
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
        if status.canary is not None and status.canary.phase in SERVING_PHASES:
            requeue = min(requeue, CANARY_REQUEUE_S)
        status_written = self._write_status(body, status, updates, generation)
        post_events(self.kube, body, events, now=utc_now(self.clock))
        return ReconcileResult(
            requeue_after=requeue,
            status_written=status_written,
            children_written=children_written,
            fast_checks=result is not None
            and (isvc.spec.autoscaling.enabled or isvc.spec.autoscaling.fast_checks()),
            canary_analysis=status.canary is not None and status.canary.phase == "Analysing",
        )

    # ---- validation -----------------------------------------------------------------------------------
    def _admit(
        self, body: dict[str, Any], status: InferenceServiceStatus, generation: int
    ) -> tuple[InferenceService, AdminKey] | ReconcileResult:
        """The valid service and its admin key (its Secret made sure of), or the pass's end, said."""
        try:
            isvc = service_without_status(body)
        except ValidationError as error:
            message = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in error.errors())
            return self._invalid(body, status, generation, message)
        problems = check_spec(isvc.spec, name=isvc.name)
        if problems:
            return self._invalid(body, status, generation, format_problems(problems))
        admin = ensure_admin_key(self.kube, isvc)
        if isinstance(admin, AdminKeyUnavailable):
            return self._child_unavailable(body, status, generation, admin.message)
        policy_taken = self._guard_engine_jobs(isvc)
        if policy_taken:
            return self._child_unavailable(body, status, generation, policy_taken)
        refusal = self._judged_by_api_server(isvc, admin)
        if refusal:
            return self._invalid(body, status, generation, refusal)
        return isvc, admin

    def _judged_by_api_server(self, isvc: InferenceService, admin: AdminKey) -> str:
        """Why the API server refuses the serving pods' template this spec makes; "" when it accepts.

        Asked once per spec generation, before any build (`tailpilot.manifests.spec_check`). Only a
        refusal of the object (400, 422) is the spec's; any other failure (a quota, the API server
        busy) is not judged here and is asked again next pass.
        """
        uid, generation = str(isvc.metadata.get("uid", "")), int(isvc.metadata.get("generation", 0))
        judged = self._spec_judged.get(uid)
        if judged is not None and judged[0] == generation:
            return judged[1]
        deployment = spec_check_deployment(isvc=isvc, settings=self.settings.manifests, admin_key=admin.ref)
        try:
            self.kube.dry_run_create(deployment)
            verdict = ""
        except ApiException as error:
            if error.status not in (400, 422):
                log.warning(
                    "%s/%s: the dry run of its template failed: %s", isvc.namespace, isvc.name, error.status
                )
                return ""
            verdict = refusal_in_spec_terms(_api_message(error))
        self._spec_judged[uid] = (generation, verdict)
        return verdict

    def _guard_engine_jobs(self, isvc: InferenceService) -> str:
        """Make sure of the NetworkPolicy over the service's Job pods before any Job; "" when done.

        Created (or brought back) before a build or profile Job can start, so none of their pods
        runs without it; deleted when the operator runs without NetworkPolicies. Returns the words of
        a condition when an object this service does not control holds the policy's name: then no
        Job starts, as no pod starts on a key someone else chose.
        """
        policy = engine_jobs_network_policy(isvc=isvc)
        if self.settings.manifests.network_policy is None:
            self._prune(isvc, [policy], [], why="the operator runs without NetworkPolicies")
            return ""
        events: list[EventRecord] = []  # a policy brought back is not told: the pass's own Events are
        if self._apply_child(isvc, policy, events).taken:
            return (
                f"NetworkPolicy {policy['metadata']['name']} exists and is not controlled by this "
                "InferenceService; it is left alone and no build or profile Job starts without the "
                "service's own policy: rename or remove it"
            )
        return ""

    def _invalid(
        self, body: dict[str, Any], status: InferenceServiceStatus, generation: int, message: str
    ) -> ReconcileResult:
        updates = [ConditionUpdate(c.CONDITION_READY, c.STATUS_FALSE, c.REASON_INVALID_SPEC, message)]
        written = self._write_status(body, status, updates, generation)
        if written:
            post_events(
                self.kube,
                body,
                [EventRecord("Warning", c.REASON_INVALID_SPEC, message)],
                now=utc_now(self.clock),
            )
        return ReconcileResult(requeue_after=self.settings.resync_seconds, status_written=written)

    def _child_unavailable(
        self, body: dict[str, Any], status: InferenceServiceStatus, generation: int, message: str
    ) -> ReconcileResult:
        """Stop the pass: without the service's own admin key, or its Jobs' NetworkPolicy, no pod may start.

        A pod would not start, or would start on a key someone else chose, or unguarded. What serves
        keeps serving as it is; the condition says why nothing moves.
        """
        updates = [
            ConditionUpdate(c.CONDITION_ROLLOUT_READY, c.STATUS_FALSE, c.REASON_CHILD_NAME_TAKEN, message),
            ConditionUpdate(c.CONDITION_READY, c.STATUS_FALSE, c.REASON_CHILD_NAME_TAKEN, message),
        ]
        written = self._write_status(body, status, updates, generation)
        if written:  # once, not every pass while it lasts
            post_events(
                self.kube,
                body,
                [EventRecord("Warning", c.REASON_CHILD_NAME_TAKEN, message)],
                now=utc_now(self.clock),
            )
        return ReconcileResult(requeue_after=30.0, status_written=written)

    # ---- engine ---------------------------------------------------------------------------------------
    def _engine(
        self,
        isvc: InferenceService,
        status: InferenceServiceStatus,
        request: BuildRequest,
        request_key: str,
        events: list[EventRecord],
        gate: list[ConditionUpdate],
    ) -> tuple[ConditionUpdate, float, InferenceServiceStatus]:
        """EngineReady, the next pass's delay and the status with the build's progress.

        The regression gate's RolloutBlocked condition, when a new engine was compared, goes to `gate`.
        """
        engine = status.engine
        if engine is not None and engine.request_key == request_key:
            reason = c.REASON_ENGINE_CACHED if engine.cache_hit else c.REASON_ENGINE_BUILT
            status, requeue = self._profile_served_again(isvc, status, engine, events)
            return (
                ConditionUpdate(
                    c.CONDITION_ENGINE_READY,
                    c.STATUS_TRUE,
                    reason,
                    f"engine {engine.key[:12]} built for {request.target}",
                ),
                requeue,
                status,
            )
        job_name = job_manifests.build_job_name(isvc_name=isvc.name, request_key=request_key)
        engine_job = self._engine_job(isvc, job_name)
        build = status.build
        if build is None or build.request_key != request_key:
            build = BuildStatus(request_key=request_key, attempt=1)
        build = build.model_copy(update={"job_name": job_name})
        if engine_job.not_owned:
            return self._build_job_taken(status, build, engine_job.taken("build result"), events)
        state = assess_build(engine_job.job, engine_job.pods)

        if state.phase is BuildPhase.ABSENT:
            self._create_build_job(isvc, request, build.attempt, events)
            build = build.model_copy(update={"phase": "Running", "reason": "", "message": ""})
            return (
                ConditionUpdate(
                    c.CONDITION_ENGINE_READY,
                    c.STATUS_FALSE,
                    c.REASON_ENGINE_BUILDING,
                    f"build Job {job_name} started (attempt {build.attempt})",
                ),
                10.0,
                status.model_copy(update={"build": build}),
            )
        if state.phase is BuildPhase.RUNNING:
            return self._engine_running(status, state, build, events)
        if state.phase is BuildPhase.SUCCEEDED and state.result is not None:
            return self._engine_built(isvc, status, state, request_key, build, events, gate)
        return self._engine_failed(isvc, status, state, build, events)

    def _engine_job(self, isvc: InferenceService, job_name: str) -> _EngineJob:
        """The engine Job of that name and the pods its label lists, if the Job is the service's.

        A Job of the name the service does not own is neither listed further nor assessed: its pods
        could say anything. `build_state` then reads only the pods the Job itself controls.
        """
        job = self.kube.get(JOBS, isvc.namespace, job_name)
        if job is None:
            return _EngineJob(None, [])
        not_owned = job_not_owned(job, isvc)
        if not_owned:
            return _EngineJob(None, [], not_owned)
        return _EngineJob(job, self.kube.list(PODS, isvc.namespace, label_selector=f"job-name={job_name}"))

    def _build_job_taken(
        self,
        status: InferenceServiceStatus,
        build: BuildStatus,
        message: str,
        events: list[EventRecord],
    ) -> tuple[ConditionUpdate, float, InferenceServiceStatus]:
        """EngineReady False while a Job the service does not own holds its build Job's name.

        Nothing is built meanwhile (the name is the build's, by its request key); the engine serving
        keeps serving. Told once, then checked again each pass until the Job is renamed or removed.
        """
        if (build.reason, build.message) != (c.REASON_CHILD_NAME_TAKEN, message):
            events.append(EventRecord("Warning", c.REASON_CHILD_NAME_TAKEN, message))
        taken = build.model_copy(
            update={"phase": "Failed", "reason": c.REASON_CHILD_NAME_TAKEN, "message": message}
        )
        return (
            ConditionUpdate(c.CONDITION_ENGINE_READY, c.STATUS_FALSE, c.REASON_CHILD_NAME_TAKEN, message),
            30.0,
            status.model_copy(update={"build": taken}),
        )

    def _engine_running(
        self,
        status: InferenceServiceStatus,
        state: BuildState,
        build: BuildStatus,
        events: list[EventRecord],
    ) -> tuple[ConditionUpdate, float, InferenceServiceStatus]:
        job_name = build.job_name
        running = build.model_copy(
            update={"phase": "Running", "reason": state.reason, "message": state.message}
        )
        detail = f"build Job {job_name} running" + (f" on {state.node}" if state.node else "")
        if state.failed_pods:
            if (build.reason, build.failed_pods) != (state.reason, state.failed_pods):
                events.append(
                    EventRecord(
                        "Warning",
                        state.reason or c.REASON_ENGINE_BUILD_FAILED,
                        f"build pod of {job_name} failed: {state.message}; retrying",
                    )
                )
            running = running.model_copy(update={"failed_pods": state.failed_pods})
            # The Job retries the pod with its own back-off; say why the last attempt failed.
            condition = ConditionUpdate(
                c.CONDITION_ENGINE_READY,
                c.STATUS_FALSE,
                state.reason or c.REASON_ENGINE_BUILD_FAILED,
                f"{state.message} ({state.failed_pods} failed build pod(s); {detail}, retrying)",
            )
        elif state.waiting:  # e.g. no node has the GPU, or the model's PVC does not exist
            condition = ConditionUpdate(
                c.CONDITION_ENGINE_READY,
                c.STATUS_FALSE,
                c.REASON_ENGINE_BUILD_PENDING,
                f"build Job {job_name}: {state.waiting}",
            )
        else:
            condition = ConditionUpdate(
                c.CONDITION_ENGINE_READY, c.STATUS_FALSE, c.REASON_ENGINE_BUILDING, detail
            )
        return condition, 30.0, status.model_copy(update={"build": running})

    def _with_pod_labels(self, job: dict[str, Any]) -> dict[str, Any]:
        """An engine Job (build or profile) with the operator's extra pod labels on its pod template."""
        template_meta = job["spec"]["template"].setdefault("metadata", {})
        template_meta["labels"] = {**template_meta.get("labels", {}), **self.settings.build_pod_labels}
        return job

    def _create_build_job(
        self, isvc: InferenceService, request: BuildRequest, attempt: int, events: list[EventRecord]
    ) -> None:
        # The store is the namespace's: its GC keeps every engine a service there names. One LIST
        # per build Job created (rare), not per pass.
        in_use = engines_named(o.get("status") for o in self.kube.list(ISVC, isvc.namespace))
        job = self._with_pod_labels(
            job_manifests.build_job(
                isvc=isvc, request=request, settings=self.settings.manifests, engines_in_use=in_use
            )
        )
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
        status: InferenceServiceStatus,
        state: BuildState,
        request_key: str,
        build: BuildStatus,
        events: list[EventRecord],
        gate: list[ConditionUpdate],
    ) -> tuple[ConditionUpdate, float, InferenceServiceStatus]:
        """A built engine is profiled where it serves, passes the regression gate, then serves."""
        result = state.result
        if result is None:  # assess_build reports SUCCEEDED only with a result
            raise ValueError("a succeeded build without a result")
        built = engine_status(result, request_key=request_key, built_at=_parse_time(state.finished_at))
        status = status.model_copy(
            update={"build": build.model_copy(update={"phase": "Succeeded", "reason": "", "message": ""})}
        )
        served = status.engine
        if served is not None and served.key == built.key:
            # The engine serving, under a new build request (a field outside the engine key changed,
            # or an operator upgrade added one): nothing new to measure or to gate; its profile stays.
            return (
                ConditionUpdate(
                    c.CONDITION_ENGINE_READY,
                    c.STATUS_TRUE,
                    c.REASON_ENGINE_CACHED,
                    f"engine {built.key[:12]} built for {isvc.spec.runtime.device.value}",
                ),
                self.settings.resync_seconds,
                status.model_copy(update={"engine": built.model_copy(update={"built_at": served.built_at})}),
            )
        if not isvc.spec.engine.profile:
            status = status.model_copy(update={"profiling": None})
            return self._serve_or_canary(isvc, status, built, None, events, gate)
        request = self._profile_request(isvc, built)
        profiling, summary, done = self._profile_step(isvc, status.profiling, request, events)
        status = status.model_copy(update={"profiling": profiling})
        if not done:
            if profiling.reason == c.REASON_CHILD_NAME_TAKEN:
                # Waiting on a Job of the profile's name that is not the service's: said as such.
                return (
                    ConditionUpdate(
                        c.CONDITION_ENGINE_READY,
                        c.STATUS_FALSE,
                        c.REASON_CHILD_NAME_TAKEN,
                        f"engine {built.key[:12]} built; {profiling.message}",
                    ),
                    30.0,
                    status,
                )
            detail = f"profile Job {profiling.job_name} measuring it on {request.hardware}"
            if profiling.message:
                detail += f": {profiling.message}"
            return (
                ConditionUpdate(
                    c.CONDITION_ENGINE_READY,
                    c.STATUS_FALSE,
                    c.REASON_ENGINE_PROFILING,
                    f"engine {built.key[:12]} built; {detail}",
                ),
                10.0,
                status,
            )
        held, status = self._regression_gate(isvc, status, built, summary, events, gate)
        if held is not None:
            return held, self.settings.resync_seconds, status
        return self._serve_or_canary(isvc, status, built, summary, events, gate)

    def _serve_or_canary(
        self,
        isvc: InferenceService,
        status: InferenceServiceStatus,
        built: EngineStatus,
        summary: ProfileSummary | None,
        events: list[EventRecord],
        gate: list[ConditionUpdate],
    ) -> tuple[ConditionUpdate, float, InferenceServiceStatus]:
        """Serve a new engine that passed the gate, or, with strategy canary, first its canary's verdict."""
        if not canary_applies(isvc, status, built, summary):
            return self._serve(isvc, status, built, summary, events)
        step = canary_step(
            isvc,
            status,
            built,
            stable_replicas=replicas_in_force(isvc, status),
            accepted=accepts_engine(isvc.metadata.get("annotations") or {}, built.key),
            now=utc_now(self.clock),
        )
        events.extend(step.events)
        # The canary's verdict is what holds the engine or not, beside the gate's (it passed).
        gate[:] = [step.blocked]
        if step.engine_ready is not None:
            held = step.status.canary is not None and step.status.canary.phase == "RolledBack"
            return step.engine_ready, self.settings.resync_seconds if held else CANARY_REQUEUE_S, step.status
        return self._serve(isvc, step.status, built, summary, events)

    def _regression_gate(
        self,
        isvc: InferenceService,
        status: InferenceServiceStatus,
        built: EngineStatus,
        summary: ProfileSummary | None,
        events: list[EventRecord],
        gate: list[ConditionUpdate],
    ) -> tuple[ConditionUpdate | None, InferenceServiceStatus]:
        """Hold a new engine that predicts worse than the serving one; (EngineReady if held, status)."""
        serving, old = status.engine, status.profile
        # (The engine serving itself never gets here: _engine_built keeps it as is.)
        if (
            serving is not None
            and old is not None
            and summary is not None
            and old.hardware != summary.hardware
        ):
            gate.append(
                ConditionUpdate(
                    c.CONDITION_ROLLOUT_BLOCKED,
                    c.STATUS_FALSE,
                    c.REASON_NOTHING_HELD,
                    f"a move from {old.hardware} to {summary.hardware}: products are compared by the cost "
                    "of holding the SLO (status.gpu), not engine against engine",
                )
            )
            return None, status
        if serving is None or old is None or summary is None:
            gate.append(
                ConditionUpdate(
                    c.CONDITION_ROLLOUT_BLOCKED,
                    c.STATUS_FALSE,
                    c.REASON_NOTHING_HELD,
                    "nothing to compare the new engine with (no serving engine with a profile, or no "
                    "profile of the new one)",
                )
            )
            return None, status
        batching = batching_in_force(isvc, status)
        replicas = replicas_in_force(isvc, status)
        comparison = compare_engines(
            serving=service_time_of(old),
            serving_max_batch=batching.max_batch_size,
            candidate=summary.service_time,
            candidate_max_batch=isvc.spec.batching.max_batch_size,
            batching=batching,
            rate_per_s=(status.observed.request_rate if status.observed else None) or 0.0,
            replicas=replicas,
        )
        budget = isvc.spec.rollout.max_latency_regression_percent
        accepted = accepts_engine(isvc.metadata.get("annotations") or {}, built.key)
        verdict: Literal["Promoted", "Blocked", "Accepted"] = (
            "Promoted" if comparison.regression_percent <= budget else "Accepted" if accepted else "Blocked"
        )
        previous = status.engine_comparison
        first_time = previous is None or (previous.candidate_engine_key, previous.verdict) != (
            built.key,
            verdict,
        )
        status = status.model_copy(
            update={"engine_comparison": comparison_status(comparison, serving.key, built.key, verdict)}
        )
        figures = f"engine {built.key[:12]} against serving {serving.key[:12]} {comparison.describe()}"
        if verdict == "Blocked":
            message = (
                f"held: {figures}; worse by more than "
                f"spec.rollout.maxLatencyRegressionPercent ({budget:g}%). "
                f"The serving engine keeps serving; to serve the new one anyway, annotate the service "
                f"{c.ANNOTATION_ACCEPT_ENGINE}={built.key[:12]}"
            )
            gate.append(
                ConditionUpdate(
                    c.CONDITION_ROLLOUT_BLOCKED, c.STATUS_TRUE, c.REASON_LATENCY_REGRESSION, message
                )
            )
            if first_time:
                events.append(EventRecord("Warning", c.REASON_LATENCY_REGRESSION, message))
            return (
                ConditionUpdate(
                    c.CONDITION_ENGINE_READY, c.STATUS_FALSE, c.REASON_LATENCY_REGRESSION, message
                ),
                status,
            )
        reason = c.REASON_REGRESSION_ACCEPTED if verdict == "Accepted" else c.REASON_WITHIN_REGRESSION_BUDGET
        gate.append(ConditionUpdate(c.CONDITION_ROLLOUT_BLOCKED, c.STATUS_FALSE, reason, figures))
        if first_time:
            events.append(
                EventRecord(
                    "Warning" if verdict == "Accepted" else "Normal",
                    reason,
                    f"{figures}"
                    + (f"; accepted by {c.ANNOTATION_ACCEPT_ENGINE}" if verdict == "Accepted" else ""),
                )
            )
        return None, status

    def _serve(
        self,
        isvc: InferenceService,
        status: InferenceServiceStatus,
        built: EngineStatus,
        summary: ProfileSummary | None,
        events: list[EventRecord],
    ) -> tuple[ConditionUpdate, float, InferenceServiceStatus]:
        """Make the built engine the served one, with its profile (or none)."""
        key = status.profiling.profile_key if status.profiling else ""
        # The profile is the new engine's or none: another engine's would seed the autoscaler
        # with the wrong service time (without one, it learns the service time online).
        profile = ProfileStatus.from_summary(summary, key=key) if summary else None
        update: dict[str, Any] = {"engine": built, "profile": profile}
        reason = c.REASON_ENGINE_CACHED if built.cache_hit else c.REASON_ENGINE_BUILT
        note, warning = profile_notes(
            summary, serving_cpu_limit_millis=job_manifests.serving_cpu_limit_millis(isvc)
        )
        if summary is None:
            note = "served without a profile: the autoscaler learns its service time online"
        events.append(
            EventRecord(
                "Normal",
                reason,
                f"engine {built.key[:12]} ready at {built.artifact}" + (f"; {note}" if note else ""),
            )
        )
        if warning:
            events.append(EventRecord("Warning", c.EVENT_PROFILE_CPU_LIMIT_MISMATCH, warning))
        return (
            ConditionUpdate(
                c.CONDITION_ENGINE_READY,
                c.STATUS_TRUE,
                reason,
                f"engine {built.key[:12]} built for {isvc.spec.runtime.device.value}",
            ),
            self.settings.resync_seconds,
            status.model_copy(update=update),
        )

    # ---- candidate engines ----------------------------------------------------------------------------
    def _choose_candidates(
        self,
        body: dict[str, Any],
        isvc: InferenceService,
        status: InferenceServiceStatus,
        generation: int,
        events: list[EventRecord],
    ) -> tuple[InferenceService, InferenceServiceStatus, list[ConditionUpdate]] | ReconcileResult:
        """Pin the service to the GPU product and the precision chosen among its candidates.

        Returns the pinned service, the status and the GpuProductChosen condition; or, while a
        choice waits for its candidates, the pass's result (the children left as they are).
        """
        gpu_condition: list[ConditionUpdate] = []
        if chooses_product(isvc):
            status, placed = self._gpu_candidates(isvc, status, events)
            gpu_condition = [u for u in (choice_condition(status.gpu),) if u is not None]
            if placed is None:
                message = status.gpu.message if status.gpu else ""
                return self._choosing(
                    body, status, generation, events, gpu_condition, c.REASON_CHOOSING_GPU_PRODUCT, message
                )
            # From here on the service is what its pods run: one product.
            isvc = isvc.on_product(placed)
        elif status.gpu is not None:
            # The spec names one product again: the choice and its condition no longer apply.
            conditions = [x for x in status.conditions if x.type != c.CONDITION_GPU_PRODUCT_CHOSEN]
            status = status.model_copy(update={"gpu": None, "conditions": conditions})
        if isvc.spec.engine.precision is Precision.AUTO:
            status, precision = self._precision_candidates(isvc, status, events)
            if precision is None:
                message = status.precision.message if status.precision else ""
                return self._choosing(
                    body, status, generation, events, gpu_condition, c.REASON_CHOOSING_PRECISION, message
                )
            isvc = isvc.with_precision(precision)
        elif status.precision is not None:
            status = status.model_copy(update={"precision": None})
        return isvc, status, gpu_condition

    # ---- GPU products ---------------------------------------------------------------------------------
    def _gpu_candidates(
        self, isvc: InferenceService, status: InferenceServiceStatus, events: list[EventRecord]
    ) -> tuple[InferenceServiceStatus, str | None]:
        """Build and profile each allowed product's engine; place the service once all are known.

        Returns the status with `status.gpu` and the product serving (None: not placed yet). Engines
        are built for every product up front, in parallel: a move then only waits for pods, and a
        TensorRT plan runs only on the product it was built for. A product none of whose nodes has
        a free GPU gets nothing built (NoCapacity) until one has.
        """
        gpu = isvc.spec.runtime.gpu
        if gpu is None:  # chooses_product checked it
            raise ValueError("a GPU product choice without spec.runtime.gpu")
        previous = status.gpu
        earlier = {x.product: x for x in (previous.candidates if previous else [])}
        placed = serving_product(isvc, status)
        tolerations = placement.tolerations(gpu=True, user=isvc.spec.runtime.tolerations)
        candidates: list[GpuCandidateStatus] = []
        for product in gpu.allowed_products():
            available = self.inventory.replicas_available(
                product=product,
                gpus_per_replica=gpu.count,
                tolerations=tolerations,
                service=(isvc.namespace, isvc.name),
            )
            if product == placed:
                candidate = self._serving_candidate(product, status, earlier.get(product))
            else:
                candidate = self._candidate(
                    isvc.on_product(product),
                    earlier.get(product),
                    GpuCandidateStatus(product=product),
                    available,
                    events,
                )
            candidates.append(
                candidate.model_copy(
                    update={
                        "price_per_hour": price_of(isvc, product, self.settings.gpu_prices),
                        "replicas_available": available,
                    }
                )
            )
        if placed is not None:
            kept = (previous or GpuChoiceStatus()).model_copy(update={"candidates": candidates})
            return status.model_copy(update={"gpu": kept}), placed
        if not all(x.phase in SETTLED for x in candidates):
            pending = ", ".join(
                f"{x.product} {x.phase.lower()}" for x in candidates if x.phase not in SETTLED
            )
            waiting = (previous or GpuChoiceStatus()).model_copy(
                update={
                    "product": None,
                    "reason": REASON_WAITING,
                    "message": f"placed once every product's engine is profiled ({pending})",
                    "candidates": candidates,
                }
            )
            return status.model_copy(update={"gpu": waiting}), None
        config = policy_config(isvc.spec, control_period_s=self.settings.control_period_seconds)
        replicas, now_s = replicas_in_force(isvc, status), self.clock.time()
        choice = choose_product(
            options_of(isvc, candidates),
            current=None,
            config=config,
            observation=Observation(
                at_s=now_s,
                request_rate=(status.observed.request_rate if status.observed else None) or 0.0,
                p99_ms=None,
            ),
            batching=batching_in_force(isvc, status),
            replicas_now=replicas,
            startup_s=config.replica_startup_s,
            now_s=now_s,
            memory=MoveMemory(),
        )
        chosen = choice_status(
            previous,
            choice,
            candidates,
            now=utc_now(self.clock),
            replicas_now=replicas,
        )
        if choice.product is not None:
            events.append(
                EventRecord("Normal", choice.reason, f"placed on {choice.product}: {choice.message}")
            )
        elif previous is None or previous.reason != choice.reason:
            events.append(EventRecord("Warning", choice.reason, choice.message))
        return status.model_copy(update={"gpu": chosen}), choice.product

    def _precision_candidates(
        self, isvc: InferenceService, status: InferenceServiceStatus, events: list[EventRecord]
    ) -> tuple[InferenceServiceStatus, Precision | None]:
        """`precision: auto`: build and profile every candidate precision, then choose one (once).

        The precision chosen stays while its build request is the spec's; a spec change builds
        every candidate again and chooses again once all are settled, the old engine serving
        meanwhile. Returns the status with `status.precision` and the precision to serve (None: not
        chosen yet, or none can serve).
        """
        previous = status.precision
        earlier = {x.precision: x for x in (previous.candidates if previous else [])}
        chosen = previous.precision if previous else None
        candidates: list[PrecisionCandidateStatus] = []
        serving: Precision | None = None
        precisions = [p.value for p in isvc.spec.candidate_precisions()]
        for index, precision in enumerate(isvc.spec.candidate_precisions()):
            later = precisions[index + 1 :]
            pinned = isvc.with_precision(precision)
            request_key = job_manifests.make_build_request(isvc=pinned).request_key()
            known = earlier.get(precision.value)
            if precision.value == chosen and known is not None and known.request_key == request_key:
                serving = precision
                candidates.append(known.model_copy(update={"phase": PHASE_SERVING}))
                continue
            fresh = PrecisionCandidateStatus(precision=precision.value)
            busy = next(
                (
                    other.precision
                    for other in (*candidates, *(earlier[q] for q in later if q in earlier))
                    if other.precision != precision.value and other.phase in (PHASE_BUILDING, PHASE_PROFILING)
                ),
                None,
            )
            candidate = self._candidate(pinned, known, fresh, None, events, wait_for=busy)
            if candidate.phase == PHASE_SERVING:
                candidate = candidate.model_copy(update={"phase": PHASE_PROFILED})
            candidates.append(candidate)
        base = previous or PrecisionChoiceStatus()
        if serving is not None:
            kept = base.model_copy(update={"candidates": candidates})
            return status.model_copy(update={"precision": kept}), serving
        config = policy_config(isvc.spec, control_period_s=self.settings.control_period_seconds)
        max_batch = isvc.spec.batching.max_batch_size
        choice = choose_precision(
            tuple(
                PrecisionOption(
                    precision=x.precision,
                    profile=candidate_profile(x, name=x.precision, max_batch_size=max_batch),
                    unusable=x.message or x.phase if x.phase in (PHASE_FAILED, PHASE_NO_CAPACITY) else "",
                )
                for x in candidates
            ),
            config=config,
            rate_per_s=(status.observed.request_rate if status.observed else None) or 0.0,
            batching=batching_in_force(isvc, status),
        )
        figures = {f.precision: f for f in choice.figures}
        candidates = [
            x.model_copy(
                update={
                    "replicas_needed": figures[x.precision].replicas,
                    "capacity_per_replica_per_s": figures[x.precision].capacity_per_replica_per_s,
                    "phase": PHASE_SERVING if x.precision == choice.precision else x.phase,
                }
            )
            for x in candidates
        ]
        decided = base.model_copy(
            update={
                "precision": choice.precision,
                "reason": choice.reason,
                "message": choice.message[:4096],
                "candidates": candidates,
            }
        )
        if choice.precision is not None:
            events.append(EventRecord("Normal", choice.reason, f"serving precision {choice.message}"))
        elif choice.reason not in (base.reason, REASON_PRECISION_WAITING):
            events.append(EventRecord("Warning", choice.reason, choice.message))
        status = status.model_copy(update={"precision": decided})
        return status, Precision(choice.precision) if choice.precision else None

    def _serving_candidate(
        self, product: str, status: InferenceServiceStatus, earlier: GpuCandidateStatus | None
    ) -> GpuCandidateStatus:
        """The product serving, from the engine and profile it serves with (once they are its own)."""
        base = earlier or GpuCandidateStatus(product=product)
        engine, profile = status.engine, status.profile
        if engine is None or profile is None or profile.hardware != product:
            return base.model_copy(update={"phase": PHASE_SERVING})
        return base.model_copy(
            update={
                "phase": PHASE_SERVING,
                "message": "",
                "engine_key": engine.key,
                "request_key": engine.request_key,
                "profile_key": profile.key,
                "service_time": profile.service_time,
                "max_batch_size": max((p.batch_size for p in profile.points), default=None),
            }
        )

    def _candidate(
        self,
        isvc: InferenceService,
        earlier: Candidate | None,
        fresh: Candidate,
        available: int | None,
        events: list[EventRecord],
        wait_for: str | None = None,
    ) -> Candidate:
        """Build, then profile, a candidate engine not serving (`isvc` pinned to its product or precision).

        `fresh` is the candidate's record before anything is known; `available` the replicas its
        product's nodes can hold (None: not known, or not a GPU product candidate). `wait_for`: another
        candidate is being built or profiled on the same hardware; this one's profile Job is not
        started until it is done (two measurements on one node's CPU would skew each other).
        """
        request = job_manifests.make_build_request(isvc=isvc)
        request_key = request.request_key()
        product = request.target
        base = (
            earlier
            if earlier is not None and earlier.request_key == request_key
            else fresh.model_copy(update={"request_key": request_key})
        )
        if base.phase == PHASE_SERVING:  # it served until a move away: its profile still holds
            base = base.model_copy(update={"phase": PHASE_PROFILED if base.service_time else ""})
        if base.phase in (PHASE_PROFILED, PHASE_FAILED):
            return base
        job_name = job_manifests.build_job_name(isvc_name=isvc.name, request_key=request_key)
        engine_job = self._engine_job(isvc, job_name)
        if engine_job.not_owned:
            message = engine_job.taken("build result")
            if base.message != message:  # told once
                events.append(EventRecord("Warning", c.REASON_CHILD_NAME_TAKEN, message))
            return base.model_copy(update={"phase": PHASE_BUILDING, "message": message})
        if engine_job.job is None and available == 0:
            return base.model_copy(
                update={"phase": PHASE_NO_CAPACITY, "message": f"no node of {product} has a free GPU"}
            )
        state = assess_build(engine_job.job, engine_job.pods)
        if state.phase is BuildPhase.ABSENT:
            self._create_build_job(isvc, request, 1, events)
            return base.model_copy(update={"phase": PHASE_BUILDING, "message": f"build Job {job_name}"})
        if state.phase is BuildPhase.RUNNING:
            detail = state.waiting or state.message or "running"
            return base.model_copy(
                update={"phase": PHASE_BUILDING, "message": f"build Job {job_name}: {detail}"}
            )
        if state.phase is not BuildPhase.SUCCEEDED or state.result is None:
            return base.model_copy(
                update={"phase": PHASE_FAILED, "message": f"build failed: {state.message or state.reason}"}
            )
        built = engine_status(state.result, request_key=request_key, built_at=None)
        if isinstance(base, PrecisionCandidateStatus):
            base = base.model_copy(update={"accuracy": built.accuracy})
        if not isvc.spec.engine.profile:
            return base.model_copy(
                update={
                    "phase": PHASE_FAILED,
                    "engine_key": built.key,
                    "message": "spec.engine.profile is false: nothing to compare the products with",
                }
            )
        return self._profile_candidate(isvc, base, built, events, wait_for)

    def _profile_candidate(
        self,
        isvc: InferenceService,
        base: Candidate,
        built: EngineStatus,
        events: list[EventRecord],
        wait_for: str | None,
    ) -> Candidate:
        """The profile half of `_candidate`: run (or wait to run) the built engine's profile Job."""
        profile_request = self._profile_request(isvc, built)
        profile_key = profile_request.profile_key()
        base = base.model_copy(update={"engine_key": built.key, "profile_key": profile_key})
        if wait_for is not None:
            job_name = profile_manifests.profile_job_name(isvc_name=isvc.name, profile_key=profile_key)
            if self.kube.get(JOBS, isvc.namespace, job_name) is None:
                # Profiles that would share a node run one at a time: each measures alone.
                return base.model_copy(update={"phase": PHASE_BUILT, "message": f"profiled after {wait_for}"})
        earlier_step = ProfilingStatus(
            profile_key=profile_key,
            engine_key=built.key,
            phase="Running" if base.phase == PHASE_PROFILING else "",
        )
        # The candidate's record keeps no profile step of its own: an Event the step found new is
        # new only when the record's message changes.
        step_events: list[EventRecord] = []
        profiling, summary, done = self._profile_step(isvc, earlier_step, profile_request, step_events)
        if not done:
            said = f": {profiling.message}" if profiling.message else ""
            message = f"profile Job {profiling.job_name}{said}"
            if profiling.reason != c.REASON_CHILD_NAME_TAKEN or base.message != message:
                events.extend(step_events)
            return base.model_copy(update={"phase": PHASE_PROFILING, "message": message})
        events.extend(step_events)
        if summary is None:
            return base.model_copy(
                update={
                    "phase": PHASE_FAILED,
                    "message": f"profile failed: {profiling.reason}: {profiling.message}",
                }
            )
        return base.model_copy(
            update={
                "phase": PHASE_PROFILED,
                "message": "",
                "service_time": ServiceTimeStatus.model_validate(
                    summary.service_time.model_dump(by_alias=True)
                ),
                "max_batch_size": max((p.batch_size for p in summary.points), default=None),
            }
        )

    def _choosing(
        self,
        body: dict[str, Any],
        status: InferenceServiceStatus,
        generation: int,
        events: list[EventRecord],
        gpu_condition: list[ConditionUpdate],
        reason: str,
        message: str,
    ) -> ReconcileResult:
        """Candidates still being built or profiled: say what is awaited.

        The children are left as they are, so an engine chosen earlier keeps serving until the new
        choice is made.
        """
        engine = ConditionUpdate(c.CONDITION_ENGINE_READY, c.STATUS_FALSE, reason, message)
        rollout = ConditionUpdate(
            c.CONDITION_ROLLOUT_READY,
            c.STATUS_FALSE,
            c.REASON_WAITING_FOR_ENGINE,
            "waiting for the choice among the candidate engines",
        )
        updates = [
            engine,
            rollout,
            *gpu_condition,
            derive_ready(engine=engine, rollout=rollout, serving_engine=served_result(status) is not None),
        ]
        written = self._write_status(body, status, updates, generation)
        post_events(self.kube, body, events, now=utc_now(self.clock))
        return ReconcileResult(requeue_after=10.0, status_written=written)

    # ---- profile --------------------------------------------------------------------------------------
    def _profile_request(self, isvc: InferenceService, engine: EngineStatus) -> ProfileRequest:
        return profile_manifests.make_profile_request(
            isvc=isvc,
            engine_key=engine.key,
            triton_backend=engine.triton_backend,
            settings=self.settings.manifests,
        )

    def _profile_step(
        self,
        isvc: InferenceService,
        previous: ProfilingStatus | None,
        request: ProfileRequest,
        events: list[EventRecord],
    ) -> tuple[ProfilingStatus, ProfileSummary | None, bool]:
        """Run (or follow) the profile Job of `request`: its status, the profile, whether it ended.

        `previous`: what the last pass recorded of this step (its phase decides which Events are new).
        """
        key = request.profile_key()
        job_name = profile_manifests.profile_job_name(isvc_name=isvc.name, profile_key=key)
        profiling = (
            previous.model_copy(update={"job_name": job_name})
            if previous is not None and previous.profile_key == key
            else ProfilingStatus(profile_key=key, engine_key=request.engine_key, job_name=job_name)
        )
        engine_job = self._engine_job(isvc, job_name)
        if engine_job.not_owned:
            # Not measured while it lasts: the engine waits, as for a profile Job still running.
            message = engine_job.taken("profile")
            if (profiling.reason, profiling.message) != (c.REASON_CHILD_NAME_TAKEN, message):
                events.append(EventRecord("Warning", c.REASON_CHILD_NAME_TAKEN, message))
            taken = profiling.model_copy(
                update={"phase": "Running", "reason": c.REASON_CHILD_NAME_TAKEN, "message": message}
            )
            return taken, None, False
        state = assess_profile(engine_job.job, engine_job.pods)
        if state.phase is BuildPhase.ABSENT:
            self._create_profile_job(isvc, request, events)
            return profiling.model_copy(update={"phase": "Running", "reason": "", "message": ""}), None, False
        if state.phase is BuildPhase.RUNNING:
            message = state.waiting or (
                f"{state.message} ({state.failed_pods} failed profile pod(s), retrying)"
                if state.failed_pods
                else ""
            )
            return (
                profiling.model_copy(update={"phase": "Running", "reason": state.reason, "message": message}),
                None,
                False,
            )
        result = state.result
        if state.phase is BuildPhase.SUCCEEDED and result is not None and result.profile is not None:
            if profiling.phase != "Succeeded":
                source = "from the store" if result.cache_hit else f"in Job {job_name}"
                events.append(
                    EventRecord(
                        "Normal",
                        c.EVENT_ENGINE_PROFILED,
                        f"engine {request.engine_key[:12]} profiled {source} on {request.hardware} "
                        f"with {request.triton_image}: {describe_profile(result.profile)}",
                    )
                )
            return (
                profiling.model_copy(update={"phase": "Succeeded", "reason": "", "message": ""}),
                result.profile,
                True,
            )
        reason = state.reason or c.EVENT_PROFILE_FAILED
        message = state.message or "the profile Job failed"
        if profiling.phase != "Failed":
            events.append(
                EventRecord(
                    "Warning",
                    c.EVENT_PROFILE_FAILED,
                    f"profile Job {job_name} failed ({reason}: {message}); the engine serves without "
                    "this profile and the autoscaler learns its service time online",
                )
            )
        return (
            profiling.model_copy(update={"phase": "Failed", "reason": reason, "message": message}),
            None,
            True,
        )

    def _create_profile_job(
        self, isvc: InferenceService, request: ProfileRequest, events: list[EventRecord]
    ) -> None:
        # The pass made sure the Secret exists before getting here (`ensure_admin_key`); the Job's
        # pods need only its name (no rollout to trigger: a Job's pods never change).
        job = self._with_pod_labels(
            profile_manifests.profile_job(
                isvc=isvc,
                request=request,
                settings=self.settings.manifests,
                admin_key=admin_key_ref(isvc.name),
            )
        )
        if self.kube.create(job) is not None:
            events.append(
                EventRecord(
                    "Normal",
                    c.REASON_ENGINE_PROFILING,
                    f"started profile Job {job['metadata']['name']}: engine {request.engine_key[:12]} in "
                    f"{request.triton_image} on {request.hardware}",
                )
            )

    def _profile_served_again(
        self,
        isvc: InferenceService,
        status: InferenceServiceStatus,
        engine: EngineStatus,
        events: list[EventRecord],
    ) -> tuple[InferenceServiceStatus, float]:
        """Profile the served engine again where its serving changed (image, GPU count), in the background.

        Only for an engine this operator profiled (status.profiling names it): one served before the
        profile Job existed keeps its profile. The old profile stays until the new one is measured;
        a failed measurement keeps it too.
        """
        profiling = status.profiling
        if not isvc.spec.engine.profile or profiling is None or profiling.engine_key != engine.key:
            return status, self.settings.resync_seconds
        request = self._profile_request(isvc, engine)
        if profiling.profile_key == request.profile_key() and profiling.phase in ("Succeeded", "Failed"):
            return status, self.settings.resync_seconds
        profiling, summary, done = self._profile_step(isvc, status.profiling, request, events)
        update: dict[str, Any] = {"profiling": profiling}
        if summary is not None:
            update["profile"] = ProfileStatus.from_summary(summary, key=profiling.profile_key)
        return status.model_copy(update=update), self.settings.resync_seconds if done else 30.0

    def _engine_failed(
        self,
        isvc: InferenceService,
        status: InferenceServiceStatus,
        state: BuildState,
        build: BuildStatus,
        events: list[EventRecord],
    ) -> tuple[ConditionUpdate, float, InferenceServiceStatus]:
        attempt = build.attempt
        backoff = min(
            self.settings.build_retry_max_seconds, self.settings.build_retry_base_seconds * 2 ** (attempt - 1)
        )
        now = utc_now(self.clock)
        finished = _parse_time(state.finished_at) or now
        wait = (finished - now).total_seconds() + backoff
        reason = state.reason or c.REASON_ENGINE_BUILD_FAILED
        message = state.message or "the engine build failed"
        if build.phase != "Failed":
            events.append(EventRecord("Warning", reason, f"engine build {build.job_name} failed: {message}"))
        # A failure only the spec can cure: another attempt of the same request would fail the same
        # way, so no Job and no back-off; a spec change makes another request.
        terminal = reason in c.TERMINAL_BUILD_REASONS or reason in c.TERMINAL_RESULT_REASONS
        if wait <= 0 and not terminal and state.job_uid:
            # Back-off over: drop the failed Job; the next pass starts attempt n+1 under the same name.
            # By its uid: a Job that took the name since it was read is not this one, and stays.
            self.kube.delete(JOBS, isvc.namespace, build.job_name, uid=state.job_uid)
            retrying = build.model_copy(
                update={"attempt": attempt + 1, "phase": "Retrying", "reason": reason, "message": message}
            )
            return (
                ConditionUpdate(
                    c.CONDITION_ENGINE_READY,
                    c.STATUS_FALSE,
                    reason,
                    f"{message} (retrying, attempt {attempt + 1})",
                ),
                2.0,
                status.model_copy(update={"build": retrying}),
            )
        failed = build.model_copy(update={"phase": "Failed", "reason": reason, "message": message})
        note = (
            "not retried: the spec is at fault; changing it starts a new build"
            if terminal
            else f"attempt {attempt}; retry in {wait:.0f}s"
        )
        return (
            ConditionUpdate(c.CONDITION_ENGINE_READY, c.STATUS_FALSE, reason, f"{message} ({note})"),
            self.settings.resync_seconds if terminal else max(1.0, wait),
            status.model_copy(update={"build": failed}),
        )

    # ---- rollout --------------------------------------------------------------------------------------
    def monitoring_crds(self) -> bool:
        """Whether the prometheus-operator CRDs are installed (checked once, then cached)."""
        if self._monitoring_crds is None:
            self._monitoring_crds = self.kube.has_resource("monitoring.coreos.com", "v1", "servicemonitors")
        return self._monitoring_crds

    def _rollout(
        self,
        isvc: InferenceService,
        status: InferenceServiceStatus,
        result: BuildResult,
        admin: AdminKey,
        events: list[EventRecord],
    ) -> tuple[ConditionUpdate, int, InferenceServiceStatus]:
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
            admin_key=admin.ref,
            select_rotation=self._rotation_selectable(isvc),
            moving=status.gpu is not None and status.gpu.moving_to is not None,
            canary=canary_plan(status),
        )
        written = self._prune(isvc, children.turned_off, events)
        written += self._prune(isvc, children.canary_over, events, why="the canary is over")
        lives: dict[str, dict[str, Any] | None] = {}
        #: Children whose name an object this service does not control already has: left alone.
        taken: list[dict[str, Any]] = []
        for obj in children.wanted:
            applied = self._apply_child(isvc, obj, events)
            if applied.taken:
                taken.append(obj)
                continue
            written += applied.written
            if resource_of(obj) is DEPLOYMENTS:
                lives[obj["metadata"]["name"]] = applied.live
        deployment_live = lives.get(deployment_name(isvc.name))
        ready = int(((deployment_live or {}).get("status") or {}).get("readyReplicas", 0))
        rolled = status.model_copy(
            update={
                "replicas": replicas,
                # spec.replicas is now applied: from here on only a new value (a manual scale) moves
                # the count past the autoscaler's (status.replicas).
                "applied_spec_replicas": applied_spec_replicas(isvc),
                "selector": selector_string(isvc.name),
                "ready_replicas": ready,
                "batching": batching_status(batching),
            }
        )
        rollout = rollout_condition(deployment_live, replicas)
        rollout, rolled = self._name_conflicts(isvc, taken, rollout, rolled, events)
        if rolled.canary is not None and rolled.canary.phase in SERVING_PHASES:
            rolled = follow_canary(
                rolled,
                canary_deployment=lives.get(deployment_name(isvc.name, canary=True)),
                stable_rolled_out=rollout.status == c.STATUS_TRUE,
                now=utc_now(self.clock),
                events=events,
            )
            if rolled.canary is not None and rolled.canary.phase not in SERVING_PHASES:
                # Promoted or rolled back: the canary's replicas go now, not a pass later.
                canary_children = [o for o in children.wanted if is_canary_child(o)]
                written += self._prune(isvc, canary_children, events, why="the canary is over")
        return rollout, written, rolled

    def _apply_child(
        self, isvc: InferenceService, obj: dict[str, Any], events: list[EventRecord]
    ) -> _AppliedChild:
        """Create `obj` or bring it to the desired state; never touch one this service does not control."""
        resource, name = resource_of(obj), obj["metadata"]["name"]
        # Wanted again (a new canary): a later pass that no longer wants it must look it up.
        self._gone.pop((str(isvc.metadata.get("uid", "")), resource.kind, name), None)
        live = self.kube.get(resource, isvc.namespace, name)
        if live is not None and not controlled_by(live, isvc):
            return _AppliedChild(live=None, written=0, taken=True)
        outcome = drift.plan(obj, live)
        if outcome is drift.Outcome.CREATE:
            created = self.kube.create(obj)
            if created is None:  # created meanwhile: ours (a pass before) or someone else's
                live = self.kube.get(resource, isvc.namespace, name)
                if live is not None and not controlled_by(live, isvc):
                    return _AppliedChild(live=None, written=0, taken=True)
            return _AppliedChild(live=created if created is not None else self.kube.apply(obj), written=1)
        if outcome is drift.Outcome.UPDATE:
            events.append(
                EventRecord(
                    "Normal",
                    "Updated",
                    f"{resource.kind} {name} brought back to the desired state (spec change or drift)",
                )
            )
            return _AppliedChild(live=self.kube.apply(obj), written=1)
        return _AppliedChild(live=live, written=0)

    def _name_conflicts(
        self,
        isvc: InferenceService,
        taken: list[dict[str, Any]],
        rollout: ConditionUpdate,
        status: InferenceServiceStatus,
        events: list[EventRecord],
    ) -> tuple[ConditionUpdate, InferenceServiceStatus]:
        """Children whose names objects this service does not control hold: never adopted, said.

        A canary's: the canary is rolled back (the stable replicas serve on). Any other: RolloutReady
        is False with reason ChildNameTaken, naming the objects, until they are renamed or removed.
        """
        if not taken:
            return rollout, status
        names = [f"{resource_of(o).kind} {o['metadata']['name']}" for o in taken]
        canary_taken = [n for o, n in zip(taken, names, strict=True) if is_canary_child(o)]
        others = [n for o, n in zip(taken, names, strict=True) if not is_canary_child(o)]
        why = "exists and is not controlled by this InferenceService; it is left alone"
        canary = status.canary
        if canary_taken and canary is not None and canary.phase in ("Starting", "Analysing"):
            message = f"{', '.join(canary_taken)} {why}"
            status = status.model_copy(
                update={
                    "canary": canary.model_copy(
                        update={
                            "phase": "RolledBack",
                            "reason": c.REASON_CHILD_NAME_TAKEN,
                            "message": message,
                            "finished_at": utc_now(self.clock),
                        }
                    )
                }
            )
            events.append(EventRecord("Warning", c.REASON_CHILD_NAME_TAKEN, f"canary not started: {message}"))
        if not others:
            return rollout, status
        message = f"{', '.join(others)} {why}: rename or remove it"
        said = any(
            cond.type == c.CONDITION_ROLLOUT_READY
            and cond.reason == c.REASON_CHILD_NAME_TAKEN
            and cond.message == message
            for cond in status.conditions
        )
        if not said:  # once, not every pass while it lasts
            events.append(EventRecord("Warning", c.REASON_CHILD_NAME_TAKEN, message))
        return ConditionUpdate(
            c.CONDITION_ROLLOUT_READY, c.STATUS_FALSE, c.REASON_CHILD_NAME_TAKEN, message
        ), status

    def _prune(
        self,
        isvc: InferenceService,
        unwanted: Iterable[dict[str, Any]],
        events: list[EventRecord],
        *,
        why: str = "the spec turned it off",
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
            # By the uid checked: an object that took the name since the read is not deleted.
            uid_seen = str(live["metadata"].get("uid") or "") or None
            if self.kube.delete(resource, isvc.namespace, name, uid=uid_seen):
                deleted += 1
                events.append(
                    EventRecord(
                        "Normal",
                        c.EVENT_CHILD_REMOVED,
                        f"{resource.kind} {name} removed: {why}",
                    )
                )
        return deleted

    def _rotation_selectable(self, isvc: InferenceService) -> bool:
        """Whether spec.autoscaling.backlogRotation is on and every pod carries the label (one pod LIST)."""
        if not isvc.spec.autoscaling.backlog_rotation:
            return False
        pods = self.kube.list(PODS, isvc.namespace, label_selector=selector_string(isvc.name))
        return rotation_selectable(pods)

    # ---- status ---------------------------------------------------------------------------------------
    def _write_status(
        self,
        body: dict[str, Any],
        status: InferenceServiceStatus,
        updates: list[ConditionUpdate],
        generation: int,
    ) -> bool:
        new_status = status.model_copy(
            update={
                "conditions": merge_conditions(
                    status.conditions, updates, generation=generation, now=utc_now(self.clock)
                ),
                "observed_generation": generation,
            }
        )
        # Cut to the CRD's limits before comparing: the stored status is the cut one, and an uncut
        # status would differ from it on every pass.
        fitted = fit_status(new_status)
        if fitted.status == decode_status(body.get("status")):
            return False
        self.kube.patch_status(body, status_patch(body.get("status"), fitted.status))
        if fitted.cuts:
            cut = "; ".join(fitted.cuts)
            post_events(
                self.kube,
                body,
                [
                    EventRecord(
                        "Warning", c.REASON_STATUS_CUT, f"status fields cut to the CRD's limits: {cut}"
                    )
                ],
                now=utc_now(self.clock),
            )
        return True
