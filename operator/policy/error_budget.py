"""The attainment objective's error budget over a rolling compliance period (pure).

The objective (`spec.slo.objectivePercent`) is a share of *time*: of the service's evaluation
windows in the compliance period, that share must have their P99 at or under the target. Time, not
requests, because that is what the server measures: Triton exports per-pod latency quantiles
(summaries), not a histogram, so the number of requests over a threshold is not observable, while a
window's P99 is (and a window that meets it had at least 99% of its requests within the target).
The generated burn-rate alerts count the same thing (`tailpilot.manifests.prometheus_rule`).

Each control period adds the time since the last one as met or missed, by the P99 its observation
carries; a period without traffic or without a P99 adds nothing. The ledger keeps the compliance
period in `BUCKETS` buckets, so it stays small enough for the object's status (where an operator
restart finds it again). The budget is the whole compliance period's, as an SRE counts it: the
objective's share of the period that may miss, whatever of it was measured so far. (Counted over the
measured part only, a service's first minutes, when a miss weighs most, overspent it at once: on the
benchmark's two-state trace, in a run of this module's first version on 2026-12-04, the budget read
-29 after five minutes and held the fleet at its peak.)
"""

from __future__ import annotations

import math
from dataclasses import dataclass

#: The compliance period is kept in this many buckets (the oldest goes whole once past the period).
BUCKETS = 24
#: A gap between two records longer than this many control periods counts as one period (the
#: operator was down, or the service had no decision): what happened in it was not observed.
MAX_GAP_PERIODS = 2.0


@dataclass(frozen=True, slots=True)
class BudgetLedger:
    """Met and missed seconds per bucket of the compliance period.

    Attributes:
        buckets: (bucket start s, met seconds, missed seconds), oldest first.
        last_at_s: When the last period was recorded (None: never).
    """

    buckets: tuple[tuple[float, float, float], ...] = ()
    last_at_s: float | None = None

    @property
    def met_s(self) -> float:
        """Seconds that met the target in the period."""
        return sum(b[1] for b in self.buckets)

    @property
    def missed_s(self) -> float:
        """Seconds that missed it."""
        return sum(b[2] for b in self.buckets)


@dataclass(frozen=True, slots=True)
class Budget:
    """What is left of the error budget.

    Attributes:
        objective: The share of time that must meet the target (0.99 for 99%).
        period_s: The compliance period.
        measured_s: Seconds of the compliance period measured so far.
        missed_s: Of them, the seconds whose P99 missed the target.
    """

    objective: float
    period_s: float
    measured_s: float
    missed_s: float

    @property
    def attainment(self) -> float | None:
        """The share of measured time that met the target (None: nothing measured)."""
        return None if self.measured_s <= 0 else 1.0 - self.missed_s / self.measured_s

    @property
    def remaining(self) -> float:
        """The share of the period's budget left: 1 untouched, 0 spent, below 0 overspent."""
        return 1.0 - self.missed_s / ((1.0 - self.objective) * self.period_s)


def record(
    ledger: BudgetLedger,
    *,
    now_s: float,
    met: bool | None,
    compliance_period_s: float,
    control_period_s: float,
) -> BudgetLedger:
    """The ledger with the time since the last record counted as met or missed (None: not counted)."""
    last = ledger.last_at_s
    if last is None or now_s <= last or met is None:
        return BudgetLedger(buckets=_within(ledger.buckets, now_s, compliance_period_s), last_at_s=now_s)
    seconds = min(now_s - last, MAX_GAP_PERIODS * control_period_s)
    bucket_s = compliance_period_s / BUCKETS
    start = math.floor(now_s / bucket_s) * bucket_s
    buckets = list(_within(ledger.buckets, now_s, compliance_period_s))
    good, bad = (seconds, 0.0) if met else (0.0, seconds)
    if buckets and buckets[-1][0] == start:
        _, old_good, old_bad = buckets[-1]
        buckets[-1] = (start, old_good + good, old_bad + bad)
    else:
        buckets.append((start, good, bad))
    return BudgetLedger(buckets=tuple(buckets), last_at_s=now_s)


def budget(ledger: BudgetLedger, *, objective: float, compliance_period_s: float) -> Budget:
    """What the ledger leaves of the budget of `objective` (a share, 0.99 for 99%) over the period."""
    return Budget(
        objective=objective,
        period_s=compliance_period_s,
        measured_s=ledger.met_s + ledger.missed_s,
        missed_s=ledger.missed_s,
    )


def _within(
    buckets: tuple[tuple[float, float, float], ...], now_s: float, period_s: float
) -> tuple[tuple[float, float, float], ...]:
    """The buckets that still end inside the compliance period."""
    bucket_s = period_s / BUCKETS
    return tuple(b for b in buckets if b[0] + bucket_s > now_s - period_s)
