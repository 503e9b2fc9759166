"""The native serving config (onnxruntime, tensorrt) against Triton's model-config protobuf and rules.

Each config.pbtxt is rendered the way the ConfigMap renders it (from a spec and a BuildResult),
parsed back with protobuf's text_format into `tritonclient.grpc.model_config_pb2.ModelConfig` (so an
unknown field or enum fails the parse), and checked field by field against what Triton expects:

- backend / platform / default model file: Triton's own constants (`src/constants.h` of
  triton-inference-server/core: kOnnxRuntimeBackend "onnxruntime", kOnnxRuntimeOnnxPlatform
  "onnxruntime_onnx", kOnnxRuntimeOnnxFilename "model.onnx"; kTensorRTBackend "tensorrt",
  kTensorRTPlanPlatform "tensorrt_plan", kTensorRTPlanFilename "model.plan"). Triton refuses a
  platform and backend that name different backends (`ValidateModelConfig`).
- max_batch_size: > 0 (dynamic batching needs a batching model) and within the engine's batch
  profile (the build request's max batch, which a TensorRT plan is built with as its max shape);
  preferred batch sizes within 1..max_batch_size.
- instance_group: KIND_GPU listing the replica's GPUs (0..count-1 as the device plugin exposes them),
  KIND_CPU without GPUs (Triton refuses a KIND_CPU group with GPUs).
- inputs/outputs: names, data types and dims of the BuildResult's TensorSpecs, dims without the
  batch dimension, each >= 1 or -1 (`ValidateIOShape`).
"""

from __future__ import annotations

from typing import Any

import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

from tailpilot.api.autoscaling import BatchingConfig
from tailpilot.api.engine import BuildOutcome, BuildResult, TensorSpec
from tailpilot.api.v1alpha1 import InferenceService
from tailpilot.manifests.build_job import make_build_request
from tailpilot.manifests.placement import ServingTarget
from tailpilot.manifests.triton_configmap import render_config_pbtxt
from tailpilot.manifests.triton_model_config import (
    GPU_PRODUCT_PARAMETER,
    model_config_for,
    to_pbtxt,
)

from .fixtures import H100, make_isvc

Group = model_config_pb2.ModelInstanceGroup

#: Triton's (backend, platform, default model file) per backend (core's src/constants.h).
TRITON_NAMES = {
    "onnxruntime": ("onnxruntime", "onnxruntime_onnx", "model.onnx"),
    "tensorrt": ("tensorrt", "tensorrt_plan", "model.plan"),
}

INPUTS = (
    TensorSpec(name="images", data_type="TYPE_FP16", dims=(3, 224, 224)),
    TensorSpec(name="scale", data_type="TYPE_FP32", dims=(1,)),
)
OUTPUTS = (
    TensorSpec(name="logits", data_type="TYPE_FP16", dims=(1000,)),
    TensorSpec(name="top5", data_type="TYPE_INT64", dims=(5,)),
)
DYNAMIC_INPUTS = (TensorSpec(name="tokens", data_type="TYPE_INT64", dims=(-1,)),)


def result_for(backend: str, inputs: tuple[TensorSpec, ...] = INPUTS) -> BuildResult:
    return BuildResult(
        outcome=BuildOutcome.SUCCEEDED,
        engine_key="e" * 40,
        artifact="pvc://tailpilot-engines/engines/e",
        triton_backend=backend,
        inputs=inputs,
        outputs=OUTPUTS,
    )


def parse(text: str) -> Any:
    """config.pbtxt back into Triton's message; text_format fails on any field or enum it lacks."""
    return text_format.Parse(text, model_config_pb2.ModelConfig())


# (case, spec, Triton backend, expected device ids or None for KIND_CPU)
NATIVE_CASES = [
    (
        "onnxruntime-cpu",
        make_isvc("resnet").max_batch(16).preferred(4, 16).queue_delay(500).obj(),
        "onnxruntime",
        None,
    ),
    (
        "onnxruntime-gpu",
        make_isvc("resnet").gpu(count=2).max_batch(32).preferred(8).obj(),
        "onnxruntime",
        [0, 1],
    ),
    (
        "tensorrt-h100",
        make_isvc("resnet").gpu().tensorrt().max_batch(64).preferred(16, 32).queue_delay(2000).obj(),
        "tensorrt",
        [0],
    ),
    (
        "tensorrt-h100-4-gpus",
        make_isvc("resnet").gpu(count=4).tensorrt().max_batch(8).obj(),
        "tensorrt",
        [0, 1, 2, 3],
    ),
]


