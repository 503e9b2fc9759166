"""The fast signals: the pods' cumulative Triton counters, read every few seconds, into an Observation."""

from __future__ import annotations

import pytest

from tailpilot.policy.estimate import Summary
from tailpilot.policy.signals import (
    READ_PERIOD_S,
    ObservationWindows,
    PodLatency,
    PodRead,
    ReadHistory,
    TritonCounters,
    arrival_counts,
    arrival_rate_per_s,
    completion_rate_per_s,
    observation_from_reads,
    pod_metrics_from_reads,
    read_period_s,
    sample_pods,
)


def counters(success: float, pending: float = 0.0, **more: float) -> TritonCounters:
    return TritonCounters(success=success, pending=pending, **more)


def read(at_s: float, **pods: TritonCounters) -> PodRead:
    return PodRead(at_s=at_s, pods=pods)


def test_rates_are_counter_growth_per_second_between_the_newest_read_and_one_a_window_older():
    reads = [
        read(0.0, a=counters(0, exec_count=0, inference_count=0)),
        read(10.0, a=counters(100, exec_count=20, inference_count=100, queue_duration_us=5e5)),
        read(20.0, a=counters(300, exec_count=60, inference_count=300, queue_duration_us=1.5e6)),
    ]
    (pod,) = pod_metrics_from_reads(reads, window_s=10.0, recent_window_s=None)
    assert pod.request_rate == pytest.approx(20.0)  # (300 - 100) / 10 s
    assert pod.exec_count_rate == pytest.approx(4.0)
    assert pod.queue_duration_us_rate == pytest.approx(1e5)
    # A window longer than the history measures from the oldest read.
    (whole,) = pod_metrics_from_reads(reads, window_s=60.0)
    assert whole.request_rate == pytest.approx(15.0)


def test_a_window_between_reads_measures_from_the_newest_read_before_its_start():
    reads = [read(0.0, a=counters(0)), read(4.0, a=counters(40)), read(8.0, a=counters(120))]
    # Window 6 s starts at 2 s: the read at 0 s is the newest at or before it.
    (pod,) = pod_metrics_from_reads(reads, window_s=6.0)
    assert pod.request_rate == pytest.approx(15.0)


def test_a_restarted_pod_counts_from_zero_and_a_new_pod_gives_its_queue_but_no_rate():
    reads = [read(0.0, a=counters(500)), read(5.0, a=counters(20), b=counters(7, pending=3))]
    a, b = pod_metrics_from_reads(reads, window_s=60.0)
    assert a.request_rate == pytest.approx(4.0)  # reset to 0, then 20 answered in 5 s
    assert b.request_rate is None and b.pending_requests == 3.0


def test_arrivals_per_bin_are_completions_plus_queue_growth_in_the_bin_of_the_newer_read():
    reads = [
        read(0.0, a=counters(0), b=counters(0)),
        read(2.0, a=counters(10, pending=4), b=counters(6)),
        read(4.0, a=counters(20, pending=0), b=counters(12)),
        read(6.0, a=counters(20, pending=0), b=counters(30, pending=10), c=counters(50, pending=5)),
    ]
    # Bin (0,2]: 10+4 + 6; (2,4]: 10-4 + 6; (4,6]: 0 + 18+10; pod c's first read counts nothing.
    assert arrival_counts(reads, lookback_s=60.0, bin_s=2.0) == (20.0, 12.0, 28.0)
    # The lookback keeps the newest bins; a bin of 4 s sums two reads.
    assert arrival_counts(reads, lookback_s=4.0, bin_s=2.0) == (12.0, 28.0)
    assert arrival_counts(reads, lookback_s=60.0, bin_s=4.0) == (40.0,)
    assert arrival_counts(reads[:1], lookback_s=60.0, bin_s=2.0) == ()


def test_a_draining_queue_is_never_negative_arrivals():
    reads = [read(0.0, a=counters(0, pending=30)), read(2.0, a=counters(5, pending=0))]
    assert arrival_counts(reads, lookback_s=10.0, bin_s=2.0) == (0.0,)


WINDOWS = ObservationWindows(window_s=60.0, recent_window_s=4.0, arrival_lookback_s=6.0, arrival_bin_s=2.0)


