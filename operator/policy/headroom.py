"""Headroom learned from the traffic: how far the load rises within the service's reaction time (pure).

A replica asked for now serves only after the service's reaction time R (the decision's period plus
the replicas' start-up, learned from the service's own scale-ups). A rise of the arrivals within R
can only be met by capacity the fleet already holds. So every period the policy looks back one R:
the *rise* is the highest rate the arrivals reached in the last R (over spans a queue cannot absorb,
Poisson noise taken off) divided by the rate the policy saw just before it. Those rises, collected
from the pods' fast counters every period, kept by the base rate they rose from (how far a load
rises depends on where it is: a two-state load rises 4x from its low state, not at all from its
high one) and decayed over `HALF_LIFE_S`, are the service's own distribution of what R can bring
from a rate like the one now.

The headroom is the rise at a quantile the attainment objective and the error budget call for: a
quantile q means a rise the fleet cannot meet in about 1 - q of the periods, so q follows the
objective, leaner while the budget is healthy (`LEAN`: up to `LEAN` times the budget's share of
periods may be spent on rises) and tighter as it burns, up to the largest rise seen once it is
spent. Objectives under `LEANEST_OBJECTIVE` keep its quantile: they differ from it in their larger
budget, which lets the quantile tighten later, not in a leaner one (a leaner quantile stops holding
rises that come in a few periods an hour, and when those are flash crowds the fleet misses each of
them whole, then pays for the replicas that arrive after it). A rise that lasts shorter than a
queue absorbs never counts, and nothing here buys capacity after a rise: the headroom is held ahead
of it, against the rate seen.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from statistics import NormalDist

#: The rate a rise is measured against: the arrivals of this many seconds before the horizon (about
#: what the policy's recent rate reads).
BASE_S = 30.0
#: The peak is the largest of many spans (every length and position in the horizon), so noise is
#: taken off as for the largest of that many draws: steady Poisson traffic reads a rise in this share
#: of periods (the model already prices noise in; with a plain 2 or 3 standard deviations, T1's
#: Poisson arrivals read a 4-12% "rise" most periods and the fleet paid 25% more for it).
FALSE_RISE = 0.01
#: Standard deviations of Poisson noise added to the base's count.
BASE_Z = 2.0
#: Rises are kept as log2 ratios of the peak over the base in bins of this width (bin 0: no rise)...
BIN_LOG2 = 0.1
#: ...per band of the base rate, log2 bands of this width: how far a load rises depends on where it
#: is (a two-state load rises 4x from its low state and not at all from its high one).
BAND_LOG2 = 0.5
#: A rise seen this long ago weighs half as much as one seen now.
HALF_LIFE_S = 6 * 3600.0
#: Fewer periods' peaks than this (decayed weight) in and beside the band say nothing yet: no headroom.
MIN_WEIGHT = 8.0
#: While the budget is untouched, up to this many times the objective's share of periods may see a
#: rise the fleet cannot meet (most rises end before they cost a whole window): q = 0.95 at the
#: default 99%. At 2 (q = 0.98), the benchmark's TailPilot (`python -P -m tailpilot.bench.run
#: --policies tailpilot`, 2026-12-04) paid 25-41% more on T6 and T8 cost more than its
#: constant 20-replica fleet, for no more requests within the SLO on either.
LEAN = 5.0
#: The lowest objective whose share of periods sets the quantile: 0.99, the API's default (q = 0.95).
#: With each objective's own share, T9's flash crowds (a 5x rise within 20 s, four an hour, a few
#: periods each) fell under the quantile at 95% and 97%: `python -P -m tailpilot.bench.run --policies
#: tailpilot-objective-95` (2026-12-05) kept 73.9% of requests within the SLO for 22,412
#: replica-seconds at Ts = 90 s, where 99% kept 100% for 18,000.
LEANEST_OBJECTIVE = 0.99
#: Weights below this are dropped (a peak of long ago), which keeps the history small.
FORGET_WEIGHT = 0.01


@dataclass(frozen=True, slots=True)
class RiseHistory:
    """The peaks the service's load reached within a reaction time, by the base rate it rose from.

    Attributes:
        bins: (band, rise bin, decayed weight), band = floor(log2(base rate) / BAND_LOG2) and rise bin =
            floor(log2(peak / base) / BIN_LOG2) (0: no rise), sorted.
        at_s: When the last peak was added (None: never).
    """

    bins: tuple[tuple[int, int, float], ...] = ()
    at_s: float | None = None
    #: (band, peak-rate bin, decayed weight), peak-rate bin = floor(log2(peak rate) / BIN_LOG2): the
    #: levels the rises reached, which cap the headroom (a rise seen from a band's low end, applied at
    #: its high end, would size for more than the load ever reached).
    peaks: tuple[tuple[int, int, float], ...] = ()


@dataclass(frozen=True, slots=True)
class Rise:
    """One period's look back over a reaction time: the base rate, and the peak rate reached after it."""

    base_rate_per_s: float
    peak_rate_per_s: float

    @property
    def ratio(self) -> float:
        """How many times the base the peak was."""
        return self.peak_rate_per_s / self.base_rate_per_s


