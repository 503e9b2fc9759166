"""The operator turns one InferenceService into build and profile Jobs, a Triton Deployment and companions."""

from __future__ import annotations

import json

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tailpilot.api.quantity import milli_cpu
from tailpilot_e2e.operator_harness import (
    condition,
    custom_object,
    dump,
    events_once,
    play_build,
    play_profile,
    running_build_pod,
    running_profile_pod,
)
from tailpilot_e2e.wait import eventually

from .conftest import GPU_PROFILE, gpu_build_result

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

CHILD_KINDS = ("deployments", "services", "configmaps", "poddisruptionbudgets")


def apply(k8s, obj):
    return client.CustomObjectsApi(k8s).create_namespaced_custom_object(
        "tailpilot.io", "v1alpha1", obj["metadata"]["namespace"], "inferenceservices", obj
    )


def ready(k8s, namespace, name):
    obj = custom_object(k8s, namespace, name)
    cond = condition(obj, "Ready")
    return obj if cond and cond["status"] == "True" else None


def test_gpu_example_builds_rolls_out_on_h100_and_reports_status(
    k8s, namespace, operator, example, local_cluster
):
    core, apps, batch = client.CoreV1Api(k8s), client.AppsV1Api(k8s), client.BatchV1Api(k8s)
    isvc = example("gpu-tensorrt-h100.yaml", namespace=namespace)
    name = isvc["metadata"]["name"]
    apply(k8s, isvc)

    pod = running_build_pod(core, namespace)
    assert pod.spec.node_selector["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
    assert pod.spec.node_name.startswith("gpu-h100-")
    (job,) = batch.list_namespaced_job(namespace).items
    assert job.metadata.owner_references[0].name == name

    # The status follows the pod: EngineBuildPending while it waits for its volume, then EngineBuilding.
    # The pass that created the Job says "started" before a later one sees its pod running (CI run
    # of 2026-11-30 13:24 UTC read the first): wait for the one that names the pod's node.
    def building_on_the_node():
        cond = condition(custom_object(k8s, namespace, name), "EngineReady")
        running = (
            cond
            and cond["reason"] == "EngineBuilding"
            and f"running on {pod.spec.node_name}" in cond["message"]
        )
        return cond if running else None

    cond = eventually(
        building_on_the_node, timeout=30, description="EngineReady=False EngineBuilding, running"
    )
    assert cond["status"] == "False", cond

    result = gpu_build_result()
    play_build(core, pod, result=result)

    # Built, the engine is profiled where it will serve before it serves: a profile Job on an H100
    # node running the service's own Triton container as a sidecar, beside the profiler.
    profile_pod = running_profile_pod(core, namespace)
    assert profile_pod.spec.node_name.startswith("gpu-h100-")
    assert profile_pod.spec.node_selector["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
    sidecar = profile_pod.spec.init_containers[-1]
    assert (sidecar.name, sidecar.restart_policy) == ("triton", "Always")
    assert sidecar.image == isvc["spec"]["runtime"].get("image", sidecar.image)
    assert sidecar.image.startswith("nvcr.io/nvidia/tritonserver:")
    assert sidecar.resources.limits["nvidia.com/gpu"] == "1"
    assert [c.name for c in profile_pod.spec.containers] == ["profile"]

    def profiling():
        obj = custom_object(k8s, namespace, name)
        cond = condition(obj, "EngineReady")
        return obj if cond and cond["reason"] == "EngineProfiling" else None

    obj = eventually(profiling, timeout=30, description="EngineReady=False EngineProfiling")
    assert obj["status"]["profiling"]["phase"] == "Running", dump(obj["status"])
    assert obj["status"]["profiling"]["engineKey"] == result.engine_key
    assert condition(obj, "Ready")["status"] == "False"
    assert "engine" not in obj["status"], dump(obj["status"])  # nothing serves before its profile
    with pytest.raises(ApiException) as missing:
        apps.read_namespaced_deployment(name, namespace)
    assert missing.value.status == 404

    play_profile(core, namespace, GPU_PROFILE)
    obj = eventually(lambda: ready(k8s, namespace, name), timeout=90, description="Ready=True")

    status = obj["status"]
    assert status["engine"]["key"] == result.engine_key
    assert status["engine"]["tritonBackend"] == "tensorrt"
    # The profile on the status is the profile Job's, keyed by its request.
    assert [p["batchSize"] for p in status["profile"]["points"]] == [1, 8, 32, 64]
    assert status["profile"]["key"] == profile_pod.metadata.labels["tailpilot.io/profile-key"]
    assert status["profile"]["serviceTime"]["interceptMs"] == GPU_PROFILE.service_time.intercept_ms
    assert status["profiling"]["phase"] == "Succeeded"
    wanted = {"EngineProfiling", "EngineProfiled", "EngineBuilt"}
    events_once(core, namespace, lambda es: wanted <= {e.reason for e in es}, description=str(wanted))
    assert status["observedGeneration"] == obj["metadata"]["generation"]
    for cond_type in ("Ready", "EngineReady", "RolloutReady"):
        assert condition(obj, cond_type)["status"] == "True", dump(status)

    deployment = apps.read_namespaced_deployment(name, namespace)
    pods = core.list_namespaced_pod(
        namespace, label_selector="app.kubernetes.io/component=inference-server"
    ).items
    assert len(pods) == deployment.spec.replicas == status["replicas"]
    assert all(p.spec.node_name.startswith("gpu-h100-") for p in pods)
    triton = deployment.spec.template.spec.containers[0]
    assert triton.resources.limits["nvidia.com/gpu"] == "1"
    configmap = core.read_namespaced_config_map(f"{name}-model-config", namespace)
    assert "max_batch_size: 64" in configmap.data["config.pbtxt"]

    table = local_cluster.kubectl("get", "tpisvc", "-n", namespace).stdout
    header = table.splitlines()[0].split()
    assert header[:2] == ["NAME", "READY"] and {"REPLICAS", "P99", "SLO", "BATCH", "AGE"} <= set(header), (
        table
    )
    assert table.splitlines()[1].split()[1] == "True", table


def test_failed_build_reports_reason_retries_and_recovers_after_a_fix(k8s, namespace, operator, example):
    core, apps, batch = client.CoreV1Api(k8s), client.AppsV1Api(k8s), client.BatchV1Api(k8s)
    isvc = example("gpu-tensorrt-h100.yaml", namespace=namespace)
    name = isvc["metadata"]["name"]
    apply(k8s, isvc)
    failure = {
        "outcome": "Failed",
        "reason": "ModelChecksumMismatch",
        "message": "sha256 of https://models.example.com/resnet50/resnet50-v2-7.onnx is 9f86..., "
        "spec.model.sha256 says 3ab6...",
    }
    first = running_build_pod(core, namespace)
    play_build(core, first, exit_code=1, message=json.dumps(failure))

    def failed():
        cond = condition(custom_object(k8s, namespace, name), "EngineReady")
        return cond if cond and cond["reason"] == "ModelChecksumMismatch" else None

    cond = eventually(failed, timeout=60, description="EngineReady=False ModelChecksumMismatch")
    assert cond["status"] == "False" and "spec.model.sha256 says" in cond["message"], cond
    with pytest.raises(ApiException) as missing:
        apps.read_namespaced_deployment(name, namespace)
    assert missing.value.status == 404
    assert condition(custom_object(k8s, namespace, name), "Ready")["status"] == "False"

    # The build is retried with back-off: a new build pod appears for the same Job name.
    retry = running_build_pod(core, namespace, timeout=90)
    assert retry.metadata.uid != first.metadata.uid
    job_names = {j.metadata.name for j in batch.list_namespaced_job(namespace).items}
    assert len(job_names) == 1, job_names

    # Fixing the spec (a new checksum) is a new build request: a new Job, and it recovers.
    client.CustomObjectsApi(k8s).patch_namespaced_custom_object(
        "tailpilot.io",
        "v1alpha1",
        namespace,
        "inferenceservices",
        name,
        {"spec": {"model": {"sha256": "a" * 64}}},
    )

    def new_job_pod():
        # Not the old Job's retry pod, which is still running: a pod of another Job.
        selector = f"app.kubernetes.io/component=engine-build,job-name notin ({','.join(sorted(job_names))})"
        pods = core.list_namespaced_pod(namespace, label_selector=selector).items
        return next((p for p in pods if p.status.phase == "Running"), None)

    fixed = eventually(new_job_pod, timeout=60, description="build pod of the fixed spec")
    play_build(core, fixed, result=gpu_build_result("f" * 32))
    play_profile(core, namespace, GPU_PROFILE)
    eventually(lambda: ready(k8s, namespace, name), timeout=90, description="Ready after the fix")


def test_a_failed_profile_serves_the_engine_without_one_and_says_why(k8s, namespace, operator, example):
    core = client.CoreV1Api(k8s)
    isvc = example("gpu-tensorrt-h100.yaml", namespace=namespace)
    name = isvc["metadata"]["name"]
    apply(k8s, isvc)
    play_build(core, running_build_pod(core, namespace), result=gpu_build_result())
    failure = {"outcome": "Failed", "reason": "ProfileFailed", "message": "inference failed at batch 8"}
    play_build(core, running_profile_pod(core, namespace), exit_code=1, message=json.dumps(failure))

    obj = eventually(lambda: ready(k8s, namespace, name), timeout=90, description="Ready without a profile")
    status = obj["status"]
    assert "profile" not in status, dump(status)
    assert (status["profiling"]["phase"], status["profiling"]["reason"]) == ("Failed", "ProfileFailed")
    events = events_once(core, namespace, lambda es: any(e.reason == "ProfileFailed" for e in es))
    warnings = [e.message for e in events if e.reason == "ProfileFailed"]
    assert warnings and "inference failed at batch 8" in warnings[0], warnings
    assert "learns its service time online" in warnings[0]


def test_drift_is_corrected_and_delete_removes_children(k8s, namespace, operator, example):
    core, apps = client.CoreV1Api(k8s), client.AppsV1Api(k8s)
    isvc = example("gpu-tensorrt-h100.yaml", namespace=namespace)
    name = isvc["metadata"]["name"]
    apply(k8s, isvc)
    play_build(core, running_build_pod(core, namespace), result=gpu_build_result())
    play_profile(core, namespace, GPU_PROFILE)
    eventually(lambda: ready(k8s, namespace, name), timeout=90, description="Ready=True")

    apps.patch_namespaced_deployment(
        name,
        namespace,
        {
            "spec": {
                "replicas": 5,
                "template": {
                    "spec": {
                        "containers": [{"name": "triton", "resources": {"limits": {"nvidia.com/gpu": "2"}}}]
                    }
                },
            }
        },
    )

    def restored():
        d = apps.read_namespaced_deployment(name, namespace)
        limits = d.spec.template.spec.containers[0].resources.limits
        return d if d.spec.replicas == 1 and limits["nvidia.com/gpu"] == "1" else None

    eventually(restored, timeout=60, description="replicas and GPU limit put back")

    client.CustomObjectsApi(k8s).delete_namespaced_custom_object(
        "tailpilot.io", "v1alpha1", namespace, "inferenceservices", name
    )

    def children_gone():
        selector = f"tailpilot.io/inferenceservice={name}"
        left = [
            *apps.list_namespaced_deployment(namespace, label_selector=selector).items,
            *core.list_namespaced_service(namespace, label_selector=selector).items,
            *core.list_namespaced_config_map(namespace, label_selector=selector).items,
            *client.BatchV1Api(k8s).list_namespaced_job(namespace, label_selector=selector).items,
            *client.PolicyV1Api(k8s)
            .list_namespaced_pod_disruption_budget(namespace, label_selector=selector)
            .items,
        ]
        return not left

    eventually(children_gone, timeout=90, description="every child garbage-collected")


def test_a_service_deleted_while_the_operator_is_down_goes_away(k8s, namespace, operator, example):
    """No finalizer: deletion never waits for the operator, and owner references clean up the children."""
    core = client.CoreV1Api(k8s)
    isvc = example("gpu-tensorrt-h100.yaml", namespace=namespace)
    name = isvc["metadata"]["name"]
    apply(k8s, isvc)
    play_build(core, running_build_pod(core, namespace), result=gpu_build_result())
    play_profile(core, namespace, GPU_PROFILE)
    obj = eventually(lambda: ready(k8s, namespace, name), timeout=90, description="Ready=True")
    assert not obj["metadata"].get("finalizers"), obj["metadata"]
    operator.stop()

    client.CustomObjectsApi(k8s).delete_namespaced_custom_object(
        "tailpilot.io", "v1alpha1", namespace, "inferenceservices", name
    )

    def gone():
        try:
            custom_object(k8s, namespace, name)
        except ApiException as error:
            return error.status == 404
        return False

    eventually(gone, timeout=30, description="deleted without the operator")
    selector = f"tailpilot.io/inferenceservice={name}"
    eventually(
        lambda: (
            not client.AppsV1Api(k8s).list_namespaced_deployment(namespace, label_selector=selector).items
        ),
        timeout=60,
        description="Deployment garbage-collected",
    )


def test_a_build_that_cannot_start_says_why(k8s, namespace, operator, example):
    """The CPU example reads its model from a PVC `models` that this namespace lacks."""
    isvc = example("cpu-onnxruntime.yaml", namespace=namespace)
    apply(k8s, isvc)

    def pending():
        cond = condition(custom_object(k8s, namespace, isvc["metadata"]["name"]), "EngineReady")
        return cond if cond and cond["reason"] == "EngineBuildPending" else None

    cond = eventually(pending, timeout=60, description="EngineReady=False EngineBuildPending")
    assert cond["status"] == "False" and 'persistentvolumeclaim "models" not found' in cond["message"], cond
    # The build runs, and profiles the engine, under the serving pods' CPU limit (the example's "2"),
    # and within the build pod's memory limit (the operator's default).
    (job,) = client.BatchV1Api(k8s).list_namespaced_job(namespace).items
    limits = job.spec.template.spec.containers[0].resources.limits
    assert set(limits) == {"cpu", "memory"} and milli_cpu(limits["cpu"]) == 2000, limits
    assert limits["memory"] == "8Gi", limits
