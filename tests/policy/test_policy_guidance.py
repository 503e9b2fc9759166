"""The decision's guidance: where the observed time went, and what each knob is predicted to do."""

from __future__ import annotations

from policy_fakes import make_profile

from tailpilot.api.autoscaling import BatchingConfig, Observation
from tailpilot.policy import PolicyConfig, PolicyState, decide

CONFIG = PolicyConfig(p99_target_ms=50.0, min_replicas=1, max_replicas=20)


def message(*, rate: float, queue_ms: float, served_ms: float, batch: float, max_batch: int = 1) -> str:
    state = PolicyState.initial(replicas=2, batching=BatchingConfig(max_batch_size=max_batch))
    observation = Observation(
        at_s=1000.0,
        request_rate=rate,
        p99_ms=queue_ms + served_ms * 2,
        queue_time_ms=queue_ms,
        service_time_ms=served_ms,
        mean_batch_size=batch,
        ready_replicas=2,
    )
    decision, _ = decide(
        config=CONFIG, profile=make_profile(), observation=observation, state=state, now_s=1000.0
    )
    return decision.message


def test_a_queue_dominated_service_is_told_both_fixes_and_the_cheaper_one() -> None:
    # 4 ms + 0.5 ms x b per batch: one replica serves 222 req/s alone, 1600 at batch 32.
    text = message(rate=420.0, queue_ms=40.0, served_ms=4.5, batch=1.0)
    assert "queue dominates (40.0 of 44.5 ms)" in text, text
    assert "batching alone (max batch" in text and "at 2 replicas" in text, text
    assert "replicas alone" in text, text
    assert "the cheaper fix: batching" in text, text


def test_when_batching_cannot_help_replicas_are_the_fix() -> None:
    text = message(rate=3000.0, queue_ms=200.0, served_ms=20.0, batch=30.0, max_batch=32)
    assert "queue dominates" in text and "the cheaper fix: replicas" in text, text


def test_compute_alone_at_batch_one_points_at_a_faster_engine() -> None:
    text = message(rate=50.0, queue_ms=0.2, served_ms=4.5, batch=1.0)
    assert "compute dominates at batch 1.0 (4.5 of 4.7 ms)" in text and "a faster engine" in text, text


def test_no_guidance_without_the_split_or_with_batches_forming() -> None:
    assert "dominates" not in message(rate=400.0, queue_ms=0.2, served_ms=8.0, batch=4.0, max_batch=8)
    state = PolicyState.initial(replicas=2, batching=BatchingConfig(max_batch_size=8))
    plain = Observation(at_s=1000.0, request_rate=100.0, p99_ms=20.0, ready_replicas=2)
    decision, _ = decide(config=CONFIG, profile=make_profile(), observation=plain, state=state, now_s=1000.0)
    assert "dominates" not in decision.message
