"""Adaptive batching vs the best static batching: the most load a fixed fleet serves within the SLO.

The goal: adaptive batching reaches at least 95% of the capacity of the best static
batching found offline.  For one engine profile, SLO and replica count (min = max, so only
batching can move):

* **capacity** of a controller = the highest Poisson arrival rate at which the P99 of the
  requests arriving in the measured part of the run (after `warmup_s`) is within the SLO and
  none fails.  It is found by bisection on the rate; every rate replays the *same* unit-rate
  arrival sequence compressed by the rate (common random numbers), with the same
  service-time jitter seed, so a higher rate only ever packs the same requests closer.
* **best static** = the highest capacity over an offline grid of fixed batchings (every
  power-of-two max batch up to the engine's, times four max queue delays).
* **adaptive** = TailPilot's policy (`tailpilot.policy.decide`, the operator's own
  configuration for a spec with `batching.mode: auto`), started from a given batching; it
  runs the whole warm-up to settle, exactly as it would after a deploy.

Pure computation over the simulator; `main` prints the table and writes
docs/benchmarks/batching-capacity.md.
"""

from __future__ import annotations

import argparse
import math
import multiprocessing
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import numpy as np
import numpy.typing as npt

from tailpilot.api.autoscaling import BatchingConfig
from tailpilot.api.engine import EngineProfile
from tailpilot.bench.baselines import Static
from tailpilot.bench.engine_profiles import PROFILES_DIR, load_profile
from tailpilot.bench.metrics import p99
from tailpilot.bench.published import REPO, git_commit, provenance_lines, utc_minute
from tailpilot.bench.run import default_slo_ms
from tailpilot.bench.simulator import Controller, SimConfig, Target, simulate

STATIC, ADAPTIVE = "static", "adaptive"


@dataclass(frozen=True)
class Case:
    """One fleet to measure: an engine profile, its SLO and a fixed replica count."""

    profile_name: str
    replicas: int
    #: None: the benchmark's default SLO for the profile (`tailpilot.bench.run.default_slo_ms`).
    slo_override_ms: float | None = None
    duration_s: float = 600.0
    warmup_s: float = 300.0
    seed: int = 1

    @property
    def profile_path(self) -> Path:
        return PROFILES_DIR / f"{self.profile_name}.json"

    # Read once per case, not once per simulation (a capacity search runs ~8).
    @cached_property
    def profile(self) -> EngineProfile:
        return load_profile(self.profile_path)

    @cached_property
    def slo_ms(self) -> float:
        return self.slo_override_ms if self.slo_override_ms is not None else default_slo_ms(self.profile_path)


#: The default cases: each profile at its default SLO, where the engine's largest batch fits the
#: SLO, and at a tight one, where it does not (one 16-batch takes 580 ms of a 500 ms SLO, one
#: 64-batch 36 ms of 20 ms) and the best batching is somewhere in between; the slow profile also
#: at four replicas (round robin spreads the arrivals).
CASES = (
    Case("gpu-large-like", 1),
    Case("gpu-large-like", 4),
    Case("gpu-large-like", 1, slo_override_ms=500.0),
    Case("gpu-small-like", 1),
    Case("gpu-small-like", 1, slo_override_ms=20.0),
)
QUICK_CASES = (Case("gpu-large-like", 1, duration_s=300.0, warmup_s=150.0),)


def _describe(b: BatchingConfig) -> str:
    return f"max batch {b.max_batch_size}, delay {b.max_queue_delay_us} us"


@dataclass(frozen=True)
class Candidate:
    """What runs the fleet: a static batching, or the adaptive policy from a start batching."""

    kind: str  # STATIC or ADAPTIVE
    batching: BatchingConfig

    @property
    def label(self) -> str:
        text = _describe(self.batching)
        return text if self.kind == STATIC else f"TailPilot from {text}"


@dataclass(frozen=True)
class Measured:
    """A candidate's capacity on a case, with what it ran at that rate."""

    case: Case
    candidate: Candidate
    capacity_per_s: float
    p99_at_capacity_ms: float
    #: The bisection's upper end: a rate at most `rel_tol` of the search range above the capacity
    #: at which the SLO was missed.
    missed_at_per_s: float
    #: The batching in force at the end of the run at capacity (the static one, or the policy's choice).
    final_batching: BatchingConfig
    reloads_at_capacity: int


