"""Shutdown: readiness turns 503, the proxy ports stop accepting, held requests finish, then it ends."""

from __future__ import annotations

import asyncio

import aiohttp
import grpc
import grpc.aio
import pytest

from tailpilot.activator.backends import Endpoint
from tests.activator.harness import HTTP_HOST, SERVICE, eventually, fast_settings, started
from tests.activator.replicas import EchoGrpcReplica, EchoHttpReplica
from tests.activator.test_grpc_proxy import echoed, infer_request

INFER = "/v2/models/resnet/infer"


async def refuses_connections(url: str) -> bool:
    async with aiohttp.ClientSession() as fresh:  # a new connection, not a kept-alive one
        try:
            async with fresh.get(url, headers={"Host": HTTP_HOST}):
                return False
        except aiohttp.ClientConnectorError:
            return True


def test_drain_stops_accepting_and_lets_held_requests_finish() -> None:
    async def scenario() -> None:
        async with EchoHttpReplica() as http_replica, EchoGrpcReplica() as grpc_replica, started() as harness:
            held_http = asyncio.create_task(harness.post(INFER, data=b'{"inputs": []}'))
            held_grpc = asyncio.ensure_future(harness.grpc_stub().ModelInfer(infer_request(5)))
            await eventually(lambda: harness.held() == 2)

            draining = asyncio.create_task(harness.running.drain())
            await eventually(lambda: harness.running.draining)
            async with harness.session.get(harness.admin_url("/readyz")) as response:
                assert response.status == 503
            assert await refuses_connections(harness.url("/v2/health/ready"))
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                async with grpc.aio.insecure_channel(f"127.0.0.1:{harness.running.grpc_port}") as channel:
                    await channel.unary_unary("/inference.GRPCInferenceService/ServerLive")(b"", timeout=2.0)
            assert refused.value.code() is grpc.StatusCode.UNAVAILABLE
            assert not draining.done()

            # A replica becomes ready while draining: the held requests are still forwarded.
            both = Endpoint(address="127.0.0.1", http_port=http_replica.port, grpc_port=grpc_replica.port)
            harness.table.set_endpoints(SERVICE, [both])
            status, _, _ = await asyncio.wait_for(held_http, timeout=10.0)
            assert status == 200
            assert echoed(await asyncio.wait_for(held_grpc, timeout=10.0)) == 5
            await asyncio.wait_for(draining, timeout=10.0)

    asyncio.run(scenario())


def test_drain_ends_within_the_hold_timeout_when_no_replica_comes() -> None:
    async def scenario() -> None:
        async with started(settings=fast_settings(hold_timeout_s=0.5)) as harness:
            held = asyncio.create_task(harness.post(INFER, data=b"{}"))
            await eventually(lambda: harness.held() == 1)
            await asyncio.wait_for(harness.running.drain(), timeout=5.0)
            status, _, _ = await asyncio.wait_for(held, timeout=5.0)
            assert status == 504

    asyncio.run(scenario())
