"""A canary's verdict and the conditions that say it are written in one status patch."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest

from tailpilot.api import constants as c
from tailpilot.api.v1alpha1 import CanaryStatus
from tailpilot.controllers.core.events import EventRecord
from tailpilot.controllers.core.metrics import OperatorMetrics
from tailpilot.controllers.rollout.canary_analysis import CanaryAnalyst
from tests.controllers.test_ctrl_prometheus_access import DEFAULT, KEY, StatusKube, _serving_body


class EventKube(StatusKube):
    def __init__(self, body: dict[str, Any]) -> None:
        super().__init__(body)
        self.events: list[str] = []

    def post_event(
        self, involved: dict[str, Any], *, type_: str, reason: str, message: str, now: str
    ) -> None:
        self.events.append(reason)


@pytest.mark.parametrize(
    ("phase", "reason", "blocked", "engine_ready"),
    [
        ("RolledBack", c.REASON_CANARY_ROLLED_BACK, "True", "False"),
        ("Promoting", c.REASON_CANARY_PROMOTED, "False", None),
    ],
)
def test_the_verdicts_patch_carries_its_phase_and_its_conditions(
    phase: str, reason: str, blocked: str, engine_ready: str | None
) -> None:
    started = datetime(2026, 1, 1, tzinfo=UTC).isoformat()
    analysing = {"engine": {"key": KEY}, "phase": "Analysing", "replicas": 1, "analysisStartedAt": started}
    body = _serving_body(DEFAULT, canary=analysing)
    kube = EventKube(body)
    verdict = CanaryStatus.model_validate(analysing).model_copy(
        update={"phase": phase, "reason": "CanaryOverSLO", "message": "the canary's P99 breaks the SLO"}
    )

    async def record() -> None:
        async with httpx.AsyncClient() as http:  # never sent on: the verdict is written, not measured
            analyst = CanaryAnalyst(
                kube=kube, http=http, metrics=OperatorMetrics(), default_prometheus_url=DEFAULT
            )
            await analyst._record(body, verdict, EventRecord("Warning", reason, "verdict"))  # noqa: SLF001

    asyncio.run(record())
    (patch,) = kube.patches
    assert patch["canary"]["phase"] == phase
    conditions = {x["type"]: x for x in patch["conditions"]}
    rollout_blocked = conditions[c.CONDITION_ROLLOUT_BLOCKED]
    assert (rollout_blocked["status"], rollout_blocked["reason"]) == (blocked, reason)
    if engine_ready is not None:
        assert (
            conditions[c.CONDITION_ENGINE_READY]["status"],
            conditions[c.CONDITION_ENGINE_READY]["reason"],
        ) == (
            engine_ready,
            reason,
        )
    # The condition the service had before is kept, with its own transition time.
    assert conditions[c.CONDITION_ROLLOUT_READY]["lastTransitionTime"] == "2026-01-01T00:00:00Z"
    assert kube.events == [reason]
