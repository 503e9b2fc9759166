"""Open-loop load generator for Triton's HTTP/REST v2 inference API.

Open loop: request i is sent at `start + arrivals[i]` whether or not earlier ones have
finished, so a slow server sees the queue build up as it would in production (a closed
loop would slow the clients down instead and hide the tail).  Every run is bounded: at most
`max_requests` requests, nothing sent after `max_duration_s`, at most `max_in_flight`
outstanding (a request that would exceed it is not sent and is counted as
`client_overload`), and a per-request timeout.  Latency is measured client-side, from just
before the request is written to when the full response is read.

Usage (the demo and bench/validate.py)::

    payload = binary_infer_body(inputs=[("input", np.zeros((1, 3, 64, 64), np.float32))])
    result = asyncio.run(run_load(url="http://127.0.0.1:8000", model="example", payload=payload,
                                  arrivals_s=arrivals, max_requests=2000, max_duration_s=60))
"""

from __future__ import annotations

import asyncio
import json
import math
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx
import numpy as np
import numpy.typing as npt


@dataclass(frozen=True)
class Payload:
    """An encoded inference request: body bytes and the headers that go with them."""

    body: bytes
    headers: dict[str, str]


_TRITON_DTYPES = {
    np.dtype(np.float32): "FP32",
    np.dtype(np.float16): "FP16",
    np.dtype(np.int64): "INT64",
    np.dtype(np.int32): "INT32",
    np.dtype(np.uint8): "UINT8",
}


def infer_body(*, inputs: Sequence[tuple[str, str, Sequence[int], Sequence[float | int]]]) -> Payload:
    """A JSON v2 inference request from (name, datatype, shape, flat data) tuples."""
    doc = {
        "inputs": [
            {"name": name, "datatype": dtype, "shape": list(shape), "data": list(data)}
            for name, dtype, shape, data in inputs
        ]
    }
    return Payload(json.dumps(doc).encode(), {"Content-Type": "application/json"})


def binary_infer_body(*, inputs: Sequence[tuple[str, npt.NDArray[Any]]]) -> Payload:
    """A v2 request using Triton's binary tensor data extension (no JSON number parsing on the server).

    The JSON header is followed by the raw little-endian tensor bytes;
    `Inference-Header-Content-Length` tells the server where the header ends.
    """
    header = {
        "inputs": [
            {
                "name": name,
                "shape": list(arr.shape),
                "datatype": _TRITON_DTYPES[arr.dtype],
                "parameters": {"binary_data_size": int(arr.nbytes)},
            }
            for name, arr in inputs
        ]
    }
    head = json.dumps(header).encode()
    raw = b"".join(
        np.ascontiguousarray(arr).astype(arr.dtype.newbyteorder("<")).tobytes() for _, arr in inputs
    )
    return Payload(
        head + raw,
        {"Content-Type": "application/octet-stream", "Inference-Header-Content-Length": str(len(head))},
    )


@dataclass
class LoadResult:
    """Per-request records of one run (times in seconds from the run's start)."""

    scheduled_s: list[float] = field(default_factory=list)
    sent_s: list[float] = field(default_factory=list)
    latency_s: list[float] = field(default_factory=list)  # nan when no response
    status: list[int] = field(default_factory=list)  # HTTP status, 0 when none
    errors: Counter[str] = field(default_factory=Counter)
    wall_s: float = 0.0

    @property
    def ok(self) -> int:
        """Requests answered with HTTP 200."""
        return sum(1 for s in self.status if s == 200)

    def quantile_ms(self, q: float) -> float:
        """Quantile of the latency of successful requests (ms); nan when none succeeded."""
        lat = np.asarray([x for x, s in zip(self.latency_s, self.status, strict=True) if s == 200])
        return float(np.quantile(lat, q) * 1000.0) if lat.size else math.nan

    def throughput_per_s(self) -> float:
        """Successful requests per second over the run."""
        return self.ok / self.wall_s if self.wall_s > 0 else 0.0

    def summary(self) -> dict[str, float | int | dict[str, int]]:
        """Numbers for a report."""
        return {
            "sent": len(self.sent_s),
            "ok": self.ok,
            "p50_ms": self.quantile_ms(0.5),
            "p99_ms": self.quantile_ms(0.99),
            "throughput_per_s": self.throughput_per_s(),
            "errors": dict(self.errors),
        }


async def _one(
    client: httpx.AsyncClient, url: str, payload: Payload, t0: float, idx: int, out: LoadResult
) -> None:
    sent = time.perf_counter()
    out.sent_s[idx] = sent - t0
    try:
        resp = await client.post(url, content=payload.body, headers=payload.headers)
        await resp.aread()
        out.latency_s[idx] = time.perf_counter() - sent
        out.status[idx] = resp.status_code
        if resp.status_code != 200:
            out.errors[f"http_{resp.status_code}"] += 1
    except httpx.TimeoutException:
        out.errors["timeout"] += 1
    except httpx.HTTPError as exc:
        out.errors[type(exc).__name__] += 1


async def run_load(
    *,
    url: str | Sequence[str],
    model: str,
    payload: Payload,
    arrivals_s: npt.NDArray[np.float64] | Sequence[float],
    max_requests: int,
    max_duration_s: float,
    max_in_flight: int = 512,
    timeout_s: float = 30.0,
) -> LoadResult:
    """Replay `arrivals_s` (seconds from the start) against `url`/v2/models/`model`/infer.

    Several URLs (one per replica) are used round robin, like a Kubernetes Service.
    """
    arrivals = [float(a) for a in arrivals_s if a <= max_duration_s][:max_requests]
    out = LoadResult()
    n = len(arrivals)
    out.scheduled_s = arrivals
    out.sent_s = [math.nan] * n
    out.latency_s = [math.nan] * n
    out.status = [0] * n
    bases = [url] if isinstance(url, str) else list(url)
    endpoints = [f"{u.rstrip('/')}/v2/models/{model}/infer" for u in bases]
    limits = httpx.Limits(max_connections=max_in_flight, max_keepalive_connections=max_in_flight)
    tasks: set[asyncio.Task[None]] = set()
    async with httpx.AsyncClient(timeout=timeout_s, limits=limits) as client:
        t0 = time.perf_counter()
        for i, at in enumerate(arrivals):
            delay = t0 + at - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)  # pacing to the schedule, not synchronization
            if len(tasks) >= max_in_flight:
                out.errors["client_overload"] += 1
                continue
            task = asyncio.create_task(_one(client, endpoints[i % len(endpoints)], payload, t0, i, out))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
        if tasks:
            await asyncio.wait(set(tasks), timeout=timeout_s + 1.0)
        out.wall_s = time.perf_counter() - t0
    return out
