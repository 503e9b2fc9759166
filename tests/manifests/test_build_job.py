from __future__ import annotations

import json
from dataclasses import replace

from tailpilot.api import constants as c
from tailpilot.api.engine import MODEL_CA_MOUNT, MODEL_CREDENTIALS_MOUNT, BuildRequest, ConfigMapKey
from tailpilot.manifests.build_job import BUILD_CPU_REQUEST, build_job, build_job_name, make_build_request

from .fixtures import H100, SETTINGS, assert_mounts_resolve, assert_restricted, make_isvc


def _job(builder):  # type: ignore[no-untyped-def]
    isvc = builder.obj()
    return build_job(isvc=isvc, request=make_build_request(isvc=isvc), settings=SETTINGS)


def test_request_key_ignores_batching_only_changes() -> None:
    base = make_isvc("a").gpu().tensorrt()
    key = make_build_request(isvc=base.obj()).request_key()
    rebatched = make_isvc("a").gpu().tensorrt().preferred(4, 8).queue_delay(100).slo(10)
    assert make_build_request(isvc=rebatched.obj()).request_key() == key
    assert make_build_request(isvc=make_isvc("a").gpu().tensorrt("fp32").obj()).request_key() != key
    assert make_build_request(isvc=make_isvc("a").gpu().tensorrt().max_batch(64).obj()).request_key() != key
    assert (
        make_build_request(isvc=make_isvc("a").gpu(product="NVIDIA-L4").tensorrt().obj()).request_key() != key
    )


def test_request_carries_the_spec() -> None:
    req = make_build_request(isvc=make_isvc("a").gpu().tensorrt().max_batch(16).obj())
    assert (req.backend, req.precision, req.target, req.max_batch_size) == ("tensorrt", "fp16", H100, 16)
    # The accuracy guard's defaults, as the spec defaults them.
    assert req.accuracy_tolerance is not None
    assert (req.accuracy_tolerance.max_relative_error, req.accuracy_tolerance.min_top1_agreement) == (
        0.1,
        0.9,
    )
    assert req.model_name == "a" and req.store == c.ENGINE_STORE_MOUNT
    assert make_build_request(isvc=make_isvc("b").obj()).target == "cpu"


def test_job_name_and_command() -> None:
    isvc = make_isvc("resnet").gpu().tensorrt().obj()
    request = make_build_request(isvc=isvc)
    job = build_job(isvc=isvc, request=request, settings=SETTINGS)
    assert job["metadata"]["name"] == f"resnet-build-{request.request_key()[:10]}"
    assert len(build_job_name(isvc_name="x" * 46, request_key=request.request_key())) == 63
    ctr = job["spec"]["template"]["spec"]["containers"][0]
    assert ctr["terminationMessagePolicy"] == "File"
    args = ctr["args"]
    assert args[0] == "build" and args[args.index("--result-file") + 1] == "/dev/termination-log"
    assert BuildRequest.model_validate(json.loads(args[args.index("--request") + 1])) == request
    assert job["metadata"]["labels"][c.LABEL_REQUEST_KEY] == request.request_key()
    assert job["metadata"]["ownerReferences"][0]["uid"] == "uid-resnet"
    spec = job["spec"]
    assert spec["backoffLimit"] == SETTINGS.build_backoff_limit
    assert spec["activeDeadlineSeconds"] == SETTINGS.build_deadline_seconds
    assert spec["ttlSecondsAfterFinished"] == SETTINGS.build_ttl_seconds
    assert spec["template"]["spec"]["restartPolicy"] == "Never"


