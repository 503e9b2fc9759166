"""Scores of one simulated run (docs/benchmarks/method.md, "Metrics") and its time series for plots."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from tailpilot.bench.simulator import SimResult


def p99(latency_s: npt.NDArray[np.float64]) -> float:
    """The 0.99 quantile (numpy's default linear interpolation); inf counts as a miss; nan if empty."""
    if latency_s.size == 0:
        return math.nan
    # Failed requests (inf) are misses; a stand-in value avoids inf - inf inside the interpolation.
    finite = np.where(np.isfinite(latency_s), latency_s, 1e18)
    q = float(np.quantile(finite, 0.99))
    return math.inf if q >= 1e17 else q


@dataclass(frozen=True)
class RunMetrics:
    """One row of the results table (without trace, Ts, policy and the oracle ratio)."""

    pct_requests_in_slo: float
    pct_windows_in_slo: float
    replica_seconds: float
    scale_actions: int
    rebatches: int
    flaps: int
    #: Seconds from the load step to the first minute whose 10 s windows all meet the SLO; None: no step;
    #: inf: never recovered.
    recovery_s: float | None
    mean_batch: float
    #: TailPilot's runs only (None for every other policy): when its learned `service_scale` and
    #: `slope_scale` settled (`settle_time`; 0: they never left their final band; inf: one never
    #: settled), and the last value of the scale.
    settle_s: float | None = None
    final_scale: float | None = None
    #: Its learned per-item `slope_scale` at the end (None for every other policy).
    final_slope: float | None = None


def count_flaps(actions: list[tuple[float, int, int]], *, within_s: float = 300.0) -> int:
    """Direction reversals of the replica target that follow the previous change within `within_s`."""
    flaps = 0
    prev: tuple[float, int] | None = None
    for t, old, new in actions:
        sign = 1 if new > old else -1
        if prev is not None and sign != prev[1] and t - prev[0] <= within_s:
            flaps += 1
        prev = (t, sign)
    return flaps


def _bin_p99(result: SimResult, bin_s: float) -> npt.NDArray[np.float64]:
    return bin_p99(result.arrival_s, result.latency_s, duration_s=result.duration_s, bin_s=bin_s)


def bin_p99(
    arrival_s: npt.NDArray[np.float64], latency_s: npt.NDArray[np.float64], *, duration_s: float, bin_s: float
) -> npt.NDArray[np.float64]:
    """P99 latency (s) of the requests arriving in each bin (nan for an empty bin)."""
    nbins = max(1, math.ceil(duration_s / bin_s))
    idx = np.minimum((arrival_s // bin_s).astype(np.int64), nbins - 1)
    lat = latency_s
    order = np.argsort(idx, kind="stable")
    bounds = np.searchsorted(idx[order], np.arange(nbins + 1))
    sorted_lat = lat[order]
    return np.array([p99(sorted_lat[bounds[k] : bounds[k + 1]]) for k in range(nbins)])


def recovery_time(
    result: SimResult, *, slo_ms: float, onset_s: float, bin_s: float = 10.0, hold_s: float = 60.0
) -> float:
    """Seconds from `onset_s` until P99 stays within the SLO for `hold_s` (0: never left; inf: never back)."""
    bins = _bin_p99(result, bin_s)
    first = int(onset_s // bin_s)
    need = int(round(hold_s / bin_s))
    ok = [math.isnan(v) or v * 1000.0 <= slo_ms for v in bins[first:]]
    for j in range(len(ok) - need + 1):
        if all(ok[j : j + need]):
            return float(j * bin_s)
    return math.inf


#: A learned value has settled once it stays within this fraction of its final level.
SETTLE_BAND = 0.1


def settle_time(
    series: Sequence[tuple[float, float]], *, duration_s: float, band: float = SETTLE_BAND
) -> float | None:
    """When a learned value settled: the first time after which it stays near its final level.

    `series` is (time, value) in time order, the value as it stands after each decision (a first
    entry at 0 s for the value the run starts with). The final level is the median of the values
    whose time is in the last half of the run (from `duration_s` / 2); settled at the time of the
    first entry from which every value is within `band` of that median (0: it never left the band).
    None when it never settles (the last value is outside the band) or when no value falls in the
    last half.
    """
    tail = [v for t, v in series if t >= duration_s / 2.0]
    if not tail:
        return None
    level = float(np.median(tail))
    settled: float | None = None
    for t, v in series:
        if abs(v - level) <= band * abs(level):
            if settled is None:
                settled = t
        else:
            settled = None
    return settled


def summarize(result: SimResult, *, slo_ms: float, step_onsets_s: list[float]) -> RunMetrics:
    """Score one run."""
    lat_ms = result.latency_s * 1000.0
    in_slo = float(np.mean(lat_ms <= slo_ms) * 100.0) if lat_ms.size else math.nan
    minute = _bin_p99(result, 60.0)
    minute = minute[~np.isnan(minute)]
    pct_windows = float(np.mean(minute * 1000.0 <= slo_ms) * 100.0) if minute.size else math.nan
    recovery = None
    if step_onsets_s:
        recovery = max(recovery_time(result, slo_ms=slo_ms, onset_s=t) for t in step_onsets_s)
    sizes = result.batch_size
    return RunMetrics(
        pct_requests_in_slo=in_slo,
        pct_windows_in_slo=pct_windows,
        replica_seconds=result.replica_seconds,
        scale_actions=len(result.actions),
        rebatches=len(result.batching_changes) - 1,
        flaps=count_flaps(result.actions),
        recovery_s=recovery,
        mean_batch=float(sizes.mean()) if sizes.size else math.nan,
    )


@dataclass(frozen=True)
class Timeline:
    """Per-bin series for plots: load (req/s), ready replicas, mean batch, P99 (ms)."""

    t_s: npt.NDArray[np.float64]
    load_rps: npt.NDArray[np.float64]
    replicas: npt.NDArray[np.float64]
    mean_batch: npt.NDArray[np.float64]
    p99_ms: npt.NDArray[np.float64]


def timeline(result: SimResult, *, bin_s: float = 10.0) -> Timeline:
    """Series of one run in `bin_s` bins."""
    nbins = max(1, math.ceil(result.duration_s / bin_s))
    edges = np.arange(nbins + 1) * bin_s
    load = np.histogram(result.arrival_s, bins=edges)[0] / bin_s
    rep_sum = np.histogram(result.sample_s, bins=edges, weights=result.sample_provisioned)[0]
    rep_n = np.histogram(result.sample_s, bins=edges)[0]
    execs = np.histogram(result.batch_start_s, bins=edges)[0]
    items = np.histogram(result.batch_start_s, bins=edges, weights=result.batch_size)[0]
    with np.errstate(invalid="ignore", divide="ignore"):
        replicas = np.where(rep_n > 0, rep_sum / np.maximum(rep_n, 1), np.nan)
        batch = np.where(execs > 0, items / np.maximum(execs, 1), np.nan)
    return Timeline(
        t_s=edges[:-1],
        load_rps=load,
        replicas=replicas,
        mean_batch=batch,
        p99_ms=_bin_p99(result, bin_s) * 1000.0,
    )
