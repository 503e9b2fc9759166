"""The engine stage: the build Job (create, follow, retry), then the built engine's profile and gate.

An engine goes build Job -> profile Job -> served. The profile Job measures it in the service's own
Triton on a node of its hardware (`manifests.profile_job`); a profile that fails (or cannot be
scheduled before its deadline) lets the engine serve without one, since the autoscaler learns the
service time online. The engine being served only changes when a new engine is built and its profile
step has ended, so a bad update never takes a serving service down; a new engine that passed the
regression gate is then the rollout strategy's (`strategy.Strategy.engine_passed`).
"""

from __future__ import annotations

from tailpilot.api import constants as c
from tailpilot.api.engine import BuildRequest
from tailpilot.api.v1alpha1 import BuildStatus, EngineStatus
from tailpilot.controllers.core.conditions import ConditionUpdate
from tailpilot.controllers.core.events import EventRecord
from tailpilot.controllers.core.kubeapi import JOBS
from tailpilot.controllers.core.status import engine_status
from tailpilot.controllers.reconcile.build_state import BuildPhase, BuildState, assess_build
from tailpilot.controllers.reconcile.deps import PassDeps
from tailpilot.controllers.reconcile.engine_jobs import EngineJobs, parse_time
from tailpilot.controllers.reconcile.pass_context import ReconcilePass
from tailpilot.controllers.reconcile.profiling import ProfileStep, Profiling
from tailpilot.controllers.reconcile.regression_gate import regression_gate
from tailpilot.controllers.reconcile.strategies import StrategyRegistry
from tailpilot.manifests import build_job as job_manifests


def _engine_ready(status: str, reason: str, message: str) -> ConditionUpdate:
    return ConditionUpdate(c.CONDITION_ENGINE_READY, status, reason, message)


