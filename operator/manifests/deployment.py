"""The Triton Deployment of one InferenceService.

Model repository: an init container assembles `/models/<model>/` in an
emptyDir from the engine store (PVC, mounted read-only; the version directory
is a symlink, so a multi-GB plan is not copied) and the ConfigMap's
config.pbtxt. Triton runs with `--model-control-mode=explicit
--load-model=<model>`, so the operator can reload the model with new batching
in place (Triton's load API with a config override changes the batching and the
max batch size live; an override it refuses leaves the old model serving), and
with summary latencies on for the P99. The model-control, config, trace, logging and
shared-memory APIs answer only calls carrying the service's admin key
(`tailpilot.manifests.triton_access`): the container reads it from the service's Secret
through an env var, and the pod template names that Secret's uid, so a recreated key
rolls the pods.

Rollout: maxUnavailable 0 / maxSurge 1, so a Ready pod exists at every moment;
the pod-template annotations carry the engine key and the rollout hash, so a
new engine (or anything else that needs new pods) rolls, and a batching-only
change does not.

Security: the pod passes PodSecurity `restricted` (non-root, RuntimeDefault
seccomp, no privilege escalation, no capabilities, read-only root filesystem
with emptyDirs for /tmp, /dev/shm and the model repository).
"""

from __future__ import annotations

import copy
from typing import Any

from tailpilot.api import constants as c
from tailpilot.api.v1alpha1 import Device, InferenceService
from tailpilot.manifests import placement
from tailpilot.manifests.meta import object_meta, selector_labels, standard_labels
from tailpilot.manifests.security import container_security_context, pod_security_context
from tailpilot.manifests.settings import ManifestSettings
from tailpilot.manifests.triton_access import (
    ANNOTATION_SECRET_UID,
    AdminKeyRef,
    admin_key_env,
    restricted_api_args,
)
from tailpilot.manifests.triton_configmap import CONFIG_KEY, configmap_name

CONTAINER_NAME = "triton"
#: The init container that fetches the engine from the store into the model repository.
MODEL_REPOSITORY_CONTAINER = "model-repository"
MODEL_REPOSITORY = "/models"
_LIVENESS_PROBE_PERIOD_S = 10
#: The startup probe's period: a replica is Ready at most this long after Triton is up, so every
#: scale-up serves sooner (with 10 s, a CPU replica up in ~4 s was Ready after ~11 s: the demo of
#: 2026-11-30 07:12 UTC took 14 s from the decision to a ready replica while its backlog grew).
_STARTUP_PROBE_PERIOD_S = 2
#: The readiness probe's period once started (taking a replica out of rotation when it stops being ready).
_READINESS_PROBE_PERIOD_S = 5
#: Seconds a deleted serving pod keeps serving before Triton gets SIGTERM: longer than endpoint
#: changes take to reach kube-proxy and clients (about a second on an idle control plane).
PRE_STOP_SLEEP_S = 5


def engine_version_dir(*, engine_key: str, model_name: str, store: str = c.ENGINE_STORE_MOUNT) -> str:
    """Path of the engine's version directory inside the mounted store (tailpilot.builders.store layout)."""
    return f"{store}/{c.ENGINE_STORE_ENGINES_DIR}/{engine_key}/{c.ENGINE_STORE_REPOSITORY_DIR}/{model_name}/1"


#: The model-repository init container's script: $1 the engine's version directory in the store,
#: $2 the model's directory to assemble, $3 the config.pbtxt to copy, $4 the engine key (for the
#: message). Every expansion is quoted, and `--` ends the options of each command.
MODEL_REPOSITORY_SCRIPT = (
    "set -eu; "
    'test -d "$1" || { echo "engine $4 not found in the store" >&2; exit 1; }; '
    'mkdir -p -- "$2"; '
    'ln -sfn -- "$1" "$2/1"; '
    f'cp -- "$3" "$2/{CONFIG_KEY}"'
)


