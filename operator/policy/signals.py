"""The fast signals: the pods' own Triton counters, read every few seconds, turned into an Observation.

One path for the operator and the benchmark. The operator reads each Ready Triton pod's metrics
page (`tailpilot.controllers.signals.pod_signals`); the simulator hands the same cumulative counters of its
simulated pods. Both append one `PodRead` per read period to a `ReadHistory` and build the
policy's `Observation` with `observation_from_reads`, with the windows of `ObservationWindows`
(derived from the spec's defaults in `tailpilot.policy.from_spec`). Prometheus stays the source of
the latency summaries (each pod's P99 and other quantiles as of its last scrape), passed in as
`PodLatency`: the SLO feedback, alerts and history stay where a platform team looks for them.

Why read the pods rather than Prometheus: a scrape interval (15 s by default) plus a `rate` window
(two scrapes at least) means a load step shows in Prometheus' rates 30 s or more after it starts,
and arrival bins of a scrape interval blur a burst into the baseline. The pods' own counters, read
every `READ_PERIOD_S`, show it within seconds (Knative's autoscaler reads its queue-proxies
directly every second for the same reason).

Rates are counter growth between two reads of the same pod (a counter that went down was reset by
a restart and counts from zero), over the newest read and the pod's newest read at least the window
older (or its oldest): what `rate()` computes, without Prometheus' extrapolation to the window's
edges. Arrivals per bin are, per pod, its completions plus its queue's growth between consecutive
reads, counted in the bin where the newer read falls; a pod counts only what it served while read.
"""

from __future__ import annotations

import bisect
import math
import zlib
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from tailpilot.api.autoscaling import ExecutedBatchSize, Observation
from tailpilot.policy.batch_sizes import BatchCounts, executed_batch_sizes
from tailpilot.policy.estimate import PodMetrics, Summary, observation_from_pod_metrics, split_p99

#: Seconds between two reads of a service's pods (the operator's default and the benchmark's): the
#: period of the fast rules (rotation, surge check) too.
READ_PERIOD_S: Final = 2.0
#: Seconds of arrivals the fast rules measure their rate over: a burst must show at once.
ARRIVAL_SPAN_S: Final = 5.0
#: Pod reads per second the operator sends at most, all services together, unless configured: about
#: a fifth of a core (`make bench-fast-loop`: 0.17 cores for 458 reads/s).
DEFAULT_READS_PER_S: Final = 500.0
#: A longer read period is a multiple of this (a steady bin for the arrival curve, not a jitter).
_PERIOD_STEP_S: Final = 0.5
#: Pods one read of a service asks at most: a larger service is read through a sample of them.
MAX_PODS_PER_READ: Final = 32


def read_period_s(pods: int, *, reads_per_s: float = DEFAULT_READS_PER_S) -> float:
    """Seconds between two reads of a service's pods when `pods` pods are read in all.

    `READ_PERIOD_S` while that keeps within `reads_per_s`; beyond it every service is read less
    often, alike, so the loop degrades (coarser arrivals, a later surge check) instead of falling
    behind. A budget of 0 or less means no budget.
    """
    if reads_per_s <= 0 or pods <= reads_per_s * READ_PERIOD_S:
        return READ_PERIOD_S
    return math.ceil(pods / reads_per_s / _PERIOD_STEP_S - 1e-9) * _PERIOD_STEP_S


@dataclass(frozen=True, slots=True)
class TritonCounters:
    """One pod's Triton counters for the service's model (cumulative since the server started), and its queue.

    Attributes:
        success: `nv_inference_request_success`.
        pending: `nv_inference_pending_request_count` (a gauge: requests queued now).
        failure: `nv_inference_request_failure`.
        inference_count: `nv_inference_count` (items, > requests when clients batch).
        exec_count: `nv_inference_exec_count` (batches executed).
        request_duration_us: `nv_inference_request_duration_us`.
        queue_duration_us: `nv_inference_queue_duration_us`.
        compute_duration_us: `nv_inference_compute_infer_duration_us`.
        compute_input_duration_us: `nv_inference_compute_input_duration_us`.
        compute_output_duration_us: `nv_inference_compute_output_duration_us`.
    """

    success: float
    pending: float
    failure: float = 0.0
    inference_count: float = 0.0
    exec_count: float = 0.0
    request_duration_us: float = 0.0
    queue_duration_us: float = 0.0
    compute_duration_us: float = 0.0
    compute_input_duration_us: float = 0.0
    compute_output_duration_us: float = 0.0


