"""Scale to zero on idle-heavy traffic: TailPilot against Knative's KPA and against a fleet kept at one.

`python -P -m tailpilot.bench.scale_to_zero` (part of `make bench`) writes
docs/benchmarks/scale-to-zero.md. Every policy runs on the same simulated fleet
(`tailpilot.bench.simulator`) behind the same activator (`ActivatorModel`, the activator's defaults:
1000 held requests, 300 s hold timeout, a wake 1 s after the first held request asks for one
replica; each policy then reads the count held as its operator-side reads it: TailPilot's period
sizes the wake from it while no replica is ready, KPA counts it as concurrency), on two traces of
sparse traffic:

- `Z1-idle-heavy`: silences of 5 to 30 minutes between bursts of 1 to 4 minutes: a model used a few
  times an hour, the fleet's common case;
- `Z2-frequent-wakes`: silences of 1 to 4 minutes between bursts of 20 to 90 s: a service woken
  every few minutes, which should stay up.

Bursts are Poisson at a quarter of one replica's capacity within the SLO. Each trace is scored over
`DURATION_S` after an unscored warm-up of half as long (another draw of the same process), so that
what a policy learns from history starts as a running service's would.

Policies:
- `tailpilot-min1`: TailPilot as it runs today at `minReplicas: 1` (a fleet never below one);
- `knative-kpa-zero`: Knative's KPA with scale to zero at its defaults (`KnativeKpaZero`);
- `tailpilot-zero`: TailPilot at `minReplicas: 0`, its other knobs at the API's defaults (objective
  99%); `tailpilot-zero-objective-95` and `-90`: the same at those objectives, the points of the
  trade between cost and attainment a user chooses.

Each TailPilot runs from a spec with the API's defaults, only the SLO, the replica bounds
(`minReplicas: 0` for the zero policies) and the objective set.
"""

from __future__ import annotations

import argparse
import math
import multiprocessing
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from tailpilot.bench import cli_lists
from tailpilot.bench.baselines import KnativeKpaZero
from tailpilot.bench.engine_profiles import DEFAULT_PROFILE, default_batching, load_profile, replica_capacity
from tailpilot.bench.metrics import p99, summarize
from tailpilot.bench.published import REPO, git_commit, provenance_lines, utc_minute
from tailpilot.bench.run import default_slo_ms
from tailpilot.bench.simulator import ActivatorModel, Controller, SimConfig, SimResult, Target, simulate
from tailpilot.bench.suite import Setup, baseline_params
from tailpilot.bench.tailpilot_policy import TailPilot, default_spec
from tailpilot.bench.traces import Arrivals, poisson

DEFAULT_PAGE = REPO / "docs" / "benchmarks" / "scale-to-zero.md"
TRACES = ("Z1-idle-heavy", "Z2-frequent-wakes")
#: (silence range s, burst range s) of each trace.
TRACE_SHAPES = {
    "Z1-idle-heavy": ((300.0, 1800.0), (60.0, 240.0)),
    "Z2-frequent-wakes": ((60.0, 240.0), (20.0, 90.0)),
}
#: Burst rate, as a share of one replica's capacity within the SLO.
BURST_LOAD = 0.25
DURATION_S = 7200.0
WARMUP_S = DURATION_S / 2
TS_VALUES = (5.0, 30.0, 90.0)
TAILPILOT_ZERO = {
    "tailpilot-zero": None,
    "tailpilot-zero-objective-95": 95.0,
    "tailpilot-zero-objective-90": 90.0,
}
POLICIES = ("tailpilot-min1", "knative-kpa-zero", *TAILPILOT_ZERO)
MAX_REPLICAS = 8


