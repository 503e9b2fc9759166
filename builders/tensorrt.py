"""TensorRT engines built with `trtexec`: the command (pure) and running it (I/O).

The plan is built for one GPU product and TensorRT version; the config records
the product (see `tailpilot.manifests.triton_model_config.GPU_PRODUCT_PARAMETER`) and the engine key
includes both, so a plan is never served on a GPU it was not built for.

Optimization profile: for every input, min/opt/max shapes whose batch
dimension is 1 / `opt_batch_size` (default: the max) / `max_batch_size`, the
other dimensions from the request's shape profile, or the model's fixed dims.

INT8 needs calibration (TensorRT has no dynamic quantization). Two forms are accepted:

- a TensorRT calibration cache (a text file starting with `TRT-`): passed with `--calib`;
- `.npz` calibration inputs: the model is first quantized to explicit Q/DQ
  (symmetric int8, per-channel, ONNX Runtime's static quantizer) and TensorRT
  builds the explicitly quantized network with `--int8`.

Without either, the build fails with CalibrationRequired before anything is fetched.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from tailpilot.api.engine import ShapeProfile
from tailpilot.builders.errors import ENGINE_BUILD_FAILED, TENSORRT_UNAVAILABLE, BuildError

if TYPE_CHECKING:
    from tailpilot.builders.model_info import TensorInfo

#: Where NVIDIA's TensorRT containers put trtexec when it is not on PATH.
TRTEXEC_FALLBACKS = ("/usr/src/tensorrt/bin/trtexec", "/opt/tensorrt/bin/trtexec")


def find_trtexec(which: Callable[[str], str | None] = shutil.which) -> str | None:
    """Locate trtexec (PATH first, then the TensorRT container locations)."""
    found = which("trtexec")
    if found:
        return found
    return next((p for p in TRTEXEC_FALLBACKS if Path(p).is_file()), None)


def require_trtexec(trtexec: str | None) -> str:
    """Return the trtexec path or fail with TensorRTUnavailable."""
    if not trtexec:
        raise BuildError(
            TENSORRT_UNAVAILABLE,
            "backend tensorrt needs TensorRT's trtexec, which is not installed here "
            "(run the build in an NVIDIA TensorRT/Triton image on a GPU node)",
        )
    return trtexec


def is_calibration_cache(head: bytes) -> bool:
    """Whether the file's first bytes look like a TensorRT calibration cache ("TRT-<version>-...")."""
    return head.startswith(b"TRT-")


def shape_triplets(
    inputs: Sequence[TensorInfo], shapes: Sequence[ShapeProfile], *, max_batch_size: int, opt_batch_size: int
) -> tuple[str, str, str]:
    """Build the `--minShapes`, `--optShapes`, `--maxShapes` values (pure).

    Raises:
        ValueError: When an input has dynamic non-batch dims and no profile (checked earlier by
            `model_info.check_request_shapes`, so this is a programming error).
    """
    by_name = {s.input: s for s in shapes}
    parts: tuple[list[str], list[str], list[str]] = ([], [], [])
    for tensor in inputs:
        profile = by_name.get(tensor.name)
        if profile is None:
            if any(d is None for d in tensor.dims[1:]):
                raise ValueError(f"input {tensor.name!r} has dynamic dims and no shape profile")
            fixed = tuple(int(d) for d in tensor.dims[1:] if d is not None)
            triple = (fixed, fixed, fixed)
        else:
            triple = (profile.min, profile.opt, profile.max)
        for out, batch, dims in zip(parts, (1, opt_batch_size, max_batch_size), triple, strict=True):
            out.append(f"{tensor.name}:" + "x".join(str(d) for d in (batch, *dims)))
    mins, opts, maxs = (",".join(p) for p in parts)
    return mins, opts, maxs


