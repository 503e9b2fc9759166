"""Service-level observation from per-pod Triton metrics (pure).

Triton's latency summaries (`nv_inference_request_summary_us{quantile="0.99"}`)
are per pod, and quantiles cannot be averaged: the mean of two pods' P99s is
not the service's P99. The service's latency distribution is the mixture of the
pods' distributions weighted by each pod's request rate, so its P99 is the x
where sum_i w_i * S_i(x) = 0.01 (S_i: pod i's survival function, w_i its share
of requests). Each S_i is fitted to what the pod exports, as a shifted
exponential S_i(x) = min(1, exp(-(x - s_i) / theta_i)):

- with two or more summary quantiles (e.g. 0.9 and 0.99): through the two highest;
- else with the pod's mean latency (request duration rate / request rate) and P99:
  mean = s + theta and P99 = s + theta * ln(100);
- else a pure exponential through the P99 (s = 0).

The root is found by bisection. It always lies between the smallest and largest
per-pod P99 (each S_i(min P99) >= 0.01 and S_i(max P99) <= 0.01), so the estimate
is exact when pods agree and bounded by the pods' range when they do not; the fit
only decides where inside that range it lands. Against synthetic per-pod samples
with unequal rates and latencies (tests/policy/test_policy_estimate.py) the error is a few
percent, within the 15% the estimate is held to.

The parts of a request's time have summaries of their own (`nv_inference_queue_summary_us`,
`nv_inference_compute_infer_summary_us`: one observation per request, like the request's), so
their P99s merge the same way (`merge_part_p99_us`): weighted by the pods' request rates, each
pod's fit through its own quantiles of that part or its mean time in it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal, NamedTuple

from tailpilot.api.autoscaling import Observation

_LN100 = math.log(100.0)


def split_p99(points: Iterable[tuple[float, float]]) -> tuple[float | None, tuple[tuple[float, float], ...]]:
    """(the 0.99 quantile, the other quantiles ascending) of (quantile, value) points in any order."""
    ordered = sorted(points)
    p99 = next((v for q, v in ordered if abs(q - 0.99) < 1e-9), None)
    return p99, tuple((q, v) for q, v in ordered if abs(q - 0.99) >= 1e-9)


@dataclass(frozen=True, slots=True)
class Summary:
    """One of a pod's Triton latency summaries as last scraped (a part of the request's time).

    Attributes:
        p99_us: The 0.99 quantile (None: no request in the summary's sliding window).
        quantiles_us: The other quantiles, (quantile, microseconds), ascending.
    """

    p99_us: float | None
    quantiles_us: tuple[tuple[float, float], ...] = ()

    @classmethod
    def of(cls, points: Iterable[tuple[float, float]]) -> Summary:
        """From (quantile, microseconds) points in any order."""
        p99, others = split_p99(points)
        return cls(p99_us=p99, quantiles_us=others)


#: The parts of a request's time whose P99 is merged from Triton's summaries: the queue
#: (`nv_inference_queue_summary_us`) and the model's execution (`nv_inference_compute_infer_summary_us`).
TailPart = Literal["queue", "compute"]


@dataclass(frozen=True)
class PodMetrics:
    """One pod's metrics over the evaluation window (rates per second; None = missing).

    Attributes:
        pod: Pod name.
        request_rate: Successful requests per second (`nv_inference_request_success`).
        p99_us: The pod's P99 request latency (`nv_inference_request_summary_us{quantile="0.99"}`).
        pending_requests: Queued requests now (`nv_inference_pending_request_count`).
        queue_duration_us_rate: Rate of `nv_inference_queue_duration_us` (us of queueing per second).
        compute_duration_us_rate: Rate of `nv_inference_compute_infer_duration_us`.
        inference_count_rate: Inferences (items) per second (`nv_inference_count`).
        exec_count_rate: Executed batches per second (`nv_inference_exec_count`).
        failure_rate: Failed requests per second (`nv_inference_request_failure`).
        last_sample_s: Time of the pod's newest sample (None: taken as `now_s`).
        request_duration_us_rate: Rate of `nv_inference_request_duration_us` (gives the mean latency).
        quantiles_us: Other summary quantiles as (quantile, us) pairs, e.g. ((0.9, 1200.0),).
        recent_request_rate: Successful requests per second over a shorter, recent window.
        compute_input_duration_us_rate: Rate of `nv_inference_compute_input_duration_us`.
        compute_output_duration_us_rate: Rate of `nv_inference_compute_output_duration_us`.
        queue_summary: The pod's queue-time summary (`nv_inference_queue_summary_us`).
        compute_summary: Its compute-infer summary (`nv_inference_compute_infer_summary_us`).
    """

    pod: str
    request_rate: float | None = None
    p99_us: float | None = None
    pending_requests: float | None = None
    queue_duration_us_rate: float | None = None
    compute_duration_us_rate: float | None = None
    inference_count_rate: float | None = None
    exec_count_rate: float | None = None
    failure_rate: float | None = None
    last_sample_s: float | None = None
    request_duration_us_rate: float | None = None
    quantiles_us: tuple[tuple[float, float], ...] = ()
    #: Seconds the rates cover (a pod read since less than the window covers less); None: the window.
    span_s: float | None = None
    recent_request_rate: float | None = None
    compute_input_duration_us_rate: float | None = None
    compute_output_duration_us_rate: float | None = None
    queue_summary: Summary | None = None
    compute_summary: Summary | None = None


class _Tail(NamedTuple):
    """What one pod tells of one latency distribution: its request rate, P99, other quantiles, mean (us)."""

    rate: float | None
    p99_us: float | None
    quantiles_us: tuple[tuple[float, float], ...]
    mean_us: float | None


def _tail_fit(tail: _Tail, p99: float) -> tuple[float, float]:
    """(shift, scale) of the pod's shifted-exponential latency fit, in us."""
    points = sorted({(q, x) for q, x in tail.quantiles_us if 0 < q < 1 and x > 0 and math.isfinite(x)})
    points = [p for p in points if abs(p[0] - 0.99) > 1e-9] + [(0.99, p99)]
    points.sort()
    theta = 0.0
    if len(points) >= 2:
        (q_lo, x_lo), (q_hi, x_hi) = points[-2], points[-1]
        if x_hi > x_lo:
            theta = (x_hi - x_lo) / math.log((1 - q_lo) / (1 - q_hi))
    elif tail.mean_us is not None:
        theta = (p99 - tail.mean_us) / (_LN100 - 1.0)
    else:
        theta = p99 / _LN100
    # A floor above zero: a queue's P99 can be 0 us (no request waited), and a zero scale would
    # divide by zero in the survival function.
    theta = max(theta, p99 * 1e-6, 1e-3)
    return p99 - theta * _LN100, theta


def _mean_us(total_rate: float | None, request_rate: float | None) -> float | None:
    return total_rate / request_rate if total_rate is not None and request_rate else None


def _merge_p99(tails: Iterable[_Tail]) -> float | None:
    """P99 (us) of the rate-weighted mixture of the pods' distributions (None: no pod contributes)."""
    parts = [
        (t.rate, t.p99_us, t)
        for t in tails
        if t.rate and t.rate > 0 and t.p99_us is not None and math.isfinite(t.p99_us)
    ]
    if not parts:
        return None
    lo = min(x for _, x, _ in parts)
    hi = max(x for _, x, _ in parts)
    if hi - lo <= 1e-9 * max(hi, 1.0):
        return hi
    total = sum(r for r, _, _ in parts)
    fits = [(r / total, *_tail_fit(t, x)) for r, x, t in parts]

    def survival(x: float) -> float:
        # Below its shift a pod's survival is 1; exp() of a large positive number would overflow.
        return sum(w * (math.exp((s - x) / th) if x > s else 1.0) for w, s, th in fits)

    # Bisection to 0.01% of the bracket; S is decreasing in x.
    for _ in range(40):
        mid = 0.5 * (lo + hi)
        if survival(mid) > 0.01:
            lo = mid
        else:
            hi = mid
        if hi - lo <= 1e-4 * hi:
            break
    return 0.5 * (lo + hi)


def merge_p99_us(pods: Sequence[PodMetrics]) -> float | None:
    """Service-level P99 (us) of the rate-weighted mixture of the pods' latency distributions.

    Pods without a rate or a P99, or with no traffic, do not contribute. None when none does.
    """
    return _merge_p99(
        _Tail(p.request_rate, p.p99_us, p.quantiles_us, _mean_us(p.request_duration_us_rate, p.request_rate))
        for p in pods
    )


def merge_part_p99_us(pods: Sequence[PodMetrics], part: TailPart) -> float | None:
    """Service-level P99 (us) of one part of a request's time (the queue, or compute infer).

    Triton observes each request once in each part's summary, so the pods are weighted by their
    request rates, as for the request's P99. None when no pod has that part's summary with a P99.
    """
    tails = []
    for p in pods:
        summary, total = (
            (p.queue_summary, p.queue_duration_us_rate)
            if part == "queue"
            else (p.compute_summary, p.compute_duration_us_rate)
        )
        if summary is not None:
            tails.append(
                _Tail(p.request_rate, summary.p99_us, summary.quantiles_us, _mean_us(total, p.request_rate))
            )
    return _merge_p99(tails)


def _ratio(pods: Sequence[PodMetrics], num: str, den: str) -> tuple[float, float] | None:
    """Sum two rate fields over the pods that have both, as counts (None when no pod has both).

    Each pod's rates are weighted by the time they cover: a pod that joined inside the window has
    rates over its own few seconds, and summed as they are they would count its requests as if it
    had served the whole window (after a scale-up, the new pod's empty queue would halve the
    service's queue time per request; measured against Triton's counters: 520 ms for 750).
    """
    n = d = 0.0
    seen = False
    for p in pods:
        a, b = getattr(p, num), getattr(p, den)
        if a is not None and b is not None:
            weight = p.span_s if p.span_s is not None else 1.0
            n += a * weight
            d += b * weight
            seen = True
    return (n, d) if seen else None


def _per_request_ms(pods: Sequence[PodMetrics], field_name: str) -> float | None:
    sums = _ratio(pods, field_name, "request_rate")
    if sums is None or sums[1] <= 0:
        return None
    return sums[0] / sums[1] / 1000.0


def observation_from_pod_metrics(
    *,
    pods: Sequence[PodMetrics],
    window_s: float,
    now_s: float,
    recent_window_s: float | None = None,
    arrival_counts: Sequence[float] = (),
    arrival_bin_s: float | None = None,
) -> Observation:
    """Build the service-level Observation the policy reads.

    Pods whose newest sample is older than `window_s` are treated as gone (their
    series linger in Prometheus after deletion) and are not counted as replicas;
    `data_age_s` is the age of the newest sample of any pod, so a service whose
    metrics stopped flowing reads as stale, and one with no pods as missing.
    `recent_window_s` is the window of the pods' `recent_request_rate` (None: not measured).
    `arrival_counts` are the service's arrivals per `arrival_bin_s` over a lookback (empty: not
    measured), passed through for the burst sizing.
    """
    ages = [now_s - (p.last_sample_s if p.last_sample_s is not None else now_s) for p in pods]
    data_age = max(0.0, min(ages)) if ages else 0.0
    live = [p for p, age in zip(pods, ages, strict=True) if age <= window_s]
    rates = [p.request_rate for p in live if p.request_rate is not None]
    request_rate = sum(rates) if rates else None
    p99_us = merge_p99_us(live)
    pending = [p.pending_requests for p in live if p.pending_requests is not None]
    batch = _ratio(live, "inference_count_rate", "exec_count_rate")
    request_ms = _per_request_ms(live, "request_duration_us_rate")
    queue_ms = _per_request_ms(live, "queue_duration_us_rate")
    queue_p99_us = merge_part_p99_us(live, "queue")
    compute_p99_us = merge_part_p99_us(live, "compute")
    failures = [p.failure_rate for p in live if p.failure_rate is not None]
    recent = [p.recent_request_rate for p in live if p.recent_request_rate is not None]
    measured_recent = recent_window_s is not None and bool(recent)
    return Observation(
        at_s=now_s,
        request_rate=request_rate,
        p99_ms=p99_us / 1000.0 if p99_us is not None else None,
        queue_depth_per_replica=sum(pending) / len(pending) if pending else None,
        queue_time_ms=queue_ms,
        compute_time_ms=_per_request_ms(live, "compute_duration_us_rate"),
        compute_input_time_ms=_per_request_ms(live, "compute_input_duration_us_rate"),
        compute_output_time_ms=_per_request_ms(live, "compute_output_duration_us_rate"),
        queue_time_p99_ms=queue_p99_us / 1000.0 if queue_p99_us is not None else None,
        compute_time_p99_ms=compute_p99_us / 1000.0 if compute_p99_us is not None else None,
        service_time_ms=max(0.0, request_ms - queue_ms)
        if request_ms is not None and queue_ms is not None
        else None,
        mean_batch_size=batch[0] / batch[1] if batch is not None and batch[1] > 0 else None,
        failure_rate=sum(failures) if failures else None,
        ready_replicas=len(live),
        data_age_s=data_age,
        recent_request_rate=sum(recent) if measured_recent else None,
        recent_window_s=recent_window_s if measured_recent else None,
        arrival_counts=tuple(arrival_counts) if arrival_bin_s else (),
        arrival_bin_s=arrival_bin_s if arrival_counts else None,
    )
