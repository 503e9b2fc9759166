"""A move to another GPU product, handed over at the new product's own size without a gap.

A move starts the new product's own fleet (status.replicas, sized by the product choice), which may
be far smaller than the old one: one H100 replica serves what ten L4 replicas do. A Deployment
alone cannot do that safely. Lowering spec.replicas together with the template is a scaling event
for the deployment controller, and it scales the old ReplicaSet down to the new count before any
new pod exists. So the hand-over takes the old pods out of the Deployment's hands first:

1. **Hold.** The Deployment gets the new template *paused* (annotated
   `tailpilot.io/paused-for-move`), at the replica count it has. A paused Deployment creates no
   ReplicaSet for a new template and scales nothing (its count is unchanged), so every old pod
   serves on.
2. **Release.** Once the deployment controller has seen the pause (observedGeneration), every
   ReplicaSet of the Deployment that runs another product is released: its controller reference
   becomes the InferenceService's (it is garbage-collected with the service) and it is labelled
   `tailpilot.io/released-by-move`. Its pods keep serving, and the Service still selects them.
   The Deployment is then applied as planned, at the new count: the plan lacks the annotation, which
   `drift.plan` takes for drift, and the server-side apply drops the pause with it (a pause set by
   hand has no annotation and is left alone). It owns no old pods, so its new ReplicaSet starts the
   whole new fleet at once (maxSurge 100%).
3. **Finish.** Once the Deployment has rolled out on the new product, the released ReplicaSets are
   deleted; their pods drain as in any rollout (preStop), and the move is over.

Each step is decided from what the cluster shows, so an operator that restarts mid-move resumes it.
The release is written with the ReplicaSet's resourceVersion, and the deployment controller writes
ReplicaSets the same way, so neither overwrites a change it has not seen.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tailpilot.api import constants as c
from tailpilot.api.v1alpha1 import InferenceService
from tailpilot.controllers.core.events import EventRecord
from tailpilot.controllers.core.kubeapi import DEPLOYMENTS, REPLICA_SETS
from tailpilot.controllers.reconcile.deps import PassDeps
from tailpilot.controllers.reconcile.pass_context import ReconcilePass
from tailpilot.manifests.deployment import deployment_name
from tailpilot.manifests.meta import controlled_by, controlled_by_uid, owner_reference, selector_string


@dataclass(frozen=True)
class Handover:
    """What a move's hand-over asks of this pass's write of the Deployment.

    Attributes:
        hold_replicas: Write the new template paused, at this count (step 1); None: write as planned
            (a Deployment the operator paused is then unpaused: `drift.plan` sees its annotation).
        released_ready: Ready pods of the released ReplicaSets, serving beside the Deployment's.
        events: What the pass posts.
    """

    hold_replicas: int | None = None
    released_ready: int = 0
    events: list[EventRecord] = field(default_factory=list)

    def deployment(self, planned: dict[str, Any]) -> dict[str, Any]:
        """The Deployment to write: as planned, or (step 1) paused at the count it has."""
        if self.hold_replicas is None:
            return planned
        meta = planned["metadata"]
        annotations = {**(meta.get("annotations") or {}), c.ANNOTATION_PAUSED_FOR_MOVE: "true"}
        spec = {**planned["spec"], "paused": True, "replicas": self.hold_replicas}
        return {**planned, "metadata": {**meta, "annotations": annotations}, "spec": spec}


NO_HANDOVER = Handover()


def product_of(template: dict[str, Any] | None) -> str | None:
    """The GPU product a pod template is placed on (its node selector), None for none."""
    spec = (template or {}).get("spec") or {}
    return (spec.get("nodeSelector") or {}).get(c.GPU_PRODUCT_LABEL)


def _ready(rs: dict[str, Any]) -> int:
    return int((rs.get("status") or {}).get("readyReplicas") or 0)


def _released(rs: dict[str, Any], isvc: InferenceService) -> bool:
    labels = rs["metadata"].get("labels") or {}
    return labels.get(c.LABEL_RELEASED_BY_MOVE) == "true" and controlled_by(rs, isvc)


class MoveHandover:
    """The three steps of a move's hand-over (module docstring), run around the Deployment's write."""

    def __init__(self, deps: PassDeps) -> None:
        self.deps = deps

    def _replica_sets(self, isvc: InferenceService) -> list[dict[str, Any]]:
        return self.deps.kube.list(REPLICA_SETS, isvc.namespace, label_selector=selector_string(isvc.name))

    def before_write(self, p: ReconcilePass) -> Handover:
        """Steps 1 and 2 while a move is on (status.gpu.movingTo); nothing otherwise."""
        gpu, isvc = p.status.gpu, p.isvc
        if gpu is None or gpu.moving_to is None:
            return NO_HANDOVER
        live = self.deps.kube.get(DEPLOYMENTS, isvc.namespace, deployment_name(isvc.name))
        if live is None or not controlled_by(live, isvc):
            return NO_HANDOVER  # nothing serves yet: the Deployment starts on the new product
        sets = self._replica_sets(isvc)
        ready = sum(_ready(rs) for rs in sets if _released(rs, isvc))
        spec, target = live.get("spec") or {}, gpu.moving_to
        held = int(spec.get("replicas") or 0)
        if product_of(spec.get("template")) != target:
            return Handover(hold_replicas=held, released_ready=ready)
        if not spec.get("paused"):
            return Handover(released_ready=ready)  # released already: the new fleet rolls out
        observed = (live.get("status") or {}).get("observedGeneration", 0)
        if observed < live["metadata"].get("generation", 0):
            return Handover(hold_replicas=held, released_ready=ready)
        events = []
        for rs in sets:
            if (
                not controlled_by_uid(rs, live["metadata"].get("uid"))
                or product_of(rs["spec"].get("template")) == target
            ):
                continue
            if int(rs["spec"].get("replicas") or 0) > 0:
                self._release(isvc, rs)
                ready += _ready(rs)
                events.append(
                    EventRecord(
                        "Normal",
                        c.REASON_OLD_PODS_KEPT,
                        f"{rs['spec'].get('replicas')} pod(s) on {product_of(rs['spec'].get('template'))} "
                        f"(ReplicaSet {rs['metadata']['name']}) serve until the {p.status.replicas} "
                        f"replica(s) on {target} are ready",
                    )
                )
        return Handover(released_ready=ready, events=events)

    def _release(self, isvc: InferenceService, rs: dict[str, Any]) -> None:
        """Hand the ReplicaSet from the Deployment to the InferenceService (at the version read)."""
        meta = rs["metadata"]
        patch = {
            "metadata": {
                "resourceVersion": meta["resourceVersion"],
                "ownerReferences": [owner_reference(isvc)],
                "labels": {c.LABEL_RELEASED_BY_MOVE: "true"},
            }
        }
        self.deps.kube.merge_patch(REPLICA_SETS, isvc.namespace, meta["name"], patch)

    def finish(self, p: ReconcilePass) -> list[EventRecord]:
        """Step 3, once the Deployment has rolled out on the new product: the released pods go."""
        isvc = p.isvc
        gone = [rs for rs in self._replica_sets(isvc) if _released(rs, isvc)]
        for rs in gone:
            meta = rs["metadata"]
            self.deps.kube.delete(REPLICA_SETS, isvc.namespace, meta["name"], uid=meta["uid"])
        if not gone:
            return []
        pods = sum(int(rs["spec"].get("replicas") or 0) for rs in gone)
        products = sorted({product_of(rs["spec"].get("template")) or "?" for rs in gone})
        now = p.status.gpu.product if p.status.gpu else None
        why = f"every replica on {now} is ready" if now else "the Deployment has rolled out"
        return [
            EventRecord("Normal", c.REASON_OLD_PODS_GONE, f"{pods} pod(s) on {', '.join(products)} go: {why}")
        ]
