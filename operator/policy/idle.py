"""Scale to zero (pure): when the last replica may go, from the service's own idle history and budget.

A replica held through an idle stretch costs its replica-seconds; a replica let go costs a cold
start when traffic returns: the requests that arrive meanwhile wait at the activator for a replica
to start, and the evaluation windows they fall in miss the P99 target. The objective
(`spec.slo.objectivePercent`) prices that miss: over its compliance period, a share
`1 - objective` of the time may miss, and what is left of that error budget may be spent on cold
starts as on anything else.

So the idle time after which the last replica goes (the threshold) is learned from the service's
idle stretches (`IdleHistory`): the shortest threshold, at least the spec's idle window, such that

- the stretches longer than it, as often as the history saw them, cost no more missed time per
  second than the budget allows per second (`1 - objective`, scaled by the share of the budget
  left: a burning budget allows fewer cold starts, a spent one none), and
- the stretches longer than it last, on average, past it by more than a replica's start-up: going
  to zero saves more replica time than waking costs.

A service woken every few minutes therefore stays up (its stretches are short and frequent), while
one idle for hours goes down after the idle window. Until the history holds `MIN_STRETCHES`
stretches the threshold is the idle window itself: the user's setting is the prior.

Idle means no arrivals over the last control period (the observation's recent rate). A stretch is
measured from the start of the first such period to the first period with traffic (at zero: the
period after the wake), so the current stretch and the history are measured alike.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

#: Stretches kept (the newest); the history's span runs from the oldest kept stretch's start.
MAX_STRETCHES = 64
#: Below this many stretches the threshold is the idle window (nothing learned to price it yet).
MIN_STRETCHES = 3


@dataclass(frozen=True, slots=True)
class IdleStretch:
    """One idle stretch: when it began and how long it lasted (seconds)."""

    start_s: float
    length_s: float


@dataclass(frozen=True, slots=True)
class IdleHistory:
    """The service's finished idle stretches, newest last, and the one in progress.

    Attributes:
        stretches: Finished stretches (at most `MAX_STRETCHES`).
        idle_since_s: Start of the stretch in progress (None while traffic flows).
        observed_since_s: The first period recorded (the history's span before it held a stretch).
    """

    stretches: tuple[IdleStretch, ...] = ()
    idle_since_s: float | None = None
    observed_since_s: float | None = None

    def idle_for_s(self, now_s: float) -> float:
        """How long the stretch in progress has lasted (0 while traffic flows)."""
        return 0.0 if self.idle_since_s is None else max(0.0, now_s - self.idle_since_s)

    def span_s(self, now_s: float) -> float:
        """The time the history covers: from its oldest stretch (or first record) to now."""
        starts = [s.start_s for s in self.stretches[:1]]
        if self.observed_since_s is not None:
            starts.append(self.observed_since_s)
        return max(0.0, now_s - max(starts)) if starts else 0.0


def record(history: IdleHistory, *, now_s: float, idle: bool, quiet_s: float = 0.0) -> IdleHistory:
    """The history after one period: a stretch starts on the first idle period, ends on traffic.

    `quiet_s`: how long before `now_s` the window that read no arrivals began (the stretch started
    at least that long ago).
    """
    since = history.observed_since_s if history.observed_since_s is not None else now_s
    if idle:
        start = history.idle_since_s if history.idle_since_s is not None else now_s - quiet_s
        return IdleHistory(history.stretches, idle_since_s=start, observed_since_s=since)
    if history.idle_since_s is None:
        return IdleHistory(history.stretches, idle_since_s=None, observed_since_s=since)
    ended = IdleStretch(start_s=history.idle_since_s, length_s=now_s - history.idle_since_s)
    stretches = (*history.stretches, ended)[-MAX_STRETCHES:]
    # Once stretches are dropped, the span starts at the oldest one kept.
    return IdleHistory(stretches, idle_since_s=None, observed_since_s=max(since, stretches[0].start_s))


@dataclass(frozen=True, slots=True)
class ZeroChoice:
    """Whether the last replica goes now, and why.

    Attributes:
        to_zero: Go to (or stay at) zero replicas.
        idle_s: How long the service has been idle.
        threshold_s: The idle time after which zero pays (inf: not while the budget forbids it).
        reason: One sentence for the status and the decision's Event.
    """

    to_zero: bool
    idle_s: float
    threshold_s: float
    reason: str


def threshold_s(
    history: IdleHistory,
    *,
    now_s: float,
    idle_window_s: float,
    miss_per_wake_s: float,
    startup_s: float,
    objective: float,
    budget_remaining: float,
) -> float:
    """The idle time after which the last replica goes (module docstring); inf: not now.

    `miss_per_wake_s`: the time a cold start misses the target (the start-up and one period).
    """
    allowed_per_s = (1.0 - objective) * min(1.0, max(0.0, budget_remaining))
    if allowed_per_s <= 0:
        return math.inf
    if len(history.stretches) < MIN_STRETCHES:
        return idle_window_s
    span = history.span_s(now_s)
    lengths = sorted(s.length_s for s in history.stretches)
    candidates = sorted({idle_window_s, *(x for x in lengths if x >= idle_window_s)})
    for candidate in candidates:
        longer = [x for x in lengths if x > candidate]
        if not longer:
            # Past every stretch seen: going down costs (as far as history tells) no cold start soon.
            return candidate
        burn_per_s = len(longer) * miss_per_wake_s / span if span > 0 else math.inf
        saved_s = sum(x - candidate for x in longer) / len(longer)
        if burn_per_s <= allowed_per_s and saved_s > startup_s:
            return candidate
    return math.inf


def zero_choice(
    history: IdleHistory,
    *,
    now_s: float,
    idle_window_s: float,
    miss_per_wake_s: float,
    startup_s: float,
    objective: float,
    budget_remaining: float,
) -> ZeroChoice:
    """Whether the service goes to (or stays at) zero replicas this period."""
    idle = history.idle_for_s(now_s)
    if history.idle_since_s is None:
        return ZeroChoice(False, 0.0, math.inf, "requests arrived in the last window")
    limit = threshold_s(
        history,
        now_s=now_s,
        idle_window_s=idle_window_s,
        miss_per_wake_s=miss_per_wake_s,
        startup_s=startup_s,
        objective=objective,
        budget_remaining=budget_remaining,
    )
    if math.isinf(limit):
        return ZeroChoice(
            False,
            idle,
            limit,
            f"idle {idle:.0f} s, but the error budget ({budget_remaining:.0%} left) cannot pay for the "
            "cold starts its idle stretches would cause",
        )
    if idle < limit:
        return ZeroChoice(False, idle, limit, f"idle {idle:.0f} s of the {limit:.0f} s before zero pays")
    learned = len(history.stretches) >= MIN_STRETCHES
    basis = f"learned from {len(history.stretches)} idle stretches" if learned else "the idle window"
    return ZeroChoice(True, idle, limit, f"idle {idle:.0f} s, past the {limit:.0f} s threshold ({basis})")
