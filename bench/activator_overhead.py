"""What the activator costs: latency it adds on the pass-through path, and its memory when holding the most.

Latency. One local replica (in this process: an aiohttp server echoing the body of
`/v2/models/m/infer`, and a `grpc.aio` server echoing `ModelInfer`'s raw request bytes) is called
directly and through a real activator process (`python -P -m tailpilot.activator
--static-service bench/echo=...`, the replica ready, so every request is forwarded at once), with
the same client, the same body and the same number of requests: sequentially (one in flight), then
`--concurrency` in flight. The activator's overhead is the percentile through it minus the same
percentile direct. The client and the replica share this process's event loop and one core; the
activator has its own process.

Memory. A second activator process serves cold static services (no replica: every request is
held) with the default bounds (1000 requests per service, 256 MiB of held bodies), and a hold
timeout longer than the run. The benchmark sends `--hold-body-bytes` bodies, more than the
held-bytes bound admits (HTTP to three cold services, gRPC to one: the byte bound binds, not the
per-service one), and reads the process's VmRSS and VmHWM from /proc/<pid>/status at rest and
while it holds the most it admits: HTTP, then gRPC (whose calls each wait in a server thread) in a
third process.

    python -P -m tailpilot.bench.activator_overhead
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime
import os
import platform
import re
import signal
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import grpc
import grpc.aio
from aiohttp import web

from tailpilot.activator.holding import HoldLimits

MIB = 1024 * 1024
MODEL_INFER = "/inference.GRPCInferenceService/ModelInfer"
LISTENING = re.compile(r"activator listening: http (\d+), grpc (\d+), admin (\d+)")
#: The cold services of the memory runs: three, so the held-bytes bound, not the per-service one, binds.
COLD_SERVICES = ("cold-a", "cold-b", "cold-c")
#: Hold timeout of the memory runs: longer than the runs, so nothing held leaves before it is measured.
MEMORY_HOLD_TIMEOUT_S = 120
#: The bounds the memory runs measure: the activator's defaults (the runs pass no bound flag).
DEFAULT_LIMITS = HoldLimits()
#: Requests sent beyond what the held-bytes bound admits, so the runs show the bound refusing them.
BEYOND_THE_BOUND = 10


def beyond_the_byte_bound(body_bytes: int) -> int:
    """Requests of `body_bytes` that overfill the default held-bytes bound by `BEYOND_THE_BOUND`."""
    return DEFAULT_LIMITS.max_held_bytes // body_bytes + BEYOND_THE_BOUND


# --- The replica ---------------------------------------------------------------------------------


class _EchoGrpc(grpc.GenericRpcHandler):  # type: ignore[misc]
    """`ModelInfer` answered with the request's own bytes (a valid ModelInferResponse: same fields)."""

    def service(self, handler_call_details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler | None:
        if handler_call_details.method != MODEL_INFER:
            return None

        async def echo(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
            return request

        return grpc.unary_unary_rpc_method_handler(echo)


@contextlib.asynccontextmanager
async def replica() -> AsyncIterator[tuple[int, int]]:
    """The echo replica on 127.0.0.1: its HTTP and gRPC ports."""

    async def infer(request: web.Request) -> web.Response:
        return web.Response(body=await request.read(), content_type="application/json")

    app = web.Application(client_max_size=1024 * MIB)
    app.router.add_post("/v2/models/{model}/infer", infer)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    server = grpc.aio.server(options=(("grpc.max_receive_message_length", -1),))
    server.add_generic_rpc_handlers((_EchoGrpc(),))
    grpc_port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        yield runner.addresses[0][1], grpc_port
    finally:
        await server.stop(None)
        await runner.cleanup()


# --- The activator process -----------------------------------------------------------------------


@dataclass
class ActivatorProcess:
    """A running `python -P -m tailpilot.activator`: its pid and ports."""

    process: asyncio.subprocess.Process
    http_port: int
    grpc_port: int
    admin_port: int

    def memory_kib(self) -> dict[str, int]:
        """VmRSS and VmHWM (peak RSS) of the process, KiB, from /proc/<pid>/status."""
        fields = {}
        for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
            name, _, value = line.partition(":")
            if name in ("VmRSS", "VmHWM"):
                fields[name] = int(value.split()[0])
        return fields


@contextlib.asynccontextmanager
async def activator(*flags: str) -> AsyncIterator[ActivatorProcess]:
    """An activator process on 127.0.0.1 (any free ports) with `flags`; SIGTERM and waited for after."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-P",
        "-m",
        "tailpilot.activator",
        "--bind-address=127.0.0.1",
        "--http-port=0",
        "--grpc-port=0",
        "--metrics-port=0",
        *flags,
        stderr=asyncio.subprocess.PIPE,
    )
    assert process.stderr is not None
    log = ""
    try:
        while not (listening := LISTENING.search(log)):
            line = await asyncio.wait_for(process.stderr.readline(), timeout=60.0)
            if not line:
                raise RuntimeError(f"the activator exited: {log}")
            log += line.decode()
        # The rest of the log is read so the process never blocks on a full pipe.
        drain_log = asyncio.create_task(process.stderr.read())
        yield ActivatorProcess(process, *(int(port) for port in listening.groups()))
        process.send_signal(signal.SIGTERM)
        await asyncio.wait_for(process.wait(), timeout=MEMORY_HOLD_TIMEOUT_S + 30)
        await drain_log
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()


# --- Latency -------------------------------------------------------------------------------------


async def timed(requests: int, concurrency: int, call: Callable[[], Awaitable[None]]) -> list[float]:
    """Latencies (ms) of `requests` calls, `concurrency` in flight."""
    latencies: list[float] = []
    remaining = iter(range(requests))

    async def worker() -> None:
        for _ in remaining:
            started = time.perf_counter()
            await call()
            latencies.append((time.perf_counter() - started) * 1000.0)

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return latencies


def percentile(values: Sequence[float], q: float) -> float:
    """The `q` quantile (0-1) of `values`, nearest rank."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * len(ordered)) - 1))]


@dataclass(frozen=True)
class Comparison:
    """P50 and P99 (ms) direct and through the activator, for one protocol and concurrency."""

    protocol: str
    concurrency: int
    direct: tuple[float, float]
    through: tuple[float, float]

    def row(self) -> str:
        added = (self.through[0] - self.direct[0], self.through[1] - self.direct[1])
        return (
            f"| {self.protocol} | {self.concurrency} | {self.direct[0]:.2f} / {self.direct[1]:.2f} "
            f"| {self.through[0]:.2f} / {self.through[1]:.2f} | **{added[0]:+.2f} / {added[1]:+.2f}** |"
        )


async def compare(
    protocol: str,
    *,
    direct: Callable[[], Awaitable[None]],
    through: Callable[[], Awaitable[None]],
    requests: int,
    concurrency: int,
) -> Comparison:
    """Warm both paths up, then time them in alternating halves (so drift hits both alike)."""
    await timed(50, concurrency, direct)
    await timed(50, concurrency, through)
    direct_ms: list[float] = []
    through_ms: list[float] = []
    for _ in range(2):
        direct_ms += await timed(requests // 2, concurrency, direct)
        through_ms += await timed(requests // 2, concurrency, through)
    return Comparison(
        protocol=protocol,
        concurrency=concurrency,
        direct=(percentile(direct_ms, 0.5), percentile(direct_ms, 0.99)),
        through=(percentile(through_ms, 0.5), percentile(through_ms, 0.99)),
    )


async def latency(*, requests: int, concurrency: int, body_bytes: int) -> list[Comparison]:
    body = b"x" * body_bytes
    async with replica() as (http_port, grpc_port):
        static = f"--static-service=bench/echo=127.0.0.1:{http_port}:{grpc_port}"
        async with activator(static) as proxy, aiohttp.ClientSession() as session:
            channels = {
                "direct": grpc.aio.insecure_channel(f"127.0.0.1:{grpc_port}"),
                "through": grpc.aio.insecure_channel(
                    f"127.0.0.1:{proxy.grpc_port}", options=(("grpc.default_authority", "echo.bench:8001"),)
                ),
            }

            def http_call(port: int) -> Callable[[], Awaitable[None]]:
                url = f"http://127.0.0.1:{port}/v2/models/m/infer"

                async def call() -> None:
                    async with session.post(url, data=body, headers={"Host": "echo.bench:8000"}) as response:
                        assert response.status == 200, response.status
                        await response.read()

                return call

            def grpc_call(channel: grpc.aio.Channel) -> Callable[[], Awaitable[None]]:
                infer = channel.unary_unary(MODEL_INFER)

                async def call() -> None:
                    await infer(body)

                return call

            results = []
            try:
                for in_flight in (1, concurrency):
                    results.append(
                        await compare(
                            "HTTP",
                            direct=http_call(http_port),
                            through=http_call(proxy.http_port),
                            requests=requests,
                            concurrency=in_flight,
                        )
                    )
                    results.append(
                        await compare(
                            "gRPC",
                            direct=grpc_call(channels["direct"]),
                            through=grpc_call(channels["through"]),
                            requests=requests,
                            concurrency=in_flight,
                        )
                    )
            finally:
                for channel in channels.values():
                    await channel.close()
    return results


# --- Memory --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class MemoryRun:
    """What one activator process held and its memory at rest and while holding."""

    protocol: str
    sent: int
    held: int
    refused: int
    held_bytes: int
    rest_kib: dict[str, int]
    holding_kib: dict[str, int]


async def _held_and_bytes(session: aiohttp.ClientSession, admin_port: int) -> tuple[int, int]:
    async with session.get(f"http://127.0.0.1:{admin_port}/metrics") as response:
        page = await response.text()
    held = sum(
        float(match)
        for match in re.findall(r"^tailpilot_activator_held_requests\{[^}]*\} (\S+)$", page, re.M)
    )
    held_bytes = re.search(r"^tailpilot_activator_held_bytes (\S+)$", page, re.M)
    return int(held), int(float(held_bytes.group(1))) if held_bytes else 0


async def _until_settled(
    session: aiohttp.ClientSession, admin_port: int, refused: Callable[[], int], sent: int
) -> int:
    """Wait (bounded) until every request sent is held or refused; the number held."""
    deadline = time.monotonic() + 60.0
    while time.monotonic() < deadline:
        held, _ = await _held_and_bytes(session, admin_port)
        if held + refused() >= sent:
            return held
        await asyncio.sleep(0.2)
    raise RuntimeError("the requests sent were neither all held nor refused within 60 s")


async def memory_http(*, per_service: int, body_bytes: int) -> MemoryRun:
    body = b"x" * body_bytes
    flags = [f"--static-service=bench/{name}" for name in COLD_SERVICES]
    async with activator(*flags, f"--hold-timeout-s={MEMORY_HOLD_TIMEOUT_S}") as proxy:
        await asyncio.sleep(1.0)  # let start-up allocations settle before the resting figure
        rest = proxy.memory_kib()
        connector = aiohttp.TCPConnector(limit=0)
        async with aiohttp.ClientSession(connector=connector) as session:
            refused = 0

            async def send(service: str) -> None:
                nonlocal refused
                url = f"http://127.0.0.1:{proxy.http_port}/v2/models/m/infer"
                async with session.post(url, data=body, headers={"Host": f"{service}.bench"}) as response:
                    if response.status == 503:
                        refused += 1
                    await response.read()

            sent = per_service * len(COLD_SERVICES)
            tasks = [asyncio.create_task(send(name)) for name in COLD_SERVICES for _ in range(per_service)]
            held = await _until_settled(session, proxy.admin_port, lambda: refused, sent)
            _, held_bytes = await _held_and_bytes(session, proxy.admin_port)
            holding = proxy.memory_kib()
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
    return MemoryRun("HTTP", sent, held, refused, held_bytes, rest, holding)


async def memory_grpc(*, calls: int, body_bytes: int) -> MemoryRun:
    body = b"x" * body_bytes
    async with activator(
        "--static-service=bench/cold-a", f"--hold-timeout-s={MEMORY_HOLD_TIMEOUT_S}"
    ) as proxy:
        await asyncio.sleep(1.0)
        rest = proxy.memory_kib()
        refused = 0
        async with (
            grpc.aio.insecure_channel(
                f"127.0.0.1:{proxy.grpc_port}",
                options=(
                    ("grpc.default_authority", "cold-a.bench:8001"),
                    ("grpc.max_send_message_length", -1),
                ),
            ) as channel,
            aiohttp.ClientSession() as session,
        ):
            infer = channel.unary_unary(MODEL_INFER)

            async def send() -> None:
                nonlocal refused
                try:
                    await infer(body)
                except grpc.aio.AioRpcError as error:
                    if error.code() is grpc.StatusCode.RESOURCE_EXHAUSTED:
                        refused += 1

            tasks = [asyncio.create_task(send()) for _ in range(calls)]
            held = await _until_settled(session, proxy.admin_port, lambda: refused, calls)
            _, held_bytes = await _held_and_bytes(session, proxy.admin_port)
            holding = proxy.memory_kib()
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
    return MemoryRun("gRPC", calls, held, refused, held_bytes, rest, holding)


# --- Report --------------------------------------------------------------------------------------


def machine() -> str:
    model = "unknown CPU"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    return f"{os.cpu_count()} cores, {model}, Linux {platform.release()}, Python {platform.python_version()}"


def memory_row(run: MemoryRun) -> str:
    added_mib = (run.holding_kib["VmRSS"] - run.rest_kib["VmRSS"]) / 1024
    return (
        f"| {run.protocol} | {run.sent} | {run.held} | {run.refused} | {run.held_bytes / MIB:.0f} "
        f"| {run.rest_kib['VmRSS'] / 1024:.0f} | {run.holding_kib['VmRSS'] / 1024:.0f} | {added_mib:.0f} "
        f"| {run.holding_kib['VmHWM'] / 1024:.0f} |"
    )


async def run(options: argparse.Namespace) -> None:
    started = time.monotonic()
    print(f"# Activator overhead, {datetime.date.today().isoformat()}; {machine()}\n")
    comparisons = await latency(
        requests=options.requests, concurrency=options.concurrency, body_bytes=options.body_bytes
    )
    print(
        f"Pass-through latency, ms, P50 / P99; {options.requests} requests per path and row, "
        f"{options.body_bytes} B bodies echoed by a local replica:\n"
    )
    print("| protocol | in flight | direct | through the activator | added |")
    print("| --- | --- | --- | --- | --- |")
    for comparison in comparisons:
        print(comparison.row())
    http_run = await memory_http(per_service=options.hold_per_service, body_bytes=options.hold_body_bytes)
    grpc_run = await memory_grpc(
        calls=beyond_the_byte_bound(options.hold_body_bytes), body_bytes=options.hold_body_bytes
    )
    print(
        f"\nMemory while holding, default bounds ({DEFAULT_LIMITS.max_held_per_service} held per service, "
        f"{DEFAULT_LIMITS.max_held_bytes / MIB:g} MiB held bodies), "
        f"{options.hold_body_bytes / MIB:g} MiB bodies; HTTP to {len(COLD_SERVICES)} cold services, "
        "gRPC to one:\n"
    )
    print(
        "| protocol | sent | held | refused (503 / RESOURCE_EXHAUSTED) | held MiB | RSS at rest MiB "
        "| RSS holding MiB | added MiB | peak RSS MiB |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    print(memory_row(http_run))
    print(memory_row(grpc_run))
    print(f"\n{time.monotonic() - started:.0f} s in all")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -P -m tailpilot.bench.activator_overhead", description=__doc__
    )
    parser.add_argument("--requests", type=int, default=2000, help="requests per path and row")
    parser.add_argument("--concurrency", type=int, default=16, help="in flight in the concurrent rows")
    parser.add_argument("--body-bytes", type=int, default=16 * 1024, help="body of the latency runs")
    parser.add_argument("--hold-body-bytes", type=int, default=MIB, help="body of the memory runs")
    parser.add_argument(
        "--hold-per-service",
        type=int,
        default=100,
        help="HTTP requests sent to each cold service (3 services)",
    )
    asyncio.run(run(parser.parse_args(argv)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
