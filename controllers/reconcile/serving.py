"""Make a built engine the one served, with its profile (or none)."""

from __future__ import annotations

from typing import Any

from tailpilot.api import constants as c
from tailpilot.api.engine import ProfileSummary
from tailpilot.api.v1alpha1 import EngineStatus, ProfileStatus
from tailpilot.controllers.core.conditions import ConditionUpdate
from tailpilot.controllers.core.events import EventRecord
from tailpilot.controllers.reconcile.build_state import profile_notes
from tailpilot.controllers.reconcile.pass_context import ReconcilePass
from tailpilot.manifests import build_job as job_manifests


def serve(p: ReconcilePass, built: EngineStatus, summary: ProfileSummary | None, *, resync_s: float) -> None:
    """Make the built engine the served one, with its profile (or none)."""
    isvc, status = p.isvc, p.status
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
    p.events.append(
        EventRecord(
            "Normal",
            reason,
            f"engine {built.key[:12]} ready at {built.artifact}" + (f"; {note}" if note else ""),
        )
    )
    if warning:
        p.events.append(EventRecord("Warning", c.EVENT_PROFILE_CPU_LIMIT_MISMATCH, warning))
    p.status = status.model_copy(update=update)
    p.engine_is(
        ConditionUpdate(
            c.CONDITION_ENGINE_READY,
            c.STATUS_TRUE,
            reason,
            f"engine {built.key[:12]} built for {isvc.spec.runtime.device.value}",
        ),
        resync_s,
    )
