"""Validation: the simulator against a real Triton serving the example model on this CPU.

    python -P -m tailpilot.bench.validate [--levels 0.3,0.6,0.85] [--replicas 1,2] [--duration-s 20]
                                          [--out docs/benchmarks/validation.md]

1. Builds the dense example model's fp32 engine (Python-backend variant) with the builder and
   serves it from 1 or 2 local Triton servers (127.0.0.1, stopped by PID).
2. Separates the parties (`bench/cpu_slots.py`): every Triton runs in a cgroup of its own with a
   CFS quota of `--server-millis` over `--period-us` (a replica is a pod with a CPU limit), on a
   core of its own from the last one down; the load generator runs as a process of its own, in a
   cgroup of its own, on core 0 (with this process, which profiles), where server 0 never runs.
3. Profiles server 0 with the builder's profiler (`builders/profiler.py`, the profile Job's code):
   whole batches of 1/4/16 at concurrency 1, and single requests at several concurrencies, which
   the dynamic batcher merges; the fit of both is the profile the simulator uses, per-request
   overhead included.
4. For each batching variant, fleet size and load level (a fraction of the fitted capacity at the
   variant's largest batch), replays seeded Poisson arrivals with the open-loop load generator and
   simulates the same send times with the same batching; reports P99 and throughput of both.

A run is valid when the client kept up and nothing else used the servers' core: no request
refused for the in-flight bound, no client error, the client's send lag (sent minus scheduled) P99
under `MAX_SEND_LAG_MS`, the client's core less than `MAX_CLIENT_BUSY` busy, and other processes
took less than `MAX_FOREIGN_SHARE` of the servers' core. An invalid run is reported as such, not as
a data point.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import math
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import numpy as np
import numpy.typing as npt

from tailpilot.api.autoscaling import BatchingConfig
from tailpilot.api.engine import BuildOutcome, BuildRequest, EngineProfile, ServiceTimeModel
from tailpilot.bench.baselines import Static
from tailpilot.bench.cpu_slots import CoreTimes, CpuSlot
from tailpilot.bench.loadgen import binary_infer_body
from tailpilot.bench.loadgen_process import LoadProcess
from tailpilot.bench.metrics import p99
from tailpilot.bench.simulator import SimConfig, SimResult, simulate
from tailpilot.bench.triton_batcher import is_plain
from tailpilot.builders.build import BuildSettings, run_build
from tailpilot.builders.example_model import DENSE_HIDDEN, example_inputs, write_example_model
from tailpilot.builders.profiler import ProfileOptions, profile_served
from tailpilot.builders.store import MANIFEST, REPOSITORY, EngineManifest
from tailpilot.builders.triton_server import TritonServer
from tailpilot.controllers.autoscale.batching import apply_batching
from tailpilot.manifests.triton_model_config import from_pbtxt, to_load_override_json

MODEL = "example"
MAX_BATCH = 16
#: Validity limits of one run (see the module doc).
MAX_SEND_LAG_MS = 5.0
MAX_CLIENT_BUSY = 0.7
MAX_FOREIGN_SHARE = 0.03
#: Other draws of the simulator's service times per run (the `sim P99 over draws` column).
SIM_DRAWS = 10
CLIENT_CORE = 0


@dataclass(frozen=True)
class Variant:
    """A batching configuration the servers run during a series of runs."""

    name: str
    preferred: tuple[int, ...]
    delay_us: int


#: As the builder writes it (preferred = the max batch, no delay: whatever is queued goes), and a
#: batcher that waits for a preferred size.
VARIANTS = (
    Variant("preferred-16-no-delay", (16,), 0),
    Variant("preferred-4-8-delay-5ms", (4, 8), 5000),
)


@dataclass
class RunRecord:
    """One load level on one fleet: measured, simulated, and whether the run was valid."""

    variant: str
    replicas: int
    level: float
    rate: float
    requests: int
    meas_p99_ms: float
    sim_p99_ms: float
    meas_tp: float
    sim_tp: float
    meas_mean_batch: float
    sim_mean_batch: float
    #: How fast the servers ran in this run relative to the profile (`run_speed`), and the
    #: simulator's P99 at that speed.
    run_speed: float
    sim_p99_at_speed_ms: float
    #: The simulator's P99 over `SIM_DRAWS` other draws of its service times (min, max): how much a
    #: run's P99 moves with the service times' randomness alone, arrivals and profile unchanged.
    sim_p99_draws_ms: tuple[float, float]
    #: Mean time a request waited in the batcher's queue: Triton's statistics, and the simulator's.
    meas_queue_ms: float
    sim_queue_ms: float
    send_lag_p99_ms: float
    client_busy: float
    foreign_share: float
    client_overhead_ms: float
    throttled_periods: int
    errors: dict[str, int] = field(default_factory=dict)
    #: Share of the slowest 1% sent within the densest `TAIL_WINDOW_S`: real, simulated.
    tail_burst: tuple[float, float] = (math.nan, math.nan)
    #: The simulator's P99 when Triton's batcher thread never / always wins the race at the end of a
    #: batch (`triton_batcher`); None for a plain batching, where the race decides nothing.
    sim_p99_race_ms: tuple[float, float] | None = None

    @property
    def problems(self) -> list[str]:
        """Why the run is not valid (empty: valid)."""
        out = []
        if self.errors:
            out.append(f"client errors {self.errors}")
        if not self.send_lag_p99_ms <= MAX_SEND_LAG_MS:
            out.append(f"send lag P99 {self.send_lag_p99_ms:.1f} ms")
        if not self.client_busy < MAX_CLIENT_BUSY:
            out.append(f"client core {self.client_busy:.0%} busy")
        if not self.foreign_share < MAX_FOREIGN_SHARE:
            out.append(f"{self.foreign_share:.0%} of the run's cores used by other processes")
        return out

    @property
    def within_draws(self) -> bool:
        """Whether the real P99 lies within the simulator's P99 over other service-time draws."""
        lo, hi = self.sim_p99_draws_ms
        return lo <= self.meas_p99_ms <= hi

    @property
    def p99_err_pct(self) -> float:
        return _err(self.sim_p99_ms, self.meas_p99_ms)

    @property
    def tp_err_pct(self) -> float:
        return _err(self.sim_tp, self.meas_tp)


