"""The CPU example on the real-pods cluster: shared by its tests and `make demo`.

`examples/cpu-onnxruntime.yaml` as a user applies it, with one adaptation: the
Triton on this machine (bundled with nvidia-pytriton) has only the Python
backend, so the service asks for the `python` serving variant (ONNX Runtime
inside Triton's Python backend) instead of the native onnxruntime backend.
The model comes from a `models` PVC, as in the example; here both PVCs are
bound to hostPath PersistentVolumes in a work directory.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import numpy as np
import yaml
from kubernetes import client

from tailpilot.builders import example_model
from tailpilot_e2e.config import REPO_ROOT
from tailpilot_e2e.operator_harness import create_engine_store

EXAMPLE = REPO_ROOT / "examples" / "cpu-onnxruntime.yaml"
MODEL_NAME = "mlp"
SERVER_SELECTOR = "app.kubernetes.io/component=inference-server"
TRITON_HTTP_PORT = 8000


def prepare_storage(core: client.CoreV1Api, namespace: str, work_dir: Path) -> None:
    """The engine store and the `models` claim (hostPath PVs under work_dir), with the example model."""
    create_engine_store(core, namespace, host_path=work_dir / "engines")
    create_engine_store(core, namespace, host_path=work_dir / "models", claim="models")
    example_model.write_example_model(work_dir / "models" / MODEL_NAME / "model.onnx")


def cpu_example(namespace: str, *, name: str = "mlp-cpu", **spec_overrides: Any) -> dict[str, Any]:
    """The CPU example, in `namespace`, on the python serving variant; top-level spec keys overridable."""
    obj: dict[str, Any] = yaml.safe_load(EXAMPLE.read_text())
    obj["metadata"] = {"name": name, "namespace": namespace}
    obj["spec"]["model"]["name"] = MODEL_NAME
    obj["spec"]["runtime"]["servingVariant"] = "python"
    obj["spec"].update(spec_overrides)
    return obj


def server_pods(core: client.CoreV1Api, namespace: str, name: str) -> list[client.V1Pod]:
    """The service's Triton pods (any phase)."""
    selector = f"tailpilot.io/inferenceservice={name},{SERVER_SELECTOR}"
    return list(core.list_namespaced_pod(namespace, label_selector=selector).items)


def is_ready(pod: client.V1Pod) -> bool:
    """Ready condition True and not terminating."""
    conditions = {c.type: c.status for c in pod.status.conditions or []}
    return conditions.get("Ready") == "True" and pod.metadata.deletion_timestamp is None


def ready_endpoints(core: client.CoreV1Api, namespace: str, name: str) -> list[str]:
    """`http://<pod IP>:8000` of every Ready Triton pod: what a Service's endpoints would hold."""
    return [
        f"http://{p.status.pod_ip}:{TRITON_HTTP_PORT}"
        for p in server_pods(core, namespace, name)
        if is_ready(p) and p.status.pod_ip
    ]


def infer(base_url: str, *, batch: int = 1, timeout_s: float = 10) -> np.ndarray:
    """One inference through Triton's HTTP API; the logits."""
    data = example_model.example_inputs(batch)
    body = {
        "inputs": [
            {
                "name": example_model.INPUT_NAME,
                "shape": list(data.shape),
                "datatype": "FP32",
                "data": data.flatten().tolist(),
            }
        ]
    }
    with httpx.Client(timeout=timeout_s, trust_env=False) as http:
        response = http.post(f"{base_url}/v2/models/{MODEL_NAME}/infer", json=body)
    response.raise_for_status()
    output = response.json()["outputs"][0]
    return np.asarray(output["data"], dtype=np.float32).reshape(output["shape"])
