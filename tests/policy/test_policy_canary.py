"""The canary's verdict from both sides' readings (pure)."""

from __future__ import annotations

import pytest

from tailpilot.policy.canary import (
    CanaryCriteria,
    TrackReading,
    Verdict,
    canary_replicas,
    judge_canary,
)

CRITERIA = CanaryCriteria(
    analysis_s=120.0,
    min_requests=200,
    max_latency_regression_percent=20.0,
    max_error_rate_percent=1.0,
    slo_p99_ms=50.0,
)


def side(
    p99_ms: float | None, requests: float = 1000.0, failures: float = 0.0, pods: int = 1
) -> TrackReading:
    return TrackReading(pods=pods, requests=requests, failures=failures, p99_ms=p99_ms)


def judge(stable: TrackReading, candidate: TrackReading, elapsed_s: float = 130.0) -> tuple[Verdict, str]:
    judgement = judge_canary(stable=stable, candidate=candidate, elapsed_s=elapsed_s, criteria=CRITERIA)
    return judgement.verdict, judgement.reason


@pytest.mark.parametrize(
    ("stable", "traffic", "expected"),
    [(1, 20, 1), (1, 50, 1), (4, 20, 1), (8, 20, 2), (10, 50, 10), (3, 1, 1), (0, 20, 1)],
)
def test_canary_replicas_make_the_share_by_replica_count(stable: int, traffic: int, expected: int) -> None:
    assert canary_replicas(stable, traffic) == expected


def test_a_canary_as_fast_as_the_stable_replicas_is_promoted_once_the_window_is_over() -> None:
    assert judge(side(10.0), side(11.0), elapsed_s=60.0) == (Verdict.CONTINUE, "Analysing")
    assert judge(side(10.0), side(11.0)) == (Verdict.PROMOTE, "CanaryHeldUp")
    assert judge(side(10.0), side(6.0))[0] is Verdict.PROMOTE  # faster


def test_a_slower_canary_is_rolled_back_beyond_the_budget_and_the_noise_floor() -> None:
    assert judge(side(10.0), side(13.0)) == (Verdict.ROLL_BACK, "CanaryLatencyRegression")
    # 50% more but 1 ms: within 5% of the 50 ms SLO, noise.
    assert judge(side(2.0), side(3.0))[0] is Verdict.PROMOTE
    assert judge(side(2.0), side(4.6))[0] is Verdict.ROLL_BACK
    verdict = judge_canary(stable=side(10.0), candidate=side(13.0), elapsed_s=130.0, criteria=CRITERIA)
    assert "30% above" in verdict.message and "13.0 ms" in verdict.message and "10.0 ms" in verdict.message


def test_a_canary_breaking_the_slo_the_stable_replicas_keep_is_rolled_back() -> None:
    loose = CanaryCriteria(**{**CRITERIA.__dict__, "max_latency_regression_percent": 1000.0})
    judgement = judge_canary(stable=side(40.0), candidate=side(60.0), elapsed_s=130.0, criteria=loose)
    assert (judgement.verdict, judgement.reason) == (Verdict.ROLL_BACK, "CanaryOverSLO")
    # Where the stable replicas break it too, the comparison decides.
    assert judge_canary(stable=side(55.0), candidate=side(60.0), elapsed_s=130.0, criteria=loose).verdict is (
        Verdict.PROMOTE
    )


def test_errors_roll_back_at_once_latency_only_after_the_window() -> None:
    failing = side(10.0, requests=400.0, failures=20.0)  # 5%
    assert judge(side(10.0), failing, elapsed_s=10.0) == (Verdict.ROLL_BACK, "CanaryErrors")
    # Within one point of the stable replicas' own failures: not the canary's fault.
    assert judge(side(10.0, failures=45.0), failing, elapsed_s=10.0)[0] is Verdict.CONTINUE
    assert judge(side(10.0), side(10.0, requests=400.0, failures=4.0), elapsed_s=10.0)[0] is Verdict.CONTINUE


def test_no_verdict_without_enough_requests_on_both_sides_or_a_canary_p99() -> None:
    assert judge(side(10.0), side(30.0, requests=150.0)) == (Verdict.CONTINUE, "WaitingForRequests")
    assert judge(side(10.0, requests=100.0), side(30.0)) == (Verdict.CONTINUE, "WaitingForRequests")
    # Even failures need the requests: three of ten is not yet a rate.
    assert judge(side(10.0), side(10.0, requests=10.0, failures=3.0))[0] is Verdict.CONTINUE
    assert judge(side(10.0), side(None)) == (Verdict.CONTINUE, "WaitingForLatency")
    # No P99 of the stable side: the canary is judged against the SLO alone.
    assert judge(side(None), side(30.0))[0] is Verdict.PROMOTE
    assert judge(side(None), side(80.0)) == (Verdict.ROLL_BACK, "CanaryOverSLO")


def test_a_canary_whose_containers_restarted_is_rolled_back_at_once() -> None:
    crashed = TrackReading(pods=1, requests=5.0, failures=0.0, p99_ms=None, restarts=1)
    judgement = judge_canary(stable=side(10.0), candidate=crashed, elapsed_s=5.0, criteria=CRITERIA)
    assert (judgement.verdict, judgement.reason) == (Verdict.ROLL_BACK, "CanaryRestarted")
    assert "restarted 1 time(s)" in judgement.message
