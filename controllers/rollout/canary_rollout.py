"""A canary rollout's lifecycle on the status: start, follow, promote, roll back (pure over the status).

With `spec.rollout.strategy: canary`, a new engine that passed the regression gate does not replace
the serving one at once. The reconciler asks `canary_step` what the new engine's canary says, each
pass, and `follow_canary` what the canary Deployment and the stable rollout say:

```
Starting --(every canary replica ready)--> Analysing --(the analysis: held up)--> Promoting
   |                                          |                                      |
   | (canary Deployment stalled)              | (slower, failing, or stalled)        | (stable replicas
   v                                          v                                      v  rolled to it)
RolledBack <--------------------------------- +                                   Promoted
```

The verdict of the analysis (Analysing -> Promoting or RolledBack) is the analyst's
(`canary_analysis`): it reads Prometheus. The accept annotation naming the new engine promotes it
from any phase, as it accepts an engine the regression gate held. Nothing here does I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final

from tailpilot.api import constants as c
from tailpilot.api.engine import ProfileSummary
from tailpilot.api.v1alpha1 import (
    CanaryStatus,
    EngineStatus,
    InferenceService,
    InferenceServiceStatus,
    RolloutStrategy,
)
from tailpilot.controllers.core.conditions import ConditionUpdate
from tailpilot.controllers.core.events import EventRecord
from tailpilot.controllers.core.status import engine_result
from tailpilot.manifests.children import CanaryPlan
from tailpilot.policy.canary import canary_replicas

#: Phases in which the canary Deployment runs.
SERVING_PHASES: Final = ("Starting", "Analysing", "Promoting")
#: Seconds between reconciles while a canary runs (its readiness, the analyst's verdict).
CANARY_REQUEUE_S: Final = 10.0


def canary_applies(
    isvc: InferenceService,
    status: InferenceServiceStatus,
    built: EngineStatus,
    summary: ProfileSummary | None,
) -> bool:
    """Whether a new engine goes through a canary: strategy canary, an engine serving, the same hardware.

    A move to another GPU product is judged by its cost (status.gpu), not side by side: two
    products' replicas differ in speed whatever their engines.
    """
    if isvc.spec.rollout.strategy is not RolloutStrategy.CANARY:
        return False
    if status.engine is None or status.engine.key == built.key:
        return False
    moving = status.gpu is not None and status.gpu.moving_to is not None
    old = status.profile
    across = old is not None and summary is not None and old.hardware != summary.hardware
    return not (moving or across)


def canary_plan(status: InferenceServiceStatus) -> CanaryPlan | None:
    """The canary replicas to run now, if any."""
    canary = status.canary
    if canary is None or canary.phase not in SERVING_PHASES:
        return None
    return CanaryPlan(result=engine_result(canary.engine), replicas=canary.replicas)


@dataclass
class CanaryStep:
    """What a pass does with a new engine under a canary.

    Attributes:
        engine_ready: EngineReady while the new engine does not serve yet; None: serve it now.
        blocked: RolloutBlocked.
        status: The status with status.canary updated.
        events: Events to post.
    """

    engine_ready: ConditionUpdate | None
    blocked: ConditionUpdate
    status: InferenceServiceStatus
    events: list[EventRecord] = field(default_factory=list)


def _serving_share(replicas: int, stable: int) -> str:
    share = 100 * replicas / (replicas + stable)
    return f"{replicas} canary replica(s) beside {stable} stable (about {share:.0f}% of the traffic)"


def canary_step(
    isvc: InferenceService,
    status: InferenceServiceStatus,
    built: EngineStatus,
    *,
    stable_replicas: int,
    accepted: bool,
    now: datetime,
) -> CanaryStep:
    """Start the canary of `built`, or say where it stands; `accepted`: the accept annotation names it."""
    spec = isvc.spec.rollout.canary
    replicas = canary_replicas(stable_replicas, spec.traffic_percent)
    canary = status.canary
    key = built.key[:12]
    events: list[EventRecord] = []
    if canary is None or canary.engine.key != built.key:
        canary = CanaryStatus(
            engine=built,
            phase="Starting",
            reason="CanaryStarting",
            message=f"starting {_serving_share(replicas, stable_replicas)}",
            replicas=replicas,
            started_at=now,
        )
        events.append(
            EventRecord(
                "Normal",
                c.EVENT_CANARY_STARTED,
                f"engine {key}: {canary.message}, analysed for {spec.analysis_seconds} s once ready",
            )
        )
    elif canary.phase in ("Starting", "Analysing") and accepted:
        canary = canary.model_copy(
            update={
                "phase": "Promoting",
                "reason": c.REASON_REGRESSION_ACCEPTED,
                "message": f"promoted by {c.ANNOTATION_ACCEPT_ENGINE} before the analysis ended",
                "finished_at": now,
            }
        )
        events.append(
            EventRecord("Warning", c.REASON_REGRESSION_ACCEPTED, f"canary of engine {key}: {canary.message}")
        )
    elif canary.phase == "RolledBack" and accepted:
        # Straight to the stable replicas: no canary to run again for an engine judged already.
        canary = canary.model_copy(
            update={
                "phase": "Promoted",
                "reason": c.REASON_REGRESSION_ACCEPTED,
                "message": f"rolled back ({canary.message}), then accepted by {c.ANNOTATION_ACCEPT_ENGINE}",
            }
        )
        events.append(
            EventRecord("Warning", c.REASON_REGRESSION_ACCEPTED, f"canary of engine {key}: {canary.message}")
        )
    elif canary.phase in ("Starting", "Analysing") and canary.replicas != replicas:
        canary = canary.model_copy(update={"replicas": replicas})
    engine_ready, blocked = phase_conditions(canary)
    return CanaryStep(
        engine_ready=engine_ready,
        blocked=blocked,
        status=status.model_copy(update={"canary": canary}),
        events=events,
    )


def phase_conditions(canary: CanaryStatus) -> tuple[ConditionUpdate | None, ConditionUpdate]:
    """(EngineReady, RolloutBlocked) as the canary's phase has them; EngineReady None: the engine serves.

    One function for the reconcile's pass and the analyst's verdict: the verdict's phase and the
    conditions that say it are written in one status patch, never a phase without its conditions.
    """
    key = canary.engine.key[:12]
    if canary.phase in ("Promoting", "Promoted"):
        return None, ConditionUpdate(
            c.CONDITION_ROLLOUT_BLOCKED, c.STATUS_FALSE, c.REASON_CANARY_PROMOTED, canary.message
        )
    if canary.phase == "RolledBack":
        message = (
            f"canary of engine {key} rolled back: {canary.message}. The serving engine keeps serving; "
            f"to serve the new one anyway, annotate the service {c.ANNOTATION_ACCEPT_ENGINE}={key}"
        )
        return _held(c.REASON_CANARY_ROLLED_BACK, message, blocked=True)
    message = f"engine {key} under canary analysis: {canary.message}"
    return _held(c.REASON_CANARY_ANALYSIS, message, blocked=False)


def _held(reason: str, message: str, *, blocked: bool) -> tuple[ConditionUpdate, ConditionUpdate]:
    """The new engine does not serve yet: EngineReady False and RolloutBlocked, both with `reason`."""
    return (
        ConditionUpdate(c.CONDITION_ENGINE_READY, c.STATUS_FALSE, reason, message),
        ConditionUpdate(
            c.CONDITION_ROLLOUT_BLOCKED, c.STATUS_TRUE if blocked else c.STATUS_FALSE, reason, message
        ),
    )


def drop_superseded_canary(
    status: InferenceServiceStatus, *, request_key: str, events: list[EventRecord]
) -> InferenceServiceStatus:
    """Stop a canary whose engine the spec no longer asks for (a later change, or back to the serving one).

    A canary already promoted finishes: its engine serves, or is being rolled onto the stable replicas.
    """
    canary = status.canary
    if canary is None or canary.engine.request_key == request_key:
        return status
    promoted = status.engine is not None and status.engine.key == canary.engine.key
    if canary.phase not in ("Starting", "Analysing", "Promoting") or promoted:
        return status
    events.append(
        EventRecord(
            "Normal",
            c.EVENT_CANARY_STOPPED,
            f"canary of engine {canary.engine.key[:12]} stopped: the spec no longer asks for it",
        )
    )
    return status.model_copy(update={"canary": None})


def _stalled(deployment: dict[str, Any] | None) -> str | None:
    """The Deployment controller's message when it gave up on progress (ProgressDeadlineExceeded)."""
    for cond in ((deployment or {}).get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Progressing" and cond.get("reason") == "ProgressDeadlineExceeded":
            return str(cond.get("message") or "progress deadline exceeded")
    return None


def _ready(deployment: dict[str, Any] | None, replicas: int) -> bool:
    st = (deployment or {}).get("status") or {}
    current = st.get("observedGeneration", 0) >= (deployment or {}).get("metadata", {}).get("generation", 0)
    updated, ready = int(st.get("updatedReplicas", 0)), int(st.get("readyReplicas", 0))
    return bool(current) and updated >= replicas and ready >= replicas


def follow_canary(
    status: InferenceServiceStatus,
    *,
    canary_deployment: dict[str, Any] | None,
    stable_rolled_out: bool,
    now: datetime,
    events: list[EventRecord],
) -> InferenceServiceStatus:
    """The canary's phase after this pass's writes: ready (Analysing), stalled (RolledBack) or done."""
    canary = status.canary
    if canary is None or canary.phase not in SERVING_PHASES:
        return status
    key = canary.engine.key[:12]
    update: dict[str, Any] = {}
    stalled = _stalled(canary_deployment)
    if canary.phase == "Promoting":
        if stable_rolled_out and status.engine is not None and status.engine.key == canary.engine.key:
            update = {"phase": "Promoted", "finished_at": canary.finished_at or now}
            events.append(
                EventRecord(
                    "Normal",
                    c.REASON_CANARY_PROMOTED,
                    f"engine {key} serves on every stable replica; the canary replicas are removed",
                )
            )
    elif stalled is not None:
        update = {
            "phase": "RolledBack",
            "reason": "CanaryNotReady",
            "message": f"the canary replicas did not become ready: {stalled}",
            "finished_at": now,
        }
        events.append(
            EventRecord("Warning", c.REASON_CANARY_ROLLED_BACK, f"engine {key}: {update['message']}")
        )
    elif canary.phase == "Starting" and _ready(canary_deployment, canary.replicas):
        update = {
            "phase": "Analysing",
            "reason": "Analysing",
            "message": f"{canary.replicas} canary replica(s) ready and serving; analysis started",
            "analysis_started_at": now,
        }
    if not update:
        return status
    return status.model_copy(update={"canary": canary.model_copy(update=update)})
