"""A real Prometheus discovers Triton pods through the local API server and loads the operator's rules.

The pods run on KWOK nodes: they get pod IPs of an unrouted range (10.64.x.y) and serve
nothing, so their scrapes fail; what is checked is discovery itself, i.e. which
pods become targets, with which labels and address, as Prometheus' own
/api/v1/targets reports it. Rules are the operator's generated PrometheusRule,
read back from the cluster as prometheus-operator would, and served by
/api/v1/rules; an always-firing rule reaches the configured Alertmanager.
"""

from __future__ import annotations

import copy
from typing import Any

import httpx
import pytest
from kubernetes import client

from tailpilot.api import constants as c
from tailpilot.api.v1alpha1 import InferenceService
from tailpilot.manifests.prometheus_rule import prometheus_rule
from tailpilot.manifests.settings import ManifestSettings
from tailpilot_e2e.monitoring import KubernetesDiscovery, LocalAlertmanager, LocalPrometheus
from tailpilot_e2e.monitoring_crds import crd_files
from tailpilot_e2e.operator_harness import install_crds
from tailpilot_e2e.wait import eventually

pytestmark = pytest.mark.prometheus

JOB = "kubernetes-pods"
TRITON_PORTS = (("http", 8000), ("grpc", 8001), ("metrics", 8002))


def triton_labels(isvc: str, component: str = c.COMPONENT_SERVER) -> dict[str, str]:
    return {c.LABEL_NAME: c.APP_NAME_TRITON, c.LABEL_COMPONENT: component, c.LABEL_ISVC: isvc}


def pod_spec(ports: tuple[tuple[str, int], ...] = TRITON_PORTS, **extra: Any) -> client.V1PodSpec:
    container = client.V1Container(
        name="triton",
        image="registry.example/triton:test",
        ports=[client.V1ContainerPort(name=name, container_port=port) for name, port in ports],
    )
    return client.V1PodSpec(node_selector={"tailpilot.io/node-pool": "cpu"}, containers=[container], **extra)


def make_pod(
    core: client.CoreV1Api, namespace: str, name: str, labels: dict[str, str], spec: client.V1PodSpec
) -> None:
    core.create_namespaced_pod(
        namespace, client.V1Pod(metadata=client.V1ObjectMeta(name=name, labels=labels), spec=spec)
    )


def finished_triton_job(batch: client.BatchV1Api, namespace: str, name: str, isvc: str) -> None:
    """A Job whose pod looks like a Triton pod and ends Succeeded (KWOK plays exit code 0)."""
    template = client.V1PodTemplateSpec(
        metadata=client.V1ObjectMeta(
            labels=triton_labels(isvc), annotations={"kwok.tailpilot.io/exit-code": "0"}
        ),
        spec=pod_spec(restart_policy="Never"),
    )
    batch.create_namespaced_job(
        namespace,
        client.V1Job(
            metadata=client.V1ObjectMeta(name=name),
            spec=client.V1JobSpec(backoff_limit=0, template=template),
        ),
    )


def pod_ips(core: client.CoreV1Api, namespace: str) -> dict[str, tuple[str, str]]:
    """Pod name -> (phase, pod IP) for pods that have an IP."""
    return {
        p.metadata.name: (p.status.phase, p.status.pod_ip)
        for p in core.list_namespaced_pod(namespace).items
        if p.status.pod_ip
    }


def discovered(prometheus: LocalPrometheus) -> set[tuple[str, str, str, str, str]]:
    return {
        (
            t["labels"]["namespace"],
            t["labels"]["pod"],
            t["labels"].get("inferenceservice", ""),
            t["labels"]["container"],
            t["labels"]["instance"],
        )
        for t in prometheus.targets(job=JOB)
    }


def dropped_pods(prometheus: LocalPrometheus) -> set[str]:
    response = httpx.get(f"{prometheus.url}/api/v1/targets", params={"state": "dropped"}, timeout=5)
    return {
        t["discoveredLabels"].get("__meta_kubernetes_pod_name", "")
        for t in response.json()["data"]["droppedTargets"]
    }


