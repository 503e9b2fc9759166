"""observe_service against a real Prometheus scraping two real Triton "pods", at three load levels.

Each level starts two fresh Triton servers (so each one's latency summary
covers exactly that level's requests; Triton's summaries keep a sliding window
of about a minute), one with a slower model than the other, so the service P99
really is a mixture. The load generator round-robins across both and its own
P99 is the ground truth. Before comparing, the test waits until Prometheus has
scraped the final request counters (the sum equals the client's count), so
both sides measure the same requests. The load is open-loop Poisson from a separate process.
Bounded: about a minute in all on a busy 2-core machine.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from triton_fixtures import INFER_BODY, model_warmup_requests, write_repository

from tailpilot.api.autoscaling import BatchingConfig, Observation
from tailpilot.bench import traces
from tailpilot.bench.loadgen import LoadResult, Payload
from tailpilot.bench.loadgen_process import LoadProcess
from tailpilot.builders.triton_server import TritonServer, free_port
from tailpilot.controllers.signals.observe import Selector, observe_service, pod_metrics
from tailpilot.policy.estimate import PodMetrics
from tailpilot_e2e.config import tool
from tailpilot_e2e.wait import eventually

# Part of `make test` again since the load generator runs in its own process (LoadProcess): run in this
# process, its client-side queueing put up to 190 ms outside Triton's span at the top level on 2 cores
# and failed the 15% bound about once in two runs. `make bench-p99-estimate` prints the figures.
pytestmark = [pytest.mark.triton, pytest.mark.prometheus, pytest.mark.slow]

NAMESPACE = "loadtest"
SERVICE = "echo"
#: (label, workers, requests per second per worker): the open-loop Poisson rate is their product,
#: split round robin over both pods.
LEVELS = [("low", 6, 5.0), ("mid", 9, 5.0), ("high", 12, 5.0)]
LEVEL_SECONDS = 8.0
#: Untimed requests per pod before each level (counted on the server side too).
WARMUP_REQUESTS = 3
#: Model base times of the two pods (ms): a fast and a slow replica.
POD_BASE_MS = {"a": 100.0, "b": 150.0}
#: Covers every level (about a minute in all), so the last observation's arrival curve holds them all.
ARRIVAL_LOOKBACK_S = 300.0
#: The observation's evaluation window (s).
WINDOW_S = 30.0


PROMETHEUS_YML = """
global:
  scrape_interval: 2s
  evaluation_interval: 1s
scrape_configs:
  - job_name: triton
    scrape_interval: 2s
    file_sd_configs:
      - files: ["{targets}"]
        refresh_interval: 1s
"""


@dataclass
class Prometheus:
    url: str
    targets_file: Path

    def set_targets(self, targets: dict[str, str]) -> None:
        """Scrape exactly these pods (name -> host:port); written atomically, picked up by file SD."""
        groups = [
            {
                "targets": [address],
                "labels": {"namespace": NAMESPACE, "inferenceservice": SERVICE, "pod": pod},
            }
            for pod, address in targets.items()
        ]
        tmp = self.targets_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(groups))
        tmp.replace(self.targets_file)

    def query(self, promql: str) -> list[dict[str, Any]]:
        r = httpx.get(f"{self.url}/api/v1/query", timeout=5, params={"query": promql})
        return list(r.json()["data"]["result"])


@pytest.fixture
def prometheus(tmp_path: Path) -> Iterator[Prometheus]:
    binary = tool("prometheus")
    assert binary, "prometheus is needed: `make binaries` builds it from upstream (cached)"
    targets_file = tmp_path / "targets.json"
    targets_file.write_text("[]")
    (tmp_path / "prometheus.yml").write_text(PROMETHEUS_YML.format(targets=targets_file))
    web_port = free_port()
    log = (tmp_path / "prometheus.log").open("wb")
    proc = subprocess.Popen(
        [
            binary,
            f"--config.file={tmp_path / 'prometheus.yml'}",
            f"--storage.tsdb.path={tmp_path / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{web_port}",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{web_port}"
    try:
        eventually(
            lambda: httpx.get(f"{url}/-/ready", timeout=1).status_code == 200,
            timeout=20,
            description="prometheus ready",
        )
        yield Prometheus(url=url, targets_file=targets_file)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
        log.close()


def scraped_successes(prom: Prometheus, level: str) -> float:
    result = prom.query(f'sum(nv_inference_request_success{{namespace="{NAMESPACE}",pod=~"{level}-.*"}})')
    return float(result[0]["value"][1]) if result else -1.0


def targets_up(prom: Prometheus, level: str) -> bool:
    result = prom.query(f'up{{namespace="{NAMESPACE}",pod=~"{level}-.*"}} == 1')
    return len(result) == len(POD_BASE_MS)


def warm_up(servers: list[TritonServer]) -> None:
    """Send a few untimed requests per pod: the first request to a fresh model pays ~100 ms outside
    Triton's own latency span (measured here), a start-up cost no steady-state estimate can see."""
    with httpx.Client(timeout=10) as client:
        for server in servers:
            for _ in range(WARMUP_REQUESTS):
                assert (
                    client.post(f"{server.http_url}/v2/models/echo/infer", json=INFER_BODY).status_code == 200
                )


