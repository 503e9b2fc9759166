"""The CPU example on the real-pods cluster, and its monitoring: shared by its tests and `make demo`.

`examples/cpu-onnxruntime.yaml` as a user applies it, with one adaptation: the
Triton on this machine (bundled with nvidia-pytriton) has only the Python
backend, so the service asks for the `python` serving variant (ONNX Runtime
inside Triton's Python backend) instead of the native onnxruntime backend.
The model comes from a `models` PVC, as in the example; here both PVCs are
bound to hostPath PersistentVolumes in a work directory.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import yaml
from kubernetes import client

from tailpilot.builders import example_model
from tailpilot_e2e.cluster import LocalCluster
from tailpilot_e2e.config import REPO_ROOT
from tailpilot_e2e.kube import is_ready as is_ready  # re-exported: tests and calibration name it here
from tailpilot_e2e.monitoring import LocalAlertmanager
from tailpilot_e2e.operator_harness import (
    OperatorProcess,
    condition,
    create_engine_store,
    custom_object,
    free_port,
    install_crds,
)
from tailpilot_e2e.prometheus_stack import PrometheusStack
from tailpilot_e2e.wait import eventually

EXAMPLE = REPO_ROOT / "examples" / "cpu-onnxruntime.yaml"
MODEL_NAME = "mlp"
SERVER_SELECTOR = "app.kubernetes.io/component=inference-server"
TRITON_HTTP_PORT = 8000


#: Channel multiplier of the example model in SLO-loop runs (`make demo`, `make test-slo-loop`):
#: ~50 ms of one core per image, so one replica saturates near 20 req/s and a step that needs a
#: second replica leaves the two cores (shared with the control plane, Prometheus, the operator
#: and the client) below saturation. At width 4 (~19 ms) such a step (35-47 req/s) saturated the
#: machine with per-request overheads; at width 1 (~3 ms) the client saturates before Triton.
SLO_LOOP_MODEL_WIDTH = 6
#: The P99 target of SLO-loop runs. The example's 50 ms suits a CPU node of its own; here, at width
#: 6, the client P99 was 130-290 ms per 5 s even at 13 req/s on three replicas (2026-11-29 19:36
#: UTC): the target must sit well above that floor.
SLO_LOOP_P99_MS = 500.0
#: Each Triton replica's CPU limit in SLO-loop runs, enforced by the node agent (a CFS quota, as the
#: kubelet does): a replica serves what its limit buys, whatever else the machine runs, and two
#: replicas (1.2 cores at most) leave the rest of the two cores to the control plane, Prometheus, the
#: operator and the client. Without limits, a replica's capacity was whatever the rest left it, and
#: two busy replicas slowed each other (1.6x the profile's compute time, 2026-11-30 01:25 UTC).
SLO_LOOP_CPU_LIMIT = "600m"
#: Prometheus' scrape interval in SLO-loop runs: a scrape every second stalled requests visibly
#: (docs/autoscaling.md, section 1).
SLO_LOOP_SCRAPE_S = 2


#: Batching the operator tunes, up to 4 (`make demo`).
AUTO_BATCHING = {
    "mode": "auto",
    "maxBatchSize": 4,
    "preferredBatchSizes": [2, 4],
    "maxQueueDelayMicroseconds": 1000,
}
#: Single requests, never changed: the SLO-loop test's step is answered by replicas alone. The
#: model is per-item bound, so batching buys it little, and a batching change reloads the Python
#: backend, which stalls requests 2-4.5 s under the CPU limit (run of 2026-11-30 06:35 UTC: a
#: reload to max batch 1 in the calm phase put its P99 at 4.5 s and the loop added a replica for it).
SINGLE_REQUESTS = {"mode": "fixed", "maxBatchSize": 1, "maxQueueDelayMicroseconds": 0}


def slo_loop_service(
    namespace: str,
    *,
    name: str,
    max_replicas: int,
    stabilization_s: int,
    batching: Mapping[str, Any] = AUTO_BATCHING,
) -> dict[str, Any]:
    """The CPU example as the SLO-loop runs apply it.

    Their SLO, a 30 s window, scrapes as their Prometheus does them, a CPU limit per replica, and
    `batching` (`AUTO_BATCHING` or `SINGLE_REQUESTS`).
    """
    return cpu_example(
        namespace,
        name=name,
        # 30 s: a 10 s window's rate dipped 20% on Poisson noise and the policy removed a replica
        # mid-step (run of 20:13 UTC); the recent rate (4 s here) still shows a step at once.
        slo={"p99LatencyMs": SLO_LOOP_P99_MS, "evaluationWindowSeconds": 30},
        autoscaling={
            "minReplicas": 1,
            "maxReplicas": max_replicas,
            "scaleDownStabilizationSeconds": stabilization_s,
        },
        monitoring={"scrapeIntervalSeconds": SLO_LOOP_SCRAPE_S},
        runtime={
            "device": "cpu",
            "servingVariant": "python",
            "resources": {
                "requests": {"cpu": "500m", "memory": "1Gi"},
                "limits": {"cpu": SLO_LOOP_CPU_LIMIT, "memory": "2Gi"},
            },
        },
        batching=dict(batching),
    )


def serve_and_wait_ready(api: client.ApiClient, service: dict[str, Any], *, timeout_s: float = 420) -> None:
    """Create an InferenceService and wait for Ready: a real build Job, profiling and rollout."""
    namespace, name = service["metadata"]["namespace"], service["metadata"]["name"]
    client.CustomObjectsApi(api).create_namespaced_custom_object(
        "tailpilot.io", "v1alpha1", namespace, "inferenceservices", service
    )
    eventually(
        lambda: (condition(custom_object(api, namespace, name), "Ready") or {}).get("status") == "True",
        timeout=timeout_s,
        description="Ready after the real build and rollout",
    )


def prepare_storage(
    core: client.CoreV1Api,
    namespace: str,
    work_dir: Path,
    *,
    model_width: int = 1,
    dense_hidden: int | None = None,
) -> None:
    """The engine store and the `models` claim (hostPath PVs under work_dir), with the example model.

    `dense_hidden`: its weight-bound variant instead (`example_model.build_dense_model`).
    """
    create_engine_store(core, namespace, host_path=work_dir / "engines")
    create_engine_store(core, namespace, host_path=work_dir / "models", claim="models")
    example_model.write_example_model(
        work_dir / "models" / MODEL_NAME / "model.onnx", width=model_width, dense_hidden=dense_hidden
    )


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


def ready_endpoints(core: client.CoreV1Api, namespace: str, name: str) -> list[str]:
    """`http://<pod IP>:8000` of every Ready Triton pod the service's Service selects: its endpoints.

    There is no kube-proxy on this cluster; clients take these as the Service's endpoints. The
    Service's own selector decides (a pod held out of the rotation is Ready but not selected);
    before the operator has created the Service, every Triton pod of the service counts. A pod
    being deleted is not an endpoint, as the EndpointSlice controller marks it (it serves on
    through its preStop sleep, so requests already sent to it are answered).
    """
    try:
        selector = core.read_namespaced_service(name, namespace).spec.selector or {}
    except client.ApiException as error:
        if error.status != 404:
            raise
        selector = {}
    return [
        f"http://{p.status.pod_ip}:{TRITON_HTTP_PORT}"
        for p in server_pods(core, namespace, name)
        if is_ready(p)
        and p.status.pod_ip
        and p.metadata.deletion_timestamp is None
        and selector.items() <= (p.metadata.labels or {}).items()
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


@dataclass
class MonitoredOperator:
    """The operator wired as on a real cluster.

    A real prometheus-operator turns the operator's ServiceMonitor and PrometheusRule into the
    configuration of the Prometheus it runs (`prometheus_stack`); Alertmanager routes to the
    operator's authenticated webhook.
    """

    operator: OperatorProcess
    prometheus: PrometheusStack
    alertmanager: LocalAlertmanager
    metrics_url: str


def start_monitored_operator(
    stack: contextlib.ExitStack,
    cluster: LocalCluster,
    *,
    namespace: str,
    work_dir: Path,
    control_period_s: float = 4,
    scrape_interval_s: float = SLO_LOOP_SCRAPE_S,
    operator_args: Sequence[str] = (),
) -> MonitoredOperator:
    """Start Alertmanager, prometheus-operator's Prometheus and the operator for `namespace`.

    `stack` stops them (LIFO). `operator_args`: more of the operator's flags (`--activator-service`).
    """
    install_crds(cluster)
    work_dir.mkdir(parents=True, exist_ok=True)
    token_file = work_dir / "webhook-token"
    token_file.write_text("tailpilot-webhook-token")
    webhook_port, metrics_port = free_port(), free_port()
    alertmanager = LocalAlertmanager(
        work_dir / "alertmanager",
        webhook_url=f"http://127.0.0.1:{webhook_port}/alerts",
        token_file=token_file,
    )
    stack.callback(alertmanager.stop)
    alertmanager.start()
    prometheus = PrometheusStack(
        cluster,
        namespace,
        work_dir / "prometheus",
        scrape_interval_s=scrape_interval_s,
        alertmanager_url=alertmanager.url,
    )
    stack.callback(prometheus.stop)
    prometheus.start()
    operator = OperatorProcess(
        cluster,
        namespace=namespace,
        log_dir=work_dir,
        extra_args=[
            "--prometheus-url", prometheus.url,
            "--control-period-seconds", f"{control_period_s:g}",
            "--webhook-port", str(webhook_port),
            "--webhook-token-file", str(token_file),
            "--metrics-port", str(metrics_port),
            "--bind-address", "127.0.0.1",
            *prometheus.operator_args,
            *operator_args,
        ],
    )  # fmt: skip
    stack.callback(operator.stop)
    operator.start()
    return MonitoredOperator(operator, prometheus, alertmanager, f"http://127.0.0.1:{metrics_port}/metrics")
