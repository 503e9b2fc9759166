"""Burst sizing: the arrival curve, what counts as a burst, and what it makes the policy hold."""

from __future__ import annotations

import random

import pytest
from policy_fakes import make_profile

from tailpilot.api.autoscaling import BatchingConfig, Decision, Observation
from tailpilot.policy import PolicyConfig, PolicyState, decide
from tailpilot.policy.bursts import ArrivalCurve, burst_rate_per_s
from tailpilot.policy.config import BURST_FALSE_ALARM, SLO_MARGIN


def poisson_counts(rate: float, bins: int, seed: int) -> list[float]:
    """Per-bin counts of a Poisson process (exponential gaps), 1 s bins."""
    rng = random.Random(seed)
    counts, t = [0.0] * bins, rng.expovariate(rate)
    while t < bins:
        counts[int(t)] += 1
        t += rng.expovariate(rate)
    return counts


def test_the_curve_holds_the_most_arrivals_of_every_span():
    rng = random.Random(3)
    counts = [float(rng.randint(0, 9)) for _ in range(40)]
    curve = ArrivalCurve.of(counts, bin_s=2.0, max_span_s=20.0)
    assert curve is not None
    assert len(curve.peaks) == 10  # spans of 1..10 bins of 2 s
    for k, peak in enumerate(curve.peaks, start=1):
        assert peak == max(sum(counts[i : i + k]) for i in range(len(counts) - k + 1))
    assert curve.mean_rate_per_s == pytest.approx(sum(counts) / 80.0)
    assert ArrivalCurve.of([], bin_s=1.0) is None
    assert ArrivalCurve.of([0.0, 0.0], bin_s=1.0) is None


@pytest.mark.parametrize("seed", range(5))
def test_steady_poisson_traffic_is_not_a_burst(seed: int):
    # Five minutes of 1 s bins at 56 req/s: the largest bin is ~3 sigma above the mean, which a
    # plain 3-sigma rule would call a burst about one time in three.
    curve = ArrivalCurve.of(poisson_counts(56.0, 300, seed), bin_s=1.0)
    assert curve is not None
    assert curve.bursts(0.01) == ()


def test_a_burst_well_beyond_the_mean_is_found_at_its_own_span():
    counts = poisson_counts(7.0, 300, 11)
    for i in range(100, 103):  # 3 s at ~128 req/s, like the Azure code trace's bursts
        counts[i] += 121.0
    curve = ArrivalCurve.of(counts, bin_s=1.0)
    assert curve is not None
    spans = dict(curve.bursts(0.01))
    assert 1.0 in spans and 3.0 in spans
    assert spans[3.0] >= 3 * 121.0
    # The rate the model already sizes for absorbs it: a step to that rate is not a burst.
    assert curve.bursts(0.01, rate_per_s=130.0) == ()


def test_the_rate_that_absorbs_a_burst_leaves_the_backlog_the_time_two_batches_leave():
    bursts = ((2.0, 300.0), (1.0, 140.0))
    # target 748 ms, a batch of 4 in progress (220 ms), full batches of 8 (340 ms): 188 ms for the
    # backlog. 300 / 2.188 beats 140 / 1.188.
    need = burst_rate_per_s(bursts, target_ms=748.0, full_batch_ms=340.0, in_progress_ms=220.0)
    assert need == pytest.approx(300 / 2.188)
    assert burst_rate_per_s((), target_ms=748.0, full_batch_ms=340.0, in_progress_ms=220.0) == 0.0
    # No time left for a backlog: the fleet must keep up with every burst's own rate.
    assert burst_rate_per_s(bursts, target_ms=500.0, full_batch_ms=400.0, in_progress_ms=200.0) == 150.0


def bursty_observation(at_s: float, counts: list[float]) -> Observation:
    return Observation(
        at_s=at_s,
        request_rate=sum(counts[-30:]) / 30.0,
        p99_ms=40.0,
        ready_replicas=1,
        arrival_counts=tuple(counts),
        arrival_bin_s=1.0,
    )


def test_the_policy_holds_the_replicas_a_recent_burst_needs_and_says_so():
    # Profile: 4 + 0.5 b ms per batch, max batch 32 (1,600 req/s per replica at full batches).
    profile = make_profile()
    config = PolicyConfig(p99_target_ms=50.0, min_replicas=1, max_replicas=20)
    state = PolicyState.initial(replicas=1, batching=BatchingConfig(max_batch_size=32))

    def decide_on(counts: list[float]) -> Decision:
        obs = bursty_observation(1000.0, counts)
        return decide(config=config, profile=profile, observation=obs, state=state, now_s=1000.0)[0]

    calm = poisson_counts(200.0, 300, 5)
    bursty = list(calm)
    for i in range(200, 202):
        bursty[i] += 9000.0  # 2 s at ~9.2k req/s
    without, with_burst = decide_on(calm), decide_on(bursty)
    assert without.replicas == 1 and "bursts" not in without.message
    # ~18.4k requests in 2 s, within the 42.5 ms target less a batch of one in progress (4.5 ms)
    # and a full batch of 32 (20 ms): 18.4k / 2.018 s = ~9.1k req/s, 5.7 replicas' full batches.
    assert (with_burst.replicas, with_burst.batching.max_batch_size) == (6, 32)
    assert "bursts up to" in with_burst.message


def test_every_choice_under_bursts_carries_them_with_the_batching_it_runs():
    # 20 + 10 b ms per batch, max batch 8, target 100 ms: a full batch of 8 (100 ms) leaves no time
    # for a backlog, so at max batch 8 the fleet must keep up with the bursts' own rate.
    profile = make_profile(intercept_ms=20.0, per_item_ms=10.0, max_batch=8)
    config = PolicyConfig(p99_target_ms=100.0, min_replicas=1, max_replicas=40)
    counts = poisson_counts(20.0, 300, 9)
    for i in range(150, 153):
        counts[i] += 150.0
    for batch in (1, 2, 4, 8):
        state = PolicyState.initial(replicas=4, batching=BatchingConfig(max_batch_size=batch))
        obs = bursty_observation(1000.0, counts)
        decision, _ = decide(config=config, profile=profile, observation=obs, state=state, now_s=1000.0)
        assert "bursts up to" in decision.message
        curve = ArrivalCurve.of(counts, bin_s=1.0)
        assert curve is not None
        size = decision.batching.max_batch_size
        need = burst_rate_per_s(
            curve.bursts(BURST_FALSE_ALARM),
            target_ms=100.0 * (1 - SLO_MARGIN),
            full_batch_ms=profile.service_time.mean_ms(size),
            in_progress_ms=profile.service_time.mean_ms(1),
        )
        capacity = 1000.0 * size / profile.service_time.mean_ms(size)
        assert decision.replicas * capacity >= need, (batch, decision)