def _err(sim_v: float, meas_v: float) -> float:
    return (sim_v - meas_v) / meas_v * 100.0 if meas_v and math.isfinite(meas_v) else math.nan


def _build(work: Path, dense_hidden: int | None) -> tuple[Path, Path]:
    """Build the engine; return (the engine's directory, a model repository holding the engine)."""
    model = Path(write_example_model(work / "model.onnx", dense_hidden=dense_hidden))
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
    (repo / MODEL).symlink_to(Path(result.artifact) / REPOSITORY / MODEL)
    return Path(result.artifact), repo


def server_stats(http_url: str) -> dict[str, float]:
    """Triton's cumulative counts for the model: requests, their total time, executions."""
    doc = httpx.get(f"{http_url}/v2/models/{MODEL}/stats", timeout=10).json()
    stats = doc["model_stats"][0]
    success = stats["inference_stats"]["success"]
    return {
        "requests": float(success["count"]),
        "request_ns": float(success["ns"]),
        "queue_ns": float(stats["inference_stats"]["queue"]["ns"]),
        "executions": float(stats["execution_count"]),
        "inferences": float(stats["inference_count"]),
    }


def _delta(after: dict[str, float], before: dict[str, float]) -> dict[str, float]:
    return {k: after[k] - before[k] for k in after}


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


def apply_variant(servers: Sequence[TritonServer], repo: Path, variant: Variant) -> BatchingConfig:
    """Reload every server's model with the variant's batching, through the operator's own actuator."""
    config = from_pbtxt((repo / MODEL / "config.pbtxt").read_text())
    config.dynamic_batching.ClearField("preferred_batch_size")
    config.dynamic_batching.preferred_batch_size.extend(variant.preferred)
    config.dynamic_batching.max_queue_delay_microseconds = variant.delay_us
    result = asyncio.run(
        apply_batching(
            pod_urls=[s.http_url for s in servers],
            model_name=MODEL,
            config_json=to_load_override_json(config),
        )
    )
    if not result.ok:
        raise SystemExit(f"batching variant {variant.name} refused: {result.reason}: {result.message}")
    served = served_batching(servers[0].http_url)
    if served.preferred_batch_sizes != variant.preferred or served.max_queue_delay_us != variant.delay_us:
        raise SystemExit(f"servers run {served}, not the variant {variant}")
    return served


