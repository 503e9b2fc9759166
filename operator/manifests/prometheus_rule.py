"""The PrometheusRule with SLO burn-rate alerts of one InferenceService.

Triton exposes P99 only as per-pod summary quantiles
(`nv_inference_request_summary_us{quantile="0.99"}`), not as a count of slow
requests, so the SLI is time-based: a recording rule says, per evaluation,
whether the worst pod's P99 exceeds `slo.p99LatencyMs` (1) or not (0); its
average over a window is the fraction of bad time. With the error budget B of
the service's attainment objective (`slo.objectivePercent`: B = 1 - objective,
1% at the default 99%), the alerts follow the multi-window, multi-burn-rate
pattern of the Google SRE workbook:

- fast burn: bad fraction > 14.4 B over both 5m and 1h (severity critical);
- slow burn: bad fraction > 6 B over both 30m and 6h (severity warning).

A burn faster than the whole time (a threshold of 1 or more, for budgets above
about 7%) could never fire: the threshold is held just under it, so an
objective that loose pages when nearly every evaluation misses.

The same pair watches the queue (`nv_inference_pending_request_count`
averaged per pod vs `slo.maxQueueDepth`) when a queue bound is set.

Every alert carries `tailpilot="operator"` (Alertmanager routes these to the
operator's webhook) and keeps `namespace` and `inferenceservice`, so the
operator knows which object to look at.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tailpilot.api import constants as c
from tailpilot.api.v1alpha1 import InferenceService
from tailpilot.manifests.meta import object_meta
from tailpilot.manifests.service_monitor import MONITORING_API_VERSION
from tailpilot.manifests.settings import ManifestSettings

RECORD_P99_ABOVE_SLO = "tailpilot:p99_above_slo:bool"
RECORD_QUEUE_ABOVE_LIMIT = "tailpilot:queue_above_limit:bool"


@dataclass(frozen=True)
class BurnWindow:
    """One multi-window burn-rate alert: both windows must burn faster than `factor` x budget."""

    suffix: str
    short: str
    long: str
    factor: float
    severity: str
    for_: str


FAST = BurnWindow("Fast", "5m", "1h", 14.4, "critical", "2m")
SLOW = BurnWindow("Slow", "30m", "6h", 6.0, "warning", "15m")


def rule_name(isvc_name: str) -> str:
    """Name of the PrometheusRule."""
    return f"{isvc_name}-slo"


def _selector(isvc: InferenceService) -> str:
    return f'{c.METRIC_LABEL_NAMESPACE}="{isvc.namespace}",{c.METRIC_LABEL_ISVC}="{isvc.name}"'


def _number(value: float) -> str:
    return f"{value:.6g}"


#: The highest bad fraction a burn alert asks for (a threshold of 1 could never be exceeded).
MAX_THRESHOLD = 0.99


def error_budget(isvc: InferenceService) -> float:
    """The share of time the service's P99 may miss its target: 1 - its attainment objective."""
    return 1.0 - isvc.spec.slo.objective_percent / 100.0


def _burn_alerts(
    *, isvc: InferenceService, record: str, signal: str, what: str, budget: float
) -> list[dict[str, Any]]:
    alerts = []
    for window in (FAST, SLOW):
        threshold = _number(min(MAX_THRESHOLD, window.factor * budget))
        expr = (
            f"avg_over_time({record}{{{_selector(isvc)}}}[{window.short}]) > {threshold}\n"
            f"and\n"
            f"avg_over_time({record}{{{_selector(isvc)}}}[{window.long}]) > {threshold}"
        )
        alerts.append(
            {
                "alert": f"TailPilot{signal}Burn{window.suffix}",
                "expr": expr,
                "for": window.for_,
                "labels": {
                    c.ALERT_ROUTE_LABEL: c.ALERT_ROUTE_VALUE,
                    c.ALERT_SERVICE_UID_LABEL: str(isvc.metadata.get("uid") or ""),
                    "severity": window.severity,
                    "signal": signal.lower(),
                },
                "annotations": {
                    "summary": f"{isvc.namespace}/{isvc.name}: {what} ({window.suffix.lower()} burn)",
                    "description": (
                        f"{what} for more than {_number(100 * min(MAX_THRESHOLD, window.factor * budget))}% "
                        f"of the last "
                        f"{window.short} and {window.long} (budget {_number(100 * budget)}% of the time, "
                        f"burning {_number(window.factor)}x)."
                    ),
                },
            }
        )
    return alerts


def prometheus_rule(*, isvc: InferenceService, settings: ManifestSettings) -> dict[str, Any]:
    """Build the monitoring.coreos.com/v1 PrometheusRule with recording rules and burn-rate alerts."""
    slo = isvc.spec.slo
    sel = _selector(isvc)
    slo_us = _number(slo.p99_latency_ms * 1000)
    rules: list[dict[str, Any]] = [
        {
            "record": RECORD_P99_ABOVE_SLO,
            "expr": (
                f"max by ({c.METRIC_LABEL_NAMESPACE}, {c.METRIC_LABEL_ISVC}) "
                f'(nv_inference_request_summary_us{{{sel},quantile="0.99"}}) > bool {slo_us}'
            ),
        }
    ]
    rules += _burn_alerts(
        isvc=isvc,
        record=RECORD_P99_ABOVE_SLO,
        signal="P99",
        what=f"P99 latency above the {_number(slo.p99_latency_ms)} ms SLO",
        budget=error_budget(isvc),
    )
    if slo.max_queue_depth is not None:
        rules.append(
            {
                "record": RECORD_QUEUE_ABOVE_LIMIT,
                "expr": (
                    f"avg by ({c.METRIC_LABEL_NAMESPACE}, {c.METRIC_LABEL_ISVC}) "
                    f"(nv_inference_pending_request_count{{{sel}}}) > bool {slo.max_queue_depth}"
                ),
            }
        )
        rules += _burn_alerts(
            isvc=isvc,
            record=RECORD_QUEUE_ABOVE_LIMIT,
            signal="Queue",
            what=f"queue depth above {slo.max_queue_depth} pending requests per replica",
            budget=error_budget(isvc),
        )
    return {
        "apiVersion": MONITORING_API_VERSION,
        "kind": "PrometheusRule",
        "metadata": object_meta(
            isvc=isvc,
            name=rule_name(isvc.name),
            component=c.COMPONENT_MONITORING,
            extra_labels=dict(settings.monitoring_labels),
        ),
        "spec": {
            "groups": [{"name": f"tailpilot.{isvc.namespace}.{isvc.name}", "interval": "30s", "rules": rules}]
        },
    }
