"""The activator's servers around one activation: started together, drained together.

`start_activator` takes the two things that differ between a cluster and a test (where the
services and their replicas come from, `Backends`; who is told to wake a service, `Waker`) and
starts the HTTP proxy, the gRPC proxy and the admin server (health, readiness, metrics) on the
ports of `ActivatorSettings` (0: any free port, as tests use). `RunningActivator.drain` is the
shutdown: readiness turns 503, the proxy ports stop accepting, requests in flight (held ones
included) get up to the hold timeout to finish, then everything is closed.
"""

from __future__ import annotations

import asyncio
import socket
from concurrent.futures import ThreadPoolExecutor
from contextlib import AsyncExitStack
from dataclasses import dataclass, field

import grpc
from aiohttp import web

from tailpilot.activator.activation import Activation
from tailpilot.activator.admin_http import admin_application
from tailpilot.activator.backends import Backends
from tailpilot.activator.cold_start import ColdStarts, ColdStartWriter, LoggingColdStartWriter
from tailpilot.activator.grpc_proxy import ChannelPool, GrpcProxy
from tailpilot.activator.holding import HoldLimits, Holds
from tailpilot.activator.http_proxy import HttpProxy, replica_session
from tailpilot.activator.metrics import ActivatorMetrics
from tailpilot.activator.waking import Waker, Wakes
from tailpilot.api.constants import TRITON_GRPC_PORT, TRITON_HTTP_PORT


@dataclass(frozen=True)
class ActivatorSettings:
    """Where the activator listens and how it holds and forwards (the flags of `main`)."""

    #: The address the three servers bind (tests: 127.0.0.1).
    bind_address: str = "0.0.0.0"
    #: The proxy ports: those of Triton, which the model Service's ports target.
    http_port: int = TRITON_HTTP_PORT
    grpc_port: int = TRITON_GRPC_PORT
    #: Health, readiness and metrics.
    admin_port: int = 9090
    limits: HoldLimits = field(default_factory=HoldLimits)
    #: The `Retry-After` (seconds) of a 503 for a hold bound reached: long enough for the held
    #: requests ahead to start draining once a replica is ready.
    retry_after_s: int = 5
    #: How long a replica may take to answer one forwarded request.
    forward_timeout_s: float = 300.0
    #: Replicas tried at most for one request when they cannot be reached.
    max_forward_tries: int = 3
    #: gRPC calls in flight at most (each waits in a server thread; see `grpc_proxy`).
    grpc_max_concurrent_rpcs: int = 1024
    #: A failed wake is retried after this, doubling up to `wake_retry_max_s`, while requests wait.
    wake_retry_first_s: float = 0.5
    wake_retry_max_s: float = 10.0


class RunningActivator:
    """The started servers: their bound ports, the activation (tests and benchmarks read it), the drain."""

    def __init__(
        self,
        *,
        activation: Activation,
        settings: ActivatorSettings,
        http_runner: web.AppRunner,
        grpc_server: grpc.Server,
        closing: AsyncExitStack,
        ports: tuple[int, int, int],
    ) -> None:
        self.activation = activation
        self.settings = settings
        self.http_port, self.grpc_port, self.admin_port = ports
        self.draining = False
        self._http_runner = http_runner
        self._grpc_server = grpc_server
        self._closing = closing
        self._drained = False

    async def drain(self) -> None:
        """Stop accepting, let requests in flight finish within the hold timeout, close everything."""
        if self._drained:
            return
        self._drained = True
        self.draining = True
        grace_s = self.settings.limits.hold_timeout_s
        stopped = self._grpc_server.stop(grace=grace_s)
        try:
            await asyncio.gather(
                _cleanup_once(self._http_runner), asyncio.to_thread(stopped.wait, grace_s + 5.0)
            )
        finally:
            await self._closing.aclose()


def _listening_socket(address: str, port: int) -> socket.socket:
    """A TCP socket bound to `address:port` (0: any free port), listening."""
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    return socket.create_server((address, port), family=family, backlog=1024)


def _activation(
    settings: ActivatorSettings,
    *,
    backends: Backends,
    waker: Waker,
    metrics: ActivatorMetrics,
    cold_start_writer: ColdStartWriter | None,
) -> Activation:
    """The request path: the holds, the wakes and the cold-start records over `backends`."""
    limits = settings.limits
    cold_starts = ColdStarts(cold_start_writer or LoggingColdStartWriter(), metrics=metrics)
    wakes = Wakes(
        waker,
        rewake_after_s=limits.hold_timeout_s,
        metrics=metrics,
        retry_first_s=settings.wake_retry_first_s,
        retry_max_s=settings.wake_retry_max_s,
        on_woken=cold_starts.woke,  # the episode's wokeAt
    )
    return Activation(
        backends=backends,
        holds=Holds(limits, on_change=metrics.set_held),
        wakes=wakes,
        metrics=metrics,
        max_tries=settings.max_forward_tries,
        cold_starts=cold_starts,
    )


