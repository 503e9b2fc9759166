"""The serving hardware's speed, from the compute time of each batch size executed (pure).

The policy sizes replicas and batching with the engine's profiled service time, t(b) = a + c*b. The
serving pods may run the engine at another speed (other hardware, CPU cores shared, a profile taken
on a quieter machine) and with another per-item slope (batches cost more, or less, per item than the
profile's points said). Triton's statistics extension gives, per batch size executed, the executions
and the compute time they took (`tailpilot.policy.batch_sizes`): over a window, the mean time of one
batch of each size. Those points are what the profile predicts, measured on the serving hardware.

The learned line keeps the profile's shape and moves it by two factors:

    t'(b) = s * (t(1) + k * c * (b - 1))

`s` (`service_scale`) is the speed at a single request (1.43: a batch of one takes 43% longer than
profiled); `k` (`slope_scale`) the per-item slope against the profile's, at that speed. A uniformly
wrong profile (every time x f) is s = f, k = 1; a profile whose slope alone is wrong is s = 1, k != 1.

From one window's points (size b, mean time y_b, executions n_b):

- When the executions spread over sizes enough for the slope to show (`MIN_SLOPE_SHOW`: the profile's
  slope over one standard deviation of the executed sizes is at least that share of t(1); below it
  the time noise between sizes swamps the slope), a weighted least-squares line through the points
  gives both: y = A + B (b - 1), s = A / t(1), k = B / (s c).
- Otherwise the slope cannot be told from the points, and `s` alone is fitted with the slope learned
  so far: s = sum(n y) / sum(n (t(1) + k c (b - 1))), the observed compute time over the expected one
  of the same executions.

Each execution's time is counted with its own size, so a backlog or starting pods in the window do not
bias these figures (unlike the compute time per request from the metrics page, where the requests
and the batches counted in one window are not the same ones; `tailpilot.policy.core` learns from that
only in steady windows, where no per-size figures were read).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from tailpilot.api.autoscaling import ExecutedBatchSize
from tailpilot.api.engine import ServiceTimeModel

#: Executions a window needs before its times are believed (a few batches are mostly jitter).
MIN_EXECUTIONS: Final = 20
#: The slope is fitted only where it shows: the profile's slope times the standard deviation of the
#: executed sizes is at least this share of a single batch's time (a spread of one size, at a slope
#: of 10% of t(1) per item; the per-size means of a busy CPU vary by a few percent).
MIN_SLOPE_SHOW: Final = 0.1
#: Bounds of the learned slope factor: a profile's slope at most this far off either way.
SLOPE_SCALE_MIN: Final = 0.25
SLOPE_SCALE_MAX: Final = 4.0


@dataclass(frozen=True)
class SpeedSample:
    """What one window's executions say of the serving speed (unsmoothed, unbounded).

    Attributes:
        scale: Observed over profiled time of a single request's batch (`s`).
        slope_scale: Observed over profiled per-item slope (`k`); None when the sizes did not spread
            enough to tell it.
        executions: The executions behind the sample.
        busy_share: Compute time per second over the window, summed over the pods (divide by the
            replicas for each one's busy share).
    """

    scale: float
    slope_scale: float | None
    executions: int
    busy_share: float


def speed_sample(
    sizes: Sequence[ExecutedBatchSize], profiled: ServiceTimeModel, *, slope_scale: float
) -> SpeedSample | None:
    """One window's speed from its executed batch sizes; None without enough timed executions.

    `profiled`: the profile's compute-time fit; `slope_scale`: the slope factor learned so far (used
    when this window cannot tell the slope). Entries merged past the status bound (`max_size`) are
    left out: their sizes are a range.
    """
    points = [
        (float(s.size - 1), s.compute_ms, s.executions)
        for s in sizes
        if s.compute_ms is not None and s.compute_ms > 0 and s.executions > 0 and s.max_size is None
    ]
    n = sum(w for _, _, w in points)
    t1, c = profiled.mean_ms(1), profiled.per_item_ms
    if n < MIN_EXECUTIONS or t1 <= 0:
        return None
    busy = sum(s.executions_per_s * (s.compute_ms or 0.0) for s in sizes) / 1000.0
    x_mean = sum(w * x for x, _, w in points) / n
    y_mean = sum(w * y for _, y, w in points) / n
    x_var = sum(w * (x - x_mean) ** 2 for x, _, w in points) / n
    if c > 0 and c * math.sqrt(x_var) >= MIN_SLOPE_SHOW * t1:
        slope = sum(w * (x - x_mean) * (y - y_mean) for x, y, w in points) / (n * x_var)
        at_one = y_mean - slope * x_mean
        if at_one > 0 and slope > 0:
            scale = at_one / t1
            return SpeedSample(scale=scale, slope_scale=slope / (scale * c), executions=n, busy_share=busy)
    expected = sum(w * (t1 + slope_scale * c * x) for x, _, w in points)
    return SpeedSample(scale=n * y_mean / expected, slope_scale=None, executions=n, busy_share=busy)


def learned_line(profiled: ServiceTimeModel, *, scale: float, slope_scale: float) -> ServiceTimeModel:
    """The profile's line moved by the learned factors: t'(b) = s (t(1) + k c (b - 1)).

    The per-request part of the slope moves with the slope; the jitter is the profile's.
    """
    per_item = profiled.per_item_ms * slope_scale
    return profiled.model_copy(
        update={
            "intercept_ms": max(0.0, scale * (profiled.mean_ms(1) - per_item)),
            "per_item_ms": scale * per_item,
            "per_request_ms": scale * profiled.per_request_ms * slope_scale,
        }
    )