def sparse_bursts(
    *, duration_s: float, silence_s: tuple[float, float], burst_s: tuple[float, float], rate: float, seed: int
) -> Arrivals:
    """Poisson bursts at `rate` separated by silences, both of lengths drawn uniformly from their range."""
    rng = np.random.default_rng(seed)
    parts: list[Arrivals] = []
    t = float(rng.uniform(*silence_s))
    while t < duration_s:
        length = float(rng.uniform(*burst_s))
        parts.append(t + poisson(rate=rate, duration_s=length, rng=rng))
        t += length + float(rng.uniform(*silence_s))
    arrivals = np.concatenate(parts) if parts else np.empty(0)
    return np.asarray(arrivals[arrivals < duration_s], dtype=np.float64)


@dataclass(frozen=True)
class ZeroSetup:
    """What defines the page's runs."""

    profile_path: Path = DEFAULT_PROFILE
    seed: int = 1
    duration_s: float = DURATION_S
    ts_values: tuple[float, ...] = TS_VALUES
    traces: tuple[str, ...] = TRACES
    policies: tuple[str, ...] = POLICIES

    @property
    def slo_ms(self) -> float:
        """The SLO `make bench` derives from the profile."""
        return default_slo_ms(self.profile_path)

    def arrivals(self, trace: str) -> tuple[Arrivals, float]:
        """The trace's warm-up followed by its scored part, and where the scored part starts."""
        profile = load_profile(self.profile_path)
        rate = BURST_LOAD * replica_capacity(profile, self.slo_ms)
        silence, burst = TRACE_SHAPES[trace]
        index = TRACES.index(trace)
        warm = sparse_bursts(
            duration_s=WARMUP_S,
            silence_s=silence,
            burst_s=burst,
            rate=rate,
            seed=self.seed * 1000 + index + 500,
        )
        scored = sparse_bursts(
            duration_s=self.duration_s,
            silence_s=silence,
            burst_s=burst,
            rate=rate,
            seed=self.seed * 1000 + index,
        )
        return np.concatenate([warm, scored + WARMUP_S]), WARMUP_S


@dataclass(frozen=True)
class ZeroRow:
    """One policy on one trace at one start-up time."""

    trace: str
    ts_s: float
    policy: str
    requests: int
    pct_in_slo: float
    replica_seconds: float
    cold_starts: int
    held: int
    held_p50_s: float
    held_max_s: float
    failed: int
    p99_ms: float


def make_controller(setup: ZeroSetup, policy: str) -> Controller:
    """The policy's controller, starting with one replica at the profile's default batching."""
    profile = load_profile(setup.profile_path)
    batching = default_batching(profile, setup.slo_ms)
    if policy == "knative-kpa-zero":
        suite = Setup(profile=profile, slo_ms=setup.slo_ms, seed=setup.seed, max_replicas=MAX_REPLICAS)
        return KnativeKpaZero(baseline_params(suite, initial_replicas=1))
    spec = default_spec(
        p99_target_ms=setup.slo_ms,
        max_replicas=MAX_REPLICAS,
        objective_percent=TAILPILOT_ZERO.get(policy),
        minReplicas=0 if policy in TAILPILOT_ZERO else 1,
    )
    return TailPilot(profile=profile, spec=spec, initial=Target(1, batching))


def zero_config(setup: ZeroSetup, *, ts: float, policy: str, scored_from_s: float) -> SimConfig:
    """The simulated fleet of one run: behind the activator, at zero replicas allowed but for min1."""
    return SimConfig(
        service=load_profile(setup.profile_path).service_time,
        duration_s=scored_from_s + setup.duration_s,
        startup_s=ts,
        seed=setup.seed,
        min_replicas=0 if policy != "tailpilot-min1" else 1,
        max_replicas=MAX_REPLICAS,
        score_from_s=scored_from_s,
        activator=ActivatorModel(),
    )


def run_one(task: tuple[ZeroSetup, str, float, str]) -> ZeroRow:
    """One run (a pool task)."""
    setup, trace, ts, policy = task
    arrivals, scored_from = setup.arrivals(trace)
    config = zero_config(setup, ts=ts, policy=policy, scored_from_s=scored_from)
    result = simulate(arrivals_s=arrivals, config=config, controller=make_controller(setup, policy))
    return row_of(result, trace=trace, ts=ts, policy=policy, slo_ms=setup.slo_ms)


