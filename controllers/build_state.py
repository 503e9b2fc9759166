"""Read an engine build Job's state and result from what the API server shows (pure).

The build container writes a `BuildResult` (JSON) to its termination message;
the kubelet (or a KWOK stage that plays a build) puts it into the pod's
`containerStatuses[].state.terminated.message`. The operator never needs to
reach the build pod itself.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from pydantic import ValidationError

from tailpilot.api.engine import BuildOutcome, BuildResult, ProfileSummary

_CAMEL = re.compile(r"^[A-Z][A-Za-z0-9]*$")


class BuildPhase(StrEnum):
    """Where a build stands."""

    ABSENT = "Absent"
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"


@dataclass(frozen=True)
class BuildState:
    """The build as the operator sees it."""

    phase: BuildPhase
    result: BuildResult | None = None
    reason: str = ""
    message: str = ""
    failed_pods: int = 0
    node: str = ""
    finished_at: str | None = None
    #: Why the newest build pod is not running yet (unschedulable, image pull...), if it is waiting.
    waiting: str = ""


def _condition(job: dict[str, Any], type_: str) -> dict[str, Any] | None:
    for cond in job.get("status", {}).get("conditions", []) or []:
        if cond.get("type") == type_ and cond.get("status") == "True":
            return dict(cond)
    return None


def _terminated(pod: dict[str, Any]) -> dict[str, Any] | None:
    for status in pod.get("status", {}).get("containerStatuses", []) or []:
        terminated = (status.get("state") or {}).get("terminated")
        if terminated:
            return dict(terminated)
    return None


def parse_result(message: str | None) -> BuildResult | None:
    """The BuildResult in a termination message, or None when it is absent or not one."""
    if not message:
        return None
    try:
        return BuildResult.model_validate_json(message)
    except ValidationError:
        return None


def _newest(pods: list[dict[str, Any]]) -> dict[str, Any] | None:
    return max(pods, key=lambda p: p["metadata"].get("creationTimestamp", ""), default=None)


def assess_build(job: dict[str, Any] | None, pods: list[dict[str, Any]]) -> BuildState:
    """Combine the Job's conditions and its pods' termination messages into one state."""
    if job is None:
        return BuildState(BuildPhase.ABSENT)
    finished = [p for p in pods if _terminated(p) is not None]
    failed_pods = sum(1 for p in pods if p.get("status", {}).get("phase") == "Failed")
    last = _newest(finished)
    last_terminated = _terminated(last) if last else None
    result = parse_result(last_terminated.get("message")) if last_terminated else None
    running_pod = _newest(pods)
    node = (running_pod or {}).get("spec", {}).get("nodeName") or ""

    complete = _condition(job, "Complete") or _condition(job, "SuccessCriteriaMet")
    if complete:
        if result is None or result.outcome is not BuildOutcome.SUCCEEDED:
            return BuildState(
                BuildPhase.FAILED,
                result,
                "BuildResultMissing",
                "the build Job completed but its pod left no valid BuildResult in its termination message",
                failed_pods,
                node,
                complete.get("lastTransitionTime"),
            )
        return BuildState(
            BuildPhase.SUCCEEDED, result, node=node, finished_at=complete.get("lastTransitionTime")
        )

    reason, message = _failure_text(result, last_terminated)
    failed = _condition(job, "Failed") or _condition(job, "FailureTarget")
    if failed:
        return BuildState(
            BuildPhase.FAILED,
            result,
            reason or failed.get("reason", "BuildJobFailed"),
            message or failed.get("message", "the build Job failed"),
            failed_pods,
            node,
            failed.get("lastTransitionTime"),
        )
    # Still running; a failed earlier attempt is reported while the Job retries it.
    return BuildState(
        BuildPhase.RUNNING, result, reason, message, failed_pods, node, waiting=_waiting_reason(running_pod)
    )


def _waiting_reason(pod: dict[str, Any] | None) -> str:
    """Why a Pending pod does not run: the scheduler's message or a container's waiting reason."""
    if not pod or pod.get("status", {}).get("phase") != "Pending":
        return ""
    status = pod["status"]
    for cond in status.get("conditions", []) or []:
        if cond.get("type") == "PodScheduled" and cond.get("status") == "False":
            return f"build pod unschedulable: {cond.get('message') or cond.get('reason', '')}".strip()
    for container in status.get("containerStatuses", []) or []:
        waiting = (container.get("state") or {}).get("waiting")
        if waiting and waiting.get("reason") not in (None, "ContainerCreating"):
            return f"build pod waiting: {waiting.get('reason')}: {waiting.get('message', '')}".strip(": ")
    return ""


def _failure_text(result: BuildResult | None, terminated: dict[str, Any] | None) -> tuple[str, str]:
    if result is not None and result.outcome is BuildOutcome.FAILED:
        reason = result.reason if _CAMEL.match(result.reason or "") else "EngineBuildFailed"
        return reason, result.message or "the engine build failed"
    if terminated is not None and terminated.get("exitCode", 0) != 0:
        text = (terminated.get("message") or "").strip()
        return "EngineBuildFailed", f"build container exited with code {terminated.get('exitCode')}" + (
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
