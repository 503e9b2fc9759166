"""Executions per batch size from Triton's statistics extension: the parse, the reader asking every 10 s."""

from __future__ import annotations

import asyncio
import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from tailpilot.api.autoscaling import BatchingConfig
from tailpilot.builders.triton_server import TritonServer
from tailpilot.controllers.signals.pod_signals import (
    PodSignals,
    parse_batch_stats,
    pod_stats_url,
)
from tailpilot.policy.batch_sizes import grown
from tailpilot.policy.signals import BATCH_STATS_PERIOD_S, ObservationWindows, PodRead, observation_from_reads
from tests.controllers.triton_fixtures import INFER_BODY, MODEL, write_repository
from tests.fakes import FakeClock, PageServer

#: A real Triton 2.51's answer to GET /v2/models/echo/stats (the tests' Python-backend echo model,
#: max batch 8, 2 ms queue delay, after 240 requests from 6 clients and the model's warm-up, which
#: Triton counts too; saved as it came).
REAL_STATS = Path(__file__).with_name("triton_model_stats.json")


def test_a_real_tritons_statistics_give_the_executions_per_batch_size():
    body = json.loads(REAL_STATS.read_text())
    parsed = parse_batch_stats(body, model="echo")
    assert parsed is not None
    counts = {size: figures.executions for size, figures in parsed.items()}
    assert counts == {1: 20, 2: 17, 3: 6, 4: 14, 5: 13, 6: 8, 8: 1}
    (version,) = body["model_stats"]
    # The same answer's totals: every execution and every inference is in one batch size.
    assert sum(counts.values()) == version["execution_count"]
    assert sum(size * n for size, n in counts.items()) == version["inference_count"]
    # And the compute time: each request is charged its batch's, so the request-level total is the
    # sum over sizes of size x the time of that size's executions.
    assert parsed[1].compute_us == pytest.approx(82500009 / 1000)
    charged_ns = sum(size * figures.compute_us * 1000 for size, figures in parsed.items())
    assert charged_ns == pytest.approx(version["inference_stats"]["compute_infer"]["ns"])
    assert parse_batch_stats(body, model="other") is None


def test_versions_are_summed_and_malformed_entries_skipped():
    def version(v: str, batches: list[Any]) -> dict[str, Any]:
        return {"name": "m", "version": v, "batch_stats": batches}

    def batch(size: Any, count: Any) -> dict[str, Any]:
        return {"batch_size": size, "compute_infer": {"count": count, "ns": 1}}

    body = {
        "model_stats": [
            version("1", [batch(1, 4), batch(2, 3)]),
            version("2", [batch(2, 5), batch("4", "6"), batch(0, 9), batch(3, None), {"batch_size": 5}]),
            {"name": "other", "version": "1", "batch_stats": [batch(1, 1000)]},
        ]
    }
    parsed = parse_batch_stats(body, model="m") or {}
    assert {size: figures.executions for size, figures in parsed.items()} == {1: 4, 2: 8, 4: 6}
    assert parsed[2].compute_us == pytest.approx(2 / 1000)  # 1 ns per entry, both versions
    # A model loaded but never executed has no batch_stats: known, and empty.
    assert parse_batch_stats({"model_stats": [{"name": "m", "version": "1"}]}, model="m") == {}
    for answer in ({"error": "requested model 'm' is not available"}, [], None, {"model_stats": "x"}):
        assert parse_batch_stats(answer, model="m") is None


def test_the_statistics_are_asked_on_port_8000_for_the_model_quoted():
    assert pod_stats_url("10.0.0.7", "resnet 50/v") == "http://10.0.0.7:8000/v2/models/resnet%2050%2Fv/stats"


def test_the_reader_asks_the_statistics_every_period_with_the_pages_and_a_pod_without_them_has_none():
    ips = {"echo-a": "10.0.3.1", "echo-b": "10.0.3.2"}

    def page(success: float) -> tuple[str, str]:
        return ("text/plain", f'nv_inference_request_success{{model="echo",version="1"}} {success}\n')

    def stats(counts: dict[int, int]) -> tuple[str, str]:
        batches = [{"batch_size": s, "compute_infer": {"count": n}} for s, n in counts.items()]
        return ("application/json", json.dumps({"model_stats": [{"name": "echo", "batch_stats": batches}]}))

    async def run(server: PageServer) -> Any:
        clock = FakeClock()
        signals = PodSignals(
            clock=clock,
            url_of=lambda ip: f"{server.url}/pods/{ip}/metrics",
            stats_url_of=lambda ip, model: f"{server.url}/pods/{ip}/models/{model}/stats",
        )
        reads = []
        for at in range(0, 22, 2):  # every 2 s for 20 s
            clock.now = float(at)
            server.pages.update({f"/pods/{ip}/metrics": page(10.0 * at) for ip in ips.values()})
            # Only echo-a answers its statistics (echo-b's port 8000 is closed: 404 here).
            server.pages["/pods/10.0.3.1/models/echo/stats"] = stats({1: 2 * at, 4: at})
            reads.append(await signals.read("ns", "echo", model="echo", pod_ips=ips, keep_s=60.0))
        history = signals.history("ns", "echo")
        await signals.close()
        return reads, history

    with PageServer() as server:
        reads, history = asyncio.run(run(server))
        stats_hits = server.hits.get("/pods/10.0.3.1/models/echo/stats", 0)
        b_hits = server.hits.get("/pods/10.0.3.2/models/echo/stats", 0)
    assert BATCH_STATS_PERIOD_S == 10.0
    asked = [r.at_s for r in reads if r.batches is not None]
    assert asked == [0.0, 10.0, 20.0] and stats_hits == b_hits == 3
    assert all(set(r.batches or {}) == {"echo-a"} for r in reads if r.batches is not None)
    # Every read still has both pods' pages: the statistics only add.
    assert all(set(r.pods) == set(ips) and r.serving is None for r in reads)
    windows = ObservationWindows(window_s=20.0, recent_window_s=10.0, arrival_lookback_s=None)
    obs = observation_from_reads(history.reads, windows=windows, now_s=20.0)
    sizes = {s.size: (s.executions, s.request_share) for s in obs.executed_batch_sizes or ()}
    assert sizes == {1: (40, 40 / 120), 4: (20, 80 / 120)}


