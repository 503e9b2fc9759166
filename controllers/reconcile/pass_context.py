"""The context of one reconcile pass, and what the pass returns.

Every stage reads and changes one `ReconcilePass`: the status as it evolves, the Events to post,
the regression gate's conditions, the other condition updates and the next pass's delay.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from tailpilot.api.engine import BuildResult
from tailpilot.api.v1alpha1 import InferenceService, InferenceServiceStatus
from tailpilot.controllers.core.admin_key import AdminKey
from tailpilot.controllers.core.conditions import ConditionUpdate
from tailpilot.controllers.core.events import EventRecord


@dataclass(frozen=True)
class ReconcileResult:
    """What a pass did and when the next one is due (seconds)."""

    requeue_after: float
    status_written: bool = False
    children_written: int = 0
    #: The service is served and its autoscaler is on (or it asks for backlog rotation): its loop
    #: reads the pods' metrics every few seconds and runs the fast rules it asks for.
    fast_checks: bool = False
    #: A canary is being analysed: its loop runs the canary analysis every few seconds.
    canary_analysis: bool = False


@dataclass
class ReconcilePass:
    """One pass over one admitted InferenceService, as its stages move it along.

    Attributes:
        body: The object as read at the start of the pass.
        isvc: The validated service; from the candidates' stage on, pinned to the GPU product and
            the precision chosen (what its pods run).
        admin: The service's admin key (its Secret made sure of).
        status: The status as it evolves through the stages.
        generation: The spec generation the pass works on.
        events: The Events to post at the end of the pass.
        gate: RolloutBlocked, as the regression gate (or the rollout strategy) said it.
        conditions: The other condition updates, in the order they are written.
        engine_condition: EngineReady, once the engine stage said it.
        served: The engine serving after the engine stage (None: none built yet).
        rollout_condition: RolloutReady, once the rollout stage said it.
        requeue_after: Seconds until the next pass: the minimum of what the stages asked for.
        children_written: The children's writes this pass.
    """

    body: dict[str, Any]
    isvc: InferenceService
    admin: AdminKey
    status: InferenceServiceStatus
    generation: int
    events: list[EventRecord] = field(default_factory=list)
    gate: list[ConditionUpdate] = field(default_factory=list)
    conditions: list[ConditionUpdate] = field(default_factory=list)
    engine_condition: ConditionUpdate | None = None
    served: BuildResult | None = None
    rollout_condition: ConditionUpdate | None = None
    requeue_after: float = math.inf
    children_written: int = 0

    def requeue_within(self, seconds: float) -> None:
        """Have the next pass no later than `seconds` from now (the earliest a stage asks for wins)."""
        self.requeue_after = min(self.requeue_after, seconds)

    def engine_is(self, condition: ConditionUpdate, requeue_after: float) -> None:
        """The engine stage's word: EngineReady, and when the engine wants the next pass."""
        self.engine_condition = condition
        self.requeue_within(requeue_after)

    @property
    def engine_ready(self) -> ConditionUpdate:
        """EngineReady as the engine stage (or a later fix-up) said it."""
        if self.engine_condition is None:
            raise RuntimeError("EngineReady read before the engine stage said it")
        return self.engine_condition

    def updates(self) -> list[ConditionUpdate]:
        """Every condition update of the pass, in the order they are merged."""
        return [self.engine_ready, *self.gate, *self.conditions]
