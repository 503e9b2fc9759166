"""The activator's wake, as the operator reads it: the `tailpilot.io/wake-requested-at` annotation.

The activator sets it (a merge patch, `tailpilot.activator.waking`) to the RFC 3339 UTC time at which
it asked for a replica of a service with none ready: the first request of a cold episode. The
operator's pass wakes the service when it is newer than the last scale to zero
(`tailpilot.controllers.reconcile.zero_routing`); the autoscaler dates the requests held since then
from it, to size the wake (`tailpilot.policy.wake`).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime

from tailpilot.api.constants import ANNOTATION_WAKE_REQUESTED


def wake_requested_at(annotations: Mapping[str, str] | None) -> datetime | None:
    """The wake annotation among `annotations` as a time (None: absent or not RFC 3339)."""
    raw = (annotations or {}).get(ANNOTATION_WAKE_REQUESTED)
    if not isinstance(raw, str):
        return None
    try:
        at = datetime.fromisoformat(raw.replace("Z", "+00:00"))
    except ValueError:
        return None
    return at if at.tzinfo is not None else at.replace(tzinfo=UTC)
