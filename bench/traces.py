"""Arrival traces T1-T10 (seeded generators and replays) and a reader for anyone's arrival file.

Every generator returns sorted arrival times in seconds in [0, duration).  Rates are
given in requests/s; `build_trace` scales each trace to the fleet's capacity as documented
in docs/benchmarks/README.md (peaks at 90% of the reference fleet's capacity; stationary
traces at 60% / 50% mean).  The Azure LLM 2023 traces (CC-BY 4.0, Patel et al., ISCA 2024;
see bench/traces/README.md) are replayed by their TIMESTAMP column only.
"""

from __future__ import annotations

import csv
import datetime as dt
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

Arrivals = npt.NDArray[np.float64]

TRACES_DIR = Path(__file__).parent / "traces"
AZURE_CODE = TRACES_DIR / "azure_llm_2023_code.csv"
AZURE_CONV = TRACES_DIR / "azure_llm_2023_conv.csv"

#: Trace names in table order.
TRACE_NAMES = (
    "T1-poisson",
    "T2-gamma-cv2",
    "T2-gamma-cv4",
    "T3-mmpp2",
    "T4-diurnal",
    "T5-step",
    "T6-spike",
    "T7-azure-conv",
    "T8-azure-code",
    "T9-flash-crowd",
    "T10-ramp",
)


def poisson(*, rate: float, duration_s: float, rng: np.random.Generator) -> Arrivals:
    """Homogeneous Poisson arrivals."""
    return gamma_renewal(rate=rate, cv=1.0, duration_s=duration_s, rng=rng)


def gamma_renewal(*, rate: float, cv: float, duration_s: float, rng: np.random.Generator) -> Arrivals:
    """Renewal process with Gamma inter-arrival times of mean 1/rate and coefficient of variation `cv`."""
    shape = 1.0 / (cv * cv)
    n = int(rate * duration_s * 1.2 + 10 * math.sqrt(rate * duration_s) * cv + 100)
    out: list[Arrivals] = []
    t0 = 0.0
    while t0 < duration_s:
        gaps = rng.gamma(shape, 1.0 / (rate * shape), n)
        times = t0 + np.cumsum(gaps)
        out.append(times)
        t0 = float(times[-1])
    arr = np.concatenate(out)
    return arr[arr < duration_s]


def piecewise_poisson(*, steps: Sequence[tuple[float, float]], rng: np.random.Generator) -> Arrivals:
    """Poisson arrivals whose rate is constant per step: `steps` is a list of (duration_s, rate).

    A rate of 0 is a quiet period; the result covers the steps' total duration.
    """
    parts: list[Arrivals] = []
    start = 0.0
    for duration_s, rate in steps:
        if rate > 0 and duration_s > 0:
            parts.append(start + poisson(rate=rate, duration_s=duration_s, rng=rng))
        start += duration_s
    return np.concatenate(parts) if parts else np.empty(0)


def modulated_poisson(
    *, rate_fn: Callable[[Arrivals], Arrivals], peak_rate: float, duration_s: float, rng: np.random.Generator
) -> Arrivals:
    """Non-homogeneous Poisson arrivals by thinning (`rate_fn(t) <= peak_rate` everywhere)."""
    cand = poisson(rate=peak_rate, duration_s=duration_s, rng=rng)
    keep = rng.random(cand.size) * peak_rate < rate_fn(cand)
    return cand[keep]


class RateFn:
    """Piecewise description of a rate over time, callable on an array of times."""

    def __init__(
        self,
        *,
        base: float,
        sine_amplitude: float = 0.0,
        period_s: float = 3600.0,
        bursts: tuple[tuple[float, float, float], ...] = (),
    ) -> None:
        self.base, self.amp, self.period_s, self.bursts = base, sine_amplitude, period_s, bursts

    def __call__(self, t: Arrivals) -> Arrivals:
        rate = self.base * (1.0 + self.amp * np.sin(2 * np.pi * t / self.period_s))
        for start, length, factor in self.bursts:
            rate = np.where((t >= start) & (t < start + length), rate * factor, rate)
        return np.asarray(rate, dtype=np.float64)


