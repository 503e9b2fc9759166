"""Benchmark: 500 InferenceServices applied at once on a dedicated local cluster, then left serving.

    python -m tailpilot_e2e.bench_scale [--services 500] [--pods 2] [--rest-seconds 120]

Measures, and prints as markdown tables:
- the time from the first create until every service is Ready=True, and the operator's peak RSS
  (psutil, sampled every 0.5 s over the whole run);
- then, at rest, over `--rest-seconds` (after 60 s to settle), what the operator's fast loop costs
  with every service autoscaled on `--pods` Ready pods: its CPU (psutil), the Triton pod reads it
  completes per second and the read period in force, its requests to the API server (counted from
  the API server's audit log by the operator's own identity, writes apart), its Prometheus queries
  per second, how long one decision's observation takes (its `tailpilot_observation_seconds`
  histogram), and a real Prometheus' CPU while it scrapes every pod at 15 s.

The cluster is a second one (own state dir and ports), with a GPU pool big enough for every replica
plus the build and profile pods. Build and profile pods are finished by this harness as they appear,
with a BuildResult and a ProfileResult (KWOK plays the kubelet: there is no GPU here). KWOK's pods
run nothing, so every Ready Triton pod gets a real HTTP metrics endpoint on its own IP and port
(`tailpilot_e2e.triton_pages`: a steady 20 requests/s each, a P99 below the SLO). Prometheus is
kube-prometheus-stack's, as a platform team runs it (`tailpilot_e2e.prometheus_stack`): a real
prometheus-operator turns the 500 ServiceMonitors the operator generates into scrape jobs, and its
Prometheus scrapes each Service's endpoints. Those two run as pods on the node agent's node
`local-0`, the cluster's one real node. The window at rest starts once that Prometheus scrapes
every Ready pod and evaluates every service's rules (`settle_monitoring`): while services are
created, prometheus-operator replaces its Prometheus pod each time the rules outgrow their
ConfigMaps. Everything else is the real operator at its defaults.
"""

from __future__ import annotations

import argparse
import calendar
import json
import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import psutil
import yaml
from kubernetes import client
from prometheus_client.parser import text_string_to_metric_families

from tailpilot.api import constants as c
from tailpilot.api.v1alpha1 import MonitoringSpec
from tailpilot.controllers.core.kubeapi import ready_pod_ip
from tailpilot.controllers.process.main import parse_args as operator_flags
from tailpilot_e2e.cluster import ClusterPaths, LocalCluster
from tailpilot_e2e.config import REPO_ROOT, Ports
from tailpilot_e2e.fleet import scaled_fleet
from tailpilot_e2e.kube import api_client, create_namespace, service_account_kubeconfig
from tailpilot_e2e.operator_harness import (
    RESNET_H100_PROFILE,
    OperatorProcess,
    condition,
    create_engine_store,
    free_port,
    install_crds,
    play_engine_jobs,
    played_resnet_build,
)
from tailpilot_e2e.prometheus_stack import PrometheusStack
from tailpilot_e2e.triton_pages import PageLoad, PodEndpoint, TritonPages
from tailpilot_e2e.wait import eventually

NAMESPACE = "scale"
OPERATOR_ACCOUNT = "tailpilot-bench"
#: Prometheus scrapes the pods at the spec's default scrape interval.
SCRAPE_INTERVAL_S = float(MonitoringSpec().scrape_interval_seconds)
#: Seconds after the last service is Ready before the window at rest starts (writes and Events settle).
SETTLE_S = 60.0
#: How long the monitoring stack may take to take in every service's ServiceMonitor and rules.
MONITORING_SETTLE_TIMEOUT_S = 600.0


@dataclass(frozen=True)
class MonitoringSettled:
    """When the stack's Prometheus had every service: seconds after all were Ready, and its shape."""

    after_s: float
    up_targets: int
    rule_groups: int
    rule_configmaps: int


