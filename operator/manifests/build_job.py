"""The engine build Job: `tailpilot build` for one BuildRequest, its result in the termination message.

The Job is named from `BuildRequest.request_key()` (`<isvc>-build-<key[:10]>`),
so a re-run or an operator restart finds the same Job instead of creating a
second one; a spec change that alters the request gets a new name. The build
container writes its `BuildResult` to /dev/termination-log
(terminationMessagePolicy File), where the operator (or a KWOK stage that
plays a build) reads it from the pod's status. Exit code 2 means an invalid
request: the pod failure policy fails the Job at once instead of retrying.

A build for a GPU target runs on the GPU product it is built for (one GPU):
TensorRT plans are specific to it (trtexec times kernels on that GPU). A build
for the CPU runs under the serving container's CPU limit, so that it does not
take the whole node; every build has a memory request and limit and a bounded
/tmp (the operator's settings). Before building, the Job's store GC removes
engines no service in the namespace names that no build used for the
retention period (`--keep-engines`: the keys the services' statuses name;
`builders/store.py` has the reasoning). The build measures nothing: the profile Job
(`profile_job.py`) measures the engine in the service's own Triton.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any
from urllib.parse import urlparse

from tailpilot.api import constants as c
from tailpilot.api.engine import (
    MODEL_CA_MOUNT,
    MODEL_CREDENTIALS_MOUNT,
    AccuracyTolerance,
    BuildRequest,
    ConfigMapKey,
    S3Access,
    ShapeProfile,
)
from tailpilot.api.quantity import milli_cpu
from tailpilot.api.v1alpha1 import InferenceService, S3Source
from tailpilot.manifests import placement
from tailpilot.manifests.meta import object_meta
from tailpilot.manifests.security import container_security_context, pod_security_context
from tailpilot.manifests.settings import ManifestSettings

CONTAINER_NAME = "build"
#: Exit code of `tailpilot build` for an invalid request (no retry helps).
INVALID_REQUEST_EXIT_CODE = 2


def engine_job_failure_policy(container: str) -> dict[str, Any]:
    """The podFailurePolicy of an engine Job (build or profile) whose program runs in `container`.

    An invalid request fails the Job at once (no retry can help); evictions and preemptions are not
    the Job's fault: retried without counting against its backoffLimit.
    """
    return {
        "rules": [
            {
                "action": "FailJob",
                "onExitCodes": {
                    "containerName": container,
                    "operator": "In",
                    "values": [INVALID_REQUEST_EXIT_CODE],
                },
            },
            {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]},
        ]
    }


def make_build_request(*, isvc: InferenceService, store: str = c.ENGINE_STORE_MOUNT) -> BuildRequest:
    """Derive the BuildRequest from the spec: engine fields only, so batching-only changes keep the key."""
    spec = isvc.spec
    serving = placement.ServingTarget.from_service(isvc)
    return BuildRequest(
        model_uri=spec.model.uri,
        model_sha256=spec.model.sha256,
        model_name=spec.model_name(isvc.name),
        backend=spec.engine.backend.value,
        precision=spec.engine.precision.value,
        calibration_uri=spec.engine.calibration.uri if spec.engine.calibration else None,
        calibration_sha256=spec.engine.calibration.sha256 if spec.engine.calibration else None,
        shapes=tuple(
            ShapeProfile(input=s.input, min=tuple(s.min), opt=tuple(s.opt), max=tuple(s.max))
            for s in spec.engine.shapes
        ),
        max_batch_size=spec.batching.max_batch_size,
        target=serving.build_target,
        serving_variant=spec.runtime.serving_variant.value,
        cpu_limit_millis=None if serving.gpu_product else serving_cpu_limit_millis(isvc),
        store=store,
        s3=_s3_access(spec.model.s3),
        hf_endpoint=spec.model.hf.endpoint if spec.model.hf else None,
        service_account=spec.model.service_account_name,
        ca_bundle=ConfigMapKey(name=ca.name, key=ca.key)
        if (ca := spec.model.ca_bundle_config_map_ref)
        else None,
        credentials_secret=spec.model.credentials_secret_ref.name
        if spec.model.credentials_secret_ref
        else None,
        accuracy_tolerance=AccuracyTolerance(
            max_relative_error=spec.engine.accuracy_tolerance.max_relative_error,
            min_top1_agreement=spec.engine.accuracy_tolerance.min_top1_agreement,
        ),
    )


def _s3_access(source: S3Source | None) -> S3Access | None:
    if source is None:
        return None
    return S3Access(endpoint=source.endpoint, region=source.region, addressing_style=source.addressing_style)


def serving_cpu_limit_millis(isvc: InferenceService) -> int | None:
    """The Triton container's CPU limit in millicores; None without one.

    Raises:
        ValueError: when the limit is not a CPU quantity (the operator's validation reports it first).
    """
    limits = (isvc.spec.runtime.resources or {}).get("limits") or {}
    return milli_cpu(limits.get("cpu"))


def build_job_name(*, isvc_name: str, request_key: str) -> str:
    """`<isvc>-build-<key[:10]>` (at most 46 + 17 = 63 characters, a valid label value for job-name)."""
    return f"{isvc_name}-build-{request_key[:10]}"


def _pvc_claims(request: BuildRequest) -> list[str]:
    uris = [request.model_uri] + ([request.calibration_uri] if request.calibration_uri else [])
    return sorted({urlparse(u).netloc for u in uris if u.startswith("pvc://")})


def _volumes(
    request: BuildRequest, settings: ManifestSettings
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    volumes: list[dict[str, Any]] = [
        {"name": "engines", "persistentVolumeClaim": {"claimName": settings.engine_store_claim}},
        # Bounded: on the node's disk, an unbounded /tmp lets one build fill it for every pod there.
        {"name": "tmp", "emptyDir": {"sizeLimit": settings.build_tmp_size}},
    ]
    mounts: list[dict[str, Any]] = [
        {"name": "engines", "mountPath": request.store},
        {"name": "tmp", "mountPath": "/tmp"},
    ]
    for i, claim in enumerate(_pvc_claims(request)):
        volumes.append(
            {"name": f"source-{i}", "persistentVolumeClaim": {"claimName": claim, "readOnly": True}}
        )
        mounts.append({"name": f"source-{i}", "mountPath": f"{c.PVC_SOURCE_ROOT}/{claim}", "readOnly": True})
    if request.credentials_secret:
        # Optional: a missing Secret leaves the directory empty, and the build names the failure
        # (ModelCredentialsMissing) instead of a pod stuck creating its container.
        volumes.append(
            {
                "name": "model-credentials",
                "secret": {"secretName": request.credentials_secret, "optional": True, "defaultMode": 0o440},
            }
        )
        mounts.append({"name": "model-credentials", "mountPath": MODEL_CREDENTIALS_MOUNT, "readOnly": True})
    if request.ca_bundle:
        volumes.append({"name": "model-ca", "configMap": {"name": request.ca_bundle.name, "optional": True}})
        mounts.append({"name": "model-ca", "mountPath": MODEL_CA_MOUNT, "readOnly": True})
    if request.target != "cpu":
        volumes.append({"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": settings.shm_size}})
        mounts.append({"name": "dshm", "mountPath": "/dev/shm"})
    return volumes, mounts


#: CPU a build requests when it runs under no CPU limit (a GPU target, or a CPU service without
#: one): it was scheduled as needing none, beside pods whose requests the node had promised.
BUILD_CPU_REQUEST = "500m"


def _resources(request: BuildRequest, settings: ManifestSettings) -> dict[str, Any]:
    """Memory as the operator says; one GPU for a GPU target; the serving pods' CPU limit for a CPU one.

    The CPU limit is its request too (as Kubernetes defaults it); without one, `BUILD_CPU_REQUEST`.
    The memory limit keeps a build (ONNX Runtime's quantizer, trtexec on a large model) from taking
    the node's memory from its serving pods; a build past it is OOM-killed and retried by its Job.
    """
    limits: dict[str, Any] = {"memory": settings.build_memory_limit}
    requests: dict[str, Any] = {"memory": settings.build_memory_request, "cpu": BUILD_CPU_REQUEST}
    if request.target != "cpu":
        limits[c.GPU_RESOURCE] = 1
    elif request.cpu_limit_millis is not None:
        limits["cpu"] = requests["cpu"] = f"{request.cpu_limit_millis}m"
    return {"requests": requests, "limits": limits}


def _gc_args(settings: ManifestSettings, engines_in_use: Collection[str]) -> list[str]:
    """The store GC's flags: the engines the namespace's services name, the retention and budget."""
    args = ["--store-gc", "--gc-retention-hours", f"{settings.store_retention_hours:g}"]
    if settings.store_budget_bytes is not None:
        args += ["--gc-budget-bytes", str(settings.store_budget_bytes)]
    if engines_in_use:
        args += ["--keep-engines", ",".join(sorted(engines_in_use))]
    return args


def build_job(
    *,
    isvc: InferenceService,
    request: BuildRequest,
    settings: ManifestSettings,
    engines_in_use: Collection[str] = (),
) -> dict[str, Any]:
    """Build the batch/v1 Job that builds (or finds cached) the engine for `request`.

    `engines_in_use`: every engine key the statuses of the services in the namespace name (the
    store is the namespace's claim); the build's store GC never removes them.
    """
    key = request.request_key()
    on_gpu = request.target != "cpu"
    volumes, mounts = _volumes(request, settings)
    request_json = request.model_dump_json(by_alias=True, exclude_none=True)
    labels = {c.LABEL_REQUEST_KEY: key}
    meta = object_meta(
        isvc=isvc,
        name=build_job_name(isvc_name=isvc.name, request_key=key),
        component=c.COMPONENT_BUILD,
        app_name=c.APP_NAME_BUILDER,
        extra_labels=labels,
    )
    pod_labels = {k: v for k, v in meta["labels"].items()}
    container: dict[str, Any] = {
        "name": CONTAINER_NAME,
        "image": settings.builder_image,
        "imagePullPolicy": settings.image_pull_policy,
        "command": ["tailpilot"],
        "args": [
            "build",
            "--request",
            request_json,
            "--result-file",
            "/dev/termination-log",
            "--pvc-root",
            c.PVC_SOURCE_ROOT,
            *_gc_args(settings, engines_in_use),
            *(["--credentials-dir", MODEL_CREDENTIALS_MOUNT] if request.credentials_secret else []),
            *(["--ca-bundle", f"{MODEL_CA_MOUNT}/{request.ca_bundle.key}"] if request.ca_bundle else []),
        ],
        # The root filesystem is read-only: caches under $HOME go to the /tmp emptyDir.
        "env": [{"name": "HOME", "value": "/tmp"}],
        "terminationMessagePath": "/dev/termination-log",
        "terminationMessagePolicy": "File",
        "volumeMounts": mounts,
        "securityContext": container_security_context(),
        "resources": _resources(request, settings),
    }
    pod_spec: dict[str, Any] = {
        "restartPolicy": "Never",
        # No Kubernetes API token: a build reads its model, not the cluster. A source's cloud identity
        # (IRSA, Workload Identity) comes with the ServiceAccount's own webhook-injected token.
        "automountServiceAccountToken": False,
        **({"serviceAccountName": request.service_account} if request.service_account else {}),
        "enableServiceLinks": False,
        "securityContext": pod_security_context(settings.run_as_user),
        "containers": [container],
        "volumes": volumes,
    }
    if on_gpu:
        pod_spec["nodeSelector"] = placement.node_selector(gpu_product=request.target, user={})
        pod_spec["tolerations"] = placement.tolerations(gpu=True, user=[])
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": meta,
        "spec": {
            "backoffLimit": settings.build_backoff_limit,
            "activeDeadlineSeconds": settings.build_deadline_seconds,
            "ttlSecondsAfterFinished": settings.build_ttl_seconds,
            "podFailurePolicy": engine_job_failure_policy(CONTAINER_NAME),
            "template": {"metadata": {"labels": pod_labels}, "spec": pod_spec},
        },
    }