def model_repository_init(
    *,
    image: str,
    model_name: str,
    engine_key: str,
    settings: ManifestSettings,
    config_file: str = f"/config/{CONFIG_KEY}",
) -> dict[str, Any]:
    """The init container that assembles `/models/<model>/` from the store and a config.pbtxt.

    `config_file` is the ConfigMap's (batching in force) on the serving pods, the engine's own
    (as the build wrote it) in the profile Job.

    The script is a constant: the paths and the engine key are its positional arguments, so no
    value, whatever it holds, is ever read by the shell as code (the key and the model name are
    also checked by the API's patterns, but the script does not rely on that).
    """
    target = f"{MODEL_REPOSITORY}/{model_name}"
    version_dir = engine_version_dir(engine_key=engine_key, model_name=model_name)
    mounts = [
        {"name": "engines", "mountPath": c.ENGINE_STORE_MOUNT, "readOnly": True},
        {"name": "models", "mountPath": MODEL_REPOSITORY},
    ]
    if config_file.startswith("/config/"):
        mounts.insert(1, {"name": "model-config", "mountPath": "/config", "readOnly": True})
    return {
        "name": MODEL_REPOSITORY_CONTAINER,
        "image": image,
        "imagePullPolicy": settings.image_pull_policy,
        "command": ["sh", "-c", MODEL_REPOSITORY_SCRIPT],
        # $0 names the script in its messages; $1..$4 are the script's arguments.
        "args": ["model-repository", version_dir, target, config_file, engine_key],
        "volumeMounts": mounts,
        "securityContext": container_security_context(),
        "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}, "limits": {"memory": "64Mi"}},
    }


#: What Triton requests of CPU and memory when `spec.runtime.resources` names neither a request nor
#: a limit of it. Without any, the pod was BestEffort: the first evicted under memory pressure, and
#: scheduled as if it needed nothing. A floor, not a sizing: enough for Triton's own threads and
#: HTTP front end beside a GPU model; a CPU model is sized by the service's own resources.
DEFAULT_TRITON_REQUESTS: dict[str, str] = {"cpu": "250m", "memory": "512Mi"}


def _resources(isvc: InferenceService) -> dict[str, Any]:
    """User resources, with the GPU limit forced to gpu.count (drift on it is put back).

    CPU and memory the user names neither a request nor a limit of are requested at
    `DEFAULT_TRITON_REQUESTS` (a limit alone needs nothing: Kubernetes takes it as the request).
    """
    resources: dict[str, Any] = copy.deepcopy(dict(isvc.spec.runtime.resources or {}))
    gpu = isvc.spec.runtime.gpu
    for section in ("limits", "requests"):
        if section in resources:
            resources[section] = {k: v for k, v in dict(resources[section]).items() if k != c.GPU_RESOURCE}
    named = {*resources.get("limits", {}), *resources.get("requests", {})}
    for resource, amount in DEFAULT_TRITON_REQUESTS.items():
        if resource not in named:
            resources.setdefault("requests", {})[resource] = amount
    if isvc.spec.runtime.device is Device.GPU and gpu is not None:
        resources.setdefault("limits", {})[c.GPU_RESOURCE] = gpu.count
    return resources


