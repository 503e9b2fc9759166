import json

from tailpilot.api.engine import (
    BuildOutcome,
    BuildResult,
    ProfileResult,
    ProfileSummary,
    ProfileSummaryPoint,
    ReloadCost,
    ServiceTimeModel,
)
from tailpilot.controllers.reconcile.build_state import (
    BuildPhase,
    assess_build,
    assess_profile,
    parse_result,
    profile_notes,
)

#: The uid the API server gave the Job; its own pods name it in their controller owner reference.
JOB_UID = "job-uid-1"


def job(*conditions):
    return {
        "metadata": {"name": "j", "uid": JOB_UID},
        "status": {
            "conditions": [
                {
                    "type": t,
                    "status": "True",
                    "lastTransitionTime": "2026-01-01T00:00:00Z",
                    "reason": r,
                    "message": m,
                }
                for t, r, m in conditions
            ]
        },
    }


def owned_by(uid):
    return [{"apiVersion": "batch/v1", "kind": "Job", "name": "j", "uid": uid, "controller": True}]


def pod(
    phase,
    *,
    exit_code=None,
    message=None,
    created="2026-01-01T00:00:00Z",
    node="gpu-h100-0",
    owner=JOB_UID,
):
    status = {"phase": phase, "containerStatuses": [{"name": "build", "state": {"running": {}}}]}
    if exit_code is not None:
        terminated = {"exitCode": exit_code}
        if message is not None:
            terminated["message"] = message
        status["containerStatuses"][0]["state"] = {"terminated": terminated}
    meta = {"creationTimestamp": created, "labels": {"job-name": "j"}}
    if owner is not None:
        meta["ownerReferences"] = owned_by(owner)
    return {"metadata": meta, "spec": {"nodeName": node}, "status": status}


KEY = "0123456789abcdef0123456789abcdef"
OK = BuildResult(
    outcome=BuildOutcome.SUCCEEDED, engine_key=KEY, artifact=f"pvc://e/{KEY}", triton_backend="python"
)
BAD = BuildResult(outcome=BuildOutcome.FAILED, reason="ModelChecksumMismatch", message="sha256 differs")


def test_absent_and_running():
    assert assess_build(None, []).phase is BuildPhase.ABSENT
    state = assess_build(job(), [pod("Running")])
    assert state.phase is BuildPhase.RUNNING and state.node == "gpu-h100-0"


def test_success_carries_the_result():
    state = assess_build(
        job(("Complete", "", "")), [pod("Succeeded", exit_code=0, message=OK.to_termination_message())]
    )
    assert state.phase is BuildPhase.SUCCEEDED and state.result == OK


def test_complete_without_result_is_a_failure():
    state = assess_build(job(("Complete", "", "")), [pod("Succeeded", exit_code=0)])
    assert state.phase is BuildPhase.FAILED and state.reason == "BuildResultMissing"


def test_failure_reports_the_builders_reason_and_message():
    state = assess_build(
        job(("Failed", "BackoffLimitExceeded", "Job has reached the specified backoff limit")),
        [pod("Failed", exit_code=1, message=BAD.to_termination_message())],
    )
    assert (state.phase, state.reason, state.message) == (
        BuildPhase.FAILED,
        "ModelChecksumMismatch",
        "sha256 differs",
    )


def test_failure_with_plain_text_message_and_retrying_job():
    state = assess_build(
        job(),
        [pod("Failed", exit_code=3, message="out of memory"), pod("Running", created="2026-01-01T00:01:00Z")],
    )
    assert state.phase is BuildPhase.RUNNING and state.failed_pods == 1
    assert state.reason == "EngineBuildFailed" and "code 3: out of memory" in state.message


def test_parse_result_rejects_non_results():
    assert parse_result("not json") is None
    assert parse_result(json.dumps({"hello": 1})) is None
    assert parse_result(OK.to_termination_message()) == OK


def test_an_unschedulable_build_pod_says_why():
    pending = {
        "metadata": {"creationTimestamp": "2026-01-01T00:00:00Z", "ownerReferences": owned_by(JOB_UID)},
        "spec": {},
        "status": {
            "phase": "Pending",
            "conditions": [
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": "Unschedulable",
                    "message": 'persistentvolumeclaim "models" not found',
                }
            ],
        },
    }
    state = assess_build(job(), [pending])
    assert state.phase is BuildPhase.RUNNING
    assert state.waiting == 'build pod unschedulable: persistentvolumeclaim "models" not found'


