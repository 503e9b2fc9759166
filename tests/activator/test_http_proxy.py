"""The HTTP front end over real sockets on 127.0.0.1: forward, hold, wake, bounds, timeouts, retries."""

from __future__ import annotations

import asyncio
import json

import numpy as np
import tritonclient.http.aio as triton_http
from multidict import CIMultiDict
from tritonclient.http import InferInput, InferRequestedOutput
from yarl import URL

from tailpilot.activator.backends import EndpointTable
from tailpilot.activator.routing import ServiceKey
from tests.activator.harness import HTTP_HOST, SERVICE, eventually, fast_settings, known_table, started
from tests.activator.replicas import DyingReplica, EchoHttpReplica

INFER = "/v2/models/resnet/infer"


def infer_body(value: float = 1.0) -> bytes:
    tensor = {"name": "INPUT0", "datatype": "FP32", "shape": [1, 2], "data": [value, value + 1]}
    return json.dumps({"inputs": [tensor]}).encode()


def error_of(body: bytes) -> str:
    parsed = json.loads(body)
    assert set(parsed) == {"error"}
    return str(parsed["error"])


def test_a_ready_service_is_forwarded_at_once_with_tritons_own_client() -> None:
    async def scenario() -> None:
        async with EchoHttpReplica() as replica, started() as harness:
            harness.table.set_endpoints(SERVICE, [replica.endpoint])
            client = triton_http.InferenceServerClient(url=f"127.0.0.1:{harness.running.http_port}")
            try:
                host = {"Host": HTTP_HOST}
                assert await client.is_server_ready(headers=host)
                assert await client.is_model_ready("resnet", headers=host)
                data = np.arange(6, dtype=np.float32).reshape(2, 3)
                for binary in (False, True):  # JSON tensors, and Triton's binary extension
                    tensor = InferInput("INPUT0", [2, 3], "FP32")
                    tensor.set_data_from_numpy(data, binary_data=binary)
                    result = await client.infer(
                        "resnet",
                        [tensor],
                        outputs=[InferRequestedOutput("OUTPUT0", binary_data=binary)],
                        headers=host,
                    )
                    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), data)
            finally:
                await client.close()
            assert harness.waker.calls == []  # ready: nothing to wake
            assert replica.seen[-1].headers["Host"] == HTTP_HOST

    asyncio.run(scenario())


def test_method_path_query_body_and_end_to_end_headers_pass_and_hop_by_hop_ones_do_not() -> None:
    async def scenario() -> None:
        async with EchoHttpReplica() as replica, started() as harness:
            harness.table.set_endpoints(SERVICE, [replica.endpoint])
            headers = {
                "Host": HTTP_HOST,
                "X-Request-Id": "abc",
                "Content-Type": "application/x-custom",
                "Connection": "keep-alive, X-Hop",
                "X-Hop": "dropped",
                "Keep-Alive": "timeout=5",
                "TE": "trailers",
            }
            async with harness.session.put(
                URL(harness.url("/v2/repository/index?ready=true&x=%2F"), encoded=True),
                headers=headers,
                data=b"\x00\x01raw",
                skip_auto_headers=("User-Agent", "Accept", "Accept-Encoding"),
            ) as response:
                assert response.status == 200
                assert response.headers["X-Custom"] == "kept"
                assert response.headers["Set-Cookie"] == "a=1"
                seen = await response.json()
            assert seen["method"] == "PUT"
            assert seen["raw_path"] == "/v2/repository/index?ready=true&x=%2F"  # as sent, not re-encoded
            assert seen["body"] == "\x00\x01raw"
            seen_headers = CIMultiDict(seen["headers"])  # header names are case-insensitive
            assert seen_headers["X-Request-Id"] == "abc"
            assert seen_headers["Content-Type"] == "application/x-custom"
            for hop_by_hop in ("X-Hop", "Keep-Alive", "TE"):
                assert hop_by_hop not in seen_headers
            for not_sent in ("User-Agent", "Accept", "Accept-Encoding"):  # none added on the way
                assert not_sent not in CIMultiDict(replica.seen[-1].headers)

    asyncio.run(scenario())


def test_the_replicas_error_statuses_pass_through() -> None:
    async def scenario() -> None:
        async with EchoHttpReplica() as replica, started() as harness:
            harness.table.set_endpoints(SERVICE, [replica.endpoint])
            async with harness.session.get(
                harness.url("/status/418"), headers={"Host": HTTP_HOST}
            ) as response:
                assert response.status == 418
                assert error_of(await response.read()) == "I'm a teapot"

    asyncio.run(scenario())


def test_unknown_hosts_get_404_with_what_was_expected() -> None:
    async def scenario() -> None:
        async with started() as harness:
            for host, words in (
                ("resnet:8000", "expected NAME.NAMESPACE"),
                ("other.shop.svc.cluster.local", "no TailPilot InferenceService shop/other"),
                ("10.96.0.99:8000", "expected NAME.NAMESPACE"),
            ):
                status, _, body = await harness.post(INFER, host=host, data=infer_body())
                assert status == 404, host
                assert words in error_of(body)
            assert harness.waker.calls == []

    asyncio.run(scenario())


