"""Builds of real ONNX Runtime engines (no Triton): cache behaviour, bad inputs, the CLI contract."""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable
from pathlib import Path

import onnx
import pytest

from tailpilot.api.engine import (
    BatchProfilePoint,
    BuildOutcome,
    BuildRequest,
    BuildResult,
    EngineProfile,
    ProfileRequest,
    ProfileResult,
    ServiceTimeModel,
    ShapeProfile,
)
from tailpilot.builders.build import BuildSettings, run_build
from tailpilot.builders.cli import build_main, profile_main
from tailpilot.builders.errors import (
    INVALID_MODEL,
    MODEL_CHECKSUM_MISMATCH,
    MODEL_UNREACHABLE,
    SHAPE_PROFILE_MISMATCH,
    UNSUPPORTED_PRECISION,
    UNSUPPORTED_SERVING_VARIANT,
)
from tailpilot.builders.example_model import write_example_model
from tailpilot.builders.store import EngineStore
from tailpilot.builders.triton_server import free_port

SETTINGS = BuildSettings()


def build(request: BuildRequest, lines: list[str] | None = None) -> BuildResult:
    sink = lines if lines is not None else []
    return run_build(request, SETTINGS, progress=sink.append)


def test_fp32_build_publishes_a_complete_engine(
    make_request: Callable[..., BuildRequest], store: Path
) -> None:
    lines: list[str] = []
    result = build(make_request(), lines)
    assert result.outcome == BuildOutcome.SUCCEEDED, result.message
    assert not result.cache_hit
    # What the engine was built from, for status.engine: a local file has no source revision.
    model_sha256 = hashlib.sha256(Path(make_request().model_uri).read_bytes()).hexdigest()
    assert (result.model_sha256, result.model_revision) == (model_sha256, "")
    engine = Path(result.artifact)
    assert engine == store / "engines" / result.engine_key
    manifest = EngineStore(store).read_manifest(result.engine_key)
    assert set(manifest.files) == {
        "repository/model/config.pbtxt",
        "repository/model/1/model.onnx",
        "repository/model/1/model.py",
    }
    optimized = onnx.load_model(str(engine / "repository/model/1/model.onnx"))
    # Offline optimization folded the BatchNormalization nodes into the convolutions.
    assert not [n for n in optimized.graph.node if n.op_type == "BatchNormalization"]
    assert any("published" in line for line in lines)
    assert list((store / "tmp").iterdir()) == []


def test_same_request_is_a_fast_no_op_and_changes_give_new_keys(
    make_request: Callable[..., BuildRequest], example_model: Path, tmp_path: Path
) -> None:
    pinned = make_request(model_sha256=hashlib.sha256(example_model.read_bytes()).hexdigest())
    first = build(pinned)
    assert first.outcome == BuildOutcome.SUCCEEDED, first.message
    manifest_mtime = (Path(first.artifact) / "manifest.json").stat().st_mtime_ns

    started = time.monotonic()
    again = build(pinned)
    elapsed = time.monotonic() - started
    assert (again.engine_key, again.cache_hit) == (first.engine_key, True)
    assert again.model_sha256 == first.model_sha256 == pinned.model_sha256  # the stored manifest's
    assert elapsed < 1.0
    assert (Path(first.artifact) / "manifest.json").stat().st_mtime_ns == manifest_mtime

    # Without a pinned sha256 the model is re-read and hashed, and still found by content.
    unpinned = build(make_request())
    assert (unpinned.engine_key, unpinned.cache_hit) == (first.engine_key, True)

    other_model = write_example_model(tmp_path / "other.onnx", seed=7)
    changed = [
        build(make_request(precision="int8")),
        build(make_request(max_batch_size=8)),
        build(make_request(serving_variant="native")),
        build(make_request(model_uri=str(other_model))),
    ]
    keys = {c.engine_key for c in changed}
    assert all(c.outcome == BuildOutcome.SUCCEEDED and not c.cache_hit for c in changed)
    assert len(keys) == 4 and first.engine_key not in keys


def assert_failed_fast(result: BuildResult, store: Path, reason: str, phrase: str, started: float) -> None:
    assert (result.outcome, result.reason) == (BuildOutcome.FAILED, reason), result.message
    assert phrase in result.message
    assert time.monotonic() - started < 10.0
    assert EngineStore(store).published_keys() == []
    assert not (store / "tmp").exists() or list((store / "tmp").iterdir()) == []


