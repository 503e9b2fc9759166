"""Conditions on the InferenceService status (pure).

Kueue-style: each condition has type/status/reason/message/observedGeneration;
`lastTransitionTime` changes only when the status flips, so rewriting the same
facts produces an identical status and no write. Ready is derived from the
sub-conditions, as KServe does.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Literal, cast

from tailpilot.api import constants as c
from tailpilot.api.v1alpha1 import Condition

#: The longest condition message the CRD takes.
MAX_CONDITION_MESSAGE = 4096


@dataclass(frozen=True)
class ConditionUpdate:
    """One condition a controller wants to set."""

    type: str
    status: str
    reason: str
    message: str = ""


def merge_conditions(
    existing: Iterable[Condition], updates: Iterable[ConditionUpdate], *, generation: int, now: datetime
) -> list[Condition]:
    """Apply updates to the existing condition list, keeping transition times of unchanged statuses."""
    by_type = {cond.type: cond for cond in existing}
    for update in updates:
        previous = by_type.get(update.type)
        transition = now
        if previous is not None and previous.status == update.status:
            transition = previous.last_transition_time
        by_type[update.type] = Condition(
            type=update.type,
            status=cast(Literal["True", "False", "Unknown"], update.status),
            reason=update.reason,
            message=update.message[:MAX_CONDITION_MESSAGE],
            last_transition_time=transition,
            observed_generation=generation,
        )
    order = {t: i for i, t in enumerate(c.CONDITION_TYPES)}
    return sorted(by_type.values(), key=lambda cond: (order.get(cond.type, len(order)), cond.type))


def condition_of(conditions: Iterable[Condition], type_: str) -> Condition | None:
    """The condition of a type, if the status has one."""
    return next((cond for cond in conditions if cond.type == type_), None)


def is_true(conditions: Iterable[Condition], type_: str) -> bool:
    """Whether the condition of a type is True."""
    return any(cond.type == type_ and cond.status == c.STATUS_TRUE for cond in conditions)


def derive_ready(
    *, engine: ConditionUpdate, rollout: ConditionUpdate, serving_engine: bool
) -> ConditionUpdate:
    """Ready means "serving the model": a rolled-out Deployment on a built engine.

    A refused update (a new engine that fails to build) keeps the old engine
    serving: Ready stays True there and Degraded says why, so `kubectl wait
    --for=condition=Ready` and load balancers keep trusting a working service.
    """
    if rollout.status == c.STATUS_TRUE and serving_engine:
        return ConditionUpdate(c.CONDITION_READY, c.STATUS_TRUE, c.REASON_ALL_READY, "serving")
    blocker = engine if engine.status != c.STATUS_TRUE else rollout
    return ConditionUpdate(c.CONDITION_READY, c.STATUS_FALSE, blocker.reason, blocker.message)
