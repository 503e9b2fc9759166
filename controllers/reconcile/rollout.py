"""The rollout stage: the children planned, written (never another owner's), pruned; RolloutReady.

The reconciler rolls out `manifests.children.plan_children(...)`, compared with the live children by
`drift.plan` and written by server-side apply. The strategy in charge (`strategies.StrategyRegistry`)
adds its own replicas to the plan and follows its rollout once the children are written.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from tailpilot.api import constants as c
from tailpilot.api.engine import BuildResult
from tailpilot.controllers.core.conditions import ConditionUpdate
from tailpilot.controllers.core.events import EventRecord
from tailpilot.controllers.core.kubeapi import DEPLOYMENTS, resource_of
from tailpilot.controllers.core.status import (
    applied_spec_replicas,
    batching_in_force,
    batching_status,
    replicas_in_force,
)
from tailpilot.controllers.reconcile.children import Children
from tailpilot.controllers.reconcile.deps import PassDeps
from tailpilot.controllers.reconcile.move_handover import MoveHandover
from tailpilot.controllers.reconcile.pass_context import ReconcilePass
from tailpilot.controllers.reconcile.strategies import StrategyRegistry
from tailpilot.controllers.reconcile.strategy import RolloutView, Strategy
from tailpilot.controllers.reconcile.zero_routing import ZeroRouting, take_wake
from tailpilot.manifests.children import ClusterCapabilities, is_canary_child, plan_children
from tailpilot.manifests.deployment import deployment_name
from tailpilot.manifests.meta import selector_string


def rollout_condition(deployment: dict[str, Any] | None, replicas: int) -> ConditionUpdate:
    """RolloutReady from the Deployment's status: every replica updated and available."""
    if deployment is None:
        return ConditionUpdate(
            c.CONDITION_ROLLOUT_READY, c.STATUS_FALSE, c.REASON_ROLLING_OUT, "creating the Triton Deployment"
        )
    st = deployment.get("status", {})
    for cond in st.get("conditions", []) or []:
        if cond.get("type") == "Progressing" and cond.get("reason") == "ProgressDeadlineExceeded":
            return ConditionUpdate(
                c.CONDITION_ROLLOUT_READY,
                c.STATUS_FALSE,
                c.REASON_ROLLOUT_STALLED,
                cond.get("message", "rollout exceeded its progress deadline"),
            )
    generation_seen = st.get("observedGeneration", 0) >= deployment["metadata"].get("generation", 0)
    updated, available = st.get("updatedReplicas", 0), st.get("availableReplicas", 0)
    total, ready = st.get("replicas", 0), st.get("readyReplicas", 0)
    if generation_seen and updated == replicas and available >= replicas and total == replicas:
        return ConditionUpdate(
            c.CONDITION_ROLLOUT_READY,
            c.STATUS_TRUE,
            c.REASON_ROLLED_OUT,
            f"{ready}/{replicas} replicas ready",
        )
    return ConditionUpdate(
        c.CONDITION_ROLLOUT_READY,
        c.STATUS_FALSE,
        c.REASON_ROLLING_OUT,
        f"{updated}/{replicas} replicas updated, {available} available",
    )


