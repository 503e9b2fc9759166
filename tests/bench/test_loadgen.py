"""The open-loop load generator against a tiny local aiohttp server."""

from __future__ import annotations

import asyncio
import json
import math

import numpy as np
import pytest
from aiohttp import web

from tailpilot.bench.loadgen import ProgressTracker, binary_infer_body, infer_body, run_load


async def _serve(handler):
    app = web.Application()
    app.router.add_post("/v2/models/{model}/infer", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # noqa: SLF001 - aiohttp exposes no public accessor
    return runner, f"http://127.0.0.1:{port}"


def test_open_loop_replays_the_schedule_and_measures_latency():
    seen = []

    async def handler(request):
        body = await request.json()
        seen.append((request.match_info["model"], body["inputs"][0]["shape"]))
        await asyncio.sleep(0.2)
        return web.json_response({"outputs": []})

    async def main():
        runner, url = await _serve(handler)
        try:
            arrivals = np.linspace(0.0, 0.5, 26)  # one every 20 ms: much faster than a 200 ms reply
            return await run_load(
                url=url,
                model="m",
                payload=infer_body(inputs=[("X", "FP32", [1, 2], [0.0, 1.0])]),
                arrivals_s=arrivals,
                max_requests=100,
                max_duration_s=5.0,
            )
        finally:
            await runner.cleanup()

    res = asyncio.run(main())
    assert res.ok == 26 and not res.errors
    assert seen[0] == ("m", [1, 2])
    # Open loop: sends follow the schedule although replies take longer than the gaps; one
    # client waiting for each reply would need >= 26 * 200 ms = 5.2 s to send them all.
    lag = np.asarray(res.sent_s) - np.asarray(res.scheduled_s)
    assert np.all(lag >= 0)
    assert max(res.sent_s) < 2.0
    assert 200.0 <= res.quantile_ms(0.5) < 2000.0


def test_bounds_and_errors_are_reported():
    calls = 0

    async def handler(request):
        nonlocal calls
        calls += 1
        if calls % 2 == 0:
            return web.Response(status=500, text="boom")
        return web.json_response({"outputs": []})

    async def main():
        runner, url = await _serve(handler)
        try:
            return await run_load(
                url=url,
                model="m",
                payload=infer_body(inputs=[]),
                arrivals_s=np.linspace(0, 0.2, 50),
                max_requests=10,
                max_duration_s=5.0,
            )
        finally:
            await runner.cleanup()

    res = asyncio.run(main())
    assert len(res.sent_s) == 10
    assert res.ok == 5
    assert res.errors["http_500"] == 5
    assert res.summary()["sent"] == 10


def test_binary_payload_follows_the_triton_binary_extension():
    arr = np.arange(6, dtype=np.float32).reshape(1, 6)
    p = binary_infer_body(inputs=[("X", arr)])
    n = int(p.headers["Inference-Header-Content-Length"])
    header = json.loads(p.body[:n])
    assert header["inputs"][0] == {
        "name": "X",
        "shape": [1, 6],
        "datatype": "FP32",
        "parameters": {"binary_data_size": 24},
    }
    assert np.frombuffer(p.body[n:], dtype="<f4").tolist() == arr.ravel().tolist()


def test_progress_tracker_keeps_counts_and_the_recent_window_only():
    tracker = ProgressTracker(window_s=5.0)
    for i in range(10):
        tracker.on_sent()
        tracker.on_ok(done_s=float(i), latency_s=0.001 * (i + 1))
    tracker.on_sent()  # one still in flight
    early = tracker.progress(now_s=4.5, in_flight=1, errors=0)
    assert (early.sent, early.completed, early.ok) == (11, 10, 10)
    # Answers at 0..4 s are in the window at 4.5 s; those at 5..9 s have not happened yet then.
    assert early.p99_ms == pytest.approx(np.quantile([0.001 * (i + 1) for i in range(5)], 0.99) * 1000)
    late = tracker.progress(now_s=9.5, in_flight=0, errors=2)
    assert late.p99_ms == pytest.approx(np.quantile([0.001 * (i + 1) for i in range(5, 10)], 0.99) * 1000)
    assert late.errors == 2
    assert math.isnan(tracker.progress(now_s=100.0, in_flight=0, errors=0).p99_ms)