#: How long the validation's own profile measures each point: the build Job's 3 s give 60-100
#: requests of the largest batch, and two runs of them differed by 12% at batch 16 (14:00 and
#: 14:13 UTC); the simulator is validated on the engine's service time, not on one short sample.
VALIDATION_PROFILE_S = 15.0


def profile(
    server: TritonServer, engine: Path, *, cpu_limit_millis: int, options: ProfileOptions
) -> EngineProfile:
    """Server 0's engine, profiled by the profile Job's own code (the Job's defaults, or longer)."""
    manifest = EngineManifest.model_validate_json((engine / MANIFEST).read_text())
    return profile_served(
        server.grpc_url,
        manifest,
        engine,
        options,
        hardware="cpu",
        cpu_limit_millis=cpu_limit_millis,
        max_batch_size=MAX_BATCH,
        where=f"a local tritonserver in a cgroup of {cpu_limit_millis}m (bench/validate.py)",
        progress=lambda line: print(f"  {line}", file=sys.stderr),
    )


def _mean_queue_ms(sim: SimResult) -> float:
    waited = (sim.start_s - sim.arrival_s)[np.isfinite(sim.start_s)]
    return float(np.mean(waited) * 1000.0) if waited.size else math.nan


def _mean_batch(sim: SimResult) -> float:
    return float(np.mean(sim.batch_size)) if sim.batch_size.size else math.nan


#: The window `tail_burst_share` looks for the slowest requests in.
TAIL_WINDOW_S = 2.0


def tail_burst_share(
    times_s: npt.NDArray[np.float64], latency_s: npt.NDArray[np.float64], *, window_s: float = TAIL_WINDOW_S
) -> float:
    """Share of the slowest 1% of requests (by `latency_s`) sent within the densest `window_s` (pure).

    A tail spread over the run is the queue's own; a tail packed into a second or two is one
    event (a stall of the server or the machine) that a 60 s run's P99 cannot average away.
    """
    keep = np.isfinite(times_s) & np.isfinite(latency_s)
    times_s, latency_s = times_s[keep], latency_s[keep]
    if times_s.size == 0:
        return math.nan
    slow = np.sort(times_s[latency_s >= np.quantile(latency_s, 0.99)])
    ends = np.searchsorted(slow, slow + window_s, side="right")
    return float((ends - np.arange(slow.size)).max() / slow.size)


