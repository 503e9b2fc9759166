"""The ConfigMap holding the Triton model configuration (config.pbtxt) of one InferenceService.

The configuration is rendered by `tailpilot.builders.triton_config` from the
build result (backend, inputs, outputs) and the batching in force. Serving
pods copy it into their model repository at start; live batching changes are
pushed to running pods through Triton's load API and mirrored here so new pods
start with them.

`rollout_hash` covers only what needs new pods (engine, backend, tensors,
device, served name), rendered with a fixed batching, so a batching-only
change updates the ConfigMap without rolling the Deployment.
"""

from __future__ import annotations

from typing import Any

from tailpilot.api import constants as c
from tailpilot.api.autoscaling import BatchingConfig
from tailpilot.api.engine import BuildResult
from tailpilot.api.v1alpha1 import Device, InferenceService
from tailpilot.manifests.meta import object_meta, stable_hash

CONFIG_KEY = "config.pbtxt"


def configmap_name(isvc_name: str) -> str:
    """Name of the model-config ConfigMap."""
    return f"{isvc_name}-model-config"


def render_config_pbtxt(*, isvc: InferenceService, result: BuildResult, batching: BatchingConfig) -> str:
    """Render config.pbtxt for the built engine with the given batching."""
    # Imported here: the renderer pulls in tritonclient's protobuf module, which only this builder needs.
    from tailpilot.builders import triton_config

    gpu = isvc.spec.runtime.gpu
    on_gpu = isvc.spec.runtime.device is Device.GPU
    config = triton_config.render_model_config(
        name=isvc.spec.model_name(isvc.name),
        triton_backend=result.triton_backend,
        inputs=result.inputs,
        outputs=result.outputs,
        batching=batching,
        device="gpu" if on_gpu else "cpu",
        gpu_product=gpu.product if on_gpu and gpu else None,
    )
    return str(triton_config.to_pbtxt(config))


def rollout_hash(*, isvc: InferenceService, result: BuildResult) -> str:
    """Hash of what requires new pods: the config rendered with a fixed batching, and the engine key."""
    fixed = BatchingConfig(max_batch_size=isvc.spec.batching.max_batch_size)
    config = render_config_pbtxt(isvc=isvc, result=result, batching=fixed)
    digest: str = stable_hash({"engine": result.engine_key, "config": config})
    return digest


def triton_configmap(
    *, isvc: InferenceService, result: BuildResult, batching: BatchingConfig
) -> dict[str, Any]:
    """Build the v1 ConfigMap with config.pbtxt for the engine in `result` and the batching in force."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": object_meta(
            isvc=isvc,
            name=configmap_name(isvc.name),
            component=c.COMPONENT_MODEL_CONFIG,
            annotations={c.ANNOTATION_ENGINE_KEY: result.engine_key},
        ),
        "data": {CONFIG_KEY: render_config_pbtxt(isvc=isvc, result=result, batching=batching)},
    }
