"""The fast loop's parts: Triton's metrics page, the rates, the label changes, the surge check."""

from __future__ import annotations

import asyncio
import random
from collections import deque
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tailpilot.api import constants as c
from tailpilot.controllers.autoscale.fast_checks import FastChecker, label_changes
from tailpilot.controllers.core.kubeapi import ready_pod_ip
from tailpilot.controllers.core.metrics import OperatorMetrics
from tailpilot.controllers.core.watched import WatchedObjects
from tailpilot.controllers.signals.observe import SUMMARY_QUERIES
from tailpilot.controllers.signals.pod_signals import PodSignals, parse_triton_counters
from tailpilot.policy.signals import (
    MAX_PODS_PER_READ,
    PodRead,
    TritonCounters,
    arrival_rate_per_s,
    completion_rate_per_s,
    sample_pods,
)
from tests.controllers.triton_fixtures import echo_service
from tests.fakes import FakeClock, PageServer

# Triton's exposition format (as served on :8002/metrics), two versions of the model and another model.
PAGE = """# HELP nv_inference_request_success Number of successful inference requests, all batch sizes
# TYPE nv_inference_request_success counter
nv_inference_request_success{model="echo",version="1"} 120
nv_inference_request_success{model="echo",version="2"} 5
nv_inference_request_success{model="other",version="1"} 999
# HELP nv_inference_pending_request_count Instantaneous number of pending requests awaiting execution.
# TYPE nv_inference_pending_request_count gauge
nv_inference_pending_request_count{model="echo",version="1"} 7
nv_inference_pending_request_count{model="other",version="1"} 50
"""


def test_counters_of_the_model_summed_over_versions():
    assert parse_triton_counters(PAGE, model="echo") == TritonCounters(success=125.0, pending=7.0)
    assert parse_triton_counters(PAGE, model="absent") is None


def test_every_counter_the_observation_needs_is_read_from_the_page():
    page = "\n".join(
        f'{metric}{{model="echo",version="1"}} {value}'
        for metric, value in [
            ("nv_inference_request_success", 10),
            ("nv_inference_request_failure", 1),
            ("nv_inference_count", 30),
            ("nv_inference_exec_count", 4),
            ("nv_inference_request_duration_us", 5000),
            ("nv_inference_queue_duration_us", 1200),
            ("nv_inference_compute_infer_duration_us", 3000),
            ("nv_inference_compute_input_duration_us", 40),
            ("nv_inference_compute_output_duration_us", 90),
            ("nv_inference_pending_request_count", 2),
        ]
    )
    assert parse_triton_counters(page + "\n", model="echo") == TritonCounters(
        success=10,
        pending=2,
        failure=1,
        inference_count=30,
        exec_count=4,
        request_duration_us=5000,
        queue_duration_us=1200,
        compute_duration_us=3000,
        compute_input_duration_us=40,
        compute_output_duration_us=90,
    )


def reference_counters(text: str, *, model: str) -> TritonCounters | None:
    """The same sums through prometheus_client's full exposition-format parser."""
    fields = {
        "nv_inference_request_success": "success",
        "nv_inference_request_failure": "failure",
        "nv_inference_count": "inference_count",
        "nv_inference_exec_count": "exec_count",
        "nv_inference_request_duration_us": "request_duration_us",
        "nv_inference_queue_duration_us": "queue_duration_us",
        "nv_inference_compute_infer_duration_us": "compute_duration_us",
        "nv_inference_compute_input_duration_us": "compute_input_duration_us",
        "nv_inference_compute_output_duration_us": "compute_output_duration_us",
        "nv_inference_pending_request_count": "pending",
    }
    sums = dict.fromkeys(fields.values(), 0.0)
    seen = False
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            field = fields.get(s.name.removesuffix("_total"))
            if field and s.labels.get("model") == model:
                sums[field] += s.value
                seen = True
    return TritonCounters(**sums) if seen else None