def run_speed(
    mean_batch_at: Callable[[float], float], measured: float, *, lo: float = 0.8, hi: float = 1.25
) -> float:
    """The service-time factor at which the simulated mean batch matches the measured one (pure search).

    A slower server forms larger batches from the same arrivals, so the mean executed batch tells
    how fast the servers ran during the run, relative to the profile: the factor the operator's
    online correction would learn. Bisection over [lo, hi]; the bound when the match lies outside.
    """
    if not math.isfinite(measured):
        return 1.0
    if mean_batch_at(lo) >= measured:
        return lo
    if mean_batch_at(hi) <= measured:
        return hi
    for _ in range(12):
        mid = (lo + hi) / 2
        if mean_batch_at(mid) < measured:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def compare(
    *,
    servers: Sequence[TritonServer],
    slots: Sequence[CpuSlot],
    client_slot: CpuSlot,
    service: ServiceTimeModel,
    batching: BatchingConfig,
    variant: str,
    level: float,
    duration_s: float,
    max_requests: int,
    seed: int,
    work: Path,
) -> RunRecord:
    """One load level on `len(servers)` replicas: measured vs simulated, with the run's validity."""
    n = len(servers)
    b = max(batching.preferred_batch_sizes or (batching.max_batch_size,))
    capacity = n * batching.instances_per_replica * b * 1000.0 / service.mean_ms(b)
    rate = level * capacity
    rng = np.random.default_rng(seed)
    arrivals = np.cumsum(rng.exponential(1.0 / rate, int(rate * duration_s * 1.3) + 10))
    arrivals = arrivals[arrivals < duration_s][:max_requests]
    payload = binary_infer_body(inputs=[("input", example_inputs(1))])
    run_cores = sorted({c for s in [*slots, client_slot] for c in s.cpus})
    stats0 = [server_stats(s.http_url) for s in servers]
    used0 = [s.cpu_seconds() for s in slots]
    thr0 = sum(s.throttling()[0] for s in slots)
    client0 = client_slot.cpu_seconds()
    cores0 = CoreTimes.read()
    with LoadProcess(
        work_dir=work / f"load-{variant}-{n}-{level:g}",
        model=MODEL,
        payload=payload,
        arrivals_s=arrivals,
        max_requests=max_requests,
        max_duration_s=duration_s + 1,
        targets=[s.http_url for s in servers],
        max_in_flight=512,
        timeout_s=30.0,
        preexec=client_slot.join,
    ) as load:
        result = load.wait(timeout=duration_s + 60)
    cores1 = CoreTimes.read()
    wall = result.wall_s
    client_busy = (client_slot.cpu_seconds() - client0) / max(wall, 1e-9)
    slots_used = sum(s.cpu_seconds() for s in slots) - sum(used0) + client_busy * wall
    foreign = max(0.0, cores1.busy_since(cores0, run_cores) - slots_used) / max(wall * len(run_cores), 1e-9)
    served = [_delta(server_stats(s.http_url), before) for s, before in zip(servers, stats0, strict=True)]
    requests_served = sum(d["requests"] for d in served)
    server_mean_ms = sum(d["request_ns"] for d in served) / max(requests_served, 1) / 1e6
    lat = np.asarray(result.latency_s, dtype=np.float64)
    ok = np.asarray(result.status) == 200
    client_mean_ms = float(np.mean(lat[ok]) * 1000.0) if ok.any() else math.nan
    sent = np.asarray(result.sent_s, dtype=np.float64)
    scheduled = np.asarray(result.scheduled_s, dtype=np.float64)
    lag = (sent - scheduled)[np.isfinite(sent)]
    sim_arrivals = np.sort(sent[np.isfinite(sent)])

    def run_sim(speed: float, draw: int = 0, race: float | None = None) -> SimResult:
        scaled = service.model_copy(
            update={"intercept_ms": service.intercept_ms * speed, "per_item_ms": service.per_item_ms * speed}
        )
        return simulate(
            arrivals_s=sim_arrivals,
            config=SimConfig(
                service=scaled,
                duration_s=duration_s + 1,
                startup_s=0.0,
                seed=seed + 1000 * draw,
                max_replicas=n,
                batcher_wins_race=SimConfig.batcher_wins_race if race is None else race,
            ),
            controller=Static(replicas=n, batching=batching),
        )

    sim = run_sim(1.0)
    real_burst = tail_burst_share(np.where(ok, sent, np.nan), np.where(ok, lat, np.nan))
    sim_burst = tail_burst_share(sim.arrival_s, sim.latency_s)
    done = sim.done_s[np.isfinite(sim.done_s)]
    meas_mean_batch = sum(d["inferences"] for d in served) / max(sum(d["executions"] for d in served), 1)
    speed = run_speed(lambda f: _mean_batch(run_sim(f)), meas_mean_batch)
    at_speed = run_sim(speed)
    draws = [p99(run_sim(1.0, draw).latency_s) * 1000.0 for draw in range(1, SIM_DRAWS + 1)]
    race_bounds = (
        None
        if is_plain(batching)
        else (p99(run_sim(1.0, race=0.0).latency_s) * 1000.0, p99(run_sim(1.0, race=1.0).latency_s) * 1000.0)
    )
    return RunRecord(
        variant=variant,
        replicas=n,
        level=level,
        rate=rate,
        requests=int(arrivals.size),
        meas_p99_ms=result.quantile_ms(0.99),
        tail_burst=(real_burst, sim_burst),
        sim_p99_ms=p99(sim.latency_s) * 1000.0,
        meas_tp=result.throughput_per_s(),
        sim_tp=float(done.size / max(done.max() - sim_arrivals[0], 1e-9)) if done.size else 0.0,
        meas_mean_batch=meas_mean_batch,
        sim_mean_batch=_mean_batch(sim),
        run_speed=speed,
        meas_queue_ms=sum(d["queue_ns"] for d in served) / max(requests_served, 1) / 1e6,
        sim_queue_ms=_mean_queue_ms(sim),
        sim_p99_at_speed_ms=p99(at_speed.latency_s) * 1000.0,
        sim_p99_draws_ms=(min(draws), max(draws)),
        sim_p99_race_ms=race_bounds,
        send_lag_p99_ms=float(np.quantile(lag, 0.99) * 1000.0) if lag.size else math.nan,
        client_busy=client_busy,
        foreign_share=foreign,
        client_overhead_ms=client_mean_ms - server_mean_ms,
        throttled_periods=sum(s.throttling()[0] for s in slots) - thr0,
        errors=dict(result.errors),
    )


