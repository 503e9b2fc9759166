"""The recipe of docs/architecture.md, "Adding a rollout strategy", followed with a toy strategy.

A strategy is a class that is a `reconcile.strategy.Strategy`, registered by the value of
`spec.rollout.strategy`. This test registers a toy one (in a registry of its own, in place of
`rolling`, since the spec's values are the API's) and runs one whole reconcile pass over an
in-memory cluster: the new engine that passed the gate is the toy's to serve or hold, and the
rollout stage asks it for its replicas, what follows the writes and the after-rollout word.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from tailpilot.api import constants as c
from tailpilot.api.engine import ProfileSummary
from tailpilot.api.v1alpha1 import EngineStatus, InferenceServiceStatus
from tailpilot.controllers.core.conditions import ConditionUpdate
from tailpilot.controllers.core.events import EventRecord
from tailpilot.controllers.core.kubeapi import Resource
from tailpilot.controllers.core.settings import OperatorSettings
from tailpilot.controllers.core.status import decode_status, encode_status, engine_status
from tailpilot.controllers.reconcile.deps import PassDeps
from tailpilot.controllers.reconcile.pass_context import ReconcilePass
from tailpilot.controllers.reconcile.reconciler import Reconciler
from tailpilot.controllers.reconcile.strategies import StrategyRegistry
from tailpilot.controllers.reconcile.strategy import RolloutView, Strategy
from tailpilot.manifests import build_job as job_manifests
from tailpilot.manifests.children import CanaryPlan
from tailpilot.manifests.meta import owner_reference
from tests.fakes import UnexpectedKube
from tests.manifests.fixtures import SETTINGS, build_result, make_isvc

SERVING_KEY, NEW_KEY = "d" * 40, "f" * 40


class ToyStrategy:
    """Holds every new engine, and says what it was asked."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    def engine_passed(
        self, p: ReconcilePass, deps: PassDeps, built: EngineStatus, summary: ProfileSummary | None
    ) -> None:
        self.asked.append(f"engine_passed {built.key[:12]}")
        message = f"engine {built.key[:12]} held by the toy"
        p.events.append(EventRecord("Normal", "ToyHeld", message))
        p.gate[:] = [ConditionUpdate(c.CONDITION_ROLLOUT_BLOCKED, c.STATUS_TRUE, "ToyHeld", message)]
        p.engine_is(ConditionUpdate(c.CONDITION_ENGINE_READY, c.STATUS_FALSE, "ToyHeld", message), 7.0)

    def in_flight(self, status: InferenceServiceStatus) -> bool:
        return False

    def extra_replicas(self, status: InferenceServiceStatus) -> CanaryPlan | None:
        self.asked.append("extra_replicas")
        return None

    def follow(self, p: ReconcilePass, deps: PassDeps, view: RolloutView) -> None:
        self.asked.append(f"follow {len(view.wanted)} children")

    def after_rollout(self, p: ReconcilePass, deps: PassDeps) -> None:
        self.asked.append("after_rollout")


class MemoryKube(UnexpectedKube):
    """A cluster of one namespace in a dict, by (kind, name); status patches and Events recorded."""

    def __init__(self, objects: list[dict[str, Any]], pods: list[dict[str, Any]]) -> None:
        self.objects = {(o["kind"], o["metadata"]["name"]): o for o in objects}
        self.pods = pods
        self.patches: list[dict[str, Any]] = []
        self.events: list[str] = []

    def get(self, resource: Resource, namespace: str, name: str) -> dict[str, Any] | None:
        return self.objects.get((resource.kind, name))

    def list(
        self, resource: Resource, namespace: str | None, *, label_selector: str = "", field_selector: str = ""
    ) -> list[dict[str, Any]]:
        return list(self.pods) if resource.kind == "Pod" and label_selector.startswith("job-name=") else []

    def create(self, body: dict[str, Any]) -> dict[str, Any] | None:
        key = (body["kind"], body["metadata"]["name"])
        if key in self.objects:
            return None
        body["metadata"].setdefault("uid", f"uid-{key[1]}")
        self.objects[key] = body
        return body

    def dry_run_create(self, body: dict[str, Any]) -> dict[str, Any]:
        return body

    def apply(self, body: dict[str, Any]) -> dict[str, Any]:
        self.objects[(body["kind"], body["metadata"]["name"])] = body
        return body

    def patch_status(self, body: dict[str, Any], patch: dict[str, Any]) -> object:
        self.patches.append(patch)
        return body

    def post_event(
        self, involved: dict[str, Any], *, type_: str, reason: str, message: str, now: str
    ) -> None:
        self.events.append(reason)

    def has_resource(self, group: str, version: str, plural: str) -> bool:
        return False


