"""The rotation check's pure parts: Triton's metrics page, the arrival rate, the label changes."""

from __future__ import annotations

from collections import deque

import pytest

from tailpilot.api import constants as c
from tailpilot.controllers.kubeapi import ready_pod_ip
from tailpilot.controllers.rotation import (
    PodCounters,
    Sample,
    arrival_rate_per_s,
    label_changes,
    parse_pod_counters,
)

# Triton's exposition format (as served on :8002/metrics), two versions of the model and another model.
PAGE = """# HELP nv_inference_request_success Number of successful inference requests, all batch sizes
# TYPE nv_inference_request_success counter
nv_inference_request_success{model="echo",version="1"} 120
nv_inference_request_success{model="echo",version="2"} 5
nv_inference_request_success{model="other",version="1"} 999
# HELP nv_inference_pending_request_count Instantaneous number of pending requests awaiting execution.
# TYPE nv_inference_pending_request_count gauge
nv_inference_pending_request_count{model="echo",version="1"} 7
nv_inference_pending_request_count{model="other",version="1"} 50
"""


def test_counters_of_the_model_summed_over_versions():
    assert parse_pod_counters(PAGE, model="echo") == PodCounters(success=125.0, pending=7.0)
    assert parse_pod_counters(PAGE, model="absent") is None


def sample(at_s: float, **pods: tuple[float, float]) -> Sample:
    return Sample(at_s=at_s, pods={p: PodCounters(success=s, pending=q) for p, (s, q) in pods.items()})


def test_arrivals_are_completions_plus_queue_growth_over_the_span():
    samples = [
        sample(0.0, a=(100, 0), b=(50, 0)),
        sample(3.0, a=(120, 10), b=(60, 0)),
        sample(6.0, a=(140, 20), b=(75, 0)),
    ]
    # Span 5 s: from the sample at 0 s (the newest at least 5 s older): (40 + 20) + 25 over 6 s.
    assert arrival_rate_per_s(samples, span_s=5.0) == pytest.approx(85 / 6)
    # Span 2 s: from the sample at 3 s.
    assert arrival_rate_per_s(samples, span_s=2.0) == pytest.approx((20 + 10 + 15) / 3)


def test_a_pod_that_started_since_counts_its_whole_counter_and_one_sample_gives_no_rate():
    samples = deque(
        [sample(0.0, a=(100, 0)), sample(5.0, a=(110, 0), b=(30, 2))]
    )  # as the checker keeps them
    assert arrival_rate_per_s(samples, span_s=5.0) == pytest.approx((10 + 32) / 5)
    assert arrival_rate_per_s(list(samples)[:1], span_s=5.0) is None


def test_a_draining_queue_is_not_negative_arrivals():
    samples = [sample(0.0, a=(0, 30)), sample(5.0, a=(20, 0))]
    assert arrival_rate_per_s(samples, span_s=5.0) == 0.0


def test_only_pods_whose_place_changes_are_relabelled():
    labels = {"a": c.ROTATION_IN, "b": c.ROTATION_HELD, "c": c.ROTATION_IN}
    assert label_changes(labels, frozenset({"a", "b"})) == {"a": c.ROTATION_HELD}
    assert label_changes(labels, frozenset()) == {"b": c.ROTATION_IN}


def test_a_pod_has_an_address_to_call_only_when_ready_and_addressed():
    ready = {"type": "Ready", "status": "True"}
    assert ready_pod_ip({"status": {"podIP": "10.0.0.5", "conditions": [ready]}}) == "10.0.0.5"
    assert (
        ready_pod_ip({"status": {"podIP": "10.0.0.5", "conditions": [{**ready, "status": "False"}]}}) is None
    )
    assert ready_pod_ip({"status": {"conditions": [ready]}}) is None
    assert ready_pod_ip({"status": None}) is None