@pytest.mark.cluster
def test_pod_discovery_finds_exactly_the_triton_metrics_ports(local_cluster, k8s, namespace, tmp_path):
    core, batch = client.CoreV1Api(k8s), client.BatchV1Api(k8s)
    prometheus = LocalPrometheus(
        tmp_path / "prometheus",
        kubernetes=KubernetesDiscovery(local_cluster.paths.kubeconfig, namespaces=(namespace,)),
    ).start()
    try:
        for name in ("resnet-0", "resnet-1"):
            make_pod(core, namespace, name, triton_labels("resnet"), pod_spec())
        make_pod(core, namespace, "bert-0", triton_labels("bert"), pod_spec())
        # Not Triton pods of a service: another component, no metrics port, no service label.
        make_pod(core, namespace, "builder", triton_labels("resnet", c.COMPONENT_BUILD), pod_spec())
        make_pod(core, namespace, "no-metrics", triton_labels("resnet"), pod_spec(TRITON_PORTS[:2]))
        unowned = {k: v for k, v in triton_labels("x").items() if k != c.LABEL_ISVC}
        make_pod(core, namespace, "unowned", unowned, pod_spec())
        finished_triton_job(batch, namespace, "finished", "resnet")
        servers = {"resnet-0": "resnet", "resnet-1": "resnet", "bert-0": "bert"}
        others = {"builder", "no-metrics", "unowned"}

        def pods_placed() -> dict[str, tuple[str, str]] | None:
            ips = pod_ips(core, namespace)
            finished = [phase for name, (phase, _) in ips.items() if name.startswith("finished-")]
            placed = set(servers) | others <= set(ips) and finished == ["Succeeded"]
            return ips if placed else None

        ips = eventually(pods_placed, timeout=60, description="pods Running with IPs, the Job pod Succeeded")
        assert all(ip.startswith("10.64.") for _, ip in ips.values()), ips
        expected = {(namespace, pod, isvc, "triton", f"{ips[pod][1]}:8002") for pod, isvc in servers.items()}
        eventually(
            lambda: discovered(prometheus) == expected,
            timeout=30,
            description=f"Prometheus targets == {sorted(expected)}",
        )
        # The others were discovered and dropped by the relabelling, not missed by discovery.
        finished_pod = next(name for name in ips if name.startswith("finished-"))
        eventually(
            lambda: dropped_pods(prometheus) >= others | {finished_pod},
            timeout=30,
            description="non-Triton, port-less and finished pods among the dropped targets",
        )

        core.delete_namespaced_pod("resnet-1", namespace, grace_period_seconds=0)
        remaining = {t for t in expected if t[1] != "resnet-1"}
        eventually(
            lambda: discovered(prometheus) == remaining,
            timeout=30,
            description="the deleted pod's target removed",
        )
    finally:
        prometheus.stop()


def generated_rule(namespace: str) -> dict[str, Any]:
    isvc = InferenceService.model_validate(
        {
            "apiVersion": c.API_VERSION,
            "kind": c.KIND,
            "metadata": {"name": "resnet", "namespace": namespace, "uid": "uid-resnet", "generation": 1},
            "spec": {
                "model": {"uri": "pvc://models/resnet50.onnx"},
                "slo": {"p99LatencyMs": 50, "maxQueueDepth": 8},
            },
        }
    )
    rule = prometheus_rule(
        isvc=isvc, settings=ManifestSettings(builder_image="registry.example/builder:test")
    )
    # No InferenceService with that uid exists here: without the owner the garbage collector leaves it.
    rule["metadata"].pop("ownerReferences")
    return rule


def alert_names(groups: list[dict[str, Any]]) -> set[str]:
    return {r["name"] for g in groups for r in g["rules"] if r["type"] == "alerting"}


@pytest.mark.cluster
def test_loads_the_operators_prometheusrule_from_the_cluster(local_cluster, k8s, namespace, tmp_path):
    install_crds(local_cluster, crd_files())
    rule = generated_rule(namespace)
    expected_alerts = {r["alert"] for g in rule["spec"]["groups"] for r in g["rules"] if "alert" in r}
    assert {"TailPilotP99BurnFast", "TailPilotQueueBurnSlow"} <= expected_alerts
    client.CustomObjectsApi(k8s).create_namespaced_custom_object(
        "monitoring.coreos.com", "v1", namespace, "prometheusrules", copy.deepcopy(rule)
    )
    prometheus = LocalPrometheus(tmp_path / "prometheus").start()
    try:
        assert prometheus.rule_groups() == []
        assert prometheus.load_cluster_rules(k8s, namespace) == [rule["metadata"]["name"]]
        groups = prometheus.rule_groups()
        assert {g["name"] for g in groups} == {g["name"] for g in rule["spec"]["groups"]}
        assert alert_names(groups) == expected_alerts
        assert all(r["health"] != "err" for g in groups for r in g["rules"]), groups
        # Loading replaces: an empty set unloads the rules.
        prometheus.load_rules([])
        assert prometheus.rule_groups() == []
    finally:
        prometheus.stop()


def test_rule_alerts_reach_the_configured_alertmanager(tmp_path):
    token = tmp_path / "token"
    token.write_text("s3cret")
    alertmanager = LocalAlertmanager(
        tmp_path / "alertmanager", webhook_url="http://127.0.0.1:9/alerts", token_file=token
    ).start()
    prometheus = LocalPrometheus(tmp_path / "prometheus", alertmanager_url=alertmanager.url).start()
    try:
        always = {
            "metadata": {"name": "always", "namespace": "ml"},
            "spec": {
                "groups": [
                    {
                        "name": "always",
                        "rules": [
                            {
                                "alert": "AlwaysFiring",
                                "expr": "vector(1)",
                                "labels": {"namespace": "ml", "inferenceservice": "resnet"},
                            }
                        ],
                    }
                ]
            },
        }
        eventually(
            lambda: prometheus.alertmanagers() == [f"{alertmanager.url}/api/v2/alerts"],
            timeout=30,
            description="the Alertmanager discovered",
        )
        prometheus.load_rules([always])

        def received() -> list[dict[str, Any]]:
            alerts = httpx.get(f"{alertmanager.url}/api/v2/alerts", timeout=5).json()
            return [a for a in alerts if a["labels"].get("alertname") == "AlwaysFiring"]

        (alert,) = eventually(received, timeout=30, description="AlwaysFiring in Alertmanager")
        assert alert["labels"]["inferenceservice"] == "resnet"
    finally:
        prometheus.stop()
        alertmanager.stop()
