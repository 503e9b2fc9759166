"""The ConfigMap holding the Triton model configuration (config.pbtxt) of one InferenceService.

The configuration is rendered by `triton_model_config.model_config_for` from
the build result (backend, inputs, outputs), the batching in force and the
spec's placement (`placement.ServingTarget`). Serving pods copy it into their
model repository at start; live batching changes are pushed to running pods
through Triton's load API and mirrored here so new pods start with them.

`rollout_hash` covers only what needs new pods (engine, backend, tensors,
device, served name), rendered with a fixed batching, so a batching-only
change updates the ConfigMap without rolling the Deployment.
"""

from __future__ import annotations

from typing import Any

from tailpilot.api import constants as c
from tailpilot.api.autoscaling import BatchingConfig
from tailpilot.api.engine import BuildResult
from tailpilot.api.v1alpha1 import InferenceService
from tailpilot.manifests.meta import object_meta, stable_hash
from tailpilot.manifests.placement import ServingTarget

CONFIG_KEY = "config.pbtxt"


def configmap_name(isvc_name: str, *, canary: bool = False) -> str:
    """Name of the model-config ConfigMap (of the canary replicas' own, with `canary`)."""
    return f"{isvc_name}-canary-model-config" if canary else f"{isvc_name}-model-config"


def render_config_pbtxt(*, isvc: InferenceService, result: BuildResult, batching: BatchingConfig) -> str:
    """Render config.pbtxt for the built engine with the given batching."""
    # Imported here: the renderer loads tritonclient's protobuf module (and with it grpc, ~0.2 s),
    # which the modules that only need CONFIG_KEY or configmap_name (the Deployment) do not.
    from tailpilot.manifests import triton_model_config

    config = triton_model_config.model_config_for(
        name=isvc.spec.model_name(isvc.name),
        triton_backend=result.triton_backend,
        inputs=result.inputs,
        outputs=result.outputs,
        batching=batching,
        placement=ServingTarget.from_service(isvc),
    )
    return str(triton_model_config.to_pbtxt(config))


def rollout_hash(*, isvc: InferenceService, result: BuildResult) -> str:
    """Hash of what requires new pods: the config rendered with a fixed batching, and the engine key."""
    fixed = BatchingConfig(max_batch_size=isvc.spec.batching.max_batch_size)
    config = render_config_pbtxt(isvc=isvc, result=result, batching=fixed)
    digest: str = stable_hash({"engine": result.engine_key, "config": config})
    return digest


def triton_configmap(
    *, isvc: InferenceService, result: BuildResult, batching: BatchingConfig, canary: bool = False
) -> dict[str, Any]:
    """Build the v1 ConfigMap with config.pbtxt for the engine in `result` and the batching in force.

    `canary`: the canary replicas' own (spec.rollout.strategy canary): their engine's tensors and
    backend, the same batching as the stable replicas.
    """
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": object_meta(
            isvc=isvc,
            name=configmap_name(isvc.name, canary=canary),
            component=c.COMPONENT_MODEL_CONFIG,
            annotations={c.ANNOTATION_ENGINE_KEY: result.engine_key},
        ),
        "data": {CONFIG_KEY: render_config_pbtxt(isvc=isvc, result=result, batching=batching)},
    }
