"""The engine benchmark's page is written from its run's figures (a synthetic run here)."""

from __future__ import annotations

from typing import Any

from tailpilot.bench.engine import findings, page, validation_findings


def _run(noise: float) -> dict[str, Any]:
    rows = [
        {"engine": e, "batch": b, "p50_ms": p50, "p99_ms": p50 * 2, "throughput": thr, "requests": 100}
        for e, b, p50, thr in (
            ("naive", 1, 2.0, 400.0),
            ("naive", 16, 30.0, 500.0),
            ("int8", 1, 1.5, 500.0),
            ("int8", 16, 18.0, 850.0),
        )
    ]
    validation = [
        {
            "engine": "int8",
            "batch": b,
            "fit": {"interceptMs": 0.7, "perItemMs": 1.2, "jitterCv": 0.5},
            "predicted_throughput": 500.0,
            "profile_throughput": 500.0,
            "perf_throughput": 500.0 / (1 + err),
            "throughput_error": err,
            "profile_p99_ms": 3.0,
            "perf_p99_ms": 3.0,
            "p99_error": 0.0,
            "repeat_throughput_diff": noise,
            "repeat_p99_diff": 0.0,
        }
        for b, err in ((1, 0.05), (16, -0.2))
    ]
    return {
        "load_average_start": (0.5, 0, 0),
        "load_average_end": (1.5, 0, 0),
        "date": "2026-12-04 20:00 UTC",
        "duration_s_per_point": 2.5,
        "batch_sizes": [1, 16],
        "build_seconds": {"int8": 0.28, "naive": 0.0},
        "rows": rows,
        "validation": validation,
        "total_seconds": 80.0,
    }


def test_the_findings_name_the_fastest_engine_and_the_batching_gain_from_the_figures():
    lines = findings(_run(noise=0.02))
    assert lines[0].startswith(
        "At batch 1: the lowest p50 is int8's (1.50 ms), the most items/s int8's (500.0)"
    )
    assert "Throughput from batch 1 to batch 16: naive +25%, int8 +70%." in lines
    assert any("int8 0.28" in line and "naive: not built" in line for line in lines)


def test_the_validation_is_judged_only_when_perf_analyzer_agrees_with_itself():
    quiet = validation_findings(_run(noise=0.02))
    assert quiet[0].startswith(
        "Throughput predicted by the fit against perf_analyzer: 1 of 2 points within 10%"
    )
    assert "the errors above are the profile's" in quiet[-1]
    noisy = validation_findings(_run(noise=0.4))
    assert "cannot be judged on this machine" in noisy[-1] and "40.0%" in noisy[-1]


def test_the_page_names_its_run_and_holds_the_tables():
    text = page(
        _run(noise=0.02), command="python -P -m tailpilot.bench.engine", commit="abc", date="2026-12-04 20:00"
    )
    assert "- Commit: `abc`" in text and "Load average (1 min) 0.50 before the run and 1.50 after it" in text
    assert "| int8 | 0.28 | 16 | 18.00 | 36.00 | 850.0 |" in text
    assert "Fits: int8: t(b) = 0.70 + 1.20 b ms (jitter CV 0.50)." in text
