"""Triton's metrics endpoint for KWOK pods: a real HTTP server on each simulated pod's own IP and port.

KWOK gives pods host-scoped IPs (10.64.0.0/16, `host_addresses`) and runs nothing in them, so
nothing answers on a pod's :8002/metrics. For the scale benchmark, one process listens on
`<pod IP>:8002` for every pod it is told about (each address put on `lo` with host scope first, so
only this machine reaches it, like every server here) and answers Triton's metrics page
(`tailpilot.bench.triton_metrics.metrics_page`): the request counters grow at a steady rate from
the moment the pod is added, with a latency summary, so the operator's fast loop and a real
Prometheus read them exactly as they read a Triton pod. It counts the requests it answers by
client (the operator's aiohttp reader, Prometheus, anything else).

HTTP/1.1 with keep-alive is answered by hand on asyncio streams: a thread per connection
(`http.server`) would not hold a thousand pods on two cores.

    pages = TritonPages(PageLoad(rate_per_s=20.0)).start()
    pages.add([PodEndpoint(ip="10.64.0.5", model="svc-000")])
    pages.stats()  # {"operator": 120, "prometheus": 8, "other": 0}
    pages.stop()
"""

from __future__ import annotations

import asyncio
import functools
import ipaddress
import multiprocessing
import threading
import time
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

from tailpilot.api import constants as c
from tailpilot.bench.triton_metrics import metrics_page
from tailpilot.policy.signals import PodLatency, TritonCounters
from tailpilot_e2e import host_addresses

#: How an endpoint answers: as a Triton pod does (""), or as a hostile one would
#: (`tailpilot_e2e.bench_adversarial`): a body far past any reader's bound, one byte a second for
#: ever, a document nested past every parser's stack, or nothing at all after accepting.
HOSTILE_MODES = ("huge", "slow", "malformed", "silent")
#: Bytes of a "huge" answer, announced in its Content-Length and sent in 1 MiB chunks.
HUGE_BYTES = 256 << 20


@dataclass(frozen=True)
class PodEndpoint:
    """A simulated pod: its IP and the model its Triton serves; or, with `mode`, a hostile endpoint."""

    ip: str
    model: str
    mode: str = ""
    port: int = c.TRITON_METRICS_PORT


@dataclass(frozen=True)
class PageLoad:
    """What every simulated pod reports: a steady load and a latency summary below the SLO."""

    rate_per_s: float = 20.0
    pending: float = 1.0
    batch: float = 2.0
    request_us: float = 9_000.0
    queue_us: float = 2_000.0
    compute_us: float = 6_000.0
    p99_us: float = 15_000.0

    def counters(self, seconds: float) -> TritonCounters:
        done = self.rate_per_s * seconds
        return TritonCounters(
            success=done,
            pending=self.pending,
            inference_count=done,
            exec_count=done / self.batch,
            request_duration_us=done * self.request_us,
            queue_duration_us=done * self.queue_us,
            compute_duration_us=done * self.compute_us,
        )

    def latency(self) -> PodLatency:
        return PodLatency(
            p99_us=self.p99_us,
            quantiles_us=((0.5, self.request_us * 0.8), (0.9, self.p99_us * 0.7), (0.95, self.p99_us * 0.8)),
        )


def client_of(user_agent: str) -> str:
    """Who sent a request, by its User-Agent."""
    agent = user_agent.lower()
    if "aiohttp" in agent:
        return "operator"
    if "prometheus" in agent:
        return "prometheus"
    return "other"


def _serve(conn: Connection, load: PageLoad) -> None:
    asyncio.run(_PageServer(conn, load).run())


