"""Events the controllers post about an InferenceService (what `kubectl describe` shows)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from tailpilot.controllers.core.clock import iso_time
from tailpilot.controllers.core.seams import PostsEvents


@dataclass(frozen=True)
class EventRecord:
    """A Kubernetes Event to post about the InferenceService."""

    type: Literal["Normal", "Warning"]
    reason: str
    message: str


def post_events(
    kube: PostsEvents, involved: dict[str, Any], events: Iterable[EventRecord], *, now: datetime
) -> None:
    """Post each Event about `involved` (one API call each)."""
    stamp = iso_time(now)
    for event in events:
        kube.post_event(involved, type_=event.type, reason=event.reason, message=event.message, now=stamp)
