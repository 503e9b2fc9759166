"""The autoscaler's pure parts: the policy's knobs and recent-rate window from the spec, status.learned."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from tailpilot.api.autoscaling import BatchingConfig
from tailpilot.api.v1alpha1 import InferenceService, InferenceServiceStatus
from tailpilot.controllers.autoscaler import learned_status, policy_config, recent_window_s
from tailpilot.policy import PolicyState


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
    )
    assert learned_status(state) == {"modelCorrectionLightLoad": 0.723, "modelCorrectionHeavyLoad": 1.31}
    timed = learned_status(replace(state, replica_startup_s=41.26))
    assert timed["replicaStartupSeconds"] == 41.3
    # It is what the CRD's status schema (generated from the same model) accepts.
    assert InferenceServiceStatus.model_validate({"learned": timed}).learned is not None