class EngineBuild:
    """EngineReady, the next pass's delay and the status with the build's progress, on the pass."""

    def __init__(
        self, deps: PassDeps, jobs: EngineJobs, profiling: Profiling, strategies: StrategyRegistry
    ) -> None:
        self.deps = deps
        self.jobs = jobs
        self.profiling = profiling
        self.strategies = strategies

    def run(self, p: ReconcilePass, request: BuildRequest) -> None:
        """The engine the spec asks for: served already, or its build Job's next step.

        The regression gate's RolloutBlocked condition, when a new engine was compared, goes to `p.gate`.
        """
        isvc, request_key = p.isvc, request.request_key()
        engine = p.status.engine
        if engine is not None and engine.request_key == request_key:
            reason = c.REASON_ENGINE_CACHED if engine.cache_hit else c.REASON_ENGINE_BUILT
            requeue = self.profiling.served_again(p, engine)
            p.engine_is(
                _engine_ready(c.STATUS_TRUE, reason, f"engine {engine.key[:12]} built for {request.target}"),
                requeue,
            )
            return
        job_name = job_manifests.build_job_name(isvc_name=isvc.name, request_key=request_key)
        engine_job = self.jobs.read(isvc, job_name)
        build = p.status.build
        if build is None or build.request_key != request_key:
            build = BuildStatus(request_key=request_key, attempt=1)
        build = build.model_copy(update={"job_name": job_name})
        if engine_job.not_owned:
            self._taken(p, build, engine_job.taken("build result"))
            return
        state = assess_build(engine_job.job, engine_job.pods)
        if state.phase is BuildPhase.ABSENT:
            p.events.extend(self.jobs.create_build_job(isvc, request, build.attempt))
            build = build.model_copy(update={"phase": "Running", "reason": "", "message": ""})
            p.status = p.status.model_copy(update={"build": build})
            message = f"build Job {job_name} started (attempt {build.attempt})"
            p.engine_is(_engine_ready(c.STATUS_FALSE, c.REASON_ENGINE_BUILDING, message), 10.0)
        elif state.phase is BuildPhase.RUNNING:
            self._running(p, state, build)
        elif state.phase is BuildPhase.SUCCEEDED and state.result is not None:
            self._built(p, state, request_key, build)
        else:
            self.failed(p, state, build)

    def _taken(self, p: ReconcilePass, build: BuildStatus, message: str) -> None:
        """EngineReady False while a Job the service does not own holds its build Job's name.

        Nothing is built meanwhile (the name is the build's, by its request key); the engine serving
        keeps serving. Told once, then checked again each pass until the Job is renamed or removed.
        """
        if (build.reason, build.message) != (c.REASON_CHILD_NAME_TAKEN, message):
            p.events.append(EventRecord("Warning", c.REASON_CHILD_NAME_TAKEN, message))
        taken = build.model_copy(
            update={"phase": "Failed", "reason": c.REASON_CHILD_NAME_TAKEN, "message": message}
        )
        p.status = p.status.model_copy(update={"build": taken})
        p.engine_is(_engine_ready(c.STATUS_FALSE, c.REASON_CHILD_NAME_TAKEN, message), 30.0)

    def _running(self, p: ReconcilePass, state: BuildState, build: BuildStatus) -> None:
        job_name = build.job_name
        running = build.model_copy(
            update={"phase": "Running", "reason": state.reason, "message": state.message}
        )
        detail = f"build Job {job_name} running" + (f" on {state.node}" if state.node else "")
        if state.failed_pods:
            if (build.reason, build.failed_pods) != (state.reason, state.failed_pods):
                p.events.append(
                    EventRecord(
                        "Warning",
                        state.reason or c.REASON_ENGINE_BUILD_FAILED,
                        f"build pod of {job_name} failed: {state.message}; retrying",
                    )
                )
            running = running.model_copy(update={"failed_pods": state.failed_pods})
            # The Job retries the pod with its own back-off; say why the last attempt failed.
            condition = _engine_ready(
                c.STATUS_FALSE,
                state.reason or c.REASON_ENGINE_BUILD_FAILED,
                f"{state.message} ({state.failed_pods} failed build pod(s); {detail}, retrying)",
            )
        elif state.waiting:  # e.g. no node has the GPU, or the model's PVC does not exist
            condition = _engine_ready(
                c.STATUS_FALSE, c.REASON_ENGINE_BUILD_PENDING, f"build Job {job_name}: {state.waiting}"
            )
        else:
            condition = _engine_ready(c.STATUS_FALSE, c.REASON_ENGINE_BUILDING, detail)
        p.status = p.status.model_copy(update={"build": running})
        p.engine_is(condition, 30.0)

    def failed(self, p: ReconcilePass, state: BuildState, build: BuildStatus) -> None:
        """A failed build: retried after its back-off (a new Job of the same name), or not at all."""
        settings = self.deps.settings
        attempt = build.attempt
        backoff = min(
            settings.build_retry_max_seconds, settings.build_retry_base_seconds * 2 ** (attempt - 1)
        )
        now = self.deps.now()
        finished = parse_time(state.finished_at) or now
        wait = (finished - now).total_seconds() + backoff
        reason = state.reason or c.REASON_ENGINE_BUILD_FAILED
        message = state.message or "the engine build failed"
        if build.phase != "Failed":
            p.events.append(
                EventRecord("Warning", reason, f"engine build {build.job_name} failed: {message}")
            )
        # A failure only the spec can cure: another attempt of the same request would fail the same
        # way, so no Job and no back-off; a spec change makes another request.
        terminal = reason in c.TERMINAL_BUILD_REASONS or reason in c.TERMINAL_RESULT_REASONS
        if wait <= 0 and not terminal and state.job_uid:
            # Back-off over: drop the failed Job; the next pass starts attempt n+1 under the same name.
            # By its uid: a Job that took the name since it was read is not this one, and stays.
            self.deps.kube.delete(JOBS, p.isvc.namespace, build.job_name, uid=state.job_uid)
            retrying = build.model_copy(
                update={"attempt": attempt + 1, "phase": "Retrying", "reason": reason, "message": message}
            )
            p.status = p.status.model_copy(update={"build": retrying})
            p.engine_is(
                _engine_ready(c.STATUS_FALSE, reason, f"{message} (retrying, attempt {attempt + 1})"), 2.0
            )
            return
        failed = build.model_copy(update={"phase": "Failed", "reason": reason, "message": message})
        note = (
            "not retried: the spec is at fault; changing it starts a new build"
            if terminal
            else f"attempt {attempt}; retry in {wait:.0f}s"
        )
        p.status = p.status.model_copy(update={"build": failed})
        p.engine_is(
            _engine_ready(c.STATUS_FALSE, reason, f"{message} ({note})"),
            settings.resync_seconds if terminal else max(1.0, wait),
        )

    def _built(self, p: ReconcilePass, state: BuildState, request_key: str, build: BuildStatus) -> None:
        """A built engine is profiled where it serves, passes the regression gate, then is the strategy's."""
        result = state.result
        if result is None:  # assess_build reports SUCCEEDED only with a result
            raise ValueError("a succeeded build without a result")
        built = engine_status(result, request_key=request_key, built_at=parse_time(state.finished_at))
        p.status = p.status.model_copy(
            update={"build": build.model_copy(update={"phase": "Succeeded", "reason": "", "message": ""})}
        )
        served = p.status.engine
        if served is not None and served.key == built.key:
            # The engine serving, under a new build request (a field outside the engine key changed,
            # or an operator upgrade added one): nothing new to measure or to gate; its profile stays.
            p.status = p.status.model_copy(
                update={"engine": built.model_copy(update={"built_at": served.built_at})}
            )
            message = f"engine {built.key[:12]} built for {p.isvc.spec.runtime.device.value}"
            p.engine_is(
                _engine_ready(c.STATUS_TRUE, c.REASON_ENGINE_CACHED, message),
                self.deps.settings.resync_seconds,
            )
            return
        strategy = self.strategies.of(p.isvc)
        if not p.isvc.spec.engine.profile:
            p.status = p.status.model_copy(update={"profiling": None})
            strategy.engine_passed(p, self.deps, built, None)
            return
        profiled = self._profiled(p, built)
        if profiled is None:
            return
        held = regression_gate(p, built, profiled.summary)
        if held is not None:
            p.engine_is(held, self.deps.settings.resync_seconds)
            return
        strategy.engine_passed(p, self.deps, built, profiled.summary)

    def _profiled(self, p: ReconcilePass, built: EngineStatus) -> ProfileStep | None:
        """The built engine's profile step once it ended; None while it runs (EngineReady says on what)."""
        request = self.jobs.profile_request(p.isvc, built)
        step = self.profiling.step(p.isvc, p.status.profiling, request)
        p.events.extend(step.events)
        profiling = step.profiling
        p.status = p.status.model_copy(update={"profiling": profiling})
        if step.done:
            return step
        if profiling.reason == c.REASON_CHILD_NAME_TAKEN:
            # Waiting on a Job of the profile's name that is not the service's: said as such.
            message = f"engine {built.key[:12]} built; {profiling.message}"
            p.engine_is(_engine_ready(c.STATUS_FALSE, c.REASON_CHILD_NAME_TAKEN, message), 30.0)
            return None
        detail = f"profile Job {profiling.job_name} measuring it on {request.hardware}"
        if profiling.message:
            detail += f": {profiling.message}"
        p.engine_is(
            _engine_ready(
                c.STATUS_FALSE, c.REASON_ENGINE_PROFILING, f"engine {built.key[:12]} built; {detail}"
            ),
            10.0,
        )
        return None