def test_the_fast_parser_reads_what_the_full_parser_reads_on_a_busy_page():
    rng = random.Random(5)
    models = ["echo", "resnet", 'we"ird\\name', "echo-2"]
    lines = [
        "# HELP nv_gpu_utilization GPU utilization rate [0.0 - 1.0)",
        "# TYPE nv_gpu_utilization gauge",
        'nv_gpu_utilization{gpu_uuid="GPU-1"} 0.5',
        "nv_cpu_utilization 0.25",
        'nv_inference_request_summary_us{model="echo",version="1",quantile="0.99"} 1234.5',
        'nv_inference_request_summary_us_count{model="echo",version="1"} 99',
    ]
    metrics = [
        ("nv_inference_request_success", "counter"),
        ("nv_inference_request_failure", "counter"),
        ("nv_inference_count", "counter"),
        ("nv_inference_exec_count", "counter"),
        ("nv_inference_request_duration_us", "counter"),
        ("nv_inference_queue_duration_us", "counter"),
        ("nv_inference_compute_infer_duration_us", "counter"),
        ("nv_inference_compute_input_duration_us", "counter"),
        ("nv_inference_compute_output_duration_us", "counter"),
        ("nv_inference_pending_request_count", "gauge"),
    ]
    for metric, kind in metrics:
        lines += [f"# HELP {metric} something", f"# TYPE {metric} {kind}"]
        for model in models:
            escaped = model.replace("\\", "\\\\").replace('"', '\\"')
            for version in ("1", "2"):
                value = rng.choice([0, 1, rng.uniform(0, 1e9), 12345678901.0])
                lines.append(f'{metric}{{model="{escaped}",version="{version}"}} {value!r}')
    page = "\n".join(lines) + "\n"
    for model in [*models, "absent"]:
        assert parse_triton_counters(page, model=model) == reference_counters(page, model=model), model


#: A real Triton's page: tritonserver 2.51 (nvidia-pytriton) with `--metrics-config=summary_latencies=true`,
#: as the serving pods run, after 406 requests to the echo model of `triton_fixtures` (max batch 4).
REAL_PAGE = (Path(__file__).parent / "triton_metrics_page.txt").read_text()


def test_the_fast_parser_reads_a_real_tritons_page_as_the_full_parser_does():
    counters = parse_triton_counters(REAL_PAGE, model="echo")
    assert counters == reference_counters(REAL_PAGE, model="echo")
    assert counters is not None
    assert (counters.success, counters.exec_count) == (406, 288)
    assert (counters.compute_input_duration_us, counters.compute_duration_us) == (11658, 1217471)
    assert counters.compute_output_duration_us == 60027


def test_every_summary_the_operator_queries_is_one_triton_exports_with_summary_latencies():
    summaries = {f.name for f in text_string_to_metric_families(REAL_PAGE) if f.type == "summary"}
    assert set(SUMMARY_QUERIES.values()) <= summaries
    # Compute input and output have summaries too; the status keeps their means only.
    assert summaries == {
        "nv_inference_request_summary_us",
        "nv_inference_queue_summary_us",
        "nv_inference_compute_input_summary_us",
        "nv_inference_compute_infer_summary_us",
        "nv_inference_compute_output_summary_us",
    }


def sample(at_s: float, **pods: tuple[float, float]) -> PodRead:
    return PodRead(at_s=at_s, pods={p: TritonCounters(success=s, pending=q) for p, (s, q) in pods.items()})


def test_arrivals_are_completions_plus_queue_growth_over_the_span():
    samples = [
        sample(0.0, a=(100, 0), b=(50, 0)),
        sample(3.0, a=(120, 10), b=(60, 0)),
        sample(6.0, a=(140, 20), b=(75, 0)),
    ]
    # Span 5 s: from the sample at 0 s (the newest at least 5 s older): (40 + 20) + 25 over 6 s.
    assert arrival_rate_per_s(samples, span_s=5.0) == pytest.approx(85 / 6)
    # Span 2 s: from the sample at 3 s.
    assert arrival_rate_per_s(samples, span_s=2.0) == pytest.approx((20 + 10 + 15) / 3)


def test_a_pod_that_started_since_counts_its_whole_counter_and_one_sample_gives_no_rate():
    samples = deque(
        [sample(0.0, a=(100, 0)), sample(5.0, a=(110, 0), b=(30, 2))]
    )  # as the checker keeps them
    assert arrival_rate_per_s(samples, span_s=5.0) == pytest.approx((10 + 32) / 5)
    assert arrival_rate_per_s(list(samples)[:1], span_s=5.0) is None


