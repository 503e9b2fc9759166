"""The load generator's own process against two tiny local HTTP servers, and the piecewise Poisson helper."""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import pytest

from tailpilot.bench.loadgen import infer_body
from tailpilot.bench.loadgen_process import LoadProcess, TargetsFile, write_targets
from tailpilot.bench.traces import piecewise_poisson
from tailpilot_e2e.wait import eventually

SERVICE_S = 0.02


class FakeTriton:
    """POST /v2/models/<m>/infer answered 200 after SERVICE_S, in a thread; counts requests."""

    def __init__(self) -> None:
        self.hits: Counter[str] = Counter()
        self.lock = threading.Lock()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                with owner.lock:
                    owner.hits[self.path] += 1
                time.sleep(SERVICE_S)  # the service time being simulated
                body = json.dumps({"outputs": []}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        class Server(ThreadingHTTPServer):
            request_queue_size = 256  # the default backlog of 5 resets bursts of new connections

        self.server = Server(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def count(self) -> int:
        with self.lock:
            return sum(self.hits.values())

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def servers() -> Iterator[tuple[FakeTriton, FakeTriton]]:
    a, b = FakeTriton(), FakeTriton()
    yield a, b
    a.close()
    b.close()


def load(tmp_path, arrivals, **kwargs) -> LoadProcess:
    params = {"max_requests": 10_000, "max_duration_s": 30.0, "timeout_s": 5.0} | kwargs
    return LoadProcess(
        work_dir=tmp_path / "load",
        model="m",
        payload=infer_body(inputs=[("X", "FP32", [1, 2], [0.0, 1.0])]),
        arrivals_s=arrivals,
        **params,
    )


@pytest.mark.slow
def test_spreads_over_targets_and_follows_a_removed_one(tmp_path, servers):
    a, b = servers
    arrivals = np.arange(0.0, 5.0, 0.02)  # 50/s for 5 s
    with load(tmp_path, arrivals, targets=[a.url, b.url]) as proc:
        eventually(lambda: a.count() >= 20 and b.count() >= 20, timeout=20, description="both servers hit")
        proc.set_targets([b.url])
        switched = proc.progress()[-1].sent if proc.progress() else 0
        # 50 more requests (1 s) is twice the 0.5 s re-read period: A gets nothing after that.
        eventually(
            lambda: proc.progress() and proc.progress()[-1].sent >= switched + 60,
            timeout=20,
            description="a second of load after the switch",
        )
        a_after_switch = a.count()
        result = proc.wait(timeout=30)
    assert a.count() == a_after_switch
    assert result.ok == len(arrivals) and not result.errors
    assert Counter(result.target) == {a.url: a.count(), b.url: b.count()}
    last_a = max(i for i, t in enumerate(result.target) if t == a.url)
    assert set(result.target[last_a + 1 :]) == {b.url} and len(result.target) - last_a > 100
    # Round robin while both were listed.
    assert result.target[:40] == [a.url, b.url] * 20
    assert all(path == "/v2/models/m/infer" for path in a.hits | b.hits)
    lag = np.asarray(result.sent_s) - np.asarray(result.scheduled_s)
    assert np.all(lag >= 0) and np.median(lag) < 0.1
    assert 0.9 * SERVICE_S * 1000 < result.quantile_ms(0.5) < 1000


def test_count_and_time_bounds_hold_and_progress_is_written(tmp_path, servers):
    a, _ = servers
    proc = load(tmp_path, np.arange(0.0, 1.0, 0.005), targets=[a.url], max_requests=30).start()
    result = proc.wait(timeout=30)
    assert len(result.status) == 30 and result.ok == 30 and a.count() == 30
    assert max(result.sent_s) < 1.0

    started = time.monotonic()
    proc = load(tmp_path, np.arange(0.0, 60.0, 0.05), targets=[a.url], max_duration_s=1.5).start()
    result = proc.wait(timeout=30)
    assert time.monotonic() - started < 15
    assert max(result.scheduled_s) <= 1.5 and result.ok == len(result.status) == 31
    assert result.wall_s < 1.5 + 1.0
    progress = proc.progress()
    assert progress, "no progress line"
    final = progress[-1]
    assert final.sent == final.completed == final.ok == 31 and final.in_flight == 0 and final.errors == 0
    assert final.p99_ms >= SERVICE_S * 1000
    assert [p.t_s for p in progress] == sorted(p.t_s for p in progress)


def test_without_targets_requests_are_no_endpoint_errors(tmp_path):
    proc = load(tmp_path, np.arange(0.0, 0.5, 0.05), targets=[]).start()
    result = proc.wait(timeout=30)
    assert result.errors == {"no_endpoint": 10}
    assert result.status == [0] * 10 and result.target == [""] * 10 and result.ok == 0
    assert proc.progress()[-1].errors == 10


def test_stop_kills_a_running_process(tmp_path):
    proc = load(tmp_path, np.arange(0.0, 60.0, 1.0), targets=[]).start()
    proc.stop()
    assert proc.process is not None and proc.process.poll() is not None


def test_targets_file_is_reread_and_survives_a_bad_file(tmp_path):
    path = tmp_path / "targets.json"
    targets = TargetsFile(path, refresh_s=0.0)
    assert targets() == []
    write_targets(path, ["http://127.0.0.1:1"])
    assert targets() == ["http://127.0.0.1:1"]
    path.write_text("{not json")
    assert targets() == ["http://127.0.0.1:1"]
    write_targets(path, [])
    assert targets() == []
    slow = TargetsFile(path, refresh_s=3600)
    assert slow() == []
    write_targets(path, ["http://127.0.0.1:2"])
    assert slow() == [], "re-read before refresh_s"


def test_piecewise_poisson_follows_the_steps_and_is_seeded():
    steps = [(50.0, 10.0), (20.0, 0.0), (50.0, 40.0)]
    arr = piecewise_poisson(steps=steps, rng=np.random.default_rng(1))
    again = piecewise_poisson(steps=steps, rng=np.random.default_rng(1))
    assert np.array_equal(arr, again)
    assert np.all(np.diff(arr) >= 0) and arr.min() >= 0 and arr.max() < 120
    first, quiet, last = (np.sum((arr >= lo) & (arr < hi)) for lo, hi in ((0, 50), (50, 70), (70, 120)))
    assert quiet == 0
    assert abs(first - 500) < 5 * np.sqrt(500) and abs(last - 2000) < 5 * np.sqrt(2000)
    assert piecewise_poisson(steps=[], rng=np.random.default_rng(1)).size == 0
