"""The service time learned online from the serving pods' own counters (pure).

An engine without a profile (profiling off, failed, or the profile of another engine) must not
leave the autoscaler inert. Triton counts, per model, the requests it answered, the batches it
executed, and the time requests spent in the server and in its queue; over one evaluation window
they give the mean batch size m (inferences / executions) and the time per request outside the
queue (the batch's execution plus the backend's input/output handling). Batch execution time is
linear in the batch size, t(b) = a + c*b, so its mean over the window's batches is a + c*E[b]: one
point per window, and a least-squares line through the windows' points gives a and c.

The time per request weighs each batch by its size (every request of a batch is charged the
batch's time), so a window's point is placed at the batch the average *request* ran in, m + 1 -
1/m with the batch sizes the policy's model assumes (one plus a Poisson count), as the policy's
own hardware-speed learning does.

Until the windows' batch sizes spread enough to separate a from c, the model is provisional:
every item is charged the same (a = 0, c = the observed time over the batch), which credits
batching with no gain (more replicas, never fewer, than the true model asks for at larger
batches). The policy's P99 correction then scales either model to the observed P99. An engine
whose batches cannot exceed one needs no spread: t(1) is all there is to know.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

from tailpilot.api.autoscaling import Observation
from tailpilot.api.engine import ServiceTimeModel

#: Windows kept for the fit: about half an hour at the default 30 s window and 15 s period.
MAX_SAMPLES = 120
#: Windows a fit needs before it is believed (a single noisy window is no line).
MIN_FIT_SAMPLES = 4
#: How far apart the request-weighted batch sizes must be: less, and the noise of the times
#: (10-20% between windows on a busy CPU) swamps the slope.
MIN_BATCH_SPREAD = 1.0
#: Assumed spread of one batch's execution time around the model. The counters give only means
#: over a window, never one batch's time, so the spread is assumed on the cautious side (the
#: benchmark's engine profiles carry 0.1) and the policy's P99 correction learns the rest.
ASSUMED_JITTER_CV = 0.3
#: Saturated windows this much slower per item than the fastest one had idle time in them.
FLAT_OUT_TOLERANCE = 1.25
#: Fewer requests per second than this in a window make its time per request too noisy to use.
MIN_RATE_PER_S = 1.0


class WindowKind(StrEnum):
    """What a window's time per request measures."""

    #: A queue beyond a full batch at every ready replica at the window's end: the replicas ran
    #: flat out, so their completions measure what they can serve, overhead and all.
    SATURATED = "Saturated"
    #: No backlog, every replica ready: the server's own time per request, a lower bound of what a
    #: request occupies a replica (the HTTP front end and whatever else shares its CPU are outside).
    STEADY = "Steady"
    #: Pods starting, or a backlog that is not everywhere: times and batches of different requests.
    MIXED = "Mixed"


class FitQuality(StrEnum):
    """How much of the service-time model the windows determine."""

    PROVISIONAL = "Provisional"
    FITTED = "Fitted"


@dataclass(frozen=True, slots=True)
class ServiceSample:
    """One window: the batch the average request ran in, and its times per request (ms).

    `time_ms` is the server's time outside the queue (compute when that is all that is measured);
    `compute_ms` Triton's compute time alone, which the policy's hardware-speed learning compares
    with the model's compute time (None: not measured).
    """

    request_batch: float
    time_ms: float
    weight: float
    compute_ms: float | None = None
    #: What kind of window it was, which decides how much it is trusted (`fit_service_time`).
    kind: WindowKind = WindowKind.STEADY


@dataclass(frozen=True, slots=True)
class ServiceFit:
    """The learned model, how it was obtained, and from how many windows.

    `compute_model` is the same kind of line through the compute times alone (None: not measured).
    """

    model: ServiceTimeModel
    quality: FitQuality
    samples: int
    batch_range: tuple[float, float]
    compute_model: ServiceTimeModel | None = None
    #: The kind of windows it was fitted from (Mixed: any kind, or not known).
    windows: WindowKind = WindowKind.MIXED


