"""The operator's metrics: names, labels, isolation between registries."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from tailpilot.api.autoscaling import BatchingConfig, Decision, ScalingAction
from tailpilot.controllers.metrics import OperatorMetrics, WebhookResult


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