@pytest.mark.parametrize(
    ("content", "phrase"),
    [
        (b"\x00\xff garbage that is not protobuf \x12\x34" * 10, "bad.onnx"),
        (b"name,value\n1,2\n", "bad.onnx"),
    ],
)
def test_non_onnx_files_are_invalid_models(
    make_request: Callable[..., BuildRequest], store: Path, tmp_path: Path, content: bytes, phrase: str
) -> None:
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(content)
    started = time.monotonic()
    result = build(make_request(model_uri=str(bad)))
    assert_failed_fast(result, store, INVALID_MODEL, phrase, started)


def test_truncated_model_is_invalid(
    make_request: Callable[..., BuildRequest], example_model: Path, store: Path, tmp_path: Path
) -> None:
    cut = tmp_path / "cut.onnx"
    cut.write_bytes(example_model.read_bytes()[:50_000])
    started = time.monotonic()
    assert_failed_fast(build(make_request(model_uri=str(cut))), store, INVALID_MODEL, "cut.onnx", started)


def test_sha256_mismatch(make_request: Callable[..., BuildRequest], store: Path) -> None:
    started = time.monotonic()
    result = build(make_request(model_sha256="0" * 64))
    assert_failed_fast(result, store, MODEL_CHECKSUM_MISMATCH, "0" * 64, started)


def test_missing_file_and_unreachable_url(make_request: Callable[..., BuildRequest], store: Path) -> None:
    started = time.monotonic()
    result = build(make_request(model_uri="pvc://claim/models/none.onnx"))
    assert_failed_fast(result, store, MODEL_UNREACHABLE, "claim/models/none.onnx", started)
    # Nothing listens on a port that was just free: connection refused at once.
    url = f"https://127.0.0.1:{free_port()}/model.onnx"
    started = time.monotonic()
    result = build(make_request(model_uri=url, model_sha256="0" * 64))
    assert_failed_fast(result, store, MODEL_UNREACHABLE, url, started)


def test_shape_profile_contradicting_the_model(
    make_request: Callable[..., BuildRequest], store: Path
) -> None:
    profile = ShapeProfile(input="input", min=(3, 32, 32), opt=(3, 64, 64), max=(3, 128, 128))
    started = time.monotonic()
    result = build(make_request(shapes=(profile,)))
    assert_failed_fast(result, store, SHAPE_PROFILE_MISMATCH, "fixed at 64", started)


def test_fp16_on_cpu_is_refused(make_request: Callable[..., BuildRequest], store: Path) -> None:
    started = time.monotonic()
    assert_failed_fast(
        build(make_request(precision="fp16")), store, UNSUPPORTED_PRECISION, "GPU target", started
    )


def test_python_variant_refuses_a_gpu_target(make_request: Callable[..., BuildRequest], store: Path) -> None:
    started = time.monotonic()
    result = build(make_request(target="NVIDIA-L4"))
    assert_failed_fast(result, store, UNSUPPORTED_SERVING_VARIANT, "NVIDIA-L4", started)


def test_fp16_for_a_gpu_target_converts_the_model(make_request: Callable[..., BuildRequest]) -> None:
    result = build(make_request(precision="fp16", target="NVIDIA-L4", serving_variant="native"))
    assert result.outcome == BuildOutcome.SUCCEEDED, result.message
    model = onnx.load_model(str(Path(result.artifact) / "repository/model/1/model.onnx"))
    assert any(init.data_type == onnx.TensorProto.FLOAT16 for init in model.graph.initializer)
    assert model.graph.input[0].type.tensor_type.elem_type == onnx.TensorProto.FLOAT


