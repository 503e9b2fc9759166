"""The profile Job's steps: run (or follow) one, and profile the served engine again where it moved."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tailpilot.api import constants as c
from tailpilot.api.engine import ProfileRequest, ProfileSummary
from tailpilot.api.v1alpha1 import EngineStatus, InferenceService, ProfileStatus, ProfilingStatus
from tailpilot.controllers.core.events import EventRecord
from tailpilot.controllers.reconcile.build_state import BuildPhase, assess_profile, describe_profile
from tailpilot.controllers.reconcile.deps import PassDeps
from tailpilot.controllers.reconcile.engine_jobs import EngineJobs
from tailpilot.controllers.reconcile.pass_context import ReconcilePass
from tailpilot.manifests import profile_job as profile_manifests


@dataclass(frozen=True)
class ProfileStep:
    """Where a profile Job stands after one step.

    Attributes:
        profiling: The step's record (`status.profiling`, or a candidate's).
        summary: The profile measured (None: not yet, or it failed).
        done: Whether the step ended (measured or failed).
        events: The Events the step found new.
    """

    profiling: ProfilingStatus
    summary: ProfileSummary | None
    done: bool
    events: list[EventRecord] = field(default_factory=list)


class Profiling:
    """The profile Job of an engine, where the service serves."""

    def __init__(self, deps: PassDeps, jobs: EngineJobs) -> None:
        self.deps = deps
        self.jobs = jobs

    def step(
        self, isvc: InferenceService, previous: ProfilingStatus | None, request: ProfileRequest
    ) -> ProfileStep:
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
        engine_job = self.jobs.read(isvc, job_name)
        if engine_job.not_owned:
            # Not measured while it lasts: the engine waits, as for a profile Job still running.
            message = engine_job.taken("profile")
            told = (profiling.reason, profiling.message) == (c.REASON_CHILD_NAME_TAKEN, message)
            taken = profiling.model_copy(
                update={"phase": "Running", "reason": c.REASON_CHILD_NAME_TAKEN, "message": message}
            )
            return ProfileStep(
                taken,
                None,
                False,
                [] if told else [EventRecord("Warning", c.REASON_CHILD_NAME_TAKEN, message)],
            )
        state = assess_profile(engine_job.job, engine_job.pods)
        if state.phase is BuildPhase.ABSENT:
            created = self.jobs.create_profile_job(isvc, request)
            running = profiling.model_copy(update={"phase": "Running", "reason": "", "message": ""})
            return ProfileStep(running, None, False, created)
        if state.phase is BuildPhase.RUNNING:
            message = state.waiting or (
                f"{state.message} ({state.failed_pods} failed profile pod(s), retrying)"
                if state.failed_pods
                else ""
            )
            return ProfileStep(
                profiling.model_copy(update={"phase": "Running", "reason": state.reason, "message": message}),
                None,
                False,
            )
        result = state.result
        if state.phase is BuildPhase.SUCCEEDED and result is not None and result.profile is not None:
            events: list[EventRecord] = []
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
            succeeded = profiling.model_copy(update={"phase": "Succeeded", "reason": "", "message": ""})
            return ProfileStep(succeeded, result.profile, True, events)
        return self._failed(profiling, job_name, state.reason, state.message)

    @staticmethod
    def _failed(profiling: ProfilingStatus, job_name: str, reason: str, message: str) -> ProfileStep:
        """A profile Job that failed: the engine serves without this profile."""
        reason = reason or c.EVENT_PROFILE_FAILED
        message = message or "the profile Job failed"
        events: list[EventRecord] = []
        if profiling.phase != "Failed":
            events.append(
                EventRecord(
                    "Warning",
                    c.EVENT_PROFILE_FAILED,
                    f"profile Job {job_name} failed ({reason}: {message}); the engine serves without "
                    "this profile and the autoscaler learns its service time online",
                )
            )
        failed = profiling.model_copy(update={"phase": "Failed", "reason": reason, "message": message})
        return ProfileStep(failed, None, True, events)

    def served_again(self, p: ReconcilePass, engine: EngineStatus) -> float:
        """Profile the served engine again where its serving changed (image, GPU count), in the background.

        Only for an engine this operator profiled (status.profiling names it): one served before the
        profile Job existed keeps its profile. The old profile stays until the new one is measured;
        a failed measurement keeps it too. Returns the delay the step asks of the next pass.
        """
        isvc, resync = p.isvc, self.deps.settings.resync_seconds
        profiling = p.status.profiling
        if not isvc.spec.engine.profile or profiling is None or profiling.engine_key != engine.key:
            return resync
        request = self.jobs.profile_request(isvc, engine)
        if profiling.profile_key == request.profile_key() and profiling.phase in ("Succeeded", "Failed"):
            return resync
        step = self.step(isvc, p.status.profiling, request)
        p.events.extend(step.events)
        update: dict[str, Any] = {"profiling": step.profiling}
        if step.summary is not None:
            update["profile"] = ProfileStatus.from_summary(step.summary, key=step.profiling.profile_key)
        p.status = p.status.model_copy(update=update)
        return resync if step.done else 30.0
