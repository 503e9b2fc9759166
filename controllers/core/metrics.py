"""The operator's own Prometheus metrics, on a registry the caller owns.

Everything lives on one `CollectorRegistry` created per `OperatorMetrics`
instance (never prometheus_client's global default registry), so tests and
several operator instances in one process never share counters. Serve it with
`prometheus_client.make_asgi_app(registry=...)`, `start_http_server(port,
registry=...)` or `render()` from any HTTP handler.
"""

from __future__ import annotations

from collections.abc import Sequence

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from tailpilot.api.autoscaling import Decision, ExecutedBatchSize
from tailpilot.api.v1alpha1 import ObservedStatus
from tailpilot.policy.batch_sizes import bounded

#: Content type of `render()`'s body.
CONTENT_TYPE = CONTENT_TYPE_LATEST


class WebhookResult:
    """Values of the `result` label of `tailpilot_webhook_requests_total`."""

    ACCEPTED = "accepted"
    UNAUTHORIZED = "unauthorized"
    MALFORMED = "malformed"
    ERROR = "error"
    RATE_LIMITED = "rate_limited"


class OperatorMetrics:
    """Counters and gauges of the autoscaler, the webhook and batching actuation."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        """Create the metrics on `registry` (a fresh one when None)."""
        self.registry = registry if registry is not None else CollectorRegistry(auto_describe=True)
        # By concern; registered in this order, the order `render()` writes the families in.
        self._add_decision_metrics()
        self._add_actuation_metrics()
        self._add_request_time_metrics()
        self._add_placement_metrics()
        self._add_loop_metrics()

    def _add_decision_metrics(self) -> None:
        """The autoscaler's decisions: counted by action and reason, and the gauges they set."""
        self.decisions = Counter(
            "tailpilot_decisions",
            "Autoscaling decisions by service, action and reason.",
            ["namespace", "service", "action", "reason"],
            registry=self.registry,
        )
        self.predicted_p99 = Gauge(
            "tailpilot_predicted_p99_ms",
            "P99 latency (ms) the policy predicts for its decision.",
            ["namespace", "service"],
            registry=self.registry,
        )
        self.observed_p99 = Gauge(
            "tailpilot_observed_p99_ms",
            "Service-level P99 latency (ms) estimated from Triton's per-pod summaries.",
            ["namespace", "service"],
            registry=self.registry,
        )
        self.replicas = Gauge(
            "tailpilot_target_replicas",
            "Replicas the policy decided on.",
            ["namespace", "service"],
            registry=self.registry,
        )
        self.headroom = Gauge(
            "tailpilot_headroom_factor",
            "Factor over the observed arrivals the last decision sized the fleet for (learned rises).",
            ["namespace", "service"],
            registry=self.registry,
        )
        self.budget_left = Gauge(
            "tailpilot_error_budget_remaining_ratio",
            "Share of the attainment objective's error budget left (1: untouched, 0: spent).",
            ["namespace", "service"],
            registry=self.registry,
        )

    def _add_actuation_metrics(self) -> None:
        """What the operator is told and does: webhook requests, replicas held out, batching changes."""
        self.webhook_requests = Counter(
            "tailpilot_webhook_requests",
            "Alertmanager webhook requests by result (accepted, unauthorized, malformed, error).",
            ["result"],
            registry=self.registry,
        )
        self.held_out = Gauge(
            "tailpilot_replicas_held_out",
            "Ready replicas held out of the Service's endpoints while their backlog drains.",
            ["namespace", "service"],
            registry=self.registry,
        )
        self.batching_changes = Counter(
            "tailpilot_batching_changes",
            "Live batching changes by result (applied, refused, rolled_back, ...).",
            ["result"],
            registry=self.registry,
        )

    def _add_request_time_metrics(self) -> None:
        """Where requests' time goes: its parts and their P99s, the batches executed, the service time."""
        self.time_ms = Gauge(
            "tailpilot_request_time_ms",
            "Where a request's time in Triton went over the evaluation window, per request, ms: part "
            "queue (waiting for an instance), server (in Triton outside its queue) and, of server, "
            "compute_input (moving the inputs to the model), compute_infer (the model's execution), "
            "compute_output (taking the outputs); compute is compute_infer under its first name.",
            ["namespace", "service", "part"],
            registry=self.registry,
        )
        self.time_p99_ms = Gauge(
            "tailpilot_request_time_p99_ms",
            "P99 of a part of a request's time in Triton, ms, merged across pods from Triton's "
            "per-pod summaries (about the last minute): part queue and compute_infer. Absent while "
            "the summaries hold no request. Where the spec names the clients' P99 query: part client "
            "(its answer) and outside_server (client less the server's P99, at least 0); absent while "
            "the query gives no figure.",
            ["namespace", "service", "part"],
            registry=self.registry,
        )
        self.mean_batch = Gauge(
            "tailpilot_mean_batch_size",
            "Mean executed batch size over the evaluation window.",
            ["namespace", "service"],
            registry=self.registry,
        )
        self.executed_batches = Gauge(
            "tailpilot_executed_batches",
            "Executions of the model per second over the evaluation window, by executed batch size "
            "(Triton's statistics extension, summed across pods; status.observed.batchSizes). At most "
            '32 sizes: the largest beyond share one series, size "FIRST-LAST". Absent when not read.',
            ["namespace", "service", "size"],
            registry=self.registry,
        )
        self.service_time = Gauge(
            "tailpilot_service_time_ms",
            "The service time per batch the autoscaler sizes with (the profile's, times the learned "
            "hardware speed): term intercept (per batch) and per_item, ms.",
            ["namespace", "service", "term"],
            registry=self.registry,
        )

    def _add_placement_metrics(self) -> None:
        """Where a service serves: each GPU product's cost, the moves between products, canary verdicts."""
        self.gpu_cost = Gauge(
            "tailpilot_gpu_cost_per_hour",
            "For a service listing several GPU products: what its fleet would cost per hour on each "
            "product at the observed load (replicas needed x GPUs x price); absent where it cannot hold "
            'the SLO. The product serving has serving="true".',
            ["namespace", "service", "product", "serving"],
            registry=self.registry,
        )
        self.gpu_moves = Counter(
            "tailpilot_gpu_product_moves",
            "Moves of a service from one GPU product to another, by reason (MovedForCost, MovedForCapacity).",
            ["namespace", "service", "reason"],
            registry=self.registry,
        )
        self.canary_verdicts = Counter(
            "tailpilot_canary_verdicts",
            "Canary analyses that ended, by verdict (Promote, RollBack) and reason (CanaryHeldUp, "
            "CanaryLatencyRegression, CanaryErrors, CanaryOverSLO).",
            ["namespace", "service", "verdict", "reason"],
            registry=self.registry,
        )

    def _add_loop_metrics(self) -> None:
        """The fast loop's pod reads and the time to build one decision's Observation."""
        self.pod_read_period = Gauge(
            "tailpilot_pod_read_period_seconds",
            "Seconds between two reads of a service's pods: 2, longer when the pod read budget "
            "(--pod-reads-per-second) would be exceeded.",
            registry=self.registry,
        )
        self.pods_read = Counter(
            "tailpilot_pod_reads",
            "Reads of Triton pods' metrics pages by the fast loop, by result (ok, failed).",
            ["result"],
            registry=self.registry,
        )
        self.observation_seconds = Histogram(
            "tailpilot_observation_seconds",
            "Time to build one decision's Observation (the Prometheus queries included), by where "
            "its rates came from (Pods, Prometheus).",
            ["rates_from"],
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0),
            registry=self.registry,
        )

    def record_decision(
        self, *, namespace: str, service: str, decision: Decision, observed_p99_ms: float | None
    ) -> None:
        """Count a decision and update the service's gauges."""
        self.decisions.labels(namespace, service, decision.action.value, decision.reason).inc()
        self.replicas.labels(namespace, service).set(decision.replicas)
        if decision.predicted_p99_ms is not None:
            self.predicted_p99.labels(namespace, service).set(decision.predicted_p99_ms)
        if observed_p99_ms is not None:
            self.observed_p99.labels(namespace, service).set(observed_p99_ms)

    def record_budget(
        self, *, namespace: str, service: str, headroom: float, budget_remaining: float
    ) -> None:
        """Set the headroom the decision held and what is left of the error budget."""
        self.headroom.labels(namespace, service).set(headroom)
        self.budget_left.labels(namespace, service).set(budget_remaining)

    def record_breakdown(
        self,
        *,
        namespace: str,
        service: str,
        observed: ObservedStatus,
        service_time: tuple[float, float] | None,
    ) -> None:
        """Set where requests' time went, the mean batch, and the service time the policy sizes with."""
        parts = {
            "queue": observed.queue_time_ms,
            "server": observed.server_time_ms,
            "compute": observed.compute_time_ms,
            "compute_input": observed.compute_input_time_ms,
            "compute_infer": observed.compute_time_ms,
            "compute_output": observed.compute_output_time_ms,
        }
        for part, value in parts.items():
            if value is not None:
                self.time_ms.labels(namespace, service, part).set(value)
        tails = {
            "queue": observed.queue_time_p99_ms,
            "compute_infer": observed.compute_time_p99_ms,
            "client": observed.client_p99_ms,
            "outside_server": observed.outside_server_p99_ms,
        }
        for part, value in tails.items():
            if value is not None:
                self.time_p99_ms.labels(namespace, service, part).set(value)
            else:
                # A summary without requests has no P99 (Triton's goes NaN a minute after the last
                # request): the series goes rather than show the last busy minute's tail as now's.
                # So does the clients' P99 of a query that stopped answering.
                try:
                    self.time_p99_ms.remove(namespace, service, part)
                except KeyError:
                    pass
        if observed.mean_batch_size is not None:
            self.mean_batch.labels(namespace, service).set(observed.mean_batch_size)
        if service_time is not None:
            self.service_time.labels(namespace, service, "intercept").set(service_time[0])
            self.service_time.labels(namespace, service, "per_item").set(service_time[1])

    def record_batch_sizes(
        self, *, namespace: str, service: str, sizes: Sequence[ExecutedBatchSize] | None
    ) -> None:
        """Set the executions per second by batch size (bounded as on the status); none: removed."""
        self._remove_service(self.executed_batches, namespace, service)
        for size in bounded(sizes or ()):
            label = str(size.size) if size.max_size is None else f"{size.size}-{size.max_size}"
            self.executed_batches.labels(namespace, service, label).set(size.executions_per_s)

    @staticmethod
    def _remove_service(gauge: Gauge, namespace: str, service: str) -> None:
        """Drop every series of one service from a gauge with more labels than its two."""
        for labels in list(gauge._metrics):  # noqa: SLF001 - prometheus_client has no label listing
            if labels[:2] == (namespace, service):
                gauge.remove(*labels)

    def record_gpu_choice(
        self,
        *,
        namespace: str,
        service: str,
        costs: dict[str, float | None],
        serving: str | None,
        moved: str | None,
    ) -> None:
        """Set each product's cost per hour at the observed load; count a move by its reason."""
        for product, cost in costs.items():
            for flag in ("true", "false"):
                try:
                    self.gpu_cost.remove(namespace, service, product, flag)
                except KeyError:
                    pass
            if cost is not None:
                flag = "true" if product == serving else "false"
                self.gpu_cost.labels(namespace, service, product, flag).set(cost)
        if moved:
            self.gpu_moves.labels(namespace, service, moved).inc()

    def record_pod_read(self, *, read: int, failed: int, period_s: float) -> None:
        """Count one fast-loop read of a service's pods and set the read period in force."""
        self.pods_read.labels("ok").inc(read)
        self.pods_read.labels("failed").inc(failed)
        self.pod_read_period.set(period_s)

    def record_observation(self, *, rates_from: str, seconds: float) -> None:
        """Time one decision's Observation."""
        self.observation_seconds.labels(rates_from).observe(seconds)

    def record_canary_verdict(self, *, namespace: str, service: str, verdict: str, reason: str) -> None:
        """Count one canary analysis that ended."""
        self.canary_verdicts.labels(namespace, service, verdict, reason).inc()

    def record_held_out(self, *, namespace: str, service: str, replicas: int) -> None:
        """Set how many replicas the rotation check holds out of the Service."""
        self.held_out.labels(namespace, service).set(replicas)

    def record_webhook(self, result: str) -> None:
        """Count one webhook request by its result (a `WebhookResult` value)."""
        self.webhook_requests.labels(result).inc()

    def record_batching_change(self, result: str) -> None:
        """Count one batching actuation by its result (e.g. `BatchingApplyResult.reason`)."""
        self.batching_changes.labels(result).inc()

    def forget_service(self, *, namespace: str, service: str) -> None:
        """Drop a deleted service's gauges (counters keep their history until restart)."""
        for gauge in (
            self.predicted_p99,
            self.observed_p99,
            self.replicas,
            self.held_out,
            self.headroom,
            self.budget_left,
        ):
            try:
                gauge.remove(namespace, service)
            except KeyError:
                pass  # never set for this service
        for gauge in (
            self.gpu_cost,
            self.time_ms,
            self.time_p99_ms,
            self.service_time,
            self.mean_batch,
            self.executed_batches,
        ):
            self._remove_service(gauge, namespace, service)

    def render(self) -> bytes:
        """Render the registry in Prometheus' text exposition format (`CONTENT_TYPE`)."""
        return generate_latest(self.registry)