def trtexec_command(
    *,
    trtexec: str,
    onnx_path: Path,
    plan_path: Path,
    inputs: Sequence[TensorInfo],
    shapes: Sequence[ShapeProfile],
    max_batch_size: int,
    precision: str,
    timing_cache: Path,
    calibration_cache: Path | None = None,
    opt_batch_size: int | None = None,
) -> list[str]:
    """Build the exact trtexec command that builds the plan (pure).

    Args:
        trtexec: trtexec executable.
        onnx_path: Model to build from (already Q/DQ-quantized for INT8 from calibration inputs).
        plan_path: Where the serialized plan goes.
        inputs: Model inputs (name and dims, dims[0] the batch).
        shapes: Request shape profiles for the non-batch dims.
        max_batch_size: Batch dimension of the max shape (the service's max batch size).
        precision: "fp32", "fp16" or "int8".
        timing_cache: Timing cache file, shared by builds on the same GPU product and TensorRT version.
        calibration_cache: TensorRT calibration cache for implicit INT8 (None for Q/DQ models).
        opt_batch_size: Batch dimension of the opt shape (defaults to `max_batch_size`: under load the
            dynamic batcher forms full batches, and those are the ones the kernels should be tuned for).

    Raises:
        ValueError: On an unknown precision or an opt batch outside 1..max_batch_size.
    """
    opt = max_batch_size if opt_batch_size is None else opt_batch_size
    if not 1 <= opt <= max_batch_size:
        raise ValueError(f"opt batch size {opt} is outside 1..{max_batch_size}")
    mins, opts, maxs = shape_triplets(inputs, shapes, max_batch_size=max_batch_size, opt_batch_size=opt)
    cmd = [
        trtexec,
        f"--onnx={onnx_path}",
        f"--saveEngine={plan_path}",
        f"--minShapes={mins}",
        f"--optShapes={opts}",
        f"--maxShapes={maxs}",
        f"--timingCacheFile={timing_cache}",
        "--skipInference",  # build only; the profiler measures in Triton
    ]
    if precision == "fp16":
        cmd.append("--fp16")
    elif precision == "int8":
        cmd.append("--int8")
        if calibration_cache is not None:
            cmd.append(f"--calib={calibration_cache}")
    elif precision != "fp32":
        raise ValueError(f"unknown precision {precision!r}")
    return cmd


def run_trtexec(cmd: Sequence[str], *, log_path: Path, timeout_s: float = 3600.0) -> None:
    """Run trtexec, logging to `log_path`; fail with EngineBuildFailed and the log tail."""
    with log_path.open("wb") as log:
        try:
            code = subprocess.run(
                list(cmd), stdout=log, stderr=subprocess.STDOUT, timeout=timeout_s
            ).returncode
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise BuildError(ENGINE_BUILD_FAILED, f"trtexec could not run: {exc}") from exc
    if code != 0:
        tail = "\n".join(log_path.read_text(errors="replace").splitlines()[-15:])
        raise BuildError(ENGINE_BUILD_FAILED, f"trtexec exited with code {code}:\n{tail}")


def tensorrt_version(trtexec: str) -> str:
    """TensorRT version reported by trtexec's banner ("unknown" when it prints none)."""
    try:
        out = subprocess.run([trtexec, "--help"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    match = re.search(r"TensorRT v(\d+)", out)
    return match.group(1) if match else "unknown"


def gpu_product_label(gpu_name: str) -> str:
    """GPU feature discovery's `nvidia.com/gpu.product` value for an nvidia-smi name (spaces -> dashes)."""
    return "-".join(gpu_name.split())


def detect_gpu_name() -> str | None:
    """Name of GPU 0 from nvidia-smi, or None without a GPU."""
    smi = shutil.which("nvidia-smi")
    if not smi:
        return None
    try:
        out = subprocess.run(
            [smi, "--query-gpu=name", "--format=csv,noheader"], capture_output=True, text=True, timeout=30
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.splitlines()[0].strip() if out.strip() else None
