"""The engine profile Job: the engine measured in the service's own Triton, where the service serves.

A build only produces the engine; what it can do depends on where it serves:
the Triton image and backend, the GPU product (or the CPU limit). So once a
build succeeds, the operator runs this Job before the engine serves. Its pod is
a serving pod with a client beside it:

- init container `model-repository` (the Triton image): assembles `/models/<model>/`
  from the store, with the engine's own config.pbtxt (as built; no dynamic
  batching, so each request is one batch of the size the client sends);
- sidecar `triton` (an init container with `restartPolicy: Always`, Kubernetes'
  native sidecar): the serving pods' Triton container as the Deployment runs it
  (image, arguments, resources, probes); the kubelet starts the profiler once its
  startup probe passes and stops it when the profiler has exited, so the Job
  completes;
- container `profile` (the builder image): `tailpilot profile --request ...
  --triton-url $(POD_IP):8001` measures each batch size, fits the service time,
  times one live reload, caches the profile in the store
  (`engines/<key>/profiles/<profileKey>.json`) and writes a `ProfileResult` to
  its termination message, where the operator (or a KWOK stage playing a GPU
  node) reads it. It reads the service's admin key from the same Secret as the
  sidecar (`triton_access`): the reload it times is a restricted call.

The sidecar listens on the pod's address, so any in-cluster client could reach it while the Job
runs: it runs with the same restricted APIs and key as the serving pods.

The pod is placed as the serving pods are (GPU product, tolerations, exclusive
placement, the user's selectors), so the numbers are the serving hardware's.
The Job is named from `ProfileRequest.profile_key()`; a deadline bounds it, so
a profile that cannot run (no free node of the product) lets the engine serve
without a profile instead of holding it back forever.
"""

from __future__ import annotations

from typing import Any

from tailpilot.api import constants as c
from tailpilot.api.engine import ProfileRequest
from tailpilot.api.v1alpha1 import InferenceService
from tailpilot.manifests.build_job import engine_job_failure_policy, serving_cpu_limit_millis
from tailpilot.manifests.deployment import (
    model_repository_init,
    serving_image,
    serving_placement,
    triton_container,
)
from tailpilot.manifests.meta import object_meta
from tailpilot.manifests.placement import ServingTarget
from tailpilot.manifests.security import container_security_context, pod_security_context
from tailpilot.manifests.settings import ManifestSettings
from tailpilot.manifests.triton_access import AdminKeyRef, admin_key_env
from tailpilot.manifests.triton_configmap import CONFIG_KEY

CONTAINER_NAME = "profile"
SIDECAR_NAME = "triton"
#: What the profiler client asks for: it drives one Triton with a closed loop of requests.
_PROFILER_RESOURCES = {"requests": {"cpu": "250m", "memory": "256Mi"}, "limits": {"memory": "1Gi"}}


def make_profile_request(
    *,
    isvc: InferenceService,
    engine_key: str,
    triton_backend: str,
    settings: ManifestSettings,
    store: str = c.ENGINE_STORE_MOUNT,
) -> ProfileRequest:
    """What to measure for the engine `engine_key` as this service serves it."""
    spec = isvc.spec
    serving = ServingTarget.from_service(isvc)
    return ProfileRequest(
        engine_key=engine_key,
        model_name=spec.model_name(isvc.name),
        triton_backend=triton_backend,
        precision=spec.engine.precision.value,
        max_batch_size=spec.batching.max_batch_size,
        hardware=serving.build_target,
        gpu_count=serving.gpu_count if serving.gpu_product else 0,
        cpu_limit_millis=None if serving.gpu_product else serving_cpu_limit_millis(isvc),
        triton_image=serving_image(isvc, settings),
        store=store,
    )


def profile_job_name(*, isvc_name: str, profile_key: str) -> str:
    """`<isvc>-profile-<key[:8]>` (at most 46 + 17 = 63 characters, a valid label value for job-name)."""
    return f"{isvc_name}-profile-{profile_key[:8]}"