def band_of(rate_per_s: float) -> int:
    """The base-rate band of a rate (> 0)."""
    return math.floor(math.log2(rate_per_s) / BAND_LOG2)


def rise(counts: Sequence[float], *, bin_s: float, horizon_s: float, absorbed_s: float) -> Rise | None:
    """The rise over the last `horizon_s` of per-bin arrival counts (oldest first); None: not measurable.

    The peak is the highest rate over spans of at least `absorbed_s` (what a queue absorbs within the
    target) inside the horizon, Poisson noise below its count (`FALSE_RISE`), and never below the
    base; the base is the rate of the `BASE_S` before the horizon, `BASE_Z` noise above it. No base
    (an idle service) is no rise.
    """
    if bin_s <= 0:
        return None
    horizon = max(1, math.ceil(horizon_s / bin_s))
    base_bins = max(1, math.ceil(BASE_S / bin_s))
    if len(counts) < horizon + base_bins:
        return None
    recent = [max(0.0, float(c)) for c in counts[-horizon:]]
    base_count = sum(max(0.0, float(c)) for c in counts[-(horizon + base_bins) : -horizon])
    if base_count <= 0:
        return None
    base_s = base_bins * bin_s
    prefix = [0.0]
    for c in recent:
        prefix.append(prefix[-1] + c)
    shortest = min(horizon, max(1, math.ceil(absorbed_s / bin_s)))
    base = base_count / base_s
    peak = base
    ceiling = (base_count + BASE_Z * math.sqrt(base_count)) / base_s
    z = _z_of_max(sum(horizon - k + 1 for k in range(shortest, horizon + 1)))
    for k in range(shortest, horizon + 1):
        most = max(prefix[i + k] - prefix[i] for i in range(horizon - k + 1))
        rate = (most - z * math.sqrt(most)) / (k * bin_s)
        if rate > ceiling:
            peak = max(peak, rate)
    return Rise(base_rate_per_s=base, peak_rate_per_s=peak)


@lru_cache(maxsize=256)
def _z_of_max(positions: int) -> float:
    """Standard deviations the largest of `positions` normal draws exceeds with probability `FALSE_RISE`."""
    return NormalDist().inv_cdf(1.0 - FALSE_RISE / max(1, positions))


def learn(history: RiseHistory, value: Rise | None, *, now_s: float) -> RiseHistory:
    """The history with one period's peak added (None: nothing added), the older ones decayed."""
    if value is None:
        return history
    decay = 1.0
    if history.at_s is not None and now_s > history.at_s:
        decay = 0.5 ** ((now_s - history.at_s) / HALF_LIFE_S)
    band = band_of(value.base_rate_per_s)
    rise_bin = math.floor(max(0.0, math.log2(value.ratio)) / BIN_LOG2)
    level_bin = math.floor(math.log2(value.peak_rate_per_s) / BIN_LOG2)
    return RiseHistory(
        bins=_added(history.bins, (band, rise_bin), decay),
        at_s=now_s,
        peaks=_added(history.peaks, (band, level_bin), decay),
    )