def settle_monitoring(prometheus: PrometheusStack, api: client.ApiClient, *, pods: int) -> MonitoringSettled:
    """Wait until the stack's Prometheus scrapes every Ready pod and evaluates every service's rules.

    prometheus-operator renders the PrometheusRules into ConfigMaps of at most about 0.5 MiB; as
    services are created it adds ConfigMaps, each a new volume of the StatefulSet, so its Prometheus
    pod is replaced (a platform team's stack does the same). The window at rest starts once that
    is over, on the Prometheus the operator was given (same pod address).
    """
    start = time.monotonic()

    def settled() -> int | None:
        if prometheus.ready_pod_ip() != prometheus.pod_ip:
            return None
        targets = prometheus.targets()
        up = sum(1 for t in targets if t["health"] == "up" and t["labels"].get(c.METRIC_LABEL_ISVC))
        return up if up >= pods else None

    up = eventually(
        settled,
        timeout=MONITORING_SETTLE_TIMEOUT_S,
        interval=5.0,
        description=f"the stack's Prometheus scraping {pods} pods at {prometheus.url}",
    )
    prometheus.load_cluster_rules(api, NAMESPACE, timeout=MONITORING_SETTLE_TIMEOUT_S)
    configmaps = client.CoreV1Api(api).list_namespaced_config_map(NAMESPACE).items
    return MonitoringSettled(
        after_s=time.monotonic() - start,
        up_targets=up,
        rule_groups=len(prometheus.rule_groups()),
        rule_configmaps=sum(1 for m in configmaps if "rulefiles" in m.metadata.name),
    )


def service(index: int, pods: int) -> dict[str, Any]:
    """The example H100 service, `pods` replicas at least, sharing nodes."""
    obj: dict[str, Any] = yaml.safe_load((REPO_ROOT / "examples" / "gpu-tensorrt-h100.yaml").read_text())
    obj["metadata"] = {"name": f"svc-{index:03d}", "namespace": NAMESPACE}
    obj["spec"]["runtime"]["gpu"]["exclusive"] = False  # 500 exclusive services would need 500 nodes
    obj["spec"]["runtime"]["resources"] = {"requests": {"cpu": "1", "memory": "4Gi"}}
    obj["spec"]["autoscaling"]["minReplicas"] = pods
    return obj


def operator_identity(
    cluster: LocalCluster, api: client.ApiClient, path: Path, namespace: str = NAMESPACE
) -> Path:
    """A ServiceAccount with cluster-admin for the operator, so the audit log tells its requests apart."""
    core, rbac = client.CoreV1Api(api), client.RbacAuthorizationV1Api(api)
    core.create_namespaced_service_account(
        namespace, client.V1ServiceAccount(metadata=client.V1ObjectMeta(name=OPERATOR_ACCOUNT))
    )
    rbac.create_cluster_role_binding(
        client.V1ClusterRoleBinding(
            metadata=client.V1ObjectMeta(name=OPERATOR_ACCOUNT),
            role_ref=client.V1RoleRef(
                api_group="rbac.authorization.k8s.io", kind="ClusterRole", name="cluster-admin"
            ),
            subjects=[
                client.RbacV1Subject(kind="ServiceAccount", name=OPERATOR_ACCOUNT, namespace=namespace)
            ],
        )
    )
    return service_account_kubeconfig(
        api,
        server=cluster.server,
        ca_file=cluster.paths.pki / "ca.crt",
        namespace=namespace,
        account=OPERATOR_ACCOUNT,
        path=path,
        expiration_seconds=7200,
    )


