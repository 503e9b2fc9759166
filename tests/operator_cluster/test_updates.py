"""Spec changes: batching/SLO-only changes never rebuild; engine changes rebuild and roll without downtime."""

from __future__ import annotations

import pytest
from kubernetes import client

from tailpilot_e2e.operator_harness import (
    condition,
    custom_object,
    events_once,
    play_build,
    play_profile,
    played_profile,
    running_build_pod,
    running_profile_pod,
)
from tailpilot_e2e.wait import eventually

from .conftest import GPU_PROFILE, gpu_build_result

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


def serve_gpu_example(k8s, namespace, isvc, engine_key):  # type: ignore[no-untyped-def]
    """Apply the service, play its build (`engine_key`) and profile, and return it once Ready."""
    core, name = client.CoreV1Api(k8s), isvc["metadata"]["name"]
    client.CustomObjectsApi(k8s).create_namespaced_custom_object(
        "tailpilot.io", "v1alpha1", namespace, "inferenceservices", isvc
    )
    play_build(core, running_build_pod(core, namespace), result=gpu_build_result(engine_key))
    play_profile(core, namespace, GPU_PROFILE)
    return eventually(lambda: ready_at_generation(k8s, namespace, name), timeout=90, description="Ready")


def test_batching_and_slo_changes_do_not_rebuild(k8s, namespace, operator, example):
    core, batch = client.CoreV1Api(k8s), client.BatchV1Api(k8s)
    isvc = example("gpu-tensorrt-h100.yaml", namespace=namespace)
    isvc["spec"]["batching"]["mode"] = "fixed"
    name = isvc["metadata"]["name"]
    serve_gpu_example(k8s, namespace, isvc, gpu_build_result().engine_key)
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

    build_jobs = batch.list_namespaced_job(
        namespace, label_selector="app.kubernetes.io/component=engine-build"
    )
    assert len(build_jobs.items) == 1  # no rebuild
    assert len(batch.list_namespaced_job(namespace).items) == 2  # and no new profile
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
    serve_gpu_example(k8s, namespace, isvc, "1" * 32)

    patch(k8s, namespace, name, {"engine": {"precision": "fp32"}})
    new_build = running_build_pod(core, namespace)
    # While the new engine builds, the old one keeps serving.
    deployment = apps.read_namespaced_deployment(name, namespace)
    assert deployment.metadata.annotations["tailpilot.io/engine-key"] == "1" * 32
    assert deployment.status.available_replicas == 1
    play_build(core, new_build, result=gpu_build_result("2" * 32))
    play_profile(core, namespace, GPU_PROFILE)

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


def slower(profile, factor: float):  # type: ignore[no-untyped-def]
    """The same profile with every time `factor` times longer (throughput divided by it)."""
    st = profile.service_time
    return profile.model_copy(
        update={
            "service_time": st.model_copy(
                update={"intercept_ms": st.intercept_ms * factor, "per_item_ms": st.per_item_ms * factor}
            ),
            "points": [
                p.model_copy(
                    update={"p99_ms": p.p99_ms * factor, "throughput_per_s": p.throughput_per_s / factor}
                )
                for p in profile.points
            ],
        }
    )


def test_a_slower_engine_is_held_until_accepted_and_a_faster_one_rolls_out_by_itself(
    k8s, namespace, operator, example
):
    core, apps = client.CoreV1Api(k8s), client.AppsV1Api(k8s)
    objects = client.CustomObjectsApi(k8s)
    isvc = example("gpu-tensorrt-h100.yaml", namespace=namespace)
    name = isvc["metadata"]["name"]
    serve_gpu_example(k8s, namespace, isvc, "1" * 32)
    assert condition(custom_object(k8s, namespace, name), "RolloutBlocked")["reason"] == "NothingHeld"

    # A new engine 1.5x slower than the serving one: held, with both figures, the old one serving.
    patch(k8s, namespace, name, {"engine": {"precision": "fp32"}})
    play_build(core, running_build_pod(core, namespace), result=gpu_build_result("2" * 32))
    play_profile(core, namespace, slower(GPU_PROFILE, 1.5))

    def blocked():
        cond = condition(custom_object(k8s, namespace, name), "RolloutBlocked")
        return cond if cond and cond["status"] == "True" else None

    cond = eventually(blocked, timeout=60, description="RolloutBlocked=True")
    assert cond["reason"] == "LatencyRegression", cond
    assert "predicted P99" in cond["message"] and "capacity per replica" in cond["message"], cond
    assert "tailpilot.io/accept-engine=222222222222" in cond["message"], cond
    obj = custom_object(k8s, namespace, name)
    comparison = obj["status"]["engineComparison"]
    assert (comparison["verdict"], comparison["candidateEngineKey"]) == ("Blocked", "2" * 32)
    assert comparison["candidateP99Ms"] > comparison["servingP99Ms"]
    # 1.5x the time is a third less capacity: (1 - 1/1.5) = 33%, beyond the default 20%.
    assert comparison["regressionPercent"] == pytest.approx(50.0, abs=1.0)
    assert obj["status"]["engine"]["key"] == "1" * 32
    assert condition(obj, "Ready")["status"] == "True"  # still serving: the old engine
    assert condition(obj, "Degraded")["reason"] == "LatencyRegression"
    assert apps.read_namespaced_deployment(name, namespace).metadata.annotations[
        "tailpilot.io/engine-key"
    ] == ("1" * 32)
    events = events_once(core, namespace, lambda es: any(e.reason == "LatencyRegression" for e in es))
    warnings = [e for e in events if e.reason == "LatencyRegression"]
    assert len(warnings) == 1, [e.message for e in warnings]

    # Accepting it (the annotation names its key) rolls it out.
    objects.patch_namespaced_custom_object(
        "tailpilot.io",
        "v1alpha1",
        namespace,
        "inferenceservices",
        name,
        {"metadata": {"annotations": {"tailpilot.io/accept-engine": "2" * 12}}},
    )

    def serving(key: str):  # type: ignore[no-untyped-def]
        def check():  # type: ignore[no-untyped-def]
            obj = custom_object(k8s, namespace, name)
            d = apps.read_namespaced_deployment(name, namespace)
            return (
                obj
                if (obj["status"].get("engine") or {}).get("key") == key
                and d.metadata.annotations["tailpilot.io/engine-key"] == key
                else None
            )

        return check

    obj = eventually(serving("2" * 32), timeout=60, description="the accepted engine serving")
    assert obj["status"]["engineComparison"]["verdict"] == "Accepted"
    cond = condition(obj, "RolloutBlocked")
    assert (cond["status"], cond["reason"]) == ("False", "RegressionAccepted")

    # A faster engine needs nobody: it rolls out by itself.
    patch(k8s, namespace, name, {"model": {"sha256": "b" * 64}})  # a new model version
    play_build(core, running_build_pod(core, namespace), result=gpu_build_result("3" * 32))
    play_profile(core, namespace, slower(GPU_PROFILE, 0.8))
    obj = eventually(serving("3" * 32), timeout=60, description="the faster engine serving")
    assert obj["status"]["engineComparison"]["verdict"] == "Promoted"
    assert obj["status"]["engineComparison"]["regressionPercent"] < 0
    assert condition(obj, "RolloutBlocked")["reason"] == "WithinRegressionBudget"


