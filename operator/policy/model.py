"""Analytic P99 model of one Triton replica's dynamic batcher (pure, float arithmetic only).

The load is assumed spread evenly over replicas (Kubernetes Service round robin),
one item per request, Poisson arrivals at rate lambda per replica, and a batch of
b items taking t(b) = a + c*b ms (the profile's fitted service time) on one of k
model instances. The P99 is the sum of four terms, each a standard approximation:

1. Batch size. When instances are busy, requests accumulate while a batch runs,
   so the executed batch size is the fixed point b = lambda * t(b) / k, i.e.
   b = lambda*a / (k - lambda*c), clamped to [1, max_batch]. A max queue delay
   d > 0 can grow a light-load batch towards the largest preferred size (or the
   max batch) by lambda*d items, at the price of up to d of waiting.
2. Waiting for a free instance. All k instances are busy with probability
   about rho_b**k (rho_b = lambda*t(b)/(k*b)); the wait is then the residual of
   the soonest-finishing batch, roughly uniform on [0, t(b)/k]. Its 99th
   percentile solves rho_b**k * (1 - x*k/t(b)) = 0.01.
3. Overflow near saturation. When even full batches barely keep up
   (rho = lambda*t(B)/(k*B) -> 1) whole batches queue; Kingman's G/G/1
   approximation on batches of B (arrival cv^2 = 1/B, service cv^2 = jitter^2)
   with an exponential tail gives the 99th percentile
   s * rho/(1-rho) * (ca2+cs2)/2 * ln(100*rho)/rho with s = t(B)/k.
4. Service. t(b) plus 2.33 standard deviations of the jitter and of the Poisson
   spread of the batch size.

Beyond rho >= MAX_UTILIZATION the replica is treated as unable to keep up
(infinite P99). The model's absolute error is corrected online by the policy
(observed / predicted ratio); what matters here is the shape across loads and
batch sizes, and speed (~1-2 us per evaluation).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from tailpilot.api.autoscaling import BatchingConfig
from tailpilot.api.engine import ReloadCost, ServiceTimeModel

#: Utilization above which a replica is considered unable to keep up.
MAX_UTILIZATION = 0.97
_Z99 = 2.326
_LN100 = math.log(100.0)


@dataclass(frozen=True, slots=True)
class BatchShape:
    """The numbers of a BatchingConfig the model needs, as plain floats (ms)."""

    max_batch: int
    delay_ms: float
    instances: int
    #: Size the batcher waits for while the delay runs (largest preferred size, or max batch).
    fill_target: int

    @classmethod
    def of(cls, batching: BatchingConfig) -> BatchShape:
        """Extract the model's view of a batching config."""
        prefs = [p for p in batching.preferred_batch_sizes if p <= batching.max_batch_size]
        return cls(
            max_batch=batching.max_batch_size,
            delay_ms=batching.max_queue_delay_us / 1000.0,
            instances=batching.instances_per_replica,
            fill_target=max(prefs) if prefs else batching.max_batch_size,
        )


def capacity_per_s(shape: BatchShape, service: ServiceTimeModel) -> float:
    """Return the requests per second one replica serves at full batches (the saturation throughput)."""
    t_full = service.intercept_ms + service.per_item_ms * shape.max_batch
    if t_full <= 0:
        return math.inf
    return 1000.0 * shape.instances * shape.max_batch / t_full


#: Utilization (of full-batch capacity) up to which a prediction uses only the light-load
#: correction, and from which only the heavy-load one; in between, a log-linear blend.
LIGHT_UTILIZATION, HEAVY_UTILIZATION = 0.3, 0.7


def heavy_weight(utilization: float) -> float:
    """How much of the heavy-load correction applies at `utilization` (0 to 1, continuous)."""
    span = HEAVY_UTILIZATION - LIGHT_UTILIZATION
    return min(1.0, max(0.0, (utilization - LIGHT_UTILIZATION) / span))


@dataclass(frozen=True, slots=True)
class Correction:
    """Observed/predicted P99 factors for light and heavy load, blended by utilization.

    The model's error depends on the load: on the real-pods runs it over-predicted two replicas at
    a third of their capacity by 1.7x while it was close for one replica at three quarters, so a
    single factor learned at light load made one replica look enough (docs/autoscaling.md, section
    2). Each factor learns from windows in proportion to their weight, and a candidate's
    prediction blends the two at its own utilization, continuously, so that batching candidates
    on either side of a boundary do not swap places between two calls.
    """

    light: float = 1.0
    heavy: float = 1.0

    def at(self, utilization: float) -> float:
        """The factor for a candidate running at `utilization`."""
        w = heavy_weight(utilization)
        if w <= 0.0:
            return self.light
        if w >= 1.0:
            return self.heavy
        return math.exp((1 - w) * math.log(self.light) + w * math.log(self.heavy))


