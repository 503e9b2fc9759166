"""The last cold start in the reconcile pass: the episode and the pod's times onto the status, once."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from tailpilot.api import constants as c
from tailpilot.api.v1alpha1 import InferenceService, InferenceServiceStatus
from tailpilot.controllers.core.admin_key import AdminKey
from tailpilot.controllers.core.kubeapi import PODS, Resource
from tailpilot.controllers.core.settings import OperatorSettings
from tailpilot.controllers.core.status import decode_status, encode_status
from tailpilot.controllers.reconcile.cold_start import ColdStartReport
from tailpilot.controllers.reconcile.deps import PassDeps
from tailpilot.controllers.reconcile.pass_context import ReconcilePass
from tailpilot.controllers.reconcile.reconciler import Reconciler
from tailpilot.controllers.reconcile.strategies import StrategyRegistry
from tailpilot.manifests.meta import selector_string
from tests.controllers.test_rollout_strategy_recipe import MemoryKube, ToyStrategy, _cluster
from tests.fakes import FakeClock, UnexpectedKube
from tests.manifests.fixtures import SETTINGS, admin_key, make_isvc

EPISODE = (
    '{"heldAt":"2026-12-06T05:31:30.123Z","wokeAt":"2026-12-06T05:31:30.161Z",'
    '"backendReadyAt":"2026-12-06T05:32:14.623Z","answeredAt":"2026-12-06T05:32:14.743Z"}'
)
LATER_EPISODE = (
    '{"heldAt":"2026-12-06T07:00:00.000Z","wokeAt":"2026-12-06T07:00:00.050Z",'
    '"backendReadyAt":"2026-12-06T07:00:40.000Z","answeredAt":"2026-12-06T07:00:40.100Z"}'
)


def serving_pod(name: str, *, ready: str) -> dict[str, Any]:
    """A serving pod as the API server returns it: created 05:31:31, Ready at `ready`."""

    def condition(type_: str, at: str) -> dict[str, str]:
        return {"type": type_, "status": "True", "lastTransitionTime": at}

    def started(container: str, at: str, phase: str = "running") -> dict[str, Any]:
        return {"name": container, "state": {phase: {"startedAt": at}}}

    return {
        "metadata": {"name": name, "creationTimestamp": "2026-12-06T05:31:31Z"},
        "status": {
            "conditions": [
                condition("PodScheduled", "2026-12-06T05:31:32Z"),
                condition("Initialized", "2026-12-06T05:31:50Z"),
                condition("Ready", ready),
            ],
            "initContainerStatuses": [started("model-repository", "2026-12-06T05:31:42Z", "terminated")],
            "containerStatuses": [started("triton", "2026-12-06T05:31:51Z")],
        },
    }


class Pods(UnexpectedKube):
    """The service's pods, listed by its selector only."""

    def __init__(self, pods: list[dict[str, Any]]) -> None:
        self.pods, self.lists = pods, 0

    def list(self, resource: Resource, namespace: str | None, /, **selectors: str) -> list[dict[str, Any]]:
        assert resource is PODS and namespace == "ml"
        assert selectors["label_selector"] == selector_string("zero")
        self.lists += 1
        return self.pods


def service(annotation: str | None) -> InferenceService:
    obj = make_isvc("zero").autoscaling(minReplicas=0).obj()
    if annotation is not None:
        obj.metadata["annotations"] = {c.ANNOTATION_COLD_START: annotation}
    return obj


def a_pass(isvc: InferenceService, status: InferenceServiceStatus | None = None) -> ReconcilePass:
    admin = AdminKey(ref=admin_key(isvc.name), value="key")
    return ReconcilePass(
        body={}, isvc=isvc, admin=admin, status=status or InferenceServiceStatus(), generation=1
    )


def report(kube: UnexpectedKube) -> ColdStartReport:
    settings = OperatorSettings(manifests=SETTINGS)
    return ColdStartReport(PassDeps(kube=kube, settings=settings, clock=FakeClock()))  # type: ignore[arg-type]


PODS_SEEN = [
    serving_pod("zero-old", ready="2026-12-06T04:00:00Z"),  # Ready before the hold: not this cold start's
    serving_pod("zero-second", ready="2026-12-06T05:32:20Z"),
    serving_pod("zero-first", ready="2026-12-06T05:32:13Z"),
]


