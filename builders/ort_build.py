"""ONNX Runtime engines: offline graph optimization, INT8 quantization, FP16 conversion (I/O module).

- fp32: ONNX Runtime's offline graph optimization at the *extended* level
  (constant folding, Conv+BatchNorm fusion, GELU/LayerNorm fusions...). The
  *all* level adds layout transformations specific to the build machine's CPU,
  which would tie the file to it, so it is left to the serving process.
- int8: `onnxruntime.quantization`. With calibration data, static QDQ
  quantization (per-channel int8 weights, uint8 activations, QLinearConv at
  run time: the fast one on CPUs). Without, dynamic quantization (weights only;
  activations are quantized per batch at run time). ONNX Runtime never
  *requires* calibration; TensorRT INT8 does (see `tensorrt.py`).
- fp16: `onnxruntime.transformers.float16` with float32 inputs/outputs kept.
  Only for GPU targets: ONNX Runtime's CPU provider has few FP16 kernels and
  would insert casts around every node, so fp16 on a CPU target is refused.

Calibration data is a `.npz` file: one array per model input name, samples on the first axis.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
from onnxruntime.quantization import CalibrationDataReader

from tailpilot.builders.errors import ENGINE_BUILD_FAILED, INVALID_CALIBRATION_DATA, BuildError
from tailpilot.builders.model_info import TensorInfo

#: Samples per calibration batch fed to ONNX Runtime's calibrator.
CALIBRATION_BATCH = 8


def optimize_fp32(src: Path, dst: Path) -> str:
    """Write the offline-optimized model to `dst`; return a one-line description of the method."""
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    options.optimized_model_filepath = str(dst)
    try:
        ort.InferenceSession(str(src), options, providers=["CPUExecutionProvider"])
    except Exception as exc:  # onnxruntime raises its own exception types from C++
        raise BuildError(ENGINE_BUILD_FAILED, f"ONNX Runtime cannot load the model: {exc}") from exc
    return f"onnxruntime {ort.__version__} offline graph optimization (extended)"


def load_calibration(path: Path, inputs: Sequence[TensorInfo]) -> dict[str, np.ndarray[Any, Any]]:
    """Read and check calibration data against the model inputs.

    Raises:
        BuildError: InvalidCalibrationData naming the missing input or wrong shape.
    """
    try:
        with np.load(path, allow_pickle=False) as data:
            arrays = {name: np.asarray(data[name]) for name in data.files}
    except Exception as exc:  # numpy raises ValueError/OSError/BadZipFile for non-npz input
        raise BuildError(
            INVALID_CALIBRATION_DATA, f"calibration data is not a readable .npz file: {exc}"
        ) from exc
    samples = None
    for tensor in inputs:
        if tensor.name not in arrays:
            raise BuildError(
                INVALID_CALIBRATION_DATA,
                f"calibration data has arrays {sorted(arrays)}, but no array for input {tensor.name!r}",
            )
        array = arrays[tensor.name]
        if array.ndim != len(tensor.dims) or any(
            d is not None and d != a for d, a in zip(tensor.dims[1:], array.shape[1:], strict=True)
        ):
            raise BuildError(
                INVALID_CALIBRATION_DATA,
                f"calibration array {tensor.name!r} has shape {list(array.shape)}, "
                f"the model input is {['N' if d is None else d for d in tensor.dims]}",
            )
        samples = array.shape[0] if samples is None else min(samples, array.shape[0])
    if not samples:
        raise BuildError(INVALID_CALIBRATION_DATA, "calibration data holds no samples")
    return {t.name: arrays[t.name][:samples] for t in inputs}


def quantize_int8(
    src: Path,
    dst: Path,
    *,
    work: Path,
    calibration: dict[str, np.ndarray[Any, Any]] | None,
    symmetric: bool = False,
) -> str:
    """Quantize to INT8 (static QDQ with calibration data, dynamic without); return the method line.

    `symmetric` makes activations int8 with zero point 0, the explicit quantization TensorRT accepts.
    """
    from onnxruntime.quantization import QuantFormat, QuantType, quantize_dynamic, quantize_static
    from onnxruntime.quantization.shape_inference import quant_pre_process

    pre = work / "preprocessed.onnx"
    try:
        # Symbolic shape inference needs sympy; ONNX shape inference is enough for static-rank CNNs.
        quant_pre_process(str(src), str(pre), skip_symbolic_shape=True)
        if calibration is None:
            quantize_dynamic(str(pre), str(dst), weight_type=QuantType.QUInt8)
            return f"onnxruntime {ort.__version__} dynamic int8 quantization (uint8 weights)"
        quantize_static(
            str(pre),
            str(dst),
            _Reader(calibration),
            quant_format=QuantFormat.QDQ,
            per_channel=True,
            activation_type=QuantType.QInt8 if symmetric else QuantType.QUInt8,
            weight_type=QuantType.QInt8,
            extra_options={"ActivationSymmetric": True, "WeightSymmetric": True} if symmetric else {},
        )
    except BuildError:
        raise
    except Exception as exc:  # the quantizer raises bare Exceptions/ValueErrors from many places
        raise BuildError(ENGINE_BUILD_FAILED, f"INT8 quantization failed: {exc}") from exc
    samples = len(next(iter(calibration.values())))
    return f"onnxruntime {ort.__version__} static int8 QDQ per-channel, {samples} calibration inputs"


def convert_fp16(src: Path, dst: Path) -> str:
    """Convert float32 weights and compute to float16, keeping float32 inputs/outputs."""
    import onnx
    from onnxruntime.transformers.float16 import convert_float_to_float16

    try:
        model = convert_float_to_float16(onnx.load_model(str(src)), keep_io_types=True)
        onnx.save_model(model, str(dst))
    except Exception as exc:  # the converter raises assorted errors on unsupported graphs
        raise BuildError(ENGINE_BUILD_FAILED, f"FP16 conversion failed: {exc}") from exc
    return f"onnxruntime {ort.__version__} float16 conversion (float32 I/O kept)"


class _Reader(CalibrationDataReader):  # type: ignore[misc]
    """ONNX Runtime calibration reader over in-memory arrays, CALIBRATION_BATCH samples at a time."""

    def __init__(self, arrays: dict[str, np.ndarray[Any, Any]]) -> None:
        self._batches = self._iterate(arrays)

    @staticmethod
    def _iterate(arrays: dict[str, np.ndarray[Any, Any]]) -> Iterator[dict[str, np.ndarray[Any, Any]]]:
        total = len(next(iter(arrays.values())))
        for start in range(0, total, CALIBRATION_BATCH):
            yield {name: a[start : start + CALIBRATION_BATCH] for name, a in arrays.items()}

    def get_next(self) -> dict[str, np.ndarray[Any, Any]] | None:
        """Return the next batch, None when exhausted."""
        return next(self._batches, None)