def server_p99_ms(server: TritonServer, family: str = "nv_inference_request_summary_us") -> float:
    """The pod's own P99 of one of its summaries, from its metrics page (-1: not on the page)."""
    for line in httpx.get(server.metrics_url, timeout=5).text.splitlines():
        if line.startswith(family + "{") and 'quantile="0.99"' in line:
            return round(float(line.rsplit(" ", 1)[1]) / 1000, 1)
    return -1.0


def client_p99_ms_of(load: LoadResult, base_url: str) -> float:
    """The client-side P99 of the requests one pod answered."""
    latency = np.asarray(load.latency_s, dtype=np.float64)
    mine = np.asarray([t == base_url for t in load.target]) & np.isfinite(latency)
    return round(float(np.quantile(latency[mine], 0.99)) * 1000, 1)


def observe(prom_url: str, now_s: float | None = None) -> Observation:
    async def main() -> Observation:
        async with httpx.AsyncClient(timeout=10) as client:
            return await observe_service(
                client,
                prometheus_url=prom_url,
                namespace=NAMESPACE,
                service=SERVICE,
                window_s=WINDOW_S,
                now_s=time.time() if now_s is None else now_s,
                arrival_lookback_s=ARRIVAL_LOOKBACK_S,
                arrival_bin_s=2.0,
            )

    return asyncio.run(main())


def scraped_part_p99s_ms(prom_url: str, now_s: float) -> dict[str, list[float]]:
    """Each pod's own queue and compute-infer P99 (ms) as Prometheus held them at `now_s`.

    These are the merge's inputs. The pods' pages are no stand-in for them: Triton's summaries
    slide (age buckets over about a minute), so a page read a second after the scrape can already
    differ (a merged 151.95 ms against a page's 151.8 ms, in one run).
    """

    async def main() -> list[PodMetrics]:
        async with httpx.AsyncClient(timeout=10) as client:
            return await pod_metrics(
                client,
                prometheus_url=prom_url,
                selector=Selector(namespace=NAMESPACE, service=SERVICE),
                window_s=WINDOW_S,
                now_s=now_s,
            )

    pods = asyncio.run(main())
    return {
        "queue": [p.queue_summary.p99_us / 1000 for p in pods if p.queue_summary and p.queue_summary.p99_us],
        "compute": [
            p.compute_summary.p99_us / 1000 for p in pods if p.compute_summary and p.compute_summary.p99_us
        ],
    }


