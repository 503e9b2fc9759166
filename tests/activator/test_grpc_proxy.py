"""The gRPC front end over real sockets on 127.0.0.1: routing by authority, hold, wake, bounds, retries."""

from __future__ import annotations

import asyncio

import grpc
import grpc.aio
import numpy as np
import pytest
import tritonclient.grpc.aio as triton_grpc
from tritonclient.grpc import InferInput, service_pb2

from tailpilot.activator.grpc_proxy import authority_of, forwarded_metadata
from tests.activator.harness import GRPC_AUTHORITY, SERVICE, eventually, fast_settings, started
from tests.activator.replicas import DyingReplica, EchoGrpcReplica


def infer_request(value: int = 0, *, model: str = "resnet") -> service_pb2.ModelInferRequest:
    request = service_pb2.ModelInferRequest(model_name=model, id=str(value))
    tensor = request.inputs.add()
    tensor.name, tensor.datatype = "INPUT0", "INT32"
    tensor.shape.extend([1])
    request.raw_input_contents.append(np.array([value], dtype=np.int32).tobytes())
    return request


def echoed(response: service_pb2.ModelInferResponse) -> int:
    return int(np.frombuffer(response.raw_output_contents[0], dtype=np.int32)[0])


def test_a_ready_service_is_forwarded_at_once_with_tritons_own_client() -> None:
    async def scenario() -> None:
        async with EchoGrpcReplica() as replica, started() as harness:
            harness.table.set_endpoints(SERVICE, [replica.endpoint])
            client = triton_grpc.InferenceServerClient(
                url=f"127.0.0.1:{harness.running.grpc_port}",
                channel_args=[("grpc.default_authority", GRPC_AUTHORITY)],
            )
            try:
                assert await client.is_server_live()
                assert await client.is_server_ready()
                assert await client.is_model_ready("resnet")
                assert (await client.get_model_metadata("resnet", as_json=True))["platform"] == "echo"
                data = np.arange(6, dtype=np.float32).reshape(2, 3)
                tensor = InferInput("INPUT0", [2, 3], "FP32")
                tensor.set_data_from_numpy(data)
                result = await client.infer("resnet", [tensor], headers={"x-tenant": "shop"})
                np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), data)
            finally:
                await client.close()
            assert ("x-tenant", "shop") in replica.seen[-1]  # the client's metadata reached the replica
            assert harness.waker.calls == []

    asyncio.run(scenario())


def test_the_replicas_status_and_trailing_metadata_pass_through() -> None:
    async def scenario() -> None:
        async with EchoGrpcReplica(name="r1") as replica, started() as harness:
            harness.table.set_endpoints(SERVICE, [replica.endpoint])
            stub = harness.grpc_stub()
            call = stub.ModelInfer(infer_request(7))
            assert echoed(await call) == 7
            assert ("x-replica", "r1") in tuple(await call.trailing_metadata())
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await stub.ModelInfer(infer_request(model="missing"))
            assert refused.value.code() is grpc.StatusCode.NOT_FOUND
            assert refused.value.details() == "Request for unknown model: 'missing'"

    asyncio.run(scenario())


def test_unknown_authorities_get_not_found() -> None:
    async def scenario() -> None:
        async with started() as harness:
            for authority, words in (
                ("resnet:8001", "expected NAME.NAMESPACE"),
                ("other.shop.svc.cluster.local:8001", "no TailPilot InferenceService shop/other"),
            ):
                with pytest.raises(grpc.aio.AioRpcError) as refused:
                    await harness.grpc_stub(authority).ModelInfer(infer_request())
                assert refused.value.code() is grpc.StatusCode.NOT_FOUND
                assert words in (refused.value.details() or "")
            assert harness.waker.calls == []

    asyncio.run(scenario())


def test_held_calls_wake_once_and_are_all_answered_when_a_replica_is_ready() -> None:
    async def scenario() -> None:
        async with EchoGrpcReplica() as replica, started() as harness:
            stub = harness.grpc_stub()
            held = [asyncio.ensure_future(stub.ModelInfer(infer_request(n))) for n in range(8)]
            await eventually(lambda: harness.held() == 8)
            assert harness.waker.calls == [SERVICE]
            harness.table.set_endpoints(SERVICE, [replica.endpoint])
            answers = await asyncio.wait_for(asyncio.gather(*held), timeout=10.0)
            assert sorted(echoed(answer) for answer in answers) == list(range(8))
            assert harness.waker.calls == [SERVICE]

    asyncio.run(scenario())


