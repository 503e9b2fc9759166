"""Benchmark: 500 InferenceServices applied at once on a dedicated local cluster.

    python -m tailpilot_e2e.bench_scale [--services 500] [--rest-seconds 120]

Measures, and prints as a markdown table:
- the time from the first create until every service is Ready=True;
- the operator's peak RSS (psutil, sampled every 0.5 s over the whole run);
- the operator's write requests per minute once nothing changes, counted from
  the API server's audit log (requests by the operator's own identity), over a
  rest window during which it resyncs every service several times.

The cluster is a second one (own state dir and ports), with a GPU pool big
enough for 500 single-GPU replicas plus their build and profile pods. Build
and profile pods are finished by this harness as they appear, with a
BuildResult and a ProfileResult (KWOK plays the kubelet: there is no GPU
here); everything else is the real operator.
"""

from __future__ import annotations

import argparse
import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import psutil
import yaml
from kubernetes import client

from tailpilot_e2e.cluster import ClusterPaths, LocalCluster
from tailpilot_e2e.config import REPO_ROOT, Ports
from tailpilot_e2e.fleet import scaled_fleet
from tailpilot_e2e.kube import api_client, create_namespace, service_account_kubeconfig
from tailpilot_e2e.operator_harness import (
    RESNET_H100_PROFILE,
    OperatorProcess,
    create_engine_store,
    install_crds,
    play_engine_jobs,
    played_resnet_build,
)

NAMESPACE = "scale"
OPERATOR_ACCOUNT = "tailpilot-bench"


def service(index: int) -> dict[str, Any]:
    obj: dict[str, Any] = yaml.safe_load((REPO_ROOT / "examples" / "gpu-tensorrt-h100.yaml").read_text())
    obj["metadata"] = {"name": f"svc-{index:03d}", "namespace": NAMESPACE}
    obj["spec"]["runtime"]["gpu"]["exclusive"] = False  # 500 exclusive services would need 500 nodes
    obj["spec"]["runtime"]["resources"] = {"requests": {"cpu": "1", "memory": "4Gi"}}
    return obj


def operator_identity(cluster: LocalCluster, api: client.ApiClient, path: Path) -> Path:
    """A ServiceAccount with cluster-admin for the operator, so the audit log tells its requests apart."""
    core, rbac = client.CoreV1Api(api), client.RbacAuthorizationV1Api(api)
    core.create_namespaced_service_account(
        NAMESPACE, client.V1ServiceAccount(metadata=client.V1ObjectMeta(name=OPERATOR_ACCOUNT))
    )
    rbac.create_cluster_role_binding(
        client.V1ClusterRoleBinding(
            metadata=client.V1ObjectMeta(name=OPERATOR_ACCOUNT),
            role_ref=client.V1RoleRef(
                api_group="rbac.authorization.k8s.io", kind="ClusterRole", name="cluster-admin"
            ),
            subjects=[
                client.RbacV1Subject(kind="ServiceAccount", name=OPERATOR_ACCOUNT, namespace=NAMESPACE)
            ],
        )
    )
    return service_account_kubeconfig(
        api,
        server=cluster.server,
        ca_file=cluster.paths.pki / "ca.crt",
        namespace=NAMESPACE,
        account=OPERATOR_ACCOUNT,
        path=path,
        expiration_seconds=7200,
    )


class BuildPlayer(threading.Thread):
    """Finishes every build and profile pod that appears, as if they succeed (bounded by `stop`)."""

    def __init__(self, api: client.ApiClient):
        super().__init__(daemon=True)
        self.core = client.CoreV1Api(api)
        self.stop = threading.Event()
        self.played: set[str] = set()

    def run(self) -> None:
        while not self.stop.is_set():
            play_engine_jobs(
                self.core,
                NAMESPACE,
                self.played,
                build=lambda pod: played_resnet_build(pod.metadata.labels["job-name"][-10:] * 3),
                profile=RESNET_H100_PROFILE,
            )
            self.stop.wait(1.0)


class RssSampler(threading.Thread):
    """Peak RSS of a process and its children."""

    def __init__(self, pid: int):
        super().__init__(daemon=True)
        self.process = psutil.Process(pid)
        self.stop = threading.Event()
        self.peak = 0

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                rss = self.process.memory_info().rss + sum(
                    c.memory_info().rss for c in self.process.children(True)
                )
                self.peak = max(self.peak, rss)
            except psutil.Error:
                return
            self.stop.wait(0.5)


