"""A failed build: retried with back-off when the model's content may be fixed, not when the spec is wrong."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from tailpilot.api import constants as c
from tailpilot.api.v1alpha1 import BuildStatus, InferenceServiceStatus
from tailpilot.builders import errors
from tailpilot.controllers.core.admin_key import AdminKey
from tailpilot.controllers.core.settings import OperatorSettings
from tailpilot.controllers.reconcile.build_state import BuildPhase, JobState
from tailpilot.controllers.reconcile.reconciler import EventRecord, ReconcilePass, Reconciler
from tests.controllers.test_ctrl_prune import CountingKube
from tests.manifests.fixtures import SETTINGS, admin_key, make_isvc

LONG_AGO = "2020-01-01T00:00:00Z"  # the back-off of any attempt is over
JOB_UID = "build-job-uid"


def fail(
    reason: str, *, finished_at: str = LONG_AGO
) -> tuple[object, InferenceServiceStatus, list[str], list[EventRecord]]:
    kube = CountingKube({})
    reconciler = Reconciler(kube, OperatorSettings(manifests=SETTINGS))
    build = BuildStatus(request_key="k", job_name="svc-build-k", attempt=1, phase="Running")
    state = JobState(
        phase=BuildPhase.FAILED,
        reason=reason,
        message="the request says so",
        finished_at=finished_at,
        job_uid=JOB_UID,
    )
    events: list[EventRecord] = []
    isvc = make_isvc("svc").obj()
    admin = AdminKey(ref=admin_key(isvc.name), value="key")
    p = ReconcilePass(
        body={},
        isvc=isvc,
        admin=admin,
        status=InferenceServiceStatus(build=build),
        generation=1,
        events=events,
    )
    reconciler.engine.failed(p, state, build)  # the decision under test
    condition, status = p.engine_ready, p.status
    # Every delete names the uid of the Job the state was read from.
    assert set(kube.delete_uids) <= {JOB_UID}
    return condition, status, [name for _, name in kube.deleted], events


@pytest.mark.parametrize("reason", sorted(c.TERMINAL_BUILD_REASONS | c.TERMINAL_RESULT_REASONS))
def test_a_build_the_spec_makes_fail_is_not_retried(reason: str) -> None:
    condition, status, deleted, events = fail(reason)
    assert deleted == []  # the failed Job stays: no attempt 2
    assert status.build is not None and (status.build.phase, status.build.attempt) == ("Failed", 1)
    assert condition.reason == reason and "not retried" in condition.message  # type: ignore[attr-defined]
    assert [e.reason for e in events] == [reason]  # told once


@pytest.mark.parametrize(
    "reason",
    # A full store too: a later build's GC or an administrator can free it; the engine serving
    # meanwhile is untouched (a failed build never changes status.engine).
    [
        errors.MODEL_UNREACHABLE,
        errors.MODEL_CHECKSUM_MISMATCH,
        errors.INVALID_MODEL,
        errors.ENGINE_STORE_FULL,
    ],
)
def test_a_build_the_models_content_makes_fail_is_retried_after_its_back_off(reason: str) -> None:
    condition, status, deleted, _ = fail(reason)
    assert deleted == ["svc-build-k"]  # dropped: the next pass starts attempt 2 under the same name
    assert status.build is not None and (status.build.phase, status.build.attempt) == ("Retrying", 2)
    assert "retrying, attempt 2" in condition.message  # type: ignore[attr-defined]


def test_every_terminal_reason_is_one_a_build_reports() -> None:
    reported = {
        getattr(errors, n) for n in dir(errors) if n.isupper() and isinstance(getattr(errors, n), str)
    }
    assert c.TERMINAL_BUILD_REASONS <= reported


def test_a_retried_build_waits_out_its_back_off_first() -> None:
    just_now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    condition, status, deleted, _ = fail(errors.MODEL_UNREACHABLE, finished_at=just_now)
    assert deleted == []  # not yet: the Job stays until its back-off (30 s for attempt 1) is over
    assert status.build is not None and (status.build.phase, status.build.attempt) == ("Failed", 1)
    assert "attempt 1; retry in" in condition.message  # type: ignore[attr-defined]
