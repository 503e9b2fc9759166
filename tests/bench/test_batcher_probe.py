"""The batcher probe's pure parts: where it sends, how it reads Triton's batch statistics."""

from __future__ import annotations

import pytest

from tailpilot.bench.batcher_probe import Plan, Trial, outcome, plan, summarize


def test_late_lands_after_earlys_delay_expired_and_before_the_blocker_ends() -> None:
    p = plan(blocker_ms=30.0, delay_ms=5.0, late_before_expiry=False)
    assert p.early_ms == pytest.approx(6.0)
    assert p.early_ms + 5.0 < p.late_ms < 30.0
    control = plan(blocker_ms=30.0, delay_ms=5.0, late_before_expiry=True)
    assert control.early_ms < control.late_ms < control.early_ms + 5.0


def test_a_blocker_too_short_for_the_delay_is_refused() -> None:
    with pytest.raises(ValueError, match="too short"):
        plan(blocker_ms=6.0, delay_ms=5.0, late_before_expiry=False)


def test_the_outcome_comes_from_the_executions_beside_the_blockers() -> None:
    assert outcome({8: 1, 2: 1}) == "joined"
    assert outcome({8: 1, 1: 2}) == "separate"
    assert outcome({8: 1, 1: 1, 2: 0}) == "other"
    assert outcome({3: 1}) == "other"


def test_only_trials_sent_on_time_count() -> None:
    p = Plan(early_ms=6.0, late_ms=18.0)
    trials = [
        Trial(plan=p, outcome="joined", late_latency_ms=40.0, send_miss_ms=0.2),
        Trial(plan=p, outcome="separate", late_latency_ms=70.0, send_miss_ms=0.3),
        Trial(plan=p, outcome="separate", late_latency_ms=66.0, send_miss_ms=0.1),
        Trial(plan=p, outcome="joined", late_latency_ms=10.0, send_miss_ms=4.0),  # sent late
    ]
    s = summarize(trials)
    assert (s.trials, s.on_time, s.joined, s.separate, s.other) == (4, 3, 1, 2, 0)
    assert s.late_joined_ms == 40.0
    assert s.late_separate_ms == 68.0