def request_weighted_batch(mean_batch: float, max_batch_size: int) -> float:
    """The batch size the average request ran in, from the mean per execution (m + 1 - 1/m, capped)."""
    m = max(1.0, mean_batch)
    return min(float(max_batch_size), m + 1.0 - 1.0 / m)


def sample_of(
    observation: Observation, *, max_batch_size: int, instances: int, replicas: int
) -> ServiceSample | None:
    """The window's point, or None when it has no usable time per request (idle, missing counters).

    Steady: the server's time per request outside the queue when measured, else the compute time
    alone (a replica spends the backend's input/output handling per request too, and a model of
    compute alone would overstate its capacity). Saturated: what the replicas served, a batch of m
    every instances x ready x m / rate seconds, or the server's time if that is longer. On a CPU
    limit the difference is large: on the real-pods cluster the server counted 17 ms a request
    where the replica's 0.6 cores served one every 29 ms, the rest being the HTTP front end.
    """
    measured = observation.service_time_ms or observation.compute_time_ms
    batch, rate, depth = (
        observation.mean_batch_size,
        observation.request_rate,
        observation.queue_depth_per_replica,
    )
    if measured is None or batch is None or rate is None or rate < MIN_RATE_PER_S or measured <= 0:
        return None
    ready = observation.ready_replicas
    backlog = depth is not None and depth > max_batch_size * instances
    if ready == replicas and backlog:
        kind = WindowKind.SATURATED
        # Completions never exceed what the replicas serve, so the faster of the window's rate
        # and its recent part's (closer to the backlog the window ended in) is the better measure.
        served = max(rate, observation.recent_request_rate or 0.0)
        measured = max(measured, 1000.0 * instances * ready * max(1.0, batch) / served)
    elif ready == replicas:
        kind = WindowKind.STEADY
    else:
        kind = WindowKind.MIXED
    compute = observation.compute_time_ms
    return ServiceSample(
        request_batch=request_weighted_batch(batch, max_batch_size),
        time_ms=measured,
        weight=rate,
        compute_ms=compute if compute is not None and compute > 0 else None,
        kind=kind,
    )


def add_sample(samples: tuple[ServiceSample, ...], sample: ServiceSample | None) -> tuple[ServiceSample, ...]:
    """The samples with one more window, the oldest dropped past `MAX_SAMPLES`."""
    if sample is None:
        return samples
    return (*samples, sample)[-MAX_SAMPLES:]


def fit_service_time(samples: Sequence[ServiceSample], *, max_batch_size: int) -> ServiceFit | None:
    """The service-time model the windows support (None without a window).

    Fitted: a rate-weighted least-squares line through the windows, its intercept and slope kept
    non-negative, once `MIN_FIT_SAMPLES` windows span `MIN_BATCH_SPREAD` (or the engine runs only
    batches of one). Provisional otherwise. The compute times get the same treatment.

    The windows that say most about capacity count, once there are any: saturated ones (they
    measure what a replica serves), else steady ones, else the mixed ones (pods starting: times and
    batches of different requests, a rough model that beats none).
    """
    kind, samples = _most_telling(samples)
    if not samples:
        return None
    xs = [s.request_batch for s in samples]
    lo, hi = min(xs), max(xs)
    fitted = len(samples) >= MIN_FIT_SAMPLES and (hi - lo >= MIN_BATCH_SPREAD or max_batch_size <= 1)
    points = [(s.request_batch, s.time_ms, s.weight) for s in samples]
    computes = [(s.request_batch, s.compute_ms, s.weight) for s in samples if s.compute_ms is not None]
    return ServiceFit(
        model=_model(points, fitted=fitted),
        quality=FitQuality.FITTED if fitted else FitQuality.PROVISIONAL,
        samples=len(samples),
        batch_range=(lo, hi),
        compute_model=_model(computes, fitted=fitted) if len(computes) == len(samples) else None,
        windows=kind,
    )