@pytest.mark.triton
@pytest.mark.slow
def test_the_reader_reads_a_real_tritons_executions_per_batch_size(tmp_path: Path):
    """Two reads of a real Triton's page and statistics, around a burst of concurrent requests."""
    repo = write_repository(
        tmp_path / "repo", batching=BatchingConfig(max_batch_size=8, max_queue_delay_us=2000)
    )
    with TritonServer(repo, explicit_models=[MODEL], work_dir=tmp_path / "triton") as server:

        async def read(signals: PodSignals) -> PodRead:
            return await signals.read("ns", MODEL, model=MODEL, pod_ips={"pod": "local"}, keep_s=60.0)

        async def run() -> tuple[PodRead, PodRead]:
            clock = FakeClock()
            signals = PodSignals(
                clock=clock,
                url_of=lambda ip: server.metrics_url,
                stats_url_of=lambda ip, model: f"{server.http_url}/v2/models/{model}/stats",
            )
            before = await read(signals)
            with httpx.Client(timeout=10) as client, ThreadPoolExecutor(6) as pool:
                post = lambda _: client.post(f"{server.http_url}/v2/models/{MODEL}/infer", json=INFER_BODY)  # noqa: E731
                assert all(r.status_code == 200 for r in pool.map(post, range(120)))
            clock.now = BATCH_STATS_PERIOD_S
            after = await read(signals)
            await signals.close()
            return before, after

        before, after = asyncio.run(run())
    assert before.batches is not None and after.batches is not None
    executions = grown(after.batches["pod"], before.batches["pod"])
    page_growth = after.pods["pod"].exec_count - before.pods["pod"].exec_count
    success_growth = after.pods["pod"].success - before.pods["pod"].success
    # The statistics and the metrics page count the same executions and the same requests.
    assert sum(n.executions for n in executions.values()) == page_growth > 0
    assert sum(size * n.executions for size, n in executions.items()) == success_growth == 120
    compute_growth_us = after.pods["pod"].compute_duration_us - before.pods["pod"].compute_duration_us
    # The page's compute time charges each request its batch's: the statistics' times, by size.
    assert sum(size * n.compute_us for size, n in executions.items()) == pytest.approx(
        compute_growth_us, rel=0.01
    )
    assert max(executions) > 1  # 6 clients at once, a 2 ms delay: Triton batched them


def test_a_page_past_the_bound_makes_its_pod_unreadable_and_the_others_are_read():
    """A declared size past the bound is refused before reading; a chunked one once it passes it."""
    from aiohttp import web

    from tailpilot.controllers.signals.pod_signals import MAX_PAGE_BYTES

    good = 'nv_inference_request_success{model="echo",version="1"} 5\n'
    filler = "# " + "x" * 1022 + "\n"  # comment lines, as a page could carry

    async def declared(_: web.Request) -> web.Response:
        return web.Response(text=good + filler * (MAX_PAGE_BYTES // 1024 + 1))

    async def chunked(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse()
        response.enable_chunked_encoding()
        await response.prepare(request)
        await response.write(good.encode())
        for _ in range(MAX_PAGE_BYTES // 1024 + 64):
            await response.write(filler.encode())
        return response

    async def fine(_: web.Request) -> web.Response:
        return web.Response(text=good)

    async def run() -> Any:
        app = web.Application()
        app.add_routes([web.get("/big", declared), web.get("/chunked", chunked), web.get("/fine", fine)])
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = runner.addresses[0][1]
        paths = {"10.0.4.1": "big", "10.0.4.2": "chunked", "10.0.4.3": "fine"}
        signals = PodSignals(
            clock=FakeClock(),
            url_of=lambda ip: f"http://127.0.0.1:{port}/{paths[ip]}",
            stats_url_of=lambda ip, model: f"http://127.0.0.1:{port}/no-statistics",
        )
        pod_ips = {"a": "10.0.4.1", "b": "10.0.4.2", "c": "10.0.4.3"}
        try:
            return await signals.read("ns", "echo", model="echo", pod_ips=pod_ips, keep_s=60.0)
        finally:
            await signals.close()
            await runner.cleanup()

    read = asyncio.run(run())
    assert set(read.pods) == {"c"}
