"""The gRPC front end: KServe v2's `inference.GRPCInferenceService`, forwarded through the activation.

Every unary method of the service (ServerLive, ServerReady, ModelReady, ModelMetadata,
ModelInfer, ...) is forwarded as raw bytes (no serializers: the activator never decodes a
tensor), with the call's metadata, to a `grpc.aio` channel of the chosen replica (one cached
channel per replica). The replica's answer goes back as it is: its status, details and metadata.
The streaming `ModelStreamInfer` is refused with UNIMPLEMENTED: a stream has no single request
to hold, and the replicas of a cold service are not there to stream to.

Why a thread-pool server (`grpc.server`) and not a `grpc.aio` one. The service a call is for is
known only from its `:authority` (the client dialed `NAME.NS.svc.cluster.local:8001`; kube-proxy
rewrote the destination address), and grpcio (1.85) exposes the authority to no server handler:
it is kept out of the metadata (grpc/grpc#38906; an accessor is proposed in grpc/grpc#42651).
The sync server keeps it in the call details of the handler's context, which `authority_of`
reads; the asyncio server keeps it where Python cannot reach. So each call runs in one of the
server's threads only long enough to hand it to the event loop (`run_coroutine_threadsafe`),
where the same activation as HTTP's holds, wakes and forwards it; the thread waits for the
answer. The pool's size bounds the calls in flight (`max_concurrent_rpcs`: beyond it, gRPC
answers RESOURCE_EXHAUSTED itself). `tests/activator/test_grpc_proxy.py` routes by authority,
so an upgrade that moves it fails there.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

import grpc
import grpc.aio

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

log = logging.getLogger(__name__)

#: KServe v2's gRPC service, as Triton serves it.
SERVICE_NAME = "inference.GRPCInferenceService"
#: Its streaming methods: refused with UNIMPLEMENTED.
STREAMING_METHODS = frozenset({"ModelStreamInfer"})

#: The status each of the activator's own answers gets; the details are the error's message.
GRPC_STATUS: dict[type[ActivationError], grpc.StatusCode] = {
    UnknownService: grpc.StatusCode.NOT_FOUND,
    BodyTooLarge: grpc.StatusCode.RESOURCE_EXHAUSTED,
    HoldRefused: grpc.StatusCode.RESOURCE_EXHAUSTED,
    HoldTimedOut: grpc.StatusCode.UNAVAILABLE,
    ClientDeadlinePassed: grpc.StatusCode.DEADLINE_EXCEEDED,
    BackendsFailed: grpc.StatusCode.UNAVAILABLE,
    BackendTimedOut: grpc.StatusCode.DEADLINE_EXCEEDED,
}

#: Metadata keys never forwarded: gRPC's own (`grpc-*`, pseudo-headers) and the user agent, which
#: the channel to the replica sets itself.
_NOT_FORWARDED_PREFIXES = ("grpc-", ":")
_NOT_FORWARDED_KEYS = frozenset({"user-agent"})
#: A deadline further than this (seconds) is no deadline: grpcio reports "none" as a huge number.
_NO_DEADLINE_S = 10**7
#: Channel options to the replicas: answers of any size (the model decides), no reuse of a port.
_CHANNEL_OPTIONS = (("grpc.max_receive_message_length", -1), ("grpc.max_send_message_length", -1))

Metadata = tuple[tuple[str, str | bytes], ...]


@dataclass(frozen=True)
class GrpcAnswer:
    """A replica's answer: its status and details, the response bytes (OK only), its metadata."""

    code: grpc.StatusCode
    details: str
    response: bytes | None
    initial_metadata: Metadata
    trailing_metadata: Metadata


def authority_of(context: Any) -> str:
    """The `:authority` of the call `context` serves ("" when it cannot be read).

    grpcio has no public accessor yet (see the module's docstring): the proposed
    `experimental_authority()` is used when present, else the sync server's call details.
    """
    accessor = getattr(context, "experimental_authority", None)
    if callable(accessor):
        return str(accessor())
    call_details = getattr(getattr(context, "_rpc_event", None), "call_details", None)
    host = getattr(call_details, "host", None)
    if isinstance(host, bytes):
        return host.decode("ascii", "replace")
    return host if isinstance(host, str) else ""