def test_the_observation_sums_the_pods_rates_and_merges_prometheus_latency():
    reads = [
        read(100.0, a=counters(0, request_duration_us=0), b=counters(0, request_duration_us=0)),
        read(102.0, a=counters(20, request_duration_us=4e5), b=counters(10, request_duration_us=2e5)),
        read(
            104.0,
            a=counters(60, pending=2, request_duration_us=1.2e6),
            b=counters(20, request_duration_us=4e5),
        ),
        read(
            106.0,
            a=counters(100, pending=4, request_duration_us=2e6),
            b=counters(30, request_duration_us=6e5),
        ),
    ]
    latency = {"a": PodLatency(p99_us=40_000.0), "b": PodLatency(p99_us=40_000.0)}
    obs = observation_from_reads(reads, windows=WINDOWS, now_s=107.0, latency=latency)
    assert obs.request_rate == pytest.approx(130 / 6)
    assert obs.recent_request_rate == pytest.approx((80 + 20) / 4) and obs.recent_window_s == 4.0
    assert obs.p99_ms == pytest.approx(40.0)
    assert obs.queue_depth_per_replica == pytest.approx(2.0) and obs.ready_replicas == 2
    assert obs.data_age_s == pytest.approx(1.0)
    assert obs.arrival_counts == (30.0, 52.0, 52.0) and obs.arrival_bin_s == 2.0
    # No latency from Prometheus: rates still, no P99.
    blind = observation_from_reads(reads, windows=WINDOWS, now_s=107.0)
    assert blind.p99_ms is None and blind.request_rate == obs.request_rate


def test_compute_input_and_output_per_request_come_from_the_pods_counters_and_the_tails_from_prometheus():
    def parts(success: float) -> TritonCounters:
        # Per request: 0.2 ms of compute input, 5 ms of compute infer, 0.5 ms of compute output.
        return counters(
            success,
            compute_input_duration_us=success * 200,
            compute_duration_us=success * 5000,
            compute_output_duration_us=success * 500,
        )

    reads = [read(100.0, a=parts(0)), read(102.0, a=parts(40)), read(106.0, a=parts(120))]
    latency = {
        "a": PodLatency(
            p99_us=30_000.0,
            queue=Summary(p99_us=12_000.0, quantiles_us=((0.9, 4000.0),)),
            compute=Summary(p99_us=6000.0),
        )
    }
    (pod,) = pod_metrics_from_reads(reads, window_s=6.0, latency=latency)
    assert pod.compute_input_duration_us_rate == pytest.approx(120 * 200 / 6)
    assert pod.queue_summary == latency["a"].queue and pod.compute_summary == latency["a"].compute
    obs = observation_from_reads(reads, windows=WINDOWS, now_s=106.0, latency=latency)
    assert obs.compute_input_time_ms == pytest.approx(0.2)
    assert obs.compute_time_ms == pytest.approx(5.0)
    assert obs.compute_output_time_ms == pytest.approx(0.5)
    assert (obs.queue_time_p99_ms, obs.compute_time_p99_ms) == (pytest.approx(12.0), pytest.approx(6.0))
    # Prometheus without the parts' summaries (an older query's answer): the means, no tails.
    plain = observation_from_reads(reads, windows=WINDOWS, now_s=106.0, latency={"a": PodLatency(p99_us=3e4)})
    assert (plain.queue_time_p99_ms, plain.compute_time_p99_ms) == (None, None)
    assert plain.compute_input_time_ms == pytest.approx(0.2)


def test_no_read_is_missing_data_and_no_lookback_sizes_no_bursts():
    assert observation_from_reads([], windows=WINDOWS, now_s=5.0).request_rate is None
    reads = [read(0.0, a=counters(0)), read(2.0, a=counters(8))]
    flat = ObservationWindows(window_s=60.0, recent_window_s=15.0, arrival_lookback_s=None)
    obs = observation_from_reads(reads, windows=flat, now_s=2.0)
    assert obs.arrival_counts == () and obs.arrival_bin_s is None and obs.request_rate == pytest.approx(4.0)


def test_the_history_keeps_its_span_and_starts_again_when_the_clock_steps_back():
    history = ReadHistory(keep_s=10.0)
    for t in (0.0, 4.0, 8.0, 12.0):
        history.add(read(t, a=counters(t)))
    assert [r.at_s for r in history.reads] == [4.0, 8.0, 12.0]
    history.add(read(12.0, a=counters(50)))  # the newest's very time: nothing new
    assert history.newest is not None and history.newest.pods["a"].success == 12.0
    # The wall clock stepped back an hour: the kept reads lie across the step, the history restarts
    # from the new read (and grows again from there), rather than freezing on the old ones.
    history.add(read(-3588.0, a=counters(99)))
    history.add(read(-3586.0, a=counters(101)))
    assert [r.at_s for r in history.reads] == [-3588.0, -3586.0]
    obs = observation_from_reads(history.reads, windows=WINDOWS, now_s=-3586.0)
    assert obs.request_rate == pytest.approx(1.0)


