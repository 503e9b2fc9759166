"""Writing the results: results.csv, the markdown README, the text table and the plots."""

from __future__ import annotations

import csv
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tailpilot.bench import curves
from tailpilot.bench.baselines import BASELINE_SETTINGS, TUNED_BASELINES
from tailpilot.bench.curves import CURVE_OBJECTIVES, TradePoint
from tailpilot.bench.goals import goal_table, slo_checks
from tailpilot.bench.published import provenance_lines
from tailpilot.bench.suite import (
    OBJECTIVE_POLICIES,
    SLOPE_FACTOR,
    TAILPILOT,
    TAILPILOT_SLOPE,
    UNIFORM_FACTORS,
    WRONG_PROFILE_POLICIES,
    Row,
    Setup,
    SuiteResult,
)

CSV_COLUMNS = (
    "trace",
    "ts_s",
    "policy",
    "pct_requests_in_slo",
    "pct_windows_in_slo",
    "replica_seconds",
    "oracle_ratio",
    "scale_actions",
    "flaps",
    "recovery_s",
    "mean_batch",
    "scale_settle_s",
    "final_service_scale",
    "final_slope_scale",
)


def _num(x: float | None, digits: int) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return ""
    if math.isinf(x):
        return "inf"
    return f"{x:.{digits}f}"


def csv_record(row: Row) -> dict[str, str]:
    """One results.csv line (empty recovery_s: the trace has no step; inf: never recovered).

    scale_settle_s, final_service_scale and final_slope_scale: TailPilot's learned speed and per-item
    slope (empty for other policies; settle inf: it never settled).
    """
    m = row.metrics
    return {
        "trace": row.trace,
        "ts_s": f"{row.ts_s:g}",
        "policy": row.policy,
        "pct_requests_in_slo": _num(m.pct_requests_in_slo, 3),
        "pct_windows_in_slo": _num(m.pct_windows_in_slo, 2),
        "replica_seconds": _num(m.replica_seconds, 1),
        "oracle_ratio": _num(row.oracle_ratio, 3),
        "scale_actions": str(m.scale_actions),
        "flaps": str(m.flaps),
        "recovery_s": _num(m.recovery_s, 0),
        "mean_batch": _num(m.mean_batch, 2),
        "scale_settle_s": _num(m.settle_s, 0),
        "final_service_scale": _num(m.final_scale, 3),
        "final_slope_scale": _num(m.final_slope, 3),
    }