def _most_telling(samples: Sequence[ServiceSample]) -> tuple[WindowKind, list[ServiceSample]]:
    """The kind of windows that says most about capacity among `samples`, and those windows."""
    saturated = _flat_out([s for s in samples if s.kind is WindowKind.SATURATED])
    if saturated:
        return WindowKind.SATURATED, saturated
    steady = [s for s in samples if s.kind is WindowKind.STEADY]
    if steady:
        return WindowKind.STEADY, steady
    return WindowKind.MIXED, list(samples)


def measures_capacity_unlike(fit: ServiceFit, than: ServiceFit) -> bool:
    """Whether `fit` comes from saturated windows and `than` does not: then `fit` is believed first.

    Why: saturated windows measure what a replica serves; steady ones are a lower bound of a
    request's time, and on a CPU limit a lightly loaded replica runs a request faster than a busy
    one (a quota throttles only once its period's share is spent). On real pods a service fitted at
    5 req/s kept that fit over its first saturated windows (too few to be Fitted), believed one
    replica could serve 60 req/s, and went from 2 replicas to 1 in the middle of that load.
    """
    return fit.windows is WindowKind.SATURATED and than.windows is not WindowKind.SATURATED


def _flat_out(saturated: Sequence[ServiceSample]) -> list[ServiceSample]:
    """The saturated windows in which the replicas ran flat out throughout.

    A window is saturated by its end; a backlog that built during it leaves idle time in it, so its
    completions under-measure what a replica serves and never over-measure it. The windows within
    `FLAT_OUT_TOLERANCE` of the fastest (per item) are the ones that ran flat out (in the
    operator's local-cluster test, 2026-12-01 15:56 UTC, the first such window, which began before
    the load did, read 82.5 ms a request from an echo model that takes 20 ms).
    """
    if not saturated:
        return []
    fastest = min(s.time_ms / s.request_batch for s in saturated)
    return [s for s in saturated if s.time_ms / s.request_batch <= FLAT_OUT_TOLERANCE * fastest]


def _model(points: Sequence[tuple[float, float, float]], *, fitted: bool) -> ServiceTimeModel:
    """The line through (batch, ms, weight) points, or every item charged alike when not `fitted`."""
    total = sum(w for _, _, w in points)
    if fitted:
        intercept, slope = _weighted_line(points, total)
    else:
        intercept, slope = 0.0, sum(w * y / x for x, y, w in points) / total
    return ServiceTimeModel(intercept_ms=intercept, per_item_ms=slope, jitter_cv=ASSUMED_JITTER_CV)


def _weighted_line(points: Sequence[tuple[float, float, float]], total: float) -> tuple[float, float]:
    """(intercept, slope) of y = a + c*x by weighted least squares, both kept >= 0."""
    mean_x = sum(w * x for x, _, w in points) / total
    mean_y = sum(w * y for _, y, w in points) / total
    sxx = sum(w * (x - mean_x) ** 2 for x, _, w in points)
    if sxx <= 0:  # every window at one batch size (an engine of batch 1): all of it is per item
        return 0.0, mean_y / mean_x
    slope = sum(w * (x - mean_x) * (y - mean_y) for x, y, w in points) / sxx
    intercept = mean_y - slope * mean_x
    if slope < 0:  # larger batches measured faster: noise; charge the batch, not its items
        return mean_y, 0.0
    if intercept < 0:  # a line through the origin is the cheapest non-negative model
        return 0.0, mean_y / mean_x
    return intercept, slope


def disagreement(fit: ServiceFit, profiled: ServiceTimeModel, *, batch: float) -> float:
    """Fitted over profiled time of a batch of `batch` items (1.0: they agree)."""
    expected = profiled.mean_ms(batch)
    return fit.model.mean_ms(batch) / expected if expected > 0 else math.inf
