"""The activator's own Prometheus metrics, on a registry of their own.

One `CollectorRegistry` per `ActivatorMetrics` (never prometheus_client's global one), so tests
and benchmarks running several activators in one process never share counters. Served as text
on the admin port's `/metrics` (`admin_http`).
"""

from __future__ import annotations

import enum

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from tailpilot.activator.routing import ServiceKey

#: Content type of `render()`'s body.
CONTENT_TYPE = CONTENT_TYPE_LATEST

#: Hold durations: from a replica already starting (sub-second) to a GPU cold start of minutes, up to
#: the default 300 s hold timeout and past it (a request timed out is held a little over the timeout;
#: a longer configured timeout).
HOLD_SECONDS_BUCKETS = (
    *(0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 45.0),  # a replica already starting, or warm
    *(60.0, 90.0, 120.0, 180.0, 240.0, 300.0, 600.0),  # a GPU cold start, the hold timeout, past it
)


class Outcome(enum.StrEnum):
    """Values of the `outcome` label of `tailpilot_activator_requests_total`."""

    #: A replica was ready: forwarded at once, never held.
    FORWARDED_DIRECT = "forwarded_direct"
    #: Held until a replica was ready, then forwarded.
    FORWARDED_AFTER_HOLD = "forwarded_after_hold"
    #: Refused at once: a hold bound was reached (HTTP 503, gRPC RESOURCE_EXHAUSTED).
    REFUSED_BOUND = "refused_bound"
    #: Held for the whole hold timeout without a ready replica (HTTP 504, gRPC UNAVAILABLE).
    TIMED_OUT = "timed_out"
    #: Every replica tried failed, or one did not answer in the forward timeout (HTTP 502/504).
    FAILED = "failed"
    #: The host named no TailPilot service (HTTP 404, gRPC NOT_FOUND).
    UNKNOWN_SERVICE = "unknown_service"
    #: The body was over the maximum size (HTTP 413, gRPC RESOURCE_EXHAUSTED).
    TOO_LARGE = "too_large"


class WakeResult(enum.StrEnum):
    """Values of the `result` label of `tailpilot_activator_wakes_total`."""

    OK = "ok"
    FAILED = "failed"


class RecordResult(enum.StrEnum):
    """Values of the `result` label of `tailpilot_activator_cold_start_records_total`."""

    OK = "ok"
    FAILED = "failed"


class ActivatorMetrics:
    """Held requests, requests by outcome, hold durations, wakes and cold-start records."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        """Create the metrics on `registry` (a fresh one when None)."""
        self.registry = registry if registry is not None else CollectorRegistry(auto_describe=True)
        self.held = Gauge(
            "tailpilot_activator_held_requests",
            "Requests held now for a service with no ready replica.",
            ["namespace", "service"],
            registry=self.registry,
        )
        self.held_bytes = Gauge(
            "tailpilot_activator_held_bytes",
            "Body bytes of the requests held now, all services together.",
            registry=self.registry,
        )
        self.requests = Counter(
            "tailpilot_activator_requests",
            "Requests the activator answered, by protocol and outcome.",
            ["protocol", "outcome"],
            registry=self.registry,
        )
        self.hold_seconds = Histogram(
            "tailpilot_activator_hold_seconds",
            "How long requests were held before a replica was ready (or the hold timed out).",
            ["protocol"],
            buckets=HOLD_SECONDS_BUCKETS,
            registry=self.registry,
        )
        self.wakes = Counter(
            "tailpilot_activator_wakes",
            "Wake requests sent to the operator (one per cold episode, and its retries), by result.",
            ["result"],
            registry=self.registry,
        )
        self.cold_start_records = Counter(
            "tailpilot_activator_cold_start_records",
            "Cold starts written onto their InferenceService (tailpilot.io/cold-start), by result.",
            ["result"],
            registry=self.registry,
        )

    def set_held(self, key: ServiceKey, held: int, held_bytes: int) -> None:
        """Record that `held` requests are held for `key`, and `held_bytes` in all."""
        self.held.labels(namespace=key.namespace, service=key.name).set(held)
        self.held_bytes.set(held_bytes)

    def render(self) -> bytes:
        """The registry in Prometheus' text format."""
        return generate_latest(self.registry)
