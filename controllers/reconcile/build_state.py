"""Read an engine Job's state and result from what the API server shows (pure).

The build container writes a `BuildResult` (JSON) to its termination message,
the profile container a `ProfileResult`; the kubelet (or a KWOK stage that
plays a result) puts it into the pod's `containerStatuses[].state.terminated.message`.
The operator never needs to reach the Job's pod itself.

Only the pods the Job controls (by the uid the operator read with the Job, `job_ownership`) are
read: a pod that merely carries the Job's `job-name` label, made by someone else, is not its pod.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Generic, TypeVar

from pydantic import ValidationError

from tailpilot.api import constants as c
from tailpilot.api.engine import (
    TERMINATION_MESSAGE_LIMIT_BYTES,
    BuildOutcome,
    BuildResult,
    ProfileResult,
    ProfileSummary,
    TensorSpec,
)
from tailpilot.api.v1alpha1 import MAX_TENSORS, TensorOverride
from tailpilot.controllers.reconcile.job_ownership import job_uid, pods_of_job

#: A reason the operator copies onto a condition (CamelCase, within the condition's 128 characters).
_CAMEL = re.compile(r"^[A-Z][A-Za-z0-9]{0,127}$")
#: How much of an unreadable termination message a condition quotes.
_QUOTED_CHARS = 200


#: The result an engine Job reports: a BuildResult or a ProfileResult.
R = TypeVar("R", BuildResult, ProfileResult)


class BuildPhase(StrEnum):
    """Where an engine Job (a build or a profile) stands."""

    ABSENT = "Absent"
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"


@dataclass(frozen=True)
class JobState(Generic[R]):
    """An engine Job as the operator sees it."""

    phase: BuildPhase
    result: R | None = None
    reason: str = ""
    message: str = ""
    failed_pods: int = 0
    node: str = ""
    finished_at: str | None = None
    #: Why the newest pod is not running yet (unschedulable, image pull...), if it is waiting.
    waiting: str = ""
    #: The uid of the Job this state was read from: a delete names it, so the operator deletes
    #: that Job and never another that took its name in between.
    job_uid: str = ""


BuildState = JobState[BuildResult]
ProfileState = JobState[ProfileResult]


@dataclass(frozen=True)
class _JobKind(Generic[R]):
    """What differs between the engine Jobs: the result type and the words of its messages."""

    result_type: type[R]
    #: The container whose termination message carries the result (others, e.g. a sidecar, do not).
    container: str
    noun: str
    failed_reason: str
    #: A termination message that is there but is not a result (cut, or not JSON of its shape).
    unreadable_reason: str


_BUILD = _JobKind(BuildResult, "build", "build", "EngineBuildFailed", c.REASON_BUILD_RESULT_UNREADABLE)
_PROFILE = _JobKind(ProfileResult, "profile", "profile", "ProfileFailed", c.REASON_PROFILE_RESULT_UNREADABLE)


def _condition(job: dict[str, Any], type_: str) -> dict[str, Any] | None:
    for cond in job.get("status", {}).get("conditions", []) or []:
        if cond.get("type") == type_ and cond.get("status") == "True":
            return dict(cond)
    return None


def _terminated(pod: dict[str, Any], container: str) -> dict[str, Any] | None:
    """The terminated state of `container` (or of the only container, whatever its name)."""
    statuses = pod.get("status", {}).get("containerStatuses", []) or []
    for status in statuses:
        if status.get("name") != container and len(statuses) > 1:
            continue
        terminated = (status.get("state") or {}).get("terminated")
        if terminated:
            return dict(terminated)
    return None


def parse_result(message: str | None) -> BuildResult | None:
    """The BuildResult in a termination message, or None when it is absent or not one."""
    return _parse(message, BuildResult)


def _parse(message: str | None, result_type: type[R]) -> R | None:
    if not message:
        return None
    try:
        return result_type.model_validate_json(message)
    except ValidationError:
        return None


def _unreadable(message: str | None, kind: _JobKind[R]) -> str:
    """Why a termination message that is not a result cannot be read ("" when absent or readable)."""
    if not message or _parse(message, kind.result_type) is not None:
        return ""
    size = len(message.encode())
    cut = (
        f", cut at the kubelet's {TERMINATION_MESSAGE_LIMIT_BYTES}-byte limit"
        if size >= TERMINATION_MESSAGE_LIMIT_BYTES - 4  # a cut may drop a split character's bytes
        else ""
    )
    quoted = message[:_QUOTED_CHARS] + ("..." if len(message) > _QUOTED_CHARS else "")
    return (
        f"the {kind.noun} container's termination message is not a {kind.result_type.__name__} "
        f"({size} bytes{cut}): {quoted!r}"
    )


def unservable_tensors(result: BuildResult) -> str:
    """Why status.engine cannot hold the engine's inputs and outputs ("" when it can).

    The serving pods' config is rendered from status.engine, so an engine whose tensors would be
    cut to fit it (more than MAX_TENSORS, a name or a rank past TensorOverride's bounds) cannot be
    served as built: a failure, named, rather than a status write the API server refuses on every pass.
    """
    problems = []
    for what, tensors in (("inputs", result.inputs), ("outputs", result.outputs)):
        if len(tensors) > MAX_TENSORS:
            problems.append(f"{len(tensors)} {what} (at most {MAX_TENSORS})")
        problems += [
            f"{what[:-1]} {t.name[:64]!r}: {p}" for t in tensors[:MAX_TENSORS] if (p := _tensor_problem(t))
        ]
    return "; ".join(problems[:4]) + (f"; and {len(problems) - 4} more" if len(problems) > 4 else "")


def _tensor_problem(tensor: TensorSpec) -> str:
    try:
        TensorOverride.model_validate(tensor.model_dump(by_alias=True))
    except ValidationError as error:
        return ", ".join(f"{'.'.join(map(str, e['loc']))} {e['msg'].lower()}" for e in error.errors())
    return ""


def _newest(pods: list[dict[str, Any]]) -> dict[str, Any] | None:
    return max(pods, key=lambda p: p["metadata"].get("creationTimestamp", ""), default=None)


def assess_build(job: dict[str, Any] | None, pods: list[dict[str, Any]]) -> BuildState:
    """Combine the build Job's conditions and its pods' termination messages into one state.

    `pods`: those listed by the Job's `job-name` label; only those the Job controls are read.
    """
    return _assess(job, pods, _BUILD)


def assess_profile(job: dict[str, Any] | None, pods: list[dict[str, Any]]) -> ProfileState:
    """Combine the profile Job's conditions and its pods' termination messages into one state."""
    return _assess(job, pods, _PROFILE)


def _assess(job: dict[str, Any] | None, pods: list[dict[str, Any]], kind: _JobKind[R]) -> JobState[R]:
    if job is None:
        return JobState(BuildPhase.ABSENT)
    # A label anyone can set is no proof of origin: the Job's own pods only.
    state = _assess_pods(job, pods_of_job(job, pods), kind)
    return dataclasses.replace(state, job_uid=job_uid(job))


def _assess_pods(job: dict[str, Any], pods: list[dict[str, Any]], kind: _JobKind[R]) -> JobState[R]:
    finished = [p for p in pods if _terminated(p, kind.container) is not None]
    failed_pods = sum(1 for p in pods if p.get("status", {}).get("phase") == "Failed")
    last = _newest(finished)
    last_terminated = _terminated(last, kind.container) if last else None
    message = last_terminated.get("message") if last_terminated else None
    result = _parse(message, kind.result_type)
    unreadable = _unreadable(message, kind)
    running_pod = _newest(pods)
    node = (running_pod or {}).get("spec", {}).get("nodeName") or ""

    complete = _condition(job, "Complete") or _condition(job, "SuccessCriteriaMet")
    if complete:
        tensors = unservable_tensors(result) if isinstance(result, BuildResult) else ""
        if unreadable or tensors:
            return JobState(
                BuildPhase.FAILED,
                None if unreadable else result,
                kind.unreadable_reason if unreadable else c.REASON_ENGINE_TENSORS_TOO_LARGE,
                unreadable
                or f"the engine's inputs and outputs do not fit status.engine, which its pods are "
                f"configured from: {tensors}",
                failed_pods,
                node,
                complete.get("lastTransitionTime"),
            )
        if result is None or result.outcome is not BuildOutcome.SUCCEEDED:
            return JobState(
                BuildPhase.FAILED,
                result,
                f"{kind.noun.capitalize()}ResultMissing",
                f"the {kind.noun} Job completed but its pod left no valid "
                f"{kind.result_type.__name__} in its termination message",
                failed_pods,
                node,
                complete.get("lastTransitionTime"),
            )
        return JobState(
            BuildPhase.SUCCEEDED, result, node=node, finished_at=complete.get("lastTransitionTime")
        )

    reason, text = _failure_text(result, last_terminated, kind)
    if unreadable and (message or "").lstrip().startswith("{"):
        # A result that was cut or malformed: say so, not the broken JSON as if it were the reason
        # (a plain-text message, e.g. a crash's, stays the failure's own words below).
        reason, text = kind.unreadable_reason, unreadable
    failed = _condition(job, "Failed") or _condition(job, "FailureTarget")
    if failed:
        return JobState(
            BuildPhase.FAILED,
            result,
            reason or failed.get("reason", f"{kind.noun.capitalize()}JobFailed"),
            text or failed.get("message", f"the {kind.noun} Job failed"),
            failed_pods,
            node,
            failed.get("lastTransitionTime"),
        )
    # Still running; a failed earlier attempt is reported while the Job retries it.
    return JobState(
        BuildPhase.RUNNING,
        result,
        reason,
        text,
        failed_pods,
        node,
        waiting=_waiting_reason(running_pod, kind.noun),
    )


def _waiting_reason(pod: dict[str, Any] | None, noun: str) -> str:
    """Why a Pending pod does not run: the scheduler's message or a container's waiting reason."""
    if not pod or pod.get("status", {}).get("phase") != "Pending":
        return ""
    status = pod["status"]
    for cond in status.get("conditions", []) or []:
        if cond.get("type") == "PodScheduled" and cond.get("status") == "False":
            return f"{noun} pod unschedulable: {cond.get('message') or cond.get('reason', '')}".strip()
    for container in status.get("containerStatuses", []) or []:
        waiting = (container.get("state") or {}).get("waiting")
        if waiting and waiting.get("reason") not in (None, "ContainerCreating"):
            return f"{noun} pod waiting: {waiting.get('reason')}: {waiting.get('message', '')}".strip(": ")
    return ""


def _failure_text(
    result: BuildResult | ProfileResult | None, terminated: dict[str, Any] | None, kind: _JobKind[R]
) -> tuple[str, str]:
    if result is not None and result.outcome is BuildOutcome.FAILED:
        reason = result.reason if _CAMEL.match(result.reason or "") else kind.failed_reason
        return reason, result.message or f"the engine {kind.noun} failed"
    if terminated is not None and terminated.get("exitCode", 0) != 0:
        text = (terminated.get("message") or "").strip()
        return kind.failed_reason, f"{kind.noun} container exited with code {terminated.get('exitCode')}" + (
            f": {text}" if text else ""
        )
    return "", ""


def profile_notes(profile: ProfileSummary | None, *, serving_cpu_limit_millis: int | None) -> tuple[str, str]:
    """(what the EngineBuilt Event adds about the profile, a warning or "") (pure).

    The warning is for a CPU engine whose profile was measured under another CPU limit than the
    pods': a runtime that does not enforce the build Job's limit, or an engine built before the
    operator asked for one.
    """
    if profile is None:
        return "", ""
    limit = profile.cpu_limit_millis
    notes = [f"profiled on {profile.hardware}" + (f" under a CPU limit of {limit}m" if limit else "")]
    if profile.reload is not None:
        notes.append(
            f"a live reload took {profile.reload.seconds:.1f} s, keeping "
            f"{profile.reload.served_share:.0%} of the throughput"
        )
    warning = ""
    if (
        profile.hardware == "cpu"
        and serving_cpu_limit_millis is not None
        and limit != serving_cpu_limit_millis
    ):
        measured = "no CPU limit" if limit is None else f"a CPU limit of {limit}m"
        warning = (
            f"the engine was profiled under {measured}, but its pods are limited to "
            f"{serving_cpu_limit_millis}m: its times are off by their ratio until the autoscaler "
            "learns the serving speed online"
        )
    return "; ".join(notes), warning


def describe_profile(profile: ProfileSummary) -> str:
    """The profile in one line for an Event: the fitted service time and each batch size's P99."""
    st = profile.service_time
    points = "; ".join(
        f"b={p.batch_size}: p99 {p.p99_ms:.2f} ms, {p.throughput_per_s:.0f}/s" for p in profile.points
    )
    return f"t(b) = {st.intercept_ms:.3f} + {st.per_item_ms:.3f}*b ms" + (f"; {points}" if points else "")
