"""What a report holds: the request-time parts it breaks down, and the series over the period.

Its own module so that both the report (`report`, which queries and writes) and its figure
(`report_plot`) import it, and neither imports the other back: `report` loads the figure only when
it writes one.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tailpilot.api.v1alpha1 import ColdStartStatus

#: Request-time parts Triton exports as cumulative microseconds (the breakdown, in stacking order).
PARTS: Mapping[str, str] = {
    "queue": "nv_inference_queue_duration_us",
    "compute_input": "nv_inference_compute_input_duration_us",
    "compute_infer": "nv_inference_compute_infer_duration_us",
    "compute_output": "nv_inference_compute_output_duration_us",
}


@dataclass
class ReportData:
    """What a report shows: the series on a common time axis (NaN where Prometheus had nothing)."""

    namespace: str
    name: str
    slo_ms: float
    start_s: float
    end_s: float
    step_s: float
    times_s: list[float]
    series: dict[str, list[float]]
    #: status.decisions within the period (time, action, reason, replicas and batching before/after).
    decisions: list[dict[str, Any]] = field(default_factory=list)
    #: The objective, its error budget and the learned headroom as the object's status held them when
    #: the report was made (`status_view.budget_words`; None before the service's first decision).
    budget_now: str | None = None
    #: What of the status the report reads (its error budget, learned headroom, decisions) could not
    #: be read through the operator's codec (`status_view.StatusRead.unreadable`); empty when all was.
    unreadable: tuple[str, ...] = ()
    #: The last cold start from zero on the object's status when the report was made (None: none yet).
    cold_start: ColdStartStatus | None = None

    def to_json(self) -> dict[str, Any]:
        """The report's data as JSON (NaN as null; `unreadable` only when something was)."""
        out: dict[str, Any] = {
            "namespace": self.namespace,
            "name": self.name,
            "sloMs": self.slo_ms,
            "start": self.start_s,
            "end": self.end_s,
            "stepSeconds": self.step_s,
            "times": self.times_s,
            "series": {k: [v if math.isfinite(v) else None for v in vs] for k, vs in self.series.items()},
            "decisions": self.decisions,
            "budgetNow": self.budget_now,
            "coldStart": (
                None if self.cold_start is None else self.cold_start.model_dump(by_alias=True, mode="json")
            ),
        }
        if self.unreadable:
            out["unreadable"] = list(self.unreadable)
        return out
