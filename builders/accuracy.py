"""The accuracy guard's measurement: an engine's outputs against the FP32 reference model's.

Both models run in ONNX Runtime (CPU) on the same inputs: the request's
calibration inputs when it has them, else seeded standard-normal inputs generated
from the model's signature (dynamic non-batch dimensions at the shape profile's
`opt`, or 1). Per output, the largest absolute difference relative to the
largest absolute reference value and the mean absolute difference; for outputs
with more than one class on their last axis, the share of inputs whose arg-max
agrees (top-1). `compare_outputs` is pure; `measure_accuracy` runs the sessions.

A TensorRT plan cannot run here (no GPU, no TensorRT runtime in the builder's
Python): its report says so and nothing is judged.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np
from onnx import TensorProto

from tailpilot.api.engine import AccuracyReport, ShapeProfile
from tailpilot.builders.model_info import TensorInfo

#: Inputs compared when the build generates them (and the most taken from calibration data).
SAMPLES = 64
#: The error figures of an engine whose outputs are not finite.
_NON_FINITE = 1e9
#: Items per inference run.
_BATCH = 8
_FLOAT_TYPES: dict[int, type[np.floating[Any]]] = {
    int(TensorProto.FLOAT): np.float32,
    int(TensorProto.FLOAT16): np.float16,
    int(TensorProto.DOUBLE): np.float64,
}


def compare_outputs(
    reference: Mapping[str, np.ndarray[Any, Any]],
    engine: Mapping[str, np.ndarray[Any, Any]],
    *,
    inputs: Literal["calibration", "generated"],
) -> AccuracyReport:
    """Compare the engine's outputs with the reference's, output by output (pure)."""
    worst_relative, mean_errors, agreements, samples = 0.0, [], [], 0
    for name, ref in reference.items():
        ref64 = np.asarray(ref, dtype=np.float64)
        got64 = np.asarray(engine[name], dtype=np.float64).reshape(ref64.shape)
        samples = max(samples, ref64.shape[0] if ref64.ndim else 1)
        if not np.all(np.isfinite(got64)):
            # NaN or infinity: as far off as it gets (kept finite, so the report stays valid JSON).
            worst_relative = max(worst_relative, _NON_FINITE)
            mean_errors.append(_NON_FINITE)
            agreements.append(0.0)
            continue
        diff = np.abs(got64 - ref64)
        scale = float(np.max(np.abs(ref64))) if ref64.size else 0.0
        largest = float(np.max(diff)) if diff.size else 0.0
        worst_relative = max(worst_relative, largest / scale if scale > 0 else largest)
        mean_errors.append(float(np.mean(diff)) if diff.size else 0.0)
        if ref64.ndim >= 2 and ref64.shape[-1] > 1:
            agreements.append(float(np.mean(np.argmax(ref64, axis=-1) == np.argmax(got64, axis=-1))))
    return AccuracyReport(
        samples=samples,
        inputs=inputs,
        max_relative_error=round(worst_relative, 6),
        mean_absolute_error=round(max(mean_errors, default=0.0), 9),
        top1_agreement=round(min(agreements), 4) if agreements else None,
    )


def reference_inputs(
    inputs: Sequence[TensorInfo],
    shapes: Sequence[ShapeProfile],
    calibration: Mapping[str, np.ndarray[Any, Any]] | None,
) -> tuple[dict[str, np.ndarray[Any, Any]], Literal["calibration", "generated"]] | str:
    """The inputs to compare on and where they come from, or why there are none (pure but seeded)."""
    if calibration is not None:
        return {name: np.asarray(a)[:SAMPLES] for name, a in calibration.items()}, "calibration"
    rng = np.random.default_rng(20261201)
    opt = {s.input: s.opt for s in shapes}
    out = {}
    for tensor in inputs:
        dtype = _FLOAT_TYPES.get(tensor.elem_type)
        if dtype is None:
            return f"input {tensor.name!r} is not floating point: no inputs to generate for it"
        rest = tuple(
            d if d is not None else (opt[tensor.name][i] if tensor.name in opt else 1)
            for i, d in enumerate(tensor.dims[1:])
        )
        out[tensor.name] = rng.standard_normal((SAMPLES, *rest)).astype(dtype)
    return out, "generated"


def measure_accuracy(
    *,
    reference_model: Path,
    engine_model: Path,
    inputs: Sequence[TensorInfo],
    shapes: Sequence[ShapeProfile],
    calibration: Mapping[str, np.ndarray[Any, Any]] | None,
    max_batch_size: int,
) -> AccuracyReport:
    """Run both models on the same inputs and compare; a report with `checked=False` when they cannot run."""
    import onnxruntime as ort

    prepared = reference_inputs(inputs, shapes, calibration)
    if isinstance(prepared, str):
        return AccuracyReport(checked=False, note=prepared)
    data, source = prepared
    options = ort.SessionOptions()
    options.log_severity_level = 3
    try:
        sessions = [
            ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
            for path in (reference_model, engine_model)
        ]
        n = min(len(a) for a in data.values())
        step = max(1, min(_BATCH, max_batch_size))
        outputs: list[dict[str, list[np.ndarray[Any, Any]]]] = [{}, {}]
        for start in range(0, n, step):
            feed = {name: a[start : start + step] for name, a in data.items()}
            for session, collected in zip(sessions, outputs, strict=True):
                names = [o.name for o in session.get_outputs()]
                for name, value in zip(names, session.run(names, feed), strict=True):
                    collected.setdefault(name, []).append(np.asarray(value))
    except Exception as exc:  # noqa: BLE001 - ORT raises its own types; any failure means "cannot check here"
        return AccuracyReport(
            checked=False, note=f"the engine could not be run in ONNX Runtime here: {exc}"[:500]
        )
    reference, engine = ({k: np.concatenate(v) for k, v in o.items()} for o in outputs)
    return compare_outputs(reference, engine, inputs=source)
