"""The LatencyBreakdown condition: which part of a request's time in Triton is the largest (pure).

`status.observed` holds each part's mean per request over the evaluation window: the queue, and in
the server after it Triton's compute input, compute infer and compute output. What the server time
holds beyond those three is Triton's own handling of the request ("other server time"). The
condition names the largest part in its reason and gives every figure, and the P99s of the queue
and of compute infer where Triton's summaries gave them, in its message.

`timeDominatedBy` (Queue or Server) stays as it was; this is the finer answer: a Server-dominated
service whose compute input is the largest part needs lighter inputs, not a faster model.

Where the spec names the clients' P99 (`spec.monitoring.clientLatencyP99Query`), what they see
beyond Triton's P99 (`outsideServerP99Ms`: network, an ingress, serialization) is one more part,
named `OutsideServerDominated` when it is the largest. It is a difference of P99s where the other
parts are means per request, and it is compared with them as it is: a tail the clients add that
is longer than any part of a request's mean time in Triton is what to shorten first, whatever
Triton does. A query that failed, or that the platform does not run, is said at the end of the
message, in the operator's fixed words (`prometheus_answer`): never the answer's own text.

A reason that changes is a status write (`autoscaler.significant_change`), so the reason keeps the
part it named while that part stays within `HOLD_MARGIN` of the largest: two parts of about the same
size would otherwise flip it, and write the status, every period. The message still gives the
figures as they are.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from tailpilot.api import constants as c
from tailpilot.api.v1alpha1 import ObservedStatus
from tailpilot.controllers.core.conditions import ConditionUpdate

#: The part the reason names stays named while the largest part is within this factor of it.
HOLD_MARGIN: Final = 1.1
#: The spec field a failed client query is named by.
CLIENT_QUERY_FIELD: Final = "spec.monitoring.clientLatencyP99Query"
#: Of why the query gave no figure, this many characters at most (the message also carries every figure).
MAX_ERROR_CHARS: Final = 512


@dataclass(frozen=True)
class Part:
    """One part of a request's mean time: the reason that names it, its words, its ms per request."""

    reason: str
    label: str
    ms: float


def parts_of(observed: ObservedStatus) -> tuple[Part, ...] | None:
    """Every part of a request's time, in the order a request passes them; None when one is missing.

    The other server time is what the server time holds beyond the compute parts (never below 0:
    the rates behind each figure are rounded apart).
    """
    figures = (
        observed.queue_time_ms,
        observed.server_time_ms,
        observed.compute_input_time_ms,
        observed.compute_time_ms,
        observed.compute_output_time_ms,
    )
    queue, server, compute_input, compute, compute_output = figures
    if queue is None or server is None or compute_input is None or compute is None or compute_output is None:
        return None
    return (
        Part(c.REASON_QUEUE_DOMINATED, "queue", queue),
        Part(c.REASON_COMPUTE_INPUT_DOMINATED, "compute input", compute_input),
        Part(c.REASON_COMPUTE_DOMINATED, "compute infer", compute),
        Part(c.REASON_COMPUTE_OUTPUT_DOMINATED, "compute output", compute_output),
        Part(
            c.REASON_SERVER_OVERHEAD_DOMINATED,
            "other server time",
            max(0.0, server - compute_input - compute - compute_output),
        ),
    )


def dominant(parts: Sequence[Part], *, previous_reason: str | None) -> Part:
    """The largest part (the first of equals), or the one named before while within `HOLD_MARGIN` of it."""
    largest = max(parts, key=lambda part: part.ms)
    held = next((part for part in parts if part.reason == previous_reason), None)
    if held is not None and held.ms * HOLD_MARGIN >= largest.ms:
        return held
    return largest


def _ms(value: float) -> str:
    # Compute input and output are often tens of microseconds: one decimal would say 0.0 ms.
    return f"{value:.1f} ms" if value >= 1 else f"{value:.2f} ms"