class _PageServer:
    """The server process' side: listeners by pod IP, requests counted by client."""

    def __init__(self, conn: Connection, load: PageLoad):
        self.conn, self.load = conn, load
        self.latency = load.latency()
        self.counts = {"operator": 0, "prometheus": 0, "other": 0}
        #: Requests hostile endpoints were asked, by mode (the operator's, Prometheus' or others').
        self.hostile: dict[str, int] = {}
        self.servers: dict[str, asyncio.Server] = {}
        self.done = asyncio.Event()

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        # The message is received in the callback itself: the reader fires until it is consumed.
        loop.add_reader(self.conn.fileno(), lambda: loop.create_task(self.on_message(self.conn.recv())))
        self.conn.send("ready")
        await self.done.wait()
        for server in self.servers.values():
            server.close()
        for ip in self.servers:
            if not ipaddress.ip_address(ip).is_loopback:
                host_addresses.remove(ip)
        self.conn.send("stopped")

    async def on_message(self, message: tuple[Any, ...]) -> None:
        if message[0] == "add":
            self.conn.send(await self.add(message[1]))
        elif message[0] == "stats":
            self.conn.send(
                dict(
                    self.counts,
                    pods=len(self.servers),
                    **{f"hostile {m}": n for m, n in self.hostile.items()},
                )
            )
        else:
            self.done.set()

    async def add(self, endpoints: list[PodEndpoint]) -> int:
        added = 0
        for endpoint in endpoints:
            if endpoint.ip in self.servers:
                continue
            since = time.monotonic()
            if endpoint.mode:
                answer = functools.partial(self.answer_hostile, mode=endpoint.mode)
            else:
                answer = functools.partial(self.answer, model=endpoint.model, since=since)
            if not ipaddress.ip_address(endpoint.ip).is_loopback:  # a KWOK pod's: not on `lo` yet
                await asyncio.to_thread(host_addresses.add, endpoint.ip)
            self.servers[endpoint.ip] = await asyncio.start_server(
                answer, host=endpoint.ip, port=endpoint.port
            )
            added += 1
        return added

    async def answer(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *, model: str, since: float
    ) -> None:
        """Answer every request of one keep-alive connection with the pod's page, now."""
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                self.counts[client_of(_user_agent(head))] += 1
                counters = self.load.counters(time.monotonic() - since)
                body = metrics_page(counters, model=model, latency=self.latency).encode()
                writer.write(
                    b"HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\n"
                    + f"Content-Length: {len(body)}\r\n\r\n".encode()
                    + body
                )
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError):
            pass
        except asyncio.CancelledError:
            # The process is stopping. Returning, not re-raising: Python 3.11's stream callback
            # logs a traceback for every connection task that ends cancelled.
            pass
        finally:
            writer.close()

    async def answer_hostile(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, mode: str
    ) -> None:
        """Answer every request of one connection as a hostile endpoint of `mode` does."""
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                self.counts[client_of(_user_agent(head))] += 1
                self.hostile[mode] = self.hostile.get(mode, 0) + 1
                if mode == "silent":
                    # Accepted, never answered. A sleep, not an Event nobody else holds: the loop
                    # keeps a timer's task alive, and a collected task would close the connection.
                    await asyncio.sleep(3600)
                if mode == "malformed":
                    # Valid JSON to any parser with a deep enough stack; Python's raises RecursionError.
                    body = b"[" * 200_000 + b"]" * 200_000
                    writer.write(_head(len(body), "application/json") + body)
                    await writer.drain()
                    continue
                length = HUGE_BYTES if mode == "huge" else 1 << 30
                writer.write(_head(length, "application/json"))
                chunk = b'{"status":"success","data":{"result":[' + b" " * ((1 << 20) - 37)
                for _ in range(length // len(chunk)):
                    if mode == "slow":
                        writer.write(b" ")
                        await writer.drain()
                        await asyncio.sleep(1.0)
                    else:
                        writer.write(chunk)
                        await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError):
            pass
        except asyncio.CancelledError:
            pass  # the process is stopping (see `answer`)
        finally:
            writer.close()


def _head(length: int, content_type: str) -> bytes:
    return f"HTTP/1.1 200 OK\r\nContent-Type: {content_type}\r\nContent-Length: {length}\r\n\r\n".encode()


def _user_agent(head: bytes) -> str:
    for line in head.split(b"\r\n")[1:]:
        key, _, value = line.partition(b":")
        if key.strip().lower() == b"user-agent":
            return value.strip().decode(errors="replace")
    return ""


class TritonPages:
    """The server process, driven from the callers' threads (`add`, `stats`, `stop`)."""

    def __init__(self, load: PageLoad | None = None):
        self.load = load or PageLoad()
        self._conn: Connection | None = None
        self._process: multiprocessing.process.BaseProcess | None = None
        #: One question and its answer at a time on the pipe (several feeders may ask).
        self._asking = threading.Lock()

    def start(self) -> TritonPages:
        ctx = multiprocessing.get_context("spawn")
        mine, theirs = ctx.Pipe()
        self._process = ctx.Process(target=_serve, args=(theirs, self.load), daemon=True, name="triton-pages")
        self._process.start()
        self._conn = mine
        if not mine.poll(30) or mine.recv() != "ready":
            raise RuntimeError("the Triton pages server did not start within 30 s")
        return self

    @property
    def pid(self) -> int:  # noqa: D102
        assert self._process is not None and self._process.pid is not None
        return self._process.pid

    def _ask(self, message: tuple[Any, ...], timeout: float = 30) -> Any:
        assert self._conn is not None
        with self._asking:
            self._conn.send(message)
            if not self._conn.poll(timeout):
                raise RuntimeError(f"the Triton pages server gave no answer to {message[0]!r} in {timeout} s")
            return self._conn.recv()

    def add(self, endpoints: list[PodEndpoint]) -> int:
        """Listen for these pods (those already served are skipped); returns how many are new."""
        return int(self._ask(("add", endpoints)))

    def stats(self) -> dict[str, int]:
        """Requests answered so far by client, and the pods served."""
        return dict(self._ask(("stats",)))

    def stop(self) -> None:
        """Stop the process (by its handle: it is this process' child)."""
        if self._process is None:
            return
        try:
            self._ask(("stop",), timeout=10)
        except (RuntimeError, OSError, EOFError):
            pass
        self._process.join(10)
        if self._process.is_alive():
            self._process.kill()
            self._process.join(5)
        self._process = None

    def __enter__(self) -> TritonPages:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