def row_of(result: SimResult, *, trace: str, ts: float, policy: str, slo_ms: float) -> ZeroRow:
    """Score one run: the table's metrics plus the activator's (cold starts, held requests)."""
    metrics = summarize(result, slo_ms=slo_ms, step_onsets_s=[])
    latency = result.latency_s
    held = latency[result.held] if result.held.size else np.empty(0)
    served_held = held[np.isfinite(held)]
    return ZeroRow(
        trace=trace,
        ts_s=ts,
        policy=policy,
        requests=int(latency.size),
        pct_in_slo=metrics.pct_requests_in_slo,
        replica_seconds=result.replica_seconds,
        cold_starts=len(result.wakes_s),
        held=int(held.size),
        held_p50_s=float(np.median(served_held)) if served_held.size else math.nan,
        held_max_s=float(served_held.max()) if served_held.size else math.nan,
        failed=int(np.sum(~np.isfinite(latency))),
        p99_ms=p99(latency[np.isfinite(latency)]) * 1000.0 if np.isfinite(latency).any() else math.nan,
    )


def run(setup: ZeroSetup, *, jobs: int) -> list[ZeroRow]:
    """Every (trace, Ts, policy) run, in table order; deterministic whatever `jobs` is."""
    tasks = [(setup, tr, ts, p) for tr in setup.traces for ts in setup.ts_values for p in setup.policies]
    with multiprocessing.get_context("fork").Pool(max(1, jobs)) as pool:
        return pool.map(run_one, tasks, chunksize=1)


def _fmt(x: float, spec: str) -> str:
    return "-" if math.isnan(x) else format(x, spec)


def table(rows: Sequence[ZeroRow]) -> list[str]:
    """The markdown table, one row per run."""
    lines = [
        "| trace | Ts s | policy | %req in SLO | replica-s | cold starts | held | held wait p50 / max s "
        "| failed |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r.trace} | {r.ts_s:g} | {r.policy} | {r.pct_in_slo:.3f} | {r.replica_seconds:.0f} | "
            f"{r.cold_starts} | {r.held} | {_fmt(r.held_p50_s, '.1f')} / {_fmt(r.held_max_s, '.1f')} "
            f"| {r.failed} |"
        )
    return lines


def curve_at(points: Sequence[tuple[float, float]], cost: float) -> float | None:
    """Attainment of the curve joining (replica-seconds, attainment) points linearly, at `cost`.

    None outside the points' cost range. The curve is the upper hull's walk in cost order: at each
    cost the best attainment any two neighbouring points give.
    """
    ordered = sorted(points)
    if not ordered or cost < ordered[0][0] or cost > ordered[-1][0]:
        return None
    best = max(a for c, a in ordered if c <= cost)
    for (c0, a0), (c1, a1) in zip(ordered, ordered[1:], strict=False):
        if c0 <= cost <= c1 and c1 > c0:
            best = max(best, a0 + (a1 - a0) * (cost - c0) / (c1 - c0))
    return best