def test_a_draining_queue_is_not_negative_arrivals():
    samples = [sample(0.0, a=(0, 30)), sample(5.0, a=(20, 0))]
    assert arrival_rate_per_s(samples, span_s=5.0) == 0.0


def test_only_pods_whose_place_changes_are_relabelled():
    labels = {"a": c.ROTATION_IN, "b": c.ROTATION_HELD, "c": c.ROTATION_IN}
    assert label_changes(labels, frozenset({"a", "b"})) == {"a": c.ROTATION_HELD}
    assert label_changes(labels, frozenset()) == {"b": c.ROTATION_IN}


def test_a_pod_has_an_address_to_call_only_when_ready_and_addressed():
    ready = {"type": "Ready", "status": "True"}
    assert ready_pod_ip({"status": {"podIP": "10.0.0.5", "conditions": [ready]}}) == "10.0.0.5"
    assert (
        ready_pod_ip({"status": {"podIP": "10.0.0.5", "conditions": [{**ready, "status": "False"}]}}) is None
    )
    assert ready_pod_ip({"status": {"conditions": [ready]}}) is None
    assert ready_pod_ip({"status": None}) is None


def test_completions_leave_the_queue_out():
    samples = [sample(0.0, a=(100, 0), b=(50, 0)), sample(6.0, a=(140, 20), b=(75, 0))]
    assert completion_rate_per_s(samples, span_s=5.0) == pytest.approx(65 / 6)
    assert completion_rate_per_s(samples[:1], span_s=5.0) is None


# One replica asked for, ~52.3 ms a request at batch 1: 19.1 requests/s.
PROFILE = {
    "hardware": "cpu",
    "serviceTime": {"interceptMs": 52.0, "perItemMs": 0.3, "jitterCv": 0.1},
    "points": [{"batchSize": 1, "p99Ms": 60.0, "throughputPerS": 19.0}],
}
READY = {"type": "Ready", "status": "True"}


class FakeKube:
    """The three calls a fast check makes, answered from memory; patches and Events recorded."""

    def __init__(self, body: dict[str, Any], pods: list[dict[str, Any]]) -> None:
        self.body, self.pods = body, pods
        self.patches: list[tuple[str, dict[str, Any]]] = []
        self.events: list[str] = []
        self.reads = 0

    def get(self, resource: Any, namespace: str, name: str) -> dict[str, Any]:
        self.reads += 1
        return self.body

    def list(self, resource: Any, namespace: str, *, label_selector: str) -> list[dict[str, Any]]:
        self.reads += 1
        return self.pods

    def merge_patch(self, resource: Any, namespace: str, name: str, patch: dict[str, Any]) -> None:
        self.patches.append((name, patch))

    def post_event(self, body: dict[str, Any], **event: Any) -> None:
        self.events.append(event["reason"])


def surge_checks(
    autoscaling: dict[str, Any], counters: list[tuple[float, float]], *, watched: bool = False
) -> tuple[list, FakeKube, int]:
    """Run one fast check per (success, pending) reading of the one pod, 3 s apart (as the earlier period)."""
    body = {
        **echo_service("ns", slo={"p99LatencyMs": 100}, autoscaling=autoscaling),
        "status": {"profile": PROFILE, "replicas": 1},
    }
    pods = [
        {"metadata": {"name": "echo-a", "labels": {}}, "status": {"podIP": "10.0.0.7", "conditions": [READY]}}
    ]
    kube = FakeKube(body, pods)
    path = "/pods/10.0.0.7/metrics"

    async def run(server: PageServer) -> list:
        fake_clock = FakeClock()
        signals = PodSignals(clock=fake_clock, url_of=lambda ip: f"{server.url}/pods/{ip}/metrics")
        checker = FastChecker(
            kube=kube,
            signals=signals,
            metrics=OperatorMetrics(),
            clock=fake_clock,
            objects=WatchedObjects(kube=kube, clock=fake_clock) if watched else None,
        )
        results = []
        for i, (success, pending) in enumerate(counters):
            fake_clock.now = 3.0 * i
            server.pages[path] = (
                "text/plain; version=0.0.4",
                f'nv_inference_request_success{{model="echo",version="1"}} {success}\n'
                f'nv_inference_pending_request_count{{model="echo",version="1"}} {pending}\n',
            )
            results.append(await checker.check("ns", "echo"))
        await checker.close()
        return results

    with PageServer() as server:
        results = asyncio.run(run(server))
    return results, kube, server.hits.get(path, 0)