def _probes(startup_seconds: int) -> dict[str, Any]:
    def http(path: str) -> dict[str, Any]:
        return {"httpGet": {"path": path, "port": c.PORT_NAME_HTTP}}

    return {
        # Slow GPU pods (TensorRT plan loading) must not be killed while starting.
        "startupProbe": {
            **http("/v2/health/live"),
            "periodSeconds": _STARTUP_PROBE_PERIOD_S,
            "failureThreshold": max(1, startup_seconds // _STARTUP_PROBE_PERIOD_S),
        },
        "readinessProbe": {
            **http("/v2/health/ready"),
            "periodSeconds": _READINESS_PROBE_PERIOD_S,
            "failureThreshold": 3,
        },
        "livenessProbe": {
            **http("/v2/health/live"),
            "periodSeconds": _LIVENESS_PROBE_PERIOD_S,
            "failureThreshold": 3,
        },
    }


def triton_args(*, model_name: str) -> list[str]:
    """Command-line arguments of tritonserver (the admin key comes from the container's env)."""
    return [
        f"--model-repository={MODEL_REPOSITORY}",
        "--model-control-mode=explicit",
        f"--load-model={model_name}",
        "--strict-readiness=true",
        "--exit-on-error=true",
        f"--http-port={c.TRITON_HTTP_PORT}",
        f"--grpc-port={c.TRITON_GRPC_PORT}",
        f"--metrics-port={c.TRITON_METRICS_PORT}",
        "--allow-metrics=true",
        "--metrics-config=summary_latencies=true",
        *restricted_api_args(),
    ]


def triton_container(
    *, isvc: InferenceService, image: str, settings: ManifestSettings, admin_key: AdminKeyRef
) -> dict[str, Any]:
    """The Triton container of a serving pod (the profile Job runs the same one as a sidecar).

    `admin_key`: the Secret its restricted APIs' key is read from (an env var the args expand).
    """
    on_gpu = isvc.spec.runtime.device is Device.GPU
    return {
        "name": CONTAINER_NAME,
        "image": image,
        "imagePullPolicy": settings.image_pull_policy,
        "command": ["tritonserver"],
        "args": triton_args(model_name=isvc.spec.model_name(isvc.name)),
        # The root filesystem is read-only: anything that writes under $HOME writes to the /tmp emptyDir.
        # The key's var comes first: Kubernetes expands `$(VAR)` in args from the container's env.
        "env": [{"name": "HOME", "value": "/tmp"}, admin_key_env(admin_key)],
        "ports": [
            {"name": c.PORT_NAME_HTTP, "containerPort": c.TRITON_HTTP_PORT, "protocol": "TCP"},
            {"name": c.PORT_NAME_GRPC, "containerPort": c.TRITON_GRPC_PORT, "protocol": "TCP"},
            {"name": c.PORT_NAME_METRICS, "containerPort": c.TRITON_METRICS_PORT, "protocol": "TCP"},
        ],
        **_probes(settings.gpu_startup_seconds if on_gpu else settings.cpu_startup_seconds),
        "resources": _resources(isvc),
        "volumeMounts": [
            {"name": "models", "mountPath": MODEL_REPOSITORY},
            {"name": "engines", "mountPath": c.ENGINE_STORE_MOUNT, "readOnly": True},
            {"name": "tmp", "mountPath": "/tmp"},
            {"name": "dshm", "mountPath": "/dev/shm"},
        ],
        "securityContext": container_security_context(),
    }


def deployment_name(isvc_name: str, *, canary: bool = False) -> str:
    """Name of the Triton Deployment (of the canary replicas, with `canary`)."""
    return f"{isvc_name}-canary" if canary else isvc_name


def _volumes(isvc: InferenceService, settings: ManifestSettings, *, canary: bool) -> list[dict[str, Any]]:
    return [
        {"name": "models", "emptyDir": {}},
        {"name": "tmp", "emptyDir": {}},
        {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": settings.shm_size}},
        {
            "name": "engines",
            "persistentVolumeClaim": {"claimName": settings.engine_store_claim, "readOnly": True},
        },
        {"name": "model-config", "configMap": {"name": configmap_name(isvc.name, canary=canary)}},
    ]


def serving_image(isvc: InferenceService, settings: ManifestSettings) -> str:
    """The Triton image the service serves with."""
    return isvc.spec.runtime.image or settings.triton_image


def serving_placement(isvc: InferenceService) -> dict[str, Any]:
    """nodeSelector, tolerations and affinity of the serving pods (the profile Job's pod goes there too)."""
    runtime = isvc.spec.runtime
    gpu = runtime.gpu if runtime.device is Device.GPU else None
    fields: dict[str, Any] = {}
    selector = placement.node_selector(gpu_product=gpu.product if gpu else None, user=runtime.node_selector)
    if selector:
        fields["nodeSelector"] = selector
    tolerations = placement.tolerations(gpu=gpu is not None, user=runtime.tolerations)
    if tolerations:
        fields["tolerations"] = tolerations
    affinity = placement.affinity(
        isvc_name=isvc.name,
        namespace=isvc.namespace,
        exclusive=bool(gpu and gpu.exclusive),
        user=runtime.affinity,
    )
    if affinity:
        fields["affinity"] = affinity
    return fields


def triton_deployment(
    *,
    isvc: InferenceService,
    engine_key: str,
    rollout_hash: str,
    replicas: int,
    settings: ManifestSettings,
    admin_key: AdminKeyRef,
    moving: bool = False,
    canary: bool = False,
) -> dict[str, Any]:
    """Build the apps/v1 Deployment serving `engine_key` with `replicas` pods.

    `admin_key`: the service's admin-key Secret (`triton_access`); its uid is a pod-template
    annotation, so pods started with a key that no longer exists are replaced.

    `canary`: the canary replicas of a new engine (spec.rollout.strategy canary), NAME-canary. Its
    pods carry the Service's selector labels, so they take their share of the traffic, and the
    track label, which its own selector adds; its ReplicaSet owns them, so the stable Deployment
    (whose selector also matches them) never adopts them.

    `moving`: the service moves to another GPU product. Its new pods then all start at once
    (maxSurge 100%; the product choice checked that the product's free GPUs hold them) instead of
    one at a time, so a move takes one start-up, not one per replica; maxUnavailable stays 0, so
    every old pod serves until a new one is Ready.
    """
    spec = isvc.spec
    on_gpu = spec.runtime.device is Device.GPU and spec.runtime.gpu is not None
    pod_labels, selector = _pod_labels(isvc, engine_key=engine_key, canary=canary)
    startup = settings.gpu_startup_seconds if on_gpu else settings.cpu_startup_seconds
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": object_meta(
            isvc=isvc,
            name=deployment_name(isvc.name, canary=canary),
            component=c.COMPONENT_SERVER,
            annotations={c.ANNOTATION_ENGINE_KEY: engine_key},
        ),
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": selector},
            "strategy": {
                "type": "RollingUpdate",
                "rollingUpdate": {"maxUnavailable": 0, "maxSurge": "100%" if moving else 1},
            },
            "revisionHistoryLimit": 3,
            # A stalled rollout is reported after the slowest legitimate start plus a margin.
            "progressDeadlineSeconds": startup + 300,
            "template": {
                "metadata": {
                    "labels": pod_labels,
                    "annotations": {
                        c.ANNOTATION_ENGINE_KEY: engine_key,
                        c.ANNOTATION_CONFIG_HASH: rollout_hash,
                        ANNOTATION_SECRET_UID: admin_key.secret_uid,
                        "kubectl.kubernetes.io/default-container": CONTAINER_NAME,
                    },
                },
                "spec": _serving_pod_spec(
                    isvc, engine_key=engine_key, settings=settings, admin_key=admin_key, canary=canary
                ),
            },
        },
    }


