"""The onnxruntime backend: an optimized (fp32), converted (fp16) or quantized (int8) ONNX model.

The engine runs in ONNX Runtime here as it will in Triton, so its accuracy is measured against
the source model. The same file serves the python serving variant (ONNX Runtime wrapped in a
Python-backend model), which the build renders with Triton's python backend instead.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tailpilot.api.backends import Backend
from tailpilot.api.engine import AccuracyReport, BuildRequest
from tailpilot.builders.backends.base import BuiltEngine, EngineJob
from tailpilot.builders.errors import UNSUPPORTED_PRECISION, UNSUPPORTED_SERVING_VARIANT, BuildError
from tailpilot.builders.settings import BuildSettings

if TYPE_CHECKING:
    import numpy as np


class OnnxRuntimeBackend:
    """ONNX Runtime engines for CPU and GPU targets (`EngineBackend`)."""

    name = Backend.ONNXRUNTIME.value
    triton_backend = "onnxruntime"
    # ONNX Runtime takes any shape at run time: no profile is compiled in.
    needs_static_profile = False

    def check(self, request: BuildRequest, settings: BuildSettings) -> None:
        """Refuse the python variant on a GPU and fp16 on the CPU (see `EngineBackend.check`)."""
        if request.serving_variant == "python" and request.target != "cpu":
            raise BuildError(
                UNSUPPORTED_SERVING_VARIANT,
                f"servingVariant python runs ONNX Runtime on the CPU; "
                f"target {request.target} needs servingVariant native",
            )
        if request.precision == "fp16" and request.target == "cpu":
            raise BuildError(
                UNSUPPORTED_PRECISION,
                "fp16 with onnxruntime needs a GPU target: ONNX Runtime's CPU provider has no fast FP16 "
                "kernels",
            )

    def library_versions(self, settings: BuildSettings) -> Mapping[str, str]:
        """Nothing beyond onnx, onnxruntime and numpy, which every build records."""
        return {}

    def build(self, job: EngineJob) -> BuiltEngine:
        """Optimize, convert or quantize the source model into `engine.onnx` (see `EngineBackend.build`)."""
        # ort_build loads onnxruntime (about a second): only a build that is not a cache hit pays it.
        from tailpilot.builders import ort_build

        source, out = job.model.path, job.work / "engine.onnx"
        if job.request.precision == "fp32":
            return BuiltEngine(out, ort_build.optimize_fp32(source, out))
        if job.request.precision == "fp16":
            return BuiltEngine(out, ort_build.convert_fp16(source, out))
        arrays = _calibration_inputs(job)
        return BuiltEngine(out, ort_build.quantize_int8(source, out, work=job.work, calibration=arrays))

    def measure_accuracy(self, job: EngineJob, engine_file: Path) -> AccuracyReport:
        """Run the engine and the source model on the calibration (or generated) inputs and compare."""
        from tailpilot.builders.accuracy import measure_accuracy

        return measure_accuracy(
            reference_model=job.model.path,
            engine_model=engine_file,
            inputs=job.info.inputs,
            shapes=job.request.shapes,
            calibration=_calibration_inputs(job),
            max_batch_size=job.request.max_batch_size,
        )


def _calibration_inputs(job: EngineJob) -> dict[str, np.ndarray[Any, Any]] | None:
    """The request's calibration inputs as arrays by input name; None without calibration data."""
    from tailpilot.builders import ort_build

    return ort_build.load_calibration(job.calibration.path, job.info.inputs) if job.calibration else None
