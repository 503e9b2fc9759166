"""Which precision `spec.engine.precision: auto` serves: the one needing the fewest replicas (pure).

Every precision the target supports is built (the build refuses an engine outside the accuracy
tolerance) and profiled where it serves. At the observed rate each profiled engine is sized the way
`decide` sizes replicas (`core.fewest_replicas_at`); the one needing the fewest replicas serves. At no
load every engine needs the minimum, so ties go to the most capacity per replica within the SLO
(`gpu_choice.capacity_at_slo`: what needs the fewest replicas once load comes), then to the more
accurate precision (the order given, most accurate first).

The choice is made once per set of candidates (a spec change builds new ones): swapping engines is
a rollout, not something to do with every change of the rate.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Final

from tailpilot.api.autoscaling import BatchingConfig
from tailpilot.api.engine import EngineProfile
from tailpilot.policy.config import PolicyConfig
from tailpilot.policy.core import fewest_replicas_at
from tailpilot.policy.gpu_choice import capacity_at_slo

REASON_FEWEST_REPLICAS: Final = "FewestReplicasForSLO"
REASON_WAITING: Final = "WaitingForProfiles"
REASON_NONE_USABLE: Final = "NoPrecisionUsable"


@dataclass(frozen=True)
class PrecisionOption:
    """One precision's engine, as far as it is known."""

    precision: str
    #: Its profile; None until profiled.
    profile: EngineProfile | None
    #: Why it cannot serve (accuracy out of tolerance, a failed build or profile); empty when it can.
    unusable: str = ""


@dataclass(frozen=True)
class PrecisionFigures:
    """What one precision would need at the observed rate."""

    precision: str
    replicas: int | None
    capacity_per_replica_per_s: float | None
    why_not: str = ""


@dataclass(frozen=True)
class PrecisionChoice:
    """The precision to serve (None: not yet, or none can) and why."""

    precision: str | None
    reason: str
    message: str
    figures: tuple[PrecisionFigures, ...]


def choose_precision(
    options: tuple[PrecisionOption, ...], *, config: PolicyConfig, rate_per_s: float, batching: BatchingConfig
) -> PrecisionChoice:
    """The precision needing the fewest replicas at `rate_per_s` among the usable ones (pure)."""
    pending = [o.precision for o in options if o.profile is None and not o.unusable]
    figures: list[PrecisionFigures] = []
    for option in options:
        if option.unusable or option.profile is None:
            why = option.unusable or "not profiled yet"
            figures.append(PrecisionFigures(option.precision, None, None, why))
            continue
        n = fewest_replicas_at(
            config=config,
            profile=option.profile,
            rate_per_s=rate_per_s,
            batching=batching,
            most=config.max_replicas,
        )
        capacity = round(capacity_at_slo(config=config, profile=option.profile, batching=batching), 2)
        why = "" if n is not None else f"{config.max_replicas} replica(s) (the bound) are too few"
        figures.append(PrecisionFigures(option.precision, n, capacity, why))
    done = tuple(figures)
    if pending:
        return PrecisionChoice(
            None, REASON_WAITING, f"waiting for the profiles of {', '.join(pending)}", done
        )
    order = {o.precision: i for i, o in enumerate(options)}
    usable = [f for f in done if f.capacity_per_replica_per_s is not None]
    if not usable:
        return PrecisionChoice(None, REASON_NONE_USABLE, f"no precision can serve: {_describe(done)}", done)
    best = min(
        usable,
        key=lambda f: (
            f.replicas if f.replicas is not None else math.inf,
            -(f.capacity_per_replica_per_s or 0.0),
            order[f.precision],
        ),
    )
    others = [f for f in done if f.precision != best.precision]
    message = (
        f"{best.precision}: {_replicas(best)} at {rate_per_s:.1f} req/s, "
        f"{best.capacity_per_replica_per_s:.1f} req/s per replica within the SLO"
        + (f" ({_describe(tuple(others))})" if others else "")
    )
    return PrecisionChoice(best.precision, REASON_FEWEST_REPLICAS, message, done)


def _replicas(f: PrecisionFigures) -> str:
    return f"{f.replicas} replica(s)" if f.replicas is not None else "more replicas than the bound"


def _describe(figures: tuple[PrecisionFigures, ...]) -> str:
    return "; ".join(
        f"{f.precision}: {f.why_not}"
        if f.capacity_per_replica_per_s is None
        else f"{f.precision}: {_replicas(f)}, {f.capacity_per_replica_per_s:.1f} req/s per replica"
        for f in figures
    )
