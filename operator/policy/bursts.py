"""Burst capacity: the fleet a service's recent arrivals ask for beyond what Poisson explains. Pure.

The queueing model (`tailpilot.policy.model`) assumes Poisson arrivals at the window's mean rate.
Real inference traffic comes in bursts of a few seconds at many times that rate (the Azure LLM
code trace: 2.3 s at 17x the base, every ~20 s). A burst shorter than a replica's start-up cannot
be answered by scaling: the fleet must already hold what it takes to absorb it. This module sizes
that from the service's arrival curve, the network-calculus way:

* `ArrivalCurve`: for each span w (in scrape bins, up to `max_span_s`), the most requests that
  arrived in any w-long span of the lookback, `A(w)`, and the lookback's mean rate `lam`.
* A span is a *burst* when `A(w)` exceeds the Poisson expectation `lam * w` by more than Poisson
  noise explains: more than z standard deviations (`sqrt(lam * w)`), z set so that steady Poisson
  traffic raises a false burst with probability `false_alarm` even though the peak is the largest
  of every position of the span in the lookback (a Bonferroni bound). Poisson noise is what the
  model already prices in; sizing for it again would over-provision steady traffic.
* A fleet serving C requests per second (full batches, since a burst queues) meets a target of
  `target` when, for every burst span, `A(w) <= C * (w + D)` with `D = target - t(m) - t(B)`: a
  burst's first requests wait for the batch in progress (`t(m)`, the batch size the service runs
  now), and the last request of the span leaves once the backlog ahead of it and its own full
  batch are done. So `C >= max over bursts of A(w) / (w + D)`; a batching that leaves no time for
  a backlog (`D <= 0`) must at least keep up with every burst's own rate (`C >= A(w) / w`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from statistics import NormalDist

#: Spans longer than this are the model's business (a sustained rate, not a burst).
DEFAULT_MAX_SPAN_S = 60.0


@dataclass(frozen=True, slots=True)
class ArrivalCurve:
    """Most arrivals in any span of 1..len(peaks) bins over a lookback, and its mean rate."""

    bin_s: float
    #: peaks[k] = most arrivals in any span of k + 1 consecutive bins.
    peaks: tuple[float, ...]
    mean_rate_per_s: float
    #: Bins in the lookback (a span of k bins has bins - k + 1 positions).
    bins: int

    @classmethod
    def of(
        cls, counts: Sequence[float], *, bin_s: float, max_span_s: float = DEFAULT_MAX_SPAN_S
    ) -> ArrivalCurve | None:
        """The curve of per-bin arrival counts (oldest first); None without a bin or a request."""
        if bin_s <= 0 or not counts or sum(counts) <= 0:
            return None
        prefix = [0.0]
        for c in counts:
            prefix.append(prefix[-1] + max(0.0, float(c)))
        n = len(counts)
        spans = max(1, min(n, int(max_span_s / bin_s)))
        peaks = tuple(max(prefix[i + k] - prefix[i] for i in range(n - k + 1)) for k in range(1, spans + 1))
        return cls(bin_s=bin_s, peaks=peaks, mean_rate_per_s=prefix[-1] / (n * bin_s), bins=n)

    def bursts(self, false_alarm: float, *, rate_per_s: float = 0.0) -> tuple[tuple[float, float], ...]:
        """(span seconds, arrivals) of the spans whose peak is beyond Poisson noise.

        Noise around the larger of the lookback's mean and `rate_per_s`, the rate the model sizes
        for: a trend or a step up is that rate's business, not a burst.
        """
        lam = max(self.mean_rate_per_s, rate_per_s)
        out = []
        for k, peak in enumerate(self.peaks, start=1):
            w = k * self.bin_s
            z = _z_of_max(false_alarm, max(1, self.bins - k + 1))
            if peak > lam * w + z * math.sqrt(lam * w):
                out.append((w, peak))
        return tuple(out)


@lru_cache(maxsize=1024)
def _z_of_max(false_alarm: float, positions: int) -> float:
    """Standard deviations the largest of `positions` normal draws exceeds with probability `false_alarm`."""
    return NormalDist().inv_cdf(1.0 - false_alarm / positions)


@dataclass(frozen=True, slots=True)
class Bursts:
    """The recent bursts (span seconds, arrivals) and the batch size the service runs between them."""

    spans: tuple[tuple[float, float], ...] = ()
    #: Mean executed batch size now: the size of the batch in progress when a burst starts.
    running_batch: float = 1.0

    def __bool__(self) -> bool:
        return bool(self.spans)


NO_BURSTS = Bursts()


def burst_rate_per_s(
    bursts: Sequence[tuple[float, float]], *, target_ms: float, full_batch_ms: float, in_progress_ms: float
) -> float:
    """Throughput a fleet needs to absorb `bursts` within `target_ms` (0 without bursts).

    A burst's first requests wait for the batch in progress when it starts (`in_progress_ms`, the
    time of the batch the service runs now); from then on batches are full (`full_batch_ms`), and
    the last request of a span leaves once the backlog ahead of it and its own full batch are
    done: `target - in_progress - t(B)` is left for the backlog. A batching that leaves no time
    for a backlog must at least keep up with every burst's rate, so that none builds.
    """
    if not bursts:
        return 0.0
    delay_s = max(0.0, (target_ms - in_progress_ms - full_batch_ms) / 1000.0)
    return max(arrivals / (span + delay_s) for span, arrivals in bursts)
