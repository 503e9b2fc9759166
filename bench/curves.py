"""TailPilot's attainment-cost curve, and where a tuned baseline lies above it (pure).

A user pays for attainment: TailPilot's knob is the attainment objective (spec.slo.objectivePercent),
a baseline's is its target (an HPA utilization, a KEDA or KPA target, a WVA threshold). Each run at
one setting is one point (replica-seconds paid, % of requests within the SLO) on one trace at one
Ts. TailPilot's curve joins its points, in order of cost, by straight lines. A baseline point lies
above the curve when:

- its cost is within the curve's span and its attainment is higher than the curve's at that cost;
- it is cheaper than every TailPilot point and keeps at least as much as the cheapest of them;
- it is dearer than every TailPilot point and keeps more than the best of them.

The first two say that, at what TailPilot costs, a user gets more from the baseline (`beats_curve`);
the third that the baseline sells attainment no objective of TailPilot's reached, for more money
(`beyond_curve`). Both count against the curve; the pages show them apart.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from tailpilot.bench.baselines import BASELINE_SETTINGS
from tailpilot.bench.suite import DEFAULT_OBJECTIVE_PERCENT, OBJECTIVE_POLICIES, TAILPILOT, Row

#: TailPilot's policies on its curve, each with its objective (%).
CURVE_OBJECTIVES: dict[str, float] = {TAILPILOT: DEFAULT_OBJECTIVE_PERCENT, **OBJECTIVE_POLICIES}


@dataclass(frozen=True)
class TradePoint:
    """One policy at one setting on one trace and Ts: what it paid and what it kept."""

    policy: str
    replica_seconds: float
    pct_requests: float


def point_of(row: Row) -> TradePoint:
    """The row's point."""
    return TradePoint(row.policy, row.metrics.replica_seconds, row.metrics.pct_requests_in_slo)


def tailpilot_curve(group: Iterable[Row]) -> list[TradePoint]:
    """TailPilot's points among one trace and Ts's rows, cheapest first (ties: the lower attainment first)."""
    points = [point_of(r) for r in group if r.policy in CURVE_OBJECTIVES]
    return sorted(points, key=lambda p: (p.replica_seconds, p.pct_requests))


def baseline_points(group: Iterable[Row]) -> list[TradePoint]:
    """Every causal baseline's point (each setting) among one trace and Ts's rows, in table order."""
    by_policy = {r.policy: r for r in group}
    return [point_of(by_policy[name]) for name in BASELINE_SETTINGS if name in by_policy]


def attainment_at(curve: Sequence[TradePoint], replica_seconds: float) -> float | None:
    """The curve's attainment at a cost within its span, by linear interpolation (None: outside it)."""
    if not curve or not curve[0].replica_seconds <= replica_seconds <= curve[-1].replica_seconds:
        return None
    best: float | None = None
    # Several points may share a cost, and an unsorted attainment along the cost is possible (a
    # higher objective that happened to cost less): the curve there is the best of its segments.
    for left, right in zip(curve, curve[1:], strict=False):
        if not left.replica_seconds <= replica_seconds <= right.replica_seconds:
            continue
        span = right.replica_seconds - left.replica_seconds
        if span == 0:  # two points at one cost: the curve there keeps the better
            value = max(left.pct_requests, right.pct_requests)
        else:
            share = (replica_seconds - left.replica_seconds) / span
            value = left.pct_requests + share * (right.pct_requests - left.pct_requests)
        best = value if best is None else max(best, value)
    if best is None:  # a one-point curve at exactly this cost
        best = max(p.pct_requests for p in curve if p.replica_seconds == replica_seconds)
    return best


def beats_curve(curve: Sequence[TradePoint], point: TradePoint) -> bool:
    """Whether `point` keeps more than the curve at a cost no higher than TailPilot's dearest point.

    The first two rules: within the curve's span, above it; cheaper than every point, keeping at
    least the cheapest's attainment. A user who would pay what TailPilot costs gets more from it.
    """
    if not curve or point.replica_seconds > curve[-1].replica_seconds:
        return False
    if point.replica_seconds < curve[0].replica_seconds:
        return point.pct_requests >= curve[0].pct_requests
    on_curve = attainment_at(curve, point.replica_seconds)
    return on_curve is not None and point.pct_requests > on_curve


def beyond_curve(curve: Sequence[TradePoint], point: TradePoint) -> bool:
    """Whether `point` costs more than every TailPilot point and keeps more than the best (the third rule).

    Attainment no objective of TailPilot's reached, bought by paying more than its dearest point.
    """
    return bool(curve) and (
        point.replica_seconds > curve[-1].replica_seconds
        and point.pct_requests > max(p.pct_requests for p in curve)
    )


def above_curve(curve: Sequence[TradePoint], point: TradePoint) -> bool:
    """Whether `point` lies above TailPilot's curve (the module's three rules); False without a curve."""
    return beats_curve(curve, point) or beyond_curve(curve, point)


@dataclass(frozen=True)
class Above:
    """TailPilot's curve at one trace and Ts, and the baseline points above it, by rule."""

    curve: list[TradePoint]
    beating: list[TradePoint]
    beyond: list[TradePoint]

    def __bool__(self) -> bool:
        return bool(self.beating or self.beyond)


def points_above(group: Sequence[Row]) -> Above | None:
    """The baseline points above TailPilot's curve among one trace and Ts's rows.

    None when there is nothing to compare: fewer than two TailPilot objectives, or no baseline.
    """
    curve = tailpilot_curve(group)
    points = baseline_points(group)
    if len(curve) < 2 or not points:
        return None
    return Above(
        curve=curve,
        beating=[p for p in points if beats_curve(curve, p)],
        beyond=[p for p in points if beyond_curve(curve, p)],
    )


def describe(points: Sequence[TradePoint], *, most: int = 3) -> str:
    """`policy: attainment for replica-seconds` of the first `most` points, and how many more."""
    shown = ", ".join(f"{p.policy}: {p.pct_requests:.2f}% for {p.replica_seconds:.0f}" for p in points[:most])
    rest = len(points) - most
    return shown + (f" and {rest} more" if rest > 0 else "")


def groups(rows: Iterable[Row]) -> dict[tuple[str, float], list[Row]]:
    """Rows by (trace, Ts), in the table's order."""
    out: dict[tuple[str, float], list[Row]] = {}
    for row in rows:
        out.setdefault((row.trace, row.ts_s), []).append(row)
    return out