def test_the_call_over_the_per_service_bound_gets_resource_exhausted() -> None:
    async def scenario() -> None:
        async with (
            EchoGrpcReplica() as replica,
            started(settings=fast_settings(max_held_per_service=3)) as harness,
        ):
            stub = harness.grpc_stub()
            held = [asyncio.ensure_future(stub.ModelInfer(infer_request(n))) for n in range(3)]
            await eventually(lambda: harness.held() == 3)
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await stub.ModelInfer(infer_request())
            assert refused.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
            assert "max held requests per service: 3" in (refused.value.details() or "")
            harness.table.set_endpoints(SERVICE, [replica.endpoint])
            answers = await asyncio.wait_for(asyncio.gather(*held), timeout=10.0)
            assert sorted(echoed(answer) for answer in answers) == [0, 1, 2]

    asyncio.run(scenario())


def test_a_call_held_past_the_timeout_gets_unavailable_naming_it() -> None:
    async def scenario() -> None:
        async with started(settings=fast_settings(hold_timeout_s=0.3)) as harness:
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await harness.grpc_stub().ModelInfer(infer_request())
            assert refused.value.code() is grpc.StatusCode.UNAVAILABLE
            assert "hold timeout of 0.3 s" in (refused.value.details() or "")
            assert harness.held() == 0

    asyncio.run(scenario())


def test_a_client_deadline_ends_the_hold() -> None:
    async def scenario() -> None:
        async with started() as harness:
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await harness.grpc_stub().ModelInfer(infer_request(), timeout=0.3)
            assert refused.value.code() is grpc.StatusCode.DEADLINE_EXCEEDED
            await eventually(lambda: harness.held() == 0)

    asyncio.run(scenario())


def test_a_message_over_the_maximum_body_gets_resource_exhausted() -> None:
    async def scenario() -> None:
        async with (
            EchoGrpcReplica() as replica,
            started(settings=fast_settings(max_body_bytes=1000)) as harness,
        ):
            harness.table.set_endpoints(SERVICE, [replica.endpoint])
            request = infer_request()
            request.raw_input_contents[0] = b"x" * 2000
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await harness.grpc_stub().ModelInfer(request)
            assert refused.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
            assert "1000" in (refused.value.details() or "")  # gRPC's own words name the limit
            assert replica.seen == []

    asyncio.run(scenario())


def test_a_replica_that_dies_mid_forward_is_retried_on_another() -> None:
    async def scenario() -> None:
        async with DyingReplica() as dying, EchoGrpcReplica(name="alive") as alive, started() as harness:
            stub = harness.grpc_stub()
            held = asyncio.ensure_future(stub.ModelInfer(infer_request(3)))
            await eventually(lambda: harness.held() == 1)
            harness.table.set_endpoints(SERVICE, [dying.endpoint, alive.endpoint])
            assert echoed(await asyncio.wait_for(held, timeout=10.0)) == 3
            for value in range(3):
                assert echoed(await stub.ModelInfer(infer_request(value))) == value
            assert dying.connections >= 1

    asyncio.run(scenario())


def test_streaming_is_refused_with_unimplemented() -> None:
    async def scenario() -> None:
        async with EchoGrpcReplica() as replica, started() as harness:
            harness.table.set_endpoints(SERVICE, [replica.endpoint])
            # No request message: the activator refuses the call without reading its stream, and a
            # message the client is still sending then races the refusal (grpcio's client reports
            # INTERNAL "Failed execute_batch" for a write to a call the server has already closed).
            stream = harness.grpc_stub().ModelStreamInfer(iter(()))
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                async for _ in stream:
                    pass
            assert refused.value.code() is grpc.StatusCode.UNIMPLEMENTED
            assert "ModelStreamInfer" in (refused.value.details() or "")

    asyncio.run(scenario())


def test_metadata_to_forward_and_authority_readers() -> None:
    assert forwarded_metadata((("user-agent", "x"), ("grpc-accept-encoding", "gzip"), ("x-a", "1"))) == (
        ("x-a", "1"),
    )

    class Accessor:
        def experimental_authority(self) -> str:
            return "m.ns:8001"

    assert authority_of(Accessor()) == "m.ns:8001"
    assert authority_of(object()) == ""