def _pod_labels(
    isvc: InferenceService, *, engine_key: str, canary: bool
) -> tuple[dict[str, str], dict[str, str]]:
    """The serving pods' labels and the Deployment's selector (the canary's track added to both)."""
    pod_labels = {
        **standard_labels(isvc_name=isvc.name, component=c.COMPONENT_SERVER),
        **selector_labels(isvc.name),
        c.LABEL_ENGINE_KEY: engine_key[:63],
    }
    if isvc.spec.autoscaling.backlog_rotation:
        # Not in the Deployment's selector (immutable): the operator flips it on running pods.
        pod_labels[c.LABEL_ROTATION] = c.ROTATION_IN
    selector = selector_labels(isvc.name)
    if canary:
        pod_labels[c.LABEL_TRACK] = selector[c.LABEL_TRACK] = c.TRACK_CANARY
    return pod_labels, selector


def _serving_pod_spec(
    isvc: InferenceService,
    *,
    engine_key: str,
    settings: ManifestSettings,
    admin_key: AdminKeyRef,
    canary: bool,
) -> dict[str, Any]:
    """The serving pod's spec: the model-repository init container, Triton, volumes and placement."""
    image = serving_image(isvc, settings)
    model_name = isvc.spec.model_name(isvc.name)
    pod_spec: dict[str, Any] = {
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "securityContext": pod_security_context(settings.run_as_user),
        "initContainers": [
            model_repository_init(
                image=image, model_name=model_name, engine_key=engine_key, settings=settings
            )
        ],
        "containers": [
            {
                **triton_container(isvc=isvc, image=image, settings=settings, admin_key=admin_key),
                # A deleted pod leaves the Service's endpoints at once but is told to stop only
                # after this: clients and proxies that still send to it in between are answered
                # (scale-downs, rolling updates, a canary removed), not refused.
                "lifecycle": {"preStop": {"sleep": {"seconds": PRE_STOP_SLEEP_S}}},
            }
        ],
        "volumes": _volumes(isvc, settings, canary=canary),
        "terminationGracePeriodSeconds": 30,
    }
    pod_spec.update(serving_placement(isvc))
    return pod_spec
