"""What stands in front of the Alertmanager webhook: its bearer token, kept current, and a rate limit.

- `RotatingToken`: the token is re-read from where it lives (a file, e.g. a mounted Secret, or the
  Secret through the API) when a request presents another one, at most every `refresh_s`: a rotated
  Secret is taken without a restart, while a client guessing tokens costs one read per period, not
  one per guess. A read that fails or finds an empty token keeps the token in force (and says so).
- `RateLimit`: a token bucket. The webhook keeps two: one for requests with the token, charged
  before their body is read, and one for requests without it, so whoever reaches the port cannot
  make the operator parse and log without bound, nor spend what Alertmanager's requests draw on.
  Alertmanager sends a group per route and interval, a few a minute; the default allows bursts of 50
  and 20 a second.

Pure but for the injected `read` and clock.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from tailpilot.controllers.core.clock import SYSTEM_CLOCK, Clock

log = logging.getLogger("tailpilot.webhook")

#: Seconds between two re-reads of the token prompted by requests presenting another one.
TOKEN_REFRESH_S = 30.0
#: Requests a second the webhook takes on average, and at once.
RATE_PER_S = 20.0
BURST = 50


class RotatingToken:
    """The webhook's bearer token, re-read when a request presents another one (at most every `refresh_s`)."""

    def __init__(
        self, read: Callable[[], str], *, refresh_s: float = TOKEN_REFRESH_S, clock: Clock = SYSTEM_CLOCK
    ) -> None:
        """Read the token once now.

        Raises:
            ValueError: When it is empty: the webhook never serves without a token.
        """
        token = read().strip()
        if not token:
            raise ValueError("the webhook needs a non-empty bearer token")
        self._read, self._refresh_s, self._clock = read, refresh_s, clock
        self._token = token.encode()
        self._read_at = clock.monotonic()
        self._lock = asyncio.Lock()

    async def matches(self, presented: str) -> bool:
        """Whether `presented` is the token in force, after a re-read when it is not and one is due."""
        candidate = presented.strip().encode()
        if hmac.compare_digest(candidate, self._token):
            return True
        async with self._lock:  # one re-read for a burst of mismatches
            if self._clock.monotonic() - self._read_at >= self._refresh_s:
                self._read_at = self._clock.monotonic()
                await asyncio.to_thread(self._refresh)
        return hmac.compare_digest(candidate, self._token)

    def _refresh(self) -> None:
        try:
            token = self._read().strip()
        except Exception:  # noqa: BLE001 - a store unreachable now keeps the token in force
            log.exception("webhook token: re-read failed; the token in force stays")
            return
        if not token:
            log.error("webhook token: re-read found it empty; the token in force stays")
            return
        if token.encode() != self._token:
            log.info("webhook token: rotated")
            self._token = token.encode()


@dataclass
class RateLimit:
    """A token bucket: `burst` requests at once, `rate_per_s` on average."""

    rate_per_s: float = RATE_PER_S
    burst: int = BURST
    clock: Clock = SYSTEM_CLOCK
    _tokens: float = field(init=False)
    _at: float = field(init=False)

    def __post_init__(self) -> None:
        self._tokens, self._at = float(self.burst), self.clock.monotonic()

    def take(self) -> float:
        """Take one request: 0 when allowed, else the seconds until the next one is."""
        now = self.clock.monotonic()
        self._tokens = min(float(self.burst), self._tokens + (now - self._at) * self.rate_per_s)
        self._at = now
        if self._tokens >= 1.0:
            self._tokens -= 1.0
            return 0.0
        return (1.0 - self._tokens) / self.rate_per_s
