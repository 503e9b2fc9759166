"""Benchmark: one hostile tenant beside calm ones; the operator's memory and the calm services' periods.

    python -m tailpilot_e2e.bench_adversarial [--calm 8] [--hostile 8] [--window-seconds 120]

On a dedicated local cluster (own state dir and ports), the real operator at its defaults serves two
namespaces:

- `calm`: `--calm` services of 2 Ready pods each, whose pods answer Triton's metrics page
  (`tailpilot_e2e.triton_pages`) and whose queries go to a real Prometheus scraping them;
- `hostile`: `--hostile` services of 2 pods each, whose every endpoint answers as an attacker would
  (`triton_pages.HOSTILE_MODES`, taken in turn per service): a 256 MiB body, one byte a second for
  ever, a JSON document nested 200,000 deep, or silence after accepting. Each hostile service names
  its own Prometheus URL, one such endpoint each ("many URLs"), and the operator is started with
  every one of them allowed (`--allowed-prometheus-url`), the worst case: a platform team that
  admitted the tenant's endpoints. Their pods' metrics pages (what the fast loop reads) are hostile
  too: a tenant who may exec into its pods can put anything on their port.

Two windows of `--window-seconds` each are measured, the first with the calm services alone
("before"), the second after the hostile services are created and their pods serve ("after"):
- the operator's peak RSS (psutil, itself and its children, sampled every 0.5 s);
- for every calm service, the times of its decisions (`tailpilot_decisions_total`, scraped from the
  operator every second): how many, the median and the longest gap between two;
- the operator's CPU, and the decisions of the hostile services.

KWOK plays the GPU nodes (there is no GPU here); builds and profiles are played with results. Everything
else is the real operator process at its defaults, with `--prometheus-url` the real Prometheus:
kube-prometheus-stack's (`tailpilot_e2e.prometheus_stack`), a prometheus-operator that turns the calm
services' generated ServiceMonitors into its scrape jobs, both running as pods on the cluster's one
real node (`local-0`, the node agent's).
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kubernetes import client

from tailpilot.api import constants as c
from tailpilot.bench.published import git_commit, provenance_lines, utc_minute
from tailpilot.controllers.core.settings import DEFAULT_CONTROL_PERIOD_S
from tailpilot_e2e.bench_scale import (
    SCRAPE_INTERVAL_S,
    BuildPlayer,
    CpuMeter,
    PodFeeder,
    RssSampler,
    operator_identity,
    scrape,
    service,
)
from tailpilot_e2e.cluster import ClusterPaths, LocalCluster
from tailpilot_e2e.config import REPO_ROOT, Ports
from tailpilot_e2e.fleet import scaled_fleet
from tailpilot_e2e.kube import api_client, create_namespace
from tailpilot_e2e.operator_harness import (
    OperatorProcess,
    condition,
    create_engine_store,
    free_port,
    install_crds,
)
from tailpilot_e2e.prometheus_stack import PrometheusStack
from tailpilot_e2e.triton_pages import HOSTILE_MODES, PageLoad, PodEndpoint, TritonPages
from tailpilot_e2e.wait import eventually

CALM, HOSTILE = "calm", "hostile"
PODS = 2
#: The hostile tenant's Prometheus endpoints: one loopback address each, port 9090.
HOSTILE_PROMETHEUS_PORT = 9090


def hostile_mode(service_name: str) -> str:
    """The mode of a hostile service's endpoints, taken in turn by its index."""
    return HOSTILE_MODES[int(service_name.rsplit("-", 1)[1]) % len(HOSTILE_MODES)]


def hostile_prometheus(index: int) -> PodEndpoint:
    """The Prometheus endpoint hostile service `index` names (its mode as its pods')."""
    return PodEndpoint(
        ip=f"127.77.0.{index + 1}",
        model="",
        mode=HOSTILE_MODES[index % len(HOSTILE_MODES)],
        port=HOSTILE_PROMETHEUS_PORT,
    )


def calm_service(index: int) -> dict[str, Any]:
    obj = service(index, PODS)
    obj["metadata"]["namespace"] = CALM
    return obj


