"""What the fast loop costs the operator: reading N services' pods every 2 s, and their observations.

Runs the operator's own reader (`tailpilot.controllers.signals.pod_signals.PodSignals`) against real HTTP
endpoints: a separate process serves Triton's metrics page (`bench/triton_metrics.py`, counters that
grow with time) and its statistics extension (asked every 10 s) for every simulated pod on
127.0.0.1, and every pod's URLs point there. Each service
is read every `READ_PERIOD_S` by its own task, as the operator's loops do, for `--seconds`; then
`observation_from_reads` is timed on the histories the run built (what each decision adds).

It measures the operator process only: its CPU seconds per wall second (`time.process_time`), the
pod reads per second it completed, the period each service was actually read at (the loop sleeps a
period after each read, as the operator's does, so an overloaded loop reads less often), and the
CPU time to build one observation from a full history (the 300 s burst lookback of reads).
Not measured here: the pod LIST each read needs from the API server, and Prometheus.

    python -P -m tailpilot.bench.fast_loop_cost --services 500 --pods 2 --seconds 30
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import statistics
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from tailpilot.bench.triton_metrics import metrics_page, stats_answer
from tailpilot.controllers.signals.pod_signals import PodSignals
from tailpilot.policy.batch_sizes import SizeCounts
from tailpilot.policy.signals import (
    READ_PERIOD_S,
    ObservationWindows,
    PodRead,
    TritonCounters,
    observation_from_reads,
)

MODEL = "model"


def _serve(port_out: multiprocessing.connection.Connection) -> None:
    """The endpoint process, every pod's Triton: its metrics page, counters growing 20 requests/s.

    Paths ending in `/stats` answer the statistics extension for the same executions, which the
    reader asks every `BATCH_STATS_PERIOD_S`.
    """
    started = time.monotonic()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as Triton serves

        def do_GET(self) -> None:  # noqa: N802 - the http.server API
            answered = 20.0 * (time.monotonic() - started)
            counters = TritonCounters(
                success=answered,
                pending=1.0,
                inference_count=answered,
                exec_count=answered / 2,
                request_duration_us=answered * 40_000,
                queue_duration_us=answered * 5_000,
                compute_duration_us=answered * 30_000,
            )
            if self.path.endswith("/stats"):
                body, kind = json.dumps(model_stats(answered)).encode(), "application/json"
            else:
                body, kind = metrics_page(counters, model=MODEL).encode(), "text/plain; version=0.0.4"
            self.send_response(200)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    class Server(ThreadingHTTPServer):
        request_queue_size = 1024
        daemon_threads = True

    server = Server(("127.0.0.1", 0), Handler)
    port_out.send(server.server_address[1])
    server.serve_forever()


async def _run(port: int, *, services: int, pods: int, seconds: float) -> dict[str, float]:
    windows = ObservationWindows(window_s=60.0, recent_window_s=15.0, arrival_lookback_s=300.0)
    periods: list[float] = []
    reads = 0
    signals = PodSignals(
        url_of=lambda ip: f"http://127.0.0.1:{port}/pods/{ip}/metrics",
        stats_url_of=lambda ip, model: f"http://127.0.0.1:{port}/pods/{ip}/{model}/stats",
    )
    try:
        end = time.monotonic() + seconds

        async def loop(index: int) -> None:
            # As the operator's loop (`ServiceLoops._run_fast_checks`): a read, then a period's sleep,
            # so a loop that cannot keep up reads less often instead of piling up late periods.
            nonlocal reads
            ips = {f"svc{index}-pod{p}": f"10.{index // 250}.{index % 250}.{p + 1}" for p in range(pods)}
            await asyncio.sleep(READ_PERIOD_S * index / services)  # loops start apart
            last: float | None = None
            while time.monotonic() < end:
                started = time.monotonic()
                if last is not None:
                    periods.append(started - last)
                last = started
                read = await signals.read(
                    "bench", f"svc{index}", model=MODEL, pod_ips=ips, keep_s=windows.keep_s
                )
                reads += len(read.pods)
                await asyncio.sleep(READ_PERIOD_S)

        cpu0, wall0 = time.process_time(), time.monotonic()
        await asyncio.gather(*(loop(i) for i in range(services)))
        cpu, wall = time.process_time() - cpu0, time.monotonic() - wall0
    finally:
        await signals.close()
    return {
        "cpu_per_wall": cpu / wall,
        "reads_per_s": reads / wall,
        "wanted_reads_per_s": services * pods / READ_PERIOD_S,
        "period_p50_s": statistics.median(periods),
        "period_max_s": max(periods),
        **_observation_cost(windows, pods=pods),
    }


def model_stats(answered: float) -> dict[str, object]:
    """Triton's statistics answer for `answered` requests run in batches of 1 and 2 (half each), 1 ms each."""
    executions = int(answered / 2) // 2
    return stats_answer({size: SizeCounts(executions, executions * 1000.0) for size in (1, 2)}, model=MODEL)


def _observation_cost(windows: ObservationWindows, *, pods: int, repeats: int = 200) -> dict[str, float]:
    """CPU time of one observation from a full history (the burst lookback's reads, every pod in each)."""
    count = int(windows.keep_s / READ_PERIOD_S)
    reads = [
        PodRead(
            at_s=k * READ_PERIOD_S,
            pods={
                f"pod{p}": TritonCounters(success=40.0 * k, pending=1.0, exec_count=20.0 * k)
                for p in range(pods)
            },
        )
        for k in range(count)
    ]
    started = time.process_time()
    for _ in range(repeats):
        observation_from_reads(reads, windows=windows, now_s=reads[-1].at_s)
    return {"observation_ms": (time.process_time() - started) / repeats * 1000, "reads_per_history": count}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--services", type=int, default=500)
    ap.add_argument("--pods", type=int, default=2, help="Ready pods per service")
    ap.add_argument("--seconds", type=float, default=30.0)
    args = ap.parse_args(argv)
    ctx = multiprocessing.get_context("spawn")
    receive, send = ctx.Pipe(duplex=False)
    server = ctx.Process(target=_serve, args=(send,), daemon=True)
    server.start()
    try:
        port = receive.recv()
        r = asyncio.run(_run(port, services=args.services, pods=args.pods, seconds=args.seconds))
    finally:
        server.terminate()
        server.join(timeout=10)
    period = f"median {r['period_p50_s']:.2f} s, max {r['period_max_s']:.2f} s"
    print(
        f"{args.services} services x {args.pods} pods, "
        f"read every {READ_PERIOD_S:g} s for {args.seconds:g} s:\n"
        f"  operator CPU            {r['cpu_per_wall']:.2f} s per s (one core = 1.00)\n"
        f"  pod reads completed     {r['reads_per_s']:.0f}/s of {r['wanted_reads_per_s']:.0f}/s wanted\n"
        f"  a service's read period {period}\n"
        f"  one observation         {r['observation_ms']:.2f} ms CPU from {r['reads_per_history']:.0f} reads"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
