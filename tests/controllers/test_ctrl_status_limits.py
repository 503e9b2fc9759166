"""Every status write fits the CRD's status schema, whatever the builds and models report.

The overflowing values are built as the reconciler builds them (`model_copy(update=...)`, which
does not validate) and checked against the *generated* CRD's status schema with the CEL/schema
simulator, so a bound added to the API without the fitter knowing it fails here.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from tailpilot import crdgen
from tailpilot.api import constants as c
from tailpilot.api.engine import (
    TERMINATION_MESSAGE_LIMIT_BYTES,
    AccuracyReport,
    BuildOutcome,
    BuildResult,
    TensorSpec,
)
from tailpilot.api.v1alpha1 import MAX_TENSORS, BuildStatus, InferenceServiceStatus
from tailpilot.controllers.core.status import (
    CUT_MARKER,
    encode_status,
    engine_status,
    fit_status,
    status_patch,
)
from tailpilot.controllers.reconcile.build_state import BuildPhase, assess_build
from tests.api.crd_sim import validate

STATUS_SCHEMA = crdgen.openapi_schema()["properties"]["status"]
#: An engine key as the builder makes them (a hex digest).
KEY = "0123456789abcdef0123456789abcdef"
NOW = datetime(2026, 1, 1, tzinfo=UTC)


def schema_errors(status: InferenceServiceStatus) -> list[str]:
    return validate(encode_status(status), STATUS_SCHEMA, "status")


def overflowing_status() -> InferenceServiceStatus:
    """A status the way the reconciler makes one after a build failed with a very long message."""
    build = BuildStatus(request_key="r" * 20).model_copy(
        update={
            "phase": "Failed",
            "reason": "EngineBuildFailed",
            # `_failure_text` quotes a whole termination message after its own words.
            "message": "build container exited with code 1: " + "x" * TERMINATION_MESSAGE_LIMIT_BYTES,
        }
    )
    return InferenceServiceStatus().model_copy(update={"build": build})


def test_a_status_past_the_schema_is_cut_to_fit_and_says_what_was_cut() -> None:
    status = overflowing_status()
    assert schema_errors(status), "the test's status must overflow the schema"
    fitted = fit_status(status)
    assert schema_errors(fitted.status) == []
    assert fitted.status.build is not None
    assert len(fitted.status.build.message) == 4096
    assert fitted.status.build.message.startswith("build container exited with code 1: xxx")
    assert fitted.status.build.message.endswith(CUT_MARKER)
    assert fitted.cuts == ("build.message (4132 characters, at most 4096)",)
    # What fits is left alone, and the patch the controllers send is the fitted one.
    assert fit_status(fitted.status).cuts == ()
    assert status_patch(None, status)["build"]["message"] == fitted.status.build.message


def test_nested_lists_and_their_items_are_capped() -> None:
    tensors = tuple(TensorSpec(name=f"t{i}", data_type="TYPE_FP32", dims=(1,)) for i in range(3))
    engine = engine_status(
        BuildResult(outcome=BuildOutcome.SUCCEEDED, engine_key=KEY, inputs=tensors, outputs=tensors),
        request_key="r",
        built_at=NOW,
    )
    many = list(engine.inputs) * 30  # 90 > MAX_TENSORS
    long_name = engine.inputs[0].model_copy(update={"name": "n" * 300, "dims": [1] * 12})
    status = InferenceServiceStatus().model_copy(
        update={"engine": engine.model_copy(update={"inputs": many, "outputs": [long_name]})}
    )
    assert schema_errors(status)
    fitted = fit_status(status)
    assert schema_errors(fitted.status) == []
    assert fitted.status.engine is not None and len(fitted.status.engine.inputs) == MAX_TENSORS
    assert fitted.cuts == (
        f"engine.inputs (90 items, at most {MAX_TENSORS})",
        "engine.outputs[0].name (300 characters, at most 128)",
        "engine.outputs[0].dims (12 items, at most 8)",
    )


def test_an_engine_status_cuts_a_long_accuracy_note_instead_of_raising() -> None:
    result = BuildResult(
        outcome=BuildOutcome.SUCCEEDED,
        engine_key=KEY,
        triton_backend="tensorrt",
        accuracy=AccuracyReport(checked=False, note="n" * 2000),
    )
    engine = engine_status(result, request_key="r", built_at=NOW)
    assert engine.accuracy is not None and len(engine.accuracy.note) == 512
    assert schema_errors(InferenceServiceStatus(engine=engine)) == []


# ---- the termination message ------------------------------------------------------------------


def _job(condition: str) -> dict[str, Any]:
    return {
        "metadata": {"name": "j", "uid": "job-uid"},
        "status": {
            "conditions": [
                {"type": condition, "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"}
            ]
        },
    }


def _pod(exit_code: int, message: str) -> dict[str, Any]:
    terminated = {"exitCode": exit_code, "message": message}
    return {
        "metadata": {
            "creationTimestamp": "2026-01-01T00:00:00Z",
            # The Job's own pod (the operator reads no other).
            "ownerReferences": [{"kind": "Job", "name": "j", "uid": "job-uid", "controller": True}],
        },
        "spec": {"nodeName": "n"},
        "status": {
            "phase": "Succeeded" if exit_code == 0 else "Failed",
            "containerStatuses": [{"name": "build", "state": {"terminated": terminated}}],
        },
    }


def kubelet_cut(text: str) -> str:
    """What the kubelet keeps of a termination message: its first 4096 bytes."""
    return text.encode()[:TERMINATION_MESSAGE_LIMIT_BYTES].decode(errors="ignore")


def test_a_result_cut_mid_string_is_an_unreadable_result_not_a_crash() -> None:
    # A builder that wrote more than the limit (an older one, or a KWOK stage playing a build).
    long = BuildResult(outcome=BuildOutcome.FAILED, reason="EngineBuildFailed", message="é" * 5000)
    cut = kubelet_cut(long.model_dump_json(by_alias=True))
    for condition, exit_code in (("Complete", 0), ("Failed", 1)):
        state = assess_build(_job(condition), [_pod(exit_code, cut)])
        assert state.phase is BuildPhase.FAILED
        assert state.reason == c.REASON_BUILD_RESULT_UNREADABLE
        assert "cut at the kubelet's 4096-byte limit" in state.message
        assert len(state.message) < 400  # a quote of its start, not the whole of it
    assert c.REASON_BUILD_RESULT_UNREADABLE in c.TERMINAL_RESULT_REASONS


def test_a_plain_text_failure_keeps_its_own_words() -> None:
    state = assess_build(_job("Failed"), [_pod(1, "Traceback: out of memory")])
    assert state.reason == "EngineBuildFailed" and "out of memory" in state.message


def test_the_builder_never_writes_a_cut_result() -> None:
    long = BuildResult(outcome=BuildOutcome.FAILED, reason="EngineBuildFailed", message='"é\\' * 3000)
    text = long.to_termination_message()
    assert len(text.encode()) <= TERMINATION_MESSAGE_LIMIT_BYTES
    parsed = BuildResult.model_validate_json(text)
    assert parsed.reason == "EngineBuildFailed" and parsed.message.endswith("[...cut]")
    # Too many tensors to report: a failed result that says so, whole.
    tensors = tuple(
        TensorSpec(name=f"input_{i:03d}_" + "x" * 100, data_type="TYPE_FP32", dims=(3,)) for i in range(60)
    )
    built = BuildResult(outcome=BuildOutcome.SUCCEEDED, engine_key="e" * 64, inputs=tensors)
    text = built.to_termination_message()
    assert len(text.encode()) <= TERMINATION_MESSAGE_LIMIT_BYTES
    parsed = BuildResult.model_validate_json(text)
    assert (parsed.outcome, parsed.reason) == (BuildOutcome.FAILED, "BuildResultTooLarge")
    assert "60 inputs" in parsed.message
    assert "BuildResultTooLarge" in c.TERMINAL_BUILD_REASONS


def test_tensors_past_the_status_schema_fail_the_build_by_name() -> None:
    too_many = tuple(
        TensorSpec(name=f"i{i}", data_type="TYPE_FP32", dims=(1,)) for i in range(MAX_TENSORS + 1)
    )
    long_name = (TensorSpec(name="n" * 129, data_type="TYPE_FP32", dims=(1,)),)
    high_rank = (TensorSpec(name="x", data_type="TYPE_FP32", dims=(1,) * 9),)
    for inputs, expected in (
        (too_many, f"{MAX_TENSORS + 1} inputs (at most {MAX_TENSORS})"),
        (long_name, "name string should have at most 128 characters"),
        (high_rank, "dims list should have at most 8 items"),
    ):
        result = BuildResult(outcome=BuildOutcome.SUCCEEDED, engine_key=KEY, inputs=inputs)
        state = assess_build(_job("Complete"), [_pod(0, json.dumps(result.model_dump(by_alias=True)))])
        assert (state.phase, state.reason) == (BuildPhase.FAILED, c.REASON_ENGINE_TENSORS_TOO_LARGE)
        assert expected in state.message, state.message
    fits = BuildResult(outcome=BuildOutcome.SUCCEEDED, engine_key=KEY, inputs=too_many[:MAX_TENSORS])
    state = assess_build(_job("Complete"), [_pod(0, json.dumps(fits.model_dump(by_alias=True)))])
    assert state.phase is BuildPhase.SUCCEEDED
