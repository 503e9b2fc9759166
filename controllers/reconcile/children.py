"""The service's children on the cluster: apply one (never another owner's), prune those not wanted."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from tailpilot.api import constants as c
from tailpilot.api.v1alpha1 import InferenceService
from tailpilot.controllers.core.events import EventRecord
from tailpilot.controllers.core.kubeapi import PODS, resource_of
from tailpilot.controllers.reconcile import drift
from tailpilot.controllers.reconcile.deps import PassDeps
from tailpilot.manifests.meta import controlled_by, selector_string
from tailpilot.manifests.service import rotation_selectable


@dataclass(frozen=True)
class AppliedChild:
    """A child after `Children.apply`: as it now is, how many writes that took, or that its name is taken."""

    live: dict[str, Any] | None
    written: int
    #: An object this service does not control holds the child's name: left alone.
    taken: bool = False
    events: list[EventRecord] = field(default_factory=list)


@dataclass(frozen=True)
class Pruned:
    """What `Children.prune` deleted: how many, and the Events that say so."""

    deleted: int
    events: list[EventRecord] = field(default_factory=list)


class Children:
    """Writes and deletes of the service's children, with what the operator remembers between passes."""

    def __init__(self, deps: PassDeps) -> None:
        self.deps = deps
        self._monitoring_crds: bool | None = None
        #: Turned-off children known gone, per (service uid, kind, name): the spec generation that
        #: was checked. A pass looks one up again only after the spec changes, not on every pass.
        self._gone: dict[tuple[str, str, str], int] = {}

    def monitoring_crds(self) -> bool:
        """Whether the prometheus-operator CRDs are installed (checked once, then cached)."""
        if self._monitoring_crds is None:
            self._monitoring_crds = self.deps.kube.has_resource(
                "monitoring.coreos.com", "v1", "servicemonitors"
            )
        return self._monitoring_crds

    def apply(self, isvc: InferenceService, obj: dict[str, Any]) -> AppliedChild:
        """Create `obj` or bring it to the desired state; never touch one this service does not control."""
        kube = self.deps.kube
        resource, name = resource_of(obj), obj["metadata"]["name"]
        # Wanted again (a new canary): a later pass that no longer wants it must look it up.
        self._gone.pop((str(isvc.metadata.get("uid", "")), resource.kind, name), None)
        live = kube.get(resource, isvc.namespace, name)
        if live is not None and not controlled_by(live, isvc):
            return AppliedChild(live=None, written=0, taken=True)
        outcome = drift.plan(obj, live)
        if outcome is drift.Outcome.CREATE:
            created = kube.create(obj)
            if created is None:  # created meanwhile: ours (a pass before) or someone else's
                live = kube.get(resource, isvc.namespace, name)
                if live is not None and not controlled_by(live, isvc):
                    return AppliedChild(live=None, written=0, taken=True)
            return AppliedChild(live=created if created is not None else kube.apply(obj), written=1)
        if outcome is drift.Outcome.UPDATE:
            updated = EventRecord(
                "Normal",
                "Updated",
                f"{resource.kind} {name} brought back to the desired state (spec change or drift)",
            )
            return AppliedChild(live=kube.apply(obj), written=1, events=[updated])
        return AppliedChild(live=live, written=0)

    def prune(
        self,
        isvc: InferenceService,
        unwanted: Iterable[dict[str, Any]],
        *,
        why: str = "the spec turned it off",
    ) -> Pruned:
        """Delete the optional children the spec turned off, only those this service controls.

        One GET per child and spec generation: once a child is gone (or not this service's), it
        stays so until the spec changes, since only this operator creates it, and only when the
        spec turns it on.
        """
        kube = self.deps.kube
        deleted, events = 0, []
        uid, generation = str(isvc.metadata.get("uid", "")), int(isvc.metadata.get("generation", 0))
        for obj in unwanted:
            resource, name = resource_of(obj), obj["metadata"]["name"]
            key = (uid, resource.kind, name)
            if self._gone.get(key) == generation:
                continue
            live = kube.get(resource, isvc.namespace, name)
            if live is None or not controlled_by(live, isvc):
                self._gone[key] = generation
                continue
            # By the uid checked: an object that took the name since the read is not deleted.
            uid_seen = str(live["metadata"].get("uid") or "") or None
            if kube.delete(resource, isvc.namespace, name, uid=uid_seen):
                deleted += 1
                events.append(
                    EventRecord("Normal", c.EVENT_CHILD_REMOVED, f"{resource.kind} {name} removed: {why}")
                )
        return Pruned(deleted, events)

    def rotation_selectable(self, isvc: InferenceService) -> bool:
        """Whether spec.autoscaling.backlogRotation is on and every pod carries the label (one pod LIST)."""
        if not isvc.spec.autoscaling.backlog_rotation:
            return False
        pods = self.deps.kube.list(PODS, isvc.namespace, label_selector=selector_string(isvc.name))
        return rotation_selectable(pods)