def server_cores(cpus: Sequence[int], *, servers: int, millis: int) -> list[frozenset[int]]:
    """The core of each server, never the client's (`CLIENT_CORE`).

    Server i on the i-th core from the end when there are cores enough beside the client's, so
    replicas never share one; else every server on the last core, each within its own quota (their
    quotas must fit in it), so they take turns on that core within each CFS period instead of running
    side by side. On two cores this is what keeps a two-replica run's servers off the client's core
    (the run of 15:00 UTC put server 1 there: send lag 5.1-5.2 ms, every run invalid). Server 0 (the
    only one of a one-replica run, and the one profiled) is on the last core either way.

    Raises:
        SystemExit: When the servers' quotas do not fit in the cores the client leaves.
    """
    beside_client = [c for c in cpus if c != CLIENT_CORE]
    if len(beside_client) >= servers:
        return [frozenset({cpus[-1 - i]}) for i in range(servers)]
    if servers * millis > 1000:
        raise SystemExit(f"{servers} servers of {millis}m fit neither on their own cores nor on one core")
    return [frozenset({cpus[-1]})] * servers


def confinable_cores(tool: str) -> list[int]:
    """This process's cores, once `tool` is known to be able to keep servers and client apart here.

    Raises:
        SystemExit: Without writable cgroup v1 cpu/cpuacct hierarchies, or with fewer than two cores.
    """
    if not CpuSlot.available():
        raise SystemExit(f"{tool} needs cgroup v1 cpu and cpuacct hierarchies this process may write to")
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        raise SystemExit(f"{tool} needs two cores: one for the servers, one for the client")
    return cpus


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -P -m tailpilot.bench.validate")
    ap.add_argument("--levels", default="0.3,0.6,0.85")
    ap.add_argument("--replicas", default="1,2")
    ap.add_argument("--variants", default=",".join(v.name for v in VARIANTS))
    ap.add_argument("--duration-s", type=float, default=60.0)
    ap.add_argument("--max-requests", type=int, default=40000)
    ap.add_argument("--server-millis", type=int, default=500, help="each server's CPU limit")
    ap.add_argument("--period-us", type=int, default=10_000, help="the CFS period of the servers' quota")
    ap.add_argument(
        "--dense-hidden", type=int, default=DENSE_HIDDEN, help="the dense example's width; 0: the small CNN"
    )
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", type=Path)
    ap.add_argument("--profile-out", type=Path, help="where to write the measured profile.json")
    args = ap.parse_args(argv)
    # A SIGTERM must run the `finally` below too: it stops the servers this run started.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    levels = [float(v) for v in args.levels.split(",")]
    fleet = [int(v) for v in args.replicas.split(",")]
    variants = [v for v in VARIANTS if v.name in args.variants.split(",")]
    cpus = confinable_cores("validation")
    client_slot = CpuSlot(f"{os.getpid()}-client", frozenset({CLIENT_CORE})).create()
    all_cpus = frozenset(os.sched_getaffinity(0))
    client_slot.join()  # this process (the profiler's client) is client too, beside the load generator
    slots = [
        CpuSlot(f"{os.getpid()}-server-{i}", cores, args.server_millis, args.period_us).create()
        for i, cores in enumerate(server_cores(cpus, servers=max(fleet), millis=args.server_millis))
    ]
    load_before = os.getloadavg()
    rows: list[RunRecord] = []
    with tempfile.TemporaryDirectory(prefix="tailpilot-validate-") as tmp:
        work = Path(tmp)
        engine, repo = _build(work, args.dense_hidden or None)
        servers = [
            TritonServer(
                repo,
                ready_timeout_s=120,
                env={"OMP_NUM_THREADS": "1"},
                explicit_models=[MODEL],
                preexec=slot.join,
            )
            for slot in slots
        ]
        try:
            for s in servers:
                s.start()
            batching = apply_variant(servers, repo, VARIANTS[0])
            as_the_job = profile(
                servers[0], engine, cpu_limit_millis=args.server_millis, options=ProfileOptions()
            )
            if args.profile_out:
                args.profile_out.write_text(as_the_job.model_dump_json(by_alias=True, indent=2) + "\n")
            long = ProfileOptions(duration_s=VALIDATION_PROFILE_S, reload=False)
            service = profile(
                servers[0], engine, cpu_limit_millis=args.server_millis, options=long
            ).service_time
            print(f"fitted {service}; the Job's defaults: {as_the_job.service_time}", file=sys.stderr)
            for variant in variants:
                batching = apply_variant(servers, repo, variant)
                for n in fleet:
                    for i, level in enumerate(levels):
                        row = compare(
                            servers=servers[:n],
                            slots=slots[:n],
                            client_slot=client_slot,
                            service=service,
                            batching=batching,
                            variant=variant.name,
                            level=level,
                            duration_s=args.duration_s,
                            max_requests=args.max_requests,
                            seed=args.seed + i,
                            work=work,
                        )
                        print(row, row.problems, file=sys.stderr)
                        rows.append(row)
        finally:
            for s in servers:
                s.close()
            client_slot.leave(all_cpus)
            for slot in [*slots, client_slot]:
                slot.remove()
    text = render(
        rows,
        service=service,
        job_service=as_the_job.service_time,
        argv=argv if argv is not None else sys.argv[1:],
        server_millis=args.server_millis,
        period_us=args.period_us,
        load_before=load_before[0],
    )
    print(text)
    if args.out:
        args.out.write_text(text)
    return 0 if all(not r.problems for r in rows) else 1


