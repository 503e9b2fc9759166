"""The flash-crowd and ramp traces, and how an arrival file's length is chosen."""

from __future__ import annotations

import numpy as np
import pytest

from tailpilot.bench.run import trace_file_duration
from tailpilot.bench.traces import FLASH_FACTOR, FLASH_RISE_S, build_trace, flash_onsets, step_onsets


def per_10s(arrivals: np.ndarray, duration_s: float) -> np.ndarray:
    return np.histogram(arrivals, bins=np.arange(0.0, duration_s + 1, 10.0))[0] / 10.0


def test_a_flash_crowd_multiplies_the_rate_within_twenty_seconds_four_times_an_hour():
    trace = build_trace("T9-flash-crowd", capacity_rps=100.0, duration_s=3600.0, seed=1)
    rate = per_10s(trace.arrivals, 3600.0)
    base, peak = 90.0 / FLASH_FACTOR, 90.0
    assert np.median(rate) == pytest.approx(base, rel=0.2)
    onsets = flash_onsets(3600.0)
    assert len(onsets) == 4 and step_onsets("T9-flash-crowd", 3600.0) == onsets
    for onset in onsets:
        before = rate[int(onset // 10) - 3 : int(onset // 10)].mean()
        after = rate[int((onset + FLASH_RISE_S) // 10) : int((onset + FLASH_RISE_S) // 10) + 6].mean()
        assert before == pytest.approx(base, rel=0.35)
        assert after == pytest.approx(peak, rel=0.15)


def test_the_ramp_rises_and_falls_linearly_between_a_fifth_of_the_peak_and_the_peak():
    trace = build_trace("T10-ramp", capacity_rps=100.0, duration_s=3600.0, seed=1)
    per_minute = np.histogram(trace.arrivals, bins=np.arange(0.0, 3601.0, 60.0))[0] / 60.0
    assert per_minute[:10].mean() == pytest.approx(18.0, rel=0.1)
    assert per_minute[28:31].mean() == pytest.approx(88.0, rel=0.1)
    rising = per_minute[10:30]
    # Linear: the minute-to-minute steps are small and the fit is straight.
    slope, _ = np.polyfit(np.arange(rising.size), rising, 1)
    assert slope == pytest.approx((90.0 - 18.0) / 20, rel=0.15)
    assert step_onsets("T10-ramp", 3600.0) == []


def test_an_arrival_file_runs_its_own_length_unless_told_to_cut_or_pad_it():
    arrivals = np.array([0.5, 10.0, 99.2, 250.4])
    assert trace_file_duration(arrivals, given_s=None)[0] == 251.0
    cut, note = trace_file_duration(arrivals, given_s=100.0)
    assert cut == 100.0 and "cuts" in note and "3 of 4 requests" in note
    padded, note = trace_file_duration(arrivals, given_s=600.0)
    assert padded == 600.0 and "pads" in note and "349 s without arrivals" in note
