"""Which ready replicas to hold out of the Service's rotation while they work off a backlog (pure).

Why: a Service spreads new requests evenly over its ready endpoints. After a load step, the
replicas that were serving when it came hold the backlog it built; the replicas added for it
start empty. Round robin keeps sending a share of the new requests behind that backlog, so
they miss the SLO until it drains, however many replicas were added: recovery then takes the
backlog's drain time after the new replicas are ready (docs/autoscaling.md, section 10).
Holding the backlogged replicas out of the rotation until their queue is short sends new
requests to the replicas that can answer them in time, while the held ones keep serving what
they already hold. It is only done while the replicas left in rotation can carry the whole
request rate with headroom, so it never moves an overload from one replica to the others.

The estimate of a replica's wait is its queue over its capacity at the batching in force:
a backlog is served in full batches.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class RotationConfig:
    """Thresholds of the rotation rule.

    Attributes:
        p99_target_ms: The service's P99 SLO.
        hold_wait_fraction: A replica whose queue would make a new request wait more than this
            fraction of the target is held out.
        release_wait_fraction: A held replica returns once its wait is below this fraction
            (below `hold_wait_fraction`, so a replica does not go in and out on every check).
        max_rest_utilization: Held replicas leave the others at most this busy (of their
            capacity at the batching in force), else fewer are held.
    """

    p99_target_ms: float
    hold_wait_fraction: float = 0.5
    release_wait_fraction: float = 0.2
    max_rest_utilization: float = 0.8

    def __post_init__(self) -> None:
        """Reject thresholds that would make replicas flip in and out."""
        if self.p99_target_ms <= 0:
            raise ValueError("p99_target_ms must be > 0")
        if not 0 <= self.release_wait_fraction < self.hold_wait_fraction:
            raise ValueError("need 0 <= release_wait_fraction < hold_wait_fraction")
        if not 0 < self.max_rest_utilization < 1:
            raise ValueError("max_rest_utilization must be in (0, 1)")


@dataclass(frozen=True, slots=True)
class Rotation:
    """The replicas to hold out, and why (for the Event and the log)."""

    held_out: frozenset[str]
    message: str


def wait_ms(pending: float, capacity_per_s: float) -> float:
    """How long a request sent now waits behind `pending` queued ones, ms."""
    if capacity_per_s <= 0:
        return float("inf") if pending > 0 else 0.0
    return 1000.0 * max(0.0, pending) / capacity_per_s


def choose_rotation(
    *,
    config: RotationConfig,
    pending_by_replica: Mapping[str, float],
    held_out: frozenset[str],
    rate_per_s: float | None,
    capacity_per_s: float,
) -> Rotation:
    """Return which ready replicas to hold out of the rotation.

    Args:
        config: Thresholds.
        pending_by_replica: Queued requests of every ready replica (Triton's pending gauge).
        held_out: Replicas held out now.
        rate_per_s: The service's request rate; None (unknown) puts every replica back.
        capacity_per_s: One replica's throughput at the batching in force.
    """
    if rate_per_s is None:
        return Rotation(frozenset(), "request rate unknown: every replica in rotation")
    if len(pending_by_replica) < 2:
        return Rotation(frozenset(), "one ready replica: it stays in rotation")
    target = config.p99_target_ms
    waits = {pod: wait_ms(n, capacity_per_s) for pod, n in pending_by_replica.items()}
    staying = [p for p in held_out if p in waits and waits[p] > config.release_wait_fraction * target]
    joining = [p for p in waits if p not in held_out and waits[p] > config.hold_wait_fraction * target]
    # The longest waits go first: if only some can be held, hold those whose queue hurts most.
    out: list[str] = []
    for pod in sorted(staying + joining, key=lambda p: (-waits[p], p)):
        in_rotation = len(waits) - len(out) - 1
        if in_rotation < 1 or rate_per_s > config.max_rest_utilization * in_rotation * capacity_per_s:
            break
        out.append(pod)
    if not out:
        return Rotation(frozenset(), "no backlog to hold out")
    if not any(waits[p] <= config.release_wait_fraction * target for p in waits if p not in out):
        # Every replica queues (a burst the Service spread evenly): holding some out would only
        # pile the arrivals on others that queue as well.
        return Rotation(frozenset(), "backlog on every replica: none held out")
    detail = ", ".join(f"{p} ~{waits[p]:.0f} ms" for p in out)
    return Rotation(frozenset(out), f"held out while their backlog drains: {detail}")