def count_ready(api: client.ApiClient) -> int:
    items = client.CustomObjectsApi(api).list_namespaced_custom_object(
        "tailpilot.io", "v1alpha1", NAMESPACE, "inferenceservices"
    )["items"]
    return sum(
        1
        for o in items
        for c in (o.get("status") or {}).get("conditions", [])
        if c["type"] == "Ready" and c["status"] == "True"
    )


def operator_writes(audit_log: Path, since: float, until: float) -> tuple[int, dict[str, int]]:
    user = f"system:serviceaccount:{NAMESPACE}:{OPERATOR_ACCOUNT}"
    writes: dict[str, int] = {}
    total = 0
    for line in audit_log.read_text().splitlines():
        entry = json.loads(line)
        if entry.get("user", {}).get("username") != user or entry.get("verb") not in {
            "create",
            "update",
            "patch",
            "delete",
        }:
            continue
        stamp = time.mktime(time.strptime(entry["stageTimestamp"][:19], "%Y-%m-%dT%H:%M:%S")) - time.timezone
        if since <= stamp <= until:
            ref = entry["objectRef"]
            key = f"{entry['verb']} {ref.get('resource')}/{ref.get('subresource', '')}"
            writes[key] = writes.get(key, 0) + 1
            total += 1
    return total, writes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tailpilot_e2e.bench_scale")
    parser.add_argument("--services", type=int, default=500)
    parser.add_argument("--rest-seconds", type=float, default=120)
    parser.add_argument("--resync-seconds", type=float, default=30)
    parser.add_argument("--timeout", type=float, default=900)
    args = parser.parse_args(argv)

    h100_nodes = (2 * args.services) // 8 + 2  # every replica and, at peak, every build pod holds one GPU
    state = REPO_ROOT / ".cluster-bench"
    cluster = LocalCluster(
        paths=ClusterPaths(state),
        ports=Ports(**{k: v + 5000 for k, v in vars(Ports()).items()}),
        fleet=scaled_fleet(h100_nodes=h100_nodes, pods_per_node=250),
        audit_log=True,
    )
    cluster.down()
    t0 = time.monotonic()
    cluster.up()
    print(f"cluster with {h100_nodes} H100 nodes up in {time.monotonic() - t0:.1f}s")
    api = api_client(cluster.paths.kubeconfig)
    install_crds(cluster)
    create_namespace(client.CoreV1Api(api), NAMESPACE)
    create_engine_store(client.CoreV1Api(api), NAMESPACE, host_path=state / "engines")
    kubeconfig = operator_identity(cluster, api, state / "operator.kubeconfig")
    player = BuildPlayer(api)
    player.start()
    try:
        with OperatorProcess(
            cluster,
            namespace=NAMESPACE,
            log_dir=state / "logs",
            kubeconfig=kubeconfig,
            extra_args=["--resync-seconds", str(args.resync_seconds)],
        ) as operator:
            sampler = RssSampler(operator.pid)
            sampler.start()
            objects = client.CustomObjectsApi(api)
            start = time.monotonic()
            with ThreadPoolExecutor(8) as pool:
                list(
                    pool.map(
                        lambda i: objects.create_namespaced_custom_object(
                            "tailpilot.io", "v1alpha1", NAMESPACE, "inferenceservices", service(i)
                        ),
                        range(args.services),
                    )
                )
            applied = time.monotonic() - start
            ready, progress = 0, []
            while ready < args.services and time.monotonic() - start < args.timeout:
                time.sleep(2)  # sampling the progress curve of the benchmark
                ready = count_ready(api)
                progress.append((round(time.monotonic() - start), ready))
            all_ready_s = time.monotonic() - start
            rest_start = time.time() + 30  # let the last status writes and events settle
            time.sleep(30 + args.rest_seconds)
            rest_end = time.time()
            sampler.stop.set()
            sampler.join()
    finally:
        player.stop.set()
    writes, by_kind = operator_writes(state / "logs" / "audit.log", rest_start, rest_end)
    per_minute = writes / ((rest_end - rest_start) / 60)
    print("\n| services | applied in | all Ready after | operator peak RSS | writes/min at rest |")
    print("|---|---|---|---|---|")
    ready_text = f"{all_ready_s:.1f} s" if ready >= args.services else f"NOT ALL READY ({ready})"
    print(
        f"| {args.services} | {applied:.1f} s | {ready_text} | {sampler.peak / 2**20:.0f} MiB "
        f"| {per_minute:.2f} ({writes} writes in {rest_end - rest_start:.0f} s) |"
    )
    print(f"\nwrites at rest by kind: {by_kind or 'none'}")
    print("progress (s, ready):", progress[:: max(1, len(progress) // 15)])
    cluster.down()
    return 0 if ready >= args.services else 1


if __name__ == "__main__":
    raise SystemExit(main())