def test_cli_writes_the_result_file_and_exit_code(
    make_request: Callable[..., BuildRequest], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    result_file = tmp_path / "termination-log"
    request_file = tmp_path / "request.json"
    request_file.write_text(make_request().model_dump_json(by_alias=True))
    assert build_main(["--request", str(request_file), "--result-file", str(result_file)]) == 0
    written = BuildResult.model_validate_json(result_file.read_text())
    assert written.outcome == BuildOutcome.SUCCEEDED
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["engineKey"] == written.engine_key

    bad = make_request(model_sha256="1" * 64).model_dump_json(by_alias=True)
    assert build_main(["--request", bad, "--result-file", str(result_file)]) == 1
    failed = json.loads(result_file.read_text())
    assert failed["reason"] == MODEL_CHECKSUM_MISMATCH
    assert build_main(["--request", '{"backend": "onnxruntime"}', "--result-file", str(result_file)]) == 2
    assert json.loads(result_file.read_text())["reason"] == "InvalidBuildRequest"


def test_profile_cli_reports_a_bad_request_in_the_form_the_operator_reads(tmp_path: Path) -> None:
    result_file = tmp_path / "termination-log"
    assert profile_main(["--request", '{"engineKey": "x"}', "--result-file", str(result_file)]) == 2
    failed = ProfileResult.model_validate_json(result_file.read_text())
    assert (failed.outcome, failed.reason) == (BuildOutcome.FAILED, "InvalidProfileRequest")
    request = ProfileRequest(
        engine_key="e" * 32, model_name="m", triton_backend="python", max_batch_size=1, triton_image="t"
    ).model_dump_json(by_alias=True)
    # A valid request without the Triton to measure is a bad request too, not a failed profile.
    assert profile_main(["--request", request, "--result-file", str(result_file)]) == 2
    assert "--triton-url" in ProfileResult.model_validate_json(result_file.read_text()).message


def _profile_file(path: Path, *, factor: float) -> Path:
    profile = EngineProfile(
        engine_key="e" * 32,
        backend="python",
        precision="fp32",
        hardware="cpu",
        max_batch_size=16,
        points=[BatchProfilePoint(batch_size=1, p99_ms=3.0 * factor, throughput_per_s=400.0 / factor)],
        service_time=ServiceTimeModel(intercept_ms=2.0 * factor, per_item_ms=0.5 * factor, jitter_cv=0.05),
    )
    path.write_text(profile.model_dump_json(by_alias=True))
    return path


def test_profile_compare_gates_a_users_ci_on_a_regression(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    baseline = _profile_file(tmp_path / "baseline.json", factor=1.0)
    same = _profile_file(tmp_path / "same.json", factor=1.1)
    slower = _profile_file(tmp_path / "slower.json", factor=1.5)
    assert profile_main(["--profile", str(same), "--compare", str(baseline)]) == 0
    assert capsys.readouterr().out.startswith("ok: ")
    assert profile_main(["--profile", str(slower), "--compare", str(baseline), "--rate", "500"]) == 3
    out = capsys.readouterr().out
    assert out.startswith("REGRESSION: at 500.0 req/s on 1 replica(s)") and "threshold 20%" in out
    # A looser threshold lets the same engine through.
    args = ["--profile", str(slower), "--compare", str(baseline), "--max-regression-percent", "60"]
    assert profile_main(args) == 0


@pytest.mark.parametrize(
    "damage",
    [
        lambda engine: (engine / "repository/model/1/model.onnx").write_bytes(b"bit rot"),
        lambda engine: (engine / "repository/model/1/model.py").unlink(),
        lambda engine: (engine / "manifest.json").write_text("{ cut mid-stri"),
    ],
    ids=["a-file-changed", "a-file-lost", "the-manifest-cut"],
)
def test_a_damaged_engine_in_the_store_is_built_again_not_served(
    make_request: Callable[..., BuildRequest], example_model: Path, damage: Callable[[Path], object]
) -> None:
    pinned = make_request(model_sha256=hashlib.sha256(example_model.read_bytes()).hexdigest())
    first = build(pinned)
    assert first.outcome == BuildOutcome.SUCCEEDED, first.message
    damage(Path(first.artifact))
    lines: list[str] = []
    again = build(pinned, lines)  # the request index points at the damaged engine
    assert (again.outcome, again.engine_key, again.cache_hit) == (
        BuildOutcome.SUCCEEDED,
        first.engine_key,
        False,
    )
    assert any("is damaged" in line for line in lines), lines
    assert EngineStore(Path(first.artifact).parent.parent).damage(first.engine_key) is None
    assert build(pinned).cache_hit  # whole again: the next build finds it