def test_a_cluster_ip_host_routes_to_its_service() -> None:
    async def scenario() -> None:
        table = EndpointTable()
        table.set_service(SERVICE, ["10.96.0.7"])
        table.mark_synced()
        async with EchoHttpReplica() as replica, started(table=table) as harness:
            table.set_endpoints(SERVICE, [replica.endpoint])
            status, _, _ = await harness.post(INFER, host="10.96.0.7:8000", data=infer_body())
            assert status == 200

    asyncio.run(scenario())


def test_held_requests_wake_once_and_are_all_answered_when_a_replica_is_ready() -> None:
    async def scenario() -> None:
        async with EchoHttpReplica() as replica, started() as harness:
            held = [asyncio.create_task(harness.post(INFER, data=infer_body(n))) for n in range(8)]
            await eventually(lambda: harness.held() == 8)
            await eventually(lambda: len(harness.waker.calls) == 1)
            assert harness.waker.calls == [SERVICE]
            harness.table.set_endpoints(SERVICE, [replica.endpoint])
            answers = await asyncio.wait_for(asyncio.gather(*held), timeout=10.0)
            assert sorted(json.loads(body)["outputs"][0]["data"][0] for _, _, body in answers) == list(
                range(8)
            )
            assert {status for status, _, _ in answers} == {200}
            assert harness.waker.calls == [SERVICE]
            assert harness.held() == 0
            assert (
                b'tailpilot_activator_requests_total{outcome="forwarded_after_hold",protocol="http"} 8.0'
                in (await (await harness.session.get(harness.admin_url("/metrics"))).read())
            )

    asyncio.run(scenario())


def test_held_requests_spread_over_the_replicas_that_become_ready() -> None:
    async def scenario() -> None:
        async with (
            EchoHttpReplica(name="a", delay_s=0.2) as first,
            EchoHttpReplica(name="b", delay_s=0.2) as second,
        ):
            async with started() as harness:
                held = [asyncio.create_task(harness.post(INFER, data=infer_body())) for _ in range(6)]
                await eventually(lambda: harness.held() == 6)
                harness.table.set_endpoints(SERVICE, [first.endpoint, second.endpoint])
                answers = await asyncio.wait_for(asyncio.gather(*held), timeout=10.0)
                assert sorted(headers["X-Replica"] for _, headers, _ in answers) == ["a"] * 3 + ["b"] * 3

    asyncio.run(scenario())


def test_the_request_over_the_per_service_bound_is_refused_and_those_held_are_served() -> None:
    async def scenario() -> None:
        async with (
            EchoHttpReplica() as replica,
            started(settings=fast_settings(max_held_per_service=3)) as harness,
        ):
            held = [asyncio.create_task(harness.post(INFER, data=infer_body())) for _ in range(3)]
            await eventually(lambda: harness.held() == 3)
            status, headers, body = await harness.post(INFER, data=infer_body())
            assert status == 503
            assert headers["Retry-After"] == "5"
            message = error_of(body)
            assert "max held requests per service: 3" in message and "shop/resnet" in message
            harness.table.set_endpoints(SERVICE, [replica.endpoint])
            answers = await asyncio.wait_for(asyncio.gather(*held), timeout=10.0)
            assert [status for status, _, _ in answers] == [200, 200, 200]

    asyncio.run(scenario())


def test_the_byte_bound_counts_bodies_across_services() -> None:
    async def scenario() -> None:
        other = ServiceKey(namespace="shop", name="bert")
        settings = fast_settings(max_held_bytes=3000, max_body_bytes=2000)
        async with started(table=known_table(SERVICE, other), settings=settings) as harness:
            first = asyncio.create_task(harness.post(INFER, data=b"x" * 2000))
            await eventually(lambda: harness.held() == 1)
            status, headers, body = await harness.post(INFER, host="bert.shop", data=b"x" * 1001)
            assert status == 503 and "Retry-After" in headers
            assert "max held bytes: 3000" in error_of(body)
            fits = asyncio.create_task(harness.post(INFER, host="bert.shop", data=b"x" * 1000))  # exactly
            await eventually(lambda: harness.held(other) == 1)
            assert harness.running.activation.holds.held_bytes == 3000
            for task in (first, fits):
                task.cancel()
            await eventually(lambda: harness.running.activation.holds.held_bytes == 0)

    asyncio.run(scenario())


