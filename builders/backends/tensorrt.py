"""The tensorrt backend: a TensorRT plan built by `trtexec` for one GPU product.

The commands themselves (finding trtexec, its arguments, running it) are `builders/tensorrt.py`;
this module decides when a request can be built that way and what the build hands trtexec.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from tailpilot.api.backends import Backend
from tailpilot.api.engine import AccuracyReport, BuildRequest
from tailpilot.builders import tensorrt
from tailpilot.builders.backends.base import BuiltEngine, EngineJob
from tailpilot.builders.errors import (
    CALIBRATION_REQUIRED,
    UNSUPPORTED_SERVING_VARIANT,
    UNSUPPORTED_TARGET,
    BuildError,
)
from tailpilot.builders.settings import BuildSettings


class TensorRtBackend:
    """TensorRT plans for GPU targets (`EngineBackend`)."""

    name = Backend.TENSORRT.value
    triton_backend = "tensorrt"
    # A plan is compiled for fixed optimization profiles: every dynamic dimension needs its bounds.
    needs_static_profile = True

    def check(self, request: BuildRequest, settings: BuildSettings) -> None:
        """Refuse what no plan can be built for here (see `EngineBackend.check`).

        That is: the python variant, a CPU target, int8 without calibration data, a build without
        trtexec, and a build on a GPU product other than the target.
        """
        if request.serving_variant == "python":
            raise BuildError(
                UNSUPPORTED_SERVING_VARIANT,
                "servingVariant python wraps ONNX Runtime; a TensorRT plan needs the native tensorrt backend",
            )
        if request.target == "cpu":
            raise BuildError(
                UNSUPPORTED_TARGET, "backend tensorrt needs a GPU target (a GPU product), not cpu"
            )
        if request.precision == "int8" and not request.calibration_uri:
            raise BuildError(
                CALIBRATION_REQUIRED,
                "TensorRT int8 needs calibration data "
                "(calibrationUri: .npz inputs or a TensorRT calibration cache)",
            )
        tensorrt.require_trtexec(settings.trtexec)
        if settings.gpu_name and tensorrt.gpu_product_label(settings.gpu_name) != request.target:
            raise BuildError(
                UNSUPPORTED_TARGET,
                f"the build runs on {tensorrt.gpu_product_label(settings.gpu_name)}, but the engine is for "
                f"{request.target}: a TensorRT plan must be built on the GPU product it serves on",
            )

    def library_versions(self, settings: BuildSettings) -> Mapping[str, str]:
        """TensorRT's version, read from trtexec (a plan runs only on the version that built it)."""
        return {"tensorrt": tensorrt.tensorrt_version(settings.trtexec)} if settings.trtexec else {}

    def build(self, job: EngineJob) -> BuiltEngine:
        """Run trtexec into `model.plan` (int8 from `.npz` inputs goes through an explicit Q/DQ model)."""
        from tailpilot.builders import ort_build

        request = job.request
        trtexec = tensorrt.require_trtexec(job.settings.trtexec)
        onnx_path, calib_cache = job.model.path, None
        if request.precision == "int8":
            if job.calibration is None:  # check already refused this; kept for the type checker
                raise BuildError(CALIBRATION_REQUIRED, "TensorRT int8 needs calibration data")
            with job.calibration.path.open("rb") as f:
                is_cache = tensorrt.is_calibration_cache(f.read(4))
            if is_cache:
                calib_cache = job.calibration.path
            else:
                onnx_path = job.work / "qdq.onnx"
                arrays = ort_build.load_calibration(job.calibration.path, job.info.inputs)
                ort_build.quantize_int8(
                    job.model.path, onnx_path, work=job.work, calibration=arrays, symmetric=True
                )
        plan = job.work / "model.plan"
        # One timing cache per GPU product in the store: later builds for that product reuse its
        # kernel timings instead of measuring them again.
        timing_cache = job.store_root / "timing-cache" / f"{request.target}.cache"
        timing_cache.parent.mkdir(parents=True, exist_ok=True)
        cmd = tensorrt.trtexec_command(
            trtexec=trtexec,
            onnx_path=onnx_path,
            plan_path=plan,
            inputs=job.info.inputs,
            shapes=request.shapes,
            max_batch_size=request.max_batch_size,
            precision=request.precision,
            timing_cache=timing_cache,
            calibration_cache=calib_cache,
        )
        tensorrt.run_trtexec(cmd, log_path=job.work / "trtexec.log")
        return BuiltEngine(plan, " ".join(cmd))

    def measure_accuracy(self, job: EngineJob, engine_file: Path) -> AccuracyReport:
        """Not measured: a report saying so, which the accuracy guard does not judge."""
        return AccuracyReport(
            checked=False,
            note="a TensorRT plan runs only through TensorRT on its GPU; its accuracy is not measured here",
        )