@dataclass(frozen=True)
class LinearRate:
    """A rate linear between (time, rate) points, constant before the first and after the last."""

    points: tuple[tuple[float, float], ...]

    def __call__(self, t: Arrivals) -> Arrivals:
        times, rates = zip(*self.points, strict=True)
        return np.asarray(np.interp(t, times, rates), dtype=np.float64)


@dataclass(frozen=True)
class Mmpp2:
    """Two-state Markov-modulated Poisson process: rates and mean sojourn times per state."""

    rate_low: float
    rate_high: float
    mean_low_s: float
    mean_high_s: float

    def scaled(self, factor: float) -> Mmpp2:
        """Same switching, rates times `factor`."""
        return Mmpp2(self.rate_low * factor, self.rate_high * factor, self.mean_low_s, self.mean_high_s)

    def mean_rate(self) -> float:
        """Long-run mean rate."""
        w = self.mean_low_s + self.mean_high_s
        return (self.rate_low * self.mean_low_s + self.rate_high * self.mean_high_s) / w

    def generate(self, *, duration_s: float, rng: np.random.Generator) -> Arrivals:
        """Arrivals over `duration_s`, starting in the low state."""
        parts: list[Arrivals] = []
        t, high = 0.0, False
        while t < duration_s:
            stay = float(rng.exponential(self.mean_high_s if high else self.mean_low_s))
            end = min(duration_s, t + stay)
            rate = self.rate_high if high else self.rate_low
            k = int(rng.poisson(rate * (end - t)))
            parts.append(np.sort(rng.uniform(t, end, k)))
            t, high = end, not high
        return np.concatenate(parts) if parts else np.empty(0)