_ZERO = TritonCounters(success=0.0, pending=0.0)

#: PodMetrics rate field -> the TritonCounters counter it is the per-second growth of.
RATE_FIELDS: Final[Mapping[str, str]] = {
    "request_rate": "success",
    "failure_rate": "failure",
    "inference_count_rate": "inference_count",
    "exec_count_rate": "exec_count",
    "request_duration_us_rate": "request_duration_us",
    "queue_duration_us_rate": "queue_duration_us",
    "compute_duration_us_rate": "compute_duration_us",
    "compute_input_duration_us_rate": "compute_input_duration_us",
    "compute_output_duration_us_rate": "compute_output_duration_us",
}


@dataclass(frozen=True, slots=True)
class PodRead:
    """One read of a service's pods: the counters of every pod that answered, at `at_s`.

    `serving`: how many Ready pods the read stands for when it read a sample of them
    (`sample_pods`); None when it asked every one.

    `batches`: pod -> its cumulative executions per batch size (Triton's statistics extension,
    every version summed), on the reads that asked for them (every `BATCH_STATS_PERIOD_S` of the
    reader, not every read); a pod whose statistics could not be read is absent. None on the
    other reads.
    """

    at_s: float
    pods: Mapping[str, TritonCounters]
    serving: int | None = None
    batches: Mapping[str, BatchCounts] | None = None

    @classmethod
    def sampled(
        cls,
        at_s: float,
        counters: Mapping[str, TritonCounters],
        *,
        limit: int = MAX_PODS_PER_READ,
        batches: Mapping[str, BatchCounts] | None = None,
    ) -> PodRead:
        """A read of `sample_pods` of these pods' counters (where all were at hand, as in a simulator).

        `batches`: every pod's figures per batch size, on a read that asked for them; the sample's are kept.
        """
        names = sample_pods(list(counters), limit=limit)
        serving = len(counters) if len(names) < len(counters) else None
        return cls(
            at_s=at_s,
            pods={name: counters[name] for name in names},
            serving=serving,
            batches=None if batches is None else {name: batches[name] for name in names if name in batches},
        )


#: Seconds between two reads of a service's pods' executions and compute time per batch size
#: (Triton's statistics extension). Not every read: the answer is JSON with three counters per
#: batch size ever executed (a few KB a version, against the page's ten filtered lines), parsed
#: whole; and the distribution is a figure of the evaluation window (30 s by default) that gains
#: nothing from 2 s freshness, while a GET per pod every 2 s more would double the fast loop's
#: requests (`make bench-fast-loop`). Every 10 s leaves three reads or more in a window of 30 s.
BATCH_STATS_PERIOD_S: Final = 10.0


def batch_stats_due(*, now_s: float, last_s: float | None, read_period_s: float) -> bool:
    """Whether a read starting now asks the statistics too: `BATCH_STATS_PERIOD_S` since the last ask.

    Within half a read period: reads fall on the period's steps, and a 10 s gap must not wait for the
    read after it.
    """
    return last_s is None or now_s - last_s >= BATCH_STATS_PERIOD_S - read_period_s / 2


def _sample_key(pod: str) -> int:
    return zlib.crc32(pod.encode())


def sample_pods(pods: Sequence[str], *, limit: int = MAX_PODS_PER_READ) -> tuple[str, ...]:
    """The pods one read of a service asks: every one up to `limit`, else the `limit` of lowest hash.

    A stable sample rather than a rotating one: a pod's rates are its counters' growth between
    consecutive reads of it, so a pod in the sample stays there while it serves, and one leaving
    makes room for the next by hash. The sample's totals are scaled to the pods it stands for
    (`observation_from_reads`); its per-request and per-replica figures are taken as the fleet's.
    """
    if len(pods) <= limit:
        return tuple(sorted(pods))
    return tuple(sorted(sorted(pods, key=_sample_key)[:limit]))


