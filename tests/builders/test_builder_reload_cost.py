"""What a live reload costs the requests it overlaps, from (start, end) times of back-to-back requests."""

from __future__ import annotations

import pytest

from tailpilot.builders.reload_cost import served_share, worst_latency_during


def back_to_back(start: float, latencies: list[float]) -> list[tuple[float, float]]:
    out, t = [], start
    for latency in latencies:
        out.append((t, t + latency))
        t += latency
    return out


def test_a_reload_that_halves_the_throughput_keeps_half() -> None:
    # 0.1 s a request before; 0.2 s a request during the reload from 1.0 to 2.0 s.
    requests = back_to_back(0.0, [0.1] * 10 + [0.2] * 5 + [0.1] * 5)
    assert served_share(requests, reload_from=1.0, reload_to=2.0) == pytest.approx(0.5)
    assert worst_latency_during(requests, reload_from=1.0, reload_to=2.0, settle_s=0.5) == pytest.approx(
        200.0
    )


def test_a_request_stalled_across_the_whole_reload_counts_pro_rata() -> None:
    # One request waits 3 s, from 0.5 to 3.5 s, over a reload from 1.0 to 3.0 s.
    requests = back_to_back(0.0, [0.1] * 5 + [3.0] + [0.1] * 5)
    assert served_share(requests, reload_from=1.0, reload_to=3.0) == pytest.approx((2.0 / 3.0) / 2.0 / 10.0)
    assert worst_latency_during(requests, reload_from=1.0, reload_to=3.0, settle_s=0.5) == pytest.approx(
        3000.0
    )


def test_an_unaffected_reload_keeps_everything_and_slow_requests_outside_it_do_not_count() -> None:
    requests = back_to_back(0.0, [0.1] * 10 + [0.09] * 10 + [0.1] * 5 + [5.0])
    assert served_share(requests, reload_from=1.0, reload_to=1.9) == 1.0  # capped: a little faster
    assert worst_latency_during(requests, reload_from=1.0, reload_to=1.9, settle_s=0.5) == pytest.approx(
        100.0
    )


def test_nothing_before_the_reload_gives_no_share() -> None:
    assert served_share(back_to_back(1.0, [0.1] * 5), reload_from=1.0, reload_to=1.5) is None
    assert worst_latency_during([], reload_from=1.0, reload_to=1.5, settle_s=0.5) is None


def test_with_several_clients_the_share_is_of_their_combined_throughput() -> None:
    # Two clients, 0.1 s a request each before (20 requests/s together); during the reload from 1.0
    # to 2.0 s one client's request takes the whole second and the other keeps its pace: 11 of 20.
    stuck = back_to_back(0.0, [0.1] * 10 + [1.0] + [0.1] * 5)
    steady = back_to_back(0.0, [0.1] * 30)
    requests = sorted(stuck + steady)
    assert served_share(requests, reload_from=1.0, reload_to=2.0, clients=2) == pytest.approx(0.55)
    # Read as one client's stream, the same requests would look like no loss at all.
    assert served_share(requests, reload_from=1.0, reload_to=2.0) == 1.0


def test_reload_clients_fill_two_batches_within_bounds() -> None:
    from tailpilot.builders.profiler import reload_clients

    assert [reload_clients(b) for b in (0, 1, 4, 8, 64)] == [2, 2, 8, 16, 16]
