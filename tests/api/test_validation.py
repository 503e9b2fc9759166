"""Semantic checks the API server cannot do."""

from __future__ import annotations

from tailpilot.api.autoscaling import BatchingConfig
from tailpilot.api.engine import BuildOutcome, BuildResult, TensorSpec
from tailpilot.api.v1alpha1 import InferenceServiceSpec
from tailpilot.api.validation import Problem, check_against_build, check_batching, check_spec, format_problems

from .invalid_specs import CPU_BASE, GPU_BASE, merge


def _spec(base: dict, patch: dict | None = None) -> InferenceServiceSpec:
    return InferenceServiceSpec.model_validate(merge(base, patch or {}))


def test_valid_specs_have_no_problems() -> None:
    assert check_spec(_spec(GPU_BASE), name="resnet") == []
    assert check_spec(_spec(CPU_BASE), name="cpu-svc") == []


def test_unknown_gpu_product() -> None:
    problems = check_spec(_spec(GPU_BASE, {"runtime": {"gpu": {"product": "NVIDIA-Z9000"}}}), name="x")
    assert [p.field for p in problems] == ["spec.runtime.gpu.product"]
    assert "NVIDIA-Z9000" in problems[0].message


def test_name_must_start_with_letter_and_gpu_resources_not_overridden() -> None:
    spec = _spec(CPU_BASE, {"runtime": {"resources": {"limits": {"nvidia.com/gpu": 2, "cpu": "2"}}}})
    fields = [p.field for p in check_spec(spec, name="9lives")]
    assert fields == ["metadata.name", "spec.runtime.resources.limits"]


def test_cpu_quantities_the_engine_is_built_under_must_be_readable() -> None:
    spec = _spec(CPU_BASE, {"runtime": {"resources": {"limits": {"cpu": "two"}, "requests": {"cpu": "1Gi"}}}})
    problems = check_spec(spec, name="x")
    assert [p.field for p in problems] == [
        "spec.runtime.resources.limits.cpu",
        "spec.runtime.resources.requests.cpu",
    ]
    assert "'two' is not a CPU quantity above zero" in problems[0].message
    zero_limit = _spec(CPU_BASE, {"runtime": {"resources": {"limits": {"cpu": "0"}}}})
    assert [p.field for p in check_spec(zero_limit, name="x")] == ["spec.runtime.resources.limits.cpu"]
    fine = _spec(CPU_BASE, {"runtime": {"resources": {"limits": {"cpu": "1500m"}, "requests": {"cpu": 0}}}})
    assert check_spec(fine, name="x") == []


def test_tensorrt_needs_native_variant() -> None:
    problems = check_spec(_spec(GPU_BASE, {"runtime": {"servingVariant": "python"}}), name="x")
    assert [p.field for p in problems] == ["spec.runtime.servingVariant"]


def _result(*inputs: TensorSpec) -> BuildResult:
    return BuildResult(
        outcome=BuildOutcome.SUCCEEDED,
        inputs=inputs,
        outputs=(TensorSpec(name="logits", data_type="TYPE_FP32", dims=(1000,)),),
    )


def test_shapes_checked_against_build_result() -> None:
    spec = _spec(GPU_BASE)  # shapes for "input" with [3,224,224]
    ok = _result(TensorSpec(name="input", data_type="TYPE_FP32", dims=(3, -1, -1)))
    assert check_against_build(spec, result=ok) == []
    renamed = _result(TensorSpec(name="pixels", data_type="TYPE_FP32", dims=(3, -1, -1)))
    assert [p.field for p in check_against_build(spec, result=renamed)] == ["spec.engine.shapes[0].input"]
    fewer_dims = _result(TensorSpec(name="input", data_type="TYPE_FP32", dims=(-1,)))
    assert [p.field for p in check_against_build(spec, result=fewer_dims)] == ["spec.engine.shapes[0].min"]
    fixed = _result(TensorSpec(name="input", data_type="TYPE_FP32", dims=(3, 256, -1)))
    problems = check_against_build(spec, result=fixed)
    assert [p.field for p in problems] == ["spec.engine.shapes[0].opt"]
    assert "fixed at 256" in format_problems(problems)


def test_output_override_names_checked() -> None:
    spec = _spec(CPU_BASE, {"model": {"outputs": [{"name": "probs", "dataType": "TYPE_FP32", "dims": [10]}]}})
    result = _result(TensorSpec(name="x", data_type="TYPE_FP32", dims=(4,)))
    assert check_against_build(spec, result=result) == [
        Problem("spec.model.outputs[0].name", "model has no output 'probs'")
    ]


def test_batching_outside_engine_profile() -> None:
    cfg = BatchingConfig(max_batch_size=64, preferred_batch_sizes=(16, 64))
    fields = [p.field for p in check_batching(cfg, engine_max_batch_size=32)]
    assert fields == ["spec.batching.maxBatchSize", "spec.batching.preferredBatchSizes"]
    assert check_batching(BatchingConfig(max_batch_size=32), engine_max_batch_size=32) == []
