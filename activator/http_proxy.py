"""The HTTP front end: KServe v2 over HTTP/1.1 (aiohttp), forwarded through the activation.

Every method and path is forwarded (`/v2/models/{m}/infer`, `/v2/health/ready`, metadata, and
any other path a model server answers): the proxy port belongs to the model, so the activator's
own health and metrics live on the admin port (`admin_http`). A request is forwarded with its
method, path, query, body and end-to-end headers (the original `Host` included); hop-by-hop
headers (RFC 9110 section 7.6.1, and any the `Connection` header names) are dropped both ways.

The replica's answer is read whole before it is returned: a replica that dies before its last
byte is then retried on another like one that refused the connection, and the client never sees
half an answer. KServe v2 answers are single payloads; the activator is in the path only
while a service is cold, so this buffering is brief.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import partial

import aiohttp
from aiohttp import hdrs, web
from multidict import CIMultiDict
from yarl import URL

from tailpilot.activator.activation import Activation, RequestBody
from tailpilot.activator.backends import Endpoint, Transport
from tailpilot.activator.errors import (
    ActivationError,
    BackendsFailed,
    BackendTimedOut,
    BackendUnreachable,
    BodyTooLarge,
    ClientDeadlinePassed,
    HoldRefused,
    HoldTimedOut,
    UnknownService,
)
from tailpilot.activator.routing import ServiceKey

#: The status each of the activator's own answers gets; the body is `{"error": message}`, the
#: error format of KServe v2's HTTP protocol.
HTTP_STATUS: dict[type[ActivationError], int] = {
    UnknownService: 404,
    BodyTooLarge: 413,
    HoldRefused: 503,
    HoldTimedOut: 504,
    ClientDeadlinePassed: 504,
    BackendsFailed: 502,
    BackendTimedOut: 504,
}

#: Headers that describe one connection, not the request (RFC 9110 7.6.1), never forwarded;
#: plus Content-Length (recomputed for the body as sent) and Expect (the activator already read
#: the body it would have asked to send).
_HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-connection",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "content-length",
        "expect",
    }
)


def end_to_end_headers(headers: Mapping[str, str]) -> CIMultiDict[str]:
    """`headers` without the hop-by-hop ones and without those their `Connection` header names."""
    named = {
        token.strip().lower()
        for name, value in headers.items()
        if name.lower() == "connection"
        for token in value.split(",")
    }
    dropped = _HOP_BY_HOP | named
    return CIMultiDict((name, value) for name, value in headers.items() if name.lower() not in dropped)


@dataclass(frozen=True)
class HttpAnswer:
    """A replica's whole answer."""

    status: int
    reason: str | None
    headers: CIMultiDict[str]
    body: bytes


class HttpProxy:
    """Forwards HTTP requests to the replicas of the service their `Host` names."""

    def __init__(
        self,
        activation: Activation,
        session: aiohttp.ClientSession,
        *,
        retry_after_s: int,
        forward_timeout_s: float,
        connect_timeout_s: float = 5.0,
    ) -> None:
        """Forward through `activation` over `session`.

        Args:
            activation: The request path shared with gRPC.
            session: The client session to the replicas (made with `replica_session`).
            retry_after_s: The `Retry-After` of a 503 (a hold bound reached).
            forward_timeout_s: How long a replica may take to answer before the client gets 504.
            connect_timeout_s: How long a connection to a replica may take before the next is tried.
        """
        self._activation = activation
        self._session = session
        self._retry_after_s = retry_after_s
        self._forward_timeout_s = forward_timeout_s
        self._timeout = aiohttp.ClientTimeout(total=forward_timeout_s, sock_connect=connect_timeout_s)

    def application(self) -> web.Application:
        """The aiohttp application: every method and path goes to `handle`."""
        app = web.Application(client_max_size=self._activation.max_body_bytes)
        app.router.add_route("*", "/{path:.*}", self.handle)
        return app

    async def handle(self, request: web.Request) -> web.StreamResponse:
        """Answer one request: the replica's answer, or the activator's own error."""
        host = request.headers.get(hdrs.HOST, "")
        try:
            key = self._activation.route(host)
            answer = await self._activation.forward(
                key=key,
                transport=Transport.HTTP,
                body=RequestBody(
                    declared_bytes=request.content_length, read=partial(self._read_body, request)
                ),
                send=partial(self._send, request, key),
            )
        except ActivationError as error:
            self._activation.count_error(Transport.HTTP, error)
            return self._error_response(error)
        return web.Response(
            status=answer.status, reason=answer.reason, headers=answer.headers, body=answer.body
        )

    async def _read_body(self, request: web.Request) -> bytes:
        try:
            return await request.read()
        except web.HTTPRequestEntityTooLarge:
            # A chunked body (no Content-Length) found too large while read.
            raise BodyTooLarge.over(body_bytes=None, max_body_bytes=self._activation.max_body_bytes) from None

    async def _send(
        self, request: web.Request, key: ServiceKey, endpoint: Endpoint, body: bytes
    ) -> HttpAnswer:
        url = URL(f"http://{endpoint.target(Transport.HTTP)}{request.raw_path}", encoded=True)
        try:
            async with self._session.request(
                request.method,
                url,
                headers=end_to_end_headers(request.headers),
                data=body or None,
                allow_redirects=False,
                timeout=self._timeout,
            ) as response:
                return HttpAnswer(
                    status=response.status,
                    reason=response.reason,
                    headers=end_to_end_headers(response.headers),
                    body=await response.read(),
                )
        except aiohttp.ConnectionTimeoutError as error:
            raise BackendUnreachable(f"{endpoint.target(Transport.HTTP)}: connect timed out") from error
        except TimeoutError as error:
            # Total or read timeout: the replica may be working on it; sending it again elsewhere
            # would double the load of a slow model, so the client gets the timeout.
            raise BackendTimedOut.after(key=key, timeout_s=self._forward_timeout_s) from error
        except (aiohttp.ClientConnectionError, aiohttp.ClientPayloadError) as error:
            raise BackendUnreachable(f"{endpoint.target(Transport.HTTP)}: {error!r}") from error

    def _error_response(self, error: ActivationError) -> web.Response:
        headers = {hdrs.RETRY_AFTER: str(self._retry_after_s)} if isinstance(error, HoldRefused) else None
        return web.json_response(
            {"error": error.message}, status=HTTP_STATUS.get(type(error), 502), headers=headers
        )


def replica_session() -> aiohttp.ClientSession:
    """The client session to the replicas: bodies and headers passed through as they are.

    No automatic decompression (a compressed answer is returned compressed, with its
    Content-Encoding) and no headers the client did not send (aiohttp would add User-Agent, Accept,
    Accept-Encoding and a Content-Type); no cookie jar (cookies are the client's business).
    """
    return aiohttp.ClientSession(
        auto_decompress=False,
        skip_auto_headers=(hdrs.USER_AGENT, hdrs.ACCEPT, hdrs.ACCEPT_ENCODING, hdrs.CONTENT_TYPE),
        cookie_jar=aiohttp.DummyCookieJar(),
        connector=aiohttp.TCPConnector(limit=0),
    )
