"""Reading the Triton pods' own metrics pages: the I/O of the fast signals (`tailpilot.policy.signals`).

Every `READ_PERIOD_S` the service's fast loop (`tailpilot.controllers.autoscale.fast_checks`) lists its Ready
pods and calls `PodSignals.read`: each pod's metrics page (`:8002/metrics`) is fetched concurrently,
the service's model's counters are summed over its versions (`parse_triton_counters`), and the read
is appended to the service's `ReadHistory`. The autoscaler builds its Observation from that history
(`Autoscaler.step`), the rotation and surge rules from the same reads: one reader for every rule.

A pod whose page cannot be read (a NetworkPolicy, a port, a pod still loading its model) is left out
of the read; when no pod of a service can be read, the autoscaler falls back to Prometheus' rates.

Every `BATCH_STATS_PERIOD_S` a read also asks each pod's Triton statistics extension
(`:8000/v2/models/<model>/stats`), concurrently with the pages and under the same timeout, for the
executions per batch size (`parse_batch_stats`; the metrics page has no per-size figure). A pod whose
statistics cannot be read has none that period; the read still stands on its page.

Cost: one GET per Ready pod per period, concurrent, each bounded by `METRICS_TIMEOUT_S`; one more per
pod every `BATCH_STATS_PERIOD_S`.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

import aiohttp

from tailpilot.api import constants as c
from tailpilot.controllers.core.clock import SYSTEM_CLOCK, Clock
from tailpilot.controllers.core.kubeapi import pod_url
from tailpilot.controllers.signals.observe import PENDING_GAUGE, RATE_COUNTERS
from tailpilot.controllers.signals.service_runtime import ServiceRuntime, ServiceRuntimes
from tailpilot.policy.batch_sizes import BatchCounts, SizeCounts
from tailpilot.policy.signals import (
    DEFAULT_READS_PER_S,
    RATE_FIELDS,
    READ_PERIOD_S,
    PodRead,
    ReadHistory,
    TritonCounters,
    batch_stats_due,
    read_period_s,
    sample_pods,
)

log = logging.getLogger("tailpilot.signals")

#: A pod's metrics page must answer within this, or the pod counts as unreadable this period.
METRICS_TIMEOUT_S = 1.0
#: Connections open at once to the pods (kept alive between reads).
MAX_CONNECTIONS = 256
#: Largest metrics page read from a pod. Triton's page for one model on one GPU is about 7 KB (a
#: real one is in tests/controllers/triton_metrics_page.txt) and grows with models and GPUs; a page
#: past this is not Triton's, or not a page worth parsing on the event loop every 2 s, and the pod
#: counts as unreadable, as one that does not answer.
MAX_PAGE_BYTES = 1 << 20
#: Largest statistics answer read from a pod (`/v2/models/<model>/stats`: a few KB per version).
MAX_STATS_BYTES = 1 << 20
#: Triton metric name -> TritonCounters field.
_COUNTER_OF_METRIC: Mapping[str, str] = {
    metric: RATE_FIELDS[rate_field] for rate_field, metric in RATE_COUNTERS.items()
}


class AnswerTooLarge(Exception):
    """A pod answered more than the reader takes (the pod counts as unreadable)."""


async def bounded_body(response: aiohttp.ClientResponse, limit: int) -> bytes:
    """The answer's bytes, read in chunks and refused past `limit` (before they are all held)."""
    declared = response.content_length
    if declared is not None and declared > limit:
        raise AnswerTooLarge(f"{response.url} declared {declared} bytes, more than {limit}")
    body = bytearray()
    async for chunk in response.content.iter_chunked(64 << 10):
        body += chunk
        if len(body) > limit:
            raise AnswerTooLarge(f"{response.url} answered more than {limit} bytes")
    return bytes(body)


