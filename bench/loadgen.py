"""Open-loop load generator for Triton's HTTP/REST v2 inference API.

Open loop: request i is sent at `start + arrivals[i]` whether or not earlier ones have
finished, so a slow server sees the queue build up as it would in production (a closed
loop would slow the clients down instead and hide the tail).  Every run is bounded: at most
`max_requests` requests, nothing sent after `max_duration_s`, at most `max_in_flight`
outstanding (a request that would exceed it is not sent and is counted as
`client_overload`), and a per-request timeout.  Latency is measured client-side, from just
before the request is written to when the full response is read, over keep-alive HTTP/1.1
connections of a client light enough not to be the bottleneck (`bench/http1.py`).

Several base URLs are used round robin, like a Kubernetes Service; `url` may also be a
callable returning the current list, asked at every request, so replicas that appear or
go away are followed (an empty list counts the request as `no_endpoint`).  `on_progress`
gets a `Progress` every `progress_interval_s` and once at the end, for live views.

Usage (the demo and bench/validate.py)::

    payload = binary_infer_body(inputs=[("input", np.zeros((1, 3, 64, 64), np.float32))])
    result = asyncio.run(run_load(url="http://127.0.0.1:8000", model="example", payload=payload,
                                  arrivals_s=arrivals, max_requests=2000, max_duration_s=60))

To keep the client's own queueing out of the measurement, run it in a process of its
own: `tailpilot.bench.loadgen_process`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import math
import time
from collections import Counter, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from tailpilot.bench.http1 import Http1Client, RequestFailed


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
    target: list[str] = field(default_factory=list)  # base URL the request went to, "" when none
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

    def to_json(self) -> dict[str, Any]:
        """A JSON-safe dict (nan becomes null); `from_json` reads it back."""
        return {
            "scheduled_s": _nullable(self.scheduled_s),
            "sent_s": _nullable(self.sent_s),
            "latency_s": _nullable(self.latency_s),
            "status": list(self.status),
            "target": list(self.target),
            "errors": dict(self.errors),
            "wall_s": self.wall_s,
        }

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> LoadResult:
        """Inverse of `to_json`."""
        return cls(
            scheduled_s=_floats(doc["scheduled_s"]),
            sent_s=_floats(doc["sent_s"]),
            latency_s=_floats(doc["latency_s"]),
            status=[int(x) for x in doc["status"]],
            target=[str(x) for x in doc.get("target", [])],
            errors=Counter({str(k): int(v) for k, v in doc["errors"].items()}),
            wall_s=float(doc["wall_s"]),
        )


def _nullable(values: Sequence[float]) -> list[float | None]:
    return [x if math.isfinite(x) else None for x in values]


def _floats(values: Sequence[float | None]) -> list[float]:
    return [math.nan if x is None else float(x) for x in values]


@dataclass(frozen=True)
class Progress:
    """Where a run stands `t_s` seconds after its start (counts are cumulative)."""

    t_s: float
    sent: int
    completed: int
    ok: int
    errors: int
    #: Client-side P99 (ms) of the successful requests that completed in the last `window_s`; nan if none.
    p99_ms: float
    in_flight: int

    def to_json(self) -> dict[str, Any]:  # noqa: D102
        return {**dataclasses.asdict(self), "p99_ms": self.p99_ms if math.isfinite(self.p99_ms) else None}

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> Progress:  # noqa: D102
        return cls(**{**doc, "p99_ms": math.nan if doc["p99_ms"] is None else doc["p99_ms"]})


class ProgressTracker:
    """Counts and the recent successful latencies of a run, kept as requests finish.

    Incremental on purpose: a progress line every second must cost the generator microseconds,
    not a pass over every request so far; that pass (tens of ms at 40k requests) delayed the
    sends scheduled behind it.
    """

    def __init__(self, window_s: float = 5.0) -> None:
        self.window_s = window_s
        self.sent = 0
        self.ok = 0
        #: (time the answer arrived, latency) of the successful requests, oldest first.
        self._recent: deque[tuple[float, float]] = deque()

    def on_sent(self) -> None:
        self.sent += 1

    def on_ok(self, done_s: float, latency_s: float) -> None:
        self.ok += 1
        self._recent.append((done_s, latency_s))

    def progress(self, *, now_s: float, in_flight: int, errors: int) -> Progress:
        """Where the run stands at `now_s` from its start."""
        while self._recent and self._recent[0][0] <= now_s - self.window_s:
            self._recent.popleft()
        recent = [lat for done, lat in self._recent if done <= now_s]
        return Progress(
            t_s=now_s,
            sent=self.sent,
            completed=self.sent - in_flight,
            ok=self.ok,
            errors=errors,
            p99_ms=float(np.quantile(recent, 0.99) * 1000.0) if recent else math.nan,
            in_flight=in_flight,
        )


async def _one(
    client: Http1Client,
    url: str,
    payload: Payload,
    t0: float,
    idx: int,
    out: LoadResult,
    tracker: ProgressTracker,
) -> None:
    sent = time.perf_counter()
    out.sent_s[idx] = sent - t0
    tracker.on_sent()
    try:
        status = await client.post(url, payload.body, payload.headers)
        done = time.perf_counter()
        out.latency_s[idx] = done - sent
        out.status[idx] = status
        if status == 200:
            tracker.on_ok(done - t0, done - sent)
        else:
            out.errors[f"http_{status}"] += 1
    except RequestFailed as exc:
        out.errors[exc.kind] += 1


def _fixed(urls: list[str]) -> Callable[[], Sequence[str]]:
    return lambda: urls


async def _report(
    on_progress: Callable[[Progress], None],
    out: LoadResult,
    tracker: ProgressTracker,
    tasks: set[asyncio.Task[None]],
    t0: float,
    interval_s: float,
) -> None:
    while True:
        await asyncio.sleep(interval_s)  # a reporting period, not synchronization
        now_s = time.perf_counter() - t0
        on_progress(tracker.progress(now_s=now_s, in_flight=len(tasks), errors=sum(out.errors.values())))


async def run_load(
    *,
    url: str | Sequence[str] | Callable[[], Sequence[str]],
    model: str,
    payload: Payload,
    arrivals_s: npt.NDArray[np.float64] | Sequence[float],
    max_requests: int,
    max_duration_s: float,
    max_in_flight: int = 512,
    timeout_s: float = 30.0,
    on_progress: Callable[[Progress], None] | None = None,
    progress_interval_s: float = 1.0,
) -> LoadResult:
    """Replay `arrivals_s` (seconds from the start) against `url`/v2/models/`model`/infer.

    Several URLs (one per replica) are used round robin, like a Kubernetes Service; a
    callable `url` is asked for the current list before every request.
    """
    arrivals = [float(a) for a in arrivals_s if a <= max_duration_s][:max_requests]
    out = LoadResult()
    n = len(arrivals)
    out.scheduled_s = arrivals
    out.sent_s = [math.nan] * n
    out.latency_s = [math.nan] * n
    out.status = [0] * n
    out.target = [""] * n
    current = url if callable(url) else _fixed([url] if isinstance(url, str) else list(url))
    tasks: set[asyncio.Task[None]] = set()
    tracker = ProgressTracker()
    turn = 0
    client = Http1Client(timeout_s=timeout_s)  # in-flight requests, hence connections, are bounded below
    try:
        t0 = time.perf_counter()
        reporter = (
            asyncio.create_task(_report(on_progress, out, tracker, tasks, t0, progress_interval_s))
            if on_progress
            else None
        )
        try:
            for i, at in enumerate(arrivals):
                delay = t0 + at - time.perf_counter()
                if delay > 0:
                    await asyncio.sleep(delay)  # pacing to the schedule, not synchronization
                if len(tasks) >= max_in_flight:
                    out.errors["client_overload"] += 1
                    continue
                bases = current()
                if not bases:
                    out.errors["no_endpoint"] += 1
                    continue
                base = bases[turn % len(bases)]
                turn += 1
                out.target[i] = base
                endpoint = f"{base.rstrip('/')}/v2/models/{model}/infer"
                task = asyncio.create_task(_one(client, endpoint, payload, t0, i, out, tracker))
                tasks.add(task)
                task.add_done_callback(tasks.discard)
            if tasks:
                await asyncio.wait(set(tasks), timeout=timeout_s + 1.0)
        finally:
            if reporter:
                reporter.cancel()
        out.wall_s = time.perf_counter() - t0
        if on_progress:
            on_progress(
                tracker.progress(now_s=out.wall_s, in_flight=len(tasks), errors=sum(out.errors.values()))
            )
    finally:
        await client.aclose()
    return out
