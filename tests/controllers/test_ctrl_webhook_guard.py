"""The webhook's token taken from where it lives when rotated, and its rate limit (real HTTP)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from tailpilot.controllers.alerting.alert_webhook import make_webhook_app
from tailpilot.controllers.alerting.webhook_guard import RateLimit, RotatingToken
from tailpilot.controllers.core.metrics import OperatorMetrics
from tests.controllers.test_ctrl_alert_webhook import alert, auth, counts, payload


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def time(self) -> float:
        return self.now

    def monotonic(self) -> float:
        return self.now


def test_a_rotated_token_file_is_taken_on_the_first_request_presenting_it(tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("old-token\n")
    clock, reads = Clock(), []

    def read() -> str:
        reads.append(clock.now)
        return token_file.read_text()

    async def scenario() -> list[bool]:
        token = RotatingToken(read, refresh_s=30.0, clock=clock)
        token_file.write_text("new-token\n")  # the Secret was rotated: the mounted file changes
        seen = [await token.matches("old-token")]  # not re-read: the old one still matches
        clock.now += 31
        seen.append(await token.matches("new-token"))  # another token presented, a re-read due
        seen += [await token.matches("old-token"), await token.matches("new-token")]
        return seen

    assert asyncio.run(scenario()) == [True, True, False, True]
    assert reads == [1000.0, 1031.0]


def test_guessing_tokens_costs_one_read_per_period_and_a_bad_read_keeps_the_token() -> None:
    clock, answers = Clock(), ["good", "", "also-bad-read"]

    def read() -> str:
        answer = answers.pop(0)
        if answer == "also-bad-read":
            raise OSError("Secret unreachable")
        return answer

    async def scenario() -> list[bool]:
        token = RotatingToken(read, refresh_s=30.0, clock=clock)
        guesses = [await token.matches(f"guess-{i}") for i in range(100)]  # no re-read: not due
        clock.now += 30
        guesses.append(await token.matches("guess"))  # re-read finds it empty: "good" stays
        clock.now += 30
        guesses.append(await token.matches("guess"))  # re-read fails: "good" stays
        return [*guesses, await token.matches("good")]

    seen = asyncio.run(scenario())
    assert not any(seen[:-1]) and seen[-1]
    assert answers == []  # three reads in all: at the start and once per period


def test_an_empty_token_is_refused_at_start() -> None:
    with pytest.raises(ValueError, match="non-empty"):
        RotatingToken(lambda: "  \n")


def test_the_bucket_allows_its_burst_then_its_rate() -> None:
    clock = Clock()
    limit = RateLimit(rate_per_s=2.0, burst=3, clock=clock)
    assert [limit.take() for _ in range(3)] == [0.0, 0.0, 0.0]
    assert limit.take() == pytest.approx(0.5)  # the next in half a second at 2 a second
    clock.now += 0.5
    assert limit.take() == 0.0
    clock.now += 100  # refilled to its burst, not beyond
    assert [limit.take() for _ in range(4)][-1] > 0


def test_a_flood_without_the_token_is_limited_in_its_own_bucket_and_never_refuses_alertmanager() -> None:
    metrics = OperatorMetrics()
    clock = Clock()

    async def scenario() -> list[tuple[int, str | None]]:
        app = make_webhook_app(
            token="s3cret-token",
            on_alert=lambda n: asyncio.sleep(0),
            metrics=metrics,
            rate_limit=RateLimit(rate_per_s=1.0, burst=2, clock=clock),
        )
        out = []
        async with TestClient(TestServer(app, host="127.0.0.1")) as client:
            # Five requests without the token: two refused 401, then 429 once their bucket is spent;
            # Alertmanager's two still go through, then its own bucket is spent too.
            for headers in (*[auth("wrong")] * 5, auth(), auth(), auth()):
                r: Any = await client.post("/alerts", json=payload(alert()), headers=headers)
                out.append((r.status, r.headers.get("Retry-After")))
            clock.now += 1.0
            r = await client.post("/alerts", json=payload(alert()), headers=auth())
            out.append((r.status, None))
        return out

    assert asyncio.run(scenario()) == [
        (401, None),
        (401, None),
        (429, "1"),
        (429, "1"),
        (429, "1"),
        (200, None),
        (200, None),
        (429, "1"),
        (200, None),
    ]
    assert counts(metrics) == {"accepted": 3.0, "unauthorized": 2.0, "rate_limited": 4.0}
