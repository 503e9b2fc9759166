"""The goal table: each goal decided from the run's rows, a miss shown as a miss."""

from __future__ import annotations

import math

from tailpilot.bench.goals import goal_checks, goal_table
from tailpilot.bench.metrics import RunMetrics
from tailpilot.bench.report import robustness_table
from tailpilot.bench.suite import TAILPILOT, TAILPILOT_OPTIMISTIC, TAILPILOT_PESSIMISTIC, TAILPILOT_SLOPE, Row


def row(
    trace: str,
    ts: float,
    policy: str,
    *,
    req: float,
    win: float = 100.0,
    rs: float = 1000.0,
    ratio: float = 1.0,
    recovery: float | None = None,
    settle: float | None = None,
    scale: float | None = None,
    slope: float | None = None,
) -> Row:
    metrics = RunMetrics(
        pct_requests_in_slo=req,
        pct_windows_in_slo=win,
        replica_seconds=rs,
        scale_actions=0,
        rebatches=0,
        flaps=0,
        recovery_s=recovery,
        mean_batch=1.0,
        settle_s=settle,
        final_scale=scale,
        final_slope=slope,
    )
    return Row(trace=trace, ts_s=ts, policy=policy, metrics=metrics, oracle_ratio=ratio)


def holds(checks, goal_start: str, trace: str, ts: float) -> bool:
    (check,) = [c for c in checks if c.goal.startswith(goal_start) and c.trace == trace and c.ts_s == ts]
    return check.holds


def test_each_goal_is_decided_from_the_figures():
    rows = [
        row("T1-poisson", 5.0, TAILPILOT, req=99.6, win=99.0, ratio=1.15),
        row("T1-poisson", 30.0, TAILPILOT, req=99.4, win=100.0, ratio=1.2),
        row("T5-step", 5.0, TAILPILOT, req=97.5, rs=900.0, ratio=1.5, recovery=35.0),
        row("T5-step", 30.0, TAILPILOT, req=95.0, rs=1200.0, ratio=1.3, recovery=61.0),
        row("T5-step", 5.0, "static-peak", req=100.0, rs=1000.0),
        row("T5-step", 30.0, "static-peak", req=100.0, rs=1000.0),
        row("T5-step", 30.0, "keda-queue", req=95.0, rs=1200.0),
    ]
    checks = goal_checks(rows)
    assert holds(checks, "99.5%", "T1-poisson", 5.0) and not holds(checks, "99.5%", "T1-poisson", 30.0)
    assert holds(checks, "cost <= 1.15x", "T1-poisson", 5.0) and not holds(
        checks, "cost <= 1.15x", "T1-poisson", 30.0
    )
    assert holds(checks, "97%", "T5-step", 5.0)
    assert not [c for c in checks if c.goal.startswith("97%") and c.ts_s == 30.0]  # only at Ts = 5 s
    assert holds(checks, "recovery", "T5-step", 5.0) and not holds(checks, "recovery", "T5-step", 30.0)
    # Cheaper than the static peak holds even above 1.15x the oracle; dearer and above does not.
    assert holds(checks, "cost <= static", "T5-step", 5.0) and not holds(
        checks, "cost <= static", "T5-step", 30.0
    )
    # KEDA matched TailPilot's requests for no more replica-seconds at Ts = 30 s.
    (dominated,) = [
        c for c in checks if c.goal.startswith("no causal") and c.ts_s == 30.0 and c.trace == "T5-step"
    ]
    assert not dominated.holds and dominated.measured == "keda-queue"
    table = "\n".join(goal_table(rows))
    assert "**misses**" in table and f"{sum(c.holds for c in checks)} of {len(checks)} checks hold" in table


def test_another_policys_rows_are_checked_against_tailpilots_goals():
    rows = [
        row("T1-poisson", 5.0, TAILPILOT, req=99.9),
        row("T1-poisson", 5.0, TAILPILOT_OPTIMISTIC, req=99.0),
    ]
    assert holds(goal_checks(rows), "99.5%", "T1-poisson", 5.0)
    checks = goal_checks(rows, policy=TAILPILOT_OPTIMISTIC)
    assert not holds(checks, "99.5%", "T1-poisson", 5.0)
    assert {c.measured for c in checks if c.goal.startswith("99.5%")} == {"99.000% / 100.00%"}


def test_the_robustness_table_puts_each_wrong_profile_beside_the_true_one():
    rows = [
        row("T1-poisson", 5.0, TAILPILOT, req=99.9, rs=1000.0, settle=0.0, scale=1.0),
        row("T1-poisson", 5.0, TAILPILOT_OPTIMISTIC, req=99.0, rs=800.0, settle=math.inf, scale=1.2),
        row("T1-poisson", 5.0, TAILPILOT_PESSIMISTIC, req=99.9, rs=1400.0, settle=120.0, scale=0.75),
        row("T1-poisson", 5.0, TAILPILOT_SLOPE, req=99.8, rs=1000.0, settle=45.0, scale=1.1, slope=1.96),
        row("T8-azure-code", 30.0, TAILPILOT, req=90.0, settle=0.0, scale=1.0),
        row("T8-azure-code", 30.0, TAILPILOT_OPTIMISTIC, req=80.0, settle=0.0, scale=1.43),
        row("T8-azure-code", 30.0, TAILPILOT_PESSIMISTIC, req=95.0, settle=0.0, scale=0.71),
        row("T8-azure-code", 30.0, TAILPILOT_SLOPE, req=91.0, settle=0.0, scale=1.0),
        row("T1-poisson", 5.0, "hpa-util70", req=100.0),
    ]
    lines = robustness_table(rows)
    body = [line for line in lines if line.startswith("| T")]
    assert len(body) == 2  # one per trace and Ts
    t1 = body[0].split(" | ")
    assert t1[2] == "kept; settled 0 s; scale 1.00 (true 1.00)"
    assert t1[3] == "**missed** (99.000% / 100.00%); 0.80x; never settled; scale 1.20 (true 1.43)"
    assert t1[4] == "kept; 1.40x; settled 120 s; scale 0.75 (true 0.71)"
    # The slope's truth is 1 / SLOPE_FACTOR (t(1) kept, so the scale's is 1); a run that did not
    # record the slope shows the scale alone.
    assert t1[5].startswith("kept; 1.00x; settled 45 s; scale 1.10 (true 1.00), slope 1.96 (true 2.00) |")
    assert "no SLO goal" in body[1]  # T8 has an SLO goal at Ts = 5 s only
    summary = next(line for line in lines if line.startswith("SLO checks kept"))
    assert "tailpilot: 1 of 1" in summary and f"{TAILPILOT_OPTIMISTIC}: 0 of 1" in summary
    # Without wrong-profile rows (or without TailPilot's), there is no table.
    assert robustness_table([r for r in rows if r.policy in (TAILPILOT, "hpa-util70")]) == []
    assert robustness_table([r for r in rows if r.policy != TAILPILOT]) == []