@dataclass(frozen=True, slots=True)
class PodLatency:
    """A pod's latency summary as Prometheus last scraped it (`nv_inference_request_summary_us`).

    Attributes:
        p99_us: The 0.99 quantile (None: not exported, or no request in the summary's window).
        quantiles_us: The other quantiles, (quantile, microseconds).
        queue: Its queue-time summary (`nv_inference_queue_summary_us`; None: not scraped).
        compute: Its compute-infer summary (`nv_inference_compute_infer_summary_us`; None: not scraped).
    """

    p99_us: float | None
    quantiles_us: tuple[tuple[float, float], ...] = ()
    queue: Summary | None = None
    compute: Summary | None = None

    @classmethod
    def of(
        cls,
        points: Iterable[tuple[float, float]],
        *,
        queue: Summary | None = None,
        compute: Summary | None = None,
    ) -> PodLatency:
        """From (quantile, microseconds) points in any order: the 0.99 one apart, the rest ascending."""
        p99, others = split_p99(points)
        return cls(p99_us=p99, quantiles_us=others, queue=queue, compute=compute)


@dataclass(frozen=True, slots=True)
class ObservationWindows:
    """The windows an Observation is built over (seconds).

    Attributes:
        window_s: The evaluation window (spec.slo.evaluationWindowSeconds): rates, batch size, times.
        recent_window_s: The recent rate's window: a load step shows there first.
        arrival_lookback_s: How far back the arrival curve reaches (None: bursts not sized).
        arrival_bin_s: The arrival curve's bin: the read period.
    """

    window_s: float
    recent_window_s: float
    arrival_lookback_s: float | None
    arrival_bin_s: float = READ_PERIOD_S

    @property
    def keep_s(self) -> float:
        """How long reads are kept: the longest window, and one bin more (k bins need k + 1 reads)."""
        return max(self.window_s, self.recent_window_s, self.arrival_lookback_s or 0.0) + self.arrival_bin_s


class ReadHistory:
    """A service's recent reads, oldest first, kept for `keep_s` (reads arrive in time order)."""

    def __init__(self, *, keep_s: float) -> None:
        self.keep_s = keep_s
        self._reads: deque[PodRead] = deque()

    def add(self, read: PodRead) -> None:
        """Append a read and drop those older than `keep_s` before it.

        A service's reads are taken one after another, so a read stamped before the newest means
        the wall clock stepped back (NTP, a VM resumed): the kept reads' times lie across the step
        and no interval between them and it is known, so the history starts again from this read.
        Ignoring it instead froze the history, whose newest read then looked fresh until the clock
        caught up. A read at the newest's very time adds nothing.
        """
        if self._reads and read.at_s == self._reads[-1].at_s:
            return
        if self._reads and read.at_s < self._reads[-1].at_s:
            self._reads.clear()
        self._reads.append(read)
        while self._reads and self._reads[0].at_s < read.at_s - self.keep_s:
            self._reads.popleft()

    @property
    def reads(self) -> Sequence[PodRead]:
        """The kept reads, oldest first."""
        return tuple(self._reads)

    @property
    def newest(self) -> PodRead | None:
        """The newest read (None before the first)."""
        return self._reads[-1] if self._reads else None

    def __len__(self) -> int:
        return len(self._reads)


def _sample_factor(read: PodRead) -> float:
    """Serving pods per pod that answered a sampled read (1 when the read asked every pod)."""
    if read.serving is None or not read.pods or read.serving <= len(read.pods):
        return 1.0
    return read.serving / len(read.pods)


def _grown(new: float, old: float) -> float:
    """Counter growth; a counter below its earlier value was reset (a restart) and counts from zero."""
    return new - old if new >= old else new


def _span(reads: Sequence[PodRead], span_s: float) -> tuple[PodRead, PodRead] | None:
    """(the newest read at least `span_s` older than the newest, or the oldest; the newest)."""
    if len(reads) < 2:
        return None
    newest = reads[-1]
    times = [r.at_s for r in reads]
    i = bisect.bisect_right(times, newest.at_s - span_s) - 1
    base = reads[max(0, i)]
    return (base, newest) if newest.at_s > base.at_s else None