def forwarded_metadata(metadata: Sequence[tuple[str, str | bytes]]) -> Metadata:
    """The client's metadata to send on to the replica (gRPC's own keys and the user agent left out)."""
    return tuple(
        (key, value)
        for key, value in metadata
        if not key.startswith(_NOT_FORWARDED_PREFIXES) and key not in _NOT_FORWARDED_KEYS
    )


class ChannelPool:
    """One `grpc.aio` channel per replica, the least recently used closed beyond `max_channels`.

    Event loop thread only. Replicas come and go with scale-ups and rollouts; the bound keeps the
    channels of replicas long gone from piling up.
    """

    def __init__(self, *, max_channels: int = 256, close_grace_s: float = 30.0) -> None:
        """Keep at most `max_channels`; an evicted channel's calls get `close_grace_s` to finish."""
        self._channels: OrderedDict[str, grpc.aio.Channel] = OrderedDict()
        self._max_channels = max_channels
        self._close_grace_s = close_grace_s
        self._closing: set[asyncio.Task[None]] = set()

    def channel(self, target: str) -> grpc.aio.Channel:
        """The channel to `target` (`host:port`), opened on first use."""
        channel = self._channels.get(target)
        if channel is not None:
            self._channels.move_to_end(target)
            return channel
        channel = grpc.aio.insecure_channel(target, options=_CHANNEL_OPTIONS)
        self._channels[target] = channel
        while len(self._channels) > self._max_channels:
            _, evicted = self._channels.popitem(last=False)
            task = asyncio.create_task(evicted.close(grace=self._close_grace_s))
            self._closing.add(task)
            task.add_done_callback(self._closing.discard)
        return channel

    async def close(self) -> None:
        """Close every channel (their calls are cancelled)."""
        channels = list(self._channels.values())
        self._channels.clear()
        await asyncio.gather(
            *(channel.close() for channel in channels), *self._closing, return_exceptions=True
        )


