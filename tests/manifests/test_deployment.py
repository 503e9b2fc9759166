from __future__ import annotations

from typing import Any

from tailpilot.api import constants as c
from tailpilot.manifests.deployment import MODEL_REPOSITORY_SCRIPT, model_repository_init, triton_deployment
from tailpilot.manifests.triton_configmap import rollout_hash, triton_configmap

from .fixtures import (
    H100,
    SETTINGS,
    admin_key,
    assert_mounts_resolve,
    assert_restricted,
    build_result,
    make_isvc,
)

KEY = "c0ffee" * 6 + "abcd"


def _deploy(builder, replicas: int = 2) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    return triton_deployment(
        isvc=builder.obj(),
        engine_key=KEY,
        rollout_hash="h1",
        replicas=replicas,
        settings=SETTINGS,
        admin_key=admin_key(builder.obj().name),
    )


def test_triton_args_ports_probes() -> None:
    dep = _deploy(make_isvc("resnet"))
    ctr = dep["spec"]["template"]["spec"]["containers"][0]
    assert "--model-control-mode=explicit" in ctr["args"]
    assert "--load-model=resnet" in ctr["args"]
    assert "--metrics-config=summary_latencies=true" in ctr["args"]
    assert {(p["name"], p["containerPort"]) for p in ctr["ports"]} == {
        ("http", 8000),
        ("grpc", 8001),
        ("metrics", 8002),
    }
    assert ctr["readinessProbe"]["httpGet"]["path"] == "/v2/health/ready"
    assert ctr["livenessProbe"]["httpGet"]["path"] == "/v2/health/live"
    assert (
        ctr["startupProbe"]["periodSeconds"] * ctr["startupProbe"]["failureThreshold"]
        == SETTINGS.cpu_startup_seconds
    )
    # A started replica is probed ready within seconds: scale-ups wait for no probe period.
    assert ctr["startupProbe"]["periodSeconds"] <= 2
    assert ctr["image"] == SETTINGS.triton_image
    assert dep["spec"]["replicas"] == 2


