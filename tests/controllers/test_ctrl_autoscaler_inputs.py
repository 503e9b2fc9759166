"""The autoscaler's pure inputs from the spec: the policy's knobs and the recent-rate window."""

from __future__ import annotations

from typing import Any

from tailpilot.api.v1alpha1 import InferenceService
from tailpilot.controllers.autoscaler import policy_config, recent_window_s


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