class Rollout:
    """The children of the engine serving, at the replicas and batching in force."""

    def __init__(self, deps: PassDeps, children: Children, strategies: StrategyRegistry) -> None:
        self.deps = deps
        self.children = children
        self.strategies = strategies
        self.zero = ZeroRouting(deps)
        self.handover = MoveHandover(deps)

    def run(self, p: ReconcilePass) -> None:
        """Roll out the served engine (RolloutReady onto the pass), or say that none is built yet."""
        served = p.served
        if served is None:
            p.rollout_condition = ConditionUpdate(
                c.CONDITION_ROLLOUT_READY, c.STATUS_FALSE, c.REASON_WAITING_FOR_ENGINE, "no engine built yet"
            )
            return
        strategy = self.strategies.in_charge(p.isvc, p.status)
        take_wake(p)
        self.apply_children(p, served, strategy)
        strategy.after_rollout(p, self.deps)
        self._move_done(p)

    def _prune(self, p: ReconcilePass, unwanted: Iterable[dict[str, Any]], why: str) -> int:
        pruned = self.children.prune(p.isvc, unwanted, why=why)
        p.events.extend(pruned.events)
        return pruned.deleted

    def apply_children(self, p: ReconcilePass, result: BuildResult, strategy: Strategy) -> None:
        """Write the children planned for `result`; the strategy follows its rollout after the writes."""
        isvc, status = p.isvc, p.status
        batching = batching_in_force(isvc, status)
        replicas = replicas_in_force(isvc, status)
        crds = self.children.monitoring_crds()
        children = plan_children(
            isvc=isvc,
            result=result,
            batching=batching,
            replicas=replicas,
            settings=self.deps.settings.manifests,
            capabilities=ClusterCapabilities(service_monitors=crds, prometheus_rules=crds),
            admin_key=p.admin.ref,
            select_rotation=self.children.rotation_selectable(isvc),
            moving=status.gpu is not None and status.gpu.moving_to is not None,
            canary=strategy.extra_replicas(status),
            routing=self.zero.routing(isvc, replicas=replicas),
        )
        written = self._prune(p, children.turned_off, "the spec turned it off")
        written += self._prune(p, children.canary_over, "the canary is over")
        lives: dict[str, dict[str, Any] | None] = {}
        #: Children whose name an object this service does not control already has: left alone.
        taken: list[dict[str, Any]] = []
        stable = deployment_name(isvc.name)
        handover = self.handover.before_write(p)
        p.events.extend(handover.events)
        if handover.hold_replicas is not None:
            p.requeue_within(1.0)  # the next step waits only for the deployment controller to see it
        for obj in children.wanted:
            is_stable = resource_of(obj) is DEPLOYMENTS and obj["metadata"]["name"] == stable
            if is_stable:
                obj = handover.deployment(obj)
            applied = self.children.apply(isvc, obj)
            p.events.extend(applied.events)
            if applied.taken:
                taken.append(obj)
                continue
            written += applied.written
            if resource_of(obj) is DEPLOYMENTS:
                lives[obj["metadata"]["name"]] = applied.live
        p.children_written += written
        deployment_live = lives.get(stable)
        # During a move's hand-over the released old pods serve too.
        ready = int(((deployment_live or {}).get("status") or {}).get("readyReplicas", 0))
        ready += handover.released_ready
        p.status = status.model_copy(
            update={
                "replicas": replicas,
                # spec.replicas is now applied: from here on only a new value (a manual scale) moves
                # the count past the autoscaler's (status.replicas).
                "applied_spec_replicas": applied_spec_replicas(isvc),
                "selector": selector_string(isvc.name),
                "ready_replicas": ready,
                "batching": batching_status(batching),
            }
        )
        p.rollout_condition = rollout_condition(deployment_live, replicas)
        self._name_conflicts(p, taken)
        view = RolloutView(
            wanted=children.wanted,
            lives=lives,
            stable_rolled_out=p.rollout_condition.status == c.STATUS_TRUE,
            prune=lambda unwanted, why: self._prune(p, unwanted, why),
        )
        strategy.follow(p, self.deps, view)

    def _name_conflicts(self, p: ReconcilePass, taken: list[dict[str, Any]]) -> None:
        """Children whose names objects this service does not control hold: never adopted, said.

        A canary's: the canary is rolled back (the stable replicas serve on). Any other: RolloutReady
        is False with reason ChildNameTaken, naming the objects, until they are renamed or removed.
        """
        if not taken:
            return
        names = [f"{resource_of(o).kind} {o['metadata']['name']}" for o in taken]
        canary_taken = [n for o, n in zip(taken, names, strict=True) if is_canary_child(o)]
        others = [n for o, n in zip(taken, names, strict=True) if not is_canary_child(o)]
        why = "exists and is not controlled by this InferenceService; it is left alone"
        canary = p.status.canary
        if canary_taken and canary is not None and canary.phase in ("Starting", "Analysing"):
            message = f"{', '.join(canary_taken)} {why}"
            rolled_back = canary.model_copy(
                update={
                    "phase": "RolledBack",
                    "reason": c.REASON_CHILD_NAME_TAKEN,
                    "message": message,
                    "finished_at": self.deps.now(),
                }
            )
            p.status = p.status.model_copy(update={"canary": rolled_back})
            p.events.append(
                EventRecord("Warning", c.REASON_CHILD_NAME_TAKEN, f"canary not started: {message}")
            )
        if not others:
            return
        message = f"{', '.join(others)} {why}: rename or remove it"
        said = any(
            cond.type == c.CONDITION_ROLLOUT_READY
            and cond.reason == c.REASON_CHILD_NAME_TAKEN
            and cond.message == message
            for cond in p.status.conditions
        )
        if not said:  # once, not every pass while it lasts
            p.events.append(EventRecord("Warning", c.REASON_CHILD_NAME_TAKEN, message))
        p.rollout_condition = ConditionUpdate(
            c.CONDITION_ROLLOUT_READY, c.STATUS_FALSE, c.REASON_CHILD_NAME_TAKEN, message
        )

    def _move_done(self, p: ReconcilePass) -> None:
        """A move is complete: every new pod is ready, the old ones go.

        A move an earlier operator version began, at the old count, shrinks to what the new product
        needs. Any rollout that completes also looks for released ReplicaSets (one list per
        completion): a move abandoned midway (the spec names one product again) leaves its old pods
        serving until the rollout that replaced it is done.
        """
        move, rollout = p.status.gpu, p.rollout_condition
        if rollout is None or rollout.status != c.STATUS_TRUE:
            return
        moving = move is not None and bool(move.moving_to or move.replicas_after_move)
        was_ready = any(
            x.type == c.CONDITION_ROLLOUT_READY and x.status == c.STATUS_TRUE for x in p.status.conditions
        )
        if moving or not was_ready:
            p.events.extend(self.handover.finish(p))
        if move is None or not moving:
            return
        shrink = move.replicas_after_move
        p.status = p.status.model_copy(
            update={
                "replicas": min(p.status.replicas or 1, shrink) if shrink else p.status.replicas,
                "gpu": move.model_copy(update={"replicas_after_move": None, "moving_to": None}),
            }
        )
        p.requeue_within(1.0)