async def read_page(session: aiohttp.ClientSession, url: str, *, limit: int) -> str:
    """A metrics page's text: a 2xx answer of at most `limit` bytes (else an error is raised)."""
    async with session.get(url) as response:
        response.raise_for_status()
        return (await bounded_body(response, limit)).decode("utf-8", errors="replace")


def parse_triton_counters(text: str, *, model: str) -> TritonCounters | None:
    """Sum `model`'s counters (every version) and its pending gauge in Triton's metrics page.

    None when the page has none of them for the model (not loaded yet, or another server).

    A page is read every 2 s from every pod, so this reads only the lines of the ten metrics it
    needs (Triton's page has dozens of families: GPU, CPU, cache, per-version latencies) and only
    their `model` label; `prometheus_client`'s full parser took about 0.8 ms a page here, most of the
    loop's parsing time. `tests/controllers/test_ctrl_fast_checks.py` checks it against that parser.
    """
    sums = dict.fromkeys((*_COUNTER_OF_METRIC.values(), "pending"), 0.0)
    seen = False
    for line in text.splitlines():
        if not line.startswith("nv_inference_"):
            continue
        name, brace, rest = line.partition("{")
        field = FIELD_OF_METRIC.get(name.removesuffix("_total"))
        if field is None or not brace:
            continue
        labels, value = _labels_and_value(rest)
        if labels is None or labels.get("model") != model:
            continue
        sums[field] += value
        seen = True
    return TritonCounters(**sums) if seen else None


#: Metric name -> TritonCounters field, the pending gauge included: every line a read needs.
FIELD_OF_METRIC: Mapping[str, str] = {**_COUNTER_OF_METRIC, PENDING_GAUGE: "pending"}


def _labels_and_value(rest: str) -> tuple[dict[str, str] | None, float]:
    """The labels and the value of a sample line after its `{` (None: not a well-formed sample)."""
    labels: dict[str, str] = {}
    i, n = 0, len(rest)
    while i < n and rest[i] != "}":
        if rest[i] in ", ":
            i += 1
            continue
        eq = rest.find("=", i)
        if eq < 0 or eq + 1 >= n or rest[eq + 1] != '"':
            return None, 0.0
        key, i, chars = rest[i:eq].strip(), eq + 2, []
        while i < n and rest[i] != '"':
            if rest[i] == "\\" and i + 1 < n:
                i += 1
                chars.append("\n" if rest[i] == "n" else rest[i])
            else:
                chars.append(rest[i])
            i += 1
        labels[key] = "".join(chars)
        i += 1
    fields = rest[i + 1 :].split()
    try:
        return (labels, float(fields[0])) if i < n and fields else (None, 0.0)
    except ValueError:
        return None, 0.0


def parse_batch_stats(body: Any, *, model: str) -> dict[int, SizeCounts] | None:
    """The model's cumulative figures per batch size in a statistics answer, every version summed.

    Triton's `GET /v2/models/<model>/stats` answers `model_stats[]`, one entry per version, each with
    `batch_stats[]`: `batch_size` and `compute_infer` (`count`: executions at that size, `ns`: the
    compute time they took; the figures of a real Triton 2.51 are in
    `tests/controllers/triton_model_stats.json`). None when the answer has no entry for the model.
    """
    entries = body.get("model_stats") if isinstance(body, dict) else None
    if not isinstance(entries, list):
        return None
    counts: dict[int, SizeCounts] = {}
    seen = False
    for entry in entries:
        if not isinstance(entry, dict) or entry.get("name") != model:
            continue
        seen = True
        for batch in entry.get("batch_stats") or ():
            if not isinstance(batch, dict):
                continue
            infer = batch.get("compute_infer")
            if not isinstance(infer, dict):
                continue
            try:
                size, count = int(batch.get("batch_size")), int(infer.get("count"))  # type: ignore[arg-type]
                ns = float(infer.get("ns") or 0)  # JSON numbers, or strings
            except (TypeError, ValueError):
                continue
            if size >= 1 and count >= 0 and math.isfinite(ns) and ns >= 0:
                was = counts.get(size, SizeCounts(0))
                counts[size] = SizeCounts(was.executions + count, was.compute_us + ns / 1000.0)
    return counts if seen else None


