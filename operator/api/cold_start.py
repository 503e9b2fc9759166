"""The contract between the activator and the operator about one cold start: the episode's times.

A **cold episode** of a service starts when the activator holds its first request (no ready
replica) and ends when the answer to that request, forwarded to the replica that came up, is
complete. The activator writes what it saw, once per episode, as the annotation
`tailpilot.io/cold-start` on the InferenceService (`ANNOTATION_COLD_START`), a JSON object of RFC
3339 UTC times to the millisecond:

    {"heldAt": "2026-12-06T05:31:30.123Z", "wokeAt": "2026-12-06T05:31:30.161Z",
     "backendReadyAt": "2026-12-06T05:32:14.902Z", "answeredAt": "2026-12-06T05:32:15.040Z"}

`heldAt` and `answeredAt` are always there; `wokeAt` (the wake patch landed) and `backendReadyAt`
(the activator first saw a ready replica of the service) are left out when the activator did not
see them in the episode (a wake sent in an earlier episode, a replica started by someone else).
The operator reads it back (`parse_episode`), with the serving pod's own timestamps, into
`status.coldStart` (`tailpilot.policy.cold_start`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime

#: The JSON keys of the annotation, in the episode's order.
HELD_AT, WOKE_AT, BACKEND_READY_AT, ANSWERED_AT = "heldAt", "wokeAt", "backendReadyAt", "answeredAt"

#: The longest annotation value read back: four times are about 130 characters; anything far longer
#: was not written by the activator.
MAX_ANNOTATION_CHARS = 1024


def rfc3339_ms(moment: datetime) -> str:
    """`moment` in RFC 3339, UTC, to the millisecond (truncated): `2026-01-31T12:00:00.123Z`."""
    utc = moment.astimezone(UTC)
    return (
        utc.replace(microsecond=utc.microsecond // 1000 * 1000, tzinfo=None).isoformat(
            timespec="milliseconds"
        )
        + "Z"
    )


def parse_time(text: object) -> datetime:
    """An RFC 3339 time with a zone (`Z` or an offset) as an aware UTC datetime; ValueError otherwise."""
    if not isinstance(text, str):
        raise ValueError(f"expected an RFC 3339 time, got {text!r}")
    moment = datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
    if moment.tzinfo is None:
        raise ValueError(f"{text!r} has no time zone")
    return moment.astimezone(UTC)


@dataclass(frozen=True)
class ColdStartEpisode:
    """What the activator saw of one cold start (aware UTC datetimes, millisecond precision)."""

    #: The episode's first request was held (the service had no ready replica).
    held_at: datetime
    #: The first answer forwarded to the episode's first held request was complete.
    answered_at: datetime
    #: The wake patch landed on the InferenceService (None: no wake was sent in this episode).
    woke_at: datetime | None = None
    #: The activator first saw a ready replica of the service (None: not seen in this episode).
    backend_ready_at: datetime | None = None

    def __post_init__(self) -> None:
        if self.answered_at < self.held_at:
            raise ValueError(f"{ANSWERED_AT} is before {HELD_AT}")

    def to_annotation(self) -> str:
        """The annotation's value: compact JSON, the times present only."""
        times = {
            HELD_AT: self.held_at,
            WOKE_AT: self.woke_at,
            BACKEND_READY_AT: self.backend_ready_at,
            ANSWERED_AT: self.answered_at,
        }
        return json.dumps(
            {key: rfc3339_ms(at) for key, at in times.items() if at is not None}, separators=(",", ":")
        )


def parse_episode(text: str) -> ColdStartEpisode:
    """The episode in an annotation's value; ValueError (saying why) when it is not one."""
    if len(text) > MAX_ANNOTATION_CHARS:
        raise ValueError(f"{len(text)} characters, more than an episode's {MAX_ANNOTATION_CHARS}")
    try:
        document = json.loads(text)
    except json.JSONDecodeError as error:
        raise ValueError(f"not JSON: {error}") from None
    if not isinstance(document, dict):
        raise ValueError("not a JSON object")
    for key in (HELD_AT, ANSWERED_AT):
        if key not in document:
            raise ValueError(f"no {key}")

    def optional(key: str) -> datetime | None:
        value = document.get(key)
        return None if value is None else parse_time(value)

    return ColdStartEpisode(
        held_at=parse_time(document[HELD_AT]),
        answered_at=parse_time(document[ANSWERED_AT]),
        woke_at=optional(WOKE_AT),
        backend_ready_at=optional(BACKEND_READY_AT),
    )