def test_a_running_build_pod_is_not_waiting():
    assert assess_build(job(), [pod("Running")]).waiting == ""


def _summary(**update: object) -> ProfileSummary:
    base = ProfileSummary(
        hardware="cpu",
        service_time=ServiceTimeModel(intercept_ms=0.0, per_item_ms=95.9),
        points=[ProfileSummaryPoint(batch_size=1, p99_ms=157.4, throughput_per_s=10.4)],
    )
    return base.model_copy(update=update)


def test_the_engine_built_event_says_what_the_profile_was_measured_under() -> None:
    summary = _summary(
        cpu_limit_millis=600, reload=ReloadCost(seconds=4.86, served_share=0.63, worst_latency_ms=290.0)
    )
    note, warning = profile_notes(summary, serving_cpu_limit_millis=600)
    assert note == (
        "profiled on cpu under a CPU limit of 600m; a live reload took 4.9 s, keeping 63% of the throughput"
    )
    assert warning == ""
    assert profile_notes(None, serving_cpu_limit_millis=600) == ("", "")


def test_a_profile_measured_without_the_pods_cpu_limit_is_a_warning() -> None:
    note, warning = profile_notes(_summary(), serving_cpu_limit_millis=500)
    assert note == "profiled on cpu"
    assert warning.startswith("the engine was profiled under no CPU limit, but its pods are limited to 500m")
    other = profile_notes(_summary(cpu_limit_millis=2000), serving_cpu_limit_millis=500)[1]
    assert "under a CPU limit of 2000m" in other
    # Pods without a limit, and GPU engines, have nothing to compare.
    assert profile_notes(_summary(cpu_limit_millis=600), serving_cpu_limit_millis=None)[1] == ""
    assert profile_notes(_summary(hardware="NVIDIA-L4"), serving_cpu_limit_millis=500)[1] == ""


def profile_pod(phase, *, exit_code=None, message=None):
    """A profile Job pod: the Triton sidecar in initContainerStatuses, the profiler the only container."""
    state = (
        {"running": {}} if exit_code is None else {"terminated": {"exitCode": exit_code, "message": message}}
    )
    return {
        "metadata": {"creationTimestamp": "2026-01-01T00:00:00Z", "ownerReferences": owned_by(JOB_UID)},
        "spec": {"nodeName": "gpu-h100-0"},
        "status": {
            "phase": phase,
            "initContainerStatuses": [
                {"name": "model-repository", "state": {"terminated": {"exitCode": 0}}},
                # The sidecar stopped by the kubelet once the profiler exited: not the result.
                {"name": "triton", "state": {"terminated": {"exitCode": 143, "message": "signal"}}},
            ],
            "containerStatuses": [{"name": "profile", "state": state}],
        },
    }


SUMMARY = ProfileSummary(
    hardware="NVIDIA-H100-80GB-HBM3",
    service_time=ServiceTimeModel(intercept_ms=1.0, per_item_ms=0.1),
    points=[ProfileSummaryPoint(batch_size=1, p99_ms=1.2, throughput_per_s=900.0)],
)


def test_a_profile_jobs_result_comes_from_its_profiler_container():
    measured = ProfileResult(outcome=BuildOutcome.SUCCEEDED, profile_key="p" * 20, profile=SUMMARY)
    state = assess_profile(
        job(("Complete", "", "")),
        [profile_pod("Succeeded", exit_code=0, message=measured.to_termination_message())],
    )
    assert (state.phase, state.result) == (BuildPhase.SUCCEEDED, measured)
    running = assess_profile(job(), [profile_pod("Running")])
    assert (running.phase, running.result) == (BuildPhase.RUNNING, None)


def test_a_failed_profile_keeps_its_reason_and_a_silent_one_is_named():
    failed = ProfileResult(outcome=BuildOutcome.FAILED, reason="ProfileFailed", message="batch 8 failed")
    state = assess_profile(
        job(("Failed", "BackoffLimitExceeded", "")),
        [profile_pod("Failed", exit_code=1, message=failed.to_termination_message())],
    )
    assert (state.phase, state.reason, state.message) == (
        BuildPhase.FAILED,
        "ProfileFailed",
        "batch 8 failed",
    )
    silent = assess_profile(job(("Complete", "", "")), [profile_pod("Succeeded", exit_code=0)])
    assert (silent.phase, silent.reason) == (BuildPhase.FAILED, "ProfileResultMissing")
    deadline = assess_profile(job(("Failed", "DeadlineExceeded", "Job was active longer than specified")), [])
    assert (deadline.phase, deadline.reason) == (BuildPhase.FAILED, "DeadlineExceeded")