def pod_metrics_url(pod_ip: str) -> str:
    """Where a Triton pod serves its metrics page."""
    return pod_url(pod_ip, c.TRITON_METRICS_PORT, "/metrics")


def pod_stats_url(pod_ip: str, model: str) -> str:
    """Where a Triton pod serves the model's statistics (every version)."""
    return pod_url(pod_ip, c.TRITON_HTTP_PORT, f"/v2/models/{quote(model, safe='')}/stats")


@dataclass
class PodSignals:
    """Reads services' pods and keeps each one's reads: the operator's one reader of Triton's counters.

    aiohttp rather than the operator's httpx client: this loop sends a GET per Ready pod every 2 s,
    and reading 500 services of 2 pods took a whole core with httpx, 0.17 of one with aiohttp
    (`make bench-fast-loop`, docs/autoscaling.md section 6). The session is made on first use, in
    the running event loop.
    """

    clock: Clock = SYSTEM_CLOCK
    #: Pod IP -> its metrics page's URL (tests route pods to local servers).
    url_of: Callable[[str], str] = pod_metrics_url
    #: (pod IP, model) -> its statistics' URL (tests route pods to local servers).
    stats_url_of: Callable[[str, str], str] = pod_stats_url
    _session: aiohttp.ClientSession | None = None
    #: Each service's runtime: its reads are kept there (`ServiceRuntime.reads`), where the
    #: decisions and the fast rules read them.
    runtimes: ServiceRuntimes = field(default_factory=ServiceRuntimes)
    #: Pod reads per second at most, all services together (`read_period_s`).
    reads_per_s: float = DEFAULT_READS_PER_S
    _period_s: float = READ_PERIOD_S

    def forget(self, namespace: str, name: str) -> None:
        """Drop a service's reads (deleted, or no longer served)."""
        self.runtimes.forget_reads(namespace, name)

    @property
    def period_s(self) -> float:
        """Seconds between two reads of a service: `READ_PERIOD_S`, longer beyond the read budget."""
        return self._period_s

    def unreadable(self, namespace: str, name: str) -> frozenset[str]:
        """The pods the service's last read asked for and could not read."""
        runtime = self.runtimes.find(namespace, name)
        return runtime.reads.unreadable if runtime is not None else frozenset()

    def _budget(self, runtime: ServiceRuntime, asked: int) -> None:
        """Count a read's pods in the budget; a new period when the total crosses a step."""
        pods = self.runtimes.count_asked(runtime, asked)
        period = read_period_s(pods, reads_per_s=self.reads_per_s)
        if period != self._period_s:
            log.warning(
                "reading %d pods every %.1f s (was %.1f s): the budget is %.0f pod reads/s",
                pods,
                period,
                self._period_s,
                self.reads_per_s,
            )
            self._period_s = period

    def history(self, namespace: str, name: str) -> ReadHistory | None:
        """The service's reads, or None before its first."""
        runtime = self.runtimes.find(namespace, name)
        return runtime.reads.history if runtime is not None else None

    async def close(self) -> None:
        """Close the HTTP session (the operator is stopping)."""
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def read(
        self, namespace: str, name: str, *, model: str, pod_ips: Mapping[str, str], keep_s: float
    ) -> PodRead:
        """Read the pods (name -> IP) now, add the read to the service's history and return it.

        A service of more than `MAX_PODS_PER_READ` Ready pods is read through a stable sample of
        them (`sample_pods`); the read says how many pods it stands for, and so does a read some
        Ready pods did not answer (their arrivals are estimated from the others').
        """
        asked = {pod: pod_ips[pod] for pod in sample_pods(list(pod_ips))}
        runtime = self.runtimes.get(namespace, name)
        memory = runtime.reads
        self._budget(runtime, len(asked))
        started = self.clock.time()
        due = batch_stats_due(now_s=started, last_s=memory.stats_at_s, read_period_s=self._period_s)
        if due:
            memory.stats_at_s = started
        at_s, counters, batches = await self._fetch(asked, model=model, stats=due)
        self._note_unreadable(runtime, frozenset(asked) - set(counters))
        # A sample, or a Ready pod whose page could not be read: the read stands for every Ready
        # pod, so the pods that answered count for those that did not. Summing only what answered
        # would read as a fall in the load, and a scale-down on missing data.
        serving = len(pod_ips) if len(counters) < len(pod_ips) else None
        read = PodRead(at_s=at_s, pods=counters, serving=serving, batches=batches)
        history = runtime.reads.history
        if history is None or history.keep_s != keep_s:
            kept = history.reads if history is not None else ()
            history = runtime.reads.history = ReadHistory(keep_s=keep_s)
            for earlier in kept:
                history.add(earlier)
        history.add(read)
        return read

    async def _fetch(
        self, pod_ips: Mapping[str, str], *, model: str, stats: bool
    ) -> tuple[float, dict[str, TritonCounters], dict[str, BatchCounts] | None]:
        """(when the pages were in, each pod's counters, with `stats` its executions per batch size).

        Pages and statistics are asked at once, each under the session's timeout.
        """
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=METRICS_TIMEOUT_S),
                connector=aiohttp.TCPConnector(limit=MAX_CONNECTIONS),
            )
        session = self._session
        names = list(pod_ips)
        # Both gathers start now; the read's time is when the pages are in, not when the slower
        # statistics are (a pod's port 8000 closed would otherwise date its counters a timeout late).
        pages_in = asyncio.gather(
            *(self._page(session, self.url_of(pod_ips[n])) for n in names), return_exceptions=True
        )
        answers_in = asyncio.gather(
            *(self._json(session, self.stats_url_of(pod_ips[n], model)) for n in names if stats),
            return_exceptions=True,
        )
        try:
            pages = await pages_in
            at_s = self.clock.time()
            answers = await answers_in
        finally:
            answers_in.cancel()  # when the read itself was cancelled; nothing once it is done
        out = {}
        for pod, page in zip(names, pages, strict=True):
            if isinstance(page, BaseException):
                log.debug("metrics of pod %s unreadable: %r", pod, page)
                continue
            counters = parse_triton_counters(page, model=model)
            if counters is not None:
                out[pod] = counters
        if not stats:
            return at_s, out, None
        batches: dict[str, BatchCounts] = {}
        for pod, answer in zip(names, answers, strict=True):
            counts = None if isinstance(answer, BaseException) else parse_batch_stats(answer, model=model)
            if counts is None:
                log.debug("statistics of pod %s unreadable: %r", pod, answer)
                continue
            batches[pod] = counts
        return at_s, out, batches

    @staticmethod
    async def _json(session: aiohttp.ClientSession, url: str) -> Any:
        async with session.get(url) as response:
            response.raise_for_status()
            return json.loads(await bounded_body(response, MAX_STATS_BYTES))

    @staticmethod
    async def _page(session: aiohttp.ClientSession, url: str) -> str:
        return await read_page(session, url, limit=MAX_PAGE_BYTES)

    def _note_unreadable(self, runtime: ServiceRuntime, pods: frozenset[str]) -> None:
        """Warn when pods become unreadable: their arrivals are estimated from the pods that answer."""
        before = runtime.reads.unreadable
        if pods - before:
            log.warning(
                "%s/%s: cannot read the Triton metrics of %s on port %d",
                *runtime.key,
                ", ".join(sorted(pods - before)),
                c.TRITON_METRICS_PORT,
            )
        runtime.reads.unreadable = pods