def arrival_rate_per_s(reads: Iterable[PodRead], *, span_s: float) -> float | None:
    """Requests that arrived per second between the newest read and the newest one `span_s` older.

    Arrivals on a pod are its completions plus the growth of its queue. A pod absent from the older
    read started since: its whole counter counts (it can only overstate the rate). None with a
    single read.
    """
    pair = _span(list(reads), span_s)
    if pair is None:
        return None
    base, newest = pair
    arrivals = 0.0
    for pod, now in newest.pods.items():
        then = base.pods.get(pod, _ZERO)
        arrivals += _grown(now.success, then.success) + now.pending - then.pending
    return max(0.0, arrivals) * _sample_factor(newest) / (newest.at_s - base.at_s)


def completion_rate_per_s(reads: Iterable[PodRead], *, span_s: float) -> float | None:
    """Requests completed per second over the same span as `arrival_rate_per_s` (None with one read)."""
    pair = _span(list(reads), span_s)
    if pair is None:
        return None
    base, newest = pair
    done = sum(_grown(now.success, base.pods.get(pod, _ZERO).success) for pod, now in newest.pods.items())
    return done * _sample_factor(newest) / (newest.at_s - base.at_s)


def _pod_reads(reads: Sequence[PodRead], pod: str, since_s: float) -> tuple[float, TritonCounters] | None:
    """The pod's read to measure growth from: its newest at or before `since_s`, else its oldest after."""
    base: tuple[float, TritonCounters] | None = None
    for read in reads:
        counters = read.pods.get(pod)
        if counters is None:
            continue
        if read.at_s <= since_s or base is None:
            base = (read.at_s, counters)
        if read.at_s > since_s:
            break
    return base


def _rates(reads: Sequence[PodRead], pod: str, window_s: float) -> dict[str, float] | None:
    """The pod's counter rates over the window (None: fewer than two reads of it)."""
    newest = reads[-1]
    now = newest.pods.get(pod)
    base = _pod_reads(reads, pod, newest.at_s - window_s)
    if now is None or base is None or base[0] >= newest.at_s:
        return None
    elapsed = newest.at_s - base[0]
    rates: dict[str, float] = {
        field: _grown(getattr(now, counter), getattr(base[1], counter)) / elapsed
        for field, counter in RATE_FIELDS.items()
    }
    return {**rates, "span_s": elapsed}


def pod_metrics_from_reads(
    reads: Sequence[PodRead],
    *,
    window_s: float,
    recent_window_s: float | None = None,
    latency: Mapping[str, PodLatency] | None = None,
) -> list[PodMetrics]:
    """Each pod of the newest read with two reads or more: its rates, queue, and Prometheus' quantiles.

    A pod in the newest read but read once only (it just started) gives its queue and no rates.
    """
    if not reads:
        return []
    newest = reads[-1]
    latency = latency or {}
    pods = []
    for pod in sorted(newest.pods):
        rates = _rates(reads, pod, window_s) or {}
        recent = _rates(reads, pod, recent_window_s) if recent_window_s else None
        summary = latency.get(pod)
        pods.append(
            PodMetrics(
                pod=pod,
                pending_requests=newest.pods[pod].pending,
                last_sample_s=newest.at_s,
                p99_us=summary.p99_us if summary else None,
                quantiles_us=summary.quantiles_us if summary else (),
                recent_request_rate=recent["request_rate"] if recent else None,
                queue_summary=summary.queue if summary else None,
                compute_summary=summary.compute if summary else None,
                **rates,
            )
        )
    return pods


