"""The profile Job: the service's own Triton as a native sidecar and the profiler beside it."""

from __future__ import annotations

import json

from tailpilot.api import constants as c
from tailpilot.api.engine import ProfileRequest
from tailpilot.manifests.deployment import triton_deployment
from tailpilot.manifests.profile_job import make_profile_request, profile_job, profile_job_name

from .fixtures import H100, SETTINGS, admin_key, assert_mounts_resolve, assert_restricted, make_isvc

ENGINE = "e" * 40


def _request(builder, backend: str = "tensorrt") -> ProfileRequest:  # type: ignore[no-untyped-def]
    return make_profile_request(
        isvc=builder.obj(), engine_key=ENGINE, triton_backend=backend, settings=SETTINGS
    )


def test_the_request_says_where_the_engine_serves() -> None:
    gpu = _request(make_isvc("a").gpu(count=2).tensorrt().max_batch(32))
    assert (gpu.hardware, gpu.gpu_count, gpu.cpu_limit_millis, gpu.max_batch_size) == (H100, 2, None, 32)
    assert gpu.triton_image == SETTINGS.triton_image and gpu.store == c.ENGINE_STORE_MOUNT
    cpu = _request(make_isvc("b").runtime(resources={"limits": {"cpu": "1500m"}}), backend="python")
    assert (cpu.hardware, cpu.gpu_count, cpu.cpu_limit_millis) == ("cpu", 0, 1500)


def test_the_key_changes_with_where_it_serves_not_with_batching() -> None:
    key = _request(make_isvc("a").gpu().tensorrt()).profile_key()
    assert (
        _request(make_isvc("a").gpu().tensorrt().preferred(4, 8).queue_delay(100).slo(10)).profile_key()
        == key
    )
    assert _request(make_isvc("a").gpu(count=2).tensorrt()).profile_key() != key
    assert _request(make_isvc("a").gpu(product="NVIDIA-L4").tensorrt()).profile_key() != key
    assert _request(make_isvc("a").gpu().tensorrt().runtime(image="my/triton:1")).profile_key() != key
    assert len(profile_job_name(isvc_name="x" * 46, profile_key=key)) == 63


def test_the_pod_runs_the_serving_triton_as_a_sidecar_and_the_profiler_beside_it() -> None:
    builder = make_isvc("resnet").gpu(count=2, exclusive=True).tensorrt()
    isvc, request = builder.obj(), _request(builder)
    job = profile_job(isvc=isvc, request=request, settings=SETTINGS, admin_key=admin_key("resnet"))
    assert job["metadata"]["name"] == f"resnet-profile-{request.profile_key()[:8]}"
    assert job["metadata"]["labels"][c.LABEL_PROFILE_KEY] == request.profile_key()
    assert job["metadata"]["labels"][c.LABEL_COMPONENT] == c.COMPONENT_PROFILE
    pod = job["spec"]["template"]["spec"]
    serving = triton_deployment(
        isvc=isvc,
        engine_key=ENGINE,
        rollout_hash="h",
        replicas=1,
        settings=SETTINGS,
        admin_key=admin_key("resnet"),
    )["spec"]["template"]["spec"]
    init, sidecar = pod["initContainers"]
    # The serving pods' Triton container, unchanged but for the sidecar restart policy, and without
    # the serving pods' drain before SIGTERM (nothing sends to a profile Job's Triton but the profiler).
    assert sidecar["restartPolicy"] == "Always"
    assert "lifecycle" not in sidecar
    serving_container = {k: v for k, v in serving["containers"][0].items() if k != "lifecycle"}
    assert {k: v for k, v in sidecar.items() if k != "restartPolicy"} == serving_container
    assert sidecar["resources"]["limits"]["nvidia.com/gpu"] == 2
    # The engine's own config.pbtxt (as built), not the ConfigMap's batching.
    assert init["args"][3] == f"/engines/engines/{ENGINE}/repository/resnet/config.pbtxt"
    assert ENGINE not in init["command"][-1]  # an argument of the script, not part of its text
    assert all(m["name"] != "model-config" for m in init["volumeMounts"])
    # Placed as the serving pods: product, GPU toleration, exclusive anti-affinity.
    for key in ("nodeSelector", "tolerations", "affinity"):
        assert pod[key] == serving[key], key
    (profiler,) = pod["containers"]
    args = profiler["args"]
    assert profiler["command"] == ["tailpilot"] and args[0] == "profile"
    assert ProfileRequest.model_validate(json.loads(args[args.index("--request") + 1])) == request
    assert args[args.index("--triton-url") + 1] == "$(POD_IP):8001"
    assert {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}} in profiler["env"]
    assert profiler["terminationMessagePolicy"] == "File"
    assert args[args.index("--result-file") + 1] == profiler["terminationMessagePath"]
    assert profiler["image"] == SETTINGS.builder_image
    # The profiler caches the profile in the store: its mount is writable, the sidecar's is not.
    assert {"name": "engines", "mountPath": "/engines"} in profiler["volumeMounts"]
    assert {"name": "engines", "mountPath": "/engines", "readOnly": True} in sidecar["volumeMounts"]
    assert "nvidia.com/gpu" not in profiler["resources"].get("limits", {})
    assert_restricted(pod)
    assert_mounts_resolve(pod)
    spec = job["spec"]
    assert spec["activeDeadlineSeconds"] == SETTINGS.profile_deadline_seconds
    assert spec["backoffLimit"] == SETTINGS.profile_backoff_limit
    assert pod["restartPolicy"] == "Never"
    rule = spec["podFailurePolicy"]["rules"][0]
    assert rule["onExitCodes"]["containerName"] == "profile" and rule["onExitCodes"]["values"] == [2]


def test_a_cpu_profile_runs_under_the_serving_cpu_limit() -> None:
    builder = make_isvc("small").runtime(resources={"limits": {"cpu": "700m", "memory": "1Gi"}})
    job = profile_job(
        isvc=builder.obj(),
        request=_request(builder, backend="python"),
        settings=SETTINGS,
        admin_key=admin_key(builder.obj().name),
    )
    pod = job["spec"]["template"]["spec"]
    assert pod["initContainers"][1]["resources"]["limits"]["cpu"] == "700m"
    assert "nodeSelector" not in pod and "tolerations" not in pod


def test_the_profile_pods_tmp_is_bounded_like_the_build_pods() -> None:
    builder = make_isvc("resnet").gpu(count=1, exclusive=True).tensorrt()
    isvc, request = builder.obj(), _request(builder)
    job = profile_job(isvc=isvc, request=request, settings=SETTINGS, admin_key=admin_key("resnet"))
    volumes = {v["name"]: v for v in job["spec"]["template"]["spec"]["volumes"]}
    assert volumes["tmp"] == {"name": "tmp", "emptyDir": {"sizeLimit": SETTINGS.build_tmp_size}}
