"""Triton's model configuration (`config.pbtxt`, live-reload JSON) of one model, from typed values.

Pure: no I/O, no clock, no environment. The one home of the model config: the
ConfigMap (`triton_configmap`), the autoscaler's live reload and the engine
build (`tailpilot.builders`) all render it with `model_config_for`, so they
agree byte for byte. Where the instances run (`placement.ServingTarget`) is
derived in `placement` from the spec or from the build request's target.

The message class comes from `tritonclient.grpc.model_config_pb2` (the
generated code of Triton's `model_config.proto` shipped with tritonclient
2.51), so every field name and enum is checked by protobuf rather than by
string templates. Importing it runs `tritonclient.grpc`'s package init, which
loads grpc (~0.2 s) but opens nothing; no onnx, no onnxruntime.

The same message renders three ways:

- `to_pbtxt`: the `config.pbtxt` file of a model repository entry;
- `to_load_override_json`: the JSON that Triton's
  `POST /v2/repository/models/NAME/load` accepts as `{"parameters": {"config": "<json>"}}`
  (explicit model-control mode), used to change batching live;
- `load_request_body`: that whole request body.

TensorRT plans only run on the GPU product they were built for, so a TensorRT
config records it as the model parameter `GPU_PRODUCT_PARAMETER`; the
deployment pins its pods to that product with a node selector.

What Triton itself would refuse when it loads the model is refused here, with a
`ValueError` that names the field (tests/manifests/test_triton_native_config.py
checks the rendered text against the protobuf and these rules):

- `backend`/`platform`/`default_model_filename` are Triton's own pairs
  (`src/constants.h`: onnxruntime/onnxruntime_onnx/model.onnx,
  tensorrt/tensorrt_plan/model.plan); the python variant differs from the
  native one in those three fields only;
- `max_batch_size` >= 1 (dynamic batching needs a batching model) and within
  the engine's batch profile when the caller knows it (a TensorRT plan refuses
  a larger one); `preferred_batch_size` within 1..max_batch_size;
- every input and output: a name (unique per direction), a data type other
  than TYPE_INVALID (TYPE_STRING not on TensorRT), at least one dimension, each
  >= 1 or -1, without the batch dimension (Triton adds it);
- one instance group: KIND_CPU without GPUs, or KIND_GPU listing the
  replica's devices 0..count-1 (a TensorRT config only on a GPU product).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, TypeAlias

from google.protobuf import json_format, text_format
from tritonclient.grpc import model_config_pb2

from tailpilot.api.autoscaling import BatchingConfig
from tailpilot.api.engine import TensorSpec
from tailpilot.manifests.placement import ServingTarget

#: The protobuf message type (`inference.ModelConfig`); untyped generated code, hence Any for mypy.
ModelConfig: TypeAlias = Any

#: Model parameter recording the GPU product (node label value) a TensorRT plan is bound to.
GPU_PRODUCT_PARAMETER = "tailpilot.io/gpu-product"

#: Triton backend name -> (platform, default model file name) in a model repository.
BACKEND_FILES: dict[str, tuple[str, str]] = {
    "onnxruntime": ("onnxruntime_onnx", "model.onnx"),
    "tensorrt": ("tensorrt_plan", "model.plan"),
    "python": ("", "model.py"),
}


def model_config_for(
    *,
    name: str,
    triton_backend: str,
    inputs: Sequence[TensorSpec],
    outputs: Sequence[TensorSpec],
    batching: BatchingConfig,
    placement: ServingTarget,
    engine_max_batch_size: int | None = None,
) -> ModelConfig:
    """Build the Triton model configuration of one model.

    Args:
        name: Model name in the repository (also the directory name).
        triton_backend: "onnxruntime", "tensorrt" or "python".
        inputs: Model inputs; dims exclude the batch dimension, -1 is dynamic.
        outputs: Model outputs, same convention.
        batching: Max batch size, preferred batch sizes, max queue delay and instances.
        placement: Where the instances run ("cpu" -> KIND_CPU, "gpu" -> KIND_GPU on the replica's
            `gpu_count` devices) and the GPU product the engine is bound to (required for "tensorrt").
        engine_max_batch_size: The largest batch the engine was built for (a TensorRT plan's batch
            profile maximum); None when the caller does not know it.

    Returns:
        A `model_config_pb2.ModelConfig` message.

    Raises:
        ValueError: On an unknown backend, a TensorRT config without GPU product or on the CPU, a
            GPU placement without GPUs, an empty name, no inputs or outputs, a tensor Triton would
            refuse (no or a repeated name, an unknown or unsupported data type, no dims, a dim that is
            neither >= 1 nor -1), a max batch size above the engine's, or preferred batch sizes
            outside 1..max_batch_size. The message names the config field.
    """
    _check_config(
        name=name,
        triton_backend=triton_backend,
        inputs=inputs,
        outputs=outputs,
        batching=batching,
        placement=placement,
        engine_max_batch_size=engine_max_batch_size,
    )
    platform, filename = BACKEND_FILES[triton_backend]
    config = model_config_pb2.ModelConfig(
        name=name,
        backend=triton_backend,
        platform=platform,
        default_model_filename=filename,
        max_batch_size=batching.max_batch_size,
    )
    config.input.extend(
        model_config_pb2.ModelInput(name=t.name, data_type=_data_type(t), dims=list(t.dims)) for t in inputs
    )
    config.output.extend(
        model_config_pb2.ModelOutput(name=t.name, data_type=_data_type(t), dims=list(t.dims)) for t in outputs
    )
    config.dynamic_batching.preferred_batch_size.extend(sorted(set(batching.preferred_batch_sizes)))
    config.dynamic_batching.max_queue_delay_microseconds = batching.max_queue_delay_us
    config.instance_group.append(_instance_group(placement, batching))
    if placement.gpu_product:
        config.parameters[GPU_PRODUCT_PARAMETER].string_value = placement.gpu_product
    config.model_warmup.extend(_warmups(inputs, max_batch_size=batching.max_batch_size))
    return config


def _check_config(
    *,
    name: str,
    triton_backend: str,
    inputs: Sequence[TensorSpec],
    outputs: Sequence[TensorSpec],
    batching: BatchingConfig,
    placement: ServingTarget,
    engine_max_batch_size: int | None,
) -> None:
    """Refuse what Triton would refuse of `model_config_for`'s arguments (its Raises, in that order)."""
    device, gpu_product = placement.device, placement.gpu_product
    if triton_backend not in BACKEND_FILES:
        raise ValueError(
            f"unknown Triton backend {triton_backend!r}; expected one of {sorted(BACKEND_FILES)}"
        )
    if triton_backend == "tensorrt" and (device != "gpu" or not gpu_product):
        raise ValueError(
            "a TensorRT plan runs only on the GPU product it was built for: need device='gpu' and gpu_product"
        )
    if device == "gpu" and placement.gpu_count < 1:
        raise ValueError(
            f"instance_group.gpus: a GPU placement needs at least one GPU, got {placement.gpu_count}"
        )
    if not name:
        raise ValueError("name: the model needs a name")
    if not inputs or not outputs:
        raise ValueError(f"model {name!r} needs at least one input and one output")
    _check_tensors("input", inputs, triton_backend=triton_backend)
    _check_tensors("output", outputs, triton_backend=triton_backend)
    if engine_max_batch_size is not None and batching.max_batch_size > engine_max_batch_size:
        raise ValueError(
            f"max_batch_size: {batching.max_batch_size} exceeds the engine's maximum batch size "
            f"{engine_max_batch_size} (its batch profile)"
        )
    too_big = [b for b in batching.preferred_batch_sizes if b > batching.max_batch_size or b < 1]
    if too_big:
        raise ValueError(
            f"dynamic_batching.preferred_batch_size: preferred batch sizes {too_big} are outside "
            f"1..max_batch_size={batching.max_batch_size}"
        )


