"""The activator process: its flags, and a real process serving, then draining on SIGTERM."""

from __future__ import annotations

import argparse
import asyncio
import re
import signal
import sys

import aiohttp
import pytest

from tailpilot.activator.backends import Endpoint
from tailpilot.activator.holding import MIB
from tailpilot.activator.main import parse_args, parse_static_service, settings_from
from tailpilot.activator.routing import ServiceKey
from tests.activator.harness import eventually_async
from tests.activator.replicas import EchoHttpReplica

LISTENING = re.compile(r"activator listening: http (\d+), grpc (\d+), admin (\d+)")


def test_static_services_parse() -> None:
    assert parse_static_service("shop/cold") == (ServiceKey("shop", "cold"), ())
    key, endpoints = parse_static_service("shop/a=10.0.0.1:8000:8001,[fd00::1]:8000:")
    assert key == ServiceKey("shop", "a")
    assert endpoints == (
        Endpoint(address="10.0.0.1", http_port=8000, grpc_port=8001),
        Endpoint(address="fd00::1", http_port=8000, grpc_port=None),
    )
    for bad in ("cold", "/a", "shop/a=8000:8001"):
        with pytest.raises(argparse.ArgumentTypeError):
            parse_static_service(bad)


def test_the_flags_defaults_are_the_documented_ones() -> None:
    settings = settings_from(parse_args([]))
    assert (settings.bind_address, settings.http_port, settings.grpc_port, settings.admin_port) == (
        "0.0.0.0",
        8000,
        8001,
        9090,
    )
    limits = settings.limits
    assert (
        limits.max_held_per_service,
        limits.max_held_bytes,
        limits.hold_timeout_s,
        limits.max_body_bytes,
    ) == (
        1000,
        256 * MIB,
        300.0,
        64 * MIB,
    )
    overridden = settings_from(parse_args(["--max-held-per-service", "7", "--hold-timeout-s", "90"])).limits
    assert (overridden.max_held_per_service, overridden.hold_timeout_s) == (7, 90.0)


def test_the_process_serves_static_services_and_drains_on_sigterm() -> None:
    async def scenario() -> None:
        async with EchoHttpReplica() as replica:
            process = await asyncio.create_subprocess_exec(
                sys.executable,
                "-P",
                "-m",
                "tailpilot.activator",
                "--bind-address=127.0.0.1",
                "--http-port=0",
                "--grpc-port=0",
                "--metrics-port=0",
                "--hold-timeout-s=1",
                f"--static-service=shop/warm=127.0.0.1:{replica.port}:",
                "--static-service=shop/cold",
                stderr=asyncio.subprocess.PIPE,
            )
            assert process.stderr is not None
            log: list[str] = []
            try:
                while not (listening := LISTENING.search("".join(log))):
                    line = await asyncio.wait_for(process.stderr.readline(), timeout=30.0)
                    assert line, f"the activator exited: {''.join(log)}"
                    log.append(line.decode())
                http_port, admin_port = int(listening.group(1)), int(listening.group(3))
                rest_of_log = asyncio.create_task(process.stderr.read())
                async with aiohttp.ClientSession() as session:
                    async with session.get(f"http://127.0.0.1:{admin_port}/readyz") as response:
                        assert response.status == 200
                    url = f"http://127.0.0.1:{http_port}/v2/health/ready"
                    async with session.get(url, headers={"Host": "warm.shop"}) as response:
                        assert response.status == 200
                    cold = asyncio.create_task(session.get(url, headers={"Host": "cold.shop"}))

                    async def cold_is_held() -> bool:
                        async with session.get(f"http://127.0.0.1:{admin_port}/metrics") as response:
                            page = await response.text()
                        return (
                            'tailpilot_activator_held_requests{namespace="shop",service="cold"} 1.0' in page
                        )

                    await eventually_async(cold_is_held, timeout=10.0)
                    process.send_signal(signal.SIGTERM)
                    response = await asyncio.wait_for(cold, timeout=10.0)
                    assert response.status == 504  # held through the drain until its timeout
                    response.release()
                assert await asyncio.wait_for(process.wait(), timeout=10.0) == 0
                assert "drained; exiting" in (await asyncio.wait_for(rest_of_log, timeout=5.0)).decode()
            finally:
                if process.returncode is None:
                    process.kill()
                    await process.wait()

    asyncio.run(scenario())
