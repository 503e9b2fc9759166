"""Engine Jobs are the service's own: a Job of the name it does not own is never read or deleted."""

from __future__ import annotations

from typing import Any

from tailpilot.api import constants as c
from tailpilot.api.engine import BuildOutcome, BuildRequest, BuildResult
from tailpilot.api.v1alpha1 import InferenceService, InferenceServiceStatus, ProfilingStatus
from tailpilot.controllers.core.admin_key import AdminKey
from tailpilot.controllers.core.conditions import ConditionUpdate
from tailpilot.controllers.core.kubeapi import Kube, Resource
from tailpilot.controllers.core.settings import OperatorSettings
from tailpilot.controllers.reconcile.reconciler import EventRecord, ReconcilePass, Reconciler
from tailpilot.manifests import build_job as job_manifests
from tailpilot.manifests import profile_job as profile_manifests
from tailpilot.manifests.meta import owner_reference
from tests.fakes import UnexpectedKube
from tests.manifests.fixtures import SETTINGS, admin_key, make_isvc

KEY = "0123456789abcdef0123456789abcdef"
LONG_AGO = "2020-01-01T00:00:00Z"  # any back-off is over


class JobsKube(UnexpectedKube):
    """Jobs and pods by name; every list, create and delete recorded."""

    def __init__(self, jobs: dict[str, dict[str, Any]], pods: list[dict[str, Any]] | None = None) -> None:
        self.jobs, self.pods = jobs, pods or []
        self.listed: list[str] = []
        self.created: list[str] = []
        self.deleted: list[tuple[str, str | None]] = []

    def get(self, resource: Resource, namespace: str, name: str) -> dict[str, Any] | None:
        return self.jobs.get(name) if resource.kind == "Job" else None

    def list(
        self, resource: Resource, namespace: str | None, *, label_selector: str = "", field_selector: str = ""
    ) -> list[dict[str, Any]]:
        self.listed.append(label_selector)
        return list(self.pods) if resource.kind == "Pod" else []

    def create(self, body: dict[str, Any]) -> dict[str, Any] | None:
        self.created.append(body["metadata"]["name"])
        return body

    def delete(self, resource: Resource, namespace: str, name: str, *, uid: str | None = None) -> bool:
        self.deleted.append((name, uid))
        return True


def _job(name: str, *, owners: list[dict[str, Any]], labels: dict[str, str], failed: bool = False) -> dict:  # type: ignore[type-arg]
    conditions = (
        [
            {
                "type": "Failed",
                "status": "True",
                "reason": "BackoffLimitExceeded",
                "lastTransitionTime": LONG_AGO,
            }
        ]
        if failed
        else []
    )
    return {
        "metadata": {"name": name, "uid": f"uid-of-{name}", "ownerReferences": owners, "labels": labels},
        "status": {"conditions": conditions},
    }


def _setup():  # type: ignore[no-untyped-def]
    isvc = make_isvc("svc").obj()
    request = job_manifests.make_build_request(isvc=isvc)
    key = request.request_key()
    name = job_manifests.build_job_name(isvc_name=isvc.name, request_key=key)
    return isvc, request, key, name


def _engine_stage(
    reconciler: Reconciler,
    isvc: InferenceService,
    status: InferenceServiceStatus,
    request: BuildRequest,
    events: list[EventRecord],
) -> tuple[ConditionUpdate, InferenceServiceStatus]:
    """The engine stage alone over a pass of `status`: EngineReady and the status after it."""
    admin = AdminKey(ref=admin_key(isvc.name), value="key")
    p = ReconcilePass(body={}, isvc=isvc, admin=admin, status=status, generation=1, events=events)
    reconciler.engine.run(p, request)
    return p.engine_ready, p.status


#: The operator's marks on every Job it creates.
MANAGED = {c.LABEL_MANAGED_BY: c.MANAGED_BY}


