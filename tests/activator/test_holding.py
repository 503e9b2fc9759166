"""The bounds on held requests, their count, and the bounded wait for a ready replica."""

from __future__ import annotations

import asyncio

import pytest

from tailpilot.activator.backends import Endpoint, EndpointTable, Transport
from tailpilot.activator.errors import HoldRefused, HoldTimedOut
from tailpilot.activator.holding import (
    BOUND_BYTES,
    BOUND_PER_SERVICE,
    MIB,
    HoldLimits,
    Holds,
    hold_refusal,
    wait_until_ready,
)
from tailpilot.activator.routing import ServiceKey

A = ServiceKey(namespace="shop", name="a")
B = ServiceKey(namespace="shop", name="b")
LIMITS = HoldLimits(max_held_per_service=2, max_held_bytes=100, max_body_bytes=60)


def test_the_defaults_are_the_documented_ones() -> None:
    limits = HoldLimits()
    assert (
        limits.max_held_per_service,
        limits.max_held_bytes,
        limits.hold_timeout_s,
        limits.max_body_bytes,
    ) == (
        1000,
        256 * MIB,
        300.0,
        64 * MIB,
    )


@pytest.mark.parametrize(
    "limits",
    [
        {"max_held_per_service": 0},
        {"max_held_bytes": 0},
        {"hold_timeout_s": 0.0},
        {"max_body_bytes": 0},
        {"max_body_bytes": 200, "max_held_bytes": 100},  # a body that could never be held
    ],
)
def test_limits_that_could_hold_nothing_are_refused(limits: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        HoldLimits(**limits)  # type: ignore[arg-type]


def test_the_per_service_bound_names_itself_and_its_value() -> None:
    refusal = hold_refusal(key=A, held_here=2, held_bytes=0, body_bytes=1, limits=LIMITS)
    assert refusal is not None
    assert (refusal.bound, refusal.limit) == (BOUND_PER_SERVICE, 2)
    assert "max held requests per service: 2" in refusal.message
    assert "shop/a" in refusal.message


def test_the_byte_bound_counts_the_new_body() -> None:
    assert hold_refusal(key=A, held_here=0, held_bytes=40, body_bytes=60, limits=LIMITS) is None
    refusal = hold_refusal(key=A, held_here=0, held_bytes=41, body_bytes=60, limits=LIMITS)
    assert refusal is not None
    assert (refusal.bound, refusal.limit) == (BOUND_BYTES, 100)
    assert "max held bytes: 100" in refusal.message


def test_holds_count_per_service_and_bytes_across_services_and_release() -> None:
    changes: list[tuple[ServiceKey, int, int]] = []
    holds = Holds(LIMITS, on_change=lambda key, held, held_bytes: changes.append((key, held, held_bytes)))
    with holds.holding(A, 10), holds.holding(A, 20):
        with pytest.raises(HoldRefused, match="per service"):
            with holds.holding(A, 1):
                pass
        with holds.holding(B, 60):
            assert (holds.held(A), holds.held(B), holds.held_bytes, holds.held_total) == (2, 1, 90, 3)
            with pytest.raises(HoldRefused, match="held bytes"):
                with holds.holding(B, 11):
                    pass
    assert (holds.held(A), holds.held(B), holds.held_bytes) == (0, 0, 0)
    assert changes[-1] == (A, 0, 0)


def test_a_request_that_fails_while_held_is_released() -> None:
    holds = Holds(LIMITS)
    with pytest.raises(RuntimeError):
        with holds.holding(A, 10):
            raise RuntimeError("the client went away")
    assert (holds.held(A), holds.held_bytes) == (0, 0)


def test_wait_until_ready_returns_the_endpoints_of_the_transport_once_published() -> None:
    async def scenario() -> None:
        table = EndpointTable()
        table.set_service(A)
        grpc_only = Endpoint(address="10.0.0.1", http_port=None, grpc_port=8001)
        both = Endpoint(address="10.0.0.2", http_port=8000, grpc_port=8001)
        waiting = asyncio.create_task(wait_until_ready(table, A, Transport.HTTP, timeout_s=5.0))
        await asyncio.sleep(0)
        table.set_endpoints(A, [grpc_only])  # a change, but no HTTP port yet: keep waiting
        await asyncio.sleep(0)
        assert not waiting.done()
        table.set_endpoints(A, [grpc_only, both])
        assert await asyncio.wait_for(waiting, timeout=5.0) == (both,)

    asyncio.run(scenario())


def test_wait_until_ready_times_out_with_the_timeout_in_the_message() -> None:
    async def scenario() -> None:
        table = EndpointTable()
        table.set_service(A)
        with pytest.raises(HoldTimedOut, match=r"hold timeout of 0.05 s"):
            await wait_until_ready(table, A, Transport.GRPC, timeout_s=0.05)

    asyncio.run(scenario())
