"""Spec changes: batching/SLO-only changes never rebuild; engine changes rebuild and roll without downtime."""

from __future__ import annotations

import pytest
from kubernetes import client

from tailpilot_e2e.operator_harness import condition, custom_object, play_build, running_build_pod
from tailpilot_e2e.wait import eventually

from .conftest import gpu_build_result

pytestmark = [pytest.mark.cluster, pytest.mark.slow]


def patch(k8s, namespace, name, spec):
    client.CustomObjectsApi(k8s).patch_namespaced_custom_object(
        "tailpilot.io", "v1alpha1", namespace, "inferenceservices", name, {"spec": spec}
    )


def ready_at_generation(k8s, namespace, name):
    obj = custom_object(k8s, namespace, name)
    cond = condition(obj, "Ready")
    generation = obj["metadata"]["generation"]
    if cond and cond["status"] == "True" and obj["status"].get("observedGeneration") == generation:
        return obj
    return None


def test_batching_and_slo_changes_do_not_rebuild(k8s, namespace, operator, example):
    core, batch = client.CoreV1Api(k8s), client.BatchV1Api(k8s)
    isvc = example("gpu-tensorrt-h100.yaml", namespace=namespace)
    isvc["spec"]["batching"]["mode"] = "fixed"
    name = isvc["metadata"]["name"]
    client.CustomObjectsApi(k8s).create_namespaced_custom_object(
        "tailpilot.io", "v1alpha1", namespace, "inferenceservices", isvc
    )
    play_build(core, running_build_pod(core, namespace), result=gpu_build_result())
    eventually(lambda: ready_at_generation(k8s, namespace, name), timeout=90, description="Ready")
    template_before = client.AppsV1Api(k8s).read_namespaced_deployment(name, namespace).spec.template

    patch(
        k8s,
        namespace,
        name,
        {
            "batching": {"preferredBatchSizes": [8, 32], "maxQueueDelayMicroseconds": 500},
            "slo": {"p99LatencyMs": 40},
        },
    )
    obj = eventually(
        lambda: ready_at_generation(k8s, namespace, name), timeout=60, description="new generation"
    )

    assert len(batch.list_namespaced_job(namespace).items) == 1  # no rebuild
    assert obj["status"]["batching"]["preferredBatchSizes"] == [8, 32]
    config = core.read_namespaced_config_map(f"{name}-model-config", namespace).data["config.pbtxt"]
    assert "max_queue_delay_microseconds: 500" in config, config
    template_after = client.AppsV1Api(k8s).read_namespaced_deployment(name, namespace).spec.template
    # Batching is changed live (Triton's load API), so the pods are not replaced.
    assert template_after.metadata.annotations == template_before.metadata.annotations


def test_engine_change_rebuilds_and_rolls_with_a_ready_pod_at_all_times(k8s, namespace, operator, example):
    core, apps = client.CoreV1Api(k8s), client.AppsV1Api(k8s)
    isvc = example("gpu-tensorrt-h100.yaml", namespace=namespace)
    name = isvc["metadata"]["name"]
    client.CustomObjectsApi(k8s).create_namespaced_custom_object(
        "tailpilot.io", "v1alpha1", namespace, "inferenceservices", isvc
    )
    play_build(core, running_build_pod(core, namespace), result=gpu_build_result("1" * 32))
    eventually(lambda: ready_at_generation(k8s, namespace, name), timeout=90, description="Ready")

    patch(k8s, namespace, name, {"engine": {"precision": "fp32"}})
    new_build = running_build_pod(core, namespace)
    # While the new engine builds, the old one keeps serving.
    deployment = apps.read_namespaced_deployment(name, namespace)
    assert deployment.metadata.annotations["tailpilot.io/engine-key"] == "1" * 32
    assert deployment.status.available_replicas == 1
    play_build(core, new_build, result=gpu_build_result("2" * 32))

    min_available = deployment.status.available_replicas

    def rolled():
        nonlocal min_available
        d = apps.read_namespaced_deployment(name, namespace)
        min_available = min(min_available, d.status.available_replicas or 0)
        pods = core.list_namespaced_pod(namespace, label_selector="tailpilot.io/engine-key=" + "2" * 32).items
        done = (
            d.metadata.annotations.get("tailpilot.io/engine-key") == "2" * 32
            and d.status.updated_replicas == d.spec.replicas == d.status.available_replicas
            and (d.status.replicas or 0) == d.spec.replicas
            and len(pods) == d.spec.replicas
        )
        return done and ready_at_generation(k8s, namespace, name)

    eventually(rolled, timeout=90, interval=0.1, description="rolled to the new engine")
    assert min_available >= 1, "a moment without an available replica during the rollout"
