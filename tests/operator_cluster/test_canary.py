"""The canary's lifecycle on the API server (played builds on the simulated H100 nodes).

No Prometheus here, so no verdict of the analysis (the real-pods test has those): what is checked is
the reconciler's part. A new engine that passed the gate starts its own Deployment beside the
stable one, its pods selected by the Service; the accept annotation promotes it onto the stable
replicas and the canary goes; a spec change while a canary runs stops it.
"""

from __future__ import annotations

import pytest
from kubernetes import client

from tailpilot_e2e.operator_harness import (
    condition,
    custom_object,
    events_once,
    play_build,
    play_profile,
    running_build_pod,
)
from tailpilot_e2e.wait import eventually

from .conftest import GPU_PROFILE, gpu_build_result
from .test_updates import patch, serve_gpu_example

pytestmark = [pytest.mark.cluster, pytest.mark.slow]


def canary_deployment(apps: client.AppsV1Api, namespace: str, name: str) -> client.V1Deployment | None:
    try:
        return apps.read_namespaced_deployment(f"{name}-canary", namespace)
    except client.ApiException as error:
        if error.status == 404:
            return None
        raise


def test_a_canary_runs_beside_the_stable_replicas_is_promoted_by_acceptance_and_stopped_by_a_change(
    k8s, namespace, operator, example
):
    core, apps = client.CoreV1Api(k8s), client.AppsV1Api(k8s)
    isvc = example("gpu-tensorrt-h100.yaml", namespace=namespace)
    isvc["spec"]["rollout"] = {"strategy": "canary", "canary": {"analysisSeconds": 60}}
    name = isvc["metadata"]["name"]
    serve_gpu_example(k8s, namespace, isvc, "1" * 32)
    assert canary_deployment(apps, namespace, name) is None

    # A new engine as fast as the serving one passes the gate, then starts its canary.
    patch(k8s, namespace, name, {"engine": {"precision": "fp32"}})
    play_build(core, running_build_pod(core, namespace), result=gpu_build_result("2" * 32))
    play_profile(core, namespace, GPU_PROFILE)

    def analysing():  # type: ignore[no-untyped-def]
        obj = custom_object(k8s, namespace, name)
        canary = (obj.get("status") or {}).get("canary") or {}
        return obj if canary.get("phase") == "Analysing" else None

    obj = eventually(analysing, timeout=90, description="the canary ready and analysed")
    canary = obj["status"]["canary"]
    assert (canary["engine"]["key"], canary["replicas"]) == ("2" * 32, 1)
    assert canary["analysisStartedAt"] >= canary["startedAt"]
    engine_ready = condition(obj, "EngineReady")
    assert (engine_ready["status"], engine_ready["reason"]) == ("False", "CanaryAnalysis")
    assert condition(obj, "RolloutBlocked")["reason"] == "CanaryAnalysis"
    assert condition(obj, "Ready")["status"] == "True"  # the stable replicas serve on
    assert obj["status"]["engine"]["key"] == "1" * 32

    # The canary's Deployment: the new engine, its own selector, pods the Service selects.
    deployment = canary_deployment(apps, namespace, name)
    assert deployment is not None
    assert deployment.metadata.annotations["tailpilot.io/engine-key"] == "2" * 32
    assert deployment.spec.selector.match_labels["tailpilot.io/track"] == "canary"
    assert deployment.metadata.owner_references[0].name == name
    volumes = {v.name: v for v in deployment.spec.template.spec.volumes}
    assert volumes["model-config"].config_map.name == f"{name}-canary-model-config"
    assert core.read_namespaced_config_map(f"{name}-canary-model-config", namespace).data["config.pbtxt"]
    stable = apps.read_namespaced_deployment(name, namespace)
    assert stable.metadata.annotations["tailpilot.io/engine-key"] == "1" * 32
    service_selector = core.read_namespaced_service(name, namespace).spec.selector
    pods = core.list_namespaced_pod(
        namespace, label_selector=",".join(f"{k}={v}" for k, v in service_selector.items())
    )
    engines = sorted(p.metadata.labels["tailpilot.io/engine-key"] for p in pods.items)
    assert engines == ["1" * 32, "2" * 32], engines  # both sides take the Service's traffic

    # Accepting the new engine promotes it at once: the stable replicas roll to it, the canary goes.
    client.CustomObjectsApi(k8s).patch_namespaced_custom_object(
        "tailpilot.io",
        "v1alpha1",
        namespace,
        "inferenceservices",
        name,
        {"metadata": {"annotations": {"tailpilot.io/accept-engine": "2" * 12}}},
    )

    def promoted():  # type: ignore[no-untyped-def]
        obj = custom_object(k8s, namespace, name)
        canary = (obj.get("status") or {}).get("canary") or {}
        done = canary.get("phase") == "Promoted" and canary_deployment(apps, namespace, name) is None
        return obj if done and condition(obj, "RolloutReady")["status"] == "True" else None

    obj = eventually(promoted, timeout=90, description="promoted, rolled out, the canary removed")
    assert obj["status"]["engine"]["key"] == "2" * 32
    assert obj["status"]["canary"]["reason"] == "RegressionAccepted"
    assert apps.read_namespaced_deployment(name, namespace).metadata.annotations[
        "tailpilot.io/engine-key"
    ] == ("2" * 32)
    eventually(
        lambda: (
            not any(
                c.metadata.name == f"{name}-canary-model-config"
                for c in core.list_namespaced_config_map(namespace).items
            )
        ),
        timeout=30,
        description="the canary's ConfigMap removed",
    )

    # A third engine starts a canary; a spec change while it runs stops it.
    patch(k8s, namespace, name, {"model": {"sha256": "c" * 64}})
    play_build(core, running_build_pod(core, namespace), result=gpu_build_result("3" * 32))
    play_profile(core, namespace, GPU_PROFILE)
    eventually(lambda: canary_deployment(apps, namespace, name), timeout=60, description="the third canary")
    patch(k8s, namespace, name, {"model": {"sha256": "d" * 64}})

    def stopped():  # type: ignore[no-untyped-def]
        obj = custom_object(k8s, namespace, name)
        return (
            obj
            if obj["status"].get("canary") is None and canary_deployment(apps, namespace, name) is None
            else None
        )

    obj = eventually(stopped, timeout=60, description="the canary stopped by the spec change")
    assert obj["status"]["engine"]["key"] == "2" * 32  # still the promoted engine
    events = events_once(core, namespace, lambda es: any(e.reason == "CanaryStopped" for e in es))
    reasons = [e.reason for e in events]
    assert reasons.count("CanaryStarted") == 2, reasons
    assert {"CanaryStopped", "CanaryPromoted", "RegressionAccepted"} <= set(reasons), reasons