def comparisons(rows: Sequence[ZeroRow]) -> list[str]:
    """Per trace and Ts: TailPilot's points against the one-replica fleet and against KPA's point."""
    out = []
    by_key = {(r.trace, r.ts_s, r.policy): r for r in rows}
    for trace, ts in sorted({(r.trace, r.ts_s) for r in rows}, key=lambda k: (TRACES.index(k[0]), k[1])):
        one = by_key.get((trace, ts, "tailpilot-min1"))
        kpa = by_key.get((trace, ts, "knative-kpa-zero"))
        zeros = [by_key[(trace, ts, p)] for p in TAILPILOT_ZERO if (trace, ts, p) in by_key]
        if one is None or kpa is None or not zeros:
            continue
        default = zeros[0]
        points = [(r.replica_seconds, r.pct_in_slo) for r in (*zeros, one)]
        at_kpa = curve_at(points, kpa.replica_seconds)
        if at_kpa is not None:
            verdict = "holds" if at_kpa >= kpa.pct_in_slo else "**misses**"
            vs_kpa = f"at KPA's {kpa.replica_seconds:.0f} replica-s TailPilot's curve keeps {at_kpa:.2f}%"
        elif kpa.replica_seconds > max(c for c, _ in points):
            best = max(a for _, a in points)
            verdict = "holds" if best >= kpa.pct_in_slo else "**misses**"
            vs_kpa = (
                f"KPA costs more than every TailPilot point ({kpa.replica_seconds:.0f} replica-s); "
                f"the best keeps {best:.2f}%"
            )
        else:
            cheapest = min(points)
            verdict = "holds" if kpa.pct_in_slo < cheapest[1] else "**misses**"
            vs_kpa = (
                f"KPA costs less than every TailPilot point ({kpa.replica_seconds:.0f} replica-s); "
                f"the cheapest keeps {cheapest[1]:.2f}%"
            )
        out.append(
            f"- {trace}, Ts = {ts:g} s: tailpilot-zero {default.replica_seconds:.0f} replica-s, "
            f"{default.pct_in_slo:.2f}% (one replica: {one.replica_seconds:.0f}, {one.pct_in_slo:.2f}%); "
            f"{vs_kpa} (KPA: {kpa.pct_in_slo:.2f}%): {verdict}."
        )
    return out


def page(rows: Sequence[ZeroRow], setup: ZeroSetup, *, command: str, commit: str, elapsed_s: float) -> str:
    """docs/benchmarks/scale-to-zero.md."""
    doc = (__doc__ or "").split("\n\n", 1)[1]
    return "\n".join(
        [
            "# Scale to zero: idle-heavy traffic",
            "",
            *provenance_lines(command=command, commit=commit, date=utc_minute(), elapsed_s=elapsed_s),
            f"- Setup: SLO {setup.slo_ms:g} ms, profile `{setup.profile_path.relative_to(REPO)}`, seed "
            f"{setup.seed}, {setup.duration_s:g} s scored after {WARMUP_S:g} s of warm-up, Ts = "
            f"{', '.join(f'{t:g}' for t in setup.ts_values)} s",
            "",
            doc.strip(),
            "",
            "## Results",
            "",
            "%req in SLO: requests answered within the SLO (failed ones count as missed); replica-s: every "
            "replica's seconds, starting and draining included; cold starts: wakes from zero; held: requests "
            "that waited at the activator, their wait to the answer (p50 / max); failed: refused by the "
            "activator's bound or past its hold timeout.",
            "",
            *table(rows),
            "",
            "## Against the goals",
            "",
            *comparisons(rows),
            "",
        ]
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -P -m tailpilot.bench.scale_to_zero", description=__doc__.split("\n")[0]
    )
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--ts", type=cli_lists.seconds, default=TS_VALUES)
    ap.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1))
    ap.add_argument("--out", type=Path, default=DEFAULT_PAGE)
    ap.add_argument("--no-write", action="store_true", help="print only")
    args = ap.parse_args(argv)
    started = time.monotonic()
    commit = git_commit()
    setup = replace(ZeroSetup(seed=args.seed), ts_values=tuple(args.ts))
    rows = run(setup, jobs=args.jobs)
    print("\n".join(table(rows)))
    print("\n".join(comparisons(rows)))
    elapsed = time.monotonic() - started
    print(f"{len(rows)} runs in {elapsed:.1f} s")
    if not args.no_write:
        args.out.write_text(
            page(
                rows,
                setup,
                command="python -P -m tailpilot.bench.scale_to_zero",
                commit=commit,
                elapsed_s=elapsed,
            )
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
