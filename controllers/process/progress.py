"""Whether the operator's service loops still make progress, for the liveness probe (pure).

A process can look alive while doing nothing: its event loop answers `/healthz` and its election
thread renews the Lease while every reconcile worker waits on something that never returns (a call
without a bound, a lock, a pool whose every thread is stuck). Each service loop marks when a pass
(reconcile, control period, canary analysis) begins and ends; a pass in flight for longer than
`MAX_PASS_S` fails the liveness probe, so the kubelet restarts the operator (and, with leader
election, the standby takes over). A pass waiting for a free worker counts as in flight: an
exhausted pool is the same failure.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from tailpilot.controllers.core.clock import SYSTEM_CLOCK, Clock

#: Longest a pass may be in flight before the operator counts as stuck. Each API call it makes is
#: bounded (5 s connect, 60 s read, 3 attempts with at most 10 s between them) and a pass makes a
#: few of them in a row, so a pass this long is not waiting on one slow call.
MAX_PASS_S = 600.0


@dataclass
class PassWatch:
    """The passes in flight, by service, and when each began (monotonic seconds)."""

    clock: Clock = SYSTEM_CLOCK
    began: dict[tuple[str, str], float] = field(default_factory=dict)

    @contextmanager
    def watching(self, key: tuple[str, str]) -> Iterator[None]:
        """Mark one pass of `key` in flight for the duration of the block."""
        self.began[key] = self.clock.monotonic()
        try:
            yield
        finally:
            self.began.pop(key, None)

    def problem(self, *, bound_s: float = MAX_PASS_S) -> str | None:
        """Why the operator is stuck (the oldest pass past `bound_s`), or None while it progresses."""
        if not self.began:
            return None
        key, began = min(self.began.items(), key=lambda item: item[1])
        age = self.clock.monotonic() - began
        if age <= bound_s:
            return None
        stuck = sum(1 for at in self.began.values() if self.clock.monotonic() - at > bound_s)
        return (
            f"the pass of {key[0]}/{key[1]} has run {age:.0f} s (bound {bound_s:.0f} s); "
            f"{stuck} pass(es) stuck"
        )
