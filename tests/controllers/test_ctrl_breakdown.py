"""LatencyBreakdown: the largest part of a request's time, named from status.observed with its figures."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from tailpilot.api import constants as c
from tailpilot.api.v1alpha1 import InferenceServiceStatus, ObservedStatus
from tailpilot.controllers.autoscale.autoscaler import significant_change
from tailpilot.controllers.autoscale.breakdown import HOLD_MARGIN, breakdown_condition, dominant, parts_of
from tailpilot.controllers.core.conditions import merge_conditions

#: A queue-bound service: 40.1 ms queued, 4.4 ms in the server of which 3.9 ms compute infer.
QUEUED = ObservedStatus(
    request_rate=120.0,
    queue_time_ms=40.1,
    server_time_ms=4.4,
    compute_input_time_ms=0.06,
    compute_time_ms=3.9,
    compute_output_time_ms=0.31,
    queue_time_p99_ms=120.4,
    compute_time_p99_ms=5.2,
    mean_batch_size=3.2,
)


def observed(**update: float | None) -> ObservedStatus:
    return QUEUED.model_copy(update=update)


def test_the_largest_part_is_named_with_every_figure_and_the_tails():
    update = breakdown_condition(QUEUED, previous_reason=None)
    assert (update.type, update.status, update.reason) == ("LatencyBreakdown", "True", "QueueDominated")
    assert update.message == (
        "queue 40.1 ms of 44.5 ms per request (90%); compute input 0.06 ms, compute infer 3.9 ms, "
        "compute output 0.31 ms, other server time 0.13 ms; P99 queue 120.4 ms, compute infer 5.2 ms; "
        "mean batch 3.2"
    )


@pytest.mark.parametrize(
    ("figures", "reason"),
    [
        ({"queue_time_ms": 1.0, "server_time_ms": 4.4}, c.REASON_COMPUTE_DOMINATED),
        (
            {"queue_time_ms": 0.5, "server_time_ms": 9.0, "compute_input_time_ms": 4.6},
            "ComputeInputDominated",
        ),
        (
            {"queue_time_ms": 0.5, "server_time_ms": 9.0, "compute_output_time_ms": 4.7},
            "ComputeOutputDominated",
        ),
        # Triton's own handling: what the server time holds beyond the three compute parts.
        ({"queue_time_ms": 0.5, "server_time_ms": 12.0}, "ServerOverheadDominated"),
    ],
)
def test_each_part_of_the_server_time_can_be_the_one_named(figures: dict[str, float], reason: str):
    assert breakdown_condition(observed(**figures), previous_reason=None).reason == reason


def test_without_traffic_or_figures_the_breakdown_is_unknown_and_says_why():
    idle = breakdown_condition(observed(request_rate=0.0), previous_reason="QueueDominated")
    assert (idle.status, idle.reason) == ("Unknown", "NoTraffic")
    blind = breakdown_condition(observed(request_rate=None), previous_reason=None)
    assert (blind.status, blind.reason) == ("Unknown", "MetricsUnavailable")
    # A Triton whose compute counters could not be read: no part is named rather than a wrong one.
    partial = breakdown_condition(observed(compute_output_time_ms=None), previous_reason=None)
    assert (partial.status, partial.reason) == ("Unknown", "MetricsUnavailable")
    assert "nv_inference_compute_{input,infer,output}_duration_us" in partial.message


def test_the_tails_and_the_batch_are_left_out_of_the_message_when_not_measured():
    message = breakdown_condition(
        observed(queue_time_p99_ms=None, compute_time_p99_ms=None, mean_batch_size=None), previous_reason=None
    ).message
    assert "P99" not in message and "batch" not in message
    only_queue = breakdown_condition(observed(compute_time_p99_ms=None), previous_reason=None).message
    assert "; P99 queue 120.4 ms; mean batch" in only_queue


#: Queue 4.0 ms against compute infer 4.3 ms: compute is larger, by less than the margin.
CLOSE = observed(queue_time_ms=4.0, server_time_ms=4.8, compute_time_ms=4.3, compute_input_time_ms=0.1)


def test_the_part_named_stays_while_within_the_margin_so_a_close_call_does_not_flip_it():
    assert 4.0 < 4.3 < 4.0 * HOLD_MARGIN
    fresh = breakdown_condition(CLOSE, previous_reason=None)
    held = breakdown_condition(CLOSE, previous_reason="QueueDominated")
    assert (fresh.reason, held.reason) == ("ComputeDominated", "QueueDominated")
    assert held.message.startswith(
        "queue 4.0 ms of 8.8 ms per request (45%), named while within 1.1x of compute infer; "
        "compute input 0.10 ms, compute infer 4.3 ms"
    )
    # Beyond the margin the largest part is named whatever was before.
    beyond = CLOSE.model_copy(update={"compute_time_ms": 4.41, "server_time_ms": 4.91})
    assert breakdown_condition(beyond, previous_reason="QueueDominated").reason == "ComputeDominated"
    # A reason that names no part (an Unknown one) holds nothing.
    parts = parts_of(CLOSE)
    assert parts is not None and dominant(parts, previous_reason="NoTraffic").reason == "ComputeDominated"


def test_a_held_reason_writes_no_status_and_a_new_largest_part_does():
    def status_after(figures: ObservedStatus, *, previous_reason: str | None) -> InferenceServiceStatus:
        update = breakdown_condition(figures, previous_reason=previous_reason)
        conditions = merge_conditions([], [update], generation=1, now=datetime(2026, 12, 1, tzinfo=UTC))
        return InferenceServiceStatus(conditions=conditions, observed=figures)

    queued = status_after(QUEUED, previous_reason=None)
    # The same request rate and P99 next period: only the condition could call for a write.
    assert not significant_change(queued, status_after(CLOSE, previous_reason="QueueDominated"))
    assert significant_change(queued, status_after(CLOSE, previous_reason=None))


def test_the_clients_time_beyond_the_servers_p99_is_a_part_named_when_it_is_the_largest():
    # The clients see 190 ms at P99 where Triton's is 60 ms: 130 ms outside, above the 40.1 ms queue.
    outside = observed(p99_ms=60.0, client_p99_ms=190.0, outside_server_p99_ms=130.0)
    update = breakdown_condition(outside, previous_reason=None)
    assert (update.status, update.reason) == ("True", c.REASON_OUTSIDE_SERVER_DOMINATED)
    assert update.message == (
        "outside the server 130.0 ms at P99 (the clients' P99 190.0 ms less the server's 60.0 ms); "
        "in Triton 44.5 ms per request: queue 40.1 ms, compute input 0.06 ms, compute infer 3.9 ms, "
        "compute output 0.31 ms, other server time 0.13 ms; P99 queue 120.4 ms, compute infer 5.2 ms; "
        "mean batch 3.2"
    )
    # Smaller than the queue: the queue is named and the clients' figures are in the message.
    inside = breakdown_condition(
        observed(p99_ms=60.0, client_p99_ms=65.0, outside_server_p99_ms=5.0), previous_reason=None
    )
    assert inside.reason == c.REASON_QUEUE_DOMINATED
    assert inside.message.endswith(
        "; outside the server 5.0 ms at P99 (the clients' P99 65.0 ms less the server's 60.0 ms); "
        "mean batch 3.2"
    )
    # The hold margin applies to it as to any part: named before, kept while within 1.1x.
    close = observed(p99_ms=60.0, client_p99_ms=98.0, outside_server_p99_ms=38.0)
    assert breakdown_condition(close, previous_reason=c.REASON_OUTSIDE_SERVER_DOMINATED).reason == (
        c.REASON_OUTSIDE_SERVER_DOMINATED
    )
    assert breakdown_condition(close, previous_reason=None).reason == c.REASON_QUEUE_DOMINATED


def test_without_the_clients_figure_nothing_changes_and_a_failed_query_is_said_with_its_error():
    assert breakdown_condition(QUEUED, previous_reason=None) == breakdown_condition(
        QUEUED, previous_reason=None, client_error=None
    )
    error = "Prometheus refused the query (bad_data); its message is in the operator's log"
    failed = breakdown_condition(QUEUED, previous_reason=None, client_error=error)
    assert failed.reason == c.REASON_QUEUE_DOMINATED
    assert failed.message.endswith(f"; spec.monitoring.clientLatencyP99Query gave no figure: {error}")
    # Said in the Unknown cases too, and bounded.
    quiet = breakdown_condition(observed(request_rate=0.0), previous_reason=None, client_error="x" * 5000)
    assert quiet.reason == c.REASON_NO_TRAFFIC
    assert quiet.message.startswith("no requests over the window; spec.monitoring.clientLatencyP99Query")
    assert len(quiet.message) < 700


def test_the_clients_p99_appearing_or_going_is_a_status_write_its_value_moving_is_not():
    def status(client: float | None) -> InferenceServiceStatus:
        return InferenceServiceStatus(observed=observed(client_p99_ms=client))

    assert significant_change(status(None), status(80.0))
    assert significant_change(status(80.0), status(None))
    assert not significant_change(status(80.0), status(95.0))
