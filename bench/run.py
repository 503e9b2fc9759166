"""`python -P -m tailpilot.bench.run [--quick] [--seed N] [--trace FILE --profile profile.json]`.

Runs the whole comparison (every trace x Ts x policy) in one seeded run, prints the table
and writes docs/benchmarks/{README.md,results.csv,plot-*.png}.  `-P` keeps Python from
putting the working directory first on sys.path, where the repository's `operator/`
folder would shadow the standard library's `operator` module.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt

from tailpilot.bench import cli_lists, quotes
from tailpilot.bench.engine_profiles import DEFAULT_PROFILE, load_profile
from tailpilot.bench.published import REPO, git_commit, utc_minute
from tailpilot.bench.report import markdown, plot_timelines, plot_trades, text_table, write_csv
from tailpilot.bench.suite import EXPERIMENTAL_POLICIES, Setup, policy_names, run_suite
from tailpilot.bench.traces import TRACE_NAMES, read_arrivals

PLOT_TRACES = ("T5-step", "T6-spike", "T8-azure-code", "T9-flash-crowd")
QUICK_TRACES = ("T1-poisson", "T5-step", "T6-spike", "T8-azure-code")


def default_slo_ms(profile_path: Path) -> float:
    """SLO for a profile: 4x the mean time of a quarter-size batch (1000 ms for the default profile)."""
    p = load_profile(profile_path)
    return float(4.0 * p.service_time.mean_ms(max(1, p.max_batch_size // 4)))


def default_setup(*, seed: int, traces: Sequence[str]) -> Setup:
    """`make bench`'s setup (default profile and its SLO, every Ts) on `traces`, for the side tools."""
    return Setup(
        profile=load_profile(DEFAULT_PROFILE),
        slo_ms=default_slo_ms(DEFAULT_PROFILE),
        seed=seed,
        traces=tuple(traces),
    )


def method_href(out: Path) -> str:
    """The link from a README written into `out` to docs/benchmarks/method.md."""
    return Path(os.path.relpath(REPO / "docs" / "benchmarks" / "method.md", out.resolve())).as_posix()


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -P -m tailpilot.bench.run", description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="CI smoke subset: 4 traces, 20 min, Ts=30 s")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--trace", type=Path, help="arrival file (one timestamp per line, or Azure CSV)")
    ap.add_argument("--profile", type=Path, default=DEFAULT_PROFILE, help="engine profile.json")
    ap.add_argument("--slo-ms", type=float, help="P99 SLO (default: derived from the profile)")
    ap.add_argument("--duration-s", type=float, help="trace length (default 3600, quick 1200)")
    ap.add_argument("--out", type=Path, default=REPO / "docs" / "benchmarks")
    ap.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1))
    ap.add_argument("--no-write", action="store_true", help="print only")
    ap.add_argument(
        "--ts",
        type=cli_lists.seconds,
        help="comma-separated replica start-up times, s (default 5,30,90; quick 30)",
    )
    ap.add_argument(
        "--traces",
        type=cli_lists.names,
        help=f"comma-separated subset of the traces (default all: {','.join(TRACE_NAMES)})",
    )
    ap.add_argument(
        "--policies",
        type=cli_lists.names,
        help="comma-separated policies to run (default every one of the table; "
        f"{','.join(EXPERIMENTAL_POLICIES)} only when named)",
    )
    args = ap.parse_args(argv)
    known_policies = (*policy_names(with_tailpilot=True), *EXPERIMENTAL_POLICIES)
    for flag, given, known in (
        ("--traces", args.traces, TRACE_NAMES),
        ("--policies", args.policies, known_policies),
    ):
        unknown = [n for n in given or () if n not in known]
        if unknown:
            ap.error(f"{flag}: unknown {', '.join(unknown)} (known: {', '.join(known)})")
    return args


def trace_file_duration(arrivals: npt.NDArray[np.float64], *, given_s: float | None) -> tuple[float, str]:
    """(run length, what was done) for an arrival file: its own length unless --duration-s says otherwise.

    The file's length is its last arrival, rounded up to a whole second. A --duration-s shorter cuts
    the file; a longer one pads it with silence (no arrivals, the fleet still paid for).
    """
    own = float(math.ceil(arrivals[-1])) if arrivals.size else 0.0
    if given_s is None:
        return own, f"runs the file's own length, {own:g} s ({arrivals.size} requests)"
    if given_s < own:
        kept = int(np.searchsorted(arrivals, given_s))
        return (
            given_s,
            f"--duration-s {given_s:g} cuts the file's {own:g} s: {kept} of {arrivals.size} requests",
        )
    if given_s > own:
        return (
            given_s,
            f"--duration-s {given_s:g} pads the file's {own:g} s with {given_s - own:g} s without arrivals",
        )
    return given_s, f"runs the file's own length, {own:g} s ({arrivals.size} requests)"


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    started = time.monotonic()
    commit = git_commit()  # before the run writes its files into the tree
    profile = load_profile(args.profile)
    slo = args.slo_ms or default_slo_ms(args.profile)
    duration = args.duration_s or (1200.0 if args.quick else 3600.0)
    if args.trace is not None:
        duration, note = trace_file_duration(read_arrivals(args.trace), given_s=args.duration_s)
        print(f"{args.trace}: {note}")
    setup = Setup(
        profile=profile,
        slo_ms=slo,
        seed=args.seed,
        duration_s=duration,
        ts_values=args.ts or ((30.0,) if args.quick else (5.0, 30.0, 90.0)),
        traces=args.traces or (QUICK_TRACES if args.quick else Setup.traces),
        trace_file=args.trace,
        policies=args.policies,
    )
    plot_ts = 30.0
    result = run_suite(
        setup, jobs=args.jobs, plot_traces=() if args.no_write else (*PLOT_TRACES, "custom"), plot_ts=plot_ts
    )
    print(text_table(result.rows))
    for note in result.skipped:
        print("not run:", note)
    for note in result.errors:
        print("error:", note[:300])
    elapsed = time.monotonic() - started
    print(f"{len(result.rows)} rows in {elapsed:.1f} s")
    if args.no_write:
        return 0
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    write_csv(result.rows, out / "results.csv")
    plots = plot_timelines(result, setup=setup, out_dir=out, ts=plot_ts)
    trade_plots = plot_trades(result.rows, traces=[*PLOT_TRACES, "custom"], out_dir=out)
    command = "python -P -m tailpilot.bench.run " + " ".join(argv if argv is not None else sys.argv[1:])
    date = utc_minute()
    (out / "README.md").write_text(
        markdown(
            result,
            setup=setup,
            command=command.strip(),
            commit=commit,
            date=date,
            elapsed_s=time.monotonic() - started,
            plots=plots,
            trade_plots=trade_plots,
            method_href=method_href(out),
        )
    )
    print(f"wrote {out}/README.md, results.csv and {len(plots) + len(trade_plots)} plots")
    if out.resolve() == (REPO / "docs" / "benchmarks").resolve():
        for name in quotes.refresh():
            print(f"rewrote the figures {name} quotes from them")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