def _instance_group(placement: ServingTarget, batching: BatchingConfig) -> Any:
    """The model's one instance group: KIND_GPU on the replica's devices, or KIND_CPU."""
    group = model_config_pb2.ModelInstanceGroup
    if placement.device == "gpu":
        # Listed, not left to Triton's default (every GPU it sees): the config says where instances go.
        instances = group(kind=group.KIND_GPU, count=batching.instances_per_replica)
        instances.gpus.extend(range(placement.gpu_count))
    else:
        instances = group(kind=group.KIND_CPU, count=batching.instances_per_replica)
    return instances


def _warmups(inputs: Sequence[TensorSpec], *, max_batch_size: int) -> list[Any]:
    """Zero-filled warm-up requests at batch 1 and at the max batch, when every input shape is static.

    Triton runs them while it loads the model, before it reports it ready, and also on each live
    reload before the new config takes requests: the first real requests then do not pay for lazy
    initialisation (ONNX Runtime's memory arena, CUDA kernels, the Python stub's first call). On
    the Python backend here a first request took up to 1.9 s without it. Inputs with a dynamic
    dimension (-1) have no single shape to warm up with, so such models get none.
    """
    if any(d < 0 for t in inputs for d in t.dims):
        return []
    warmups = []
    for batch in sorted({1, max_batch_size}):
        warmup = model_config_pb2.ModelWarmup(name=f"zeros_batch_{batch}", batch_size=batch, count=1)
        for t in inputs:
            warmup.inputs[t.name].CopyFrom(
                model_config_pb2.ModelWarmup.Input(data_type=_data_type(t), dims=list(t.dims), zero_data=True)
            )
        warmups.append(warmup)
    return warmups