def test_a_new_episode_is_broken_down_with_the_first_pod_ready_since_the_hold_and_told_once() -> None:
    kube = Pods(PODS_SEEN)
    stage = report(kube)
    p = a_pass(service(EPISODE))
    stage.run(p)
    cold = p.status.cold_start
    assert cold is not None and cold.pod == "zero-first"
    assert cold.total_seconds == 44.62
    assert [(part.name, part.seconds) for part in cold.parts] == [
        ("wakeRequest", 0.038),
        ("podCreation", 0.839),
        ("scheduling", 1.0),
        ("podStartAndImagePull", 10.0),
        ("engineFetch", 8.0),
        ("containerStart", 1.0),
        ("serverStartAndModelLoad", 22.0),
        ("endpointPropagation", 1.623),
        ("firstInference", 0.12),
    ]
    assert abs(sum(part.seconds for part in cold.parts) - cold.total_seconds) < 1e-9
    [event] = p.events
    assert (event.type, event.reason) == ("Normal", c.EVENT_COLD_START)
    assert event.message.startswith(
        "cold start of 44.620 s (first request held at 2026-12-06T05:31:30.123+00:00): wakeRequest 0.038 s, "
        "podCreation 0.839 s, scheduling 1.000 s"
    )
    assert event.message.endswith("firstInference 0.120 s (pod zero-first)")
    # The next pass reads the same annotation: told already, and no pod is listed for it.
    again = a_pass(p.isvc, p.status)
    stage.run(again)
    assert again.status == p.status and again.events == [] and kube.lists == 1
    # A later cold start replaces it.
    later = a_pass(service(LATER_EPISODE), p.status)
    stage.run(later)
    assert later.status.cold_start is not None and later.status.cold_start.total_seconds == 40.1
    assert [e.reason for e in later.events] == [c.EVENT_COLD_START]


def test_the_status_holds_it_as_written_so_a_pass_does_not_write_it_again() -> None:
    p = a_pass(service(EPISODE))
    report(Pods(PODS_SEEN)).run(p)
    stored = encode_status(p.status)
    assert stored["coldStart"]["heldAt"] == "2026-12-06T05:31:30.123000Z"
    assert stored["coldStart"]["parts"][0] == {"name": "wakeRequest", "seconds": 0.038}
    assert decode_status(stored) == p.status


def test_with_no_pod_found_the_pods_parts_are_merged_and_said() -> None:
    p = a_pass(service(EPISODE))
    report(Pods([serving_pod("zero-old", ready="2026-12-06T04:00:00Z")])).run(p)
    cold = p.status.cold_start
    assert cold is not None and cold.pod == ""
    assert [part.name for part in cold.parts][0] == "wakeRequest"
    assert cold.parts[1].name.startswith("podCreation+scheduling+")
    assert "no serving pod found" in p.events[0].message


def test_an_unreadable_annotation_is_logged_once_and_leaves_the_pass_alone(
    caplog: pytest.LogCaptureFixture,
) -> None:
    stage = report(UnexpectedKube())  # nothing is read for it
    with caplog.at_level(logging.WARNING, logger="tailpilot.controllers.reconcile.cold_start"):
        for _ in range(3):
            p = a_pass(service('{"heldAt": "soon"}'))
            stage.run(p)
            assert p.status.cold_start is None and p.events == []
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 1
    assert "ml/zero: ignoring the annotation tailpilot.io/cold-start" in warnings[0]
    no_annotation = a_pass(service(None))
    stage.run(no_annotation)
    assert no_annotation.events == []


class ServingCluster(MemoryKube):
    """The recipe's in-memory cluster, with the service's serving pods listed by its selector."""

    def __init__(self, base: MemoryKube, serving: list[dict[str, Any]]) -> None:
        super().__init__(list(base.objects.values()), base.pods)
        self.serving = serving

    def list(
        self, resource: Resource, namespace: str | None, *, label_selector: str = "", field_selector: str = ""
    ) -> list[dict[str, Any]]:
        if resource is PODS and label_selector == selector_string("svc"):
            return self.serving
        return super().list(resource, namespace, label_selector=label_selector, field_selector=field_selector)


def test_a_whole_pass_writes_the_cold_start_and_posts_its_event() -> None:
    kube = ServingCluster(_cluster(), [serving_pod("svc-first", ready="2026-12-06T05:32:13Z")])
    kube.objects[("InferenceService", "svc")]["metadata"]["annotations"] = {c.ANNOTATION_COLD_START: EPISODE}
    strategies = StrategyRegistry()
    strategies.register("rolling", ToyStrategy(), replace=True)
    reconciler = Reconciler(kube, OperatorSettings(manifests=SETTINGS), strategies=strategies)
    assert reconciler.reconcile("ml", "svc").status_written
    cold = decode_status(kube.patches[-1]).cold_start
    assert cold is not None and cold.pod == "svc-first" and cold.total_seconds == 44.62
    assert c.EVENT_COLD_START in kube.events