_ABOUT = """## What runs

- The engine: the dense example model (one 4096-unit layer, bound on reading its 200 MB of
  weights, so a batch costs little more than one request, as on a GPU), built by the builder
  (ONNX Runtime, fp32, Python-backend variant, max batch 16) and served by Triton 2.51
  (nvidia-pytriton's build).
- Each Triton is a replica with a CPU limit of {millis}m: a cgroup of its own with a CFS quota
  over a {period_ms:g} ms period, pinned to a core the client never uses: a core of its own
  where the machine has one per server beside the client's, else every server on the last core
  (two 500m replicas fill one core: busy at once, they take turns within each period). The
  quota makes a replica's speed its own, as a GPU would; the short period keeps it a slower
  processor rather than one that runs at full speed and then stops (the kubelet's 100 ms period
  does the latter: a 1 ms request then waits up to 50 ms, a latency tail of the CPU limit, not of
  the engine).
- The profile is server 0's engine measured by the profile Job's own code (`profile_served` at
  the builder's defaults): whole batches of 1, 4 and 16 at concurrency 1, then single requests
  from 4 and 16 clients, which the dynamic batcher merges; their excess over the whole batches is
  the per-request time. That profile, and nothing measured during the runs, is what the
  simulator gets.
- Each run replays seeded Poisson arrivals with the open-loop load generator
  (`bench/loadgen_process.py`: a process of its own on core 0, in a cgroup of its own, over
  keep-alive HTTP/1.1, `bench/http1.py`), round robin over the replicas. The simulator replays the
  same send times with the same batching: the servers' batching is set through the operator's
  live actuator and read back before the runs. The load level is a share of the fitted capacity
  at the variant's largest batch.

## How each run was checked to be valid

- no request refused for the in-flight bound (512) and no client error;
- the client's send lag (sent minus scheduled) P99 at most {lag:g} ms;
- the client's cgroup used less than {client:.0%} of its core;
- processes outside the run's cgroups used less than {foreign:.0%} of the run's cores (the root
  cgroup's CPU time per core minus the run's cgroups', both the scheduler's own accounting).

The simulator replays the times the client really sent at, so a small send lag does not bias the
comparison; the bound only catches a client that fell behind.

Client overhead is the client's mean latency minus Triton's mean request time (its statistics
API): transport, the HTTP frontend before Triton's clock starts, and the client.

"Run's speed" is how fast the servers ran during the run relative to the profile: the service-time
factor at which the simulated mean executed batch matches the one Triton's statistics counted (a
slower server forms larger batches from the same arrivals). It is what the operator's online
correction learns while serving; "P99 sim at it" is the simulator's P99 with that factor. It is a
diagnosis, not the comparison: the simulator's column gets the profile alone.

"P99 sim over 10 draws" is the simulator's P99 over ten other draws of its service times (same
arrivals, same profile): how far a 60 s run's P99 moves by chance alone. Near capacity it moves
most, and a real run is one draw of it.

With a queue delay the simulator runs Triton's payload batcher (`bench/triton_batcher.py`): the
batcher hands a batch to the instance's queue when its rule says send, even while the instance is
busy, and a request that arrives after that joins the waiting batch only when the batcher thread
wins a race with the instance thread at the end of the running batch. The simulator draws the
winner with the chance `make bench-batcher-probe` measured (docs/benchmarks/batcher-probe.md);
"race never / always won" is its P99 at either extreme.
"""