def test_gpu_placement_and_limits() -> None:
    builder = (
        make_isvc("a")
        .gpu(count=2)
        .runtime(
            nodeSelector={"pool": "inference", c.GPU_PRODUCT_LABEL: "wrong"},
            tolerations=[{"key": "dedicated", "operator": "Equal", "value": "ml", "effect": "NoSchedule"}],
            resources={"limits": {"nvidia.com/gpu": 7, "memory": "16Gi"}, "requests": {"cpu": "4"}},
        )
    )
    pod = _deploy(builder)["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"pool": "inference", c.GPU_PRODUCT_LABEL: H100}
    assert len(pod["tolerations"]) == 2 and pod["tolerations"][1]["key"] == "nvidia.com/gpu"
    resources = pod["containers"][0]["resources"]
    assert resources == {"limits": {"nvidia.com/gpu": 2, "memory": "16Gi"}, "requests": {"cpu": "4"}}
    startup = pod["containers"][0]["startupProbe"]
    assert startup["periodSeconds"] * startup["failureThreshold"] == SETTINGS.gpu_startup_seconds
    assert "affinity" not in pod


def test_cpu_pods_have_no_gpu_anything() -> None:
    pod = _deploy(make_isvc("a"))["spec"]["template"]["spec"]
    assert "nodeSelector" not in pod and "tolerations" not in pod and "affinity" not in pod
    assert "nvidia.com/gpu" not in str(pod["containers"][0]["resources"])


def test_exclusive_anti_affinity_against_other_services_only() -> None:
    user = {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": []}}
    pod = _deploy(make_isvc("a").gpu(exclusive=True).runtime(affinity=user))["spec"]["template"]["spec"]
    assert pod["affinity"]["nodeAffinity"] == user["nodeAffinity"]
    here, elsewhere = pod["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert here["topologyKey"] == elsewhere["topologyKey"] == "kubernetes.io/hostname"
    # In its own namespace: every other service's pods.
    assert here["namespaces"] == ["ml"] and "namespaceSelector" not in here
    assert here["labelSelector"]["matchExpressions"] == [
        {"key": c.LABEL_ISVC, "operator": "Exists"},
        {"key": c.LABEL_ISVC, "operator": "NotIn", "values": ["a"]},
    ]
    # In every other namespace: every service's pods, one named "a" too.
    assert elsewhere["namespaceSelector"] == {
        "matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["ml"]}]
    }
    assert elsewhere["labelSelector"]["matchExpressions"] == [{"key": c.LABEL_ISVC, "operator": "Exists"}]
    # Its own pods carry the label with value "a", so the term does not repel them.
    labels = _deploy(make_isvc("a").gpu(exclusive=True))["spec"]["template"]["metadata"]["labels"]
    assert labels[c.LABEL_ISVC] == "a"


def test_rollout_never_drops_ready_pods_and_rolls_on_engine_change() -> None:
    dep = _deploy(make_isvc("a"))
    assert dep["spec"]["strategy"]["rollingUpdate"] == {"maxUnavailable": 0, "maxSurge": 1}
    annotations = dep["spec"]["template"]["metadata"]["annotations"]
    assert annotations[c.ANNOTATION_ENGINE_KEY] == KEY and annotations[c.ANNOTATION_CONFIG_HASH] == "h1"
    selector = dep["spec"]["selector"]["matchLabels"]
    assert selector.items() <= dep["spec"]["template"]["metadata"]["labels"].items()


def test_a_move_to_another_gpu_product_starts_every_new_pod_at_once_and_drops_none() -> None:
    dep = triton_deployment(
        isvc=make_isvc("a").gpu().obj(),
        engine_key=KEY,
        rollout_hash="h1",
        replicas=6,
        settings=SETTINGS,
        admin_key=admin_key("a"),
        moving=True,
    )
    assert dep["spec"]["strategy"]["rollingUpdate"] == {"maxUnavailable": 0, "maxSurge": "100%"}
    assert dep["spec"]["replicas"] == 6


def test_secure_pod_and_model_repository() -> None:
    pod = _deploy(make_isvc("a").gpu())["spec"]["template"]["spec"]
    assert_restricted(pod)
    assert_mounts_resolve(pod)
    assert pod["automountServiceAccountToken"] is False
    init = pod["initContainers"][0]
    assert init["command"] == ["sh", "-c", MODEL_REPOSITORY_SCRIPT]
    assert init["args"] == [
        "model-repository",
        f"/engines/engines/{KEY}/repository/a/1",
        "/models/a",
        "/config/config.pbtxt",
        KEY,
    ]
    engines = [m for m in pod["containers"][0]["volumeMounts"] if m["name"] == "engines"]
    assert engines[0]["readOnly"] is True


def test_configmap_and_rollout_hash() -> None:
    isvc = make_isvc("a").max_batch(16).preferred(4, 8).obj()
    result = build_result()
    cm = triton_configmap(isvc=isvc, result=result, batching=isvc.spec.batching.to_config())
    text = cm["data"]["config.pbtxt"]
    assert 'name: "a"' in text and "max_batch_size: 16" in text and "preferred_batch_size: 8" in text
    assert cm["metadata"]["name"] == "a-model-config"
    rebatched = make_isvc("a").max_batch(16).preferred(16).queue_delay(10).obj()
    assert rollout_hash(isvc=rebatched, result=result) == rollout_hash(isvc=isvc, result=result)
    assert rollout_hash(isvc=isvc, result=build_result(engine_key="f" * 40)) != rollout_hash(
        isvc=isvc, result=result
    )
    assert rollout_hash(isvc=isvc, result=build_result(backend="python")) != rollout_hash(
        isvc=isvc, result=result
    )


def test_the_model_repository_script_takes_its_values_as_arguments_never_as_code(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import subprocess

    # No value is in the script's text: a key or a path holding shell syntax stays data.
    hostile = 'x"; touch "$HOME/pwned"; echo "$(id)'
    init = model_repository_init(image="triton", model_name="m", engine_key=hostile, settings=SETTINGS)
    assert hostile not in init["command"][-1] and hostile in init["args"]
    # Run as the kubelet runs it (command then args), with the store and the model directory in tmp.
    store = tmp_path / f"engines/{hostile}/repository/m/1"
    store.mkdir(parents=True)
    config = tmp_path / "config.pbtxt"
    config.write_text('name: "m"')
    args = ["model-repository", str(store), str(tmp_path / "models/m"), str(config), hostile]
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    done = subprocess.run([*init["command"], *args], env=env, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "models/m/1").resolve() == store.resolve()
    assert (tmp_path / "models/m/config.pbtxt").read_text() == 'name: "m"'
    assert not (tmp_path / "pwned").exists()
    # A key not in the store says so, quoted as given, and runs nothing.
    missing = [*args[:1], str(tmp_path / "absent"), *args[2:]]
    done = subprocess.run([*init["command"], *missing], env=env, capture_output=True, text=True, check=False)
    assert done.returncode == 1 and f"engine {hostile} not found in the store" in done.stderr
    assert not (tmp_path / "pwned").exists()


def test_triton_requests_a_floor_of_what_the_user_names_neither_request_nor_limit_of() -> None:
    """Never BestEffort: CPU and memory the spec leaves out are requested at the defaults."""
    from tailpilot.manifests.deployment import DEFAULT_TRITON_REQUESTS

    bare = _deploy(make_isvc("a").gpu().tensorrt())["spec"]["template"]["spec"]["containers"][0]
    assert bare["resources"]["requests"] == DEFAULT_TRITON_REQUESTS
    # A limit alone is the request (Kubernetes' default): nothing is added beside it.
    limited = make_isvc("a").runtime(resources={"limits": {"cpu": "2"}})
    resources = _deploy(limited)["spec"]["template"]["spec"]["containers"][0]["resources"]
    assert resources == {"limits": {"cpu": "2"}, "requests": {"memory": DEFAULT_TRITON_REQUESTS["memory"]}}
    # What the user requests is kept as written.
    asked = make_isvc("a").runtime(resources={"requests": {"cpu": "100m", "memory": "64Mi"}})
    resources = _deploy(asked)["spec"]["template"]["spec"]["containers"][0]["resources"]
    assert resources == {"requests": {"cpu": "100m", "memory": "64Mi"}}
