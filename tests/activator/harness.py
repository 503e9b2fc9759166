"""A started activator for a test: in-memory backends, a recording waker, short timeouts, 127.0.0.1.

Tests run their scenario with `asyncio.run` (no asyncio plugin); every wait is bounded: through
`eventually` (a condition polled until a deadline) or `asyncio.wait_for`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field, replace

import aiohttp
import grpc
import grpc.aio
from tritonclient.grpc import service_pb2_grpc

from tailpilot.activator.app import ActivatorSettings, RunningActivator, start_activator
from tailpilot.activator.backends import EndpointTable
from tailpilot.activator.cold_start import ColdStartWriter
from tailpilot.activator.holding import HoldLimits
from tailpilot.activator.routing import ServiceKey

SERVICE = ServiceKey(namespace="shop", name="resnet")
HTTP_HOST = "resnet.shop.svc.cluster.local:8000"
GRPC_AUTHORITY = "resnet.shop.svc.cluster.local:8001"
#: Short enough for fast tests, long enough for a loaded CI machine to start a replica in time.
HOLD_TIMEOUT_S = 5.0


class RecordingWaker:
    """A `Waker` that records each call; the first `failures` calls raise, as an unreachable API server."""

    def __init__(self, *, failures: int = 0) -> None:
        self.calls: list[ServiceKey] = []
        self.failures = failures

    async def wake(self, key: ServiceKey) -> None:
        self.calls.append(key)
        if len(self.calls) <= self.failures:
            raise ConnectionError("the API server is unreachable")


def fast_settings(**limits: float) -> ActivatorSettings:
    """Settings for a test: 127.0.0.1, any free ports, short timeouts; `limits` override `HoldLimits`."""
    hold_limits = replace(HoldLimits(hold_timeout_s=HOLD_TIMEOUT_S), **limits)  # type: ignore[arg-type]
    return ActivatorSettings(
        bind_address="127.0.0.1",
        http_port=0,
        grpc_port=0,
        admin_port=0,
        limits=hold_limits,
        forward_timeout_s=10.0,
        wake_retry_first_s=0.01,
        wake_retry_max_s=0.05,
        grpc_max_concurrent_rpcs=64,
    )


def known_table(*keys: ServiceKey) -> EndpointTable:
    """A synced table knowing `keys` (default: `SERVICE`), none with a ready replica."""
    table = EndpointTable()
    for key in keys or (SERVICE,):
        table.set_service(key, ())
    table.mark_synced()
    return table


async def eventually(condition: Callable[[], bool], *, timeout: float = 5.0, interval: float = 0.01) -> None:
    """Wait until `condition()` holds; fail after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout} s")
        await asyncio.sleep(interval)


async def eventually_async(
    condition: Callable[[], Awaitable[bool]], *, timeout: float = 5.0, interval: float = 0.01
) -> None:
    """Wait until `await condition()` holds; fail after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not await asyncio.wait_for(condition(), timeout=timeout):
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout} s")
        await asyncio.sleep(interval)


@dataclass
class Harness:
    """A running activator with its table, waker and an HTTP client session."""

    running: RunningActivator
    table: EndpointTable
    waker: RecordingWaker
    session: aiohttp.ClientSession
    channels: list[grpc.aio.Channel] = field(default_factory=list)

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.running.http_port}{path}"

    def admin_url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.running.admin_port}{path}"

    def held(self, key: ServiceKey = SERVICE) -> int:
        return self.running.activation.holds.held(key)

    async def post(
        self, path: str, *, host: str = HTTP_HOST, **kwargs: object
    ) -> tuple[int, dict[str, str], bytes]:
        """POST through the activator; the status, headers and body."""
        headers = {"Host": host, **kwargs.pop("headers", {})}  # type: ignore[dict-item]
        async with self.session.post(self.url(path), headers=headers, **kwargs) as response:  # type: ignore[arg-type]
            return response.status, dict(response.headers), await response.read()

    def grpc_stub(self, authority: str = GRPC_AUTHORITY) -> service_pb2_grpc.GRPCInferenceServiceStub:
        """A KServe v2 gRPC stub to the activator, calling with `authority` (closed with the harness)."""
        channel = grpc.aio.insecure_channel(
            f"127.0.0.1:{self.running.grpc_port}", options=(("grpc.default_authority", authority),)
        )
        self.channels.append(channel)
        return service_pb2_grpc.GRPCInferenceServiceStub(channel)


@asynccontextmanager
async def started(
    *,
    table: EndpointTable | None = None,
    waker: RecordingWaker | None = None,
    settings: ActivatorSettings | None = None,
    cold_start_writer: ColdStartWriter | None = None,
) -> AsyncIterator[Harness]:
    """An activator on 127.0.0.1 over `table` (default: `SERVICE` known, cold); drained on exit.

    Cold starts are recorded through `cold_start_writer` (default: only logged).
    """
    table = table if table is not None else known_table()
    waker = waker if waker is not None else RecordingWaker()
    running = await start_activator(
        settings or fast_settings(), backends=table, waker=waker, cold_start_writer=cold_start_writer
    )
    harness = Harness(running=running, table=table, waker=waker, session=aiohttp.ClientSession())
    try:
        yield harness
    finally:
        await harness.session.close()
        for channel in harness.channels:
            await channel.close()
        await running.drain()