def _added(
    bins: tuple[tuple[int, int, float], ...], key: tuple[int, int], decay: float
) -> tuple[tuple[int, int, float], ...]:
    """`bins` decayed, with one more at `key`; the ones decayed below `FORGET_WEIGHT` dropped."""
    weights = {(a, b): w * decay for a, b, w in bins if w * decay >= FORGET_WEIGHT}
    weights[key] = weights.get(key, 0.0) + 1.0
    return tuple(sorted((a, b, w) for (a, b), w in weights.items()))


def quantile(history: RiseHistory, q: float, *, rate_per_s: float) -> float:
    """The rise at quantile `q` from base rates like `rate_per_s` (1.0 without enough history).

    From the rate's own band, or with the two beside it while the band alone has too few periods;
    interpolated in log2 inside a bin (no rise is exactly 1). Never past the level the rises from
    there, nor those from any rate, reached at the same quantile.
    """
    if rate_per_s <= 0:
        return 1.0
    rises = _pooled(history.bins, band_of(rate_per_s))
    if rises is None:
        return 1.0
    factor = _bin_quantile(rises, q, floor_bin_is_one=True)
    # Never past the level the rises from here reached, nor the one the load reached from anywhere:
    # a fleet sized past the peaks it serves costs more than holding them all the time.
    for levels in (_pooled(history.peaks, band_of(rate_per_s)), _everywhere(history.peaks)):
        if levels is not None:
            factor = min(factor, max(1.0, _bin_quantile(levels, q, floor_bin_is_one=False) / rate_per_s))
    return factor


def _everywhere(bins: tuple[tuple[int, int, float], ...]) -> dict[int, float] | None:
    """Weight per bin over every band; None: too few."""
    pooled: dict[int, float] = {}
    for _, value_bin, weight in bins:
        pooled[value_bin] = pooled.get(value_bin, 0.0) + weight
    return pooled if sum(pooled.values()) >= MIN_WEIGHT else None


def _pooled(bins: tuple[tuple[int, int, float], ...], band: int) -> dict[int, float] | None:
    """Weight per bin of `band`, or of it and the two beside it when it alone has too few; None: too few."""
    for reach in (0, 1):
        pooled: dict[int, float] = {}
        for b, value_bin, weight in bins:
            if abs(b - band) <= reach:
                pooled[value_bin] = pooled.get(value_bin, 0.0) + weight
        if sum(pooled.values()) >= MIN_WEIGHT:
            return pooled
    return None


def _bin_quantile(pooled: dict[int, float], q: float, *, floor_bin_is_one: bool) -> float:
    """The value at quantile `q` of log2 bins, interpolated inside the bin that reaches it."""
    need = min(q, 1.0) * sum(pooled.values())
    seen = 0.0
    for value_bin in sorted(pooled):
        weight = pooled[value_bin]
        if seen + weight >= need - 1e-9:
            if floor_bin_is_one and value_bin == 0:
                return 1.0
            inside = 1.0 if q >= 1.0 else max(0.0, min(1.0, (need - seen) / weight))
            return float(2.0 ** ((value_bin + inside) * BIN_LOG2))
        seen += weight
    return float(2.0 ** ((max(pooled) + 1) * BIN_LOG2))


def headroom_quantile(*, objective: float, budget_remaining: float) -> float:
    """The quantile of rises the fleet holds: the objective's, leaner with budget left, 1 once spent.

    Never leaner than `LEANEST_OBJECTIVE`'s: a lower objective only lets more of its budget burn first.
    """
    left = min(1.0, max(0.0, budget_remaining))
    share = min(1.0 - objective, 1.0 - LEANEST_OBJECTIVE)
    return 1.0 - LEAN * share * left


def headroom(history: RiseHistory, *, rate_per_s: float, objective: float, budget_remaining: float) -> float:
    """The factor over the observed rate the fleet is sized for (>= 1)."""
    q = headroom_quantile(objective=objective, budget_remaining=budget_remaining)
    return max(1.0, quantile(history, q, rate_per_s=rate_per_s))
