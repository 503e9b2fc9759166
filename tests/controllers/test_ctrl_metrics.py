"""The operator's metrics: names, labels, isolation between registries."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from tailpilot.api.autoscaling import BatchingConfig, Decision, ScalingAction
from tailpilot.controllers.core.metrics import OperatorMetrics, WebhookResult


def samples(metrics: OperatorMetrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = metrics.render().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if not s.name.endswith("_created")
    }


def decision(action: ScalingAction, reason: str, predicted: float | None) -> Decision:
    return Decision(
        at_s=1.0,
        action=action,
        replicas=3,
        batching=BatchingConfig(max_batch_size=8),
        reason=reason,
        predicted_p99_ms=predicted,
    )


def test_decisions_and_gauges():
    m = OperatorMetrics()
    m.record_decision(
        namespace="shop",
        service="resnet",
        decision=decision(ScalingAction.SCALE_UP, "SLOAtRisk", 41.5),
        observed_p99_ms=63.0,
    )
    m.record_decision(
        namespace="shop",
        service="resnet",
        decision=decision(ScalingAction.HOLD, "MetricsStale", None),
        observed_p99_ms=None,
    )
    m.record_decision(
        namespace="shop",
        service="resnet",
        decision=decision(ScalingAction.SCALE_UP, "SLOAtRisk", 30.0),
        observed_p99_ms=45.0,
    )
    got = samples(m)
    svc = (("namespace", "shop"), ("service", "resnet"))
    assert (
        got[
            (
                "tailpilot_decisions_total",
                (
                    ("action", "ScaleUp"),
                    ("namespace", "shop"),
                    ("reason", "SLOAtRisk"),
                    ("service", "resnet"),
                ),
            )
        ]
        == 2
    )
    assert (
        got[
            (
                "tailpilot_decisions_total",
                (
                    ("action", "Hold"),
                    ("namespace", "shop"),
                    ("reason", "MetricsStale"),
                    ("service", "resnet"),
                ),
            )
        ]
        == 1
    )
    assert got[("tailpilot_predicted_p99_ms", svc)] == 30.0
    assert got[("tailpilot_observed_p99_ms", svc)] == 45.0
    assert got[("tailpilot_target_replicas", svc)] == 3
    m.forget_service(namespace="shop", service="resnet")
    m.forget_service(namespace="shop", service="never-seen")
    assert ("tailpilot_observed_p99_ms", svc) not in samples(m)


def test_webhook_and_batching_counters_and_isolated_registries():
    a, b = OperatorMetrics(), OperatorMetrics()
    a.record_webhook(WebhookResult.UNAUTHORIZED)
    a.record_webhook(WebhookResult.UNAUTHORIZED)
    a.record_batching_change("Applied")
    got = samples(a)
    assert got[("tailpilot_webhook_requests_total", (("result", "unauthorized"),))] == 2
    assert got[("tailpilot_batching_changes_total", (("result", "Applied"),))] == 1
    assert ("tailpilot_webhook_requests_total", (("result", "unauthorized"),)) not in samples(b)


def test_time_breakdown_service_time_and_gpu_costs_per_service_and_forgotten_with_it():
    from tailpilot.api.v1alpha1 import ObservedStatus

    m = OperatorMetrics()
    observed = ObservedStatus(
        queue_time_ms=12.5, server_time_ms=4.0, compute_time_ms=3.5, mean_batch_size=2.5
    )
    m.record_breakdown(namespace="shop", service="resnet", observed=observed, service_time=(1.2, 0.4))
    m.record_gpu_choice(
        namespace="shop",
        service="resnet",
        costs={"NVIDIA-L4": 1.6, "NVIDIA-H100-80GB-HBM3": None},
        serving="NVIDIA-L4",
        moved="MovedForCost",
    )
    got = samples(m)

    def key(name: str, **labels: str) -> tuple[str, tuple[tuple[str, str], ...]]:
        return name, tuple(sorted({"namespace": "shop", "service": "resnet", **labels}.items()))

    assert got[key("tailpilot_request_time_ms", part="queue")] == 12.5
    assert got[key("tailpilot_request_time_ms", part="compute")] == 3.5
    assert got[key("tailpilot_mean_batch_size")] == 2.5
    assert got[key("tailpilot_service_time_ms", term="per_item")] == 0.4
    assert got[key("tailpilot_gpu_cost_per_hour", product="NVIDIA-L4", serving="true")] == 1.6
    # A product that cannot hold the SLO has no cost at all (not zero).
    assert not any(
        k[0] == "tailpilot_gpu_cost_per_hour" and ("product", "NVIDIA-H100-80GB-HBM3") in k[1] for k in got
    )
    assert got[key("tailpilot_gpu_product_moves_total", reason="MovedForCost")] == 1
    m.forget_service(namespace="shop", service="resnet")
    left = samples(m)
    assert not any(
        k[0] in ("tailpilot_request_time_ms", "tailpilot_gpu_cost_per_hour", "tailpilot_mean_batch_size")
        for k in left
    )


def test_each_compute_part_and_the_tails_are_series_and_a_tail_without_requests_goes():
    from tailpilot.api.v1alpha1 import ObservedStatus

    m = OperatorMetrics()
    observed = ObservedStatus(
        queue_time_ms=40.1,
        server_time_ms=4.4,
        compute_time_ms=3.9,
        compute_input_time_ms=0.06,
        compute_output_time_ms=0.31,
        queue_time_p99_ms=120.4,
        compute_time_p99_ms=5.2,
    )
    m.record_breakdown(namespace="shop", service="resnet", observed=observed, service_time=None)
    got = samples(m)

    def key(name: str, part: str) -> tuple[str, tuple[tuple[str, str], ...]]:
        return name, (("namespace", "shop"), ("part", part), ("service", "resnet"))

    parts = {"queue": 40.1, "server": 4.4, "compute": 3.9, "compute_input": 0.06, "compute_infer": 3.9}
    for part, value in {**parts, "compute_output": 0.31}.items():
        assert got[key("tailpilot_request_time_ms", part)] == value, part
    assert got[key("tailpilot_request_time_p99_ms", "queue")] == 120.4
    assert got[key("tailpilot_request_time_p99_ms", "compute_infer")] == 5.2
    # A minute without requests: Triton's summaries have no P99 any more, and neither has the gauge.
    quiet = observed.model_copy(update={"queue_time_p99_ms": None, "compute_time_p99_ms": None})
    m.record_breakdown(namespace="shop", service="resnet", observed=quiet, service_time=None)
    assert not any(k[0] == "tailpilot_request_time_p99_ms" for k in samples(m))
    m.record_breakdown(namespace="shop", service="resnet", observed=observed, service_time=None)
    m.forget_service(namespace="shop", service="resnet")
    assert not any(k[0].startswith("tailpilot_request_time") for k in samples(m))


def test_executions_per_second_by_batch_size_bounded_replaced_each_period_and_forgotten():
    import pytest

    from tailpilot.api.autoscaling import ExecutedBatchSize

    def size(n: int, per_s: float) -> ExecutedBatchSize:
        return ExecutedBatchSize(
            size=n, executions=round(per_s * 30), executions_per_s=per_s, request_share=0.0
        )

    def series(m: OperatorMetrics) -> dict[str, float]:
        return {
            dict(labels)["size"]: value
            for (name, labels), value in samples(m).items()
            if name == "tailpilot_executed_batches" and dict(labels)["service"] == "resnet"
        }

    m = OperatorMetrics()
    m.record_batch_sizes(namespace="shop", service="resnet", sizes=(size(1, 0.5), size(4, 2.0)))
    m.record_batch_sizes(namespace="shop", service="other", sizes=(size(2, 1.0),))
    assert series(m) == {"1": 0.5, "4": 2.0}
    # A size no longer executed goes; beyond 32 sizes the largest share one series.
    m.record_batch_sizes(namespace="shop", service="resnet", sizes=tuple(size(n, 0.1) for n in range(1, 41)))
    got = series(m)
    assert len(got) == 32 and got["32-40"] == pytest.approx(0.9) and "33" not in got
    m.record_batch_sizes(namespace="shop", service="resnet", sizes=None)  # the Prometheus path
    assert series(m) == {}
    m.record_batch_sizes(namespace="shop", service="resnet", sizes=(size(1, 0.5),))
    m.forget_service(namespace="shop", service="resnet")
    assert series(m) == {}
    assert any(k[0] == "tailpilot_executed_batches" for k in samples(m))  # the other service's stays


def test_the_clients_p99_and_the_part_outside_the_server_are_tails_removed_without_the_query():
    from tailpilot.api.v1alpha1 import ObservedStatus

    m = OperatorMetrics()
    seen = ObservedStatus(p99_ms=60.0, client_p99_ms=190.0, outside_server_p99_ms=130.0)
    m.record_breakdown(namespace="shop", service="resnet", observed=seen, service_time=None)

    def tails() -> dict[str, float]:
        return {
            dict(labels)["part"]: value
            for (name, labels), value in samples(m).items()
            if name == "tailpilot_request_time_p99_ms"
        }

    assert tails() == {"client": 190.0, "outside_server": 130.0}
    m.record_breakdown(namespace="shop", service="resnet", observed=ObservedStatus(), service_time=None)
    assert tails() == {}


def test_the_headroom_and_the_budget_left_are_gauges_forgotten_with_the_service():
    metrics = OperatorMetrics()
    metrics.record_budget(namespace="ns", service="a", headroom=1.8, budget_remaining=0.42)
    got = samples(metrics)
    labels = (("namespace", "ns"), ("service", "a"))
    assert got[("tailpilot_headroom_factor", labels)] == 1.8
    assert got[("tailpilot_error_budget_remaining_ratio", labels)] == 0.42
    metrics.forget_service(namespace="ns", service="a")
    assert not [k for k in samples(metrics) if k[0].startswith(("tailpilot_headroom", "tailpilot_error"))]