def test_gpu_build_is_pinned_to_the_product() -> None:
    pod = _job(make_isvc("a").gpu(count=4).tensorrt())["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {c.GPU_PRODUCT_LABEL: H100}
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod["tolerations"]
    assert pod["containers"][0]["resources"]["limits"] == {"nvidia.com/gpu": 1, "memory": "8Gi"}
    assert_restricted(pod)
    assert_mounts_resolve(pod)


def test_cpu_build_has_no_gpu_and_mounts_sources() -> None:
    pod = _job(make_isvc("a").model(uri="pvc://models/m.onnx"))["spec"]["template"]["spec"]
    assert "nodeSelector" not in pod and "tolerations" not in pod
    assert pod["containers"][0]["resources"] == {
        "requests": {"memory": "1Gi", "cpu": BUILD_CPU_REQUEST},
        "limits": {"memory": "8Gi"},
    }
    claims = {v["persistentVolumeClaim"]["claimName"] for v in pod["volumes"] if "persistentVolumeClaim" in v}
    assert claims == {SETTINGS.engine_store_claim, "models"}
    mounts = {m["mountPath"] for m in pod["containers"][0]["volumeMounts"]}
    assert {c.ENGINE_STORE_MOUNT, f"{c.PVC_SOURCE_ROOT}/models", "/tmp"} <= mounts
    assert_restricted(pod)
    assert_mounts_resolve(pod)


def test_cpu_build_runs_under_the_serving_cpu_limit() -> None:
    """Its profile then says what one serving pod can do, not what the whole node can."""
    limited = make_isvc("a").runtime(resources={"limits": {"cpu": "1.5", "memory": "2Gi"}})
    request = make_build_request(isvc=limited.obj())
    assert request.cpu_limit_millis == 1500
    assert _job(limited)["spec"]["template"]["spec"]["containers"][0]["resources"] == {
        "requests": {"cpu": "1500m", "memory": "1Gi"},
        "limits": {"cpu": "1500m", "memory": "8Gi"},
    }
    assert request.request_key() != make_build_request(isvc=make_isvc("a").obj()).request_key()
    # Requests alone are no limit, and a GPU engine's profile is the GPU's: neither asks for one.
    requested_only = make_isvc("a").runtime(resources={"requests": {"cpu": "2"}}).obj()
    assert make_build_request(isvc=requested_only).cpu_limit_millis is None
    gpu = make_isvc("a").gpu().tensorrt().runtime(resources={"limits": {"cpu": "4"}})
    assert make_build_request(isvc=gpu.obj()).cpu_limit_millis is None
    assert _job(gpu)["spec"]["template"]["spec"]["containers"][0]["resources"] == {
        "requests": {"memory": "1Gi", "cpu": BUILD_CPU_REQUEST},
        "limits": {"nvidia.com/gpu": 1, "memory": "8Gi"},
    }


def test_the_build_pod_has_a_memory_limit_and_a_bounded_tmp_both_from_the_settings() -> None:
    isvc = make_isvc("a").obj()
    settings = replace(SETTINGS, build_memory_request="3Gi", build_memory_limit="12Gi", build_tmp_size="2Gi")
    pod = build_job(isvc=isvc, request=make_build_request(isvc=isvc), settings=settings)["spec"]["template"][
        "spec"
    ]
    resources = pod["containers"][0]["resources"]
    assert (resources["requests"]["memory"], resources["limits"]["memory"]) == ("3Gi", "12Gi")
    # The root filesystem is read-only: /tmp is the emptyDir, and it is bounded.
    assert pod["containers"][0]["securityContext"]["readOnlyRootFilesystem"] is True
    tmp = next(v for v in pod["volumes"] if v["name"] == "tmp")
    assert tmp == {"name": "tmp", "emptyDir": {"sizeLimit": "2Gi"}}
    assert {"name": "tmp", "mountPath": "/tmp"} in pod["containers"][0]["volumeMounts"]


def test_the_build_is_told_the_engines_in_use_and_the_stores_retention() -> None:
    isvc = make_isvc("a").obj()
    settings = replace(SETTINGS, store_retention_hours=48, store_budget_bytes=10**9)
    job = build_job(
        isvc=isvc, request=make_build_request(isvc=isvc), settings=settings, engines_in_use={"k2", "k1"}
    )
    args = job["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[args.index("--store-gc") :][1:] == [
        "--gc-retention-hours",
        "48",
        "--gc-budget-bytes",
        "1000000000",
        "--keep-engines",
        "k1,k2",
    ]
    # The keys in use change nothing that names the Job (a re-run finds the same Job).
    assert (
        job["metadata"]["name"]
        == build_job(isvc=isvc, request=make_build_request(isvc=isvc), settings=SETTINGS)["metadata"]["name"]
    )


def test_an_s3_model_carries_its_store_and_mounts_its_credentials_secret_read_only() -> None:
    store = {"endpoint": "https://minio.storage.svc:9000", "region": "eu-west-1", "addressingStyle": "path"}
    isvc = (
        make_isvc("a").model(uri="s3://models/m.onnx", s3=store, credentialsSecretRef={"name": "keys"}).obj()
    )
    request = make_build_request(isvc=isvc)
    assert request.s3 is not None and request.credentials_secret == "keys"
    assert (request.s3.endpoint, request.s3.region, request.s3.addressing_style) == (
        "https://minio.storage.svc:9000",
        "eu-west-1",
        "path",
    )
    pod = build_job(isvc=isvc, request=request, settings=SETTINGS)["spec"]["template"]["spec"]
    (secret,) = [v["secret"] for v in pod["volumes"] if "secret" in v]
    # Optional: a missing Secret is the build's named failure, not a pod stuck creating its container.
    assert secret == {"secretName": "keys", "optional": True, "defaultMode": 0o440}
    ctr = pod["containers"][0]
    (mount,) = [m for m in ctr["volumeMounts"] if m["mountPath"] == MODEL_CREDENTIALS_MOUNT]
    assert mount["readOnly"] is True
    assert ctr["args"][ctr["args"].index("--credentials-dir") + 1] == MODEL_CREDENTIALS_MOUNT
    # Nothing of the Secret's is in the request or the environment: the Job names it, the kubelet mounts it.
    assert "env" not in ctr or all("valueFrom" not in e for e in ctr["env"])
    assert_mounts_resolve(pod)
    assert_restricted(pod)


def test_naming_another_secret_makes_a_new_build_and_a_source_without_one_mounts_none() -> None:
    def request(**model: object) -> BuildRequest:
        return make_build_request(isvc=make_isvc("a").model(uri="s3://models/m.onnx", **model).obj())

    plain = request()
    assert request(credentialsSecretRef={"name": "one"}).request_key() != plain.request_key()
    assert (
        request(credentialsSecretRef={"name": "one"}).request_key()
        != request(credentialsSecretRef={"name": "two"}).request_key()
    )
    assert request(s3={"endpoint": "http://store:9000"}).request_key() != plain.request_key()
    pod = build_job(
        isvc=make_isvc("a").model(uri="s3://models/m.onnx").obj(), request=plain, settings=SETTINGS
    )
    spec = pod["spec"]["template"]["spec"]
    assert not [v for v in spec["volumes"] if "secret" in v]
    assert "--credentials-dir" not in spec["containers"][0]["args"]


def test_a_private_ca_config_map_is_mounted_optional_and_named_to_the_build() -> None:
    ca = {"name": "corp-ca", "key": "bundle.pem"}
    isvc = (
        make_isvc("a").model(uri="https://models.corp/m.onnx", sha256="1" * 64, caBundleConfigMapRef=ca).obj()
    )
    request = make_build_request(isvc=isvc)
    assert request.ca_bundle is not None and (request.ca_bundle.name, request.ca_bundle.key) == (
        "corp-ca",
        "bundle.pem",
    )
    pod = build_job(isvc=isvc, request=request, settings=SETTINGS)["spec"]["template"]["spec"]
    (config_map,) = [v["configMap"] for v in pod["volumes"] if "configMap" in v]
    assert config_map == {"name": "corp-ca", "optional": True}
    args = pod["containers"][0]["args"]
    assert args[args.index("--ca-bundle") + 1] == f"{MODEL_CA_MOUNT}/bundle.pem"
    assert_mounts_resolve(pod)
    # The key defaults to ca.crt; another ConfigMap is another request, hence another build.
    default = make_isvc("a").model(
        uri="https://m/m.onnx", sha256="1" * 64, caBundleConfigMapRef={"name": "x"}
    )
    assert make_build_request(isvc=default.obj()).ca_bundle == ConfigMapKey(name="x", key="ca.crt")
    assert make_build_request(isvc=default.obj()).request_key() != request.request_key()


def test_the_build_runs_as_the_service_account_the_spec_names_still_without_an_api_token() -> None:
    isvc = make_isvc("a").model(uri="s3://models/m.onnx", serviceAccountName="model-reader").obj()
    request = make_build_request(isvc=isvc)
    pod = build_job(isvc=isvc, request=request, settings=SETTINGS)["spec"]["template"]["spec"]
    # Its cloud identity (an IRSA or Workload Identity annotation) is the ServiceAccount's; the
    # Kubernetes API token stays out: a build reads its model, not the cluster.
    assert (pod["serviceAccountName"], pod["automountServiceAccountToken"]) == ("model-reader", False)
    assert (
        request.request_key()
        != make_build_request(isvc=make_isvc("a").model(uri="s3://models/m.onnx").obj()).request_key()
    )
    default = build_job(
        isvc=make_isvc("b").obj(), request=make_build_request(isvc=make_isvc("b").obj()), settings=SETTINGS
    )
    assert "serviceAccountName" not in default["spec"]["template"]["spec"]
