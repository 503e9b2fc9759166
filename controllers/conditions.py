"""Conditions on the InferenceService status (pure).

Kueue-style: each condition has type/status/reason/message/observedGeneration;
`lastTransitionTime` changes only when the status flips, so rewriting the same
facts produces an identical status and no write. Ready is derived from the
sub-conditions, as KServe does.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from tailpilot.api import constants as c


@dataclass(frozen=True)
class ConditionUpdate:
    """One condition the reconciler wants to set."""

    type: str
    status: str
    reason: str
    message: str = ""


def merge_conditions(
    existing: Iterable[dict[str, Any]], updates: Iterable[ConditionUpdate], *, generation: int, now: str
) -> list[dict[str, Any]]:
    """Apply updates to the existing condition list, keeping transition times of unchanged statuses."""
    by_type = {cond["type"]: dict(cond) for cond in existing}
    for update in updates:
        previous = by_type.get(update.type)
        transition = now
        if previous is not None and previous.get("status") == update.status:
            transition = previous.get("lastTransitionTime", now)
        by_type[update.type] = {
            "type": update.type,
            "status": update.status,
            "reason": update.reason,
            "message": update.message[:4096],
            "lastTransitionTime": transition,
            "observedGeneration": generation,
        }
    order = {t: i for i, t in enumerate(c.CONDITION_TYPES)}
    return sorted(by_type.values(), key=lambda cond: (order.get(cond["type"], len(order)), cond["type"]))


def condition(conditions: Iterable[dict[str, Any]], type_: str) -> dict[str, Any] | None:
    """The condition of a type, if present."""
    return next((cond for cond in conditions if cond.get("type") == type_), None)


def is_true(conditions: Iterable[dict[str, Any]], type_: str) -> bool:
    """Whether the condition of a type is True."""
    found = condition(conditions, type_)
    return bool(found and found.get("status") == c.STATUS_TRUE)


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
