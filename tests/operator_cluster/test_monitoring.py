"""ServiceMonitor and PrometheusRule: created when the prometheus-operator CRDs exist, skipped otherwise.

The CRDs are the upstream ones (prometheus-operator's Go module at the pinned version).
"""

from __future__ import annotations

import re

import httpx
import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tailpilot_e2e.monitoring_crds import crd_files
from tailpilot_e2e.operator_harness import (
    OperatorProcess,
    condition,
    custom_object,
    free_port,
    install_crds,
    play_build,
    play_profile,
    running_build_pod,
)
from tailpilot_e2e.wait import eventually

from .conftest import GPU_PROFILE, gpu_build_result

pytestmark = [pytest.mark.cluster, pytest.mark.slow]
CRD_NAMES = ("servicemonitors.monitoring.coreos.com", "prometheusrules.monitoring.coreos.com")


def remove_monitoring_crds(k8s):
    ext = client.ApiextensionsV1Api(k8s)
    for name in CRD_NAMES:
        try:
            ext.delete_custom_resource_definition(name)
        except ApiException as error:
            if error.status != 404:
                raise

    def gone():
        return not {c.metadata.name for c in ext.list_custom_resource_definition().items} & set(CRD_NAMES)

    eventually(gone, timeout=60, description="monitoring CRDs removed")


def gone(read) -> bool:
    """Whether `read()` answers 404."""
    try:
        read()
    except ApiException as error:
        if error.status == 404:
            return True
        raise
    return False


def serve_example(k8s, local_cluster, namespace, example, tmp_path):
    core = client.CoreV1Api(k8s)
    isvc = example("gpu-tensorrt-h100.yaml", namespace=namespace)
    name = isvc["metadata"]["name"]
    client.CustomObjectsApi(k8s).create_namespaced_custom_object(
        "tailpilot.io", "v1alpha1", namespace, "inferenceservices", isvc
    )
    play_build(core, running_build_pod(core, namespace), result=gpu_build_result())
    play_profile(core, namespace, GPU_PROFILE)

    def ready():
        cond = condition(custom_object(k8s, namespace, name), "Ready")
        return cond and cond["status"] == "True"

    eventually(ready, timeout=90, description="Ready")
    return name


def test_without_prometheus_operator_crds_nothing_monitoring_is_created(
    k8s, crds, namespace, engine_store, example, tmp_path
):
    remove_monitoring_crds(k8s)
    with OperatorProcess(crds, namespace=namespace, log_dir=tmp_path) as operator:
        serve_example(k8s, crds, namespace, example, tmp_path)
    assert "monitoring.coreos.com" not in operator.log_file.read_text()


def test_with_prometheus_operator_crds_servicemonitor_and_rule_are_created(
    k8s, crds, namespace, engine_store, example, tmp_path
):
    install_crds(crds, crd_files())
    try:
        with OperatorProcess(crds, namespace=namespace, log_dir=tmp_path):
            name = serve_example(k8s, crds, namespace, example, tmp_path)
            objects = client.CustomObjectsApi(k8s)

            def created():
                monitor = objects.get_namespaced_custom_object(
                    "monitoring.coreos.com", "v1", namespace, "servicemonitors", name
                )
                rules = objects.list_namespaced_custom_object(
                    "monitoring.coreos.com", "v1", namespace, "prometheusrules"
                )["items"]
                return (monitor, rules[0]) if rules else None

            monitor, rule = eventually(created, timeout=60, description="ServiceMonitor and PrometheusRule")

            # Turned off: the operator deletes the ServiceMonitor it made, and keeps the rule.
            objects.patch_namespaced_custom_object(
                "tailpilot.io",
                "v1alpha1",
                namespace,
                "inferenceservices",
                name,
                {"spec": {"monitoring": {"serviceMonitor": False}}},
            )
            eventually(
                lambda: gone(
                    lambda: objects.get_namespaced_custom_object(
                        "monitoring.coreos.com", "v1", namespace, "servicemonitors", name
                    )
                ),
                timeout=60,
                description="the ServiceMonitor removed",
            )
            assert objects.list_namespaced_custom_object(
                "monitoring.coreos.com", "v1", namespace, "prometheusrules"
            )["items"]
            assert any(
                e.reason == "ChildRemoved" and f"ServiceMonitor {name} removed" in e.message
                for e in client.CoreV1Api(k8s).list_namespaced_event(namespace).items
            )
        endpoints = monitor["spec"]["endpoints"]
        assert any(e.get("port") == "metrics" for e in endpoints), endpoints
        assert monitor["metadata"]["ownerReferences"][0]["name"] == name
        expressions = [r.get("expr", "") for g in rule["spec"]["groups"] for r in g["rules"]]
        assert any("nv_inference" in e for e in expressions), expressions
        alerts = [r["alert"] for g in rule["spec"]["groups"] for r in g["rules"] if "alert" in r]
        assert alerts, rule
    finally:
        remove_monitoring_crds(k8s)


