"""The closing conditions of a pass (Degraded, RolloutReady, Ready, ScalingActive) and its result."""

from __future__ import annotations

from tailpilot.api import constants as c
from tailpilot.controllers.core.conditions import ConditionUpdate, derive_ready
from tailpilot.controllers.reconcile.pass_context import ReconcilePass, ReconcileResult
from tailpilot.controllers.rollout.canary_rollout import CANARY_REQUEUE_S, SERVING_PHASES


def conclude(p: ReconcilePass) -> None:
    """Add the pass's closing conditions and its last requeue rules."""
    engine_cond, rollout, served = p.engine_ready, p.rollout_condition, p.served
    if rollout is None:
        raise RuntimeError("the pass concluded before its rollout stage")
    if served is not None:
        degraded = engine_cond.status != c.STATUS_TRUE
        p.conditions.append(
            ConditionUpdate(
                c.CONDITION_DEGRADED,
                c.STATUS_TRUE if degraded else c.STATUS_FALSE,
                engine_cond.reason if degraded else "ServingLatestSpec",
                f"still serving engine {served.engine_key[:12]}: {engine_cond.message}" if degraded else "",
            )
        )
    p.conditions += [
        rollout,
        derive_ready(engine=engine_cond, rollout=rollout, serving_engine=served is not None),
    ]
    if not p.isvc.spec.autoscaling.enabled:
        p.conditions.append(
            ConditionUpdate(
                c.CONDITION_SCALING_ACTIVE,
                c.STATUS_FALSE,
                c.REASON_AUTOSCALING_DISABLED,
                "spec.autoscaling.enabled is false",
            )
        )
    if rollout.status != c.STATUS_TRUE:
        p.requeue_within(30.0)
    # A canary's readiness and its analyst's verdict are followed closely, whatever the strategy now.
    if p.status.canary is not None and p.status.canary.phase in SERVING_PHASES:
        p.requeue_within(CANARY_REQUEUE_S)


def result_of(p: ReconcilePass, *, status_written: bool) -> ReconcileResult:
    """What the pass did and when the next one is due."""
    autoscaling = p.isvc.spec.autoscaling
    return ReconcileResult(
        requeue_after=p.requeue_after,
        status_written=status_written,
        children_written=p.children_written,
        fast_checks=p.served is not None and (autoscaling.enabled or autoscaling.fast_checks()),
        canary_analysis=p.status.canary is not None and p.status.canary.phase == "Analysing",
    )