class GrpcProxy:
    """Forwards KServe v2 gRPC calls to the replicas of the service their authority names."""

    def __init__(
        self,
        activation: Activation,
        channels: ChannelPool,
        loop: asyncio.AbstractEventLoop,
        *,
        forward_timeout_s: float,
    ) -> None:
        """Forward through `activation` on `loop` (the thread that owns it), over `channels`.

        Args:
            activation: The request path shared with HTTP.
            channels: The channels to the replicas.
            loop: The event loop the activation runs on.
            forward_timeout_s: How long a replica may take to answer before DEADLINE_EXCEEDED.
        """
        self._activation = activation
        self._channels = channels
        self._loop = loop
        self._forward_timeout_s = forward_timeout_s
        # A call's thread waits at most this long for the loop's answer: the hold and the forward,
        # and a margin for the loop to notice them end.
        self._answer_wait_s = activation.holds.limits.hold_timeout_s + forward_timeout_s + 10.0

    def handler(self) -> grpc.GenericRpcHandler:
        """The generic handler serving every method of `SERVICE_NAME`."""
        return _InferenceServiceHandler(self)

    def unary(self, method: str, request: bytes, context: grpc.ServicerContext) -> bytes:
        """Serve one unary call in a server thread: hand it to the loop, wait, answer as the replica did."""
        deadline_s = context.time_remaining()
        future = asyncio.run_coroutine_threadsafe(
            self._serve(
                method=method,
                request=request,
                metadata=forwarded_metadata(tuple(context.invocation_metadata())),
                authority=authority_of(context),
                deadline_s=None if deadline_s is None or deadline_s > _NO_DEADLINE_S else deadline_s,
            ),
            self._loop,
        )
        # The client went away (cancelled, deadline passed, server stopping): stop holding for it.
        context.add_callback(future.cancel)
        try:
            answer = future.result(timeout=self._answer_wait_s)
        except concurrent.futures.CancelledError:
            context.abort(
                grpc.StatusCode.CANCELLED, "the call ended while the activator held or forwarded it"
            )
        except concurrent.futures.TimeoutError:
            future.cancel()
            context.abort(grpc.StatusCode.UNAVAILABLE, "the activator did not answer in time")
        except ActivationError as error:
            context.abort(GRPC_STATUS.get(type(error), grpc.StatusCode.UNAVAILABLE), error.message)
        if answer.initial_metadata:
            context.send_initial_metadata(answer.initial_metadata)
        context.set_trailing_metadata(answer.trailing_metadata)
        if answer.code is not grpc.StatusCode.OK or answer.response is None:
            context.abort(answer.code, answer.details)
            raise AssertionError("unreachable: abort raises")
        return answer.response

    def refuse_stream(self, _: Any, context: grpc.ServicerContext) -> None:
        """Refuse a streaming call: the activator holds and forwards unary calls only."""
        context.abort(
            grpc.StatusCode.UNIMPLEMENTED,
            "the TailPilot activator does not forward streaming calls (ModelStreamInfer); use ModelInfer "
            "while the service scales from zero",
        )

    async def _serve(
        self, *, method: str, request: bytes, metadata: Metadata, authority: str, deadline_s: float | None
    ) -> GrpcAnswer:
        try:
            key = self._activation.route(authority)
            return await self._activation.forward(
                key=key,
                transport=Transport.GRPC,
                body=RequestBody.of(request),
                send=partial(self._send, method, metadata, key, deadline_s),
                deadline_s=deadline_s,
            )
        except ActivationError as error:
            self._activation.count_error(Transport.GRPC, error)
            raise

    async def _send(
        self,
        method: str,
        metadata: Metadata,
        key: ServiceKey,
        deadline_s: float | None,
        endpoint: Endpoint,
        request: bytes,
    ) -> GrpcAnswer:
        target = endpoint.target(Transport.GRPC)
        ours = deadline_s is None or self._forward_timeout_s < deadline_s
        timeout_s = self._forward_timeout_s if ours or deadline_s is None else deadline_s
        # No serializers: the request and the response stay bytes.
        call = self._channels.channel(target).unary_unary(method)(
            request, metadata=metadata, timeout=timeout_s
        )
        try:
            response = await call
        except grpc.aio.AioRpcError as error:
            code = error.code()
            if code is grpc.StatusCode.UNAVAILABLE:
                raise BackendUnreachable(f"{target}: {error.details()}") from error
            if code is grpc.StatusCode.DEADLINE_EXCEEDED and ours:
                raise BackendTimedOut.after(key=key, timeout_s=self._forward_timeout_s) from error
            return GrpcAnswer(
                code=code,
                details=error.details() or "",
                response=None,
                initial_metadata=tuple(error.initial_metadata() or ()),
                trailing_metadata=tuple(error.trailing_metadata() or ()),
            )
        return GrpcAnswer(
            code=grpc.StatusCode.OK,
            details="",
            response=response,
            initial_metadata=tuple(await call.initial_metadata() or ()),
            trailing_metadata=tuple(await call.trailing_metadata() or ()),
        )


class _InferenceServiceHandler(grpc.GenericRpcHandler):  # type: ignore[misc]
    """Every method of `SERVICE_NAME`: the unary ones forwarded, the streaming ones refused."""

    def __init__(self, proxy: GrpcProxy) -> None:
        self._proxy = proxy

    def service(self, handler_call_details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler | None:
        """The handler of the called method; None (UNIMPLEMENTED) for another service's."""
        method: str = handler_call_details.method
        prefix = f"/{SERVICE_NAME}/"
        if not method.startswith(prefix):
            return None
        if method.removeprefix(prefix) in STREAMING_METHODS:
            return grpc.stream_stream_rpc_method_handler(self._proxy.refuse_stream)
        return grpc.unary_unary_rpc_method_handler(partial(self._proxy.unary, method))
