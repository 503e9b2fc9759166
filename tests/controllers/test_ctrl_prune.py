"""Pruning the optional children a spec turned off: only this service's, one lookup per spec generation."""

from __future__ import annotations

import dataclasses
from typing import Any

from tailpilot.api import constants as c
from tailpilot.api.v1alpha1 import InferenceService
from tailpilot.controllers.core.admin_key import AdminKey
from tailpilot.controllers.core.kubeapi import Resource
from tailpilot.controllers.core.settings import OperatorSettings
from tailpilot.controllers.reconcile.reconciler import EventRecord, ReconcilePass, Reconciler
from tailpilot.manifests.children import ClusterCapabilities, plan_children
from tailpilot.manifests.settings import NetworkPolicySettings
from tests.fakes import UnexpectedKube
from tests.manifests.fixtures import SETTINGS, admin_key, build_result, make_isvc


class CountingKube(UnexpectedKube):
    """GETs answered from a dict of live objects; GETs and deletes counted."""

    def __init__(self, live: dict[tuple[str, str], dict[str, Any]]) -> None:
        self.live, self.gets, self.deleted = live, 0, []
        self.delete_uids: list[str | None] = []

    def get(self, resource: Resource, namespace: str, name: str) -> dict[str, Any] | None:
        self.gets += 1
        return self.live.get((resource.kind, name))

    def delete(self, resource: Resource, namespace: str, name: str, *, uid: str | None = None) -> bool:
        self.deleted.append((resource.kind, name))
        self.delete_uids.append(uid)
        return self.live.pop((resource.kind, name), None) is not None


#: The chart's default: every service gets its NetworkPolicy (so it is not among the turned-off children).
WITH_POLICY = dataclasses.replace(SETTINGS, network_policy=NetworkPolicySettings())


def turned_off(builder):  # type: ignore[no-untyped-def]
    isvc = builder.obj()
    children = plan_children(
        isvc=isvc,
        result=build_result(),
        batching=isvc.spec.batching.to_config(),
        replicas=1,
        settings=WITH_POLICY,
        capabilities=ClusterCapabilities(service_monitors=True, prometheus_rules=True),
        admin_key=admin_key(isvc.name),
    )
    return isvc, children.turned_off


def prune(
    reconciler: Reconciler, isvc: InferenceService, unwanted: list[dict[str, Any]], events: list[EventRecord]
) -> int:
    """The children stage's prune, its Events onto `events`: how many children it deleted."""
    pruned = reconciler.children.prune(isvc, unwanted)
    events.extend(pruned.events)
    return pruned.deleted


def test_a_turned_off_child_is_deleted_once_then_not_looked_up_again_until_the_spec_changes():
    isvc, unwanted = turned_off(make_isvc("a").monitoring(serviceMonitor=False))
    assert [o["kind"] for o in unwanted] == ["Service", "ServiceMonitor"]  # metrics Service, monitor
    monitor = next(o for o in unwanted if o["kind"] == "ServiceMonitor")
    foreign = {"metadata": {"name": "a-metrics", "ownerReferences": [{"controller": True, "uid": "other"}]}}
    kube = CountingKube({("ServiceMonitor", "a"): monitor, ("Service", "a-metrics"): foreign})
    reconciler = Reconciler(kube, OperatorSettings(manifests=SETTINGS))
    events: list[EventRecord] = []
    assert prune(reconciler, isvc, unwanted, events) == 1
    assert kube.deleted == [("ServiceMonitor", "a")]  # the other owner's Service is left alone
    assert [e.reason for e in events] == [c.EVENT_CHILD_REMOVED]
    assert kube.gets == 2
    # The next pass confirms the monitor gone; after that, no lookups at this generation.
    assert prune(reconciler, isvc, unwanted, events) == 0
    assert prune(reconciler, isvc, unwanted, events) == 0
    assert kube.gets == 3
    # A new generation looks again (once).
    newer = isvc.model_copy(update={"metadata": {**isvc.metadata, "generation": 2}})
    prune(reconciler, newer, unwanted, events)
    prune(reconciler, newer, unwanted, events)
    assert kube.gets == 5


class RacingKube(CountingKube):
    """A Kube where another owner creates `racer` between our GET and our POST (the POST answers 409)."""

    def __init__(self, racer: tuple[str, str]) -> None:
        super().__init__({})
        self.racer, self.applied, self.created = racer, [], []

    def create(self, body: dict[str, Any]) -> dict[str, Any] | None:
        key = (body["kind"], body["metadata"]["name"])
        if key == self.racer:
            self.live[key] = {
                "metadata": {"name": key[1], "ownerReferences": [{"controller": True, "uid": "x"}]}
            }
            return None
        self.created.append(key)
        self.live[key] = body
        return body

    def apply(self, body: dict[str, Any]) -> dict[str, Any]:
        self.applied.append((body["kind"], body["metadata"]["name"]))
        return body

    def has_resource(self, group: str, version: str, plural: str) -> bool:
        return False


def test_a_child_created_by_another_owner_between_lookup_and_create_is_not_taken_over():
    from tailpilot.api.v1alpha1 import InferenceServiceStatus

    isvc = make_isvc("a").obj()
    kube = RacingKube(("ConfigMap", "a-model-config"))
    reconciler = Reconciler(kube, OperatorSettings(manifests=SETTINGS))
    events: list[EventRecord] = []
    admin = AdminKey(ref=admin_key(isvc.name), value="key")
    p = ReconcilePass(
        body={}, isvc=isvc, admin=admin, status=InferenceServiceStatus(), generation=1, events=events
    )
    reconciler.rollout.apply_children(p, build_result(), reconciler.strategies.of(isvc))
    rollout = p.rollout_condition
    assert rollout is not None
    assert kube.applied == []  # no forced apply over the other owner's object
    assert ("Deployment", "a") in kube.created
    assert (rollout.status, rollout.reason) == ("False", c.REASON_CHILD_NAME_TAKEN)
    assert "ConfigMap a-model-config exists and is not controlled by this InferenceService" in rollout.message
    assert [e.reason for e in events] == [c.REASON_CHILD_NAME_TAKEN]


def test_the_jobs_network_policy_is_never_taken_from_another_owner_and_goes_when_policies_are_off():
    from tailpilot.manifests.network_policy import engine_jobs_network_policy

    isvc = make_isvc("a").obj()
    ours = engine_jobs_network_policy(isvc=isvc)
    foreign = {"metadata": {"name": "a-engine-jobs", "ownerReferences": [{"controller": True, "uid": "x"}]}}
    kube = CountingKube({("NetworkPolicy", "a-engine-jobs"): foreign})
    with_policies = Reconciler(kube, OperatorSettings(manifests=WITH_POLICY))
    message = with_policies.admission.guard_engine_jobs(isvc)
    assert message.startswith("NetworkPolicy a-engine-jobs exists and is not controlled by this")
    assert kube.deleted == []

    without = Reconciler(kube, OperatorSettings(manifests=SETTINGS))
    assert without.admission.guard_engine_jobs(isvc) == ""
    assert kube.deleted == []  # the other owner's policy stays, policies on or off
    kube.live[("NetworkPolicy", "a-engine-jobs")] = ours  # the service's own, from a time they were on
    newer = isvc.model_copy(update={"metadata": {**isvc.metadata, "generation": 2}})
    assert without.admission.guard_engine_jobs(newer) == ""
    assert kube.deleted == [("NetworkPolicy", "a-engine-jobs")]
