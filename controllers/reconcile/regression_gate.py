"""The regression gate: hold a new engine that predicts worse than the serving one.

Pure over the pass context: the comparison is `policy.regression.compare_engines`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

from tailpilot.api import constants as c
from tailpilot.api.engine import ProfileSummary
from tailpilot.api.v1alpha1 import EngineStatus
from tailpilot.controllers.core.conditions import ConditionUpdate, is_true
from tailpilot.controllers.core.events import EventRecord
from tailpilot.controllers.core.status import (
    batching_in_force,
    comparison_status,
    replicas_in_force,
    service_time_of,
)
from tailpilot.controllers.reconcile.pass_context import ReconcilePass
from tailpilot.policy.regression import compare_engines


def accepts_engine(annotations: Mapping[str, str], engine_key: str) -> bool:
    """Whether the accept annotation names this engine (its full key, or at least its first 12 characters)."""
    named = (annotations.get(c.ANNOTATION_ACCEPT_ENGINE) or "").strip()
    return len(named) >= 12 and engine_key.startswith(named)


def _nothing_held(message: str) -> ConditionUpdate:
    return ConditionUpdate(c.CONDITION_ROLLOUT_BLOCKED, c.STATUS_FALSE, c.REASON_NOTHING_HELD, message)


def regression_gate(
    p: ReconcilePass, built: EngineStatus, summary: ProfileSummary | None
) -> ConditionUpdate | None:
    """Hold a new engine that predicts worse than the serving one; EngineReady if held, else None.

    RolloutBlocked goes to the pass's gate; the comparison onto its status.
    """
    isvc, status = p.isvc, p.status
    serving, old = status.engine, status.profile
    # (The engine serving itself never gets here: the engine stage keeps it as is.)
    if serving is not None and old is not None and summary is not None and old.hardware != summary.hardware:
        p.gate.append(
            _nothing_held(
                f"a move from {old.hardware} to {summary.hardware}: products are compared by the cost "
                "of holding the SLO (status.gpu), not engine against engine",
            )
        )
        return None
    if serving is None or old is None or summary is None:
        p.gate.append(
            _nothing_held(
                "nothing to compare the new engine with (no serving engine with a profile, or no "
                "profile of the new one)",
            )
        )
        return None
    batching = batching_in_force(isvc, status)
    comparison = compare_engines(
        serving=service_time_of(old),
        serving_max_batch=batching.max_batch_size,
        candidate=summary.service_time,
        candidate_max_batch=isvc.spec.batching.max_batch_size,
        batching=batching,
        rate_per_s=(status.observed.request_rate if status.observed else None) or 0.0,
        replicas=replicas_in_force(isvc, status),
    )
    budget = isvc.spec.rollout.max_latency_regression_percent
    accepted = accepts_engine(isvc.metadata.get("annotations") or {}, built.key)
    verdict: Literal["Promoted", "Blocked", "Accepted"] = (
        "Promoted" if comparison.regression_percent <= budget else "Accepted" if accepted else "Blocked"
    )
    previous = status.engine_comparison
    first_time = previous is None or (previous.candidate_engine_key, previous.verdict) != (built.key, verdict)
    p.status = status.model_copy(
        update={"engine_comparison": comparison_status(comparison, serving.key, built.key, verdict)}
    )
    figures = f"engine {built.key[:12]} against serving {serving.key[:12]} {comparison.describe()}"
    if verdict == "Blocked":
        message = (
            f"held: {figures}; worse by more than "
            f"spec.rollout.maxLatencyRegressionPercent ({budget:g}%). "
            f"The serving engine keeps serving; to serve the new one anyway, annotate the service "
            f"{c.ANNOTATION_ACCEPT_ENGINE}={built.key[:12]}"
        )
        p.gate.append(
            ConditionUpdate(c.CONDITION_ROLLOUT_BLOCKED, c.STATUS_TRUE, c.REASON_LATENCY_REGRESSION, message)
        )
        if first_time:
            p.events.append(EventRecord("Warning", c.REASON_LATENCY_REGRESSION, message))
        return ConditionUpdate(c.CONDITION_ENGINE_READY, c.STATUS_FALSE, c.REASON_LATENCY_REGRESSION, message)
    reason = c.REASON_REGRESSION_ACCEPTED if verdict == "Accepted" else c.REASON_WITHIN_REGRESSION_BUDGET
    p.gate.append(ConditionUpdate(c.CONDITION_ROLLOUT_BLOCKED, c.STATUS_FALSE, reason, figures))
    if first_time:
        p.events.append(
            EventRecord(
                "Warning" if verdict == "Accepted" else "Normal",
                reason,
                f"{figures}"
                + (f"; accepted by {c.ANNOTATION_ACCEPT_ENGINE}" if verdict == "Accepted" else ""),
            )
        )
    return None


def release_stale_hold(p: ReconcilePass) -> None:
    """RolloutBlocked False when the engine it held is no longer what the spec asks for."""
    if not p.gate and is_true(p.status.conditions, c.CONDITION_ROLLOUT_BLOCKED):
        # The held engine is no longer what the spec asks for (a later change replaced it).
        p.gate.append(_nothing_held("the spec no longer asks for the engine that was held"))