def test_arrivals_above_the_replicas_asked_for_in_two_checks_call_a_decision():
    # 30 arrivals/s (completions 20/s, the queue growing 10/s) against 19.1/s.
    results, kube, _ = surge_checks(
        {"surgeResponse": True}, [(0.0, 0.0), (60.0, 30.0), (120.0, 60.0), (180.0, 90.0)]
    )
    assert [r.surge is not None for r in results] == [False, False, True, False]
    surge = results[2].surge
    assert surge.arrival_rate_per_s == pytest.approx(30.0)
    assert surge.completion_rate_per_s == pytest.approx(20.0)  # the decision's recent request rate
    assert surge.capacity_per_s == pytest.approx(1000 / 52.3, rel=1e-3) and surge.replicas == 1
    # Rotation is off: no pod is relabelled, nothing is held.
    assert kube.patches == [] and all(r.held_out == frozenset() for r in results)


def test_with_the_watches_store_the_checks_ask_the_api_server_once_not_every_period():
    steep = [(0.0, 0.0), (60.0, 30.0), (120.0, 60.0), (180.0, 90.0)]
    direct, direct_kube, _ = surge_checks({"surgeResponse": True}, steep)
    stored, stored_kube, _ = surge_checks({"surgeResponse": True}, steep, watched=True)
    assert stored == direct and any(r.surge for r in stored)
    assert direct_kube.reads == 2 * len(steep) and stored_kube.reads == 2


def test_no_decision_while_the_arrivals_fit_or_when_the_field_is_off():
    fits = [(0.0, 0.0), (54.0, 0.0), (108.0, 0.0), (162.0, 0.0)]  # 18/s
    results, _, _ = surge_checks({"surgeResponse": True}, fits)
    assert not any(r.surge for r in results)
    steep = [(0.0, 0.0), (60.0, 30.0), (120.0, 60.0), (180.0, 90.0)]
    results, _, reads = surge_checks({"surgeResponse": False}, steep)
    # Off: no early decision, but the pods are read every period for the autoscaler's observation.
    assert not any(r.surge for r in results) and reads == len(steep)
    # Nor with the autoscaler off: nothing would decide, nothing reads the pods (with rotation on,
    # they are read).
    results, _, reads = surge_checks({"enabled": False, "surgeResponse": True}, steep)
    assert not any(r.surge for r in results) and reads == 0
    results, _, reads = surge_checks(
        {"enabled": False, "surgeResponse": True, "backlogRotation": True}, steep
    )
    assert not any(r.surge for r in results) and reads == len(steep)


def rotation_service(labels: dict[str, str]) -> FakeKube:
    """A service with backlogRotation whose pods carry the given rotation labels."""
    body = {
        **echo_service("ns", slo={"p99LatencyMs": 100}, autoscaling={"backlogRotation": True}),
        "status": {"profile": PROFILE, "replicas": len(labels)},
    }
    pods = [
        {"metadata": {"name": pod, "labels": {c.LABEL_ROTATION: value}}, "status": {"conditions": [READY]}}
        for pod, value in labels.items()
    ]
    return FakeKube(body, pods)


def release(kube: FakeKube, metrics: OperatorMetrics) -> frozenset[str]:
    async def run() -> frozenset[str]:
        checker = FastChecker(kube=kube, signals=PodSignals(), metrics=metrics)
        return await checker.release("ns", "echo")

    return asyncio.run(run())


def test_held_pods_go_back_in_the_service_when_the_operator_stops():
    kube = rotation_service({"echo-a": c.ROTATION_HELD, "echo-b": c.ROTATION_IN})
    metrics = OperatorMetrics()
    assert release(kube, metrics) == {"echo-a"}
    assert kube.patches == [("echo-a", {"metadata": {"labels": {c.LABEL_ROTATION: c.ROTATION_IN}}})]
    assert kube.events == [c.EVENT_REPLICAS_RETURNED]
    assert 'tailpilot_replicas_held_out{namespace="ns",service="echo"} 0.0' in metrics.render().decode()
    # Nothing held: nothing patched, nothing announced.
    quiet = rotation_service({"echo-a": c.ROTATION_IN})
    assert release(quiet, OperatorMetrics()) == frozenset()
    assert quiet.patches == [] and quiet.events == []


