"""Sizing a wake from zero (pure): as many replicas as the requests held at the activator need.

While a service woken from zero has no ready replica, every request it gets waits at the activator.
When its first replicas come up, they find the whole cold start's arrivals queued. One replica
drains that backlog only slowly (at a quarter of its capacity in traffic, a 90 s start-up leaves 22 s
of its work queued, and every request behind it misses the target meanwhile), and more replicas
asked for once it serves come a whole start-up later. Knative's KPA counts the held requests as
concurrency during the cold start and asks for several replicas at once; this is the same idea,
sized by the queueing the policy knows rather than a concurrency target.

From the requests held now and how long they have been arriving, the arrival rate; from it, the
backlog the replicas will find (every arrival of the start-up); the replicas that serve the
arrivals and drain that backlog within one control period of coming up. Never more than
`max_replicas`, nor more than the decision's step allows above the replicas in force.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class HeldRequests:
    """Requests the activator holds for a service with no ready replica.

    Attributes:
        count: Requests held now (across the activator's replicas).
        since_s: When the first of them arrived: the wake's request (the caller's clock).
    """

    count: int
    since_s: float


def reads_held(*, woken: bool, ready_replicas: int, replicas: int) -> bool:
    """Whether a period sizes from the activator's held requests: woken, and no replica ready yet.

    A service at zero that has not been woken is not read (the wake comes first), so idle services
    cost the activator's pods nothing; once a replica is ready, the traffic's own signals size the fleet.
    """
    return woken and ready_replicas == 0 and replicas > 0


@dataclass(frozen=True, slots=True)
class WakeSize:
    """The replicas a wake asks for, and the figures behind them."""

    replicas: int
    arrival_rate_per_s: float
    backlog: float
    message: str


def wake_size(
    held: HeldRequests,
    *,
    now_s: float,
    startup_s: float,
    control_period_s: float,
    capacity_per_s: float,
    replicas_now: int,
    max_replicas: int,
    max_step: int,
) -> WakeSize:
    """The replicas that serve the held arrivals and drain their backlog within a period of starting.

    The rate is taken over at least one control period (a single request just held is not a rate of
    one per millisecond); the backlog is at least what is held now.
    """
    held_for_s = max(now_s - held.since_s, control_period_s)
    rate = held.count / held_for_s
    backlog = max(float(held.count), rate * startup_s)
    limit = min(max_replicas, replicas_now + max_step)
    if capacity_per_s > 0:
        replicas = max(1, min(limit, math.ceil((backlog / control_period_s + rate) / capacity_per_s - 1e-9)))
    else:  # nothing known to serve with: as many as allowed
        replicas = max(1, limit)
    message = (
        f"{held.count} requests held at the activator over {now_s - held.since_s:.0f} s (about "
        f"{rate:.2f}/s): the replicas will find about {backlog:.0f} queued after their {startup_s:.0f} s "
        f"start-up; {replicas} serve them within a period ({capacity_per_s:.1f}/s each)"
    )
    return WakeSize(replicas=replicas, arrival_rate_per_s=rate, backlog=backlog, message=message)