class BuildPlayer(threading.Thread):
    """Finishes every build and profile pod that appears, as if they succeed (bounded by `stop`)."""

    def __init__(self, api: client.ApiClient, namespaces: tuple[str, ...] = (NAMESPACE,)):
        super().__init__(daemon=True)
        self.core = client.CoreV1Api(api)
        self.namespaces = namespaces
        self.stop = threading.Event()
        self.played: set[str] = set()

    def run(self) -> None:
        while not self.stop.is_set():
            for namespace in self.namespaces:
                self.play(namespace)
            self.stop.wait(1.0)

    def play(self, namespace: str) -> None:
        play_engine_jobs(
            self.core,
            namespace,
            self.played,
            build=lambda pod: played_resnet_build(pod.metadata.labels["job-name"][-10:] * 3),
            profile=RESNET_H100_PROFILE,
        )


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


def count_ready(api: client.ApiClient) -> tuple[int, dict[str, int]]:
    """Services Ready=True, and how many decide on rates from each source (status.observed.ratesFrom)."""
    items = client.CustomObjectsApi(api).list_namespaced_custom_object(
        "tailpilot.io", "v1alpha1", NAMESPACE, "inferenceservices"
    )["items"]
    ready = sum(1 for o in items if (condition(o, "Ready") or {}).get("status") == "True")
    sources: dict[str, int] = {}
    for o in items:
        source = str(((o.get("status") or {}).get("observed") or {}).get("ratesFrom") or "none")
        sources[source] = sources.get(source, 0) + 1
    return ready, sources


WRITE_VERBS = frozenset({"create", "update", "patch", "delete"})


def operator_requests(audit_log: Path, since: float, until: float) -> dict[str, int]:
    """The operator's API requests in [since, until], by "verb resource/subresource"."""
    user = f"system:serviceaccount:{NAMESPACE}:{OPERATOR_ACCOUNT}"
    requests: dict[str, int] = {}
    with audit_log.open() as log:
        for line in log:
            entry = json.loads(line)
            if entry.get("user", {}).get("username") != user:
                continue
            stamp = calendar.timegm(time.strptime(entry["stageTimestamp"][:19], "%Y-%m-%dT%H:%M:%S"))
            if since <= stamp <= until:
                ref = entry["objectRef"]
                key = f"{entry['verb']} {ref.get('resource')}/{ref.get('subresource', '')}"
                requests[key] = requests.get(key, 0) + 1
    return requests


class PodFeeder(threading.Thread):
    """Gives every Ready Triton pod of the namespace a metrics endpoint on its IP (bounded by `stop`).

    `mode_of`: how a service's pods answer (`triton_pages.HOSTILE_MODES`; "" as Triton does).
    """

    def __init__(
        self,
        api: client.ApiClient,
        pages: TritonPages,
        namespace: str = NAMESPACE,
        mode_of: Callable[[str], str] = lambda service: "",
    ):
        super().__init__(daemon=True)
        self.core = client.CoreV1Api(api)
        self.pages = pages
        self.namespace = namespace
        self.mode_of = mode_of
        self.stop = threading.Event()

    def feed(self) -> int:
        """One pass; returns the pods newly served. Raw JSON: typed pods cost a second of CPU per 1,000."""
        response = self.core.list_namespaced_pod(
            self.namespace,
            label_selector=f"{c.LABEL_COMPONENT}={c.COMPONENT_SERVER}",
            _preload_content=False,
        )
        pods = json.loads(response.data)["items"]
        return self.pages.add(
            [
                PodEndpoint(ip=ip, model=service, mode=self.mode_of(service))
                for pod in pods
                if (ip := ready_pod_ip(pod)) is not None
                and (service := pod["metadata"]["labels"][c.LABEL_ISVC])
            ]
        )

    def run(self) -> None:
        while not self.stop.is_set():
            self.feed()
            self.stop.wait(2.0)


@dataclass
class CpuMeter:
    """CPU seconds a process (and its children) used between `start` and `cores`."""

    pid: int
    _start: float = 0.0
    _wall: float = 0.0

    def _cpu(self) -> float:
        process = psutil.Process(self.pid)
        total = sum(process.cpu_times()[:2])
        return total + sum(sum(child.cpu_times()[:2]) for child in process.children(True))

    def start(self) -> None:
        self._start, self._wall = self._cpu(), time.monotonic()

    def cores(self) -> float:
        """CPU seconds per wall second since `start`."""
        return (self._cpu() - self._start) / (time.monotonic() - self._wall)


