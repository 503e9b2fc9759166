"""Scale to zero (`tailpilot.policy.idle`): idle stretches learned, priced by the error budget."""

from __future__ import annotations

import math

import pytest

from tailpilot.policy.idle import MAX_STRETCHES, IdleHistory, IdleStretch, record, threshold_s, zero_choice

WINDOW_S = 60.0
STARTUP_S = 30.0
MISS_S = 45.0


def history_of(lengths: list[float], *, every_s: float, now_s: float) -> IdleHistory:
    """Stretches of `lengths` starting every `every_s` seconds, the last ending before `now_s`."""
    start = now_s - every_s * len(lengths)
    stretches = tuple(IdleStretch(start + i * every_s, length) for i, length in enumerate(lengths))
    return IdleHistory(stretches, idle_since_s=None, observed_since_s=start)


def threshold(history: IdleHistory, *, now_s: float, objective: float = 0.99, budget: float = 1.0) -> float:
    return threshold_s(
        history,
        now_s=now_s,
        idle_window_s=WINDOW_S,
        miss_per_wake_s=MISS_S,
        startup_s=STARTUP_S,
        objective=objective,
        budget_remaining=budget,
    )


def test_a_stretch_starts_at_the_first_quiet_window_and_ends_on_traffic():
    h = record(IdleHistory(), now_s=100.0, idle=False)
    assert (h.idle_since_s, h.observed_since_s, h.stretches) == (None, 100.0, ())
    h = record(h, now_s=115.0, idle=True, quiet_s=15.0)
    h = record(h, now_s=130.0, idle=True, quiet_s=15.0)
    assert h.idle_since_s == 100.0 and h.idle_for_s(130.0) == 30.0
    h = record(h, now_s=400.0, idle=False)
    assert h.stretches == (IdleStretch(100.0, 300.0),) and h.idle_since_s is None
    assert h.idle_for_s(500.0) == 0.0


def test_the_history_keeps_the_newest_stretches_and_its_span_starts_at_the_oldest_kept():
    h = IdleHistory()
    t = 0.0
    for _ in range(MAX_STRETCHES + 5):
        h = record(h, now_s=t, idle=False)
        h = record(h, now_s=t + 10.0, idle=True)
        t += 100.0
        h = record(h, now_s=t, idle=False)
    assert len(h.stretches) == MAX_STRETCHES
    assert h.stretches[0].start_s == 5 * 100.0 + 10.0
    assert h.span_s(t) == t - h.stretches[0].start_s


def test_without_enough_history_the_idle_window_is_the_threshold():
    assert threshold(IdleHistory(), now_s=1000.0) == WINDOW_S
    few = history_of([5000.0, 5000.0], every_s=6000.0, now_s=20000.0)
    assert threshold(few, now_s=20000.0) == WINDOW_S


def test_rare_long_stretches_go_to_zero_after_the_idle_window():
    # One stretch of 2 h per day: 45 s of misses a day is far within 1% of the day.
    h = history_of([7200.0] * 7, every_s=86400.0, now_s=7 * 86400.0)
    assert threshold(h, now_s=7 * 86400.0) == WINDOW_S


def test_a_service_woken_every_few_minutes_stays_up_until_idle_longer_than_ever_before():
    # A 2-4 minute stretch every 5 minutes: each wake would cost 45 s of 300, far over 1%.
    lengths = [120.0, 180.0, 240.0, 150.0, 200.0, 130.0, 220.0, 170.0]
    h = history_of(lengths, every_s=300.0, now_s=3000.0)
    assert threshold(h, now_s=3000.0) == max(lengths)
    # A looser objective pays for the wakes, down to the idle window.
    assert threshold(h, now_s=3000.0, objective=0.5) == WINDOW_S


def test_the_threshold_rises_as_the_budget_burns_and_a_spent_budget_forbids_zero():
    # A 30-minute stretch every hour, with a few short pauses between bursts.
    lengths = [1800.0, 90.0, 1800.0, 90.0, 1800.0, 90.0, 1800.0, 90.0]
    h = history_of(lengths, every_s=1800.0, now_s=8 * 1800.0)
    healthy = threshold(h, now_s=8 * 1800.0, objective=0.95)
    burning = threshold(h, now_s=8 * 1800.0, objective=0.95, budget=0.3)
    assert healthy == WINDOW_S  # every stretch pays, the short pauses too
    assert burning == 90.0  # only the long stretches are worth a cold start now
    assert math.isinf(threshold(h, now_s=8 * 1800.0, objective=0.95, budget=0.0))


def test_stretches_barely_longer_than_a_start_up_are_not_worth_a_wake():
    # Every stretch 80 s: going down at 60 s saves 20 s, less than the 30 s start-up.
    h = history_of([80.0] * 6, every_s=10000.0, now_s=60000.0)
    assert threshold(h, now_s=60000.0) == 80.0


@pytest.mark.parametrize(
    ("idle_since", "expected", "words"),
    [
        (None, False, "requests arrived"),
        (970.0, False, "idle 30 s of the 60 s"),
        (900.0, True, "past the 60 s threshold (the idle window)"),
    ],
)
def test_the_choice_says_why(idle_since: float | None, expected: bool, words: str):
    h = IdleHistory(idle_since_s=idle_since, observed_since_s=0.0)
    choice = zero_choice(
        h,
        now_s=1000.0,
        idle_window_s=WINDOW_S,
        miss_per_wake_s=MISS_S,
        startup_s=STARTUP_S,
        objective=0.99,
        budget_remaining=1.0,
    )
    assert choice.to_zero is expected and words in choice.reason


def test_a_spent_budget_keeps_the_replica_and_says_so():
    h = IdleHistory(idle_since_s=0.0, observed_since_s=0.0)
    choice = zero_choice(
        h,
        now_s=10000.0,
        idle_window_s=WINDOW_S,
        miss_per_wake_s=MISS_S,
        startup_s=STARTUP_S,
        objective=0.99,
        budget_remaining=-0.5,
    )
    assert not choice.to_zero and math.isinf(choice.threshold_s) and "error budget" in choice.reason
