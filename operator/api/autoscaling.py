"""Typed values shared by the autoscaling policy, the controller and the benchmark simulator.

The policy (`tailpilot.policy`) is a pure function of
(spec bounds, engine profile, observation, state, now) -> Decision. The
controller fills `Observation` from Prometheus; the benchmark simulator fills
it from its simulated fleet, with the same metric semantics. Neither the
policy nor these types read a clock: time is passed in as seconds.
"""

from __future__ import annotations

import math
from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

#: The largest magnitude a measured figure of an Observation is taken at (rates per second,
#: milliseconds, queue depths, counts). The figures come from pods' pages and Prometheus, which a
#: tenant's serving image writes: a queue depth of 1e308 once made every period's arithmetic
#: overflow (int(inf)) and raise. Past this a figure says only "very large", and is taken as this.
CREDIBLE_MAX = 1e9


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class BatchingConfig(_Frozen):
    """Triton dynamic-batching settings in force or proposed (one model, one replica)."""

    max_batch_size: int = Field(ge=1)
    preferred_batch_sizes: tuple[int, ...] = ()
    max_queue_delay_us: int = Field(default=0, ge=0)
    instances_per_replica: int = Field(default=1, ge=1)


class ExecutedBatchSize(_Frozen):
    """Executions at one batch size over the evaluation window, summed across the service's pods.

    From Triton's statistics extension (`batch_stats`: executions of the model per batch size), not
    its metrics page, which has no per-size figure.
    """

    size: int = Field(ge=1)
    #: Set only on the last entry of a bounded list: the sizes `size` to `max_size` merged into one.
    max_size: int | None = Field(default=None, ge=1)
    executions: int = Field(ge=0)
    executions_per_s: float = Field(ge=0)
    #: The share of the window's requests (inferences: a request of several items counts each) that
    #: ran in batches of this size: size x executions over the sum of size x executions.
    request_share: float = Field(ge=0, le=1)
    #: Mean compute time (Triton's compute infer) of one execution at this size over the window,
    #: ms; None when the pods' statistics carried no time for it.
    compute_ms: float | None = Field(default=None, ge=0)


class Observation(_Frozen):
    """What the controller knows about a service's traffic at one instant.

    All rates are per second over the evaluation window; latencies are
    service-level (merged across pods, never an average of per-pod quantiles).
    `None` means the metric was missing.
    """

    at_s: float
    request_rate: float | None
    p99_ms: float | None
    queue_depth_per_replica: float | None = None
    queue_time_ms: float | None = None
    compute_time_ms: float | None = None
    #: Time per request inside the server outside its queue (request duration less queue time):
    #: the batch's compute plus the backend's input/output handling, which a replica spends
    #: per request whether or not it computes. None when not measured.
    service_time_ms: float | None = None
    #: Of the service time, Triton's compute input and compute output per request (copying the
    #: inputs into the batch, the outputs out of it); `compute_time_ms` is its compute infer.
    compute_input_time_ms: float | None = None
    compute_output_time_ms: float | None = None
    #: The P99 of the time a request spent queued, and in compute infer, merged across pods from
    #: Triton's per-pod summaries as `p99_ms` is. None when no pod exports them or none served.
    queue_time_p99_ms: float | None = None
    compute_time_p99_ms: float | None = None
    mean_batch_size: float | None = None
    #: The clients' P99 from the spec's clientLatencyP99Query, ms (None: no query, or it failed).
    client_p99_ms: float | None = None
    #: Executions per batch size over the window, by size (`tailpilot.policy.batch_sizes`); None when
    #: no pod's statistics were read twice in it (or the rates came from Prometheus, which has none).
    executed_batch_sizes: tuple[ExecutedBatchSize, ...] | None = None
    failure_rate: float | None = None
    ready_replicas: int = 0
    #: Ready pods the figures do not cover (Prometheus had no current sample of them): summed rates
    #: would read low, so no scale-down rests on them. The pods' own reads count the missing pods
    #: from those that answered instead (`PodRead.serving`), so this stays 0 there.
    pods_unobserved: int = 0
    #: Age of the newest sample the observation was built from.
    data_age_s: float = 0.0
    #: Completions per second over the last `recent_window_s` only (shorter than the evaluation
    #: window): a load step shows here a window earlier. None when not measured.
    recent_request_rate: float | None = None
    recent_window_s: float | None = None
    #: Requests that arrived in each scrape interval of a lookback, oldest first, ending at
    #: `at_s` (completions plus the growth of the pending queue): the arrival curve bursts are
    #: sized from. Empty when not measured.
    arrival_counts: tuple[float, ...] = ()
    arrival_bin_s: float | None = None
    #: Where the rates, queues and arrivals came from: the pods' own metrics pages, or Prometheus
    #: (when no pod could be read). None when not recorded.
    rates_from: Literal["Pods", "Prometheus"] | None = None

    @model_validator(mode="before")
    @classmethod
    def _credible(cls, data: Any) -> Any:
        """Measured figures past `CREDIBLE_MAX` are taken at it; non-finite ones are missing (None)."""
        if not isinstance(data, dict):
            return data
        out = dict(data)
        for name, value in data.items():
            if name in _MEASURED_FIGURES and isinstance(value, float):
                out[name] = _credible(value)
        counts = data.get("arrival_counts")
        if isinstance(counts, tuple | list):
            out["arrival_counts"] = tuple(
                c if not isinstance(c, float) else (_credible(c) if math.isfinite(c) else 0.0) for c in counts
            )
        return out


def _credible(value: float) -> float | None:
    if not math.isfinite(value):
        return None
    return max(-CREDIBLE_MAX, min(CREDIBLE_MAX, value))


#: The Observation fields a pod or Prometheus reports (not times or bins the controller sets).
_MEASURED_FIGURES = frozenset(
    {
        "request_rate",
        "p99_ms",
        "queue_depth_per_replica",
        "queue_time_ms",
        "compute_time_ms",
        "service_time_ms",
        "compute_input_time_ms",
        "compute_output_time_ms",
        "queue_time_p99_ms",
        "compute_time_p99_ms",
        "mean_batch_size",
        "client_p99_ms",
        "failure_rate",
        "recent_request_rate",
    }
)


class ScalingAction(StrEnum):
    """What a decision changes."""

    NONE = "None"
    SCALE_UP = "ScaleUp"
    SCALE_DOWN = "ScaleDown"
    REBATCH = "Rebatch"
    SCALE_UP_AND_REBATCH = "ScaleUpAndRebatch"
    SCALE_DOWN_AND_REBATCH = "ScaleDownAndRebatch"
    HOLD = "Hold"


class Decision(_Frozen):
    """The policy's output: target replicas and batching, and why (CamelCase reason + message)."""

    at_s: float
    action: ScalingAction
    replicas: int = Field(ge=0)
    batching: BatchingConfig
    reason: str
    message: str = ""
    predicted_p99_ms: float | None = None
    dry_run: bool = False
