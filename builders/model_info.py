"""Verify an ONNX model and describe its inputs/outputs; check a request's shapes against it.

`load_and_verify` does the I/O (reads the file, runs the ONNX checker and
shape inference); everything else here is pure and works on `ModelInfo`.
Dimensions are `None` when dynamic (symbolic or unknown), the first one
being the batch dimension.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import onnx
from onnx import TensorProto

from tailpilot.api.engine import ShapeProfile, TensorSpec
from tailpilot.builders.errors import INVALID_MODEL, SHAPE_PROFILE_MISMATCH, BuildError

#: ONNX element type -> Triton data type name.
ONNX_TO_TRITON: dict[int, str] = {
    TensorProto.FLOAT: "TYPE_FP32",
    TensorProto.FLOAT16: "TYPE_FP16",
    TensorProto.BFLOAT16: "TYPE_BF16",
    TensorProto.DOUBLE: "TYPE_FP64",
    TensorProto.INT8: "TYPE_INT8",
    TensorProto.INT16: "TYPE_INT16",
    TensorProto.INT32: "TYPE_INT32",
    TensorProto.INT64: "TYPE_INT64",
    TensorProto.UINT8: "TYPE_UINT8",
    TensorProto.UINT16: "TYPE_UINT16",
    TensorProto.UINT32: "TYPE_UINT32",
    TensorProto.UINT64: "TYPE_UINT64",
    TensorProto.BOOL: "TYPE_BOOL",
    TensorProto.STRING: "TYPE_STRING",
}


@dataclass(frozen=True)
class TensorInfo:
    """One graph input or output: ONNX element type and dims (None = dynamic; dims[0] is the batch)."""

    name: str
    elem_type: int
    dims: tuple[int | None, ...]

    def dynamic_axes(self) -> tuple[int, ...]:
        """Return the indices of the dynamic dimensions."""
        return tuple(i for i, d in enumerate(self.dims) if d is None)


@dataclass(frozen=True)
class ModelInfo:
    """What the builder needs to know about a verified model."""

    inputs: tuple[TensorInfo, ...]
    outputs: tuple[TensorInfo, ...]
    opset: int
    ir_version: int


def load_and_verify(path: Path, *, label: str | None = None) -> ModelInfo:
    """Check the file is a valid ONNX model (checker + strict shape inference) and describe it.

    `label` names the model in error messages (its URI); the file name by default.

    Raises:
        BuildError: InvalidModel, naming what is wrong.
    """
    label = label or path.name
    try:
        model = onnx.load_model(str(path))
    except Exception as exc:  # protobuf raises DecodeError, RuntimeWarning-derived or ValueError
        raise BuildError(INVALID_MODEL, f"{label} is not an ONNX model: {exc}") from exc
    try:
        onnx.checker.check_model(model, full_check=False)
        # strict_mode turns shape/type conflicts into errors instead of silently dropping them.
        inferred = onnx.shape_inference.infer_shapes(model, check_type=True, strict_mode=True)
    except Exception as exc:  # onnx raises ValidationError / InferenceError; both mean "invalid"
        raise BuildError(INVALID_MODEL, f"{label} fails the ONNX checker: {_first_line(exc)}") from exc
    graph = inferred.graph
    if not graph.node or not graph.output:
        raise BuildError(INVALID_MODEL, f"{label} has an empty graph (no nodes or no outputs)")
    initializer_names = {init.name for init in graph.initializer}
    inputs = tuple(_tensor_info(v) for v in graph.input if v.name not in initializer_names)
    outputs = tuple(_tensor_info(v) for v in graph.output)
    opset = max((o.version for o in model.opset_import if o.domain in {"", "ai.onnx"}), default=0)
    return ModelInfo(inputs=inputs, outputs=outputs, opset=opset, ir_version=model.ir_version)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _tensor_info(value: onnx.ValueInfoProto) -> TensorInfo:
    tensor_type = value.type.tensor_type
    if not value.type.HasField("tensor_type") or not tensor_type.HasField("shape"):
        raise BuildError(INVALID_MODEL, f"graph tensor {value.name!r} has no tensor type or no shape")
    dims = tuple(
        d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else None for d in tensor_type.shape.dim
    )
    return TensorInfo(name=value.name, elem_type=tensor_type.elem_type, dims=dims)


def triton_specs(tensors: Sequence[TensorInfo]) -> tuple[TensorSpec, ...]:
    """Triton's view of the tensors: batch dimension dropped, dynamic dims as -1.

    Raises:
        BuildError: InvalidModel for an element type Triton cannot carry.
    """
    specs = []
    for t in tensors:
        if t.elem_type not in ONNX_TO_TRITON:
            raise BuildError(
                INVALID_MODEL, f"tensor {t.name!r} has ONNX type {t.elem_type}, which Triton cannot serve"
            )
        specs.append(
            TensorSpec(
                name=t.name,
                data_type=ONNX_TO_TRITON[t.elem_type],
                dims=tuple(-1 if d is None else d for d in t.dims[1:]),
            )
        )
    return tuple(specs)


def check_request_shapes(
    info: ModelInfo, *, shapes: Sequence[ShapeProfile], max_batch_size: int, require_static_profile: bool
) -> None:
    """Check the request's batching bounds and shape profiles against the model (pure).

    Args:
        info: The verified model.
        shapes: The request's min/opt/max of non-batch dimensions, per input.
        max_batch_size: Largest batch the service will send.
        require_static_profile: True when every dynamic non-batch dimension needs a profile
            (TensorRT builds fixed optimization profiles; ONNX Runtime does not).

    Raises:
        BuildError: ShapeProfileMismatch naming the input and dimension.
    """
    by_name = {t.name: t for t in info.inputs}
    for tensor in (*info.inputs, *info.outputs):
        if not tensor.dims:
            raise BuildError(
                SHAPE_PROFILE_MISMATCH, f"tensor {tensor.name!r} is a scalar; it has no batch dimension"
            )
        batch = tensor.dims[0]
        if batch is not None and not (batch == 1 and max_batch_size == 1):
            raise BuildError(
                SHAPE_PROFILE_MISMATCH,
                f"tensor {tensor.name!r} has a fixed batch dimension {batch}, "
                f"but maxBatchSize is {max_batch_size}: "
                "export the model with a dynamic first dimension",
            )
    covered = set()
    for profile in shapes:
        target = by_name.get(profile.input)
        if target is None:
            raise BuildError(
                SHAPE_PROFILE_MISMATCH,
                f"shape profile names input {profile.input!r}, but the model's inputs are {sorted(by_name)}",
            )
        covered.add(profile.input)
        _check_profile(target, profile)
    if require_static_profile:
        for tensor in info.inputs:
            dynamic = [i for i in tensor.dynamic_axes() if i > 0]
            if dynamic and tensor.name not in covered:
                raise BuildError(
                    SHAPE_PROFILE_MISMATCH,
                    f"input {tensor.name!r} has dynamic dimensions {dynamic}; "
                    "this backend needs a shape profile for it",
                )


def _check_profile(tensor: TensorInfo, profile: ShapeProfile) -> None:
    model_dims = tensor.dims[1:]
    for label, dims in (("min", profile.min), ("opt", profile.opt), ("max", profile.max)):
        if len(dims) != len(model_dims):
            raise BuildError(
                SHAPE_PROFILE_MISMATCH,
                f"input {tensor.name!r}: {label} shape {list(dims)} has {len(dims)} dimensions, "
                f"the model has {len(model_dims)} besides the batch ({_fmt(model_dims)})",
            )
    for axis, model_dim in enumerate(model_dims, start=1):
        lo, opt, hi = profile.min[axis - 1], profile.opt[axis - 1], profile.max[axis - 1]
        if not 1 <= lo <= opt <= hi:
            raise BuildError(
                SHAPE_PROFILE_MISMATCH,
                f"input {tensor.name!r} dimension {axis}: need 1 <= min <= opt <= max, got {lo}/{opt}/{hi}",
            )
        if model_dim is not None and (lo, opt, hi) != (model_dim, model_dim, model_dim):
            raise BuildError(
                SHAPE_PROFILE_MISMATCH,
                f"input {tensor.name!r} dimension {axis} is fixed at {model_dim} in the model "
                f"({_fmt(model_dims)}), but the profile asks for {lo}/{opt}/{hi}",
            )


def _fmt(dims: Sequence[int | None]) -> str:
    return "x".join("?" if d is None else str(d) for d in dims)
