"""spec.monitoring.clientLatencyP99Query evaluated by the operator's query function against a real Prometheus.

Prometheus (the e2e harness' LocalPrometheus, scraping every second, no cluster) scrapes a page this
test serves on 127.0.0.1 with a real prometheus_client histogram, `client_request_duration_seconds`,
of known observations: 90 of 8 ms and 10 of 200 ms, observed after Prometheus' first scrape so that
`rate` sees them all. The 99th of 100 falls in the bucket (0.1 s, 0.25 s], which holds the last 10:
Prometheus interpolates 0.1 + 0.15 x (99 - 90) / 10 = 0.235 s, so the ingress-style query below
answers 235 ms. Then the answers that give no figure, in the operator's words (Prometheus' own stay in
its log: they can quote other tenants' series).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from tailpilot.controllers.signals.observe import ClientLatency, client_latency
from tailpilot.controllers.signals.prometheus_access import PrometheusAccess
from tailpilot.controllers.signals.prometheus_client import PrometheusClient
from tailpilot_e2e.monitoring import LocalPrometheus
from tailpilot_e2e.wait import eventually
from tests.fakes import PageServer

pytestmark = [pytest.mark.prometheus, pytest.mark.slow]

BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0)
QUERY = (
    "histogram_quantile(0.99, sum by (le) (rate("
    'client_request_duration_seconds_bucket{job="triton",service="shop"}[1m]))) * 1000'
)


@pytest.fixture
def prometheus(tmp_path: Path) -> Iterator[LocalPrometheus]:
    prom = LocalPrometheus(tmp_path / "prometheus", scrape_interval_s=1.0).start()
    try:
        yield prom
    finally:
        prom.stop()


def evaluate(prom: LocalPrometheus, query: str) -> ClientLatency:
    # The platform's Prometheus, with tenants' queries turned on (off by default).
    access = PrometheusAccess(default_url=prom.url, client_queries=True)

    async def main() -> ClientLatency:
        async with PrometheusClient(access, timeout=10) as client:
            return await client_latency(client, prometheus_url=prom.url, query=query, now_s=time.time())

    return asyncio.run(main())


def scraped(prom: LocalPrometheus, promql: str) -> float | None:
    result = prom.query(promql)
    return float(result[0]["value"][1]) if result else None


def test_the_clients_p99_from_a_real_histogram_and_the_answers_that_give_no_figure(
    prometheus: LocalPrometheus,
):
    registry = CollectorRegistry()
    histogram = Histogram(
        "client_request_duration_seconds", "Client-side request time.", buckets=BUCKETS, registry=registry
    )
    with PageServer() as server:

        def publish() -> None:
            server.pages["/metrics"] = (CONTENT_TYPE_LATEST, generate_latest(registry).decode())

        publish()
        address = server.url.removeprefix("http://")
        prometheus.set_targets([(address, {"service": "shop"})])
        count = "sum(client_request_duration_seconds_count)"
        eventually(lambda: scraped(prometheus, count) == 0.0, timeout=30, description="first scrape")
        for _ in range(90):
            histogram.observe(0.008)
        for _ in range(10):
            histogram.observe(0.2)
        publish()
        eventually(lambda: scraped(prometheus, count) == 100.0, timeout=30, description="100 observed")
        answer = evaluate(prometheus, QUERY)
        assert answer.error is None, answer
        assert answer.p99_ms == pytest.approx(235.0, rel=1e-6)

        # A query Prometheus cannot parse: its error type, not its message.
        broken = evaluate(prometheus, "histogram_quantile(0.99, ")
        assert broken.p99_ms is None and broken.error is not None
        assert broken.error.startswith("Prometheus refused the query (bad_data)")
        assert "parse error" not in broken.error
        print(f"client P99 {answer.p99_ms} ms; an invalid query: {broken.error}")
        # No series (a selector matching nothing), several series, a value that is not finite.
        assert evaluate(prometheus, 'up{job="nothing"}').error == "no series, one expected"
        several = evaluate(prometheus, "client_request_duration_seconds_bucket")
        assert several.error == f"{len(BUCKETS) + 1} series, one expected"
        assert "not a finite number" in (evaluate(prometheus, "0 / 0").error or "")
        # A scalar is one figure too.
        total = evaluate(prometheus, "scalar(sum(client_request_duration_seconds_count))")
        assert total == ClientLatency(100.0)