def utilization(*, rate_per_s: float, replicas: int, shape: BatchShape, service: ServiceTimeModel) -> float:
    """Busy fraction of the replicas' full-batch capacity at `rate_per_s` (inf with no replica)."""
    if replicas <= 0:
        return math.inf if rate_per_s > 0 else 0.0
    return rate_per_s / (replicas * capacity_per_s(shape, service))


def reload_delay_ms(reload: ReloadCost | None, utilization: float) -> float:
    """How long a live reload at `utilization` of the replicas in force delays requests, ms.

    While the new instance loads (`reload.seconds`), a replica serves only `reload.served_share` of
    its capacity; at a higher utilization the difference queues, and the last request queued waits
    about (utilization - served_share) x seconds. 0 for a reload that was never timed, or one the
    replica absorbs at this load (an overloaded replica counts as fully busy: its backlog grows anyway).
    """
    if reload is None:
        return 0.0
    return max(0.0, min(utilization, 1.0) - reload.served_share) * reload.seconds * 1000.0


def corrected_p99_ms(
    correction: Correction, *, rate_per_s: float, replicas: int, shape: BatchShape, service: ServiceTimeModel
) -> float:
    """`predict_p99_ms` times the correction of the candidate's load regime."""
    rho = utilization(rate_per_s=rate_per_s, replicas=replicas, shape=shape, service=service)
    p99 = predict_p99_ms(rate_per_s=rate_per_s, replicas=replicas, shape=shape, service=service)
    return correction.at(rho) * p99


def predict_p99_ms(
    *, rate_per_s: float, replicas: int, shape: BatchShape, service: ServiceTimeModel
) -> float:
    """Predicted service-level P99 (ms) of `replicas` replicas sharing `rate_per_s` evenly.

    Returns math.inf when the replicas cannot keep up.
    """
    a = service.intercept_ms
    c = service.per_item_ms
    cv = service.jitter_cv
    k = shape.instances
    big_b = shape.max_batch
    if replicas <= 0:
        return math.inf if rate_per_s > 0 else 0.0
    lam = rate_per_s / replicas / 1000.0  # requests per ms per replica
    if lam <= 0:
        return (a + c) * (1.0 + _Z99 * cv)
    t_full = a + c * big_b
    rho = lam * t_full / (k * big_b)
    if rho >= MAX_UTILIZATION:
        return math.inf
    # 1. executed batch size (load-driven fixed point, then the delay's fill)
    b = min(float(big_b), max(1.0, lam * a / (k - lam * c)))
    form_wait = 0.0
    if shape.delay_ms > 0 and b < shape.fill_target:
        form_wait = min(shape.delay_ms, (shape.fill_target - b) / lam)
        b = min(float(shape.fill_target), b + lam * form_wait)
    t_b = a + c * b
    # 2. wait for a free instance
    busy = min(1.0, lam * t_b / (k * b)) ** k
    free_wait = t_b / k * (1.0 - 0.01 / busy) if busy > 0.01 else 0.0
    # 3. overflow of whole batches near saturation (Kingman, exponential tail)
    overflow = 0.0
    if rho > 0.01:
        ca2_cs2 = 1.0 / big_b + cv * cv
        overflow = (t_full / k) / (1.0 - rho) * ca2_cs2 / 2.0 * math.log(100.0 * rho)
    # 4. service with jitter and batch-size spread (a batch never exceeds the max: none at max batch 1)
    service_p99 = t_b * (1.0 + _Z99 * cv) + min(_Z99 * math.sqrt(b), big_b - b) * c
    return form_wait + free_wait + overflow + service_p99


def min_replicas_for(
    *,
    rate_per_s: float,
    target_ms: float,
    shape: BatchShape,
    service: ServiceTimeModel,
    correction: Correction,
    lo: int,
    hi: int,
) -> tuple[int, float] | None:
    """Fewest replicas in [lo, hi] whose corrected predicted P99 is <= target_ms, and that P99.

    The P99 falls as replicas grow, so `hi` is checked first (one evaluation
    rules a candidate out) and the answer is bisected between the capacity
    bound and `hi`: O(log(hi - lo)) evaluations. None when even `hi` misses.
    """
    if rate_per_s <= 0 and lo == 0:
        return 0, 0.0  # scale to zero is allowed only by min_replicas == 0 and only on no traffic
    start = max(lo, 1)
    cap = capacity_per_s(shape, service)
    if rate_per_s > 0 and math.isfinite(cap):
        start = max(start, math.ceil(rate_per_s / (cap * MAX_UTILIZATION)))
    if start > hi:
        return None
    p_hi = corrected_p99_ms(correction, rate_per_s=rate_per_s, replicas=hi, shape=shape, service=service)
    if p_hi > target_ms:
        return None
    low, high, best = start, hi, p_hi
    while low < high:
        mid = (low + high) // 2
        p99 = corrected_p99_ms(correction, rate_per_s=rate_per_s, replicas=mid, shape=shape, service=service)
        if p99 <= target_ms:
            high, best = mid, p99
        else:
            low = mid + 1
    return high, best
