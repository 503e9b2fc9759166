"""A minimal HTTP/1.1 client for the load generator: keep-alive POSTs of one prepared body.

Why not httpx: a load generator must not be the bottleneck of what it measures, and on one core
of this machine httpx's AsyncClient could not keep an open-loop schedule above about 400 requests
per second (the client's core 72% busy, requests refused for the in-flight bound, a send lag of
tens of ms; docs/benchmarks/validation.md). This client does only what the generator needs: it
writes a prebuilt request on a pooled keep-alive connection and reads the answer by its
Content-Length (or its chunks). No TLS, no redirects, no proxies, no cookies.

Failures raise `RequestFailed` whose `kind` names them as the generator counts them:
`ConnectError` (no connection), `ReadError` (the connection broke mid-answer),
`RemoteProtocolError` (not an HTTP/1.1 answer), `timeout`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

_Connection = tuple[asyncio.StreamReader, asyncio.StreamWriter]
#: The longest header block accepted (Triton's answers carry a few short headers).
MAX_HEADER_BYTES = 64 * 1024


class RequestFailed(Exception):
    """A request that got no HTTP answer; `kind` is the counter's name for it."""

    def __init__(self, kind: str, message: str = "") -> None:
        super().__init__(f"{kind}: {message}" if message else kind)
        self.kind = kind