def test_backlog_rotation_rolls_the_label_in_before_the_service_selects_it_and_keeps_every_pod_scraped(
    k8s, crds, namespace, engine_store, example, tmp_path
):
    install_crds(crds, crd_files())
    core, objects = client.CoreV1Api(k8s), client.CustomObjectsApi(k8s)
    metrics_port = free_port()
    args = ["--metrics-port", str(metrics_port), "--bind-address", "127.0.0.1"]
    try:
        with OperatorProcess(crds, namespace=namespace, log_dir=tmp_path, extra_args=args) as operator:
            name = serve_example(k8s, crds, namespace, example, tmp_path)

            def set_rotation(on: bool) -> None:
                patch = {"spec": {"autoscaling": {"backlogRotation": on}}}
                objects.patch_namespaced_custom_object(
                    "tailpilot.io", "v1alpha1", namespace, "inferenceservices", name, patch
                )

            set_rotation(True)

            def selecting_rotation():
                selector = core.read_namespaced_service(name, namespace).spec.selector
                if selector.get("tailpilot.io/rotation") != "in":
                    return None
                # Never before every live pod carried the label: none may drop out of the endpoints.
                pods = [
                    p
                    for p in core.list_namespaced_pod(
                        namespace, label_selector=f"tailpilot.io/inferenceservice={name}"
                    ).items
                    if p.metadata.deletion_timestamp is None
                    and (p.metadata.labels or {}).get("app.kubernetes.io/component") == "inference-server"
                ]
                assert pods and all(p.metadata.labels.get("tailpilot.io/rotation") == "in" for p in pods), [
                    p.metadata.labels for p in pods
                ]
                return selector

            eventually(
                selecting_rotation, timeout=120, description="the Service selects tailpilot.io/rotation=in"
            )
            metrics_service = core.read_namespaced_service(f"{name}-metrics", namespace)
            assert metrics_service.spec.cluster_ip == "None"
            assert "tailpilot.io/rotation" not in metrics_service.spec.selector
            monitor = objects.get_namespaced_custom_object(
                "monitoring.coreos.com", "v1", namespace, "servicemonitors", name
            )
            assert (
                monitor["spec"]["selector"]["matchLabels"].items() <= metrics_service.metadata.labels.items()
            )

            # The operator's rotation checks run: they find the simulated pods' metrics unreachable
            # (no network on simulated nodes), say so once, and hold nobody.
            gauge = re.compile(
                rf'^tailpilot_replicas_held_out\{{namespace="{namespace}",service="{name}"\}} 0\.0$', re.M
            )
            eventually(
                lambda: gauge.search(httpx.get(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5).text),
                timeout=30,
                description="a rotation check's gauge",
            )
            assert "cannot read the Triton metrics" in operator.log_file.read_text()

            # Off again: the Service stops selecting on the label at once (no rollout needed).
            set_rotation(False)
            eventually(
                lambda: (
                    "tailpilot.io/rotation" not in core.read_namespaced_service(name, namespace).spec.selector
                ),
                timeout=60,
                description="the rotation key gone from the Service selector",
            )
            # ... the metrics Service goes, and the ServiceMonitor scrapes through the Service again.
            eventually(
                lambda: gone(lambda: core.read_namespaced_service(f"{name}-metrics", namespace)),
                timeout=60,
                description="the metrics Service removed",
            )
            service_labels = core.read_namespaced_service(name, namespace).metadata.labels

            def monitor_selects_the_service():
                monitor = objects.get_namespaced_custom_object(
                    "monitoring.coreos.com", "v1", namespace, "servicemonitors", name
                )
                return monitor["spec"]["selector"]["matchLabels"].items() <= service_labels.items()

            eventually(
                monitor_selects_the_service, timeout=60, description="the ServiceMonitor on the Service"
            )
    finally:
        remove_monitoring_crds(k8s)
