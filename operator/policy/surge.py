"""When a surge of arrivals calls for a decision before the control period is up (pure).

Why: the policy decides every control period (15 s by default) from Prometheus. A step in
load that comes just after a decision waits up to a period, plus a scrape, before any replica
is asked for, and on a short start-up time that wait is most of the recovery
(docs/autoscaling.md, "Surge response"). A cheap check between decisions, of the arrivals of the
last few seconds read from the pods themselves, can call the decision early. It fires only
when the arrivals exceed what every replica already asked for (ready or starting) can serve at
the batching in force, in `checks` checks running, so Poisson noise and bursts of a second or
two (which the fleet's queues absorb) do not move the fleet between decisions.

`surge_step` is the whole check, for both callers: the operator's fast check
(`tailpilot.controllers`) and the simulator's adapter (`tailpilot.bench.tailpilot_policy`). Each
keeps the run of checks over capacity per service and passes it back, as it does the policy's
state.
"""

from __future__ import annotations

from dataclasses import dataclass

from tailpilot.api.autoscaling import Observation
from tailpilot.policy.signals import ARRIVAL_SPAN_S, READ_PERIOD_S


@dataclass(frozen=True, slots=True)
class SurgeConfig:
    """Thresholds of the surge check.

    Attributes:
        period_s: Seconds between two checks.
        span_s: Seconds of arrivals each check reads.
        checks: Checks running whose arrivals exceed the capacity before a decision is called.
        capacity_fraction: The arrivals must exceed this fraction of the replicas' capacity.
    """

    period_s: float = READ_PERIOD_S
    span_s: float = ARRIVAL_SPAN_S
    checks: int = 2
    capacity_fraction: float = 1.0

    def __post_init__(self) -> None:
        """Reject a check that could never or would always fire."""
        if self.period_s <= 0 or self.span_s <= 0:
            raise ValueError("period_s and span_s must be > 0")
        if self.checks < 1:
            raise ValueError("checks must be >= 1")
        if self.capacity_fraction <= 0:
            raise ValueError("capacity_fraction must be > 0")


def over_capacity(
    config: SurgeConfig, *, arrival_rate_per_s: float | None, capacity_per_s: float, replicas: int
) -> bool:
    """Whether the arrivals exceed what `replicas` replicas of `capacity_per_s` each serve.

    No rate (a first reading, unreadable pods) is never a surge.
    """
    if arrival_rate_per_s is None:
        return False
    return arrival_rate_per_s > config.capacity_fraction * capacity_per_s * max(0, replicas)


@dataclass(frozen=True, slots=True)
class SurgeCheck:
    """The result of one check: the run of checks over capacity, and whether a decision is due."""

    over_in_a_row: int
    decide_now: bool


def check_surge(
    config: SurgeConfig,
    *,
    over_in_a_row: int,
    arrival_rate_per_s: float | None,
    capacity_per_s: float,
    replicas: int,
) -> SurgeCheck:
    """One check: count it into the run; when the run reaches `config.checks`, call a decision and restart."""
    over = over_capacity(
        config, arrival_rate_per_s=arrival_rate_per_s, capacity_per_s=capacity_per_s, replicas=replicas
    )
    run = over_in_a_row + 1 if over else 0
    if run >= config.checks:
        return SurgeCheck(over_in_a_row=0, decide_now=True)
    return SurgeCheck(over_in_a_row=run, decide_now=False)


@dataclass(frozen=True, slots=True)
class SurgeReading:
    """What a fired check measured, handed to the decision it calls."""

    arrival_rate_per_s: float
    #: Completions per second over the same span: the decision's recent request rate.
    completion_rate_per_s: float
    span_s: float
    #: Capacity of the replicas asked for, at the batching in force.
    capacity_per_s: float
    replicas: int

    def describe(self) -> str:
        """For the decision's Event."""
        return (
            f"surge: {self.arrival_rate_per_s:.1f} arrivals/s over the last {self.span_s:g} s, above the "
            f"{self.capacity_per_s:.1f}/s that {self.replicas} replica(s) serve"
        )


@dataclass(frozen=True, slots=True)
class SurgeStep:
    """One check as its caller keeps it.

    `over_in_a_row` is the run to pass to the next check; `reading` calls a decision now (None: none).
    """

    over_in_a_row: int
    reading: SurgeReading | None


def surge_step(
    config: SurgeConfig,
    *,
    over_in_a_row: int,
    arrival_rate_per_s: float | None,
    completion_rate_per_s: float | None,
    capacity_per_s: float,
    replicas: int,
) -> SurgeStep:
    """One surge check, whole: what the operator's fast check and the simulator's adapter both run.

    Args:
        config: Thresholds.
        over_in_a_row: The run the previous check returned (0 for a service's first check).
        arrival_rate_per_s: Arrivals per second over the last `config.span_s` (None: not readable).
        completion_rate_per_s: Completions per second over the same span (None: not readable); a
            fired check hands it to the decision as the recent request rate.
        capacity_per_s: One replica's throughput at the batching in force.
        replicas: Replicas asked for (ready or starting).

    Returns:
        The run to keep for the next check, and a reading when the check calls a decision now
        (`check_surge` fired and both rates were read).
    """
    check = check_surge(
        config,
        over_in_a_row=over_in_a_row,
        arrival_rate_per_s=arrival_rate_per_s,
        capacity_per_s=capacity_per_s,
        replicas=replicas,
    )
    if not check.decide_now or arrival_rate_per_s is None or completion_rate_per_s is None:
        return SurgeStep(over_in_a_row=check.over_in_a_row, reading=None)
    reading = SurgeReading(
        arrival_rate_per_s=arrival_rate_per_s,
        completion_rate_per_s=completion_rate_per_s,
        span_s=config.span_s,
        capacity_per_s=capacity_per_s * replicas,
        replicas=replicas,
    )
    return SurgeStep(over_in_a_row=check.over_in_a_row, reading=reading)


def with_surge(observation: Observation, surge: SurgeReading | None) -> Observation:
    """The observation a surge decision uses: the fast check's completions over its span as the recent rate.

    The recent window of the observation averages a control period, most of it before the surge; the
    fast check read the pods a moment ago. Without data (no request rate) nothing is replaced: the
    policy holds on missing metrics, and a few seconds of counters do not make up for them.
    """
    if surge is None or observation.request_rate is None:
        return observation
    return observation.model_copy(
        update={"recent_request_rate": surge.completion_rate_per_s, "recent_window_s": surge.span_s}
    )
