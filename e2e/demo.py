"""`make demo`: TailPilot on one machine, from a fresh clone, in a few minutes.

1. The local cluster (upstream control plane, KWOK GPU/CPU fleet) and the CRD.
2. The operator (`tailpilot operator`), a real Prometheus, the CPU example applied.
3. The engine build: the operator creates its build Job; simulated nodes cannot run
   containers, so the demo runs the Job's own command (`tailpilot build --request ...`) on
   this machine (real ONNX Runtime optimization, real profiling in a real Triton) and
   plays its termination message onto the Job's pod.
4. Rollout: Deployment, Service, PDB, ConfigMap; `kubectl get tpisvc` shows the result.
5. The SLO loop on real metrics: the built engine is served by a real Triton process that
   Prometheus scrapes as the service's pod; an open-loop load steps up and back down; the
   operator observes P99 and queue from Prometheus and scales the Deployment. (Replica
   pods are simulated, so new replicas add no real capacity: the decisions are real, the
   extra capacity is not. Batching is fixed here because live batching changes go to the
   pods' IPs, which on simulated nodes serve nothing.)
6. A report (markdown table and PNG plot) in .demo/, then everything is stopped.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import yaml
from kubernetes import client

from tailpilot.api.engine import BuildResult
from tailpilot.bench.loadgen import LoadResult, binary_infer_body, run_load
from tailpilot.builders import example_model
from tailpilot.builders.triton_server import TritonServer
from tailpilot_e2e.cluster import LocalCluster
from tailpilot_e2e.config import REPO_ROOT
from tailpilot_e2e.kube import api_client
from tailpilot_e2e.monitoring import LocalPrometheus
from tailpilot_e2e.operator_harness import (
    OperatorProcess,
    condition,
    create_engine_store,
    custom_object,
    install_crds,
    play_build,
    running_build_pod,
)
from tailpilot_e2e.wait import eventually

NAMESPACE = "tailpilot-demo"
NAME = "mlp-cpu"
OUT = REPO_ROOT / ".demo"
PHASES = (("warm", 20, 0.25), ("step x4", 50, 1.0), ("back down", 30, 0.25))  # (name, seconds, load fraction)


def say(text: str) -> None:
    print(f"\n\033[1m== {text}\033[0m", flush=True)


def kubectl(cluster: LocalCluster, *args: str) -> str:
    return cluster.kubectl(*args).stdout


def fresh_namespace(core: client.CoreV1Api) -> None:
    if any(n.metadata.name == NAMESPACE for n in core.list_namespace().items):
        core.delete_namespace(NAMESPACE)
        eventually(
            lambda: all(n.metadata.name != NAMESPACE for n in core.list_namespace().items),
            timeout=120,
            description="old demo namespace deleted",
        )
    for pv in core.list_persistent_volume().items:
        if pv.spec.claim_ref and pv.spec.claim_ref.namespace == NAMESPACE:
            core.delete_persistent_volume(pv.metadata.name)
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=NAMESPACE)))


def models_claim(core: client.CoreV1Api, host_path: Path) -> None:
    create_engine_store(core, NAMESPACE, host_path=host_path, claim="models")


def the_service() -> dict[str, Any]:
    obj: dict[str, Any] = yaml.safe_load((REPO_ROOT / "examples" / "cpu-onnxruntime.yaml").read_text())
    obj["metadata"] = {"name": NAME, "namespace": NAMESPACE}
    spec = obj["spec"]
    spec["model"] = {"uri": "pvc://models/mlp/model.onnx", "name": "mlp"}
    spec["runtime"]["servingVariant"] = "python"  # the Triton on this machine has only the Python backend
    spec["batching"] = {
        "mode": "fixed",
        "maxBatchSize": 16,
        "preferredBatchSizes": [4, 8],
        "maxQueueDelayMicroseconds": 1000,
    }
    spec["slo"] = {"p99LatencyMs": 50, "evaluationWindowSeconds": 10}
    spec["autoscaling"] = {"minReplicas": 1, "maxReplicas": 6, "scaleDownStabilizationSeconds": 20}
    return obj


def run_the_build_job(cluster: LocalCluster, core: client.CoreV1Api, pvc_root: Path) -> BuildResult:
    pod = running_build_pod(core, NAMESPACE, timeout=60)
    job_name = pod.metadata.labels["job-name"]
    container = pod.spec.containers[0]
    argv = [*(container.command or []), *(container.args or [])]
    request = json.loads(argv[argv.index("--request") + 1])
    request["store"] = str(OUT / "engines")  # the Job mounts the store PVC at /engines; here it is a folder
    print(f"build Job {job_name} on node {pod.spec.node_name}: running its command on this machine")
    print("  tailpilot build --request '" + json.dumps(request)[:100] + "...'")
    result_file = OUT / "build-result.json"
    cmd = [
        str(Path(sys.executable).parent / "tailpilot"),
        "build",
        "--request",
        json.dumps(request),
        "--pvc-root",
        str(pvc_root),
        "--result-file",
        str(result_file),
    ]
    started = time.monotonic()
    process = subprocess.run(cmd, capture_output=True, text=True, timeout=900, check=False)
    for line in process.stderr.splitlines():
        print(f"  | {line}")
    if process.returncode != 0:
        raise SystemExit(f"the build failed ({process.returncode}): {process.stdout}")
    result = BuildResult.model_validate_json(result_file.read_text())
    print(f"built and profiled in {time.monotonic() - started:.0f}s: engine {result.engine_key[:12]}")
    play_build(core, pod, result=result)
    return result


class Monitor(threading.Thread):
    """Samples the service's status and Deployment every 2 s and prints a live line."""

    def __init__(self, api: client.ApiClient, started: float):
        super().__init__(daemon=True)
        self.api, self.started, self.rows = api, started, []
        self.stop = threading.Event()
        self.phase = ""

    def run(self) -> None:
        apps = client.AppsV1Api(self.api)
        print(f"{'t(s)':>5} {'phase':<10} {'replicas':>8} {'P99 obs':>8} {'pred':>6} {'rate':>6}  decision")
        while not self.stop.wait(2.0):
            status = custom_object(self.api, NAMESPACE, NAME).get("status", {})
            replicas = apps.read_namespaced_deployment(NAME, NAMESPACE).spec.replicas
            observed, decision = status.get("observed", {}), status.get("lastDecision", {})
            row = {
                "t": round(time.monotonic() - self.started, 1),
                "phase": self.phase,
                "replicas": replicas,
                "p99": observed.get("p99Ms"),
                "predicted": status.get("predictedP99Ms"),
                "rate": observed.get("requestRate"),
                "action": decision.get("action", ""),
                "reason": decision.get("reason", ""),
            }
            self.rows.append(row)
            print(
                f"{row['t']:>5} {self.phase:<10} {replicas:>8} {row['p99'] or '-':>8} "
                f"{row['predicted'] or '-':>6} {row['rate'] or '-':>6}  {row['action']} {row['reason']}",
                flush=True,
            )