def write_csv(rows: Sequence[Row], path: Path) -> None:
    """results.csv with exactly CSV_COLUMNS."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=CSV_COLUMNS, lineterminator="\n")
        w.writeheader()
        for r in rows:
            w.writerow(csv_record(r))


def text_table(rows: Sequence[Row]) -> str:
    """Fixed-width table for the terminal."""
    head = (
        f"{'trace':15} {'Ts':>3} {'policy':23} {'%req':>7} {'%win':>6} {'rep-s':>8} {'xorc':>5} "
        f"{'act':>4} {'flap':>4} {'recov':>5} {'batch':>5} {'settle':>6} {'scale':>5} {'slope':>5}"
    )
    lines = [head, "-" * len(head)]
    for r in rows:
        c, m = csv_record(r), r.metrics
        lines.append(
            f"{r.trace:15} {c['ts_s']:>3} {r.policy:23} {c['pct_requests_in_slo']:>7} "
            f"{c['pct_windows_in_slo']:>6} {c['replica_seconds']:>8} {c['oracle_ratio']:>5} "
            f"{c['scale_actions']:>4} {c['flaps']:>4} {c['recovery_s'] or '-':>5} {c['mean_batch']:>5} "
            f"{c['scale_settle_s'] or '-':>6} {_num(m.final_scale, 2) or '-':>5} "
            f"{_num(m.final_slope, 2) or '-':>5}"
        )
    return "\n".join(lines)


def tailpilot_findings(rows: Sequence[Row], *, slo_target_pct: float = 99.0) -> list[str]:
    """Plain statements of where TailPilot's policy misses the SLO or is beaten (computed, not hand-picked).

    "Beaten" means another non-oracle policy had at least the same % of windows in SLO
    and at least the same % of requests in SLO, with fewer replica-seconds.
    """
    out = []
    keyed: dict[tuple[str, float], list[Row]] = {}
    for r in rows:
        keyed.setdefault((r.trace, r.ts_s), []).append(r)
    for (trace, ts), group in keyed.items():
        tp = next((r for r in group if r.policy == TAILPILOT), None)
        if tp is None:
            continue
        m = tp.metrics
        if m.pct_requests_in_slo < slo_target_pct:
            out.append(
                f"{trace}, Ts={ts:g} s: TailPilot keeps only {m.pct_requests_in_slo:.2f}% of requests within "
                f"the SLO ({m.pct_windows_in_slo:.1f}% of minutes)."
            )
        for r in group:
            o = r.metrics
            if r.policy in (
                TAILPILOT,
                *OBJECTIVE_POLICIES,
                *WRONG_PROFILE_POLICIES,
                "oracle-fluid",
                "oracle-realizable",
            ):
                continue
            if (
                o.pct_windows_in_slo >= m.pct_windows_in_slo
                and o.pct_requests_in_slo >= m.pct_requests_in_slo
                and o.replica_seconds < m.replica_seconds
            ):
                out.append(
                    f"{trace}, Ts={ts:g} s: {r.policy} does at least as well on the SLO "
                    f"({o.pct_requests_in_slo:.2f}% vs {m.pct_requests_in_slo:.2f}% of requests) with fewer "
                    f"replica-seconds ({o.replica_seconds:.0f} vs {m.replica_seconds:.0f})."
                )
    return out


def _slo_cell(row: Row) -> tuple[str, int, int]:
    """The SLO goals of one row in words, and (checks kept, checks) for the totals."""
    checks = slo_checks(row)
    if not checks:
        return "no SLO goal", 0, 0
    missed = [c.measured for c in checks if not c.holds]
    kept = len(checks) - len(missed)
    return ("kept" if not missed else f"**missed** ({'; '.join(missed)})"), kept, len(checks)


def _scale_cell(row: Row, policy: str) -> str:
    m = row.metrics
    if m.final_scale is None:
        return "scale not recorded"
    if m.settle_s is None or math.isinf(m.settle_s):
        settle = "never settled"
    else:
        settle = f"settled {m.settle_s:.0f} s"
    truth, slope_truth = 1.0, 1.0
    if policy in UNIFORM_FACTORS:
        truth = 1.0 / UNIFORM_FACTORS[policy]
    if policy == TAILPILOT_SLOPE:
        slope_truth = 1.0 / SLOPE_FACTOR
    slope = "" if m.final_slope is None else f", slope {m.final_slope:.2f} (true {slope_truth:.2f})"
    return f"{settle}; scale {m.final_scale:.2f} (true {truth:.2f}){slope}"


def robustness_table(rows: Sequence[Row], *, method_href: str = "method.md") -> list[str]:
    """Markdown lines: TailPilot with the true profile beside each wrong-profile run, per trace and Ts.

    Empty when the run has no wrong-profile policy or no TailPilot rows to compare them with.
    """
    keyed = {(r.trace, r.ts_s, r.policy): r for r in rows}
    variants = [v for v in WRONG_PROFILE_POLICIES if any(r.policy == v for r in rows)]
    truth_rows = [r for r in rows if r.policy == TAILPILOT]
    if not variants or not truth_rows:
        return []
    totals = {p: [0, 0] for p in (TAILPILOT, *variants)}
    body = []
    for tp in truth_rows:
        goals, kept, n = _slo_cell(tp)
        totals[TAILPILOT][0] += kept
        totals[TAILPILOT][1] += n
        cells = [f"{goals}; {_scale_cell(tp, TAILPILOT)}"]
        for v in variants:
            row = keyed.get((tp.trace, tp.ts_s, v))
            if row is None:
                cells.append("not run")
                continue
            goals, kept, n = _slo_cell(row)
            totals[v][0] += kept
            totals[v][1] += n
            cost = (
                f"{row.metrics.replica_seconds / tp.metrics.replica_seconds:.2f}x"
                if tp.metrics.replica_seconds
                else "n/a"
            )
            cells.append(f"{goals}; {cost}; {_scale_cell(row, v)}")
        body.append(f"| {tp.trace} | {tp.ts_s:g} | " + " | ".join(cells) + " |")
    kept_line = "; ".join(f"{p}: {k} of {n}" for p, (k, n) in totals.items())
    return [
        "TailPilot handed a wrong profile while the simulator runs the true one (what each variant is, "
        f'and the definitions: [method.md]({method_href}), "Robustness to a wrong profile"). Each cell: '
        "TailPilot's SLO goals at that trace and Ts (the goal table's: kept, or missed with the figure); "
        "for a wrong profile, its replica-seconds over TailPilot's with the true profile; when the learned "
        "`service_scale` and `slope_scale` (observed over profiled compute time of a single request, and "
        "of each further item) settled, i.e. each stayed from then on within 10% of its median over the "
        "last half of the run; their final values, each with the true one (1 / factor for the scale of "
        "the uniform factors, 1 / slope factor for the slope).",
        "",
        f"SLO checks kept: {kept_line}.",
        "",
        "| trace | Ts (s) | tailpilot (true profile) | " + " | ".join(variants) + " |",
        "|---|---:|---|" + "---|" * len(variants),
        *body,
    ]


def _objective_cell(point: TradePoint) -> str:
    objective = CURVE_OBJECTIVES[point.policy]
    kept = "" if point.pct_requests >= objective else " (**missed**)"
    return f"{objective:g}: {point.pct_requests:.2f}% for {point.replica_seconds:.0f}{kept}"


def trade_table(rows: Sequence[Row], *, method_href: str = "method.md") -> list[str]:
    """Markdown lines: per trace and Ts, TailPilot's curve and the tuned baselines above it, by rule.

    Empty when the run has no TailPilot curve (fewer than two objectives) or no baseline.
    """
    body = []
    beaten = beyond = checked = 0
    for (trace, ts), group in curves.groups(rows).items():
        above = curves.points_above(group)
        if above is None:
            continue
        checked += 1
        beaten += bool(above.beating)
        beyond += bool(above.beyond) and not above.beating
        by_objective = sorted(above.curve, key=lambda p: CURVE_OBJECTIVES[p.policy])
        cells = "; ".join(_objective_cell(p) for p in by_objective)
        body.append(
            f"| {trace} | {ts:g} | {cells} | {curves.describe(above.beating) or 'none'} | "
            f"{curves.describe(above.beyond, most=1) or 'none'} |"
        )
    if not body:
        return []
    return [
        "Each policy at each of its settings is one point: replica-seconds paid, % of requests within "
        "the SLO. TailPilot's knob is its attainment objective (spec.slo.objectivePercent, "
        f"{', '.join(f'{o:g}' for o in sorted(CURVE_OBJECTIVES.values()))}%); its points, joined "
        "linearly in order of cost, are its curve. Every causal baseline runs at several settings of "
        f"its own knob ({', '.join(BASELINE_SETTINGS)}; what each is: [method.md]({method_href}), "
        '"Tuned baselines and TailPilot\'s curve"). A baseline point lies above the curve when, at its '
        "cost, the curve keeps less, or when it is cheaper than every TailPilot point and keeps at least "
        'as much as the cheapest ("at TailPilot\'s cost"); or when it is dearer than every TailPilot '
        'point and keeps more than the best ("dearer, keeping more": attainment no objective reached, '
        "for more money). Each objective cell: the objective, the attainment, the replica-seconds, and "
        "whether the attainment reached the objective (an objective of time, checked here on requests).",
        "",
        f"A baseline lies above the curve at {beaten + beyond} of {checked} trace and Ts pairs: at "
        f"{beaten} at TailPilot's cost or less, at {beyond} only dearer, keeping more.",
        "",
        "| trace | Ts (s) | TailPilot: objective: attainment for replica-s | above, at TailPilot's cost | "
        "above, dearer, keeping more |",
        "|---|---:|---|---|---|",
        *body,
    ]


def _warmup_line(setup: Setup) -> str:
    """How the causal policies' history before the scored trace was made."""
    if setup.warmup_s <= 0:
        return "- Warm-up: none (an arrival file has no process to draw a history from)."
    return (
        f"- Warm-up: every causal policy (the autoscalers and TailPilot) first serves {setup.warmup_s:g} s "
        "of the same arrival process, unscored: the end of another realization of the trace (another "
        "seed; for the Azure replays another thinning of the same hour), so that what a policy learns "
        "from history starts as a running service's would. The static fleets and the oracles run "
        "the scored trace alone. Every figure below covers the scored trace only."
    )