def profile_job(
    *, isvc: InferenceService, request: ProfileRequest, settings: ManifestSettings, admin_key: AdminKeyRef
) -> dict[str, Any]:
    """Build the batch/v1 Job that profiles `request.engine_key` beside the service's own Triton.

    `admin_key`: the service's admin-key Secret; both containers read the key from it.
    """
    key = request.profile_key()
    meta = object_meta(
        isvc=isvc,
        name=profile_job_name(isvc_name=isvc.name, profile_key=key),
        component=c.COMPONENT_PROFILE,
        app_name=c.APP_NAME_BUILDER,
        # Not the engine-key label: that one selects the pods serving an engine.
        extra_labels={c.LABEL_PROFILE_KEY: key},
    )
    pod_spec = _profile_pod_spec(isvc=isvc, request=request, settings=settings, admin_key=admin_key)
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": meta,
        "spec": {
            "backoffLimit": settings.profile_backoff_limit,
            # Counted from the Job's start, pending included: a profile that cannot be scheduled
            # fails by then, and the engine serves without one.
            "activeDeadlineSeconds": settings.profile_deadline_seconds,
            "ttlSecondsAfterFinished": settings.build_ttl_seconds,
            "podFailurePolicy": engine_job_failure_policy(CONTAINER_NAME),
            "template": {"metadata": {"labels": dict(meta["labels"])}, "spec": pod_spec},
        },
    }


def _profile_pod_spec(
    *, isvc: InferenceService, request: ProfileRequest, settings: ManifestSettings, admin_key: AdminKeyRef
) -> dict[str, Any]:
    """The profile pod's spec: the model repository and the serving Triton (init), the profiler."""
    image = request.triton_image
    sidecar = {
        **triton_container(isvc=isvc, image=image, settings=settings, admin_key=admin_key),
        "restartPolicy": "Always",
    }
    sidecar["name"] = SIDECAR_NAME
    engine_config = (
        f"{request.store}/{c.ENGINE_STORE_ENGINES_DIR}/{request.engine_key}/"
        f"{c.ENGINE_STORE_REPOSITORY_DIR}/{request.model_name}/{CONFIG_KEY}"
    )
    return {
        "restartPolicy": "Never",
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "securityContext": pod_security_context(settings.run_as_user),
        "initContainers": [
            model_repository_init(
                image=image,
                model_name=request.model_name,
                engine_key=request.engine_key,
                settings=settings,
                config_file=engine_config,
            ),
            sidecar,
        ],
        "containers": [_profiler_container(request=request, settings=settings, admin_key=admin_key)],
        "volumes": [
            {"name": "models", "emptyDir": {}},
            # Bounded like the build pod's (a runaway cache cannot fill the node's disk).
            {"name": "tmp", "emptyDir": {"sizeLimit": settings.build_tmp_size}},
            {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": settings.shm_size}},
            {"name": "engines", "persistentVolumeClaim": {"claimName": settings.engine_store_claim}},
        ],
        "terminationGracePeriodSeconds": 30,
        **serving_placement(isvc),
    }


def _profiler_container(
    *, request: ProfileRequest, settings: ManifestSettings, admin_key: AdminKeyRef
) -> dict[str, Any]:
    """The `profile` container: `tailpilot profile` against the sidecar, its result as termination message."""
    return {
        "name": CONTAINER_NAME,
        "image": settings.builder_image,
        "imagePullPolicy": settings.image_pull_policy,
        "command": ["tailpilot"],
        "args": [
            "profile",
            "--request",
            request.model_dump_json(by_alias=True, exclude_none=True),
            "--triton-url",
            f"$(POD_IP):{c.TRITON_GRPC_PORT}",
            "--result-file",
            "/dev/termination-log",
        ],
        "env": [
            # The root filesystem is read-only: caches under $HOME go to the /tmp emptyDir.
            {"name": "HOME", "value": "/tmp"},
            # The sidecar listens on the pod's address (every container of a pod shares it).
            {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
            # `tailpilot profile` sends it on the reload it times (a restricted call).
            admin_key_env(admin_key),
        ],
        "terminationMessagePath": "/dev/termination-log",
        "terminationMessagePolicy": "File",
        "volumeMounts": [
            # Read-write: the profile is cached next to the engine for the next service that asks.
            {"name": "engines", "mountPath": request.store},
            {"name": "tmp", "mountPath": "/tmp"},
        ],
        "securityContext": container_security_context(),
        "resources": _PROFILER_RESOURCES,
    }
