"""The scale benchmark's Triton endpoints: a real server on a simulated pod's IP, read by the operator."""

from __future__ import annotations

import asyncio

import httpx
from prometheus_client.parser import text_string_to_metric_families

from tailpilot.bench.triton_metrics import metrics_page
from tailpilot.controllers.signals.pod_signals import PodSignals, parse_triton_counters
from tailpilot.policy.signals import PodLatency, TritonCounters
from tailpilot_e2e.triton_pages import PageLoad, PodEndpoint, TritonPages, client_of
from tests.fakes import FakeClock

IP = "127.64.250.7"  # KWOK's pod range: loopback, nothing else listens there


def test_the_page_carries_the_latency_summary_prometheus_scrapes_and_the_counters_the_reader_parses():
    counters = TritonCounters(success=40.0, pending=2.0, request_duration_us=400_000.0)
    page = metrics_page(
        counters, model="m", latency=PodLatency(p99_us=15_000.0, quantiles_us=((0.5, 8_000.0),))
    )
    assert parse_triton_counters(page, model="m") == counters
    summary = next(
        f for f in text_string_to_metric_families(page) if f.name == "nv_inference_request_summary_us"
    )
    assert {(s.name, s.labels.get("quantile"), s.value) for s in summary.samples} == {
        ("nv_inference_request_summary_us", "0.5", 8_000.0),
        ("nv_inference_request_summary_us", "0.99", 15_000.0),
        ("nv_inference_request_summary_us_count", None, 40.0),
        ("nv_inference_request_summary_us_sum", None, 400_000.0),
    }


def test_a_pod_ip_answers_growing_counters_to_the_operator_and_requests_are_counted_by_client():
    async def two_reads() -> list[float]:
        clock = FakeClock()
        signals = PodSignals(clock=clock)
        successes = []
        for at in (0.0, 1.0):
            clock.now = at
            read = await signals.read("ns", "svc", model="svc", pod_ips={"svc-a": IP}, keep_s=60.0)
            successes.append(read.pods["svc-a"].success)
            await asyncio.sleep(0.2)  # the counters grow with wall time: let some pass between reads
        await signals.close()
        return successes

    with TritonPages(PageLoad(rate_per_s=50.0)) as pages:
        assert pages.add([PodEndpoint(ip=IP, model="svc")]) == 1
        assert pages.add([PodEndpoint(ip=IP, model="svc")]) == 0  # already served
        first, second = asyncio.run(two_reads())
        assert 0 <= first < second
        page = httpx.get(f"http://{IP}:8002/metrics", headers={"User-Agent": "Prometheus/3.16.0"}, timeout=5)
        assert 'quantile="0.99"' in page.text
        assert pages.stats() == {"operator": 2, "prometheus": 1, "other": 0, "pods": 1}
    assert client_of("Python/3.11 aiohttp/3.13.2") == "operator"