def drive_load(url: str, model: str, base_rate: float, monitor: Monitor) -> list[tuple[str, LoadResult]]:
    payload = binary_infer_body(inputs=[(example_model.INPUT_NAME, example_model.example_inputs(1))])
    rng = np.random.default_rng(7)
    results = []
    for name, seconds, fraction in PHASES:
        monitor.phase = name
        rate = base_rate * fraction
        arrivals = np.cumsum(rng.exponential(1.0 / rate, size=int(rate * seconds * 1.5)))
        result = asyncio.run(
            run_load(
                url=url,
                model=model,
                payload=payload,
                arrivals_s=arrivals,
                max_requests=int(rate * seconds * 1.5),
                max_duration_s=seconds,
            )
        )
        results.append((name, result))
    return results


def write_report(
    rows: list[dict[str, Any]], loads: list[tuple[str, LoadResult]], result: BuildResult
) -> Path:
    OUT.mkdir(exist_ok=True)
    lines = [
        "# TailPilot demo report",
        "",
        f"Engine {result.engine_key} ({result.triton_backend}), profiled on "
        f"{result.profile.hardware if result.profile else '?'}.",
        "",
        "| phase | requests | ok | client P99 (ms) | throughput (req/s) |",
        "|---|---|---|---|---|",
    ]
    for name, load in loads:
        lines.append(
            f"| {name} | {len(load.status)} | {load.ok} | {load.quantile_ms(0.99):.1f} | "
            f"{load.throughput_per_s():.1f} |"
        )
    lines += [
        "",
        "| t (s) | phase | replicas | observed P99 (ms) | predicted (ms) | rate | decision |",
        "|---|---|---|---|---|---|---|",
    ]
    lines += [
        f"| {r['t']} | {r['phase']} | {r['replicas']} | {r['p99']} | {r['predicted']} | {r['rate']} | "
        f"{r['action']} {r['reason']} |"
        for r in rows
    ]
    report = OUT / "report.md"
    report.write_text("\n".join(lines) + "\n")
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        t = [r["t"] for r in rows]
        fig, axes = plt.subplots(3, 1, figsize=(9, 7), sharex=True)
        axes[0].plot(t, [r["rate"] or 0 for r in rows])
        axes[0].set_ylabel("req/s (Prometheus)")
        axes[1].plot(t, [r["p99"] or 0 for r in rows], label="observed P99")
        axes[1].plot(t, [r["predicted"] or 0 for r in rows], label="predicted P99")
        axes[1].axhline(50, color="red", linestyle="--", label="SLO")
        axes[1].set_ylabel("ms")
        axes[1].legend()
        axes[2].step(t, [r["replicas"] for r in rows], where="post")
        axes[2].set_ylabel("replicas")
        axes[2].set_xlabel("seconds")
        fig.tight_layout()
        fig.savefig(OUT / "report.png", dpi=90)
    except ImportError:
        pass
    return report


