"""The executed batch-size distribution: per pod between two reads of its counts, summed, bounded."""

from __future__ import annotations

import pytest

from tailpilot.api.autoscaling import ExecutedBatchSize
from tailpilot.api.v1alpha1 import MAX_OBSERVED_BATCH_SIZES
from tailpilot.policy.batch_sizes import BatchCounts, SizeCounts, bounded, executed_batch_sizes, grown
from tailpilot.policy.signals import (
    ObservationWindows,
    PodRead,
    TritonCounters,
    batch_sizes_from_reads,
    observation_from_reads,
)


def c(executions: dict[int, int], *, ms_per_execution: float = 0.0) -> BatchCounts:
    """Cumulative counts per size (each execution taking `ms_per_execution` of compute)."""
    return {size: SizeCounts(n, n * ms_per_execution * 1000.0) for size, n in executions.items()}


def table(sizes: tuple[ExecutedBatchSize, ...] | None) -> dict[int, int]:
    assert sizes is not None
    return {s.size: s.executions for s in sizes}


def test_executions_per_size_grow_between_the_pods_reads_and_sum_across_pods():
    pods = {
        "a": [(0.0, c({1: 10, 4: 5})), (10.0, c({1: 14, 4: 9, 8: 2})), (20.0, c({1: 20, 4: 15, 8: 2}))],
        "b": [(2.0, c({1: 100})), (12.0, c({1: 110, 2: 5}))],
    }
    sizes = executed_batch_sizes(pods, since_s=0.0)
    assert table(sizes) == {1: 10 + 10, 2: 5, 4: 10, 8: 2}
    assert [s.size for s in sizes or ()] == [1, 2, 4, 8]
    per_s = {s.size: s.executions_per_s for s in sizes or ()}
    assert per_s[1] == pytest.approx(10 / 20 + 10 / 10)  # each pod over its own span
    # Shares of requests: size x executions over the sum (20 + 10 + 40 + 16 = 86 items).
    share = {s.size: s.request_share for s in sizes or ()}
    assert share == pytest.approx({1: 20 / 86, 2: 10 / 86, 4: 40 / 86, 8: 16 / 86})
    assert sum(share.values()) == pytest.approx(1.0)


def test_the_span_starts_at_the_newest_read_at_or_before_the_window_and_a_size_without_growth_is_left_out():
    pod = [(0.0, c({1: 0, 2: 0})), (10.0, c({1: 5, 2: 3})), (20.0, c({1: 9, 2: 3})), (30.0, c({1: 12, 2: 3}))]
    # Window from 15 s: the read at 10 s is the newest at or before it.
    sizes = executed_batch_sizes({"a": pod}, since_s=15.0)
    assert table(sizes) == {1: 7}
    assert (sizes or ())[0].executions_per_s == pytest.approx(7 / 20)
    # A window starting before the first read counts from the first read.
    assert table(executed_batch_sizes({"a": pod}, since_s=-100.0)) == {1: 12, 2: 3}


def test_a_restarted_pod_contributes_only_its_newest_counts():
    assert grown(c({1: 3, 2: 1}), c({1: 50, 2: 7})) == c({1: 3, 2: 1})
    # One size going down is enough to tell a restart, even when another grew past its old count.
    assert grown(c({1: 60, 4: 2}), c({1: 50, 4: 9})) == c({1: 60, 4: 2})
    assert grown(c({1: 60, 4: 9}), c({1: 50, 4: 9})) == c({1: 10})
    pods = {
        "a": [(0.0, c({1: 500, 8: 40})), (10.0, c({1: 6, 2: 2}))],
        "b": [(0.0, c({1: 1})), (10.0, c({1: 3}))],
    }
    assert table(executed_batch_sizes(pods, since_s=0.0)) == {1: 6 + 2, 2: 2}


def test_one_read_of_a_pod_gives_nothing_and_no_pod_read_twice_gives_none():
    assert executed_batch_sizes({"a": [(5.0, c({1: 9}))]}, since_s=0.0) is None
    assert executed_batch_sizes({}, since_s=0.0) is None
    # Read twice with nothing executed: measured, and empty.
    assert executed_batch_sizes({"a": [(0.0, c({1: 9})), (10.0, c({1: 9}))]}, since_s=0.0) == ()
    # A pod read once beside one read twice: only the second counts.
    pods = {"a": [(0.0, c({1: 9})), (10.0, c({1: 12}))], "new": [(10.0, c({1: 1000}))]}
    assert table(executed_batch_sizes(pods, since_s=0.0)) == {1: 3}


