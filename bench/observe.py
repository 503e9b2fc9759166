"""Per-pod Triton metrics over a window, and their merge into a service-level `Observation`.

The simulator reports, per pod, what Prometheus would return for a window: deltas of the
Triton counters (`nv_inference_request_success`, `nv_inference_count`,
`nv_inference_exec_count`, `nv_inference_request_duration_us`,
`nv_inference_queue_duration_us`, `nv_inference_compute_infer_duration_us`), the gauge
`nv_inference_pending_request_count`, and the quantiles of the summary
`nv_inference_request_summary_us` (Triton's default quantiles).  Per-pod quantiles cannot
be averaged; the service-level P99 is the 0.99 point of the mixture of the per-pod
quantile curves (each linear between its quantile points) weighted by request count.

`merge_pod_windows` is the benchmark's own merge, for the baselines that read a service-level
observation (compute time per request); TailPilot in the benchmark reads the pods' cumulative
counters through the operator's own code instead (`tailpilot.bench.tailpilot_policy`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from tailpilot.api.autoscaling import Observation

#: Triton's default `summary_quantiles`.
SUMMARY_QUANTILES: tuple[float, ...] = (0.5, 0.9, 0.95, 0.99, 0.999)


@dataclass(frozen=True)
class PodWindow:
    """One pod's Triton metrics over a window (counter deltas, gauge now, summary quantiles)."""

    pod: str
    success_count: int
    inference_count: int
    exec_count: int
    request_duration_us: float
    queue_duration_us: float
    compute_infer_duration_us: float
    pending_request_count: int
    #: quantile -> microseconds, from `nv_inference_request_summary_us`; empty with no requests.
    request_summary_us: dict[float, float]


def pod_window(
    *,
    pod: str,
    arrival_s: Sequence[float],
    start_s: Sequence[float],
    done_s: Sequence[float],
    exec_count: int,
    pending: int,
) -> PodWindow:
    """Build a pod's window from the requests it completed in it."""
    arr = np.asarray(arrival_s, dtype=np.float64)
    st = np.asarray(start_s, dtype=np.float64)
    dn = np.asarray(done_s, dtype=np.float64)
    lat_us = (dn - arr) * 1e6
    quantiles = (
        {q: float(v) for q, v in zip(SUMMARY_QUANTILES, np.quantile(lat_us, SUMMARY_QUANTILES), strict=True)}
        if lat_us.size
        else {}
    )
    return PodWindow(
        pod=pod,
        success_count=int(arr.size),
        inference_count=int(arr.size),
        exec_count=exec_count,
        request_duration_us=float(lat_us.sum()),
        queue_duration_us=float(((st - arr) * 1e6).sum()),
        compute_infer_duration_us=float(((dn - st) * 1e6).sum()),
        pending_request_count=pending,
        request_summary_us=quantiles,
    )


def _pod_curve(quantiles: dict[float, float]) -> tuple[list[float], list[float]]:
    """(latencies, cumulative fractions) of a pod: linear between its quantiles, from (0, 0).

    Equal latencies at several quantiles are a step (the highest quantile is kept), and the
    curve steps to 1 just past the highest quantile: the summary says nothing beyond it.
    """
    vs, qs = [0.0], [0.0]
    for q, v in sorted(quantiles.items()):
        if v <= vs[-1]:
            qs[-1] = max(qs[-1], q)
        else:
            vs.append(v)
            qs.append(q)
    vs.append(vs[-1] * (1 + 1e-9) + 1e-9)
    qs.append(1.0)
    return vs, qs


def merged_quantile(pods: Sequence[PodWindow], q: float) -> float | None:
    """Service-level quantile (microseconds) of the request-weighted mixture of pod curves.

    Each pod's CDF is linear between its quantile points (and 1 past its highest one), so
    the mixture is piecewise linear between the union of all points: the crossing is
    found exactly on that grid.
    """
    live = [p for p in pods if p.success_count > 0 and p.request_summary_us]
    if not live:
        return None
    total = sum(p.success_count for p in live)
    curves = [_pod_curve(p.request_summary_us) for p in live]
    grid = np.unique(np.concatenate([np.asarray(vs) for vs, _ in curves]))
    mix = np.zeros_like(grid)
    for p, (vs, qs) in zip(live, curves, strict=True):
        mix += p.success_count / total * np.interp(grid, vs, qs, right=1.0)
    i = int(np.searchsorted(mix, q - 1e-12))
    if i >= grid.size:
        return float(grid[-1])
    if i == 0 or mix[i] == mix[i - 1]:
        return float(grid[i])
    frac = (q - mix[i - 1]) / (mix[i] - mix[i - 1])
    return float(grid[i - 1] + frac * (grid[i] - grid[i - 1]))


def merge_pod_windows(
    pods: Sequence[PodWindow], *, window_s: float, now_s: float, ready_replicas: int
) -> Observation:
    """Service-level `Observation` from per-pod windows (same semantics as the controller's)."""
    success = sum(p.success_count for p in pods)
    execs = sum(p.exec_count for p in pods)
    inferences = sum(p.inference_count for p in pods)
    p99_us = merged_quantile(pods, 0.99)
    return Observation(
        at_s=now_s,
        request_rate=success / window_s if window_s > 0 else None,
        p99_ms=p99_us / 1000.0 if p99_us is not None else None,
        queue_depth_per_replica=(
            sum(p.pending_request_count for p in pods) / ready_replicas if ready_replicas else None
        ),
        queue_time_ms=sum(p.queue_duration_us for p in pods) / success / 1000.0 if success else None,
        compute_time_ms=sum(p.compute_infer_duration_us for p in pods) / success / 1000.0
        if success
        else None,
        mean_batch_size=inferences / execs if execs else None,
        failure_rate=0.0,
        ready_replicas=ready_replicas,
        data_age_s=0.0,
    )