def markdown(
    result: SuiteResult,
    *,
    setup: Setup,
    command: str,
    commit: str,
    date: str,
    elapsed_s: float,
    plots: Sequence[str],
    trade_plots: Sequence[str] = (),
    method_href: str = "method.md",
) -> str:
    """docs/benchmarks/README.md (`method_href`: the link to method.md from where it is written)."""
    p = setup.profile
    b = result.baseline
    lines = [
        "# Benchmark: TailPilot's policy vs common autoscalers and an oracle",
        "",
        "Generated by `tailpilot.bench.run`; do not edit by hand "
        f"(method and limits: [method.md]({method_href})).",
        "",
        *provenance_lines(command=command, commit=commit, date=date, elapsed_s=elapsed_s),
        f"- Seed: {setup.seed}; trace length {setup.duration_s:g} s; start-up times Ts: "
        f"{', '.join(f'{t:g}' for t in setup.ts_values)} s",
        f"- Engine profile: `{p.engine_key}` ({p.hardware}), t(b) = {p.service_time.intercept_ms:g} + "
        f"{p.service_time.per_item_ms:g}*b ms, jitter CV {p.service_time.jitter_cv:g}, "
        f"max batch {p.max_batch_size}. "
        f"Method: {p.method}",
        f"- SLO: P99 <= {setup.slo_ms:g} ms. Reference fleet: {setup.ref_replicas} replicas = "
        f"{setup.capacity_rps:.1f} req/s within the SLO; every policy is bounded to "
        f"1..{setup.max_replicas} replicas. Every autoscaler starts from the realizable oracle's "
        "own first fleet at the same Ts, ready at t = 0 (the trace is a stretch of a running service).",
        _warmup_line(setup),
        f"- Baseline knobs: batching max {b.batching.max_batch_size}, "
        f"delay {b.batching.max_queue_delay_us} us; "
        f"KEDA queue target {b.queue_target():g}/replica; "
        f"KPA concurrency target {b.concurrency_target():g}/replica "
        "(each from a load test of one replica at 70% of its capacity). The main tables show each "
        "baseline at this default setting; every setting run is in results.csv and in "
        '"Attainment against cost" below.',
        "",
        "Columns: % of requests with latency <= SLO; % of 1-minute windows whose P99 <= SLO; "
        "replica-seconds paid (from the moment a replica is asked for); ratio to the realizable oracle "
        "at the same Ts; scale actions (changes of the replica target); flaps (direction reversals within "
        "5 min); recovery (s from the load step until P99 holds the SLO for a minute; inf = never; "
        "blank = no step); mean batch size.",
        "",
    ]
    if result.skipped:
        lines += ["Not run: " + "; ".join(result.skipped), ""]
    if result.errors:
        lines += ["Errors raised by policies during the run:", ""] + [f"- {e}" for e in result.errors] + [""]
    lines += ["## Traces", "", "| trace | requests | parameters |", "|---|---:|---|"]
    for name, params in result.trace_params.items():
        lines.append(f"| {name} | {result.trace_requests[name]} | {params} |")
    lines += ["", "## Results", ""]
    current = None
    for r in result.rows:
        if r.policy in TUNED_BASELINES:
            continue  # in results.csv and the attainment-cost section
        if r.trace != current:
            current = r.trace
            lines += [
                "",
                f"### {r.trace}",
                "",
                "| Ts (s) | policy | % req in SLO | % min in SLO | replica-s | x oracle | actions | flaps | "
                "recovery (s) | mean batch |",
                "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|",
            ]
        c = csv_record(r)
        name = f"**{r.policy}**" if r.policy == TAILPILOT else r.policy
        lines.append(
            f"| {c['ts_s']} | {name} | {c['pct_requests_in_slo']} | {c['pct_windows_in_slo']} | "
            f"{c['replica_seconds']} | {c['oracle_ratio']} | {c['scale_actions']} | {c['flaps']} | "
            f"{c['recovery_s']} | {c['mean_batch']} |"
        )
    goals = goal_table(result.rows)
    if goals:
        lines += ["", "## Goals at the operator's defaults (computed from the table)", "", *goals]
    trade = trade_table(result.rows, method_href=method_href)
    if trade:
        lines += ["", "## Attainment against cost (computed from the table)", "", *trade]
    robustness = robustness_table(result.rows, method_href=method_href)
    if robustness:
        lines += ["", "## Robustness to a wrong profile (computed from the table)", "", *robustness]
    findings = tailpilot_findings(result.rows)
    lines += ["", "## Where TailPilot's policy misses the SLO or is beaten (computed from the table)", ""]
    lines += [f"- {f}" for f in findings] if findings else ["- Nowhere in this run."]
    if plots:
        lines += ["", "## Plots", ""] + [f"![{name}]({name})" for name in plots]
    if trade_plots:
        lines += ["", "## Attainment against cost, plotted", ""] + [
            f"![{name}]({name})" for name in trade_plots
        ]
    return "\n".join(lines) + "\n"


