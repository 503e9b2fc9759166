"""`precision: auto`: the precision needing the fewest replicas, ties to capacity, then accuracy."""

from __future__ import annotations

from tailpilot.api.autoscaling import BatchingConfig
from tailpilot.api.engine import EngineProfile, ServiceTimeModel
from tailpilot.policy.config import PolicyConfig
from tailpilot.policy.precision_choice import (
    REASON_FEWEST_REPLICAS,
    REASON_NONE_USABLE,
    REASON_WAITING,
    PrecisionOption,
    choose_precision,
)

CONFIG = PolicyConfig(p99_target_ms=50.0, min_replicas=1, max_replicas=4)
BATCHING = BatchingConfig(max_batch_size=8, preferred_batch_sizes=(), max_queue_delay_us=0)


def profile(intercept_ms: float, per_item_ms: float) -> EngineProfile:
    return EngineProfile(
        engine_key="k",
        backend="onnxruntime",
        precision="",
        hardware="cpu",
        max_batch_size=8,
        points=[],
        service_time=ServiceTimeModel(intercept_ms=intercept_ms, per_item_ms=per_item_ms, jitter_cv=0.1),
    )


def choose(options, rate=0.0):
    return choose_precision(tuple(options), config=CONFIG, rate_per_s=rate, batching=BATCHING)


def test_at_no_load_the_most_capacity_per_replica_wins():
    choice = choose([PrecisionOption("fp32", profile(4.0, 2.0)), PrecisionOption("int8", profile(2.0, 1.0))])
    assert (choice.precision, choice.reason) == ("int8", REASON_FEWEST_REPLICAS)
    by = {f.precision: f for f in choice.figures}
    assert by["int8"].capacity_per_replica_per_s > by["fp32"].capacity_per_replica_per_s
    assert "fp32: 1 replica(s)" in choice.message


def test_under_load_the_fewest_replicas_wins_and_equal_engines_keep_the_more_accurate():
    same = profile(4.0, 2.0)
    choice = choose([PrecisionOption("fp32", same), PrecisionOption("int8", same)], rate=100.0)
    assert choice.precision == "fp32"
    by = {f.precision: f for f in choice.figures}
    assert by["fp32"].replicas == by["int8"].replicas is not None


def test_an_engine_outside_the_accuracy_tolerance_is_never_chosen_and_the_reason_is_kept():
    refused = "AccuracyOutOfTolerance: top-1 agreement 3.1% < 90%"
    choice = choose(
        [PrecisionOption("fp32", profile(4.0, 2.0)), PrecisionOption("int8", None, unusable=refused)]
    )
    assert choice.precision == "fp32" and refused in choice.message


def test_waits_while_a_candidate_is_not_profiled_and_says_when_none_can_serve():
    waiting = choose([PrecisionOption("fp32", profile(4.0, 2.0)), PrecisionOption("int8", None)])
    assert (waiting.precision, waiting.reason) == (None, REASON_WAITING) and "int8" in waiting.message
    none = choose(
        [PrecisionOption("fp32", None, unusable="build failed"), PrecisionOption("int8", None, unusable="x")]
    )
    assert (none.precision, none.reason) == (None, REASON_NONE_USABLE)