def test_a_build_job_the_service_does_not_own_is_never_read_created_or_deleted() -> None:
    isvc, request, key, name = _setup()
    ours = owner_reference(isvc)
    for foreign in (
        # Another owner's Job (or none) under the build's name...
        _job(
            name, owners=[{"kind": "Deployment", "uid": "x", "controller": True}], labels=MANAGED, failed=True
        ),
        _job(name, owners=[], labels={}, failed=True),
        # ...or one pointing at the service but without the operator's label: not made by it either.
        _job(name, owners=[ours], labels={}, failed=True),
    ):
        kube = JobsKube({name: foreign})
        reconciler = Reconciler(kube, OperatorSettings(manifests=SETTINGS))
        status, events = InferenceServiceStatus(), []  # type: ignore[var-annotated]
        for _ in range(3):  # three passes: told once
            condition, status = _engine_stage(reconciler, isvc, status, request, events)
        assert kube.listed == [] and kube.created == [] and kube.deleted == []
        assert (condition.status, condition.reason) == (c.STATUS_FALSE, c.REASON_CHILD_NAME_TAKEN)
        assert f"Job {name}" in condition.message and "never deleted" in condition.message
        assert [e.reason for e in events] == [c.REASON_CHILD_NAME_TAKEN]
        assert status.build is not None and status.build.reason == c.REASON_CHILD_NAME_TAKEN


def test_the_services_own_failed_build_job_is_deleted_by_the_uid_it_was_read_with() -> None:
    isvc, request, key, name = _setup()
    ours = _job(name, owners=[owner_reference(isvc)], labels=MANAGED, failed=True)
    kube = JobsKube({name: ours})
    reconciler = Reconciler(kube, OperatorSettings(manifests=SETTINGS))
    events: list[EventRecord] = []
    condition, status = _engine_stage(reconciler, isvc, InferenceServiceStatus(), request, events)
    assert kube.listed == [f"job-name={name}"]
    # Only that Job: a Job that took the name after the read has another uid, and the API server
    # refuses the delete (the uid precondition).
    assert kube.deleted == [(name, f"uid-of-{name}")]
    assert status.build is not None and status.build.phase == "Retrying"


def test_a_profile_job_the_service_does_not_own_is_never_read_and_the_engine_waits() -> None:
    isvc = make_isvc("svc").obj()
    request = profile_manifests.make_profile_request(
        isvc=isvc, engine_key=KEY, triton_backend="onnxruntime", settings=SETTINGS
    )
    name = profile_manifests.profile_job_name(isvc_name=isvc.name, profile_key=request.profile_key())
    forged = BuildResult(outcome=BuildOutcome.SUCCEEDED, engine_key=KEY)  # what its pod could claim
    pod = {"metadata": {"labels": {"job-name": name}}, "status": {"message": forged.model_dump_json()}}
    kube = JobsKube({name: _job(name, owners=[], labels={})}, pods=[pod])
    reconciler = Reconciler(kube, OperatorSettings(manifests=SETTINGS))
    events: list[EventRecord] = []
    profiling: ProfilingStatus | None = None
    for _ in range(2):
        step = reconciler.profiling.step(isvc, profiling, request)
        events.extend(step.events)
        profiling, summary, done = step.profiling, step.summary, step.done
        assert summary is None and done is False
    assert profiling is not None and profiling.reason == c.REASON_CHILD_NAME_TAKEN
    assert f"Job {name}" in profiling.message
    assert kube.listed == [] and kube.created == [] and kube.deleted == []
    assert [e.reason for e in events] == [c.REASON_CHILD_NAME_TAKEN]


def test_a_delete_by_uid_carries_the_precondition_and_a_conflict_leaves_the_object() -> None:
    from kubernetes.client.exceptions import ApiException

    from tailpilot.controllers.core.kubeapi import JOBS

    sent: list[tuple[str, str, Any]] = []
    kube = Kube.__new__(Kube)

    def call(method: str, path: str, *, body: Any = None, **_: Any) -> Any:
        sent.append((method, path, body))
        if len(sent) == 2:
            raise ApiException(status=409, reason="Conflict")  # the name now holds another uid
        return {}

    kube._call = call  # type: ignore[method-assign]
    assert kube.delete(JOBS, "ml", "svc-build-0123456789", uid="u1") is True
    assert sent[0][2] == {"propagationPolicy": "Background", "preconditions": {"uid": "u1"}}
    assert kube.delete(JOBS, "ml", "svc-build-0123456789", uid="u1") is False
