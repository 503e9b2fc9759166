"""TailPilot's attainment-cost curve against tuned baselines: the three rules, the goal, the table."""

from __future__ import annotations

import pytest

from tailpilot.api.autoscaling import BatchingConfig
from tailpilot.bench import curves, quotes
from tailpilot.bench.baselines import (
    AUTOSCALERS,
    BASELINE_SETTINGS,
    TUNED_BASELINES,
    BaselineParams,
    LoadTest,
)
from tailpilot.bench.curves import TradePoint, above_curve, attainment_at
from tailpilot.bench.engine_profiles import DEFAULT_PROFILE, load_profile
from tailpilot.bench.goals import goal_checks
from tailpilot.bench.report import markdown, trade_table
from tailpilot.bench.suite import TAILPILOT, Setup, SuiteResult, policy_names

from .test_goals import row

CURVE = [
    TradePoint("tailpilot-objective-95", 1000.0, 95.0),
    TradePoint(TAILPILOT, 1200.0, 99.0),
    TradePoint("tailpilot-objective-99.9", 1600.0, 99.9),
]


def test_the_curve_is_interpolated_linearly_within_its_span():
    assert attainment_at(CURVE, 1100.0) == pytest.approx(97.0)
    assert attainment_at(CURVE, 1400.0) == pytest.approx(99.45)
    assert attainment_at(CURVE, 1200.0) == pytest.approx(99.0)
    assert attainment_at(CURVE, 999.0) is None and attainment_at(CURVE, 1601.0) is None


@pytest.mark.parametrize(
    ("cost", "kept", "above"),
    [
        (1100.0, 97.5, True),  # within the span, above the line
        (1100.0, 96.5, False),  # within the span, below it
        (1400.0, 99.45, False),  # on the line is not above it
        (900.0, 95.0, True),  # cheaper than every point, keeps as much as the cheapest
        (900.0, 94.9, False),  # cheaper and keeps less
        (1700.0, 99.95, True),  # dearer than every point, keeps more than the best
        (1700.0, 99.9, False),  # dearer, keeps no more
    ],
)
def test_a_point_is_above_the_curve_by_the_three_rules(cost, kept, above):
    assert above_curve(CURVE, TradePoint("hpa-util50", cost, kept)) is above


def test_a_higher_objective_that_cost_less_does_not_lower_the_curve():
    # 99.9 happened to cost less than 99.5 and keep more: the curve at a cost is its best segment.
    curve = [
        TradePoint("tailpilot-objective-95", 1000.0, 95.0),
        TradePoint("tailpilot-objective-99.9", 1200.0, 99.9),
        TradePoint("tailpilot-objective-99.5", 1200.0, 99.5),
    ]
    curve = sorted(curve, key=lambda p: (p.replica_seconds, p.pct_requests))
    assert attainment_at(curve, 1200.0) == pytest.approx(99.9)
    assert not above_curve(curve, TradePoint("keda-queue", 1200.0, 99.8))


def test_every_setting_runs_and_the_main_tables_keep_the_defaults():
    names = policy_names(with_tailpilot=True)
    assert set(BASELINE_SETTINGS) <= set(names)
    assert list(AUTOSCALERS) == [
        "hpa-util70",
        "keda-queue",
        "knative-kpa",
        "clipper-aimd+hpa",
        "wva-saturation",
    ]
    families = {s.family for s in BASELINE_SETTINGS.values()}
    for family in families:  # several settings of every causal baseline, exactly one the default
        settings = [s for s in BASELINE_SETTINGS.values() if s.family == family]
        assert len(settings) >= 3 and sum(s.default for s in settings) == 1
    assert not set(TUNED_BASELINES) & set(AUTOSCALERS)


def _group(trace: str, ts: float, *, tuned_kept: float, tuned_cost: float):
    return [
        row(trace, ts, "tailpilot-objective-95", req=95.0, rs=1000.0),
        row(trace, ts, TAILPILOT, req=99.0, rs=1200.0),
        row(trace, ts, "tailpilot-objective-99.9", req=99.9, rs=1600.0),
        row(trace, ts, "static-peak", req=100.0, rs=3000.0),
        row(trace, ts, "hpa-util70", req=98.0, rs=1300.0),
        row(trace, ts, "hpa-util90", req=tuned_kept, rs=tuned_cost),
    ]


