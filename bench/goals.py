"""The benchmark's goals for TailPilot at the operator's defaults, checked against a run's rows (pure).

- Steady and slowly varying traces (T1, T2 at both CVs, T3, T4, T7, T10's ramp): at least 99.5% of
  requests and 99% of 1-minute windows within the SLO, at every Ts.
- Bursty traces (T5, T6, T8, T9's flash crowds): at least 97% of requests within the SLO at Ts = 5 s.
- Recovery from T5's step and T6's spike within Ts + 30 s, at every Ts.
- Cost: at most 1.15x the realizable oracle's replica-seconds on T1 and T4; on every other trace no
  more than the hindsight static-peak fleet unless within 1.15x of the oracle.
- No causal baseline (HPA, KEDA, Knative, Clipper, WVA) at its default setting has at least
  TailPilot's share of requests within the SLO for no more replica-seconds, on any trace and Ts.
- No tuned baseline (each at every setting run) lies above TailPilot's attainment-cost curve (its
  points at its objectives joined linearly; `tailpilot.bench.curves`), on any trace and Ts.

Each check says what it measured; a goal that does not hold is printed as such, not left out.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from tailpilot.bench import curves
from tailpilot.bench.baselines import AUTOSCALERS
from tailpilot.bench.suite import TAILPILOT, Row

STEADY_TRACES = (
    "T1-poisson",
    "T2-gamma-cv2",
    "T2-gamma-cv4",
    "T3-mmpp2",
    "T4-diurnal",
    "T7-azure-conv",
    "T10-ramp",
)
BURSTY_TRACES = ("T5-step", "T6-spike", "T8-azure-code", "T9-flash-crowd")
RECOVERY_TRACES = ("T5-step", "T6-spike")
ORACLE_COST_TRACES = ("T1-poisson", "T4-diurnal")
MAX_ORACLE_RATIO = 1.15


@dataclass(frozen=True)
class GoalCheck:
    """One goal on one trace at one Ts: what was measured and whether it holds."""

    goal: str
    trace: str
    ts_s: float
    measured: str
    holds: bool


def _by_key(rows: Sequence[Row]) -> dict[tuple[str, float, str], Row]:
    return {(r.trace, r.ts_s, r.policy): r for r in rows}


def goal_checks(rows: Sequence[Row], *, policy: str = TAILPILOT) -> list[GoalCheck]:
    """Every goal that the run's rows can decide (traces or policies not run are left out).

    The goals are TailPilot's; `policy` checks another policy's rows against the same ones (the
    robustness runs, TailPilot handed a wrong profile).
    """
    keyed = _by_key(rows)
    by_group = curves.groups(rows)
    checks: list[GoalCheck] = []
    for row in rows:  # in the table's order of traces and Ts
        if row.policy != policy:
            continue
        checks += slo_checks(row)
        checks += _cost_checks(keyed, row)
        checks += _baseline_checks(keyed, row)
        if policy == TAILPILOT:
            checks += _curve_checks(by_group[(row.trace, row.ts_s)])
    return checks


def slo_checks(row: Row) -> list[GoalCheck]:
    """The SLO goals (requests and minutes within the SLO, recovery) that apply to one row's trace and Ts."""
    trace, ts, m = row.trace, row.ts_s, row.metrics
    checks: list[GoalCheck] = []
    if trace in STEADY_TRACES:
        checks.append(
            GoalCheck(
                "99.5% of requests and 99% of minutes",
                trace,
                ts,
                f"{m.pct_requests_in_slo:.3f}% / {m.pct_windows_in_slo:.2f}%",
                m.pct_requests_in_slo >= 99.5 and m.pct_windows_in_slo >= 99.0,
            )
        )
    if trace in BURSTY_TRACES and ts == 5.0:
        checks.append(
            GoalCheck(
                "97% of requests at Ts = 5 s",
                trace,
                ts,
                f"{m.pct_requests_in_slo:.3f}%",
                m.pct_requests_in_slo >= 97.0,
            )
        )
    if trace in RECOVERY_TRACES and m.recovery_s is not None:
        checks.append(
            GoalCheck(
                "recovery within Ts + 30 s",
                trace,
                ts,
                f"{m.recovery_s:g} s",
                m.recovery_s <= ts + 30.0,
            )
        )
    return checks


