"""A real prometheus-operator reads what the operator generates, and the SLO loop runs through it.

The stack is kube-prometheus-stack's (`tailpilot_e2e.prometheus_stack`): prometheus-operator's
Deployment renders the operator's ServiceMonitor into the scrape configuration and its
PrometheusRule into the rule files of the Prometheus it runs; both run as pods on local-0. Nothing
is configured by hand: the operator labels what it generates as the stack's Prometheus selects
(`--monitoring-label release=...`, the chart's `prometheus.monitoringLabels`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import numpy as np
import pytest
from kubernetes import client

from tailpilot.api import constants as c
from tailpilot.bench import traces
from tailpilot.manifests.prometheus_rule import FAST, rule_name
from tailpilot_e2e.calibration import example_load
from tailpilot_e2e.operator_harness import custom_object
from tailpilot_e2e.real_pods import (
    SINGLE_REQUESTS,
    MonitoredOperator,
    prepare_storage,
    ready_endpoints,
    serve_and_wait_ready,
    slo_loop_service,
)
from tailpilot_e2e.wait import eventually

pytestmark = [pytest.mark.cluster]
NAME = "mlp-cpu"
#: Light load for one replica: enough requests for Triton's P99 summary every scrape.
RATE_PER_S = 5.0
#: The fast burn alert waits `for` 2m after both its windows burn; its group is evaluated every 30 s,
#: and Alertmanager waits a few seconds before the first notification.
ALERT_WITHIN_S = 120 + 30 + 60


def alert_events(core: client.CoreV1Api, ns: str) -> list[Any]:
    events = core.list_namespaced_event(ns, field_selector=f"involvedObject.name={NAME}").items
    return [e for e in events if e.reason == c.EVENT_SLO_ALERT_FIRING]


def test_the_generated_servicemonitor_and_rule_feed_the_loop_and_the_burn_alert_reaches_it(
    real_api: client.ApiClient,
    real_namespace: str,
    monitored_operator: Callable[[float], MonitoredOperator],
    tmp_path: Path,
) -> None:
    core = client.CoreV1Api(real_api)
    ns = real_namespace
    monitored = monitored_operator(4)
    prometheus = monitored.prometheus
    prepare_storage(core, ns, tmp_path / "pvc")
    service = slo_loop_service(ns, name=NAME, max_replicas=1, stabilization_s=20, batching=SINGLE_REQUESTS)
    serve_and_wait_ready(real_api, service)

    # The ServiceMonitor became a scrape pool of its own, and its relabelling put the service's
    # name on the Triton pod's series.
    pool = f"serviceMonitor/{ns}/{NAME}/0"

    def scraped() -> list[dict[str, Any]]:
        return [t for t in prometheus.targets(job=pool) if t["health"] == "up"]

    targets = eventually(scraped, timeout=60, interval=1.0, description=f"{pool} scraped")
    assert [t["labels"][c.METRIC_LABEL_ISVC] for t in targets] == [NAME]
    assert {t["labels"]["namespace"] for t in targets} == {ns}
    # The PrometheusRule became rules Prometheus evaluates; alerts go to the Alertmanager.
    assert prometheus.load_cluster_rules(real_api, ns) == [rule_name(NAME)]
    assert [urlsplit(u).netloc for u in prometheus.alertmanagers()] == [
        urlsplit(monitored.alertmanager.url).netloc
    ]

    arrivals = traces.piecewise_poisson(
        steps=[(ALERT_WITHIN_S + 60, RATE_PER_S)], rng=np.random.default_rng(3)
    )
    load = example_load(
        tmp_path / "load", arrivals, duration_s=ALERT_WITHIN_S + 60, targets=ready_endpoints(core, ns, NAME)
    )
    with load:
        # The loop reads the P99 it decides on from this Prometheus.
        eventually(
            lambda: (custom_object(real_api, ns, NAME)["status"].get("observed") or {}).get("p99Ms"),
            timeout=60,
            interval=1.0,
            description="status.observed.p99Ms from Prometheus",
        )
        # An SLO no replica can hold: every evaluation is bad, the fast burn alert fires after its
        # `for`, Alertmanager posts it to the operator's webhook, and the operator says so.
        client.CustomObjectsApi(real_api).patch_namespaced_custom_object(
            "tailpilot.io",
            "v1alpha1",
            ns,
            "inferenceservices",
            NAME,
            {"spec": {"slo": {"p99LatencyMs": 0.5}}},
        )
        patched_at = time.monotonic()
        eventually(
            lambda: alert_events(core, ns),
            timeout=ALERT_WITHIN_S,
            interval=2.0,
            description=f"{c.EVENT_SLO_ALERT_FIRING} from TailPilotP99Burn{FAST.suffix}",
        )
        fired_after_s = time.monotonic() - patched_at
    alerts = [r for g in prometheus.rule_groups() for r in g["rules"] if r.get("type") == "alerting"]
    firing = {r["name"] for r in alerts if r["state"] == "firing"}
    assert f"TailPilotP99Burn{FAST.suffix}" in firing, (firing, fired_after_s)
    # Not before its `for` (2m): the rule as generated, not a shortcut.
    assert fired_after_s >= 120, fired_after_s