def static_grid(profile: EngineProfile, slo_ms: float) -> list[BatchingConfig]:
    """The offline search space: power-of-two max batches (and the engine's) x delays 0, SLO/40, /20, /10."""
    sizes = sorted({profile.max_batch_size, *(2**i for i in range(12) if 2**i <= profile.max_batch_size)})
    delays = (0, round(slo_ms * 1000 / 40), round(slo_ms * 1000 / 20), round(slo_ms * 1000 / 10))
    return [BatchingConfig(max_batch_size=b, max_queue_delay_us=d) for b in sizes for d in delays]


def adaptive_starts(profile: EngineProfile) -> list[BatchingConfig]:
    """Start batchings for the adaptive policy: no batching at all, and the engine's largest batch."""
    return [
        BatchingConfig(max_batch_size=1, max_queue_delay_us=0),
        BatchingConfig(max_batch_size=profile.max_batch_size, max_queue_delay_us=0),
    ]


def unit_arrivals(case: Case, upper_rate: float) -> npt.NDArray[np.float64]:
    """A unit-rate Poisson sequence long enough for `upper_rate` over the case's duration."""
    rng = np.random.default_rng(case.seed)
    n = int(upper_rate * case.duration_s * 1.2) + 100
    return np.cumsum(rng.exponential(1.0, n))


def controller(case: Case, candidate: Candidate) -> Controller:
    """A fixed batching, or TailPilot configured as the operator configures it for `batching.mode: auto`."""
    if candidate.kind == STATIC:
        return Static(replicas=case.replicas, batching=candidate.batching)
    from tailpilot.bench.tailpilot_policy import TailPilot, default_spec

    # Replicas pinned to the case's (minReplicas = maxReplicas): only the batching moves.
    spec = default_spec(p99_target_ms=case.slo_ms, max_replicas=case.replicas, minReplicas=case.replicas)
    spec = spec.model_copy(
        update={"batching": spec.batching.model_copy(update={"max_batch_size": case.profile.max_batch_size})}
    )
    return TailPilot(profile=case.profile, spec=spec, initial=Target(case.replicas, candidate.batching))


def run_at(
    case: Case, candidate: Candidate, rate: float, unit: npt.NDArray[np.float64]
) -> tuple[float, BatchingConfig, int]:
    """(P99 ms of the measured requests, batching at the end, reloads) at `rate` req/s."""
    arrivals = unit / rate
    arrivals = arrivals[arrivals < case.duration_s]
    result = simulate(
        arrivals_s=arrivals,
        config=SimConfig(
            service=case.profile.service_time,
            duration_s=case.duration_s,
            startup_s=30.0,
            seed=case.seed,
            min_replicas=case.replicas,
            max_replicas=case.replicas,
        ),
        controller=controller(case, candidate),
    )
    measured = result.latency_s[result.arrival_s >= case.warmup_s]
    changes = result.batching_changes
    return p99(measured) * 1000.0, changes[-1][1], len(changes) - 1


def capacity(case: Case, candidate: Candidate, *, rel_tol: float = 0.005) -> Measured:
    """Bisection on the rate between 0 and the fleet's full-batch throughput (no batching beats it).

    Near saturation the measured P99 is not strictly monotone in the rate (a few thousand
    requests, a queue close to unstable), so the result is *a* rate that meets the SLO with one
    at most `rel_tol` of the range above it that misses it, not the supremum of passing rates.
    """
    profile, slo = case.profile, case.slo_ms
    top_batch = candidate.batching.max_batch_size if candidate.kind == STATIC else profile.max_batch_size
    upper = case.replicas * top_batch * 1000.0 / profile.service_time.mean_ms(top_batch)
    unit = unit_arrivals(case, upper)
    lo, hi = 0.0, upper
    best: tuple[float, BatchingConfig, int] = (math.nan, candidate.batching, 0)
    while hi - lo > rel_tol * upper:
        mid = (lo + hi) / 2
        outcome = run_at(case, candidate, mid, unit)
        if outcome[0] <= slo:
            lo, best = mid, outcome
        else:
            hi = mid
    return Measured(case, candidate, lo, best[0], hi, best[1], best[2])


def _task(task: tuple[Case, Candidate]) -> Measured:
    return capacity(*task)