def arrival_counts(reads: Sequence[PodRead], *, lookback_s: float, bin_s: float) -> tuple[float, ...]:
    """Arrivals in each `bin_s` bin of the lookback ending at the newest read, oldest first.

    Per pod, between consecutive reads of it: completions plus the queue's growth, in the bin where
    the newer read falls (a pod's first read counts nothing: what it holds arrived before it was
    read). Bins before the oldest read are left out, so a young history gives fewer bins.
    """
    if len(reads) < 2 or bin_s <= 0:
        return ()
    end = reads[-1].at_s
    covered = min(lookback_s, end - reads[0].at_s)
    n = int(covered / bin_s + 1e-9)
    if n <= 0:
        return ()
    start = end - n * bin_s
    counts = [0.0] * n
    last: dict[str, TritonCounters] = {}
    for read in reads:
        k = n - 1 - int((end - read.at_s) / bin_s + 1e-9) if read.at_s > start else -1
        for pod, now in read.pods.items():
            then = last.get(pod)
            last[pod] = now
            if then is None or k < 0:
                continue
            counts[min(k, n - 1)] += _grown(now.success, then.success) + now.pending - then.pending
    return tuple(max(0.0, x) for x in counts)


def observation_from_reads(
    reads: Sequence[PodRead],
    *,
    windows: ObservationWindows,
    now_s: float,
    latency: Mapping[str, PodLatency] | None = None,
) -> Observation:
    """The policy's Observation from a service's reads (oldest first) and its pods' latency summaries.

    The pods are those of the newest read; `data_age_s` is `now_s` less its time. No read gives an
    Observation without a request rate (MetricsMissing).
    """
    if not reads:
        return Observation(at_s=now_s, request_rate=None, p99_ms=None)
    counts = (
        arrival_counts(reads, lookback_s=windows.arrival_lookback_s, bin_s=windows.arrival_bin_s)
        if windows.arrival_lookback_s
        else ()
    )
    observation = observation_from_pod_metrics(
        pods=pod_metrics_from_reads(
            reads, window_s=windows.window_s, recent_window_s=windows.recent_window_s, latency=latency
        ),
        window_s=windows.window_s,
        now_s=now_s,
        recent_window_s=windows.recent_window_s,
        arrival_counts=counts,
        arrival_bin_s=windows.arrival_bin_s if counts else None,
    )
    observation = observation.model_copy(
        update={"executed_batch_sizes": batch_sizes_from_reads(reads, window_s=windows.window_s)}
    )
    return scaled_to_serving(observation, reads[-1])


def batch_sizes_from_reads(
    reads: Sequence[PodRead], *, window_s: float
) -> tuple[ExecutedBatchSize, ...] | None:
    """Executions per batch size over the window, of the pods of the newest read (`batch_sizes`).

    Each pod's reads that carry its counts are the span's candidates; the pods are those the
    Observation describes (the newest read's), so a pod gone before the newest read is left out as
    it is from the rates. None when no pod's counts were read twice.
    """
    if not reads:
        return None
    newest = reads[-1]
    per_pod = {
        pod: [(read.at_s, read.batches[pod]) for read in reads if read.batches and pod in read.batches]
        for pod in newest.pods
    }
    return executed_batch_sizes(per_pod, since_s=newest.at_s - window_s)


def scaled_to_serving(observation: Observation, newest: PodRead) -> Observation:
    """An observation of a sampled read, scaled to the pods the sample stands for.

    Totals (request, failure and recent rates, the arrival curve, the executions per batch size) are
    multiplied by the serving pods over the pods that answered (a sampled pod that did not answer
    counts as one like the others); the replicas are the serving pods; per-request and per-replica
    figures stay the sample's. The newest read's ratio scales the whole arrival curve: a sample's
    pods are stable, and the ratio moves only when the fleet does.
    """
    factor = _sample_factor(newest)
    if factor == 1.0:
        return observation

    def times(value: float | None) -> float | None:
        return None if value is None else value * factor

    sizes = observation.executed_batch_sizes
    return observation.model_copy(
        update={
            "executed_batch_sizes": None
            if sizes is None
            else tuple(
                size.model_copy(
                    update={
                        "executions": round(size.executions * factor),
                        "executions_per_s": size.executions_per_s * factor,
                    }
                )
                for size in sizes
            ),
            "request_rate": times(observation.request_rate),
            "failure_rate": times(observation.failure_rate),
            "recent_request_rate": times(observation.recent_request_rate),
            "arrival_counts": tuple(count * factor for count in observation.arrival_counts),
            "ready_replicas": max(observation.ready_replicas, newest.serving or 0),
        }
    )