def test_the_read_period_stays_at_two_seconds_within_the_budget_and_grows_in_steps_beyond_it():
    assert read_period_s(1000, reads_per_s=500) == READ_PERIOD_S  # 500 services of 2 pods
    assert read_period_s(1001, reads_per_s=500) == 2.5  # never a period that would exceed it
    assert read_period_s(2000, reads_per_s=500) == 4.0
    assert read_period_s(2100, reads_per_s=500) == 4.5
    assert read_period_s(10**6, reads_per_s=0) == READ_PERIOD_S  # no budget


def test_arrivals_read_every_four_seconds_are_binned_by_that_period_not_by_two():
    # Two pods at 10 requests/s each, read every 4 s: bins of the read period carry 80 each, where
    # bins of 2 s would alternate empty and doubled (a burst that never was).
    reads = [
        PodRead(at_s=4.0 * i, pods={p: TritonCounters(success=40.0 * i, pending=0.0) for p in "ab"})
        for i in range(6)
    ]
    assert arrival_counts(reads, lookback_s=20.0, bin_s=4.0) == (80.0,) * 5
    assert arrival_counts(reads, lookback_s=20.0, bin_s=2.0) == (0.0, 80.0) * 5


def test_a_large_service_is_read_through_a_stable_bounded_sample():
    pods = [f"svc-{i:03d}" for i in range(100)]
    sample = sample_pods(pods, limit=32)
    assert len(sample) == 32 and set(sample) <= set(pods)
    assert sample_pods(list(reversed(pods)), limit=32) == sample  # the order pods come in is irrelevant
    # A pod leaving the sample makes room for one other; the rest stay (their rates need them).
    gone = sample[0]
    after = sample_pods([p for p in pods if p != gone], limit=32)
    assert len(set(after) - set(sample)) == 1 and set(sample) - set(after) == {gone}
    assert sample_pods(pods[:5], limit=32) == tuple(pods[:5])


def test_a_sampled_read_stands_for_every_serving_pod():
    # 64 pods, each 10 requests/s and a queue growing 1/s; the read asks 32 of them.
    def counters(t: float) -> dict[str, TritonCounters]:
        return {f"p{i:02d}": TritonCounters(success=10.0 * t, pending=1.0 * t) for i in range(64)}

    full = [PodRead(at_s=t, pods=counters(t)) for t in (0.0, 2.0, 4.0, 6.0)]
    sampled = [PodRead.sampled(t, counters(t), limit=32) for t in (0.0, 2.0, 4.0, 6.0)]
    assert all(len(r.pods) == 32 and r.serving == 64 for r in sampled)
    windows = ObservationWindows(window_s=6.0, recent_window_s=4.0, arrival_lookback_s=6.0)
    whole = observation_from_reads(full, windows=windows, now_s=6.0)
    sample = observation_from_reads(sampled, windows=windows, now_s=6.0)
    assert sample.request_rate == pytest.approx(whole.request_rate) == pytest.approx(640.0)
    assert sample.recent_request_rate == pytest.approx(whole.recent_request_rate)
    assert sample.arrival_counts == pytest.approx(whole.arrival_counts)
    assert sample.ready_replicas == whole.ready_replicas == 64
    assert sample.queue_depth_per_replica == pytest.approx(whole.queue_depth_per_replica)
    assert arrival_rate_per_s(sampled, span_s=4.0) == pytest.approx(704.0)  # completions + queue growth
    assert completion_rate_per_s(sampled, span_s=4.0) == pytest.approx(640.0)


def test_time_per_request_counts_a_pod_that_joined_inside_the_window_by_what_it_served():
    # Pod a queued 500 ms per request for the whole 30 s window; b joined 6 s before its end, with an
    # empty queue. Triton's counters say 60 + 6 requests and 30 s of queueing: 455 ms per request.
    reads = [
        read(100.0, a=counters(0, queue_duration_us=0)),
        read(124.0, a=counters(48, queue_duration_us=24e6), b=counters(0, queue_duration_us=0)),
        read(130.0, a=counters(60, queue_duration_us=30e6), b=counters(6, queue_duration_us=0)),
    ]
    windows = ObservationWindows(window_s=30.0, recent_window_s=6.0, arrival_lookback_s=None)
    obs = observation_from_reads(reads, windows=windows, now_s=130.0)
    assert obs.queue_time_ms == pytest.approx(30e3 / 66)  # not (1 s/s) / (2 + 1 req/s) = 333 ms
    assert obs.request_rate == pytest.approx(60 / 30 + 6 / 6)  # rates stay per second: b serves 1/s now