def _outside(observed: ObservedStatus) -> Part | None:
    """The clients' time beyond the server's P99, as a part; None without the clients' P99."""
    if observed.outside_server_p99_ms is None:
        return None
    return Part(c.REASON_OUTSIDE_SERVER_DOMINATED, "outside the server", observed.outside_server_p99_ms)


def _outside_words(observed: ObservedStatus) -> str:
    return (
        f"outside the server {_ms(observed.outside_server_p99_ms or 0.0)} at P99 (the clients' P99 "
        f"{_ms(observed.client_p99_ms or 0.0)} less the server's {_ms(observed.p99_ms or 0.0)})"
    )


def breakdown_condition(
    observed: ObservedStatus, *, previous_reason: str | None, client_error: str | None = None
) -> ConditionUpdate:
    """LatencyBreakdown from the observed figures; `previous_reason`: its reason when it was last True.

    `client_error`: why spec.monitoring.clientLatencyP99Query gave no figure this period (None: it
    gave one, or there is none), said at the end of the message.
    """
    update = _breakdown(observed, previous_reason=previous_reason)
    if client_error is None:
        return update
    said = f"; {CLIENT_QUERY_FIELD} gave no figure: {client_error[:MAX_ERROR_CHARS]}"
    return ConditionUpdate(update.type, update.status, update.reason, update.message + said)


def _breakdown(observed: ObservedStatus, *, previous_reason: str | None) -> ConditionUpdate:
    rate = observed.request_rate
    if rate is None:
        return ConditionUpdate(
            c.CONDITION_LATENCY_BREAKDOWN,
            c.STATUS_UNKNOWN,
            c.REASON_METRICS_UNAVAILABLE,
            "no request rate could be read from the pods or Prometheus",
        )
    if rate <= 0:
        return ConditionUpdate(
            c.CONDITION_LATENCY_BREAKDOWN,
            c.STATUS_UNKNOWN,
            c.REASON_NO_TRAFFIC,
            "no requests over the window",
        )
    parts = parts_of(observed)
    if parts is None:
        return ConditionUpdate(
            c.CONDITION_LATENCY_BREAKDOWN,
            c.STATUS_UNKNOWN,
            c.REASON_METRICS_UNAVAILABLE,
            "Triton's queue and compute time counters (nv_inference_queue_duration_us, "
            "nv_inference_compute_{input,infer,output}_duration_us) could not all be read",
        )
    outside = _outside(observed)
    every = (*parts, outside) if outside is not None else parts
    top = dominant(every, previous_reason=previous_reason)
    largest = max(every, key=lambda part: part.ms)
    total = sum(part.ms for part in parts)
    held = f", named while within {HOLD_MARGIN:g}x of {largest.label}" if largest.ms > top.ms else ""
    if top is outside:
        inside = ", ".join(f"{part.label} {_ms(part.ms)}" for part in parts)
        text = f"{_outside_words(observed)}{held}; in Triton {_ms(total)} per request: {inside}"
    else:
        share = f" ({top.ms / total:.0%})" if total > 0 else ""
        rest = ", ".join(f"{part.label} {_ms(part.ms)}" for part in parts if part is not top)
        text = f"{top.label} {_ms(top.ms)} of {_ms(total)} per request{share}{held}; {rest}"
    tails = [
        f"{label} {_ms(value)}"
        for label, value in (
            ("queue", observed.queue_time_p99_ms),
            ("compute infer", observed.compute_time_p99_ms),
        )
        if value is not None
    ]
    if tails:
        text += f"; P99 {', '.join(tails)}"
    if outside is not None and top is not outside:
        text += f"; {_outside_words(observed)}"
    if observed.mean_batch_size is not None:
        text += f"; mean batch {observed.mean_batch_size:.1f}"
    return ConditionUpdate(c.CONDITION_LATENCY_BREAKDOWN, c.STATUS_TRUE, top.reason, text)