#: The accuracy the simulator is held to, on P99 and throughput.
TOLERANCE_PCT = 10.0


def render(
    rows: Sequence[RunRecord],
    *,
    service: ServiceTimeModel,
    job_service: ServiceTimeModel,
    argv: Sequence[str],
    server_millis: int,
    period_us: int,
    load_before: float,
) -> str:
    """The Markdown page (docs/benchmarks/validation.md)."""
    valid = [r for r in rows if not r.problems]
    within = [r for r in valid if abs(r.p99_err_pct) <= TOLERANCE_PCT and abs(r.tp_err_pct) <= TOLERANCE_PCT]
    table = [
        "| batching | replicas | load | req/s | requests | P99 real (ms) | P99 sim (ms) | P99 error | "
        "throughput real | sim | error | mean batch real / sim | mean queue real / sim (ms) | run's speed | "
        "P99 sim at it (ms) | P99 sim over 10 draws (ms) | real within them | "
        "P99 sim, race never / always won (ms) | "
        "send lag P99 | client core | other processes | client overhead (ms) | valid |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|---:|---:|---|---|---|---:|---:|---:|---:|---|",
    ]
    for r in rows:
        table.append(
            f"| {r.variant} | {r.replicas} | {r.level:.0%} | {r.rate:.1f} | {r.requests} | "
            f"{r.meas_p99_ms:.1f} | {r.sim_p99_ms:.1f} | {r.p99_err_pct:+.1f}% | "
            f"{r.meas_tp:.1f} | {r.sim_tp:.1f} | {r.tp_err_pct:+.1f}% | "
            f"{r.meas_mean_batch:.2f} / {r.sim_mean_batch:.2f} | "
            f"{r.meas_queue_ms:.1f} / {r.sim_queue_ms:.1f} | "
            f"x{r.run_speed:.3f} | {r.sim_p99_at_speed_ms:.1f} | "
            f"{r.sim_p99_draws_ms[0]:.1f}-{r.sim_p99_draws_ms[1]:.1f} | "
            f"{'yes' if r.within_draws else 'no'} | "
            f"{_race_cell(r.sim_p99_race_ms)} | "
            f"{r.send_lag_p99_ms:.2f} ms | "
            f"{r.client_busy:.0%} | {r.foreign_share:.1%} | {r.client_overhead_ms:.2f} | "
            f"{'yes' if not r.problems else 'NO: ' + '; '.join(r.problems)} |"
        )
    page = [
        "# Simulator vs real Triton (the example engine, CPU)",
        "",
        "<!-- Generated by `make bench-validate` (bench/validate.py); edit the generator, not this page. -->",
        "",
        f"Command: `python -P -m tailpilot.bench.validate {' '.join(argv)}`, run "
        f"{dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC at commit {_commit()}, load average "
        f"{load_before:.2f} before it, {os.cpu_count()} CPUs.",
        "",
        f"**{len(within)} of {len(valid)} valid runs within {TOLERANCE_PCT:g}% on both P99 and throughput**"
        f" ({len(rows) - len(valid)} invalid run(s), listed with the reason).",
        "",
        _ABOUT.format(
            millis=server_millis,
            period_ms=period_us / 1000,
            lag=MAX_SEND_LAG_MS,
            client=MAX_CLIENT_BUSY,
            foreign=MAX_FOREIGN_SHARE,
        ),
        "## Profile the simulator used",
        "",
        f"t(b) = {service.intercept_ms:.3f} + {service.per_item_ms:.3f} x b ms per batch of b requests"
        f" (of which {service.per_request_ms:.3f} ms per request), jitter CV {service.jitter_cv:.2f}:"
        f" the profiler's code with {VALIDATION_PROFILE_S:g} s per point.",
        "",
        f"The same code at the build Job's defaults (3 s per point; written where `--profile-out` says,"
        f" `bench/profiles/example-cpu.json` for `make bench-validate`):"
        f" t(b) = {job_service.intercept_ms:.3f} +"
        f" {job_service.per_item_ms:.3f} x b ms ({job_service.per_request_ms:.3f} per request), jitter CV"
        f" {job_service.jitter_cv:.2f}; at batch 16 it is"
        f" {_err(job_service.mean_ms(16), service.mean_ms(16)):+.1f}%"
        " off the longer profile, an error the operator's online correction takes out while serving.",
        "",
        "## Runs",
        "",
        *table,
        "",
        *_outside_section(valid),
    ]
    return "\n".join(page)


