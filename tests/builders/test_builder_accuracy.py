"""The accuracy guard: an engine's outputs against the FP32 model's, and the refusal outside tolerance."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tailpilot.api.engine import AccuracyTolerance, BuildOutcome, BuildRequest
from tailpilot.builders.accuracy import compare_outputs
from tailpilot.builders.build import BuildSettings, run_build
from tailpilot.builders.store import EngineStore

TOLERANCE = AccuracyTolerance()  # the spec's defaults: 0.1 relative error, 90% top-1 agreement


def test_compare_outputs_measures_relative_error_and_top1_agreement() -> None:
    reference = {"y": np.array([[1.0, 2.0, 0.0], [3.0, 0.0, -4.0]])}
    engine = {"y": np.array([[1.0, 1.5, 0.0], [3.0, 0.0, -3.6]])}
    report = compare_outputs(reference, engine, inputs="generated")
    # Largest difference 0.5 over the largest |reference| 4.
    assert report.max_relative_error == pytest.approx(0.125)
    assert report.mean_absolute_error == pytest.approx(0.9 / 6)
    assert report.top1_agreement == 1.0 and report.samples == 2
    flipped = compare_outputs(
        reference, {"y": np.array([[3.0, 2.0, 0.0], [3.0, 0.0, -4.0]])}, inputs="generated"
    )
    assert flipped.top1_agreement == 0.5
    assert flipped.violations(TOLERANCE) == ["max relative error 0.5000 > 0.1", "top-1 agreement 50.0% < 90%"]
    # A non-finite output is as far off as it gets.
    broken = compare_outputs(reference, {"y": np.full((2, 3), np.nan)}, inputs="generated")
    assert broken.violations(TOLERANCE)
    # One value per input: no classes to agree on.
    assert (
        compare_outputs({"s": np.ones((4, 1))}, {"s": np.ones((4, 1))}, inputs="generated").top1_agreement
        is None
    )


def quantization_breaking_model(path: Path) -> Path:
    """A linear classifier whose classes differ only by weights far smaller than one shared large one.

    Every class gets 10 * x[0]; what tells them apart is weights of about 1e-3. INT8 weights with
    one scale for the tensor (the scale is set by the 10) round all of those to zero: the quantized
    engine's scores are equal for every class, and its arg-max is no longer the model's.
    """
    rng = np.random.default_rng(1)
    weights = (rng.standard_normal((64, 10)) * 1e-3).astype(np.float32)
    weights[0, :] = 10.0
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W"], ["y"])],
        "breaks-under-int8",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, 10])],
        [numpy_helper.from_array(weights, "W")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


def test_an_int8_engine_that_quantization_breaks_is_refused_with_its_figures(
    make_request: Callable[..., BuildRequest], tmp_path: Path, store: Path
) -> None:
    model = quantization_breaking_model(tmp_path / "breaks.onnx")
    request = make_request(model_uri=str(model), precision="int8", accuracy_tolerance=TOLERANCE)
    result = run_build(request, BuildSettings(), progress=lambda _: None)
    assert (result.outcome, result.reason) == (BuildOutcome.FAILED, "AccuracyOutOfTolerance")
    assert "top-1 agreement" in result.message and "spec.engine.accuracyTolerance" in result.message
    # Its FP32 engine is fine: the guard judges the precision, not the model.
    fp32 = run_build(
        make_request(model_uri=str(model), precision="fp32", accuracy_tolerance=TOLERANCE),
        BuildSettings(),
        progress=lambda _: None,
    )
    assert fp32.outcome == BuildOutcome.SUCCEEDED, fp32.message
    assert fp32.accuracy is not None and fp32.accuracy.top1_agreement == 1.0
    # The refused engine was published with its figures: a looser tolerance is a cache hit, judged again.
    loose = request.model_copy(update={"accuracy_tolerance": AccuracyTolerance(min_top1_agreement=0.0)})
    accepted = run_build(loose, BuildSettings(), progress=lambda _: None)
    assert (accepted.outcome, accepted.cache_hit) == (BuildOutcome.SUCCEEDED, True)
    assert accepted.accuracy is not None and accepted.accuracy.top1_agreement is not None
    assert accepted.accuracy.top1_agreement < 0.5  # measured 3% (2026-12-01)
    manifest = EngineStore(store).read_manifest(accepted.engine_key)
    assert manifest.accuracy == accepted.accuracy


def test_the_example_models_int8_engine_is_accepted(
    make_request: Callable[..., BuildRequest], calibration: Path
) -> None:
    request = make_request(precision="int8", calibration_uri=str(calibration), accuracy_tolerance=TOLERANCE)
    lines: list[str] = []
    result = run_build(request, BuildSettings(), progress=lines.append)
    assert result.outcome == BuildOutcome.SUCCEEDED, result.message
    report = result.accuracy
    assert report is not None and report.checked and report.inputs == "calibration"
    assert not report.violations(TOLERANCE)
    # Quantized, so not identical: the check would pass vacuously if it compared the model with itself.
    assert report.max_relative_error > 0
    assert any(line.startswith("accuracy: against the FP32 model on") for line in lines)
