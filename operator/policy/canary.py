"""The canary analysis: does the new engine, serving real traffic on its own replicas, hold up? (pure).

The regression gate judges a new engine by its profile, before it sees a request; the canary
judges it by what it does with the service's own traffic. While it runs, the canary replicas and
the stable ones serve the same request stream side by side (the Service spreads requests over
both), so the two sides' observations over the same window are directly comparable:

- **a crash** (a canary container restarted) rolls back at once: the requests it held failed on
  the clients' side, where Triton's failure counter never sees them;
- **errors** are judged as soon as both sides have answered `min_requests`: a canary whose
  failed-request share exceeds the stable replicas' by more than `max_error_rate_percent`
  percentage points is rolled back at once (waiting out the window would fail more requests);
- **latency** is judged once the analysis window is over: the canary's P99 may exceed the stable
  replicas' by at most `max_latency_regression_percent` (the regression gate's budget, the same
  promise measured instead of predicted), and by more than a noise floor (a few percent of the
  SLO: at a P99 of 2 ms, one millisecond is 50% and means nothing), and must not break the SLO
  where the stable replicas keep it.

A verdict needs both sides' requests: below `min_requests` the analysis goes on (a P99 of a
few dozen requests is its maximum, not its tail).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

#: Differences of P99 below this share of the SLO are noise, whatever their ratio: they leave the
#: service's margin to its SLO as it was, and the tails of a few hundred requests on two sets of
#: pods differ by that much between identical engines.
NOISE_FLOOR_SLO_SHARE = 0.05


@dataclass(frozen=True)
class TrackReading:
    """What one side (the stable replicas, or the canary's) served in the analysis window.

    Attributes:
        pods: Pods with metrics in the window.
        requests: Requests answered or failed.
        failures: Failed requests.
        p99_ms: Observed P99 (None: no latency summary yet).
        restarts: Container restarts of its pods (a crash fails its in-flight requests where Triton
            cannot count them).
    """

    pods: int
    requests: float
    failures: float
    p99_ms: float | None
    restarts: int = 0

    @property
    def error_rate_percent(self) -> float | None:
        """Failed requests, percent of requests (None: no request)."""
        return 100.0 * self.failures / self.requests if self.requests > 0 else None


@dataclass(frozen=True)
class CanaryCriteria:
    """What the canary is held to (from spec.rollout and the SLO)."""

    analysis_s: float
    min_requests: int
    max_latency_regression_percent: float
    max_error_rate_percent: float
    slo_p99_ms: float

    @property
    def noise_floor_ms(self) -> float:
        """P99 differences below this are not a regression."""
        return NOISE_FLOOR_SLO_SHARE * self.slo_p99_ms


class Verdict(enum.Enum):
    """What the analysis concluded."""

    CONTINUE = "Continue"
    PROMOTE = "Promote"
    ROLL_BACK = "RollBack"


@dataclass(frozen=True)
class CanaryJudgement:
    """A verdict, its CamelCase reason and the evidence in words."""

    verdict: Verdict
    reason: str
    message: str


def canary_replicas(stable_replicas: int, traffic_percent: float) -> int:
    """Canary replicas beside `stable_replicas` for about `traffic_percent` of the traffic (at least one).

    The Service spreads requests evenly over its ready pods, so k canary pods beside n stable ones
    take k / (n + k) of them: k = n * p / (100 - p), rounded, at least one.
    """
    share = min(max(traffic_percent, 0.0), 99.0) / 100.0
    return max(1, round(max(1, stable_replicas) * share / (1.0 - share)))


def _p99(value: float | None) -> str:
    return f"{value:.1f} ms" if value is not None else "no P99 yet"


def describe(stable: TrackReading, candidate: TrackReading) -> str:
    """Both sides' figures in words."""

    def side(name: str, track: TrackReading) -> str:
        errors = track.error_rate_percent
        rate = f"{errors:.2f}% failed" if errors is not None else "no request"
        return f"{name} {_p99(track.p99_ms)} P99, {track.requests:.0f} requests, {rate} ({track.pods} pods)"

    return f"{side('canary', candidate)}; {side('stable', stable)}"


def judge_canary(
    *, stable: TrackReading, candidate: TrackReading, elapsed_s: float, criteria: CanaryCriteria
) -> CanaryJudgement:
    """Promote, roll back, or go on analysing, from both sides' readings `elapsed_s` into the window."""
    figures = describe(stable, candidate)
    if candidate.restarts > 0:
        return CanaryJudgement(
            Verdict.ROLL_BACK,
            "CanaryRestarted",
            f"the canary's containers restarted {candidate.restarts} time(s): the requests they held "
            "failed where Triton cannot count them; " + figures,
        )
    fewest = min(stable.requests, candidate.requests)
    if fewest < criteria.min_requests:
        return CanaryJudgement(
            Verdict.CONTINUE,
            "WaitingForRequests",
            f"{fewest:.0f} of the {criteria.min_requests} requests each side needs before a verdict; "
            + figures,
        )
    canary_errors = candidate.error_rate_percent or 0.0
    stable_errors = stable.error_rate_percent or 0.0
    if canary_errors - stable_errors > criteria.max_error_rate_percent:
        return CanaryJudgement(
            Verdict.ROLL_BACK,
            "CanaryErrors",
            f"the canary failed {canary_errors:.2f}% of its requests against the stable replicas' "
            f"{stable_errors:.2f}% (allowed: {criteria.max_error_rate_percent:g} points more); " + figures,
        )
    if elapsed_s < criteria.analysis_s:
        return CanaryJudgement(
            Verdict.CONTINUE,
            "Analysing",
            f"{elapsed_s:.0f} of {criteria.analysis_s:.0f} s analysed; " + figures,
        )
    if candidate.p99_ms is None:
        return CanaryJudgement(Verdict.CONTINUE, "WaitingForLatency", "no P99 of the canary yet; " + figures)
    slo = criteria.slo_p99_ms
    if candidate.p99_ms > slo and (stable.p99_ms is None or stable.p99_ms <= slo):
        return CanaryJudgement(
            Verdict.ROLL_BACK,
            "CanaryOverSLO",
            f"the canary's P99 {candidate.p99_ms:.1f} ms breaks the {slo:g} ms SLO the stable replicas "
            "keep; " + figures,
        )
    if stable.p99_ms is not None and stable.p99_ms > 0:
        rise = 100.0 * (candidate.p99_ms - stable.p99_ms) / stable.p99_ms
        budget = criteria.max_latency_regression_percent
        if rise > budget and candidate.p99_ms - stable.p99_ms > criteria.noise_floor_ms:
            return CanaryJudgement(
                Verdict.ROLL_BACK,
                "CanaryLatencyRegression",
                f"the canary's P99 is {rise:.0f}% above the stable replicas' (budget "
                f"spec.rollout.maxLatencyRegressionPercent {budget:g}%); " + figures,
            )
    return CanaryJudgement(
        Verdict.PROMOTE,
        "CanaryHeldUp",
        f"after {elapsed_s:.0f} s the canary is within the budgets; " + figures,
    )