@dataclass(frozen=True)
class CaseResult:
    """Every candidate's capacity on one case, and the adaptive-vs-best-static ratio."""

    case: Case
    measured: list[Measured]

    @property
    def statics(self) -> list[Measured]:
        """The static batchings, highest capacity first."""
        return sorted(
            (m for m in self.measured if m.candidate.kind == STATIC), key=lambda m: -m.capacity_per_s
        )

    @property
    def best_static(self) -> Measured:
        return self.statics[0]

    @property
    def adaptive(self) -> list[Measured]:
        return [m for m in self.measured if m.candidate.kind == ADAPTIVE]

    @property
    def worst_ratio(self) -> float:
        return min(m.capacity_per_s for m in self.adaptive) / self.best_static.capacity_per_s


def run(cases: Sequence[Case], *, jobs: int) -> list[CaseResult]:
    """Measure every candidate on every case (deterministic whatever `jobs` is)."""
    tasks = []
    for case in cases:
        profile = case.profile
        tasks += [(case, Candidate(STATIC, b)) for b in static_grid(profile, case.slo_ms)]
        tasks += [(case, Candidate(ADAPTIVE, b)) for b in adaptive_starts(profile)]
    with multiprocessing.get_context("fork").Pool(max(1, jobs)) as pool:
        measured = pool.map(_task, tasks, chunksize=1)
    return [CaseResult(case, [m for m in measured if m.case == case]) for case in cases]


def report(results: Sequence[CaseResult], *, top: int = 5) -> str:
    """Markdown: one summary table, then each case's best static batchings and adaptive runs."""
    lines = [
        "| engine profile | SLO ms | replicas | best static batching | its capacity req/s "
        "| adaptive capacity req/s (worst start) | adaptive's batching | ratio | goal >= 0.95 |",
        "| --- | ---: | ---: | --- | ---: | ---: | --- | ---: | --- |",
    ]
    for r in results:
        worst = min(r.adaptive, key=lambda m: m.capacity_per_s)
        verdict = "met" if r.worst_ratio >= 0.95 else "NOT met"
        lines.append(
            f"| {r.case.profile_name} | {r.case.slo_ms:g} | {r.case.replicas} | "
            f"{_describe(r.best_static.candidate.batching)} | {r.best_static.capacity_per_s:.1f} | "
            f"{worst.capacity_per_s:.1f} | {_describe(worst.final_batching)} | {r.worst_ratio:.3f} | "
            f"{verdict} |"
        )
    for r in results:
        c = r.case
        lines += [
            "",
            f"### {c.profile_name}, {c.replicas} replica(s), SLO {c.slo_ms:g} ms",
            "",
            "| controller | capacity req/s | P99 at capacity ms | batching at the end | reloads |",
            "| --- | ---: | ---: | --- | ---: |",
        ]
        statics = r.statics
        for m in [*r.adaptive, *statics[:top]]:
            lines.append(
                f"| {m.candidate.label} | {m.capacity_per_s:.1f} | {m.p99_at_capacity_ms:.0f} | "
                f"{_describe(m.final_batching)} | {m.reloads_at_capacity} |"
            )
        lines.append(
            f"| (worst of the {len(statics)} static batchings) | {statics[-1].capacity_per_s:.1f} | | | |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -P -m tailpilot.bench.batching_capacity", description=__doc__.split("\n")[0]
    )
    ap.add_argument("--quick", action="store_true", help="one small case, a shorter run (a smoke test)")
    ap.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1))
    ap.add_argument("--out", type=Path, default=REPO / "docs" / "benchmarks" / "batching-capacity.md")
    ap.add_argument("--no-write", action="store_true", help="print only")
    args = ap.parse_args(argv)
    started = time.monotonic()
    commit = git_commit()  # before the run writes its page into the tree
    results = run(QUICK_CASES if args.quick else CASES, jobs=args.jobs)
    table = report(results)
    elapsed = time.monotonic() - started
    print(table)
    print(f"\n{sum(len(r.measured) for r in results)} capacity searches in {elapsed:.0f} s")
    if not args.no_write:
        command = "python -P -m tailpilot.bench.batching_capacity " + " ".join(
            argv if argv is not None else sys.argv[1:]
        )
        provenance = provenance_lines(
            command=command.strip(), commit=commit, date=utc_minute(), elapsed_s=elapsed
        )
        args.out.write_text(
            "# Adaptive batching vs the best static batching\n\n"
            "<!-- Generated by `make bench-batching` (bench/batching_capacity.py); edit the generator, "
            "not this page. -->\n\n" + "\n".join(provenance) + "\n\n"
            "How it is measured: the module docstring of `bench/batching_capacity.py` and "
            "[method.md](method.md).\n\n" + table + "\n"
        )
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