@pytest.mark.parametrize(
    ("isvc", "backend", "gpus"), [case[1:] for case in NATIVE_CASES], ids=[case[0] for case in NATIVE_CASES]
)
def test_the_native_config_is_what_triton_expects_field_by_field(
    isvc: InferenceService, backend: str, gpus: list[int] | None
) -> None:
    batching = isvc.spec.batching.to_config()
    result = result_for(backend)
    config = parse(render_config_pbtxt(isvc=isvc, result=result, batching=batching))

    # Nothing but these top-level fields: no version policy, no optimization (Triton's defaults).
    assert {f.name for f, _ in config.ListFields()} == {
        "name",
        "platform",
        "backend",
        "max_batch_size",
        "input",
        "output",
        "instance_group",
        "default_model_filename",
        "dynamic_batching",
        "model_warmup",
        *(["parameters"] if isvc.spec.runtime.gpu else []),
    }
    assert config.name == isvc.spec.model_name(isvc.name)
    assert (config.backend, config.platform, config.default_model_filename) == TRITON_NAMES[backend]

    # The batch dimension: Triton adds it (max_batch_size > 0), within the engine's batch profile.
    build_max_batch = make_build_request(isvc=isvc).max_batch_size
    assert 1 <= config.max_batch_size == batching.max_batch_size <= build_max_batch
    preferred = list(config.dynamic_batching.preferred_batch_size)
    assert preferred == sorted(set(isvc.spec.batching.preferred_batch_sizes))
    assert all(1 <= p <= config.max_batch_size for p in preferred)
    assert (
        config.dynamic_batching.max_queue_delay_microseconds
        == isvc.spec.batching.max_queue_delay_microseconds
    )
    assert {f.name for f, _ in config.dynamic_batching.ListFields()} <= {
        "preferred_batch_size",
        "max_queue_delay_microseconds",
    }

    # Tensors: the build's names, types and dims (no batch dimension), each dim >= 1 or -1.
    for declared, specs in ((config.input, result.inputs), (config.output, result.outputs)):
        assert [(t.name, model_config_pb2.DataType.Name(t.data_type), tuple(t.dims)) for t in declared] == [
            (s.name, s.data_type, s.dims) for s in specs
        ]
        assert all(t.dims and all(d >= 1 or d == -1 for d in t.dims) for t in declared)
        assert all({f.name for f, _ in t.ListFields()} == {"name", "data_type", "dims"} for t in declared)

    # One instance group: the replica's GPUs, listed, or the CPU without any.
    [group] = config.instance_group
    assert group.count == isvc.spec.batching.instances_per_replica
    if gpus is None:
        assert (group.kind, list(group.gpus)) == (Group.KIND_CPU, [])
    else:
        assert (group.kind, list(group.gpus)) == (Group.KIND_GPU, gpus)
    if backend == "tensorrt":
        assert config.parameters[GPU_PRODUCT_PARAMETER].string_value == H100

    # Warm-up requests at batch 1 and the max batch, with the inputs' own types and dims.
    assert [w.batch_size for w in config.model_warmup] == sorted({1, config.max_batch_size})
    for warmup in config.model_warmup:
        assert {name: (w.data_type, list(w.dims)) for name, w in warmup.inputs.items()} == {
            t.name: (t.data_type, list(t.dims)) for t in config.input
        }


def test_a_dynamic_dimension_is_kept_as_minus_one_and_gets_no_warmup() -> None:
    isvc = make_isvc().gpu().tensorrt().max_batch(8).obj()
    text = render_config_pbtxt(
        isvc=isvc, result=result_for("tensorrt", DYNAMIC_INPUTS), batching=isvc.spec.batching.to_config()
    )
    config = parse(text)
    assert [list(t.dims) for t in config.input] == [[-1]]
    assert not config.model_warmup


def render_variant(backend: str, placement: ServingTarget) -> Any:
    return parse(
        to_pbtxt(
            model_config_for(
                name="resnet",
                triton_backend=backend,
                inputs=INPUTS,
                outputs=OUTPUTS,
                batching=BatchingConfig(
                    max_batch_size=16,
                    preferred_batch_sizes=(4, 8),
                    max_queue_delay_us=700,
                    instances_per_replica=2,
                ),
                placement=placement,
            )
        )
    )


