"""The demo's client-side report: a table of the run and a PNG, from the rows it sampled (no cluster)."""

from __future__ import annotations

from pathlib import Path

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