def test_a_new_request_for_the_engine_serving_keeps_it_without_profiling_again(
    k8s, namespace, operator, example
):
    """A change outside the engine key (here the accuracy tolerance) builds the same engine: kept as is."""
    core, batch = client.CoreV1Api(k8s), client.BatchV1Api(k8s)
    isvc = example("gpu-tensorrt-h100.yaml", namespace=namespace)
    name = isvc["metadata"]["name"]
    before = serve_gpu_example(k8s, namespace, isvc, "1" * 32)

    patch(k8s, namespace, name, {"engine": {"accuracyTolerance": {"minTop1Agreement": 0.5}}})
    play_build(core, running_build_pod(core, namespace), result=gpu_build_result("1" * 32))
    old_request = before["status"]["engine"]["requestKey"]

    def kept_under_the_new_request():  # type: ignore[no-untyped-def]
        obj = ready_at_generation(k8s, namespace, name)
        return obj if obj and obj["status"]["engine"]["requestKey"] != old_request else None

    after = eventually(kept_under_the_new_request, timeout=60, description="the engine under the new request")
    assert condition(after, "EngineReady")["status"] == "True"
    assert after["status"]["engine"]["key"] == "1" * 32
    assert after["status"]["profile"] == before["status"]["profile"]
    profile_jobs = batch.list_namespaced_job(
        namespace, label_selector="app.kubernetes.io/component=engine-profile"
    )
    assert len(profile_jobs.items) == 1  # no second profile of the same engine


def test_a_new_triton_image_profiles_the_served_engine_again_in_the_background(
    k8s, namespace, operator, example
):
    """Where the engine serves changed (the image), not the engine: re-measured while it keeps serving."""
    core, apps = client.CoreV1Api(k8s), client.AppsV1Api(k8s)
    isvc = example("gpu-tensorrt-h100.yaml", namespace=namespace)
    name = isvc["metadata"]["name"]
    before = serve_gpu_example(k8s, namespace, isvc, "1" * 32)

    image = "nvcr.io/nvidia/tritonserver:25.01-py3"
    patch(k8s, namespace, name, {"runtime": {"image": image}})
    pod = running_profile_pod(core, namespace)
    assert pod.spec.init_containers[-1].image == image  # measured in the new image
    # Meanwhile the engine serves on (the new image rolls out as any pod-template change does).
    obj = custom_object(k8s, namespace, name)
    assert obj["status"]["engine"]["key"] == "1" * 32
    assert obj["status"]["profile"] == before["status"]["profile"]
    faster = slower(GPU_PROFILE, 0.9)
    play_build(core, pod, result=played_profile(pod, faster))

    def reprofiled():  # type: ignore[no-untyped-def]
        obj = ready_at_generation(k8s, namespace, name)
        return (
            obj
            if obj and obj["status"]["profile"]["key"] == pod.metadata.labels["tailpilot.io/profile-key"]
            else None
        )

    after = eventually(reprofiled, timeout=60, description="the served engine's new profile")
    assert after["status"]["engine"]["key"] == "1" * 32
    assert after["status"]["profile"]["serviceTime"]["interceptMs"] == pytest.approx(
        faster.service_time.intercept_ms
    )
    deployment = apps.read_namespaced_deployment(name, namespace)
    assert deployment.spec.template.spec.containers[0].image == image