def main() -> int:
    if OUT.exists():
        shutil.rmtree(OUT)
    (OUT / "pvc" / "models" / "mlp").mkdir(parents=True)
    say("1/6 local cluster (kube-apiserver, controller-manager, scheduler from upstream; KWOK GPU fleet)")
    cluster = LocalCluster()
    started_cluster = cluster.up()
    api = api_client(cluster.paths.kubeconfig)
    core = client.CoreV1Api(api)
    print(kubectl(cluster, "get", "nodes", "-L", "nvidia.com/gpu.product", "-L", "nvidia.com/gpu.count"))
    install_crds(cluster)
    fresh_namespace(core)
    create_engine_store(core, NAMESPACE, host_path=OUT / "pvc" / "tailpilot-engines")
    models_claim(core, OUT / "pvc" / "models")
    for pv in core.list_persistent_volume(label_selector="tailpilot.io/test=true").items:
        if pv.spec.claim_ref and pv.spec.claim_ref.namespace == NAMESPACE:
            core.patch_persistent_volume(
                pv.metadata.name, {"metadata": {"labels": {"tailpilot.io/demo": "true"}}}
            )
    example_model.write_example_model(
        OUT / "pvc" / "models" / "mlp" / "model.onnx", seed=example_model.DEFAULT_SEED
    )

    prometheus = LocalPrometheus(OUT / "prometheus").start()
    operator = OperatorProcess(
        cluster,
        namespace=NAMESPACE,
        log_dir=OUT,
        extra_args=["--prometheus-url", prometheus.url, "--control-period-seconds", "4"],
    ).start()
    triton: TritonServer | None = None
    try:
        say("2/6 kubectl apply -f examples/cpu-onnxruntime.yaml (adapted: python serving variant, P99 50 ms)")
        client.CustomObjectsApi(api).create_namespaced_custom_object(
            "tailpilot.io", "v1alpha1", NAMESPACE, "inferenceservices", the_service()
        )
        say("3/6 engine build Job: optimize with ONNX Runtime, profile in a real Triton")
        result = run_the_build_job(cluster, core, OUT / "pvc")

        say("4/6 rollout")
        eventually(
            lambda: (condition(custom_object(api, NAMESPACE, NAME), "Ready") or {}).get("status") == "True",
            timeout=120,
            description="Ready",
        )
        print(kubectl(cluster, "get", "tpisvc", "-n", NAMESPACE, "-o", "wide"))
        status = custom_object(api, NAMESPACE, NAME)["status"]
        for cond in status["conditions"]:
            print(f"  {cond['type']:<14} {cond['status']:<6} {cond['reason']:<20} {cond['message'][:70]}")
        points = status.get("profile", {}).get("points", [])
        print(
            "  profile: "
            + ", ".join(
                f"batch {p['batchSize']}: p99 {p['p99Ms']} ms, {p['throughputPerS']}/s" for p in points
            )
        )

        say("5/6 the SLO loop on real metrics: open-loop load steps up x4 and back down")
        engine_dir = Path(result.artifact)
        triton = TritonServer(engine_dir / "repository", work_dir=OUT / "triton").start()
        pod = core.list_namespaced_pod(
            NAMESPACE,
            label_selector=f"tailpilot.io/inferenceservice={NAME},"
            "app.kubernetes.io/component=inference-server",
        ).items[0]
        metrics_address = triton.metrics_url.split("//")[1].split("/")[0]
        prometheus.set_targets(
            [
                (
                    metrics_address,
                    {"namespace": NAMESPACE, "tailpilot_io_inferenceservice": NAME, "pod": pod.metadata.name},
                )
            ]
        )
        batch1 = next((p["throughputPerS"] for p in points if p["batchSize"] == 1), 50.0)
        # The profile is measured closed-loop with its own client; open-loop HTTP from a
        # Python client on the same 2 cores saturates far below it, so the step peaks at 40% of it.
        base_rate = max(10.0, min(150.0, batch1 * 0.4))
        print(
            f"  load: {base_rate * 0.25:.0f} -> {base_rate:.0f} -> {base_rate * 0.25:.0f} req/s "
            f"(the profile's batch-1 throughput is {batch1}/s)"
        )
        monitor = Monitor(api, time.monotonic())
        monitor.start()
        loads = drive_load(triton.http_url, "mlp", base_rate, monitor)
        monitor.stop.set()
        monitor.join(timeout=10)

        say("6/6 report")
        report = write_report(monitor.rows, loads, result)
        print(report.read_text().split("| t (s)")[0])
        print(f"report: {report} and {OUT / 'report.png'}; operator log: {operator.log_file}")
        events = kubectl(
            cluster,
            "get",
            "events",
            "-n",
            NAMESPACE,
            "--field-selector",
            f"involvedObject.name={NAME}",
            "-o",
            "custom-columns=REASON:.reason,MESSAGE:.message",
        )
        print(events[:3000])
    finally:
        if triton is not None:
            triton.stop()
        operator.stop()
        prometheus.stop()
        core.delete_namespace(NAMESPACE)
        if started_cluster:
            cluster.down()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