def _cluster() -> MemoryKube:
    """A service serving one engine, and the succeeded build Job of the engine its spec now asks for."""
    isvc = make_isvc("svc").obj()
    body = isvc.model_dump(by_alias=True, mode="json", exclude_none=True)
    body["spec"].setdefault("engine", {})["profile"] = False  # no profile Job: straight to the strategy
    serving = engine_status(build_result(SERVING_KEY), request_key="an-earlier-request", built_at=None)
    body["status"] = encode_status(InferenceServiceStatus(engine=serving))
    pinned = isvc.model_validate(body)
    key = job_manifests.make_build_request(isvc=pinned).request_key()
    name = job_manifests.build_job_name(isvc_name=isvc.name, request_key=key)
    done = {"type": "Complete", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"}
    job = {
        "kind": "Job",
        "metadata": {
            "name": name,
            "uid": "build-uid",
            "ownerReferences": [owner_reference(isvc)],
            "labels": {c.LABEL_MANAGED_BY: c.MANAGED_BY},
        },
        "status": {"conditions": [done]},
    }
    result = json.dumps(build_result(NEW_KEY).model_dump(by_alias=True, mode="json"))
    pod = {
        "metadata": {
            "creationTimestamp": "2026-01-01T00:00:00Z",
            "ownerReferences": [{"kind": "Job", "name": name, "uid": "build-uid", "controller": True}],
        },
        "status": {
            "phase": "Succeeded",
            "containerStatuses": [
                {"name": "build", "state": {"terminated": {"exitCode": 0, "message": result}}}
            ],
        },
    }
    return MemoryKube([body, job], [pod])


def test_a_registered_strategy_is_the_one_the_reconciler_asks() -> None:
    toy = ToyStrategy()
    _strategy: Strategy = toy  # the Protocol, checked by mypy
    # Step 3 of the recipe: register it by the spec's value (here in place of the built-in one).
    strategies = StrategyRegistry()
    with pytest.raises(ValueError, match="registered already"):
        strategies.register("rolling", toy)
    strategies.register("rolling", toy, replace=True)
    kube = _cluster()
    reconciler = Reconciler(kube, OperatorSettings(manifests=SETTINGS), strategies=strategies)

    result = reconciler.reconcile("ml", "svc")

    # The engine stage gave the new engine to the toy; the rollout stage asked it at every point.
    assert toy.asked[0] == f"engine_passed {NEW_KEY[:12]}"
    assert toy.asked[1] == "extra_replicas"
    assert toy.asked[2].startswith("follow ") and toy.asked[3:] == ["after_rollout"]
    # What it said is what the pass wrote: the engine held, the serving one still served.
    assert result.status_written and result.requeue_after == 7.0
    status = decode_status(kube.patches[-1])
    reasons = {x.type: x.reason for x in status.conditions}
    assert reasons[c.CONDITION_ENGINE_READY] == "ToyHeld"
    assert reasons[c.CONDITION_ROLLOUT_BLOCKED] == "ToyHeld"
    assert status.engine is not None and status.engine.key == SERVING_KEY
    assert "ToyHeld" in kube.events


def test_the_built_in_strategies_are_the_specs_values() -> None:
    from tailpilot.api.v1alpha1 import RolloutStrategy

    assert StrategyRegistry().names() == sorted(s.value for s in RolloutStrategy)