def _cost_checks(keyed: dict[tuple[str, float, str], Row], row: Row) -> list[GoalCheck]:
    if math.isnan(row.oracle_ratio):
        return []
    ratio = row.oracle_ratio
    if row.trace in ORACLE_COST_TRACES:
        return [
            GoalCheck(
                f"cost <= {MAX_ORACLE_RATIO}x the oracle",
                row.trace,
                row.ts_s,
                f"{ratio:.3f}x",
                ratio <= MAX_ORACLE_RATIO,
            )
        ]
    static = keyed.get((row.trace, row.ts_s, "static-peak"))
    if static is None:
        return []
    under = row.metrics.replica_seconds <= static.metrics.replica_seconds
    return [
        GoalCheck(
            f"cost <= static peak, or <= {MAX_ORACLE_RATIO}x the oracle",
            row.trace,
            row.ts_s,
            f"{row.metrics.replica_seconds:.0f} vs {static.metrics.replica_seconds:.0f} replica-s, "
            f"{ratio:.3f}x",
            under or ratio <= MAX_ORACLE_RATIO,
        )
    ]


def _baseline_checks(keyed: dict[tuple[str, float, str], Row], row: Row) -> list[GoalCheck]:
    m = row.metrics
    better = [
        name
        for name in AUTOSCALERS
        if (other := keyed.get((row.trace, row.ts_s, name))) is not None
        and other.metrics.pct_requests_in_slo >= m.pct_requests_in_slo
        and other.metrics.replica_seconds <= m.replica_seconds
    ]
    return [
        GoalCheck(
            "no causal baseline as good for no more",
            row.trace,
            row.ts_s,
            ", ".join(better) if better else "none",
            not better,
        )
    ]


def _curve_checks(group: Sequence[Row]) -> list[GoalCheck]:
    """Whether a tuned baseline lies above TailPilot's curve at one trace and Ts (no check without both)."""
    above = curves.points_above(group)
    if above is None:
        return []
    parts = []
    if above.beating:
        parts.append(f"at its cost: {curves.describe(above.beating, most=2)}")
    if above.beyond:
        parts.append(f"dearer, keeping more: {curves.describe(above.beyond, most=1)}")
    return [
        GoalCheck(
            "no tuned baseline above TailPilot's curve",
            group[0].trace,
            group[0].ts_s,
            "; ".join(parts) or "none",
            not above,
        )
    ]


def goal_table(rows: Sequence[Row]) -> list[str]:
    """Markdown lines: one row per goal and trace, a cell per Ts (the figure, and whether it holds)."""
    checks = goal_checks(rows)
    if not checks:
        return []
    ts_values = sorted({c.ts_s for c in checks})
    cells: dict[tuple[str, str], dict[float, GoalCheck]] = {}
    for check in checks:
        cells.setdefault((check.goal, check.trace), {})[check.ts_s] = check
    held = sum(c.holds for c in checks)
    lines = [
        f"{held} of {len(checks)} checks hold. Each cell: what was measured, then whether the goal holds.",
        "",
        "| goal | trace | " + " | ".join(f"Ts = {t:g} s" for t in ts_values) + " |",
        "|---|---|" + "---|" * len(ts_values),
    ]
    for (goal, trace), by_ts in cells.items():
        row = [
            f"{by_ts[t].measured} {'holds' if by_ts[t].holds else '**misses**'}" if t in by_ts else ""
            for t in ts_values
        ]
        lines.append(f"| {goal} | {trace} | " + " | ".join(row) + " |")
    return lines
