"""The load generator's HTTP/1.1 client against raw asyncio servers that answer in every allowed way."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Awaitable, Callable

import pytest

from tailpilot.bench.http1 import Http1Client, RequestFailed, Target, parse_head, request_bytes

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


async def _read_request(reader: asyncio.StreamReader) -> bytes:
    head = await reader.readuntil(b"\r\n\r\n")
    length = next(
        int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")
    )
    return head + await reader.readexactly(length)


async def _with_server(handler: Handler, client_calls: Callable[[str], Awaitable[object]]) -> object:
    server = await asyncio.start_server(handler, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        return await client_calls(f"http://127.0.0.1:{port}/v2/models/m/infer")
    finally:
        server.close()
        await server.wait_closed()


def test_request_is_a_complete_post_with_the_payload_headers() -> None:
    data = request_bytes(Target.of("http://10.0.0.5:8000/v2/models/m/infer"), b"abc", {"Content-Type": "x/y"})
    assert data == (
        b"POST /v2/models/m/infer HTTP/1.1\r\nHost: 10.0.0.5:8000\r\nContent-Length: 3\r\n"
        b"Content-Type: x/y\r\n\r\nabc"
    )
    assert Target.of("http://[fd00::5]:8000/x").host_header == "[fd00::5]:8000"
    with pytest.raises(ValueError, match="http://"):
        Target.of("https://example.com/x")


def test_head_parsing() -> None:
    head = parse_head(b"HTTP/1.1 200 OK\r\nContent-Length: 12\r\n\r\n")
    assert (head.status, head.content_length, head.chunked, head.keep_alive) == (200, 12, False, True)
    closing = parse_head(b"HTTP/1.1 503 Busy\r\nConnection: close\r\nTransfer-Encoding: chunked\r\n\r\n")
    assert (closing.status, closing.chunked, closing.keep_alive) == (503, True, False)
    assert not parse_head(b"HTTP/1.0 200 OK\r\n\r\n").keep_alive
    with pytest.raises(RequestFailed) as failed:
        parse_head(b"SSH-2.0-OpenSSH\r\n\r\n")
    assert failed.value.kind == "RemoteProtocolError"


def test_keep_alive_reuses_one_connection_and_reads_chunked_and_sized_bodies() -> None:
    connections = 0

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal connections
        connections += 1
        for turn in range(3):
            request = await _read_request(reader)
            assert request.endswith(b"payload")
            if turn == 1:
                writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n")
            else:
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
            await writer.drain()
        writer.close()

    async def calls(url: str) -> list[int]:
        client = Http1Client(timeout_s=5)
        try:
            return [await client.post(url, b"payload", {}) for _ in range(3)]
        finally:
            await client.aclose()

    assert asyncio.run(_with_server(handler, calls)) == [200, 200, 200]
    assert connections == 1


def test_a_kept_alive_connection_the_server_closed_is_replaced_and_the_request_sent_again() -> None:
    served = 0
    closed = asyncio.Event()

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal served
        await _read_request(reader)
        served += 1
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
        await writer.drain()
        writer.close()  # an idle timeout: closes without saying Connection: close
        await writer.wait_closed()
        closed.set()

    async def calls(url: str) -> list[int]:
        client = Http1Client(timeout_s=5)
        try:
            first = await client.post(url, b"x", {})
            await asyncio.wait_for(closed.wait(), 5)
            return [first, await client.post(url, b"x", {})]
        finally:
            await client.aclose()

    assert asyncio.run(_with_server(handler, calls)) == [200, 200]
    assert served == 2


def test_failures_are_named_as_the_generator_counts_them() -> None:
    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await _read_request(reader)
            await asyncio.sleep(5)  # a server that never answers (the client gives up first)
        finally:
            writer.close()

    async def broken(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nshort")
        await writer.drain()
        writer.close()

    async def kind(url: str, timeout_s: float = 5) -> str:
        client = Http1Client(timeout_s=timeout_s)
        try:
            await client.post(url, b"x", {})
        except RequestFailed as exc:
            return exc.kind
        finally:
            await client.aclose()
        return "answered"

    assert asyncio.run(_with_server(silent, lambda url: kind(url, timeout_s=0.2))) == "timeout"
    assert asyncio.run(_with_server(broken, kind)) == "ReadError"
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed_port = s.getsockname()[1]
    assert asyncio.run(kind(f"http://127.0.0.1:{closed_port}/x")) == "ConnectError"