def test_a_declared_body_over_the_byte_bound_is_refused_before_it_is_sent() -> None:
    async def scenario() -> None:
        settings = fast_settings(max_held_bytes=3000, max_body_bytes=2000)
        async with started(settings=settings) as harness:
            first = asyncio.create_task(harness.post(INFER, data=b"x" * 2000))
            await eventually(lambda: harness.held() == 1)
            # Headers only: the body is never sent, and the answer comes all the same.
            reader, writer = await asyncio.open_connection("127.0.0.1", harness.running.http_port)
            writer.write(
                f"POST {INFER} HTTP/1.1\r\nHost: {HTTP_HOST}\r\nContent-Length: 1001\r\n\r\n".encode()
            )
            await writer.drain()
            status_line = await asyncio.wait_for(reader.readline(), timeout=5.0)
            assert status_line.startswith(b"HTTP/1.1 503")
            writer.close()
            await writer.wait_closed()
            first.cancel()
            await eventually(lambda: harness.held() == 0)

    asyncio.run(scenario())


def test_a_request_held_past_the_timeout_gets_504_naming_it() -> None:
    async def scenario() -> None:
        async with started(settings=fast_settings(hold_timeout_s=0.3)) as harness:
            status, _, body = await harness.post(INFER, data=infer_body())
            assert status == 504
            assert "hold timeout of 0.3 s" in error_of(body)
            assert harness.held() == 0
            assert harness.waker.calls == [SERVICE]

    asyncio.run(scenario())


def test_a_body_over_the_maximum_gets_413_declared_or_streamed() -> None:
    async def scenario() -> None:
        async with (
            EchoHttpReplica() as replica,
            started(settings=fast_settings(max_body_bytes=1000)) as harness,
        ):
            harness.table.set_endpoints(SERVICE, [replica.endpoint])
            status, _, body = await harness.post(INFER, data=b"x" * 1001)
            assert status == 413
            assert "maximum of 1000 bytes" in error_of(body)

            async def chunks():  # no Content-Length: found too large while read
                for _ in range(3):
                    yield b"x" * 500

            status, _, body = await harness.post(INFER, data=chunks())
            assert status == 413
            status, _, _ = await harness.post("/echo", data=b"x" * 1000)
            assert status == 200
            assert harness.waker.calls == []

    asyncio.run(scenario())


def test_a_replica_that_dies_mid_forward_is_retried_on_another() -> None:
    async def scenario() -> None:
        async with DyingReplica() as dying, EchoHttpReplica(name="alive") as alive, started() as harness:
            held = asyncio.create_task(harness.post(INFER, data=infer_body()))
            await eventually(lambda: harness.held() == 1)
            harness.table.set_endpoints(SERVICE, [dying.endpoint, alive.endpoint])
            # Whichever the pick tries first, the answer comes from the live one.
            status, headers, _ = await asyncio.wait_for(held, timeout=10.0)
            assert (status, headers["X-Replica"]) == (200, "alive")
            for _ in range(3):  # direct forwards too: one of them meets the dying replica first
                status, headers, _ = await harness.post(INFER, data=infer_body())
                assert (status, headers["X-Replica"]) == (200, "alive")
            assert dying.connections >= 1

    asyncio.run(scenario())


def test_when_every_replica_fails_the_client_gets_502() -> None:
    async def scenario() -> None:
        async with DyingReplica() as dying, started() as harness:
            harness.table.set_endpoints(SERVICE, [dying.endpoint])
            status, _, body = await harness.post(INFER, data=infer_body())
            assert status == 502
            assert "1 replica(s) of shop/resnet failed to answer" in error_of(body)

    asyncio.run(scenario())


def test_a_client_that_hangs_up_frees_its_hold() -> None:
    async def scenario() -> None:
        async with started() as harness:
            held = asyncio.create_task(harness.post(INFER, data=infer_body()))
            await eventually(lambda: harness.held() == 1)
            held.cancel()
            await eventually(lambda: harness.held() == 0)

    asyncio.run(scenario())


def test_health_readiness_and_metrics_are_on_the_admin_port() -> None:
    async def scenario() -> None:
        table = EndpointTable()
        table.set_service(SERVICE)
        async with started(table=table) as harness:
            async with harness.session.get(harness.admin_url("/healthz")) as response:
                assert response.status == 200
            async with harness.session.get(harness.admin_url("/readyz")) as response:
                assert response.status == 503  # not synced yet
            table.mark_synced()
            async with harness.session.get(harness.admin_url("/readyz")) as response:
                assert response.status == 200
            await harness.post(INFER, host="nobody.shop", data=b"{}")
            async with harness.session.get(harness.admin_url("/metrics")) as response:
                page = await response.text()
            for family in (
                "tailpilot_activator_held_requests",
                "tailpilot_activator_held_bytes",
                "tailpilot_activator_hold_seconds",
                "tailpilot_activator_wakes_total",
            ):
                assert family in page
            assert 'tailpilot_activator_requests_total{outcome="unknown_service",protocol="http"} 1.0' in page
            # The proxy port forwards every path, /metrics included: it is the model's.
            status, _, _ = await harness.post("/metrics", host="nobody.shop")
            assert status == 404

    asyncio.run(scenario())
