"""Fakes shared by the tests of several tiers."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class FakeClock:
    """A `tailpilot.controllers.clock.Clock` that moves only when a test moves it (seconds)."""

    now: float = 0.0

    def time(self) -> float:
        return self.now

    def monotonic(self) -> float:
        return self.now

    def advance(self, seconds: float) -> float:
        self.now += seconds
        return self.now