def differing_fields(a: Any, b: Any) -> set[str]:
    """Top-level fields whose values differ between two messages (set in either)."""
    fields = {f.name for f, _ in a.ListFields()} | {f.name for f, _ in b.ListFields()}
    return {name for name in fields if getattr(a, name) != getattr(b, name)}


@pytest.mark.parametrize(
    "placement", [ServingTarget(device="cpu"), ServingTarget(device="gpu", gpu_product=H100)]
)
def test_the_python_variant_differs_from_the_native_one_only_in_model_file_and_backend(
    placement: ServingTarget,
) -> None:
    native, python = render_variant("onnxruntime", placement), render_variant("python", placement)
    assert differing_fields(native, python) == {"backend", "platform", "default_model_filename"}
    assert (python.backend, python.platform, python.default_model_filename) == ("python", "", "model.py")
    assert (native.backend, native.platform, native.default_model_filename) == TRITON_NAMES["onnxruntime"]
    # The same message once those three fields are set alike.
    python.backend, python.platform, python.default_model_filename = TRITON_NAMES["onnxruntime"]
    assert python == native


def render(**overrides: Any) -> Any:
    args: dict[str, Any] = {
        "name": "resnet",
        "triton_backend": "tensorrt",
        "inputs": INPUTS,
        "outputs": OUTPUTS,
        "batching": BatchingConfig(max_batch_size=16, preferred_batch_sizes=(8,)),
        "placement": ServingTarget(device="gpu", gpu_product=H100),
    }
    args.update(overrides)
    return model_config_for(**args)


def test_the_max_batch_size_must_fit_the_engines_batch_profile() -> None:
    assert render(engine_max_batch_size=16).max_batch_size == 16
    with pytest.raises(ValueError, match=r"^max_batch_size: 16 exceeds the engine's maximum batch size 8"):
        render(engine_max_batch_size=8)


def spec(name: str, data_type: str = "TYPE_FP32", dims: tuple[int, ...] = (4,)) -> TensorSpec:
    return TensorSpec(name=name, data_type=data_type, dims=dims)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"name": ""}, r"^name: "),
        ({"inputs": (spec(""),)}, r"^input\.name: "),
        ({"outputs": (spec("y"), spec("y"))}, r"^output\.name: 'y' is declared twice"),
        ({"inputs": (spec("x", dims=()),)}, r"^input\.dims: tensor 'x' has no dimensions"),
        ({"inputs": (spec("x", dims=(3, 0)),)}, r"^input\.dims: tensor 'x' has dims \[3, 0\]"),
        ({"outputs": (spec("y", dims=(-2,)),)}, r"^output\.dims: tensor 'y' has dims \[-2\]"),
        ({"inputs": (spec("x", data_type="TYPE_INVALID"),)}, r"^input\.data_type: .*TYPE_INVALID"),
        ({"inputs": (spec("x", data_type="TYPE_FLOAT"),)}, r"^input\.data_type: .*TYPE_FLOAT"),
        ({"inputs": (spec("x", data_type="TYPE_STRING"),)}, r"^input\.data_type: .*TYPE_STRING"),
        (
            {"batching": BatchingConfig(max_batch_size=4, preferred_batch_sizes=(2, 8))},
            r"^dynamic_batching\.preferred_batch_size: preferred batch sizes \[8\]",
        ),
        (
            {"placement": ServingTarget(device="gpu", gpu_product=H100, gpu_count=0)},
            r"^instance_group\.gpus: ",
        ),
    ],
    ids=[
        "no-model-name",
        "no-tensor-name",
        "repeated-output",
        "no-dims",
        "zero-dim",
        "negative-dim",
        "type-invalid",
        "unknown-type",
        "string-on-tensorrt",
        "preferred-above-max",
        "gpu-without-gpus",
    ],
)
def test_what_triton_would_refuse_is_refused_naming_the_field(
    overrides: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        render(**overrides)


def test_onnxruntime_serves_string_tensors() -> None:
    strings = (spec("text", data_type="TYPE_STRING", dims=(1,)),)
    config = render(triton_backend="onnxruntime", inputs=strings)
    assert model_config_pb2.DataType.Name(config.input[0].data_type) == "TYPE_STRING"