def fit_mmpp2(arrivals: Arrivals, *, bin_s: float = 1.0) -> Mmpp2:
    """Fit a 2-state MMPP to a trace: bins above mean + 1 std of the per-bin count are "high".

    Rates are the mean rates of each class of bins; mean sojourn times are the mean run
    lengths of consecutive bins of a class.  A moment-style fit, chosen for being
    deterministic and explainable rather than maximum-likelihood.
    """
    counts = np.bincount((arrivals // bin_s).astype(np.int64)).astype(np.float64)
    high = counts > counts.mean() + counts.std()
    changes = np.flatnonzero(np.diff(high.astype(np.int8))) + 1
    runs = np.split(high, changes)
    hi_runs = [r.size for r in runs if r[0]]
    lo_runs = [r.size for r in runs if not r[0]]
    return Mmpp2(
        rate_low=float(counts[~high].mean() / bin_s),
        rate_high=float(counts[high].mean() / bin_s),
        mean_low_s=float(np.mean(lo_runs) * bin_s),
        mean_high_s=float(np.mean(hi_runs) * bin_s),
    )


def _parse_azure_time(text: str) -> float:
    # Azure writes 7 fractional digits; datetime takes 6.
    head, _, frac = text.strip().partition(".")
    stamp = dt.datetime.fromisoformat(head).replace(tzinfo=dt.UTC).timestamp()
    return stamp + (float("0." + frac) if frac else 0.0)


def read_arrivals(path: Path) -> Arrivals:
    """Arrival times (s, from the first) of an Azure-format CSV or a file of one timestamp per line."""
    with path.open() as fh:
        first = fh.readline()
        if first.startswith("TIMESTAMP"):
            times = [_parse_azure_time(row[0]) for row in csv.reader(fh) if row]
        else:
            lines = [first, *fh]
            times = [float(x) for x in (ln.strip() for ln in lines) if x and not x.startswith("#")]
    arr = np.sort(np.asarray(times, dtype=np.float64))
    return arr - arr[0] if arr.size else arr


def peak_rate(arrivals: Arrivals, *, bin_s: float = 60.0) -> float:
    """Highest mean rate over aligned `bin_s` bins."""
    if arrivals.size == 0:
        return 0.0
    return float(np.bincount((arrivals // bin_s).astype(np.int64)).max() / bin_s)


def rescale(arrivals: Arrivals, *, factor: float, rng: np.random.Generator) -> Arrivals:
    """Thin (factor < 1) or replicate (factor > 1) arrivals, keeping the time axis.

    Each arrival is kept as floor(factor) copies plus one more with probability
    frac(factor); extra copies are placed uniformly in the gap to the next arrival, so
    the rate's shape is kept at the scale of the original inter-arrival times.
    """
    whole, frac = int(math.floor(factor)), factor - math.floor(factor)
    copies = whole + (rng.random(arrivals.size) < frac).astype(np.int64)
    gaps = np.diff(arrivals, append=arrivals[-1] if arrivals.size else 0.0)
    base = np.repeat(arrivals, copies)
    gap_rep = np.repeat(gaps, copies)
    # The first copy of each arrival keeps its time; the others land in the gap after it.
    starts = np.cumsum(copies) - copies
    offset = rng.random(base.size) * gap_rep
    offset[starts[copies > 0]] = 0.0
    return np.sort(base + offset)


@dataclass(frozen=True)
class TraceSpec:
    """A named trace with the parameters it was generated from (for the docs)."""

    name: str
    arrivals: Arrivals
    params: str


def build_trace(name: str, *, capacity_rps: float, duration_s: float, seed: int) -> TraceSpec:
    """Build trace `name` for a reference fleet of `capacity_rps` (see module docstring)."""
    rng = np.random.default_rng([seed, TRACE_NAMES.index(name)])
    peak = 0.9 * capacity_rps
    if name == "T1-poisson":
        rate = 0.6 * capacity_rps
        return TraceSpec(name, poisson(rate=rate, duration_s=duration_s, rng=rng), f"Poisson {rate:.1f}/s")
    if name.startswith("T2-gamma-cv"):
        cv = float(name.removeprefix("T2-gamma-cv"))
        rate = 0.5 * capacity_rps
        return TraceSpec(
            name,
            gamma_renewal(rate=rate, cv=cv, duration_s=duration_s, rng=rng),
            f"Gamma renewal, mean {rate:.1f}/s, CV {cv:g}",
        )
    if name == "T3-mmpp2":
        code = read_arrivals(AZURE_CODE)
        fit = fit_mmpp2(code)
        # Same rate scaling as the T8 replay of the trace it is fitted to.
        factor = peak / peak_rate(code[code < duration_s])
        m = fit.scaled(factor)
        return TraceSpec(
            name,
            m.generate(duration_s=duration_s, rng=rng),
            f"MMPP-2 fitted to Azure code (1 s bins), scaled x{factor:.2f} like T8: rates "
            f"{m.rate_low:.1f}/{m.rate_high:.1f}/s, mean sojourn {m.mean_low_s:.1f}/{m.mean_high_s:.1f} s",
        )
    if name == "T4-diurnal":
        base = peak / 1.6
        fn = RateFn(base=base, sine_amplitude=0.6, period_s=duration_s)
        return TraceSpec(
            name,
            modulated_poisson(rate_fn=fn, peak_rate=peak, duration_s=duration_s, rng=rng),
            f"Poisson, rate {base:.1f}*(1+0.6 sin(2 pi t/{duration_s:g} s))",
        )
    if name == "T5-step":
        start, length = step_window(duration_s)
        base = peak / 4
        fn = RateFn(base=base, bursts=((start, length, 4.0),))
        return TraceSpec(
            name,
            modulated_poisson(rate_fn=fn, peak_rate=peak, duration_s=duration_s, rng=rng),
            f"Poisson {base:.1f}/s, x4 from {start:g} s for {length:g} s",
        )
    if name == "T6-spike":
        start, length = spike_window(duration_s)
        base = peak / 10
        fn = RateFn(base=base, bursts=((start, length, 10.0),))
        return TraceSpec(
            name,
            modulated_poisson(rate_fn=fn, peak_rate=peak, duration_s=duration_s, rng=rng),
            f"Poisson {base:.1f}/s, x10 from {start:g} s for {length:g} s",
        )
    if name in ("T7-azure-conv", "T8-azure-code"):
        raw = read_arrivals(AZURE_CONV if name == "T7-azure-conv" else AZURE_CODE)
        raw = raw[raw < duration_s]
        factor = peak / peak_rate(raw)
        arr = rescale(raw, factor=factor, rng=rng)
        return TraceSpec(
            name,
            arr[arr < duration_s],
            f"Azure LLM 2023 {name[9:]} replay, {raw.size} requests x{factor:.2f} (peak minute = 90%)",
        )
    if name == "T9-flash-crowd":
        base = peak / FLASH_FACTOR
        points: list[tuple[float, float]] = [(0.0, base)]
        for onset in flash_onsets(duration_s):
            points += [
                (onset, base),
                (onset + FLASH_RISE_S, peak),
                (onset + FLASH_RISE_S + FLASH_HOLD_S, peak),
                (onset + FLASH_RISE_S + FLASH_HOLD_S + FLASH_FALL_S, base),
            ]
        return TraceSpec(
            name,
            modulated_poisson(
                rate_fn=LinearRate(tuple(points)), peak_rate=peak, duration_s=duration_s, rng=rng
            ),
            f"Poisson {base:.1f}/s, x{FLASH_FACTOR:g} within {FLASH_RISE_S:g} s for {FLASH_HOLD_S:g} s, back "
            f"over {FLASH_FALL_S:g} s, at {', '.join(f'{t:g}' for t in flash_onsets(duration_s))} s",
        )
    if name == "T10-ramp":
        low = peak / 5
        rise = (duration_s / 6, duration_s / 2)  # up over a third of the run, then down as slowly
        ramp = LinearRate(((rise[0], low), (rise[1], peak), (rise[1] + (rise[1] - rise[0]), low)))
        return TraceSpec(
            name,
            modulated_poisson(rate_fn=ramp, peak_rate=peak, duration_s=duration_s, rng=rng),
            f"Poisson, {low:.1f}/s rising linearly to {peak:.1f}/s from {rise[0]:g} s to {rise[1]:g} s, "
            f"back to {low:.1f}/s by {2 * rise[1] - rise[0]:g} s",
        )
    raise ValueError(f"unknown trace {name!r}")


#: Seed offset of a trace's warm-up: another realization of the same arrival process.
WARMUP_SEED_OFFSET = 1_000_003


def warmup_arrivals(
    name: str, *, capacity_rps: float, duration_s: float, warmup_s: float, seed: int
) -> Arrivals:
    """The `warmup_s` seconds before trace `name`'s run: the end of another realization of its process.

    A running service has seen its traffic before the hour a benchmark scores: the same arrival
    process, not these arrivals. So the warm-up is the last `warmup_s` seconds of the trace built with
    another seed (the same generator, rates and events; for the Azure replays, the same hour thinned
    and duplicated by another draw, the only history of that process the trace holds), shifted to
    [0, warmup_s). Its end meets the run's start where the process is continuous (T4's sine, T10's
    ramp at its low level).
    """
    if warmup_s <= 0:
        return np.empty(0)
    other = build_trace(
        name, capacity_rps=capacity_rps, duration_s=duration_s, seed=seed + WARMUP_SEED_OFFSET
    )
    start = duration_s - min(warmup_s, duration_s)
    tail = other.arrivals[other.arrivals >= start] - start
    return np.asarray(tail, dtype=np.float64)


#: T9: each flash crowd multiplies the base rate by this within `FLASH_RISE_S`, holds it, and fades.
FLASH_FACTOR = 5.0
FLASH_RISE_S = 20.0
FLASH_HOLD_S = 120.0
FLASH_FALL_S = 60.0


def flash_onsets(duration_s: float) -> list[float]:
    """T9's crowd onsets: four an hour (one per quarter of the run, a fifth of the way into it)."""
    return [(k + 0.2) * duration_s / 4 for k in range(4)]


def step_window(duration_s: float) -> tuple[float, float]:
    """(start, length) of T5's step: 10 min from a third of the run (shorter runs: a third of it)."""
    return duration_s / 3, min(600.0, duration_s / 3)


def spike_window(duration_s: float) -> tuple[float, float]:
    """(start, length) of T6's spike: 60 s at half the run."""
    return duration_s / 2, 60.0


def step_onsets(name: str, duration_s: float) -> list[float]:
    """Times where the load steps up (for time-to-recover)."""
    if name == "T5-step":
        return [step_window(duration_s)[0]]
    if name == "T6-spike":
        return [spike_window(duration_s)[0]]
    if name == "T9-flash-crowd":
        return flash_onsets(duration_s)
    return []