def users_deployment(name: str) -> client.V1Deployment:
    labels = {"app": name}
    return client.V1Deployment(
        metadata=client.V1ObjectMeta(name=name, labels=labels),
        spec=client.V1DeploymentSpec(
            replicas=0,
            selector=client.V1LabelSelector(match_labels=labels),
            template=client.V1PodTemplateSpec(
                metadata=client.V1ObjectMeta(labels=labels),
                spec=client.V1PodSpec(
                    containers=[client.V1Container(name="app", image="registry.k8s.io/pause:3.10")]
                ),
            ),
        ),
    )


def test_objects_the_service_does_not_control_are_never_taken_over(k8s, namespace, operator, example):
    core, apps = client.CoreV1Api(k8s), client.AppsV1Api(k8s)
    isvc = example("gpu-tensorrt-h100.yaml", namespace=namespace)
    isvc["spec"]["rollout"] = {"strategy": "canary"}
    name = isvc["metadata"]["name"]
    # Someone else's Deployment has the canary's name (say, a service named NAME-canary's).
    apps.create_namespaced_deployment(namespace, users_deployment(f"{name}-canary"))
    serve_gpu_example(k8s, namespace, isvc, "1" * 32)

    patch(k8s, namespace, name, {"engine": {"precision": "fp32"}})
    play_build(core, running_build_pod(core, namespace), result=gpu_build_result("2" * 32))
    play_profile(core, namespace, GPU_PROFILE)

    def rolled_back():  # type: ignore[no-untyped-def]
        obj = custom_object(k8s, namespace, name)
        canary = (obj.get("status") or {}).get("canary") or {}
        return obj if canary.get("phase") == "RolledBack" else None

    obj = eventually(rolled_back, timeout=60, description="the canary refused its taken name")
    assert obj["status"]["canary"]["reason"] == "ChildNameTaken"
    assert f"Deployment {name}-canary exists and is not controlled" in obj["status"]["canary"]["message"]
    assert condition(obj, "RolloutBlocked")["status"] == "True"
    assert obj["status"]["engine"]["key"] == "1" * 32 and condition(obj, "Ready")["status"] == "True"
    theirs = apps.read_namespaced_deployment(f"{name}-canary", namespace)
    assert not theirs.metadata.owner_references and theirs.spec.replicas == 0  # untouched
    assert theirs.spec.template.spec.containers[0].image == "registry.k8s.io/pause:3.10"
    eventually(
        lambda: all(
            cm.metadata.name != f"{name}-canary-model-config"
            for cm in core.list_namespaced_config_map(namespace).items
        ),
        timeout=30,
        description="the canary's own ConfigMap removed",
    )


def test_a_child_name_held_by_another_object_is_reported_not_adopted(k8s, namespace, operator, example):
    core = client.CoreV1Api(k8s)
    isvc = example("gpu-tensorrt-h100.yaml", namespace=namespace)
    name = isvc["metadata"]["name"]
    core.create_namespaced_config_map(
        namespace,
        client.V1ConfigMap(metadata=client.V1ObjectMeta(name=f"{name}-model-config"), data={"mine": "1"}),
    )
    client.CustomObjectsApi(k8s).create_namespaced_custom_object(
        "tailpilot.io", "v1alpha1", namespace, "inferenceservices", isvc
    )
    play_build(core, running_build_pod(core, namespace), result=gpu_build_result("1" * 32))
    play_profile(core, namespace, GPU_PROFILE)

    def refused():  # type: ignore[no-untyped-def]
        cond = condition(custom_object(k8s, namespace, name), "RolloutReady") or {}
        return cond if cond.get("reason") == "ChildNameTaken" else None

    cond = eventually(refused, timeout=60, description="RolloutReady=False ChildNameTaken")
    assert cond["status"] == "False"
    assert f"ConfigMap {name}-model-config exists and is not controlled" in cond["message"], cond
    mine = core.read_namespaced_config_map(f"{name}-model-config", namespace)
    assert mine.data == {"mine": "1"} and not mine.metadata.owner_references
    events = events_once(core, namespace, lambda es: any(e.reason == "ChildNameTaken" for e in es))
    warnings = [e for e in events if e.reason == "ChildNameTaken"]
    assert len(warnings) == 1, [e.message for e in warnings]  # said once, not every pass
    # Once the user removes theirs, the service's own is created and the rollout proceeds.
    core.delete_namespaced_config_map(f"{name}-model-config", namespace)
    eventually(
        lambda: (
            (condition(custom_object(k8s, namespace, name), "RolloutReady") or {}).get("status") == "True"
        ),
        timeout=90,
        description="rolled out once the name is free",
    )