@dataclass(frozen=True)
class Target:
    """Where a URL's requests go."""

    host: str
    port: int
    path: str

    @classmethod
    def of(cls, url: str) -> Target:
        parts = urlsplit(url)
        if parts.scheme != "http" or not parts.hostname:
            raise ValueError(f"only http://host[:port]/path URLs are supported, got {url!r}")
        path = parts.path or "/"
        return cls(parts.hostname, parts.port or 80, path + (f"?{parts.query}" if parts.query else ""))

    @property
    def host_header(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"


def request_bytes(target: Target, body: bytes, headers: Mapping[str, str]) -> bytes:
    """The whole HTTP/1.1 POST, head and body (pure)."""
    lines = [f"POST {target.path} HTTP/1.1", f"Host: {target.host_header}", f"Content-Length: {len(body)}"]
    lines += [
        f"{name}: {value}"
        for name, value in headers.items()
        if name.lower() not in ("host", "content-length")
    ]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


@dataclass(frozen=True)
class ResponseHead:
    """The status and the headers that decide how to read the body and whether to keep the connection."""

    status: int
    content_length: int | None
    chunked: bool
    keep_alive: bool


def parse_head(block: bytes) -> ResponseHead:
    """Parse a response's status line and headers, up to and including the blank line (pure).

    Raises:
        RequestFailed: RemoteProtocolError for anything that is not an HTTP/1.x response head.
    """
    try:
        text = block.decode("latin-1")
        status_line, *header_lines = text.split("\r\n")
        version, code, *_ = status_line.split(" ", 2)
        if not version.startswith("HTTP/1.") or len(code) != 3:
            raise ValueError(status_line)
        headers: dict[str, str] = {}
        for line in header_lines:
            if line:
                name, _, value = line.partition(":")
                headers[name.strip().lower()] = value.strip()
        length = headers.get("content-length")
        connection = headers.get("connection", "").lower()
        return ResponseHead(
            status=int(code),
            content_length=int(length) if length is not None else None,
            chunked="chunked" in headers.get("transfer-encoding", "").lower(),
            keep_alive=connection != "close" and (version == "HTTP/1.1" or connection == "keep-alive"),
        )
    except ValueError as exc:
        raise RequestFailed("RemoteProtocolError", repr(block[:80])) from exc


async def _read_body(reader: asyncio.StreamReader, head: ResponseHead) -> None:
    """Read (and drop) the body the head announces."""
    if head.chunked:
        while True:
            size_line = await reader.readuntil(b"\r\n")
            size = int(size_line.split(b";", 1)[0].strip(), 16)
            if size == 0:
                while await reader.readuntil(b"\r\n") != b"\r\n":  # trailers, then the blank line
                    pass
                return
            await reader.readexactly(size + 2)
    elif head.content_length is not None:
        await reader.readexactly(head.content_length)
    else:
        await reader.read()  # delimited by the connection's end


class Http1Client:
    """Keep-alive connections per host and port; `post` sends one request on an idle one or a new one."""

    def __init__(self, *, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self._idle: dict[tuple[str, int], list[_Connection]] = {}
        self._requests: dict[tuple[str, bytes, tuple[tuple[str, str], ...]], tuple[Target, bytes]] = {}
        self._open: set[asyncio.StreamWriter] = set()

    def _prepared(self, url: str, body: bytes, headers: Mapping[str, str]) -> tuple[Target, bytes]:
        key = (url, body, tuple(headers.items()))
        prepared = self._requests.get(key)
        if prepared is None:
            target = Target.of(url)
            prepared = self._requests[key] = (target, request_bytes(target, body, headers))
            if len(self._requests) > 1024:  # one entry per base URL in practice; bounded anyway
                self._requests.pop(next(iter(self._requests)))
        return prepared

    async def post(self, url: str, body: bytes, headers: Mapping[str, str]) -> int:
        """POST `body` to `url`; the response status once the whole answer is read.

        A kept-alive connection the server closed in the meantime fails before a byte of the
        answer arrives; the request is then sent once more on a new connection, as HTTP/1.1
        clients do for idempotent retries of requests that were never answered.

        Raises:
            RequestFailed: No complete answer (see the module doc for the kinds).
        """
        target, data = self._prepared(url, body, headers)
        try:
            async with asyncio.timeout(self.timeout_s):
                reused = self._take(target)
                if reused is not None:
                    answered = await self._exchange(target, reused, data, retry_silent_close=True)
                    if answered is not None:
                        return answered
                connection = await self._connect(target)
                answered = await self._exchange(target, connection, data, retry_silent_close=False)
                assert answered is not None
                return answered
        except TimeoutError as exc:
            raise RequestFailed("timeout") from exc

    def _take(self, target: Target) -> _Connection | None:
        idle = self._idle.get((target.host, target.port))
        while idle:
            connection = idle.pop()
            if not connection[1].is_closing():
                return connection
            self._open.discard(connection[1])
        return None

    async def _connect(self, target: Target) -> _Connection:
        try:
            connection = await asyncio.open_connection(target.host, target.port, limit=MAX_HEADER_BYTES)
        except OSError as exc:
            raise RequestFailed("ConnectError", str(exc)) from exc
        self._open.add(connection[1])
        return connection

    async def _exchange(
        self, target: Target, connection: _Connection, data: bytes, *, retry_silent_close: bool
    ) -> int | None:
        """Send and read one request; None when a reused connection closed without answering."""
        reader, writer = connection
        keep = False
        try:
            writer.write(data)
            await writer.drain()
            try:
                block = await reader.readuntil(b"\r\n\r\n")
            except asyncio.IncompleteReadError as exc:
                if retry_silent_close and not exc.partial:
                    return None
                raise
            except asyncio.LimitOverrunError as exc:
                raise RequestFailed("RemoteProtocolError", "response head too long") from exc
            head = parse_head(block)
            await _read_body(reader, head)
            keep = head.keep_alive
            return head.status
        except (asyncio.IncompleteReadError, ConnectionError) as exc:
            if retry_silent_close and isinstance(exc, ConnectionError):
                return None  # reset on a reused connection before the answer: send it again
            raise RequestFailed("ReadError", str(exc)) from exc
        except ValueError as exc:  # a malformed chunk size
            raise RequestFailed("RemoteProtocolError", str(exc)) from exc
        finally:
            if keep:
                self._idle.setdefault((target.host, target.port), []).append(connection)
            else:
                self._open.discard(writer)
                writer.close()

    async def aclose(self) -> None:
        """Close every connection."""
        for writer in list(self._open):
            writer.close()
        self._open.clear()
        self._idle.clear()
