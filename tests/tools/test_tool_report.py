"""`tailpilot report`: its queries, its figures and its Markdown (pure), and its PNG's series."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from tailpilot.cli import SUBCOMMANDS
from tailpilot.controllers.signals.observe import Selector
from tailpilot.tools.report import (
    PARTS,
    ReportData,
    decisions_within,
    render_markdown,
    series_queries,
    summarize,
    write_report,
)
from tailpilot.tools.report_plot import COLOURS

NAN = math.nan


def data() -> ReportData:
    times = [1000.0 + 10 * i for i in range(6)]
    series = {
        "rate_per_s": [10.0, 10.0, 40.0, 40.0, 40.0, NAN],
        "failures_per_s": [0.0, 0.0, 0.1, 0.0, 0.0, NAN],
        "p99_ms": [20.0, 22.0, 80.0, 45.0, 30.0, NAN],
        "replicas": [1.0, 1.0, 1.0, 2.0, 2.0, NAN],
        "mean_batch": [1.0, 1.0, 3.0, 2.0, 2.0, NAN],
        "queue_ms": [1.0, 1.0, 30.0, 6.0, 4.0, NAN],
        "compute_input_ms": [2.0] * 5 + [NAN],
        "compute_infer_ms": [5.0, 5.0, 8.0, 7.0, 7.0, NAN],
        "compute_output_ms": [1.0] * 5 + [NAN],
        "alerts_firing": [NAN, NAN, 1.0, 2.0, NAN, NAN],
    }
    return ReportData(
        namespace="shop",
        name="resnet",
        slo_ms=50.0,
        start_s=1000.0,
        end_s=1050.0,
        step_s=10.0,
        times_s=times,
        series=series,
        decisions=[
            {
                "time": "1970-01-01T00:16:58Z",
                "at": 1018.0,
                "action": "ScaleUp",
                "reason": "SLOAtRisk",
                "replicasBefore": 1,
                "replicasAfter": 2,
                "maxBatchSizeBefore": 16,
                "maxBatchSizeAfter": 16,
                "requestRate": 39.5,
                "observedP99Ms": 80.0,
                "predictedP99Ms": 30.1,
            }
        ],
    )


def test_one_query_per_series_over_the_services_labelled_series() -> None:
    queries = series_queries(Selector(namespace="shop", service="resnet"), rate_window_s=30)
    assert set(queries) == {
        "rate_per_s",
        "failures_per_s",
        "p99_ms",
        "replicas",
        "mean_batch",
        "alerts_firing",
    } | {f"{p}_ms" for p in PARTS}
    assert queries["rate_per_s"] == (
        'sum(rate(nv_inference_request_success{namespace="shop",inferenceservice="resnet"}[30s]))'
    )
    assert 'quantile="0.99"' in queries["p99_ms"] and queries["p99_ms"].startswith("max(")
    assert "nv_inference_queue_duration_us" in queries["queue_ms"] and "/ 1000" in queries["queue_ms"]
    # The burn-rate alerts keep the service's labels (manifests.prometheus_rule): counted by them.
    assert queries["alerts_firing"] == (
        'count(ALERTS{namespace="shop",inferenceservice="resnet",alertstate="firing"})'
    )


def test_the_periods_figures_weight_the_breakdown_by_rate_and_name_the_dominant_part() -> None:
    summary = summarize(data())
    assert summary.within_slo_share == 4 / 5
    assert (summary.p99_max_ms, summary.rate_peak_per_s, summary.replicas_max) == (80.0, 40.0, 2.0)
    # Rate-weighted: (10*1 + 10*1 + 40*30 + 40*6 + 40*4) / 140.
    assert math.isclose(summary.parts_ms["queue"], 1620 / 140)
    assert summary.dominant == "queue"  # 11.6 ms of queue against 10.0 ms of compute
    assert math.isclose(summary.failures, 1.0)
    # Alerts fired at two of six points (absent means none), first at t = 1020 s.
    assert (summary.alert_share, summary.first_alert_s) == (2 / 6, 1020.0)


def test_the_markdown_has_the_figures_and_the_decisions() -> None:
    text = render_markdown(data(), summarize(data()))
    assert text.startswith("# TailPilot report: resnet in shop")
    assert "| P99 within the SLO | 80.0% of the points |" in text
    assert "| dominated by | queue |" in text
    assert "| 00:16:58 | ScaleUp | SLOAtRisk | 1 -> 2 | 16 -> 16 | 39.5 | 80.0 / 30.1 |" in text
    assert "![resnet](report.png)" in text
    assert "| SLO alerts firing | 33.3% of the points, first at 00:17:00 |" in text
    quiet = data()
    quiet.series["alerts_firing"] = [NAN] * 6
    assert "| SLO alerts firing | never |" in render_markdown(quiet, summarize(quiet))


def test_the_report_says_the_objective_its_budget_and_the_headroom_from_the_status() -> None:
    from unittest import mock

    from tailpilot.tools import report as module

    status = {
        "errorBudget": {
            "objectivePercent": 99.0,
            "compliancePeriodHours": 168,
            "measuredSeconds": 7200,
            "missedSeconds": 36,
            "remainingPercent": 50.0,
        },
        "learned": {"headroom": 1.8},
    }
    obj = {"metadata": {"name": "resnet", "namespace": "shop"}, "spec": {"slo": {"p99LatencyMs": 50}}}
    with mock.patch.object(module, "fetch_series", return_value=([1000.0], {})):
        fresh = module.build_report({**obj, "status": {}}, "http://prom", start_s=1000, end_s=1010, step_s=10)
        held = module.build_report(
            {**obj, "status": status}, "http://prom", start_s=1000, end_s=1010, step_s=10
        )
    assert "| attainment and headroom now | no decision recorded yet |" in render_markdown(
        fresh, summarize(data())
    )
    text = render_markdown(held, summarize(data()))
    assert (
        "| attainment and headroom now | objective 99.00% over 168 h: 99.50% met in 2.0 h measured, "
        "50.0% of the budget left; headroom x1.80 over the arrivals |"
    ) in text
    assert held.to_json()["budgetNow"] == held.budget_now


def test_decisions_are_those_of_the_period() -> None:
    # Each with the fields the operator writes (a decision without them is not read), and one whose
    # time is not a time: left out, the others kept.
    done = {
        "reason": "SLOAtRisk",
        "replicasBefore": 1,
        "replicasAfter": 2,
        "maxBatchSizeBefore": 8,
        "maxBatchSizeAfter": 8,
    }
    status = {
        "decisions": [
            {"time": "2026-12-02T07:00:00Z", "action": "ScaleUp", **done},
            {"time": "2026-12-02T08:00:00Z", "action": "ScaleDown", **done},
            {"time": "not a time", "action": "Odd", **done},
        ]
    }
    start = 1_796_194_800.0  # 2026-12-02 07:00:00 UTC
    assert [d["action"] for d in decisions_within(status, start - 1, start + 60)] == ["ScaleUp"]


def colour_pixels(png: Path, colour: str) -> int:
    """Pixels of the PNG within a small distance of `colour` (#rrggbb)."""
    import matplotlib.image

    image = matplotlib.image.imread(png)[..., :3]
    rgb = np.array([int(colour[i : i + 2], 16) / 255 for i in (1, 3, 5)])
    return int((np.abs(image - rgb).max(axis=-1) < 0.03).sum())


def test_the_png_draws_every_series_in_its_colour(tmp_path: Path) -> None:
    write_report(data(), tmp_path / "full")
    empty = data()
    empty.series = {k: [NAN] * 6 for k in empty.series}
    write_report(empty, tmp_path / "empty")
    for series, colour in COLOURS.items():
        drawn = colour_pixels(tmp_path / "full" / "report.png", colour)
        legend_only = colour_pixels(tmp_path / "empty" / "report.png", colour)
        if series == "slo":
            assert drawn > 500 and legend_only > 500  # the SLO line is drawn without data too
        else:
            assert drawn > legend_only + 200, (series, drawn, legend_only)
    assert (tmp_path / "empty" / "report.json").read_text().count("null") >= 10 * 6


def test_report_is_a_subcommand() -> None:
    assert SUBCOMMANDS["report"][:2] == ("tailpilot.tools.report", "report_main")


def test_range_answers_are_matched_to_the_time_axis_by_step() -> None:
    from tailpilot.tools.report import _align

    times = [100.1234567, 105.1234567, 110.1234567]
    # Prometheus answers with millisecond timestamps, and leaves out steps without data.
    points = {"": {100.123: 1.0, 110.123: 3.0}}
    assert _align(points, times, 5.0)[::2] == [1.0, 3.0]
    assert math.isnan(_align(points, times, 5.0)[1])
    assert all(math.isnan(v) for v in _align({}, times, 5.0))


DECISION = {
    "time": "1970-01-01T00:16:58Z",
    "action": "ScaleUp",
    "reason": "SLOAtRisk",
    "replicasBefore": 1,
    "replicasAfter": 2,
    "maxBatchSizeBefore": 16,
    "maxBatchSizeAfter": 16,
    "requestRate": 40,
    "observedP99Ms": 80.5,
}


def test_the_report_says_what_of_the_status_it_could_not_read() -> None:
    from unittest import mock

    from tailpilot.tools import report as module

    status = {
        "errorBudget": {"objectivePercent": 99.0},  # its other required fields missing
        "decisions": [DECISION, {**DECISION, "time": "yesterday"}],
    }
    obj = {"metadata": {"name": "resnet", "namespace": "shop"}, "spec": {"slo": {"p99LatencyMs": 50}}}
    with mock.patch.object(module, "fetch_series", return_value=([1000.0], {})):
        held = module.build_report({**obj, "status": status}, "http://p", start_s=1000, end_s=1020, step_s=10)
    assert held.unreadable == ("status.errorBudget", "status.decisions[1]")
    assert held.budget_now == "status.errorBudget could not be read"
    text = render_markdown(held, summarize(data()))
    assert "| attainment and headroom now | status.errorBudget could not be read |" in text
    assert (
        "| could not be read | status.errorBudget, status.decisions[1] "
        "(not in the form this tailpilot reads) |"
    ) in text
    assert "| 00:16:58 | ScaleUp | SLOAtRisk | 1 -> 2 | 16 -> 16 | 40 | 80.5 / - |" in text
    assert held.to_json()["unreadable"] == ["status.errorBudget", "status.decisions[1]"]
    assert "unreadable" not in data().to_json()  # report.json as before when all was read


def test_a_decision_is_read_typed_and_held_as_the_api_server_returns_it() -> None:
    from tailpilot.api.v1alpha1 import DecisionRecordStatus, InferenceServiceStatus
    from tailpilot.tools.report import decision_json

    typed = InferenceServiceStatus(decisions=[DecisionRecordStatus.model_validate(DECISION)])
    assert isinstance(typed.decisions[0].request_rate, float)  # 40 in JSON is 40.0 once read
    (held,) = decisions_within(typed, 1000, 1020)
    # ...and 40 again in the report, as the status's JSON has it (keys sorted, as the API server's).
    assert held == {**DECISION, "at": 1018.0}
    assert list(held) == [*sorted(DECISION), "at"]
    # Every field of a decision is carried (a field added to the API must be added to the report).
    full = DecisionRecordStatus.model_validate(
        {**DECISION, "predictedP99Ms": 30.1, "gpuProduct": "NVIDIA-L4"}
    )
    assert set(decision_json(full)) == {f.alias for f in DecisionRecordStatus.model_fields.values()}


def test_the_report_shows_the_last_cold_start_in_its_parts() -> None:
    from unittest import mock

    from tailpilot.tools import report as module
    from tests.tools.test_tool_status_view import COLD_START

    obj = {"metadata": {"name": "resnet", "namespace": "shop"}, "spec": {"slo": {"p99LatencyMs": 50}}}
    with mock.patch.object(module, "fetch_series", return_value=([1000.0], {})):
        woken = module.build_report(
            {**obj, "status": {"coldStart": COLD_START}}, "http://p", start_s=1000, end_s=1010, step_s=10
        )
        broken = module.build_report(
            {**obj, "status": {"coldStart": {"heldAt": "soon"}}},
            "http://p",
            start_s=1000,
            end_s=1010,
            step_s=10,
        )
    text = render_markdown(woken, summarize(data()))
    assert (
        "## Last cold start\n\n44.620 s from the first request held (2026-12-06 05:31:30.123 UTC) to its "
        "answer; pod resnet-7d9-abc."
    ) in text
    assert "| engineFetch | 8.000 | 17.9% |" in text
    assert "| serverStartAndModelLoad | 22.000 | 49.3% |" in text
    assert "| total | 44.620 | 100% |" in text
    assert text.index("## Last cold start") < text.index("## Decisions in the period")
    assert woken.to_json()["coldStart"] == {
        **COLD_START,
        "heldAt": "2026-12-06T05:31:30.123000Z",
        "answeredAt": "2026-12-06T05:32:14.743000Z",
    }
    assert "## Last cold start" not in render_markdown(data(), summarize(data()))
    assert data().to_json()["coldStart"] is None
    assert broken.unreadable == ("status.coldStart",)
