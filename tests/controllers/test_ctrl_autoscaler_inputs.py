"""The autoscaler's pure parts: the policy's knobs and recent-rate window from the spec, status.learned."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from tailpilot.api.autoscaling import BatchingConfig, Observation
from tailpilot.api.v1alpha1 import InferenceService, InferenceServiceStatus
from tailpilot.controllers.autoscaler import (
    arrival_lookback_s,
    engine_profile,
    learned_status,
    policy_config,
    recent_window_s,
    restore_learned,
    with_surge,
)
from tailpilot.policy import PolicyState
from tailpilot.policy.surge import SurgeReading


def service(**spec: Any) -> InferenceService:
    return InferenceService.model_validate(
        {
            "apiVersion": "tailpilot.io/v1alpha1",
            "kind": "InferenceService",
            "metadata": {"name": "resnet", "namespace": "shop"},
            "spec": {"model": {"uri": "pvc://models/resnet50.onnx"}, "slo": {"p99LatencyMs": 50}, **spec},
        }
    )


def test_the_recent_window_is_a_control_period_but_at_least_two_scrapes():
    assert recent_window_s(service(), control_period_s=15) == 30  # default 15 s scrapes: two of them
    fast = service(monitoring={"scrapeIntervalSeconds": 1})
    assert recent_window_s(fast, control_period_s=4) == 4


def test_bursts_are_looked_for_over_the_stabilization_window_unless_switched_off():
    assert arrival_lookback_s(service()) == 300
    assert arrival_lookback_s(service(autoscaling={"scaleDownStabilizationSeconds": 120})) == 120
    assert arrival_lookback_s(service(autoscaling={"absorbBursts": False})) is None


def test_policy_config_carries_the_spec_bounds():
    config = policy_config(
        service(autoscaling={"minReplicas": 2, "maxReplicas": 7, "dryRun": True}), control_period_s=10
    )
    assert (config.min_replicas, config.max_replicas, config.dry_run) == (2, 7, True)
    assert (config.p99_target_ms, config.control_period_s) == (50, 10)


def test_status_learned_shows_the_corrections_and_a_timed_start_up_only_once_timed():
    state = replace(
        PolicyState.initial(replicas=2, batching=BatchingConfig(max_batch_size=8)),
        correction=0.7234,
        correction_heavy=1.31,
        service_scale=1.6666,
    )
    assert learned_status(state) == {
        "modelCorrectionLightLoad": 0.723,
        "modelCorrectionHeavyLoad": 1.31,
        "serviceTimeScale": 1.667,
    }
    timed = learned_status(replace(state, replica_startup_s=41.26))
    assert timed["replicaStartupSeconds"] == 41.3
    # It is what the CRD's status schema (generated from the same model) accepts.
    assert InferenceServiceStatus.model_validate({"learned": timed}).learned is not None


def test_a_restarted_operator_starts_from_what_the_status_kept():
    fresh = PolicyState.initial(replicas=3, batching=BatchingConfig(max_batch_size=8))
    learned = replace(fresh, correction=0.8, correction_heavy=1.4, service_scale=1.9, replica_startup_s=0.0)
    restored = restore_learned(fresh, learned_status(learned))
    assert restored == learned
    # Nothing kept (a new service, or one an older operator wrote): the initial state as is.
    assert restore_learned(fresh, None) == fresh
    untimed = restore_learned(fresh, {"modelCorrectionLightLoad": 0.9})
    assert (untimed.correction, untimed.service_scale, untimed.replica_startup_s) == (0.9, 1.0, None)
    # A field a newer operator wrote is skipped; a value that does not validate drops it all.
    newer = restore_learned(fresh, {"serviceTimeScale": 1.5, "queueingModel": "v2"})
    assert newer.service_scale == 1.5
    assert restore_learned(fresh, {"serviceTimeScale": -1, "modelCorrectionLightLoad": 0.9}) == fresh


def test_the_policys_profile_carries_tritons_compute_time_when_the_build_recorded_it():
    status: dict[str, Any] = {
        "engine": {"key": "abc", "tritonBackend": "onnxruntime"},
        "profile": {
            "hardware": "cpu",
            "serviceTime": {"interceptMs": 2.0, "perItemMs": 1.0, "jitterCv": 0.1},
            "computeTime": {"interceptMs": 1.5, "perItemMs": 0.9},
            "points": [{"batchSize": 1, "p99Ms": 4.0, "throughputPerS": 300.0}],
        },
    }
    profile = engine_profile(status, max_batch_size=8)
    assert profile is not None and profile.compute_time is not None
    assert (profile.compute_time.intercept_ms, profile.compute_time.per_item_ms) == (1.5, 0.9)
    assert profile.service_time.jitter_cv == 0.1
    status["profile"]["computeTime"] = None  # an older build's profile
    older = engine_profile(status, max_batch_size=8)
    assert older is not None and older.compute_time is None


def test_a_surge_decision_reads_the_fast_checks_completions_as_the_recent_rate():
    surge = SurgeReading(
        arrival_rate_per_s=30.0, completion_rate_per_s=20.0, span_s=5.0, capacity_per_s=19.1, replicas=1
    )
    seen = Observation(
        at_s=100.0, request_rate=12.0, p99_ms=80.0, recent_request_rate=14.0, recent_window_s=15.0
    )
    used = with_surge(seen, surge)
    assert (used.recent_request_rate, used.recent_window_s) == (20.0, 5.0)
    assert used.model_copy(update={"recent_request_rate": 14.0, "recent_window_s": 15.0}) == seen
    assert with_surge(seen, None) is seen
    # No data from Prometheus: the policy holds; the fast check does not stand in for it.
    missing = Observation(at_s=100.0, request_rate=None, p99_ms=None)
    assert with_surge(missing, surge) is missing