def test_the_goal_names_the_tuned_baseline_above_the_curve():
    rows = [
        *_group("T9-flash-crowd", 30.0, tuned_kept=97.5, tuned_cost=1100.0),
        *_group("T9-flash-crowd", 90.0, tuned_kept=96.0, tuned_cost=1100.0),
    ]
    checks = [c for c in goal_checks(rows) if c.goal.startswith("no tuned baseline")]
    by_ts = {c.ts_s: c for c in checks}
    assert not by_ts[30.0].holds and by_ts[30.0].measured == "at its cost: hpa-util90: 97.50% for 1100"
    assert by_ts[90.0].holds and by_ts[90.0].measured == "none"
    # The robustness runs are not checked against the objectives' curve.
    assert not [
        c for c in goal_checks(rows, policy="tailpilot-objective-95") if c.goal.startswith("no tuned")
    ]


def test_the_trade_table_counts_the_pairs_by_rule_and_marks_missed_objectives():
    rows = [
        *_group("T9-flash-crowd", 30.0, tuned_kept=97.5, tuned_cost=1100.0),
        *_group("T8-azure-code", 30.0, tuned_kept=90.0, tuned_cost=1100.0),
        *_group("T1-poisson", 30.0, tuned_kept=99.95, tuned_cost=5000.0),
    ]
    lines = trade_table(rows)
    assert (
        "A baseline lies above the curve at 2 of 3 trace and Ts pairs: at 1 at TailPilot's cost or less, "
        "at 1 only dearer, keeping more." in lines
    )
    (t9,) = [line for line in lines if line.startswith("| T9-flash-crowd | 30 |")]
    assert t9.endswith("| hpa-util90: 97.50% for 1100 | none |") and "99: 99.00% for 1200 |" not in t9
    assert "99: 99.00% for 1200;" in t9
    (t1,) = [line for line in lines if line.startswith("| T1-poisson | 30 |")]
    assert t1.endswith("| none | hpa-util90: 99.95% for 5000 |")
    (t8,) = [line for line in lines if line.startswith("| T8-azure-code | 30 |")]
    assert t8.endswith("| none | none |")
    missed = [
        row("T8-azure-code", 5.0, "tailpilot-objective-95", req=94.0, rs=1000.0),
        row("T8-azure-code", 5.0, TAILPILOT, req=98.0, rs=1200.0),
        row("T8-azure-code", 5.0, "keda-queue", req=90.0, rs=1100.0),
    ]
    (t8_5,) = [line for line in trade_table(missed) if line.startswith("| T8-azure-code | 5 |")]
    assert "99: 98.00% for 1200 (**missed**)" in t8_5 and "95: 94.00% for 1000 (**missed**)" in t8_5


def test_tuned_settings_are_in_the_trade_section_not_the_main_tables():
    rows = _group("T9-flash-crowd", 30.0, tuned_kept=97.5, tuned_cost=1100.0)
    params = BaselineParams(
        slo_ms=1000.0,
        batching=BatchingConfig(max_batch_size=8),
        initial_replicas=2,
        min_replicas=1,
        max_replicas=32,
        profile_max_batch=16,
        load_tests=(LoadTest(0.7, 2.0, 3.0),),
    )
    result = SuiteResult(rows=rows, trace_params={}, trace_requests={}, baseline=params)
    setup = Setup(profile=load_profile(DEFAULT_PROFILE), slo_ms=1000.0)
    page = markdown(result, setup=setup, command="bench", commit="abc", date="now", elapsed_s=1.0, plots=())
    main = page.split("## Results")[1].split("## Goals")[0]
    trade = page.split("## Attainment against cost")[1]
    assert "| hpa-util70 |" in main and "hpa-util90" not in main
    assert "hpa-util90: 97.50% for 1100" in trade
    assert "KEDA queue target 2/replica; KPA concurrency target 3/replica" in page


def test_groups_keep_the_table_order():
    rows = [row("T1-poisson", 5.0, TAILPILOT, req=99.0), row("T1-poisson", 30.0, TAILPILOT, req=99.0)]
    assert list(curves.groups(rows)) == [("T1-poisson", 5.0), ("T1-poisson", 30.0)]


def test_the_quote_lists_the_pairs_with_a_point_above(tmp_path):
    rows = [
        *_group("T9-flash-crowd", 30.0, tuned_kept=97.5, tuned_cost=1100.0),
        *_group("T8-azure-code", 30.0, tuned_kept=90.0, tuned_cost=1100.0),
    ]
    pages = tmp_path / "docs" / "benchmarks"
    pages.mkdir(parents=True)
    (pages / "README.md").write_text("## Attainment against cost\n\n" + "\n".join(trade_table(rows)) + "\n")
    quote = quotes.tuned_baselines(tmp_path)
    assert "above TailPilot's curve at 1 of 2 trace and Ts pairs; at 1 it keeps more" in quote
    assert "- T9-flash-crowd, Ts = 30 s: hpa-util90: 97.50% for 1100\n" in quote
    assert "T8-azure-code" not in quote