def scrape(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """A metrics page's samples: (name, sorted labels) -> value."""
    text = httpx.get(url, timeout=10).text
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def summed(samples: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str, **labels: str) -> float:
    """The sum of a metric's samples whose labels include `labels`."""
    return sum(
        value
        for (sample, sample_labels), value in samples.items()
        if sample == name and set(labels.items()) <= set(sample_labels)
    )


def histogram_quantile(
    before: dict[tuple[str, tuple[tuple[str, str], ...]], float],
    after: dict[tuple[str, tuple[tuple[str, str], ...]], float],
    name: str,
    q: float,
) -> float | None:
    """The q-quantile of a histogram's observations between two scrapes (linear within a bucket)."""
    buckets: dict[float, float] = {}
    for (sample, labels), value in after.items():
        if sample == f"{name}_bucket":
            le = float(dict(labels)["le"])
            buckets[le] = buckets.get(le, 0.0) + value - before.get((sample, labels), 0.0)
    bounds = sorted(buckets)
    if not bounds or buckets[bounds[-1]] <= 0:
        return None
    rank, lower, below = q * buckets[bounds[-1]], 0.0, 0.0
    for le in bounds:
        if buckets[le] >= rank:
            if le == float("inf"):
                return lower
            return lower + (le - lower) * (rank - below) / max(buckets[le] - below, 1e-12)
        lower, below = le, buckets[le]
    return None


@dataclass
class FastLoopFigures:
    """What the fast loop and its Prometheus cost at rest, over one window."""

    seconds: float
    operator_cores: float
    operator_reads_per_s: float
    prometheus_scrapes_per_s: float
    read_period_s: float
    prometheus_cores: float
    prometheus_queries_per_s: float
    api_requests_per_s: float
    api_requests: dict[str, int]
    writes_per_min: float
    observations: int
    observation_mean_ms: float
    observation_p99_ms: float | None
    rates_from: dict[str, int]
    decisions: float
    pages_cores: float
    machine_cores: float


def measure_fast_loop(
    *,
    seconds: float,
    operator_pid: int,
    operator_metrics: str,
    prometheus: PrometheusStack,
    pages: TritonPages,
    api: client.ApiClient,
    audit_log: Path,
) -> FastLoopFigures:
    """Run the window: CPU of the operator, Prometheus and the pages; requests by kind; observations."""
    prom_metrics = f"{prometheus.url}/metrics"
    prometheus_pid = prometheus.pid
    meters = {pid: CpuMeter(pid) for pid in (operator_pid, prometheus_pid, pages.pid)}
    ops_before, prom_before, pages_before = scrape(operator_metrics), scrape(prom_metrics), pages.stats()
    for meter in meters.values():
        meter.start()
    psutil.cpu_percent()
    since = time.time()
    time.sleep(seconds)  # the measurement window itself: nothing to wait for, only time to pass
    until = time.time()
    machine_cores = psutil.cpu_percent() / 100 * (psutil.cpu_count() or 1)
    cores = {pid: meter.cores() for pid, meter in meters.items()}
    ops_after, prom_after, pages_after = scrape(operator_metrics), scrape(prom_metrics), pages.stats()
    wall = until - since

    def delta(before: dict[Any, float], after: dict[Any, float], name: str, **labels: str) -> float:
        return summed(after, name, **labels) - summed(before, name, **labels)

    queries = sum(
        delta(prom_before, prom_after, "prometheus_http_requests_total", handler=handler)
        for handler in ("/api/v1/query", "/api/v1/query_range")
    )
    requests = operator_requests(audit_log, since, until)
    writes = sum(n for key, n in requests.items() if key.split(" ")[0] in WRITE_VERBS)
    count = delta(ops_before, ops_after, "tailpilot_observation_seconds_count")
    total_s = delta(ops_before, ops_after, "tailpilot_observation_seconds_sum")
    _, rates_from = count_ready(api)
    return FastLoopFigures(
        seconds=wall,
        operator_cores=cores[operator_pid],
        operator_reads_per_s=(pages_after["operator"] - pages_before["operator"]) / wall,
        prometheus_scrapes_per_s=(pages_after["prometheus"] - pages_before["prometheus"]) / wall,
        read_period_s=summed(ops_after, "tailpilot_pod_read_period_seconds"),
        prometheus_cores=cores[prometheus_pid],
        prometheus_queries_per_s=queries / wall,
        api_requests_per_s=sum(requests.values()) / wall,
        api_requests=requests,
        writes_per_min=writes / (wall / 60),
        observations=round(count),
        observation_mean_ms=1000 * total_s / count if count else float("nan"),
        observation_p99_ms=(
            None
            if (p99 := histogram_quantile(ops_before, ops_after, "tailpilot_observation_seconds", 0.99))
            is None
            else 1000 * p99
        ),
        rates_from=rates_from,
        decisions=delta(ops_before, ops_after, "tailpilot_decisions_total"),
        pages_cores=cores[pages.pid],
        machine_cores=machine_cores,
    )


def print_fast_loop(services: int, pods: int, figures: FastLoopFigures) -> None:
    p99 = "n/a" if figures.observation_p99_ms is None else f"{figures.observation_p99_ms:.1f} ms"
    print(
        f"\nFast loop at rest over {figures.seconds:.0f} s ({services} services, {pods} Ready pods each, "
        "every pod a real HTTP metrics endpoint, a real Prometheus scraping them at 15 s):"
    )
    print("\n| what | figure |\n|---|---|")
    rows = [
        ("operator CPU", f"{figures.operator_cores:.2f} cores"),
        (
            "operator pod reads",
            f"{figures.operator_reads_per_s:.0f}/s (read period {figures.read_period_s:g} s)",
        ),
        (
            "operator API requests",
            f"{figures.api_requests_per_s:.2f}/s ({figures.writes_per_min:.1f} writes/min)",
        ),
        ("operator Prometheus queries", f"{figures.prometheus_queries_per_s:.2f}/s"),
        (
            "observation latency",
            f"mean {figures.observation_mean_ms:.1f} ms, p99 {p99} ({figures.observations} observations)",
        ),
        ("decisions", f"{figures.decisions / figures.seconds * 60:.0f}/min"),
        ("services' rates from", ", ".join(f"{k}: {v}" for k, v in sorted(figures.rates_from.items()))),
        (
            "Prometheus CPU",
            f"{figures.prometheus_cores:.2f} cores ({figures.prometheus_scrapes_per_s:.0f} scrapes/s)",
        ),
        ("the pages' server CPU (harness)", f"{figures.pages_cores:.2f} cores"),
        ("the whole machine", f"{figures.machine_cores:.2f} of {psutil.cpu_count()} cores busy"),
        ("load average (1 min)", f"{os.getloadavg()[0]:.1f}"),
    ]
    for what, figure in rows:
        print(f"| {what} | {figure} |")
    print(f"\noperator API requests by kind: {figures.api_requests or 'none'}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tailpilot_e2e.bench_scale")
    parser.add_argument("--services", type=int, default=500)
    parser.add_argument("--pods", type=int, default=2, help="Ready Triton pods per service (minReplicas)")
    parser.add_argument("--rest-seconds", type=float, default=120, help="the measurement window at rest")
    parser.add_argument(
        "--resync-seconds",
        type=float,
        default=operator_flags([]).resync_seconds,
        help="the operator's resync period (default: its own default, as a platform team runs it)",
    )
    parser.add_argument("--timeout", type=float, default=1200)
    args = parser.parse_args(argv)

    # Every replica and, at the peak, every build pod holds one GPU.
    h100_nodes = ((args.pods + 1) * args.services) // 8 + 2
    state = REPO_ROOT / ".cluster-bench"
    cluster = LocalCluster(
        paths=ClusterPaths(state),
        ports=Ports(**{k: v + 5000 for k, v in vars(Ports()).items()}),
        fleet=scaled_fleet(h100_nodes=h100_nodes, pods_per_node=250),
        audit_log=True,
        real_node=True,
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
    prometheus = PrometheusStack(
        cluster, NAMESPACE, state / "prometheus", scrape_interval_s=SCRAPE_INTERVAL_S
    )
    pages = TritonPages(PageLoad())
    player, feeder = BuildPlayer(api), None
    metrics_port = free_port()
    try:
        prometheus.start()
        pages.start()
        feeder = PodFeeder(api, pages)
        player.start()
        feeder.start()
        with OperatorProcess(
            cluster,
            namespace=NAMESPACE,
            log_dir=state / "logs",
            kubeconfig=kubeconfig,
            extra_args=[
                "--resync-seconds",
                str(args.resync_seconds),
                "--prometheus-url",
                prometheus.url,
                "--metrics-port",
                str(metrics_port),
                "--bind-address",
                "127.0.0.1",
                *prometheus.operator_args,
            ],
        ) as operator:
            sampler = RssSampler(operator.pid)
            sampler.start()
            objects = client.CustomObjectsApi(api)
            start = time.monotonic()
            with ThreadPoolExecutor(8) as pool:
                list(
                    pool.map(
                        lambda i: objects.create_namespaced_custom_object(
                            "tailpilot.io", "v1alpha1", NAMESPACE, "inferenceservices", service(i, args.pods)
                        ),
                        range(args.services),
                    )
                )
            applied = time.monotonic() - start
            ready, progress = 0, []
            while ready < args.services and time.monotonic() - start < args.timeout:
                time.sleep(2)  # sampling the progress curve of the benchmark
                ready, _ = count_ready(api)
                progress.append((round(time.monotonic() - start), ready))
            all_ready_s = time.monotonic() - start
            # Nothing is built or started at rest: the harness stops polling (its LISTs of a
            # thousand pods would load the API server and the CPUs it measures), after a last pass.
            player.stop.set()
            feeder.stop.set()
            feeder.join()
            feeder.feed()
            monitoring = settle_monitoring(prometheus, api, pods=args.services * args.pods)
            time.sleep(SETTLE_S)  # the last status writes, events and first decisions settle
            figures = measure_fast_loop(
                seconds=args.rest_seconds,
                operator_pid=operator.pid,
                operator_metrics=f"http://127.0.0.1:{metrics_port}/metrics",
                prometheus=prometheus,
                pages=pages,
                api=api,
                audit_log=state / "logs" / "audit.log",
            )
            sampler.stop.set()
            sampler.join()
    finally:
        player.stop.set()
        if feeder is not None:
            feeder.stop.set()
        pages.stop()
        prometheus.stop()
    print("\n| services | applied in | all Ready after | operator peak RSS |")
    print("|---|---|---|---|")
    ready_text = f"{all_ready_s:.1f} s" if ready >= args.services else f"NOT ALL READY ({ready})"
    print(f"| {args.services} | {applied:.1f} s | {ready_text} | {sampler.peak / 2**20:.0f} MiB |")
    print("progress (s, ready):", progress[:: max(1, len(progress) // 15)])
    print(
        f"monitoring settled {monitoring.after_s:.1f} s after all were Ready: "
        f"{monitoring.up_targets} targets up, {monitoring.rule_groups} rule groups evaluated "
        f"from {monitoring.rule_configmaps} rule ConfigMaps"
    )
    print_fast_loop(args.services, args.pods, figures)
    cluster.down()
    return 0 if ready >= args.services else 1


if __name__ == "__main__":
    raise SystemExit(main())
