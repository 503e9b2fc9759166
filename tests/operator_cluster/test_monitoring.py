"""ServiceMonitor and PrometheusRule: created when the prometheus-operator CRDs exist, skipped otherwise.

The CRDs are the upstream ones (prometheus-operator's Go module at the pinned version).
"""

from __future__ import annotations

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tailpilot_e2e.monitoring_crds import crd_files
from tailpilot_e2e.operator_harness import (
    OperatorProcess,
    condition,
    custom_object,
    install_crds,
    play_build,
    running_build_pod,
)
from tailpilot_e2e.wait import eventually

from .conftest import gpu_build_result

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


def serve_example(k8s, local_cluster, namespace, example, tmp_path):
    core = client.CoreV1Api(k8s)
    isvc = example("gpu-tensorrt-h100.yaml", namespace=namespace)
    name = isvc["metadata"]["name"]
    client.CustomObjectsApi(k8s).create_namespaced_custom_object(
        "tailpilot.io", "v1alpha1", namespace, "inferenceservices", isvc
    )
    play_build(core, running_build_pod(core, namespace), result=gpu_build_result())

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
        endpoints = monitor["spec"]["endpoints"]
        assert any(e.get("port") == "metrics" for e in endpoints), endpoints
        assert monitor["metadata"]["ownerReferences"][0]["name"] == name
        expressions = [r.get("expr", "") for g in rule["spec"]["groups"] for r in g["rules"]]
        assert any("nv_inference" in e for e in expressions), expressions
        alerts = [r["alert"] for g in rule["spec"]["groups"] for r in g["rules"] if "alert" in r]
        assert alerts, rule
    finally:
        remove_monitoring_crds(k8s)
