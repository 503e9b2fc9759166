"""The demo's client-side report: a table of the run and a PNG, from the rows it sampled (no cluster)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pytest

from tailpilot.bench.loadgen import LoadResult
from tailpilot_e2e import demo


def test_the_report_has_the_runs_figures_its_decisions_and_a_plot(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(demo, "OUT", tmp_path)
    rows = [
        demo.Row(t=0.0, phase="calm", rate=10.0, p99_ms=60.0, replicas=1, ready=1, batching="16/[]/0us",
                 max_batch=16, decision=""),
        demo.Row(t=2.0, phase="step x4", rate=40.0, p99_ms=450.0, replicas=2, ready=1, batching="16/[]/0us",
                 max_batch=16, decision="ScaleUp SLOAtRisk"),
    ]  # fmt: skip
    result = LoadResult()
    result.sent_s = result.scheduled_s = [0.0, 0.5, 1.0, 1.5]
    result.latency_s = [0.05, 0.1, 1.2 * demo.SLO_MS / 1000, 0.06]  # one request over the SLO
    result.status = [200, 200, 200, 200]
    status = {"engine": {"key": "abc", "tritonBackend": "python"}, "profile": {"points": []}}
    report = demo.write_client_report(rows, result, status).read_text()
    assert "| 4 | 4 | {} |" in report and "75.00%" in report  # 3 of 4 within the SLO
    assert "| 2.0 | step x4 | 40.0 | 450.0 | 1/2 | 16/[]/0us | ScaleUp SLOAtRisk |" in report
    assert (tmp_path / "client.png").stat().st_size > 10_000


def test_the_story_rises_past_one_replica_within_its_batches_then_steps_past_them() -> None:
    calm, rise, step, again, overload, close = demo.story(20.0, batch_gain=3.6, max_replicas=2)
    assert calm.rate_per_s == again.rate_per_s == close.rate_per_s < 20.0  # within one replica
    assert 20.0 < rise.rate_per_s < 2.6 * 20.0  # past single requests, within what batches serve
    assert step.rate_per_s > 2.6 * 20.0  # past one replica at the batching it forms under load
    assert step.rate_per_s < 2 * 2.6 * 20.0  # within the replicas the bound allows
    # Past every allowed replica at its largest batch: only a burn, and the alert, can follow.
    assert overload.rate_per_s > 2 * 3.6 * 20.0
    assert overload.seconds >= 60 and close.seconds >= 150  # 43 s of bad time, 2 m held, then delivery
    # Without a batching gain (a model bound on its compute) nothing is asked of batching.
    assert demo.story(20.0, batch_gain=1.0)[1].rate_per_s <= 0.6 * 20.0
    assert demo.batch_gain({"profile": {"points": [
        {"batchSize": 1, "throughputPerS": 18.0}, {"batchSize": 4, "throughputPerS": 66.0}
    ]}}) == 66.0 / 18.0  # fmt: skip
    assert demo.batch_gain({}) == 1.0


def test_the_story_names_each_part_from_the_events_of_the_load() -> None:
    started = 1_000_000.0
    at = lambda s: datetime.fromtimestamp(started + s, UTC)  # noqa: E731
    events = [
        demo.SeenEvent(at(-30), "Normal", "EngineBuilt", "engine ready"),  # before the load: not told
        demo.SeenEvent(at(86), "Normal", "SLOAtRisk", "ScaleUp: replicas 1->2"),
        demo.SeenEvent(at(190), "Normal", "OverProvisioned", "ScaleDown: replicas 2->1"),
        demo.SeenEvent(at(208), "Warning", "SLOAlertFiring", "TailPilotP99BurnFast (critical) fires"),
    ]
    rows = [
        demo.Row(t=40.0, phase="rise", rate=27.0, p99_ms=150.0, replicas=1, ready=1, batching="4/[2]/0us",
                 max_batch=4, decision="", executed_batch=1.34, time_in="Server"),
        demo.Row(t=250.0, phase="past maxReplicas", rate=170.0, p99_ms=3400.0, replicas=2, ready=2,
                 batching="4/[2]/0us", max_batch=4, decision="", executed_batch=3.9, time_in="Queue"),
    ]  # fmt: skip
    told = demo.tell_story(demo.story(20.0, 3.6), rows, events, load_started=started)
    assert "mean executed batch up to 1.34 at 27.0 req/s, on 1 replica(s)" in told
    assert "- step: replicas added: 86 s into the load: ScaleUp: replicas 1->2" in told
    assert "the operator went to maxReplicas and could add no more; client P99 up to 3400 ms" in told
    assert "- calm again: replicas removed: 190 s into the load: ScaleDown" in told
    assert "- the burn-rate alert reached the operator: 208 s into the load" in told
    assert "- the alert resolved: not within the run" in told
    assert "batching moved" not in told  # no Rebatch happened: not claimed


def test_the_trace_is_replayed_again_when_the_story_outlasts_it() -> None:
    phases = demo.story(20.0, batch_gain=3.6)
    total = sum(p.seconds for p in phases)
    arrivals = demo.trace_arrivals(phases)
    assert total > 400  # longer than the ~6 minutes of the compressed trace
    last = phases[-1]
    in_last = arrivals[arrivals >= total - last.seconds]
    assert in_last.max() > total - 10  # the last phase has arrivals to its end
    assert abs(in_last.size / last.seconds - last.rate_per_s) < 0.3 * last.rate_per_s
    assert np.all(np.diff(arrivals) >= 0)
