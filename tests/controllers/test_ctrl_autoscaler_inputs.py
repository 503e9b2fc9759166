"""The autoscaler's pure parts: the policy's knobs, recent-rate window and burst lookback from the spec."""

from __future__ import annotations

from tailpilot.api.autoscaling import Observation
from tailpilot.controllers.autoscaler import (
    arrival_lookback_s,
    policy_config,
    recent_window_s,
    with_surge,
)
from tailpilot.policy.surge import SurgeReading
from tests.controllers.specs import service


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
