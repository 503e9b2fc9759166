"""TensorRT: exact trtexec commands per case, and the build path with a stand-in trtexec.

TensorRT cannot be installed on these machines; the stand-in is a small script
that records its arguments and writes a plan file, injected through
BuildSettings.trtexec exactly as a real trtexec path would be.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from onnx import TensorProto

from tailpilot.api.engine import BuildOutcome, BuildRequest, ShapeProfile
from tailpilot.builders.build import BuildSettings, run_build
from tailpilot.builders.errors import (
    CALIBRATION_REQUIRED,
    TENSORRT_UNAVAILABLE,
    UNSUPPORTED_SERVING_VARIANT,
    UNSUPPORTED_TARGET,
)
from tailpilot.builders.model_info import TensorInfo
from tailpilot.builders.store import EngineStore
from tailpilot.builders.tensorrt import find_trtexec, gpu_product_label, is_calibration_cache, trtexec_command
from tailpilot.manifests.triton_model_config import GPU_PRODUCT_PARAMETER, from_pbtxt

IMAGE = (TensorInfo("input", TensorProto.FLOAT, (None, 3, 64, 64)),)
GPU = "NVIDIA-H100-80GB-HBM3"


def command(precision: str, **kw: object) -> list[str]:
    args: dict[str, object] = {
        "trtexec": "trtexec",
        "onnx_path": Path("/w/model.onnx"),
        "plan_path": Path("/w/model.plan"),
        "inputs": IMAGE,
        "shapes": (),
        "max_batch_size": 16,
        "precision": precision,
        "timing_cache": Path("/store/timing-cache/gpu.cache"),
    }
    args.update(kw)
    return trtexec_command(**args)  # type: ignore[arg-type]


COMMON = [
    "trtexec",
    "--onnx=/w/model.onnx",
    "--saveEngine=/w/model.plan",
    "--minShapes=input:1x3x64x64",
    "--optShapes=input:16x3x64x64",
    "--maxShapes=input:16x3x64x64",
    "--timingCacheFile=/store/timing-cache/gpu.cache",
    "--skipInference",
]


def test_fp32_command() -> None:
    assert command("fp32") == COMMON


def test_fp16_command() -> None:
    assert command("fp16") == [*COMMON, "--fp16"]


def test_int8_with_calibration_cache() -> None:
    assert command("int8", calibration_cache=Path("/w/calib.cache")) == [
        *COMMON,
        "--int8",
        "--calib=/w/calib.cache",
    ]


def test_int8_explicit_qdq_model_has_no_calib_flag() -> None:
    assert command("int8") == [*COMMON, "--int8"]


def test_dynamic_dims_follow_the_profile_and_batch_follows_the_bounds() -> None:
    inputs = (
        TensorInfo("tokens", TensorProto.INT64, (None, None)),
        TensorInfo("mask", TensorProto.INT64, (None, None)),
    )
    shapes = (
        ShapeProfile(input="tokens", min=(1,), opt=(128,), max=(512,)),
        ShapeProfile(input="mask", min=(1,), opt=(128,), max=(512,)),
    )
    cmd = command("fp16", inputs=inputs, shapes=shapes, max_batch_size=32, opt_batch_size=8)
    assert "--minShapes=tokens:1x1,mask:1x1" in cmd
    assert "--optShapes=tokens:8x128,mask:8x128" in cmd
    assert "--maxShapes=tokens:32x512,mask:32x512" in cmd


def test_opt_batch_outside_bounds_and_unknown_precision_are_refused() -> None:
    with pytest.raises(ValueError, match="outside 1..16"):
        command("fp32", opt_batch_size=17)
    with pytest.raises(ValueError, match="unknown precision"):
        command("bf16")


def test_calibration_cache_detection_and_gpu_labels() -> None:
    assert is_calibration_cache(b"TRT-8601-EntropyCalibration2\n")
    assert not is_calibration_cache(b"PK\x03\x04")  # an .npz (zip) file
    assert gpu_product_label("NVIDIA H100 80GB HBM3") == GPU


def test_find_trtexec_prefers_path() -> None:
    assert find_trtexec(lambda name: f"/opt/bin/{name}") == "/opt/bin/trtexec"


@pytest.fixture
def fake_trtexec(tmp_path: Path) -> tuple[str, Path]:
    """A stand-in trtexec: prints a version banner, records argv, writes the plan file."""
    record = tmp_path / "trtexec-args.json"
    script = tmp_path / "trtexec"
    script.write_text(
        f"#!{sys.executable}\n"
        "import json, sys\n"
        "if '--help' in sys.argv:\n"
        "    print('&&&& RUNNING TensorRT.trtexec [TensorRT v100300] # trtexec --help')\n"
        "    sys.exit(0)\n"
        f"open({str(record)!r}, 'w').write(json.dumps(sys.argv[1:]))\n"
        "plan = next(a.split('=', 1)[1] for a in sys.argv if a.startswith('--saveEngine='))\n"
        "open(plan, 'wb').write(b'fake plan')\n"
    )
    script.chmod(0o755)
    return str(script), record


def trt_request(make_request: Callable[..., BuildRequest], **kw: object) -> BuildRequest:
    return make_request(backend="tensorrt", serving_variant="native", target=GPU, **kw)


def test_tensorrt_build_publishes_a_plan_pinned_to_its_gpu(
    make_request: Callable[..., BuildRequest], fake_trtexec: tuple[str, Path], store: Path
) -> None:
    trtexec, record = fake_trtexec
    request = trt_request(make_request, precision="fp16")
    result = run_build(request, BuildSettings(trtexec=trtexec), progress=lambda _: None)
    assert result.outcome == BuildOutcome.SUCCEEDED, result.message
    assert result.triton_backend == "tensorrt"
    args = json.loads(record.read_text())
    assert "--fp16" in args
    assert "--maxShapes=input:16x3x64x64" in args
    assert f"--timingCacheFile={store / 'timing-cache' / (GPU + '.cache')}" in args
    model_dir = Path(result.artifact) / "repository" / "model"
    assert (model_dir / "1" / "model.plan").read_bytes() == b"fake plan"
    config = from_pbtxt((model_dir / "config.pbtxt").read_text())
    assert config.parameters[GPU_PRODUCT_PARAMETER].string_value == GPU
    manifest = EngineStore(store).read_manifest(result.engine_key)
    assert manifest.library_versions["tensorrt"] == "100300"
    assert "--fp16" in manifest.method


def test_tensorrt_int8_from_calibration_inputs_builds_an_explicit_qdq_model(
    make_request: Callable[..., BuildRequest], fake_trtexec: tuple[str, Path], calibration: Path
) -> None:
    trtexec, record = fake_trtexec
    request = trt_request(make_request, precision="int8", calibration_uri=str(calibration))
    result = run_build(request, BuildSettings(trtexec=trtexec), progress=lambda _: None)
    assert result.outcome == BuildOutcome.SUCCEEDED, result.message
    args = json.loads(record.read_text())
    assert "--int8" in args
    assert not any(a.startswith("--calib=") for a in args)
    assert next(a for a in args if a.startswith("--onnx=")).endswith("qdq.onnx")


def test_tensorrt_int8_with_a_calibration_cache_passes_it(
    make_request: Callable[..., BuildRequest], fake_trtexec: tuple[str, Path], tmp_path: Path
) -> None:
    trtexec, record = fake_trtexec
    cache = tmp_path / "calib.cache"
    cache.write_text("TRT-100300-EntropyCalibration2\ninput: 3c010a14\n")
    request = trt_request(make_request, precision="int8", calibration_uri=str(cache))
    result = run_build(request, BuildSettings(trtexec=trtexec), progress=lambda _: None)
    assert result.outcome == BuildOutcome.SUCCEEDED, result.message
    args = json.loads(record.read_text())
    assert any(a.startswith("--calib=") and a.endswith("calibration.bin") for a in args)


@pytest.mark.parametrize(
    ("overrides", "settings", "reason", "phrase"),
    [
        ({"precision": "fp16"}, BuildSettings(trtexec=None), TENSORRT_UNAVAILABLE, "trtexec"),
        (
            {"precision": "int8"},
            BuildSettings(trtexec="/x/trtexec"),
            CALIBRATION_REQUIRED,
            "calibration data",
        ),
        ({"target": "cpu"}, BuildSettings(trtexec="/x/trtexec"), UNSUPPORTED_TARGET, "GPU target"),
        (
            {"serving_variant": "python"},
            BuildSettings(trtexec="/x/trtexec"),
            UNSUPPORTED_SERVING_VARIANT,
            "python",
        ),
        ({}, BuildSettings(trtexec="/x/trtexec", gpu_name="NVIDIA A10"), UNSUPPORTED_TARGET, "NVIDIA-A10"),
    ],
)
def test_tensorrt_refusals_fail_fast_and_publish_nothing(
    make_request: Callable[..., BuildRequest],
    store: Path,
    overrides: dict[str, object],
    settings: BuildSettings,
    reason: str,
    phrase: str,
) -> None:
    # The model URI does not exist: a refusal that fetched first would say ModelUnreachable instead.
    request = trt_request(make_request, model_uri="/nonexistent/model.onnx").model_copy(update=overrides)
    result = run_build(request, settings, progress=lambda _: None)
    assert (result.outcome, result.reason) == (BuildOutcome.FAILED, reason)
    assert phrase in result.message
    assert EngineStore(store).published_keys() == []