def test_past_the_read_budget_every_service_is_read_less_often_and_the_period_is_reported():
    page = 'nv_inference_request_success{model="echo",version="1"} 5\n'

    async def run(server: PageServer) -> list[float]:
        signals = PodSignals(
            clock=FakeClock(), url_of=lambda ip: f"{server.url}/pods/{ip}/metrics", reads_per_s=2.0
        )
        periods = []
        for service, pods in (("a", 4), ("b", 2), ("c", 6)):
            ips = {f"{service}-{i}": f"10.0.0.{i}" for i in range(pods)}
            await signals.read("ns", service, model="echo", pod_ips=ips, keep_s=60.0)
            periods.append(signals.period_s)
        signals.forget("ns", "c")
        await signals.read("ns", "a", model="echo", pod_ips={"a-0": "10.0.0.0"}, keep_s=60.0)
        periods.append(signals.period_s)
        await signals.close()
        return periods

    with PageServer() as server:
        server.pages.update({f"/pods/10.0.0.{i}/metrics": ("text/plain", page) for i in range(6)})
        # 4 pods at 2 reads/s: every 2 s; 6: every 3 s; 12: every 6 s; then 3 pods: back to 2 s.
        assert asyncio.run(run(server)) == [2.0, 3.0, 6.0, 2.0]

    metrics = OperatorMetrics()
    metrics.record_pod_read(read=3, failed=1, period_s=6.0)
    assert metrics.registry.get_sample_value("tailpilot_pod_read_period_seconds") == 6.0
    assert metrics.registry.get_sample_value("tailpilot_pod_reads_total", {"result": "failed"}) == 1.0


def test_a_service_of_more_pods_than_a_read_asks_is_read_through_its_sample():
    page = 'nv_inference_request_success{model="echo",version="1"} 5\n'
    ips = {f"echo-{i:02d}": f"10.0.1.{i}" for i in range(40)}

    async def run(server: PageServer) -> Any:
        signals = PodSignals(clock=FakeClock(), url_of=lambda ip: f"{server.url}/pods/{ip}/metrics")
        read = await signals.read("ns", "echo", model="echo", pod_ips=ips, keep_s=60.0)
        await signals.close()
        return read

    with PageServer() as server:
        server.pages.update({f"/pods/{ip}/metrics": ("text/plain", page) for ip in ips.values()})
        read = asyncio.run(run(server))
        asked = {path for path, hits in server.hits.items() if hits}
    assert len(read.pods) == MAX_PODS_PER_READ == len(asked) and read.serving == 40
    assert set(read.pods) == set(sample_pods(list(ips)))


def test_the_pods_that_answer_count_for_a_ready_pod_that_did_not():
    # Three Ready pods at 10 requests/s each; the third's page is missing (404) on every read.
    def page(success: float) -> tuple[str, str]:
        return ("text/plain", f'nv_inference_request_success{{model="echo",version="1"}} {success}\n')

    ips = {"echo-a": "10.0.2.1", "echo-b": "10.0.2.2", "echo-c": "10.0.2.3"}

    async def run(server: PageServer) -> Any:
        clock = FakeClock()
        signals = PodSignals(clock=clock, url_of=lambda ip: f"{server.url}/pods/{ip}/metrics")
        for at in (0.0, 2.0):
            clock.now = at
            server.pages.update({f"/pods/{ip}/metrics": page(10.0 * at) for ip in list(ips.values())[:2]})
            read = await signals.read("ns", "echo", model="echo", pod_ips=ips, keep_s=60.0)
        await signals.close()
        return signals.history("ns", "echo").reads, read

    with PageServer() as server:
        reads, newest = asyncio.run(run(server))
    assert set(newest.pods) == {"echo-a", "echo-b"} and newest.serving == 3
    # 20 requests/s answered by two pods stand for 30 from three, not a fall in the load.
    assert completion_rate_per_s(reads, span_s=2.0) == pytest.approx(30.0)
