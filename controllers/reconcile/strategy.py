"""The rollout-strategy seam: what a pass asks of `spec.rollout.strategy`.

The reconciler asks the strategy at three points, never branching on one by name:

- the engine stage, when a new engine passed the regression gate (or had none to pass):
  `engine_passed` serves it, or starts its way in (a canary);
- the rollout stage: `extra_replicas` (the new engine's own replicas beside the stable ones, for
  `manifests.children.plan_children`) and `follow` (after the children are written: what the
  rollout in flight does next);
- after the rollout: `after_rollout`, what the strategy says of a rollout that ended in this very
  pass.

Implementations are registered by the spec's value in `strategies.StrategyRegistry`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from tailpilot.api.engine import ProfileSummary
from tailpilot.api.v1alpha1 import EngineStatus, InferenceServiceStatus
from tailpilot.controllers.reconcile.deps import PassDeps
from tailpilot.controllers.reconcile.pass_context import ReconcilePass
from tailpilot.manifests.children import CanaryPlan


@dataclass(frozen=True)
class RolloutView:
    """The rollout stage's writes, as a strategy's `follow` sees them.

    Attributes:
        wanted: The children wanted this pass, in creation order.
        lives: Each Deployment written, by name, as the API server answered (None: not there).
        stable_rolled_out: Whether RolloutReady is True (every stable replica updated and available).
        prune: Delete children the service controls, saying why; returns how many were deleted.
    """

    wanted: Sequence[dict[str, Any]]
    lives: dict[str, dict[str, Any] | None]
    stable_rolled_out: bool
    prune: Callable[[Iterable[dict[str, Any]], str], int]


class Strategy(Protocol):
    """How a new engine that passed the regression gate replaces the one serving."""

    def engine_passed(
        self, p: ReconcilePass, deps: PassDeps, built: EngineStatus, summary: ProfileSummary | None
    ) -> None:
        """A new engine passed the gate (`summary`: its profile, if any): serve it, or begin its rollout.

        Sets EngineReady and the delay (`p.engine_is`), the status, the Events; may replace the
        gate's RolloutBlocked (`p.gate`) with the strategy's own.
        """
        ...

    def in_flight(self, status: InferenceServiceStatus) -> bool:
        """Whether the status shows a rollout of this strategy under way (its replicas running).

        A rollout in flight is finished by the strategy that started it, whatever the spec says now.
        """
        ...

    def extra_replicas(self, status: InferenceServiceStatus) -> CanaryPlan | None:
        """The new engine's own replicas to run beside the stable ones this pass, if any."""
        ...

    def follow(self, p: ReconcilePass, deps: PassDeps, view: RolloutView) -> None:
        """After the children are written: move the rollout in flight along (status, Events, writes)."""
        ...

    def after_rollout(self, p: ReconcilePass, deps: PassDeps) -> None:
        """After the rollout stage: say now what ended in this very pass (EngineReady, RolloutBlocked)."""
        ...