def _saved(fig: Any, path: Path) -> str:
    """Lay `fig` out, write it to `path` (PNG, 80 dpi), close it; its file name."""
    import matplotlib.pyplot as plt

    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)
    return path.name


def plot_timelines(result: SuiteResult, *, setup: Setup, out_dir: Path, ts: float) -> list[str]:
    """One PNG per plotted trace: load, replicas, batch and P99 over time, one line per policy."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = []
    traces = sorted({k[0] for k in result.timelines})
    for trace in traces:
        series = {p: tl for (t, s, p), tl in result.timelines.items() if t == trace and s == ts}
        fig, axes = plt.subplots(4, 1, figsize=(11, 11), sharex=True)
        first = next(iter(series.values()))
        axes[0].plot(first.t_s / 60, first.load_rps, color="black", lw=0.8)
        axes[0].set_ylabel("load (req/s)")
        for policy, tl in series.items():
            style = {"lw": 2.0, "color": "crimson"} if policy == TAILPILOT else {"lw": 0.9}
            if policy.startswith("oracle"):
                style = {"lw": 1.2, "ls": "--"}
            axes[1].plot(tl.t_s / 60, tl.replicas, label=policy, **style)
            axes[2].plot(tl.t_s / 60, tl.mean_batch, label=policy, **style)
            axes[3].plot(tl.t_s / 60, tl.p99_ms, label=policy, **style)
        axes[1].set_ylabel("replicas (paid)")
        axes[2].set_ylabel("mean batch")
        axes[3].set_ylabel("P99 per 10 s (ms)")
        axes[3].set_yscale("log")
        axes[3].axhline(setup.slo_ms, color="grey", ls=":", lw=1)
        axes[3].set_xlabel("minutes")
        axes[1].legend(fontsize=7, ncol=3)
        fig.suptitle(f"{trace}, Ts = {ts:g} s, SLO {setup.slo_ms:g} ms")
        names.append(_saved(fig, out_dir / f"plot-{trace}-ts{ts:g}.png"))
    return names


#: Marker of each baseline family in the trade plots.
_FAMILY_MARKERS = {
    "hpa-util": "o",
    "keda-queue": "s",
    "knative-kpa": "^",
    "clipper-aimd+hpa": "D",
    "wva-saturation": "v",
}


def plot_trades(rows: Sequence[Row], *, traces: Sequence[str], out_dir: Path) -> list[str]:
    """One PNG per trace: per Ts, % of requests outside the SLO (log) against replica-seconds.

    TailPilot's curve is a line through its objectives; each baseline family a thinner line through
    its settings; the hindsight static-peak fleet and the realizable oracle are single points.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = []
    by_group = curves.groups(rows)
    for trace in traces:
        ts_values = [ts for (t, ts) in by_group if t == trace]
        if not ts_values or not any(curves.tailpilot_curve(by_group[(trace, ts)]) for ts in ts_values):
            continue
        fig, axes = plt.subplots(1, len(ts_values), figsize=(5.5 * len(ts_values), 5), squeeze=False)
        for ax, ts in zip(axes[0], ts_values, strict=True):
            group = by_group[(trace, ts)]

            def miss(p: TradePoint) -> float:
                return max(100.0 - p.pct_requests, 1e-3)  # log axis: 0 misses drawn at 0.001%

            curve = curves.tailpilot_curve(group)
            ax.plot(
                [p.replica_seconds for p in curve],
                [miss(p) for p in curve],
                "-o",
                color="crimson",
                lw=2,
                label="tailpilot (objectives)",
            )
            for p in curve:
                ax.annotate(f"{CURVE_OBJECTIVES[p.policy]:g}", (p.replica_seconds, miss(p)), fontsize=7)
            points = curves.baseline_points(group)
            for family, marker in _FAMILY_MARKERS.items():
                own = sorted(
                    (p for p in points if BASELINE_SETTINGS[p.policy].family == family),
                    key=lambda p: p.replica_seconds,
                )
                if own:
                    ax.plot(
                        [p.replica_seconds for p in own],
                        [miss(p) for p in own],
                        marker=marker,
                        lw=0.8,
                        label=family,
                    )
            for r in group:
                if r.policy in ("static-peak", "oracle-realizable"):
                    p = curves.point_of(r)
                    ax.plot([p.replica_seconds], [miss(p)], marker="*", ms=10, ls="none", label=r.policy)
            ax.set_yscale("log")
            ax.set_xlabel("replica-seconds")
            ax.set_ylabel("% of requests outside the SLO")
            ax.set_title(f"Ts = {ts:g} s")
            ax.grid(alpha=0.3)
        axes[0][0].legend(fontsize=7)
        fig.suptitle(f"{trace}: attainment against cost (lower left is better)")
        names.append(_saved(fig, out_dir / f"trade-{trace}.png"))
    return names