def test_a_profile_result_sheds_points_rather_than_its_fit_to_fit_the_message_limit():
    many = SUMMARY.model_copy(
        update={
            "points": [
                ProfileSummaryPoint(batch_size=b, p99_ms=1.0 + b, throughput_per_s=1000.0 + b)
                for b in range(1, 200)
            ]
        }
    )
    text = ProfileResult(
        outcome=BuildOutcome.SUCCEEDED, profile_key="p" * 20, profile=many
    ).to_termination_message()
    assert len(text.encode()) <= 4096
    kept = ProfileResult.model_validate_json(text)
    assert kept.profile is not None and kept.profile.service_time == SUMMARY.service_time
    assert 0 < len(kept.profile.points) < 199 and kept.profile.points[0].batch_size == 1


def test_a_build_result_from_an_older_builder_with_a_profile_still_reads():
    older = json.loads(OK.to_termination_message()) | {
        "profile": SUMMARY.model_dump(mode="json", by_alias=True)
    }
    assert parse_result(json.dumps(older)) == OK


# Results are read from the Job's own pods only ----------------------------------------------------

#: A result someone else wrote: a pod of their own, labelled with the Job's name, finished later.
FORGED = BuildResult(
    outcome=BuildOutcome.SUCCEEDED, engine_key="f" * 32, artifact="pvc://e/forged", triton_backend="python"
)


def test_a_pod_with_the_jobs_label_but_not_its_controller_is_not_read():
    real = pod("Succeeded", exit_code=0, message=OK.to_termination_message())
    for owner in (None, "another-job-uid"):
        forged = pod(
            "Succeeded",
            exit_code=0,
            message=FORGED.to_termination_message(),
            created="2026-01-01T00:05:00Z",
            owner=owner,
        )
        state = assess_build(job(("Complete", "", "")), [real, forged])
        assert (state.phase, state.result) == (BuildPhase.SUCCEEDED, OK), owner
        # Alone, it is no result at all: the Job completed without one.
        alone = assess_build(job(("Complete", "", "")), [forged])
        assert (alone.phase, alone.reason, alone.result) == (BuildPhase.FAILED, "BuildResultMissing", None)
    # A forged pod that failed is not counted as the Job's failed attempt either.
    failed = pod("Failed", exit_code=1, message=BAD.to_termination_message(), owner="another-job-uid")
    assert assess_build(job(), [failed, pod("Running")]).failed_pods == 0


def test_a_profile_is_read_from_the_jobs_own_pod_only():
    measured = ProfileResult(outcome=BuildOutcome.SUCCEEDED, profile_key="p" * 20, profile=SUMMARY)
    forged = profile_pod("Succeeded", exit_code=0, message=measured.to_termination_message())
    forged["metadata"]["ownerReferences"] = owned_by("another-job-uid")
    state = assess_profile(job(("Complete", "", "")), [forged])
    assert (state.phase, state.reason) == (BuildPhase.FAILED, "ProfileResultMissing")


def test_the_state_names_the_jobs_uid_that_a_delete_must_match():
    assert assess_build(job(("Failed", "BackoffLimitExceeded", "")), []).job_uid == JOB_UID
    assert assess_build(None, []).job_uid == ""


def test_an_engine_key_that_is_not_a_hex_digest_is_no_result():
    for key in ("$(reboot)", "../../etc", "abc", "A" * 32, "0" * 32 + ";sh", "0" * 65):
        text = json.dumps({"outcome": "Succeeded", "engineKey": key, "tritonBackend": "python"})
        assert parse_result(text) is None, key
        state = assess_build(job(("Complete", "", "")), [pod("Succeeded", exit_code=0, message=text)])
        assert (state.phase, state.reason) == (BuildPhase.FAILED, "BuildResultUnreadable"), key
    # A success must name its engine; a failure need not.
    assert parse_result(json.dumps({"outcome": "Succeeded"})) is None
    assert parse_result(BAD.to_termination_message()) == BAD
