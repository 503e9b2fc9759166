"""Sizing a wake from the requests the activator holds (`tailpilot.policy.wake`)."""

from __future__ import annotations

import math

import pytest

from tailpilot.policy.wake import HeldRequests, wake_size


def size(count: int, *, held_for_s: float, capacity: float = 10.0, **changes: float) -> int:
    knobs = dict(startup_s=90.0, control_period_s=15.0, replicas_now=1, max_replicas=20, max_step=10)
    knobs.update(changes)
    return wake_size(
        HeldRequests(count=count, since_s=1000.0),
        now_s=1000.0 + held_for_s,
        capacity_per_s=capacity,
        startup_s=knobs["startup_s"],
        control_period_s=knobs["control_period_s"],
        replicas_now=int(knobs["replicas_now"]),
        max_replicas=int(knobs["max_replicas"]),
        max_step=int(knobs["max_step"]),
    ).replicas


def test_the_backlog_of_the_start_up_is_drained_within_a_period_of_the_replicas_serving():
    # 2.5/s (a quarter of a replica's 10/s) for 30 s of a 90 s start-up: 225 queued when they serve.
    # Serving 2.5/s and draining 225 in 15 s takes (15 + 2.5) / 10 = 1.75, so 2 replicas.
    result = wake_size(
        HeldRequests(count=75, since_s=1000.0),
        now_s=1030.0,
        startup_s=90.0,
        control_period_s=15.0,
        capacity_per_s=10.0,
        replicas_now=1,
        max_replicas=20,
        max_step=10,
    )
    assert result.arrival_rate_per_s == pytest.approx(2.5)
    assert result.backlog == pytest.approx(225.0)
    assert result.replicas == 2
    assert "75 requests held" in result.message and "2 serve them" in result.message


def test_more_held_requests_or_a_longer_start_up_ask_for_more_replicas():
    assert size(75, held_for_s=30) < size(300, held_for_s=30) < size(1000, held_for_s=30)
    assert size(75, held_for_s=30, startup_s=30) <= size(75, held_for_s=30, startup_s=90)
    # A faster replica needs fewer.
    assert size(300, held_for_s=30, capacity=40.0) < size(300, held_for_s=30)


def test_one_request_just_held_is_not_a_rate_of_one_per_millisecond():
    assert size(1, held_for_s=0.001) == 1
    assert size(1, held_for_s=0.0) == 1


def test_the_bounds_and_the_step_hold():
    assert size(5000, held_for_s=10) == 11  # one replica now, a step of ten at most
    assert size(5000, held_for_s=10, max_replicas=4) == 4
    assert size(5000, held_for_s=10, max_step=2) == 3
    assert size(5000, held_for_s=10, capacity=0.0) == 11  # nothing known to serve: as many as allowed
    assert math.isfinite(size(5000, held_for_s=10))
