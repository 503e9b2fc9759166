from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest
from google.protobuf import json_format
from tritonclient.grpc import model_config_pb2

from tailpilot.api.autoscaling import BatchingConfig
from tailpilot.api.engine import TensorSpec
from tailpilot.manifests.build_job import make_build_request
from tailpilot.manifests.placement import ServingTarget
from tailpilot.manifests.triton_model_config import (
    GPU_PRODUCT_PARAMETER,
    from_pbtxt,
    load_request_body,
    model_config_for,
    to_load_override_json,
    to_pbtxt,
)

from .fixtures import H100, make_isvc

INPUTS = [TensorSpec(name="input", data_type="TYPE_FP32", dims=(3, 64, 64))]
OUTPUTS = [
    TensorSpec(name="logits", data_type="TYPE_FP32", dims=(10,)),
    TensorSpec(name="ids", data_type="TYPE_INT64", dims=(-1,)),
]
BATCHING = BatchingConfig(
    max_batch_size=16, preferred_batch_sizes=(8, 4, 8), max_queue_delay_us=1500, instances_per_replica=2
)


def render(**overrides: object) -> object:
    args: dict[str, object] = {
        "name": "resnet",
        "triton_backend": "onnxruntime",
        "inputs": INPUTS,
        "outputs": OUTPUTS,
        "batching": BATCHING,
        "placement": ServingTarget(device="cpu"),
    }
    args.update(overrides)
    return model_config_for(**args)  # type: ignore[arg-type]


def test_pbtxt_round_trips_with_every_setting() -> None:
    parsed = from_pbtxt(to_pbtxt(render()))
    assert parsed.name == "resnet"
    assert parsed.backend == "onnxruntime"
    assert parsed.platform == "onnxruntime_onnx"
    assert parsed.default_model_filename == "model.onnx"
    assert parsed.max_batch_size == 16
    assert list(parsed.dynamic_batching.preferred_batch_size) == [4, 8]
    assert parsed.dynamic_batching.max_queue_delay_microseconds == 1500
    assert [(g.kind, g.count) for g in parsed.instance_group] == [
        (model_config_pb2.ModelInstanceGroup.KIND_CPU, 2)
    ]
    assert [(t.name, t.data_type, list(t.dims)) for t in parsed.input] == [
        ("input", model_config_pb2.TYPE_FP32, [3, 64, 64])
    ]
    assert [(t.name, t.data_type, list(t.dims)) for t in parsed.output] == [
        ("logits", model_config_pb2.TYPE_FP32, [10]),
        ("ids", model_config_pb2.TYPE_INT64, [-1]),
    ]
    assert GPU_PRODUCT_PARAMETER not in parsed.parameters


def test_tensorrt_config_is_pinned_to_its_gpu_product() -> None:
    config = render(
        triton_backend="tensorrt", placement=ServingTarget(device="gpu", gpu_product="NVIDIA-H100-80GB-HBM3")
    )
    parsed = from_pbtxt(to_pbtxt(config))
    assert parsed.platform == "tensorrt_plan"
    assert parsed.default_model_filename == "model.plan"
    assert parsed.instance_group[0].kind == model_config_pb2.ModelInstanceGroup.KIND_GPU
    assert parsed.parameters[GPU_PRODUCT_PARAMETER].string_value == "NVIDIA-H100-80GB-HBM3"


def test_python_variant_uses_model_py() -> None:
    parsed = from_pbtxt(to_pbtxt(render(triton_backend="python")))
    assert (parsed.backend, parsed.platform, parsed.default_model_filename) == ("python", "", "model.py")


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"triton_backend": "tensorrt", "placement": ServingTarget(device="gpu")}, "GPU product"),
        (
            {
                "triton_backend": "tensorrt",
                "placement": ServingTarget(device="cpu", gpu_product="NVIDIA-A10"),
            },
            "GPU product",
        ),
        ({"triton_backend": "openvino"}, "unknown Triton backend"),
        (
            {"batching": BatchingConfig(max_batch_size=4, preferred_batch_sizes=(8,))},
            "preferred batch sizes [8]",
        ),
        ({"inputs": [TensorSpec(name="x", data_type="TYPE_FLOAT", dims=(1,))]}, "TYPE_FLOAT"),
        ({"outputs": []}, "at least one input and one output"),
    ],
)
def test_invalid_configs_are_refused(overrides: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]")):
        render(**overrides)


def test_load_override_json_parses_back_to_the_same_config() -> None:
    config = render()
    text = to_load_override_json(config)
    assert json.loads(text)["max_batch_size"] == 16
    assert json_format.Parse(text, model_config_pb2.ModelConfig()) == config
    body = load_request_body(config)
    assert json.loads(body["parameters"]["config"]) == json.loads(text)


def test_static_inputs_get_zero_warmups_at_batch_one_and_the_max_batch() -> None:
    config = render()
    warmups = [(w.name, w.batch_size, w.count) for w in config.model_warmup]
    assert warmups == [("zeros_batch_1", 1, 1), ("zeros_batch_16", 16, 1)]
    sample = config.model_warmup[1].inputs["input"]
    assert (list(sample.dims), sample.zero_data) == ([3, 64, 64], True)
    assert sample.data_type == model_config_pb2.TYPE_FP32
    assert [w.batch_size for w in render(batching=BatchingConfig(max_batch_size=1)).model_warmup] == [1]


def test_a_dynamic_input_dimension_gets_no_warmup() -> None:
    dynamic = [TensorSpec(name="tokens", data_type="TYPE_INT64", dims=(-1,))]
    assert not render(inputs=dynamic).model_warmup


def test_the_spec_and_the_build_target_give_the_same_serving_target() -> None:
    cpu, gpu = make_isvc().obj(), make_isvc().gpu().obj()
    assert ServingTarget.from_service(cpu) == ServingTarget(device="cpu")
    assert ServingTarget.from_service(gpu) == ServingTarget(device="gpu", gpu_product=H100)
    for isvc in (cpu, gpu):
        target = ServingTarget.from_service(isvc)
        assert make_build_request(isvc=isvc).target == target.build_target
        assert ServingTarget.from_build_target(target.build_target) == target


def test_the_pure_layers_import_from_tritonclient_only_the_model_config_protobuf() -> None:
    """`.importlinter` can name only all of `tritonclient` (external packages count as one module).

    This is the finer check its exception for `triton_model_config` relies on: the generated
    protobuf classes, never a client.
    """
    operator = Path(__file__).resolve().parents[2] / "operator"
    found = set()
    for layer in ("api", "policy", "manifests"):
        for path in (operator / layer).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Import):
                    names = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and node.module:
                    names = [f"{node.module}.{alias.name}" for alias in node.names]
                else:
                    continue
                found |= {
                    (path.relative_to(operator).as_posix(), n) for n in names if n.startswith("tritonclient")
                }
    assert found == {("manifests/triton_model_config.py", "tritonclient.grpc.model_config_pb2")}
