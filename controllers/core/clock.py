"""The one clock every loop of the operator asks (injected; tests pass a fake one).

Two readings, because they answer different questions: `time()` is wall time (what goes on the
object's status and Events, and the policy's `now_s`, which Prometheus samples are compared
with); `monotonic()` measures intervals between checks (never jumps with NTP or a VM resume).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Protocol


class Clock(Protocol):
    """Where the controllers get the time from."""

    def time(self) -> float:
        """Wall time, seconds since the epoch."""
        ...

    def monotonic(self) -> float:
        """Seconds on a clock that never goes back, for intervals."""
        ...


@dataclass(frozen=True)
class SystemClock:
    """The machine's clocks."""

    def time(self) -> float:  # noqa: D102
        return time.time()

    def monotonic(self) -> float:  # noqa: D102
        return time.monotonic()


SYSTEM_CLOCK: Clock = SystemClock()


def utc_now(clock: Clock) -> datetime:
    """The clock's wall time as an aware UTC datetime, to the second (as Kubernetes stores times)."""
    return datetime.fromtimestamp(clock.time(), UTC).replace(microsecond=0)


def iso_time(moment: datetime) -> str:
    """RFC 3339 in UTC, seconds precision, as Kubernetes writes times."""
    return moment.astimezone(UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")