def outside_diagnoses(r: RunRecord) -> list[str]:
    """What this run's own figures say about a P99 outside the tolerance (pure; empty when within).

    Each line is a measurement of the run, never a fitted correction: the P99 at the run's speed
    (the servers ran faster or slower than the profile), whether the real P99 lies within other
    draws of the simulator's service times (chance), and, with a queue delay, whether it lies
    between the simulator's P99 with Triton's batcher race never and always won.
    """
    if abs(r.p99_err_pct) <= TOLERANCE_PCT:
        return []
    out = [
        f"the servers ran at x{r.run_speed:.3f} of the profile's service time in this run (mean batch "
        f"{r.meas_mean_batch:.2f} real, {r.sim_mean_batch:.2f} simulated); at that speed the simulator's "
        f"P99 is {r.sim_p99_at_speed_ms:.1f} ms, {_err(r.sim_p99_at_speed_ms, r.meas_p99_ms):+.1f}%"
    ]
    lo, hi = r.sim_p99_draws_ms
    out.append(
        f"other draws of the service times give {lo:.1f}-{hi:.1f} ms: the real {r.meas_p99_ms:.1f} ms is "
        + ("within them (chance)" if r.within_draws else "outside them (not chance alone)")
    )
    real_burst, sim_burst = r.tail_burst
    if math.isfinite(real_burst):
        out.append(
            f"{real_burst:.0%} of the real slowest 1% were sent within {TAIL_WINDOW_S:g} s of each other "
            f"({sim_burst:.0%} in the simulation)"
            + (
                ": one event (a stall) made the real tail"
                if real_burst >= 2 * sim_burst and real_burst >= 0.3
                else ""
            )
        )
    if r.sim_p99_race_ms is not None:
        never, always = r.sim_p99_race_ms
        between = min(never, always) <= r.meas_p99_ms <= max(never, always)
        out.append(
            f"with the batcher race never / always won the simulator gives {never:.1f} / {always:.1f} ms: "
            f"the real P99 is {'between' if between else 'outside'} them"
        )
    return out


def _outside_section(valid: Sequence[RunRecord]) -> list[str]:
    outside = [r for r in valid if abs(r.p99_err_pct) > TOLERANCE_PCT]
    if not outside:
        return []
    lines = [f"## Valid runs whose P99 is off by more than {TOLERANCE_PCT:g}%", ""]
    for r in outside:
        lines.append(f"- **{r.variant}, {r.replicas} replica(s), {r.level:.0%}** ({r.p99_err_pct:+.1f}%):")
        lines += [f"  - {d};" for d in outside_diagnoses(r)]
    lines.append("")
    return lines


def _race_cell(bounds: tuple[float, float] | None) -> str:
    return "-" if bounds is None else f"{bounds[0]:.1f} / {bounds[1]:.1f}"


def _commit() -> str:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True, timeout=10
        )
    except (OSError, subprocess.SubprocessError):
        return "(unknown)"
    return out.stdout.strip()


if __name__ == "__main__":
    raise SystemExit(main())