def test_beyond_the_bound_the_largest_sizes_are_merged_into_the_last_entry():
    counts = {size: 1 for size in range(1, 65)}
    sizes = executed_batch_sizes({"a": [(0.0, c({})), (10.0, c(counts))]}, since_s=0.0)
    assert sizes is not None and len(sizes) == 64
    kept = bounded(sizes)
    assert len(kept) == MAX_OBSERVED_BATCH_SIZES == 32
    assert [s.size for s in kept[:31]] == list(range(1, 32)) and all(s.max_size is None for s in kept[:31])
    last = kept[-1]
    assert (last.size, last.max_size, last.executions) == (32, 64, 33)
    assert last.request_share == pytest.approx(sum(range(32, 65)) / sum(range(1, 65)))
    assert sum(s.request_share for s in kept) == pytest.approx(1.0)
    assert sum(s.executions for s in kept) == sum(s.executions for s in sizes)
    assert bounded(sizes[:5]) == sizes[:5]


WINDOWS = ObservationWindows(window_s=30.0, recent_window_s=10.0, arrival_lookback_s=None)


def counters(success: float) -> TritonCounters:
    return TritonCounters(success=success, pending=0.0, exec_count=success)


def test_the_observation_carries_the_distribution_of_the_newest_reads_pods_and_nothing_else_changes():
    reads = [
        PodRead(
            at_s=0.0,
            pods={"a": counters(0), "gone": counters(0)},
            batches={"a": c({1: 0}), "gone": c({1: 0})},
        ),
        PodRead(at_s=2.0, pods={"a": counters(10), "gone": counters(5)}),
        PodRead(at_s=10.0, pods={"a": counters(40)}, batches={"a": c({1: 20, 2: 10})}),
        PodRead(at_s=12.0, pods={"a": counters(48)}),
    ]
    obs = observation_from_reads(reads, windows=WINDOWS, now_s=12.0)
    assert table(obs.executed_batch_sizes) == {1: 20, 2: 10}  # "gone" is not in the newest read
    without = observation_from_reads(
        [PodRead(at_s=r.at_s, pods=r.pods) for r in reads], windows=WINDOWS, now_s=12.0
    )
    assert without.executed_batch_sizes is None
    # The distribution is the only difference: what the policy reads is the same.
    assert obs.model_copy(update={"executed_batch_sizes": None}) == without


def test_a_sampled_read_scales_the_executions_to_the_pods_it_stands_for():
    reads = [
        PodRead(at_s=0.0, pods={"a": counters(0)}, serving=4, batches={"a": c({2: 0})}),
        PodRead(at_s=10.0, pods={"a": counters(20)}, serving=4, batches={"a": c({2: 10})}),
    ]
    (size,) = observation_from_reads(reads, windows=WINDOWS, now_s=10.0).executed_batch_sizes or ()
    assert (size.size, size.executions, size.executions_per_s, size.request_share) == (2, 40, 4.0, 1.0)
    assert batch_sizes_from_reads([], window_s=30.0) is None


def test_each_size_carries_the_mean_compute_time_of_its_executions_over_the_window():
    pods = {
        "a": [
            (0.0, c({1: 10, 4: 5}, ms_per_execution=9.0)),
            (10.0, {1: SizeCounts(30, 10 * 9e3 + 20 * 12e3), 4: SizeCounts(5, 45e3)}),
        ],
        "b": [(0.0, c({4: 0})), (10.0, c({4: 10}, ms_per_execution=30.0))],
    }
    sizes = {s.size: s for s in executed_batch_sizes(pods, since_s=0.0) or ()}
    assert sizes[1].compute_ms == pytest.approx(12.0)  # only the 20 executions of the window
    assert sizes[4].compute_ms == pytest.approx(30.0)
    # Counts without a time (statistics that carried none) give no time, not zero.
    (untimed,) = executed_batch_sizes({"a": [(0.0, c({2: 1})), (10.0, c({2: 5}))]}, since_s=0.0) or ()
    assert untimed.compute_ms is None
    # A restarted pod: its newest figures, times included.
    assert grown({1: SizeCounts(2, 50.0)}, {1: SizeCounts(9, 900.0)}) == {1: SizeCounts(2, 50.0)}
    # Merged past the bound: the mean over the merged executions.
    many = {size: SizeCounts(1, 1000.0 * size) for size in range(1, 65)}
    last = bounded(executed_batch_sizes({"a": [(0.0, {}), (10.0, many)]}, since_s=0.0) or ())[-1]
    assert last.compute_ms == pytest.approx(sum(range(32, 65)) / 33)
