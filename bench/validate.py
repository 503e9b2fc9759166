"""Validation: the simulator against a real Triton serving the example model on this CPU.

    python -P -m tailpilot.bench.validate [--levels 0.3,0.6,0.85] [--duration-s 20] [--replicas 1,2]

1. Builds the example model's optimized fp32 engine (Python-backend variant) with the
   builder and serves it from 1 or 2 local Triton servers (127.0.0.1, stopped by PID).
2. Profiles it with the builder's profiler (closed loop, concurrency 1, batch 1/4/16) and
   fits t(b) = a + c*b: the profile the simulator then uses.
3. For each fleet size and load level (a fraction of the fitted capacity at the served
   max batch), replays the same seeded Poisson arrivals with `bench/loadgen.py` (open loop,
   client-side latency, round robin over the servers) and in the simulator with the
   served batching config, and reports P99 and throughput of both and the relative error.

Every run is bounded (duration and request cap).  On a 2-core CPU shared with other work,
two "replicas" compete for the same cores, unlike two GPUs; the report says so.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import math
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from tailpilot.api.autoscaling import BatchingConfig
from tailpilot.api.engine import BuildOutcome, BuildRequest, ServiceTimeModel
from tailpilot.bench.baselines import Static
from tailpilot.bench.loadgen import binary_infer_body, run_load
from tailpilot.bench.metrics import p99
from tailpilot.bench.simulator import SimConfig, simulate
from tailpilot.builders.build import BuildSettings, run_build
from tailpilot.builders.example_model import example_inputs, write_example_model
from tailpilot.builders.model_info import load_and_verify, triton_specs
from tailpilot.builders.profiler import fit_service_time, measure
from tailpilot.builders.triton_server import TritonServer

MODEL = "example"
MAX_BATCH = 16


def _build(work: Path) -> Path:
    """Build the engine; return a model repository holding it."""
    model = Path(write_example_model(work / "model.onnx"))
    request = BuildRequest(
        model_uri=str(model),
        model_name=MODEL,
        backend="onnxruntime",
        precision="fp32",
        max_batch_size=MAX_BATCH,
        serving_variant="python",
        store=str(work / "store"),
    )
    result = run_build(request, BuildSettings(), progress=lambda _: None)
    if result.outcome != BuildOutcome.SUCCEEDED:
        raise SystemExit(f"build failed: {result.reason}: {result.message}")
    repo = work / "repository"
    repo.mkdir()
    (repo / MODEL).symlink_to(Path(result.artifact) / "repository" / MODEL)
    return model


def served_batching(http_url: str) -> BatchingConfig:
    """The batching the server really runs (GET /v2/models/NAME/config)."""
    cfg = httpx.get(f"{http_url}/v2/models/{MODEL}/config", timeout=10).json()
    dyn = cfg.get("dynamic_batching", {}) or {}
    groups = cfg.get("instance_group", []) or [{"count": 1}]
    return BatchingConfig(
        max_batch_size=int(cfg.get("max_batch_size", 1)),
        preferred_batch_sizes=tuple(int(x) for x in dyn.get("preferred_batch_size", [])),
        max_queue_delay_us=int(dyn.get("max_queue_delay_microseconds", 0)),
        instances_per_replica=max(1, sum(int(g.get("count", 1)) for g in groups)),
    )


def _profile(server: TritonServer, model: Path) -> ServiceTimeModel:
    specs = triton_specs(load_and_verify(model).inputs)
    runs = [
        measure(server.grpc_url, MODEL, specs, batch_size=b, concurrency=1, duration_s=3.0, max_requests=2000)
        for b in (1, 4, 16)
    ]
    return fit_service_time(runs)


def compare(
    *,
    servers: list[TritonServer],
    service: ServiceTimeModel,
    batching: BatchingConfig,
    level: float,
    duration_s: float,
    max_requests: int,
    seed: int,
) -> dict[str, Any]:
    """One load level on `len(servers)` replicas: measured vs simulated."""
    n = len(servers)
    b = batching.max_batch_size
    capacity = n * batching.instances_per_replica * b * 1000.0 / service.mean_ms(b)
    rate = level * capacity
    rng = np.random.default_rng(seed)
    arrivals = np.cumsum(rng.exponential(1.0 / rate, int(rate * duration_s * 1.3) + 10))
    arrivals = arrivals[arrivals < duration_s][:max_requests]
    payload = binary_infer_body(inputs=[("input", example_inputs(1))])
    load = asyncio.run(
        run_load(
            url=[s.http_url for s in servers],
            model=MODEL,
            payload=payload,
            arrivals_s=arrivals,
            max_requests=max_requests,
            max_duration_s=duration_s + 1,
        )
    )
    sim = simulate(
        arrivals_s=arrivals,
        config=SimConfig(service=service, duration_s=duration_s, startup_s=0.0, seed=seed, max_replicas=n),
        controller=Static(replicas=n, batching=batching),
    )
    sim_p99 = p99(sim.latency_s) * 1000.0
    sim_tp = float(np.isfinite(sim.done_s).sum() / max(sim.done_s[np.isfinite(sim.done_s)].max(), 1e-9))
    meas_p99, meas_tp = load.quantile_ms(0.99), load.throughput_per_s()

    def err(sim_v: float, meas_v: float) -> float:
        return (sim_v - meas_v) / meas_v * 100.0 if meas_v and math.isfinite(meas_v) else math.nan

    return {
        "replicas": n,
        "level": level,
        "rate": rate,
        "requests": int(arrivals.size),
        "meas_p99_ms": meas_p99,
        "sim_p99_ms": sim_p99,
        "p99_err_pct": err(sim_p99, meas_p99),
        "meas_tp": meas_tp,
        "sim_tp": sim_tp,
        "tp_err_pct": err(sim_tp, meas_tp),
        "errors": dict(load.errors),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -P -m tailpilot.bench.validate")
    ap.add_argument("--levels", default="0.3,0.6,0.85")
    ap.add_argument("--replicas", default="1,2")
    ap.add_argument("--duration-s", type=float, default=20.0)
    ap.add_argument("--max-requests", type=int, default=3000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)
    levels = [float(v) for v in args.levels.split(",")]
    fleet = [int(v) for v in args.replicas.split(",")]
    rows = []
    with tempfile.TemporaryDirectory(prefix="tailpilot-validate-") as tmp:
        work = Path(tmp)
        model = _build(work)
        servers = [
            TritonServer(work / "repository", ready_timeout_s=120, env={"OMP_NUM_THREADS": "1"})
            for _ in range(max(fleet))
        ]
        try:
            for s in servers:
                s.start()
            batching = served_batching(servers[0].http_url)
            service = _profile(servers[0], model)
            print(f"served batching {batching}; fitted {service}", file=sys.stderr)
            for n in fleet:
                for i, level in enumerate(levels):
                    row = compare(
                        servers=servers[:n],
                        service=service,
                        batching=batching,
                        level=level,
                        duration_s=args.duration_s,
                        max_requests=args.max_requests,
                        seed=args.seed + i,
                    )
                    print(row, file=sys.stderr)
                    rows.append(row)
        finally:
            for s in servers:
                s.close()
    text = render(rows, service=service, batching=batching, argv=argv if argv is not None else sys.argv[1:])
    print(text)
    if args.out:
        args.out.write_text(text)
    return 0


def render(
    rows: list[dict[str, Any]], *, service: ServiceTimeModel, batching: BatchingConfig, argv: list[str]
) -> str:
    """Markdown report."""
    lines = [
        "# Simulator vs real Triton (example model, CPU)",
        "",
        f"Command: `python -P -m tailpilot.bench.validate {' '.join(argv)}` "
        f"(run {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC, load average {os.getloadavg()[0]:.1f} "
        f"on {os.cpu_count()} CPUs)",
        "",
        f"Fitted profile: t(b) = {service.intercept_ms:.2f} + {service.per_item_ms:.3f}*b ms, "
        f"jitter CV {service.jitter_cv:.2f}. Served batching: max {batching.max_batch_size}, "
        f"preferred {list(batching.preferred_batch_sizes)}, delay {batching.max_queue_delay_us} us, "
        f"{batching.instances_per_replica} instance(s).",
        "",
        "| replicas | load | req/s | requests | P99 real (ms) | P99 sim (ms) | P99 error | "
        "throughput real | throughput sim | error | client errors |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['replicas']} | {r['level']:.0%} | {r['rate']:.1f} | {r['requests']} | "
            f"{r['meas_p99_ms']:.1f} | {r['sim_p99_ms']:.1f} | {r['p99_err_pct']:+.1f}% | "
            f"{r['meas_tp']:.1f} | {r['sim_tp']:.1f} | {r['tp_err_pct']:+.1f}% | {r['errors'] or '-'} |"
        )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    raise SystemExit(main())
