"""The batching-capacity benchmark measures what it says: the edge of the SLO, found by bisection."""

from __future__ import annotations

import pytest

from tailpilot.api.autoscaling import BatchingConfig
from tailpilot.bench.batching_capacity import (
    ADAPTIVE,
    QUICK_CASES,
    STATIC,
    Candidate,
    capacity,
    main,
    run_at,
    static_grid,
    unit_arrivals,
)
from tailpilot.bench.engine_profiles import scaled_variant

CASE = QUICK_CASES[0]


def test_the_static_grid_covers_every_power_of_two_batch_and_four_delays():
    grid = static_grid(scaled_variant("gpu-small-like"), slo_ms=20.0)
    assert sorted({b.max_batch_size for b in grid}) == [1, 2, 4, 8, 16, 32, 64]
    assert sorted({b.max_queue_delay_us for b in grid}) == [0, 500, 1000, 2000]
    assert len(grid) == 28


def test_a_capacity_is_the_edge_of_the_slo():
    candidate = Candidate(STATIC, BatchingConfig(max_batch_size=8, max_queue_delay_us=0))
    measured = capacity(CASE, candidate)
    unit = unit_arrivals(CASE, 100.0)
    within, _, _ = run_at(CASE, candidate, measured.capacity_per_s, unit)
    beyond, _, _ = run_at(CASE, candidate, measured.missed_at_per_s, unit)
    assert within <= CASE.slo_ms < beyond
    assert measured.missed_at_per_s - measured.capacity_per_s <= 0.005 * 8000 / 340
    assert measured.p99_at_capacity_ms == pytest.approx(within)


def test_batching_raises_capacity_and_the_policy_finds_it_from_no_batching():
    no_batching = capacity(CASE, Candidate(STATIC, BatchingConfig(max_batch_size=1, max_queue_delay_us=0)))
    adaptive = capacity(CASE, Candidate(ADAPTIVE, BatchingConfig(max_batch_size=1, max_queue_delay_us=0)))
    # One request at a time runs at 1000/130 req/s at most; batches of 16 at 16000/580.
    assert no_batching.capacity_per_s < 1000 / 130
    assert adaptive.capacity_per_s > 2.5 * no_batching.capacity_per_s
    assert adaptive.final_batching.max_batch_size > 1 and adaptive.reloads_at_capacity >= 1


def test_the_command_prints_and_writes_the_table(tmp_path, capsys):
    out = tmp_path / "batching-capacity.md"
    assert main(["--quick", "--jobs", "1", "--out", str(out)]) == 0
    assert "| gpu-large-like | 880 | 1 |" in capsys.readouterr().out
    text = out.read_text()
    assert "TailPilot from max batch 1, delay 0 us" in text and "- Commit: `" in text