def test_service_p99_estimate_within_15_percent_of_client_p99(tmp_path: Path, prometheus: Prometheus):
    batching = BatchingConfig(max_batch_size=8)
    repos = {
        pod: write_repository(tmp_path / f"repo-{pod}", batching=batching, base_ms=ms)
        for pod, ms in POD_BASE_MS.items()
    }
    report = []
    parts_report: list[
        tuple[str, dict[str, float | None], dict[str, list[float]], dict[str, list[float]]]
    ] = []
    phases: list[float] = []
    # Requests of every level, without and with the warm-up ones (scraped, maybe before the first sample).
    sent, sent_with_warmups = 0, 0
    for level, workers, rate in LEVELS:
        level_start = time.monotonic()
        servers = {
            f"{level}-{pod}": TritonServer(
                repos[pod],
                explicit_models=["echo"],
                work_dir=tmp_path / f"t-{level}-{pod}",
            )
            for pod in POD_BASE_MS
        }
        # Ports are known before start: register them now (Prometheus applies discovery at most every 5 s).
        prometheus.set_targets({name: f"127.0.0.1:{srv.ports.metrics}" for name, srv in servers.items()})
        try:
            # Started side by side: each start is mostly waiting for the model to load.
            with ThreadPoolExecutor(max_workers=len(servers)) as pool:
                list(pool.map(lambda srv: srv.start(), servers.values()))
            warm_up(list(servers.values()))
            eventually(
                lambda level=level: targets_up(prometheus, level), timeout=15, description="targets up"
            )
            arrivals = traces.poisson(
                rate=workers * rate, duration_s=LEVEL_SECONDS, rng=np.random.default_rng(len(report))
            )
            # The client runs in a process of its own, so its queueing does not compete with this one.
            with LoadProcess(
                work_dir=tmp_path / f"load-{level}",
                model="echo",
                payload=Payload(
                    body=json.dumps(INFER_BODY).encode(), headers={"Content-Type": "application/json"}
                ),
                arrivals_s=arrivals,
                max_requests=5000,
                max_duration_s=LEVEL_SECONDS,
                targets=[s.http_url for s in servers.values()],
                timeout_s=10.0,
            ) as generator:
                load = generator.wait(timeout=LEVEL_SECONDS + 20)
            assert load.ok == len(load.status), dict(load.errors)
            count = len(load.status)
            warmups = (WARMUP_REQUESTS + model_warmup_requests(batching)) * len(servers)
            eventually(
                lambda level=level, n=count + warmups: scraped_successes(prometheus, level) == n,
                timeout=10,
                description=f"prometheus scraped all {count} requests of level {level}",
            )
            sent, sent_with_warmups = sent + count, sent_with_warmups + count + warmups
            observed_at = time.time()
            obs = observe(prometheus.url, observed_at)
            scraped_parts = scraped_part_p99s_ms(prometheus.url, observed_at)
            per_pod = [(client_p99_ms_of(load, srv.http_url), server_p99_ms(srv)) for srv in servers.values()]
            parts_p99 = {
                part: [server_p99_ms(srv, family) for srv in servers.values()]
                for part, family in (
                    ("queue", "nv_inference_queue_summary_us"),
                    ("compute", "nv_inference_compute_infer_summary_us"),
                )
            }
        finally:
            with ThreadPoolExecutor(max_workers=len(servers)) as pool:
                list(pool.map(lambda srv: srv.close(), servers.values()))
            phases.append(round(time.monotonic() - level_start, 1))
        client_p99_ms = load.quantile_ms(0.99)
        assert obs.p99_ms is not None
        assert obs.ready_replicas == 2
        report.append((level, count, round(client_p99_ms, 2), round(obs.p99_ms, 2), per_pod))
        assert abs(obs.p99_ms - client_p99_ms) / client_p99_ms <= 0.15, report
        # The parts' P99s merge the pods' own summaries the same way: a mixture's P99 lies within its
        # parts' range, here the pods' P99s that Prometheus held at the same instant (both pods').
        merged = {"queue": obs.queue_time_p99_ms, "compute": obs.compute_time_p99_ms}
        parts_report.append(
            (level, {k: round(v, 2) if v else v for k, v in merged.items()}, scraped_parts, parts_p99)
        )
        for part, value in merged.items():
            assert value is not None, parts_report
            assert len(scraped_parts[part]) == 2, parts_report
            assert min(scraped_parts[part]) - 1e-6 <= value <= max(scraped_parts[part]) + 1e-6, parts_report
        # Every compute part per request was read: the model computes its 100 or 150 ms in infer.
        assert obs.compute_input_time_ms is not None and obs.compute_output_time_ms is not None
        assert obs.compute_time_ms is not None and obs.compute_time_ms >= 100.0

    # The arrival curve's bins add up to the requests sent, across three generations of pods: each
    # pod counts from its first sample (taken before its load, after at most its warm-ups) and a
    # gone pod counts nothing more. Eventually: the newest sample can lie past the last step.
    def curve_total() -> float:
        curve = observe(prometheus.url)
        assert curve.arrival_bin_s == 2.0
        return sum(curve.arrival_counts)

    eventually(lambda: curve_total() >= sent, timeout=10, description=f"the arrival curve counts {sent}")
    assert curve_total() <= sent_with_warmups, (curve_total(), sent)
    print("level, requests, client P99 ms, estimated P99 ms, per pod (client, server) P99 ms:", report)
    print("seconds per level:", phases)
    print(
        "level, merged queue / compute infer P99 ms, per pod's P99 ms in Prometheus, on its page:",
        parts_report,
    )
