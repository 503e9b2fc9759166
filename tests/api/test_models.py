"""The API models: defaults, aliases, status conversions."""

from __future__ import annotations

from datetime import UTC, datetime

from tailpilot.api.autoscaling import BatchingConfig
from tailpilot.api.engine import BatchProfilePoint, EngineProfile, ReloadCost, ServiceTimeModel
from tailpilot.api.v1alpha1 import (
    BatchingStatus,
    Condition,
    InferenceService,
    InferenceServiceSpec,
    InferenceServiceStatus,
    ProfileStatus,
)

from .invalid_specs import CPU_BASE, GPU_BASE, make_object


def test_defaults_fill_every_section() -> None:
    spec = InferenceServiceSpec.model_validate(CPU_BASE)
    assert spec.engine.backend == "onnxruntime"
    assert spec.runtime.device == "cpu"
    assert spec.batching.max_batch_size == 32
    assert spec.autoscaling.min_replicas == 1 and spec.autoscaling.enabled
    assert spec.monitoring.service_monitor
    dumped = spec.model_dump(by_alias=True, exclude_none=True)
    assert dumped["slo"]["p99LatencyMs"] == 50
    assert dumped["batching"]["maxQueueDelayMicroseconds"] == 2000


def test_round_trip_by_alias() -> None:
    obj = InferenceService.model_validate(make_object("resnet", GPU_BASE))
    again = InferenceService.model_validate(obj.model_dump(by_alias=True, mode="json"))
    assert again == obj
    assert obj.name == "resnet" and obj.namespace == "default"
    assert obj.spec.model_name(obj.name) == "resnet"


def test_batching_to_config_sorts_preferred() -> None:
    spec = InferenceServiceSpec.model_validate(
        {**CPU_BASE, "batching": {"maxBatchSize": 16, "preferredBatchSizes": [16, 4, 8]}}
    )
    assert spec.batching.to_config() == BatchingConfig(
        max_batch_size=16, preferred_batch_sizes=(4, 8, 16), max_queue_delay_us=2000, instances_per_replica=1
    )


def test_batching_status_round_trip() -> None:
    cfg = BatchingConfig(max_batch_size=8, preferred_batch_sizes=(4, 8), max_queue_delay_us=500)
    status = BatchingStatus.from_config(cfg)
    assert status.model_dump(by_alias=True)["maxQueueDelayMicroseconds"] == 500
    assert status.to_config() == cfg


def test_profile_status_mirrors_summary() -> None:
    profile = EngineProfile(
        engine_key="k",
        backend="onnxruntime",
        precision="fp32",
        hardware="cpu",
        max_batch_size=8,
        points=[
            BatchProfilePoint(
                batch_size=b, p50_ms=b, p95_ms=b * 1.5, p99_ms=b * 2.0, throughput_per_s=100.0 * b
            )
            for b in (1, 4, 8)
        ],
        service_time=ServiceTimeModel(intercept_ms=1.0, per_item_ms=0.5),
        compute_time=ServiceTimeModel(intercept_ms=0.8, per_item_ms=0.45),
        cpu_limit_millis=600,
        reload=ReloadCost(seconds=3.5, served_share=0.4, worst_latency_ms=80.0),
    )
    status = ProfileStatus.from_summary(profile.to_summary(), key="k" * 20)
    assert status.key == "k" * 20
    assert [p.batch_size for p in status.points] == [1, 4, 8]
    assert status.points[2].p99_ms == 16.0
    assert status.service_time.per_item_ms == 0.5
    assert status.compute_time is not None and status.compute_time.intercept_ms == 0.8
    assert status.cpu_limit_millis == 600
    assert status.reload is not None and (status.reload.seconds, status.reload.served_share) == (3.5, 0.4)
    # Every field of the summary, plus the key of the profile request it answers.
    assert set(ProfileStatus.model_fields) == {
        "key",
        "hardware",
        "cpu_limit_millis",
        "reload",
        "service_time",
        "compute_time",
        "points",
    }
    # A profile that did not record Triton's compute time (older builds) still converts.
    older = ProfileStatus.from_summary(profile.model_copy(update={"compute_time": None}).to_summary())
    assert older.compute_time is None


def test_status_serializes_camel_case_times() -> None:
    when = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    status = InferenceServiceStatus(
        observed_generation=3,
        conditions=[
            Condition(type="Ready", status="True", reason="AllConditionsMet", last_transition_time=when)
        ],
        replicas=2,
    )
    dumped = status.model_dump(by_alias=True, mode="json", exclude_none=True)
    assert dumped["conditions"][0]["lastTransitionTime"] == "2026-01-02T03:04:05Z"
    assert dumped["observedGeneration"] == 3
    assert InferenceServiceStatus.model_validate(dumped) == status


def test_crd_defaulting_equals_model_defaults() -> None:
    """What the API server stores after defaulting is exactly what the models dump: no spurious diffs."""
    from tailpilot import crdgen

    from .crd_sim import apply_defaults
    from .invalid_specs import VALID_SPECS

    spec_schema = crdgen.openapi_schema()["properties"]["spec"]
    for _, spec in VALID_SPECS:
        server_side = apply_defaults(spec, spec_schema)
        assert server_side == InferenceServiceSpec.model_validate(spec).model_dump(
            by_alias=True, mode="json", exclude_none=True
        )