async def start_activator(
    settings: ActivatorSettings,
    *,
    backends: Backends,
    waker: Waker,
    metrics: ActivatorMetrics | None = None,
    cold_start_writer: ColdStartWriter | None = None,
) -> RunningActivator:
    """Start the HTTP proxy, the gRPC proxy and the admin server over `backends`, waking through `waker`.

    Each cold start is recorded through `cold_start_writer` (only logged when None).
    """
    metrics = metrics if metrics is not None else ActivatorMetrics()
    limits = settings.limits
    activation = _activation(
        settings, backends=backends, waker=waker, metrics=metrics, cold_start_writer=cold_start_writer
    )
    closing = AsyncExitStack()
    try:
        # Closed last (the stack unwinds in reverse): the forwards need them until the servers stop.
        closing.push_async_callback(activation.wakes.close)
        closing.push_async_callback(activation.cold_starts.close)
        session = replica_session()
        closing.push_async_callback(session.close)
        channels = ChannelPool(close_grace_s=settings.forward_timeout_s)
        closing.push_async_callback(channels.close)

        http_proxy = HttpProxy(
            activation,
            session,
            retry_after_s=settings.retry_after_s,
            forward_timeout_s=settings.forward_timeout_s,
        )
        # handler_cancellation: a client that hangs up stops being held (its slot and bytes freed).
        http_runner = web.AppRunner(
            http_proxy.application(),
            handler_cancellation=True,
            shutdown_timeout=limits.hold_timeout_s,
            access_log=None,
        )
        await http_runner.setup()
        closing.push_async_callback(_cleanup_once, http_runner)
        http_socket = _listening_socket(settings.bind_address, settings.http_port)
        await web.SockSite(http_runner, http_socket).start()

        grpc_server, grpc_port = _start_grpc(settings, activation, channels, closing)

        running = RunningActivator(
            activation=activation,
            settings=settings,
            http_runner=http_runner,
            grpc_server=grpc_server,
            closing=closing,
            ports=(http_socket.getsockname()[1], grpc_port, 0),
        )
        admin_runner = web.AppRunner(
            admin_application(backends=backends, metrics=metrics, draining=lambda: running.draining),
            access_log=None,
        )
        await admin_runner.setup()
        # Closed after the proxies have drained: readiness says "draining" until then.
        closing.push_async_callback(_cleanup_once, admin_runner)
        admin_socket = _listening_socket(settings.bind_address, settings.admin_port)
        await web.SockSite(admin_runner, admin_socket).start()
        running.admin_port = admin_socket.getsockname()[1]
    except BaseException:
        await closing.aclose()
        raise
    return running


def _start_grpc(
    settings: ActivatorSettings, activation: Activation, channels: ChannelPool, closing: AsyncExitStack
) -> tuple[grpc.Server, int]:
    """Start the gRPC proxy on its thread pool (stopped by `closing`); the server and its port."""
    limits = settings.limits
    executor = ThreadPoolExecutor(
        max_workers=settings.grpc_max_concurrent_rpcs, thread_name_prefix="activator-grpc"
    )
    closing.callback(executor.shutdown, wait=False, cancel_futures=True)
    grpc_proxy = GrpcProxy(
        activation, channels, asyncio.get_running_loop(), forward_timeout_s=settings.forward_timeout_s
    )
    grpc_server = grpc.server(
        executor,
        handlers=(grpc_proxy.handler(),),
        maximum_concurrent_rpcs=settings.grpc_max_concurrent_rpcs,
        options=(
            ("grpc.max_receive_message_length", limits.max_body_bytes),
            ("grpc.max_send_message_length", -1),
            # Fail at start when the port is taken, rather than share it with another process.
            ("grpc.so_reuseport", 0),
        ),
    )
    grpc_port = grpc_server.add_insecure_port(_grpc_address(settings.bind_address, settings.grpc_port))
    grpc_server.start()
    closing.callback(grpc_server.stop, None)
    return grpc_server, grpc_port


async def _cleanup_once(runner: web.AppRunner) -> None:
    """Clean `runner` up unless that is done (the drain does the proxy's first, the exit stack again)."""
    if runner.server is not None:
        await runner.cleanup()


def _grpc_address(address: str, port: int) -> str:
    return f"[{address}]:{port}" if ":" in address else f"{address}:{port}"
