"""The service's engine Jobs (build and profile): read them as the service's own, create them."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from tailpilot.api import constants as c
from tailpilot.api.engine import BuildRequest, ProfileRequest
from tailpilot.api.v1alpha1 import EngineStatus, InferenceService
from tailpilot.controllers.core.events import EventRecord
from tailpilot.controllers.core.kubeapi import ISVC, JOBS, PODS
from tailpilot.controllers.core.status import engines_named
from tailpilot.controllers.reconcile.deps import PassDeps
from tailpilot.controllers.reconcile.job_ownership import job_not_owned
from tailpilot.manifests import build_job as job_manifests
from tailpilot.manifests import profile_job as profile_manifests
from tailpilot.manifests.triton_access import admin_key_ref


def parse_time(text: str | None) -> datetime | None:
    """A Kubernetes timestamp (`...Z`) as an aware datetime; None when there is none."""
    if not text:
        return None
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


@dataclass(frozen=True)
class EngineJob:
    """An engine Job of the service as read: the Job and its labelled pods, or why it is not its own."""

    job: dict[str, Any] | None
    pods: list[dict[str, Any]]
    #: Why a Job of the name is not this service's ("" when it is, or there is none): never read or deleted.
    not_owned: str = ""

    def taken(self, what: str) -> str:
        """The words of a condition and an Event about a Job of the name that is not the service's."""
        return f"{self.not_owned}: no {what} is read from it and it is never deleted; rename or remove it"


class EngineJobs:
    """Reads and creates the service's build and profile Jobs."""

    def __init__(self, deps: PassDeps) -> None:
        self.deps = deps

    def read(self, isvc: InferenceService, job_name: str) -> EngineJob:
        """The engine Job of that name and the pods its label lists, if the Job is the service's.

        A Job of the name the service does not own is neither listed further nor assessed: its pods
        could say anything. `build_state` then reads only the pods the Job itself controls.
        """
        kube = self.deps.kube
        job = kube.get(JOBS, isvc.namespace, job_name)
        if job is None:
            return EngineJob(None, [])
        not_owned = job_not_owned(job, isvc)
        if not_owned:
            return EngineJob(None, [], not_owned)
        return EngineJob(job, kube.list(PODS, isvc.namespace, label_selector=f"job-name={job_name}"))

    def profile_request(self, isvc: InferenceService, engine: EngineStatus) -> ProfileRequest:
        """The profile request of `engine` where the service serves."""
        return profile_manifests.make_profile_request(
            isvc=isvc,
            engine_key=engine.key,
            triton_backend=engine.triton_backend,
            settings=self.deps.settings.manifests,
        )

    def _with_pod_labels(self, job: dict[str, Any]) -> dict[str, Any]:
        """An engine Job (build or profile) with the operator's extra pod labels on its pod template."""
        template_meta = job["spec"]["template"].setdefault("metadata", {})
        template_meta["labels"] = {**template_meta.get("labels", {}), **self.deps.settings.build_pod_labels}
        return job

    def create_build_job(
        self, isvc: InferenceService, request: BuildRequest, attempt: int
    ) -> list[EventRecord]:
        """Create the build Job of `request`; the Event that says so (none when it existed already)."""
        kube = self.deps.kube
        # The store is the namespace's: its GC keeps every engine a service there names. One LIST
        # per build Job created (rare), not per pass.
        in_use = engines_named(o.get("status") for o in kube.list(ISVC, isvc.namespace))
        job = self._with_pod_labels(
            job_manifests.build_job(
                isvc=isvc, request=request, settings=self.deps.settings.manifests, engines_in_use=in_use
            )
        )
        job["metadata"].setdefault("annotations", {})[f"{c.GROUP}/build-attempt"] = str(attempt)
        if kube.create(job) is None:
            return []
        return [
            EventRecord(
                "Normal",
                c.REASON_ENGINE_BUILDING,
                f"started engine build Job {job['metadata']['name']} for "
                f"{request.backend}/{request.precision} on {request.target}",
            )
        ]

    def create_profile_job(self, isvc: InferenceService, request: ProfileRequest) -> list[EventRecord]:
        """Create the profile Job of `request`; the Event that says so (none when it existed already)."""
        # The pass made sure the Secret exists before getting here (`ensure_admin_key`); the Job's
        # pods need only its name (no rollout to trigger: a Job's pods never change).
        job = self._with_pod_labels(
            profile_manifests.profile_job(
                isvc=isvc,
                request=request,
                settings=self.deps.settings.manifests,
                admin_key=admin_key_ref(isvc.name),
            )
        )
        if self.deps.kube.create(job) is None:
            return []
        return [
            EventRecord(
                "Normal",
                c.REASON_ENGINE_PROFILING,
                f"started profile Job {job['metadata']['name']}: engine {request.engine_key[:12]} in "
                f"{request.triton_image} on {request.hardware}",
            )
        ]
