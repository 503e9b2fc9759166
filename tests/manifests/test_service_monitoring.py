from __future__ import annotations

import re

import pytest

from tailpilot.api import constants as c
from tailpilot.manifests.deployment import triton_deployment
from tailpilot.manifests.pdb import triton_pdb
from tailpilot.manifests.prometheus_rule import prometheus_rule
from tailpilot.manifests.service import rotation_selectable, triton_metrics_service, triton_service
from tailpilot.manifests.service_monitor import service_monitor
from tailpilot.manifests.settings import ManifestSettings

from .fixtures import SETTINGS, admin_key, make_isvc


def test_service_and_pdb_select_the_deployment_pods() -> None:
    isvc = make_isvc("a").obj()
    pod_labels = triton_deployment(
        isvc=isvc,
        engine_key="k",
        rollout_hash="h",
        replicas=1,
        settings=SETTINGS,
        admin_key=admin_key(isvc.name),
    )["spec"]["template"]["metadata"]["labels"]
    svc = triton_service(isvc=isvc)
    assert svc["spec"]["selector"].items() <= pod_labels.items()
    assert [p["port"] for p in svc["spec"]["ports"]] == [8000, 8001, 8002]
    pdb = triton_pdb(isvc=isvc)
    assert pdb["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    assert pdb["spec"]["maxUnavailable"] == 1
    for obj in (svc, pdb):
        assert obj["metadata"]["ownerReferences"][0]["controller"] is True


def test_service_monitor_selects_the_service_and_labels_series() -> None:
    isvc = make_isvc("a", "ns1").obj()
    settings = ManifestSettings(builder_image="b", monitoring_labels={"release": "prom"})
    sm = service_monitor(isvc=isvc, settings=settings)
    svc_labels = triton_service(isvc=isvc)["metadata"]["labels"]
    assert sm["spec"]["selector"]["matchLabels"].items() <= svc_labels.items()
    assert sm["spec"]["namespaceSelector"] == {"matchNames": ["ns1"]}
    (endpoint,) = sm["spec"]["endpoints"]
    assert endpoint["port"] == "metrics" and endpoint["interval"] == "15s"
    relabel = endpoint["relabelings"][0]
    assert relabel["sourceLabels"] == ["__meta_kubernetes_service_label_tailpilot_io_inferenceservice"]
    assert relabel["targetLabel"] == "inferenceservice"
    assert sm["metadata"]["labels"]["release"] == "prom"


def _rules(builder):  # type: ignore[no-untyped-def]
    return prometheus_rule(isvc=builder.obj(), settings=SETTINGS)["spec"]["groups"][0]["rules"]


def test_latency_burn_rate_alerts() -> None:
    rules = _rules(make_isvc("a", "ns1").slo(25))
    record = rules[0]
    assert record["record"] == "tailpilot:p99_above_slo:bool"
    assert 'quantile="0.99"' in record["expr"] and "> bool 25000" in record["expr"]
    assert 'namespace="ns1",inferenceservice="a"' in record["expr"]
    alerts = {r["alert"]: r for r in rules if "alert" in r}
    assert set(alerts) == {"TailPilotP99BurnFast", "TailPilotP99BurnSlow"}
    fast, slow = alerts["TailPilotP99BurnFast"], alerts["TailPilotP99BurnSlow"]
    assert "[5m]) > 0.144" in fast["expr"] and "[1h]) > 0.144" in fast["expr"]
    assert "[30m]) > 0.06" in slow["expr"] and "[6h]) > 0.06" in slow["expr"]
    for alert in alerts.values():
        assert alert["labels"][c.ALERT_ROUTE_LABEL] == c.ALERT_ROUTE_VALUE
        assert re.fullmatch(r"[a-zA-Z_][a-zA-Z0-9_]*", c.ALERT_ROUTE_LABEL)
        # The service's UID: the operator takes the alert for this object only.
        assert alert["labels"][c.ALERT_SERVICE_UID_LABEL] == "uid-a"
        assert re.fullmatch(r"[a-zA-Z_][a-zA-Z0-9_]*", c.ALERT_SERVICE_UID_LABEL)
        assert "ns1/a" in alert["annotations"]["summary"]


@pytest.mark.parametrize(
    ("objective", "fast", "slow"), [(99.9, "0.0144", "0.006"), (95.0, "0.72", "0.3"), (80.0, "0.99", "0.99")]
)
def test_the_burn_rate_thresholds_follow_the_attainment_objective(
    objective: float, fast: str, slow: str
) -> None:
    alerts = {
        r["alert"]: r for r in _rules(make_isvc("a", "ns1").slo(25).objective(objective)) if "alert" in r
    }
    assert f"[1h]) > {fast}" in alerts["TailPilotP99BurnFast"]["expr"]
    # Past the whole time a burn could never fire: held just under it.
    assert f"[6h]) > {slow}" in alerts["TailPilotP99BurnSlow"]["expr"]


def test_queue_alerts_only_with_a_queue_bound() -> None:
    assert not [r for r in _rules(make_isvc("a").slo(50)) if "Queue" in r.get("alert", "")]
    rules = _rules(make_isvc("a").slo(50, max_queue_depth=16))
    queue = [r for r in rules if r.get("record") == "tailpilot:queue_above_limit:bool"]
    assert "nv_inference_pending_request_count" in queue[0]["expr"] and "> bool 16" in queue[0]["expr"]
    assert {r["alert"] for r in rules if "Queue" in r.get("alert", "")} == {
        "TailPilotQueueBurnFast",
        "TailPilotQueueBurnSlow",
    }


def test_backlog_rotation_labels_pods_and_the_service_selects_it_only_when_told() -> None:
    isvc = make_isvc("a").autoscaling(backlogRotation=True).obj()
    pod_labels = triton_deployment(
        isvc=isvc,
        engine_key="k",
        rollout_hash="h",
        replicas=1,
        settings=SETTINGS,
        admin_key=admin_key(isvc.name),
    )["spec"]["template"]["metadata"]["labels"]
    assert pod_labels[c.LABEL_ROTATION] == c.ROTATION_IN
    # During the rollout that adds the label, the selector must still match the old pods.
    assert c.LABEL_ROTATION not in triton_service(isvc=isvc)["spec"]["selector"]
    selector = triton_service(isvc=isvc, select_rotation=True)["spec"]["selector"]
    assert selector[c.LABEL_ROTATION] == c.ROTATION_IN and selector.items() <= pod_labels.items()
    # Off (the default): no label, and the Deployment template is the one it always was.
    plain = make_isvc("a").obj()
    assert (
        c.LABEL_ROTATION
        not in triton_deployment(
            isvc=plain,
            engine_key="k",
            rollout_hash="h",
            replicas=1,
            settings=SETTINGS,
            admin_key=admin_key(plain.name),
        )["spec"]["template"]["metadata"]["labels"]
    )


def test_with_backlog_rotation_the_service_monitor_scrapes_the_headless_metrics_service() -> None:
    isvc = make_isvc("a", "ns1").autoscaling(backlogRotation=True).obj()
    metrics = triton_metrics_service(isvc=isvc)
    assert metrics["metadata"]["name"] == "a-metrics"
    assert metrics["spec"]["clusterIP"] == "None" and metrics["spec"]["publishNotReadyAddresses"] is True
    assert [p["name"] for p in metrics["spec"]["ports"]] == ["metrics"]
    # It selects every Triton pod, held or not.
    assert metrics["spec"]["selector"] == triton_service(isvc=isvc)["spec"]["selector"]
    assert c.LABEL_ROTATION not in metrics["spec"]["selector"]
    match = service_monitor(isvc=isvc, settings=SETTINGS)["spec"]["selector"]["matchLabels"]
    assert match.items() <= metrics["metadata"]["labels"].items()
    main_labels = triton_service(isvc=isvc, select_rotation=True)["metadata"]["labels"]
    assert not match.items() <= main_labels.items()  # not both: no series scraped twice


@pytest.mark.parametrize(
    ("pods", "selectable"),
    [
        ([], True),
        (
            [
                {"metadata": {"labels": {c.LABEL_ROTATION: "in"}}},
                {"metadata": {"labels": {c.LABEL_ROTATION: "held"}}},
            ],
            True,
        ),
        ([{"metadata": {"labels": {c.LABEL_ROTATION: "in"}}}, {"metadata": {"labels": {}}}], False),
        (
            [
                {"metadata": {"labels": {c.LABEL_ROTATION: "in"}}},
                {"metadata": {"labels": {}, "deletionTimestamp": "2026-11-30T12:00:00Z"}},
            ],
            True,
        ),
    ],
)
def test_the_service_selects_on_the_label_once_every_live_pod_has_it(pods, selectable) -> None:
    assert rotation_selectable(pods) is selectable
