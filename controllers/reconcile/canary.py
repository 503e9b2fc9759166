"""`strategy: canary`: a new engine first serves a share of the traffic on replicas of its own.

The lifecycle on the status is `controllers.canary_rollout` (pure); the verdict of the analysis is
`controllers.canary_analysis`, run by the service's loop. This module is where the reconcile pass
asks them.
"""

from __future__ import annotations

from tailpilot.api import constants as c
from tailpilot.api.engine import ProfileSummary
from tailpilot.api.v1alpha1 import EngineStatus, InferenceServiceStatus
from tailpilot.controllers.core.status import replicas_in_force
from tailpilot.controllers.reconcile.deps import PassDeps
from tailpilot.controllers.reconcile.pass_context import ReconcilePass
from tailpilot.controllers.reconcile.regression_gate import accepts_engine
from tailpilot.controllers.reconcile.serving import serve
from tailpilot.controllers.reconcile.strategy import RolloutView
from tailpilot.controllers.rollout.canary_rollout import (
    CANARY_REQUEUE_S,
    SERVING_PHASES,
    canary_applies,
    canary_plan,
    canary_step,
    follow_canary,
)
from tailpilot.manifests.children import CanaryPlan, is_canary_child
from tailpilot.manifests.deployment import deployment_name


class CanaryStrategy:
    """A canary beside the stable replicas, analysed, then promoted or rolled back."""

    def engine_passed(
        self, p: ReconcilePass, deps: PassDeps, built: EngineStatus, summary: ProfileSummary | None
    ) -> None:
        """Serve a new engine that passed the gate once its canary's verdict says so."""
        isvc, resync = p.isvc, deps.settings.resync_seconds
        if not canary_applies(isvc, p.status, built, summary):
            serve(p, built, summary, resync_s=resync)
            return
        step = canary_step(
            isvc,
            p.status,
            built,
            stable_replicas=replicas_in_force(isvc, p.status),
            accepted=accepts_engine(isvc.metadata.get("annotations") or {}, built.key),
            now=deps.now(),
        )
        p.events.extend(step.events)
        # The canary's verdict is what holds the engine or not, beside the gate's (it passed).
        p.gate[:] = [step.blocked]
        p.status = step.status
        if step.engine_ready is not None:
            held = step.status.canary is not None and step.status.canary.phase == "RolledBack"
            p.engine_is(step.engine_ready, resync if held else CANARY_REQUEUE_S)
            return
        serve(p, built, summary, resync_s=resync)

    def in_flight(self, status: InferenceServiceStatus) -> bool:
        """Whether the canary Deployment runs (starting, analysed, or being promoted)."""
        return status.canary is not None and status.canary.phase in SERVING_PHASES

    def extra_replicas(self, status: InferenceServiceStatus) -> CanaryPlan | None:
        """The canary replicas to run now, if any."""
        return canary_plan(status)

    def follow(self, p: ReconcilePass, deps: PassDeps, view: RolloutView) -> None:
        """The canary's phase after this pass's writes; a canary over loses its replicas now."""
        if not self.in_flight(p.status):
            return
        p.status = follow_canary(
            p.status,
            canary_deployment=view.lives.get(deployment_name(p.isvc.name, canary=True)),
            stable_rolled_out=view.stable_rolled_out,
            now=deps.now(),
            events=p.events,
        )
        if not self.in_flight(p.status):
            # Promoted or rolled back: the canary's replicas go now, not a pass later.
            canary_children = [o for o in view.wanted if is_canary_child(o)]
            p.children_written += view.prune(canary_children, "the canary is over")

    def after_rollout(self, p: ReconcilePass, deps: PassDeps) -> None:
        """A canary rolled back in this very pass (its name was taken): say so now, not a pass later."""
        canary, engine_cond = p.status.canary, p.engine_ready
        if canary is None or canary.phase != "RolledBack" or engine_cond.reason != c.REASON_CANARY_ANALYSIS:
            return
        held = canary_step(
            p.isvc,
            p.status,
            canary.engine,
            stable_replicas=replicas_in_force(p.isvc, p.status),
            accepted=False,
            now=deps.now(),
        )
        p.engine_condition = held.engine_ready or engine_cond  # a rolled-back canary's never serves
        p.gate = [held.blocked]
