"""`strategy: rolling`: a new engine that passed the gate serves at once, by a rolling update."""

from __future__ import annotations

from tailpilot.api.engine import ProfileSummary
from tailpilot.api.v1alpha1 import EngineStatus, InferenceServiceStatus
from tailpilot.controllers.reconcile.deps import PassDeps
from tailpilot.controllers.reconcile.pass_context import ReconcilePass
from tailpilot.controllers.reconcile.serving import serve
from tailpilot.controllers.reconcile.strategy import RolloutView
from tailpilot.manifests.children import CanaryPlan


class RollingStrategy:
    """The Deployment's own rolling update: nothing runs beside the stable replicas."""

    def engine_passed(
        self, p: ReconcilePass, deps: PassDeps, built: EngineStatus, summary: ProfileSummary | None
    ) -> None:
        """Serve the new engine now."""
        serve(p, built, summary, resync_s=deps.settings.resync_seconds)

    def in_flight(self, status: InferenceServiceStatus) -> bool:
        """Never: the Deployment controller carries a rolling update, not the status."""
        return False

    def extra_replicas(self, status: InferenceServiceStatus) -> CanaryPlan | None:
        """None: every replica is a stable one."""
        return None

    def follow(self, p: ReconcilePass, deps: PassDeps, view: RolloutView) -> None:
        """Nothing to follow: RolloutReady says how the rolling update goes."""

    def after_rollout(self, p: ReconcilePass, deps: PassDeps) -> None:
        """Nothing ends in a pass."""
