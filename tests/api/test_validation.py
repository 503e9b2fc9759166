"""Semantic checks the API server cannot do."""

from __future__ import annotations

from tailpilot.api.autoscaling import BatchingConfig
from tailpilot.api.v1alpha1 import InferenceServiceSpec
from tailpilot.api.validation import check_batching, check_spec

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


def test_batching_outside_engine_profile() -> None:
    cfg = BatchingConfig(max_batch_size=64, preferred_batch_sizes=(16, 64))
    fields = [p.field for p in check_batching(cfg, engine_max_batch_size=32)]
    assert fields == ["spec.batching.maxBatchSize", "spec.batching.preferredBatchSizes"]
    assert check_batching(BatchingConfig(max_batch_size=32), engine_max_batch_size=32) == []


def test_amounts_the_api_server_would_refuse_in_every_pod_are_named_before_any_build() -> None:
    spec = _spec(
        CPU_BASE,
        {
            "runtime": {
                "resources": {
                    "limits": {"cpu": "1", "memory": "lots"},
                    "requests": {"cpu": "2", "memory": "1Gi", "ephemeral-storage": "-1"},
                }
            }
        },
    )
    problems = check_spec(spec, name="x")
    assert [p.field for p in problems] == [
        "spec.runtime.resources.limits.memory",
        "spec.runtime.resources.requests.ephemeral-storage",
        "spec.runtime.resources.requests.cpu",
    ]
    assert "'lots' is not a quantity" in problems[0].message
    assert "'2' is above its limit '1'" in problems[2].message
    # Equal amounts, and binary against decimal spellings of one value, are fine.
    fine = _spec(
        CPU_BASE,
        {
            "runtime": {
                "resources": {
                    "limits": {"cpu": "1", "memory": "1Gi"},
                    "requests": {"cpu": "1000m", "memory": "1073741824"},
                }
            }
        },
    )
    assert check_spec(fine, name="x") == []


def test_an_affinity_the_api_server_would_refuse_is_named() -> None:
    spec = _spec(CPU_BASE, {"runtime": {"affinity": {"nodeAfinity": {}, "podAntiAffinity": ["x"]}}})
    problems = check_spec(spec, name="x")
    assert [p.field for p in problems] == [
        "spec.runtime.affinity.nodeAfinity",
        "spec.runtime.affinity.podAntiAffinity",
    ]
    assert "unknown field" in problems[0].message and "must be an object" in problems[1].message