def hostile_service(index: int) -> dict[str, Any]:
    obj = service(index, PODS)
    obj["metadata"]["namespace"] = HOSTILE
    endpoint = hostile_prometheus(index)
    obj["spec"].setdefault("monitoring", {})["prometheusUrl"] = f"http://{endpoint.ip}:{endpoint.port}"
    return obj


@dataclass(eq=False)  # a Thread must stay hashable
class DecisionLog(threading.Thread):
    """When each service decided: the operator's decision counters scraped every second."""

    metrics_url: str
    stop: threading.Event = field(default_factory=threading.Event)
    #: (namespace, service) -> the monotonic times its counter was seen to grow.
    times: dict[tuple[str, str], list[float]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        super().__init__(daemon=True)

    def run(self) -> None:
        last: dict[tuple[str, str], float] = {}
        while not self.stop.is_set():
            now = time.monotonic()
            counts: dict[tuple[str, str], float] = {}
            try:
                samples = scrape(self.metrics_url)
            except Exception:  # noqa: BLE001 - a missed scrape is a missed second, not the end
                samples = {}
            for (name, labels), value in samples.items():
                if name == "tailpilot_decisions_total":
                    found = dict(labels)
                    key = (found.get("namespace", ""), found.get("service", ""))
                    counts[key] = counts.get(key, 0.0) + value
            for key, count in counts.items():
                if count > last.get(key, 0.0):
                    self.times.setdefault(key, []).append(now)
                last[key] = count
            self.stop.wait(1.0)

    def within(self, namespace: str, since: float, until: float) -> dict[str, list[float]]:
        """Each service of `namespace`'s decision times within [since, until]."""
        return {
            name: [t for t in times if since <= t <= until]
            for (ns, name), times in sorted(self.times.items())
            if ns == namespace
        }


@dataclass(frozen=True)
class Window:
    """What one window measured."""

    label: str
    seconds: float
    peak_rss_mib: float
    operator_cores: float
    #: Calm services: name -> decision times in the window.
    calm: dict[str, list[float]]
    hostile_decisions: int


@contextmanager
def measured(label: str, seconds: float, operator_pid: int, decisions: DecisionLog) -> Iterator[list[Window]]:
    """Measure one window of `seconds` (the body runs first: what changes before the window)."""
    out: list[Window] = []
    yield out
    sampler, meter = RssSampler(operator_pid), CpuMeter(operator_pid)
    sampler.start()
    meter.start()
    since = time.monotonic()
    time.sleep(seconds)  # the window itself: nothing to wait for, only time to pass
    until = time.monotonic()
    cores = meter.cores()
    sampler.stop.set()
    sampler.join()
    hostile = decisions.within(HOSTILE, since, until)
    out.append(
        Window(
            label=label,
            seconds=until - since,
            peak_rss_mib=sampler.peak / 2**20,
            operator_cores=cores,
            calm=decisions.within(CALM, since, until),
            hostile_decisions=sum(len(t) for t in hostile.values()),
        )
    )


def _gaps(times: list[float]) -> list[float]:
    return [b - a for a, b in zip(times, times[1:], strict=False)]


def render_tables(windows: list[Window], calm: int, hostile: int) -> list[str]:
    """The windows as Markdown: one row each, then every calm service's longest gap."""
    lines = [
        f"{calm} calm services and {hostile} hostile ones ({', '.join(HOSTILE_MODES)} in turn), "
        f"{PODS} pods each; the control period is {DEFAULT_CONTROL_PERIOD_S:g} s (the default).",
        "",
        "| window | operator peak RSS | operator CPU | calm decisions | calm services deciding "
        "| median gap | longest gap | hostile decisions |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for w in windows:
        gaps = [g for times in w.calm.values() for g in _gaps(times)]
        deciding = sum(1 for times in w.calm.values() if times)
        median = f"{statistics.median(gaps):.1f} s" if gaps else "n/a"
        longest = f"{max(gaps):.1f} s" if gaps else "n/a"
        lines.append(
            f"| {w.label} ({w.seconds:.0f} s) | {w.peak_rss_mib:.0f} MiB | {w.operator_cores:.2f} cores "
            f"| {sum(len(t) for t in w.calm.values())} | {deciding} of {calm} | {median} | {longest} "
            f"| {w.hostile_decisions} |"
        )
    lines += ["", "Longest gap between two decisions, per calm service:", ""]
    for w in windows:
        per = {name: max(_gaps(times), default=float("nan")) for name, times in w.calm.items()}
        lines.append(f"- {w.label}: " + ", ".join(f"{n} {g:.1f} s" for n, g in per.items()))
    return lines


PAGE_INTRO = """# One hostile tenant beside calm ones

Written by `make bench-adversarial` (`e2e/bench_adversarial.py`); not edited by hand.

On a dedicated local cluster the real operator, at its defaults, serves two namespaces. In `calm`,
each service's pods answer Triton's metrics page and a real Prometheus scrapes them: the one
kube-prometheus-stack runs, whose prometheus-operator turns the ServiceMonitors the operator generates
into scrape jobs (both run as pods on the cluster's one real node). In `hostile`,
every endpoint the operator reads answers as an attacker would, one way per service in turn: a
256 MiB body, one byte a second for ever, JSON nested 200,000 deep, or silence after accepting.
Each hostile service names its own Prometheus URL, and the operator allows every one of them (the
worst case: a platform team that admitted the tenant's endpoints); their pods' metrics pages, which
the fast loop reads, are hostile too (a tenant who may exec into its pods can put anything on
their port).

Two windows are measured: the calm services alone ("before"), then with the hostile services
created and their pods serving ("after"). The operator's peak RSS is its process and children,
sampled every 0.5 s (psutil); a calm service's decisions are read from the operator's
`tailpilot_decisions_total`, scraped every second, so a gap is accurate to about a second.
"""


def _ready(api: client.ApiClient, namespace: str) -> int:
    items = client.CustomObjectsApi(api).list_namespaced_custom_object(
        "tailpilot.io", "v1alpha1", namespace, "inferenceservices"
    )["items"]
    return sum(1 for o in items if (condition(o, "Ready") or {}).get("status") == "True")


def _pods_ready(api: client.ApiClient, namespace: str) -> int:
    pods = client.CoreV1Api(api).list_namespaced_pod(
        namespace, label_selector=f"{c.LABEL_COMPONENT}={c.COMPONENT_SERVER}"
    )
    return sum(1 for p in pods.items if p.status.pod_ip and p.status.phase == "Running")


def _create(api: client.ApiClient, objects: list[dict[str, Any]]) -> None:
    custom = client.CustomObjectsApi(api)
    for obj in objects:
        custom.create_namespaced_custom_object(
            "tailpilot.io", "v1alpha1", obj["metadata"]["namespace"], "inferenceservices", obj
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tailpilot_e2e.bench_adversarial")
    parser.add_argument("--calm", type=int, default=8, help="calm services (namespace calm)")
    parser.add_argument("--hostile", type=int, default=8, help="hostile services (namespace hostile)")
    parser.add_argument("--window-seconds", type=float, default=120.0)
    parser.add_argument("--timeout", type=float, default=300.0, help="for services to be Ready")
    parser.add_argument(
        "--out", type=Path, default=REPO_ROOT / "docs" / "benchmarks" / "adversarial-tenant.md"
    )
    args = parser.parse_args(argv)
    started = time.monotonic()
    commit = git_commit()  # before the run's cluster state and page land in the tree

    h100_nodes = ((PODS + 1) * (args.calm + args.hostile)) // 8 + 2
    state = REPO_ROOT / ".cluster-adversarial"
    cluster = LocalCluster(
        paths=ClusterPaths(state),
        ports=Ports(**{k: v + 6000 for k, v in vars(Ports()).items()}),
        fleet=scaled_fleet(h100_nodes=h100_nodes, pods_per_node=250),
        real_node=True,
    )
    cluster.down()
    cluster.up()
    api = api_client(cluster.paths.kubeconfig)
    install_crds(cluster)
    core = client.CoreV1Api(api)
    for namespace in (CALM, HOSTILE):
        create_namespace(core, namespace)
        create_engine_store(core, namespace, host_path=state / "engines" / namespace)
    kubeconfig = operator_identity(cluster, api, state / "operator.kubeconfig", namespace=CALM)
    prometheus = PrometheusStack(cluster, CALM, state / "prometheus", scrape_interval_s=SCRAPE_INTERVAL_S)
    pages = TritonPages(PageLoad())
    player = BuildPlayer(api, namespaces=(CALM, HOSTILE))
    feeders = [PodFeeder(api, pages, CALM), PodFeeder(api, pages, HOSTILE, mode_of=hostile_mode)]
    metrics_port = free_port()
    hostile_urls = [hostile_prometheus(i) for i in range(args.hostile)]
    allowed = [arg for e in hostile_urls for arg in ("--allowed-prometheus-url", f"http://{e.ip}:{e.port}")]
    windows: list[Window] = []
    asked: dict[str, int] = {}
    try:
        prometheus.start()
        pages.start()
        pages.add(hostile_urls)
        player.start()
        for feeder in feeders:
            feeder.start()
        with OperatorProcess(
            cluster,
            namespace=CALM,
            log_dir=state / "logs",
            kubeconfig=kubeconfig,
            extra_args=[
                "--namespace",
                HOSTILE,
                "--resync-seconds",
                "300",
                "--prometheus-url",
                prometheus.url,
                *allowed,
                "--metrics-port",
                str(metrics_port),
                "--bind-address",
                "127.0.0.1",
                *prometheus.operator_args,
            ],
        ) as operator:
            decisions = DecisionLog(f"http://127.0.0.1:{metrics_port}/metrics")
            decisions.start()
            with measured("before: calm services alone", args.window_seconds, operator.pid, decisions) as out:
                _create(api, [calm_service(i) for i in range(args.calm)])
                eventually(
                    lambda: _ready(api, CALM) >= args.calm,
                    timeout=args.timeout,
                    interval=2.0,
                    description="every calm service Ready",
                )
                # Every calm service has decided at least twice: its loop runs at its period.
                eventually(
                    lambda: (
                        sum(1 for t in decisions.within(CALM, 0, time.monotonic()).values() if len(t) >= 2)
                        >= args.calm
                    ),
                    timeout=args.timeout,
                    interval=2.0,
                    description="every calm service deciding",
                )
            windows += out
            with measured(
                "after: a hostile tenant beside them", args.window_seconds, operator.pid, decisions
            ) as out:
                _create(api, [hostile_service(i) for i in range(args.hostile)])
                eventually(
                    lambda: _pods_ready(api, HOSTILE) >= PODS * args.hostile,
                    timeout=args.timeout,
                    interval=2.0,
                    description="every hostile pod running",
                )
                feeders[1].feed()  # their pages answer (hostile) from the window's start
                asked_before = pages.stats()
            windows += out
            asked = {
                key.removeprefix("hostile "): n - asked_before.get(key, 0)
                for key, n in pages.stats().items()
                if key.startswith("hostile ")
            }
            decisions.stop.set()
    finally:
        player.stop.set()
        for feeder in feeders:
            feeder.stop.set()
        stats = pages.stats()
        pages.stop()
        prometheus.stop()
    tables = render_tables(windows, args.calm, args.hostile)
    answered = (
        f"Requests the hostile endpoints were sent during the second window, by how they answer: {asked}. "
        f"Requests answered by the pages' server over the whole run, by client: {stats}."
    )
    command = (
        "make bench-adversarial"
        if argv is None
        else f"python -m tailpilot_e2e.bench_adversarial {' '.join(argv)}"
    )
    provenance = provenance_lines(
        command=command, commit=commit, date=utc_minute(), elapsed_s=time.monotonic() - started
    )
    page = [PAGE_INTRO, *provenance, "", *tables, "", answered, ""]
    print("\n".join([*tables, "", answered]))
    args.out.write_text("\n".join(page))
    print(f"wrote {args.out}")
    cluster.down()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
