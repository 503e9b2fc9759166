"""The surge check: when arrivals between decisions call a decision early."""

from __future__ import annotations

import pytest

from tailpilot.policy.surge import SurgeConfig, SurgeReading, check_surge, over_capacity, surge_step

CONFIG = SurgeConfig()  # two checks running, arrivals above the full capacity


def test_over_capacity_means_above_what_the_replicas_asked_for_serve():
    assert not over_capacity(CONFIG, arrival_rate_per_s=None, capacity_per_s=10.0, replicas=2)
    assert not over_capacity(CONFIG, arrival_rate_per_s=20.0, capacity_per_s=10.0, replicas=2)
    assert over_capacity(CONFIG, arrival_rate_per_s=20.5, capacity_per_s=10.0, replicas=2)
    assert over_capacity(CONFIG, arrival_rate_per_s=0.1, capacity_per_s=10.0, replicas=0)
    lower = SurgeConfig(capacity_fraction=0.8)
    assert over_capacity(lower, arrival_rate_per_s=16.5, capacity_per_s=10.0, replicas=2)


def run(rates: list[float | None], *, replicas: int = 2, config: SurgeConfig = CONFIG) -> list[bool]:
    """Which checks call a decision, for a sequence of measured arrival rates (capacity 10/s each)."""
    over, fired = 0, []
    for rate in rates:
        check = check_surge(
            config, over_in_a_row=over, arrival_rate_per_s=rate, capacity_per_s=10.0, replicas=replicas
        )
        over = check.over_in_a_row
        fired.append(check.decide_now)
    return fired


def test_a_decision_needs_checks_running_over_capacity_and_the_run_restarts_after_it():
    # A one-check burst never fires; a dip or a missing reading resets the run.
    assert run([25.0, 15.0, 25.0, None, 25.0, 19.0]) == [False] * 6
    # A step: the second check running fires, then two more are needed for another decision.
    assert run([25.0, 25.0, 25.0, 25.0, 25.0]) == [False, True, False, True, False]
    assert run([25.0], config=SurgeConfig(checks=1)) == [True]


def test_no_surge_below_capacity_however_long():
    assert not any(run([19.9] * 50))


@pytest.mark.parametrize(
    "kwargs",
    [{"period_s": 0.0}, {"span_s": -1.0}, {"checks": 0}, {"capacity_fraction": 0.0}],
)
def test_thresholds_that_would_never_or_always_fire_are_refused(kwargs):
    with pytest.raises(ValueError):
        SurgeConfig(**kwargs)


def test_the_reading_says_what_was_measured_against_what():
    text = SurgeReading(
        arrival_rate_per_s=41.2, completion_rate_per_s=19.0, span_s=5.0, capacity_per_s=19.1, replicas=1
    ).describe()
    assert text == "surge: 41.2 arrivals/s over the last 5 s, above the 19.1/s that 1 replica(s) serve"


def test_a_surge_step_keeps_the_run_and_hands_a_fired_check_its_reading():
    kwargs = {"completion_rate_per_s": 19.0, "capacity_per_s": 10.0, "replicas": 2}
    first = surge_step(CONFIG, over_in_a_row=0, arrival_rate_per_s=25.0, **kwargs)
    assert (first.over_in_a_row, first.reading) == (1, None)
    fired = surge_step(CONFIG, over_in_a_row=first.over_in_a_row, arrival_rate_per_s=25.0, **kwargs)
    assert fired.over_in_a_row == 0
    assert fired.reading == SurgeReading(
        arrival_rate_per_s=25.0,
        completion_rate_per_s=19.0,
        span_s=CONFIG.span_s,
        capacity_per_s=20.0,
        replicas=2,
    )
    # No completions read: the run restarts as the check says, but no decision is called.
    unread = surge_step(
        CONFIG,
        over_in_a_row=1,
        arrival_rate_per_s=25.0,
        completion_rate_per_s=None,
        capacity_per_s=10.0,
        replicas=2,
    )
    assert (unread.over_in_a_row, unread.reading) == (0, None)