def _check_tensors(direction: str, tensors: Sequence[TensorSpec], *, triton_backend: str) -> None:
    """Refuse what Triton refuses in a model input or output (`direction`: "input" or "output")."""
    seen: set[str] = set()
    for t in tensors:
        if not t.name:
            raise ValueError(f"{direction}.name: every {direction} needs a name")
        if t.name in seen:
            raise ValueError(f"{direction}.name: {t.name!r} is declared twice")
        seen.add(t.name)
        try:
            data_type = _data_type(t)
        except ValueError as error:
            raise ValueError(f"{direction}.data_type: {error}") from error
        if data_type == model_config_pb2.TYPE_INVALID:
            raise ValueError(f"{direction}.data_type: tensor {t.name!r} has TYPE_INVALID")
        if triton_backend == "tensorrt" and t.data_type == "TYPE_STRING":
            raise ValueError(f"{direction}.data_type: tensor {t.name!r}: TensorRT has no TYPE_STRING")
        if not t.dims:
            raise ValueError(
                f"{direction}.dims: tensor {t.name!r} has no dimensions (dims exclude the batch dimension; "
                "Triton needs at least one)"
            )
        bad = [d for d in t.dims if d < 1 and d != -1]
        if bad:
            raise ValueError(
                f"{direction}.dims: tensor {t.name!r} has dims {list(t.dims)}; "
                "each must be >= 1 or -1 (dynamic)"
            )


def _data_type(spec: TensorSpec) -> int:
    try:
        return int(model_config_pb2.DataType.Value(spec.data_type))
    except ValueError as exc:
        raise ValueError(f"tensor {spec.name!r}: unknown Triton data type {spec.data_type!r}") from exc


def to_pbtxt(config: ModelConfig) -> str:
    """Render the message as `config.pbtxt` text (protobuf text format)."""
    return str(text_format.MessageToString(config))


def from_pbtxt(text: str) -> ModelConfig:
    """Parse `config.pbtxt` text back into a message (raises `text_format.ParseError` when invalid)."""
    return text_format.Parse(text, model_config_pb2.ModelConfig())


def to_load_override_json(config: ModelConfig) -> str:
    """Render the message as the JSON config string for Triton's model load API.

    This is the value of `parameters.config` in the body of
    `POST /v2/repository/models/NAME/load`; Triton parses it with protobuf's
    JSON parser, which accepts the proto field names used here.
    """
    as_dict = json_format.MessageToDict(config, preserving_proto_field_name=True)
    return json.dumps(as_dict, sort_keys=True, separators=(",", ":"))


def load_request_body(config: ModelConfig) -> dict[str, Any]:
    """Build the whole JSON body of `POST /v2/repository/models/NAME/load` that applies `config`."""
    return {"parameters": {"config": to_load_override_json(config)}}
