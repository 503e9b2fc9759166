"""status.learned.idle: the traffic's idle stretches, written each period and read back on restart.

The scale-to-zero choice (`tailpilot.policy.idle`) prices a cold start against the idle time it
saves from the stretches it has seen. The control period keeps them in memory; without this copy on
the object an operator restart would forget them, and a service woken every few minutes would be
taken to zero after the bare idle window again until it had seen three more stretches. The history's
times are the autoscaler's clock (Unix seconds), so they are written as UTC times to the second.
"""

from __future__ import annotations

from datetime import UTC, datetime

from tailpilot.api.v1alpha1 import MAX_IDLE_STRETCHES, IdleHistoryStatus, IdleStretchStatus, LearnedStatus
from tailpilot.policy.idle import MAX_STRETCHES, IdleHistory, IdleStretch

assert MAX_IDLE_STRETCHES == MAX_STRETCHES, "the status keeps the whole idle history"


def _time(epoch_s: float) -> datetime:
    return datetime.fromtimestamp(round(epoch_s), tz=UTC)


def idle_status(history: IdleHistory) -> IdleHistoryStatus:
    """status.learned.idle for `history`."""
    return IdleHistoryStatus(
        idle_since=None if history.idle_since_s is None else _time(history.idle_since_s),
        observed_since=None if history.observed_since_s is None else _time(history.observed_since_s),
        stretches=[
            IdleStretchStatus(start=_time(s.start_s), seconds=round(s.length_s, 1))
            for s in history.stretches[-MAX_IDLE_STRETCHES:]
        ],
    )


def restored_idle(learned: LearnedStatus | None) -> IdleHistory:
    """The idle history status.learned kept (empty when it kept none)."""
    kept = learned.idle if learned is not None else None
    if kept is None:
        return IdleHistory()
    return IdleHistory(
        stretches=tuple(
            IdleStretch(start_s=s.start.timestamp(), length_s=s.seconds)
            for s in sorted(kept.stretches, key=lambda s: s.start)[-MAX_STRETCHES:]
        ),
        idle_since_s=None if kept.idle_since is None else kept.idle_since.timestamp(),
        observed_since_s=None if kept.observed_since is None else kept.observed_since.timestamp(),
    )
