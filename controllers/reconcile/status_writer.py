"""The status write at the end of a pass (and of a pass cut short), and the pass's Events."""

from __future__ import annotations

from typing import Any

from tailpilot.api import constants as c
from tailpilot.api.v1alpha1 import InferenceServiceStatus
from tailpilot.controllers.core.conditions import ConditionUpdate, merge_conditions
from tailpilot.controllers.core.events import EventRecord, post_events
from tailpilot.controllers.core.status import decode_status, fit_status, status_patch
from tailpilot.controllers.reconcile.deps import PassDeps


class StatusWriter:
    """Writes a pass's status when it differs from the stored one; posts Events."""

    def __init__(self, deps: PassDeps) -> None:
        self.deps = deps

    def write(
        self,
        body: dict[str, Any],
        status: InferenceServiceStatus,
        updates: list[ConditionUpdate],
        generation: int,
    ) -> bool:
        """Merge `updates` into the status and patch it when it changed; whether it was written."""
        now = self.deps.now()
        new_status = status.model_copy(
            update={
                "conditions": merge_conditions(status.conditions, updates, generation=generation, now=now),
                "observed_generation": generation,
            }
        )
        # Cut to the CRD's limits before comparing: the stored status is the cut one, and an uncut
        # status would differ from it on every pass.
        fitted = fit_status(new_status)
        if fitted.status == decode_status(body.get("status")):
            return False
        self.deps.kube.patch_status(body, status_patch(body.get("status"), fitted.status))
        if fitted.cuts:
            cut = "; ".join(fitted.cuts)
            self.post(
                body,
                [
                    EventRecord(
                        "Warning", c.REASON_STATUS_CUT, f"status fields cut to the CRD's limits: {cut}"
                    )
                ],
            )
        return True

    def post(self, body: dict[str, Any], events: list[EventRecord]) -> None:
        """Post `events` about the service."""
        post_events(self.deps.kube, body, events, now=self.deps.now())
