"""The rotation rule: which backlogged replicas leave the Service while the others can carry the load."""

from __future__ import annotations

import pytest

from tailpilot.policy.rotation import RotationConfig, choose_rotation, wait_ms

CONFIG = RotationConfig(p99_target_ms=1000.0)  # hold above 500 ms of queue, release below 200 ms
CAPACITY = 10.0  # req/s a replica: 10 queued requests are a 1 s wait


def rotate(pending: dict[str, float], *, held: frozenset[str] = frozenset(), rate: float | None = 10.0):
    return choose_rotation(
        config=CONFIG, pending_by_replica=pending, held_out=held, rate_per_s=rate, capacity_per_s=CAPACITY
    )


def test_wait_is_the_queue_over_the_capacity():
    assert wait_ms(10, 10.0) == pytest.approx(1000.0)
    assert wait_ms(0, 0.0) == 0.0 and wait_ms(1, 0.0) == float("inf")


def test_a_backlogged_replica_is_held_out_while_fresh_replicas_take_the_rate():
    # After a step: two old replicas with a 2-3 s backlog, three new empty ones; 20 req/s fits in
    # three replicas at 67% of their capacity.
    out = rotate({"old-a": 30, "old-b": 20, "new-a": 0, "new-b": 0, "new-c": 1}, rate=20.0)
    assert out.held_out == {"old-a", "old-b"}
    assert "old-a ~3000 ms" in out.message


def test_replicas_are_held_only_while_the_others_keep_headroom():
    # 25 req/s on the three fresh replicas is 83% of their capacity: only one old replica (the
    # worst) may be held, leaving four in rotation at 62%.
    out = rotate({"old-a": 30, "old-b": 20, "new-a": 0, "new-b": 0, "new-c": 0}, rate=25.0)
    assert out.held_out == {"old-a"}


def test_a_held_replica_returns_below_the_release_wait_not_at_the_hold_wait():
    pending = {"old": 3, "new": 0}  # 300 ms: below the hold wait, above the release wait
    assert rotate(pending, held=frozenset({"old"}), rate=5.0).held_out == {"old"}
    assert rotate(pending, rate=5.0).held_out == frozenset()
    assert rotate({"old": 1, "new": 0}, held=frozenset({"old"}), rate=5.0).held_out == frozenset()


def test_a_fleet_wide_backlog_holds_nobody():
    # A burst the Service spread evenly: every replica queues, and holding some would pile the
    # arrivals on replicas that queue too.
    out = rotate({"a": 30, "b": 25, "c": 20, "d": 5}, rate=10.0)
    assert out.held_out == frozenset()
    assert "every replica" in out.message


def test_unknown_rate_and_a_single_replica_hold_nobody():
    assert rotate({"old": 30, "new": 0}, held=frozenset({"old"}), rate=None).held_out == frozenset()
    assert rotate({"only": 50}, rate=1.0).held_out == frozenset()


def test_gone_replicas_drop_out_of_the_held_set():
    assert rotate({"a": 0, "b": 0}, held=frozenset({"deleted"})).held_out == frozenset()


@pytest.mark.parametrize(
    "kwargs",
    [
        {"p99_target_ms": 0},
        {"p99_target_ms": 100, "hold_wait_fraction": 0.2, "release_wait_fraction": 0.2},
        {"p99_target_ms": 100, "max_rest_utilization": 1.0},
    ],
)
def test_config_rejects_thresholds_that_flip(kwargs):
    with pytest.raises(ValueError):
        RotationConfig(**kwargs)
