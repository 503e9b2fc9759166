"""The per-pod merge and the trace generators/readers."""

from __future__ import annotations

import numpy as np
import pytest

from tailpilot.bench.observe import PodWindow, merge_pod_windows, merged_quantile, pod_window
from tailpilot.bench.traces import (
    fit_mmpp2,
    gamma_renewal,
    peak_rate,
    read_arrivals,
    rescale,
)


def window(pod, lat_s, execs=1, pending=0):
    arr = np.zeros(len(lat_s))
    return pod_window(
        pod=pod, arrival_s=arr, start_s=arr, done_s=arr + np.asarray(lat_s), exec_count=execs, pending=pending
    )


def test_merged_p99_of_identical_pods_is_the_pods_p99_and_idle_pods_are_ignored():
    lat = np.linspace(0.01, 1.0, 1000)
    a, b = window("a", lat), window("b", lat)
    idle = PodWindow("c", 0, 0, 0, 0.0, 0.0, 0.0, 0, {})
    q = merged_quantile([a, b, idle], 0.99)
    assert q == pytest.approx(a.request_summary_us[0.99], rel=1e-6)


def test_merged_p99_weights_pods_by_requests():
    fast = window("fast", np.full(990, 0.01))
    slow = window("slow", np.full(10, 1.0))
    q = merged_quantile([fast, slow], 0.99)
    assert q is not None and q < 0.02e6  # 99% of all requests are fast


def test_observation_from_windows():
    obs = merge_pod_windows(
        [window("a", [0.1, 0.2], execs=1, pending=3), window("b", [0.3], execs=1, pending=1)],
        window_s=10.0,
        now_s=50.0,
        ready_replicas=2,
    )
    assert obs.request_rate == pytest.approx(0.3)
    assert obs.mean_batch_size == pytest.approx(1.5)
    assert obs.queue_depth_per_replica == pytest.approx(2.0)


@pytest.mark.parametrize("cv", [2.0, 4.0])
def test_gamma_renewal_has_the_asked_rate_and_cv(cv):
    arr = gamma_renewal(rate=50.0, cv=cv, duration_s=4000.0, rng=np.random.default_rng(1))
    gaps = np.diff(arr)
    assert arr.size / 4000.0 == pytest.approx(50.0, rel=0.1)
    assert gaps.std() / gaps.mean() == pytest.approx(cv, rel=0.15)


def test_reads_both_arrival_formats(tmp_path):
    plain = tmp_path / "a.txt"
    plain.write_text("# comment\n10.5\n10.0\n12.0\n")
    assert read_arrivals(plain).tolist() == [0.0, 0.5, 2.0]
    azure = tmp_path / "b.csv"
    azure.write_text(
        "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:03.9799600,1,1\n"
        "2023-11-16 18:17:05.0299600,1,1\n"
    )
    assert read_arrivals(azure).tolist() == pytest.approx([0.0, 1.05])


def test_rescale_multiplies_the_rate():
    rng = np.random.default_rng(2)
    arr = np.sort(rng.uniform(0, 600, 3000))
    up = rescale(arr, factor=2.5, rng=rng)
    down = rescale(arr, factor=0.4, rng=rng)
    assert up.size == pytest.approx(7500, rel=0.05)
    assert down.size == pytest.approx(1200, rel=0.1)
    assert peak_rate(up) == pytest.approx(2.5 * peak_rate(arr), rel=0.15)


def test_mmpp_fit_finds_the_two_rates():
    rng = np.random.default_rng(3)
    low = np.sort(rng.uniform(0, 1000, 2000))
    bursts = np.concatenate([np.sort(rng.uniform(s, s + 5, 250)) for s in range(50, 1000, 100)])
    fit = fit_mmpp2(np.sort(np.concatenate([low, bursts])))
    assert fit.rate_high == pytest.approx(52.0, rel=0.2)
    assert fit.rate_low == pytest.approx(2.0, rel=0.2)
    assert fit.mean_high_s == pytest.approx(5.0, rel=0.3)
