"""The serving speed and per-item slope learned from the compute time of each executed batch size."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tailpilot.api.autoscaling import BatchingConfig, ExecutedBatchSize, Observation
from tailpilot.api.engine import ServiceTimeModel
from tailpilot.policy import PolicyConfig, PolicyState
from tailpilot.policy.core import _learn_service_scale, replica_capacity_per_s
from tailpilot.policy.speed import MIN_EXECUTIONS, learned_line, speed_sample
from tests.policy.policy_fakes import make_profile

CONFIG = PolicyConfig(p99_target_ms=1000.0, min_replicas=1, max_replicas=8)

#: The profile's compute line: 100 ms a batch plus 30 ms an item (t(1) = 130 ms, t(16) = 580 ms).
PROFILED = ServiceTimeModel(intercept_ms=100.0, per_item_ms=30.0)


def executed(times: dict[int, tuple[int, float]], *, window_s: float = 30.0) -> tuple[ExecutedBatchSize, ...]:
    """size -> (executions, mean compute ms) over a window."""
    items = sum(size * n for size, (n, _) in times.items())
    return tuple(
        ExecutedBatchSize(
            size=size,
            executions=n,
            executions_per_s=n / window_s,
            request_share=size * n / items,
            compute_ms=ms,
        )
        for size, (n, ms) in sorted(times.items())
    )


def truth(size: int, *, scale: float = 1.0, slope: float = 1.0) -> float:
    return learned_line(PROFILED, scale=scale, slope_scale=slope).mean_ms(size)


def test_spread_sizes_give_both_the_speed_and_the_slope():
    # A profile whose slope is half the truth's with t(1) kept: the truth is s = 1, k = 2.
    sizes = executed({b: (40, truth(b, slope=2.0)) for b in (1, 2, 4, 8)})
    sample = speed_sample(sizes, PROFILED, slope_scale=1.0)
    assert sample is not None
    assert sample.scale == pytest.approx(1.0)
    assert sample.slope_scale == pytest.approx(2.0)
    # A uniformly slower machine: s = 1.43, k = 1.
    slower = speed_sample(
        executed({b: (40, truth(b, scale=1.43)) for b in (1, 2, 4, 8)}), PROFILED, slope_scale=1.0
    )
    assert (
        slower is not None
        and slower.scale == pytest.approx(1.43)
        and slower.slope_scale == pytest.approx(1.0)
    )


def test_one_size_gives_the_speed_at_the_slope_learned_so_far():
    # Only batches of 4: the slope cannot show, so the time is compared with the line at the slope
    # learned so far (k = 2: 100 + 30 + 2 * 30 * 3 = 310 ms at scale 1).
    sample = speed_sample(executed({4: (50, 310.0 * 1.2)}), PROFILED, slope_scale=2.0)
    assert sample is not None and sample.slope_scale is None
    assert sample.scale == pytest.approx(1.2)
    # Mostly singles and a few pairs: the spread is too small for the slope to show either.
    narrow = speed_sample(executed({1: (95, 130.0), 2: (5, 160.0)}), PROFILED, slope_scale=1.0)
    assert narrow is not None and narrow.slope_scale is None and narrow.scale == pytest.approx(1.0)


def test_too_few_or_untimed_executions_say_nothing():
    assert speed_sample(executed({1: (MIN_EXECUTIONS - 1, 130.0)}), PROFILED, slope_scale=1.0) is None
    untimed = (ExecutedBatchSize(size=1, executions=500, executions_per_s=10.0, request_share=1.0),)
    assert speed_sample(untimed, PROFILED, slope_scale=1.0) is None
    # A merged entry (sizes 32-64) is a range, not a size: left out.
    merged = (
        ExecutedBatchSize(
            size=32, max_size=64, executions=500, executions_per_s=10, request_share=1, compute_ms=9
        ),
    )
    assert speed_sample(merged, PROFILED, slope_scale=1.0) is None


def test_the_busy_share_is_the_compute_time_per_second():
    sample = speed_sample(executed({2: (300, 50.0)}, window_s=30.0), PROFILED, slope_scale=1.0)
    assert sample is not None and sample.busy_share == pytest.approx(10 * 0.050)


def test_the_learned_line_moves_the_profile_by_both_factors():
    line = learned_line(PROFILED, scale=1.5, slope_scale=2.0)
    assert line.mean_ms(1) == pytest.approx(1.5 * 130.0)
    assert line.mean_ms(5) - line.mean_ms(4) == pytest.approx(1.5 * 2.0 * 30.0)
    assert learned_line(PROFILED, scale=1.0, slope_scale=1.0) == PROFILED


def observation(sizes: tuple[ExecutedBatchSize, ...], *, replicas: int = 2) -> Observation:
    rate = sum(s.size * s.executions_per_s for s in sizes)
    return Observation(
        at_s=600.0,
        request_rate=rate,
        p99_ms=300.0,
        ready_replicas=replicas,
        executed_batch_sizes=sizes,
        # The page's figures, which the narrow-spread path would read: a mid-size mean batch.
        mean_batch_size=3.0,
        compute_time_ms=500.0,
    )


def state(*, replicas: int = 2, queue_backlog_at: float | None = None) -> PolicyState:
    initial = PolicyState.initial(replicas=replicas, batching=BatchingConfig(max_batch_size=16))
    if queue_backlog_at is None:
        return initial
    return replace(initial, timers=replace(initial.timers, last_backlog_s=queue_backlog_at))


def test_the_policy_learns_speed_and_slope_from_mid_size_batches_and_during_a_backlog():
    # Batches of 1-8 (a mean of ~3, where the per-request path learns nothing) on a machine whose
    # slope is twice the profile's, with a backlog seen 10 s ago: every window counts.
    sizes = executed({b: (60, truth(b, slope=2.0)) for b in (1, 2, 3, 4, 8)})
    learned = state(queue_backlog_at=590.0)
    for _ in range(8):
        learned = _learn_service_scale(CONFIG, learned, observation(sizes), PROFILED)
    assert learned.learned.service_scale == pytest.approx(1.0, abs=0.01)
    assert learned.learned.slope_scale == pytest.approx(2.0, rel=0.01)


def test_a_faster_machine_is_believed_only_from_busy_replicas():
    fast = {b: truth(b, scale=0.7) for b in (1, 2, 4, 8)}
    # 40 executions of each size in 30 s on 2 replicas: each busy ~8% of the time.
    idle = _learn_service_scale(
        CONFIG, state(), observation(executed({b: (40, ms) for b, ms in fast.items()})), PROFILED
    )
    assert idle.learned.service_scale == 1.0
    # Busy replicas (each computing ~90% of the time): learned.
    busy_sizes = executed({b: (round(0.9 * 2 * 30_000 / (4 * ms)), ms) for b, ms in fast.items()})
    busy = _learn_service_scale(CONFIG, state(), observation(busy_sizes), PROFILED)
    assert busy.learned.service_scale < 0.9


def test_capacity_follows_the_learned_slope():
    # A replica's capacity at max batch 32 drops when each item costs twice as much.
    profile = make_profile(intercept_ms=4.0, per_item_ms=0.5)
    initial = PolicyState.initial(replicas=1, batching=BatchingConfig(max_batch_size=32))
    steeper = replace(initial, learned=replace(initial.learned, slope_scale=2.0))
    assert replica_capacity_per_s(profile, steeper) < 0.8 * replica_capacity_per_s(profile, initial)
