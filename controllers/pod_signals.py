"""Reading the Triton pods' own metrics pages: the I/O of the fast signals (`tailpilot.policy.signals`).

Every `READ_PERIOD_S` the service's fast loop (`tailpilot.controllers.fast_checks`) lists its Ready
pods and calls `PodSignals.read`: each pod's metrics page (`:8002/metrics`) is fetched concurrently,
the service's model's counters are summed over its versions (`parse_triton_counters`), and the read
is appended to the service's `ReadHistory`. The autoscaler builds its Observation from that history
(`Autoscaler.step`), the rotation and surge rules from the same reads: one reader for every rule.

A pod whose page cannot be read (a NetworkPolicy, a port, a pod still loading its model) is left out
of the read; when no pod of a service can be read, the autoscaler falls back to Prometheus' rates.

Cost: one GET per Ready pod per period, concurrent, each bounded by `METRICS_TIMEOUT_S`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field

import httpx
from prometheus_client.parser import text_string_to_metric_families

from tailpilot.api import constants as c
from tailpilot.controllers.clock import SYSTEM_CLOCK, Clock
from tailpilot.controllers.observe import PENDING_GAUGE, RATE_COUNTERS
from tailpilot.policy.signals import RATE_FIELDS, PodRead, ReadHistory, TritonCounters

log = logging.getLogger("tailpilot.signals")

#: A pod's metrics page must answer within this, or the pod counts as unreadable this period.
METRICS_TIMEOUT_S = 1.0

#: Triton metric name -> TritonCounters field.
_COUNTER_OF_METRIC: Mapping[str, str] = {
    metric: RATE_FIELDS[rate_field] for rate_field, metric in RATE_COUNTERS.items()
}


def parse_triton_counters(text: str, *, model: str) -> TritonCounters | None:
    """Sum `model`'s counters (every version) and its pending gauge in Triton's metrics page.

    None when the page has none of them for the model (not loaded yet, or another server).
    """
    sums = dict.fromkeys((*_COUNTER_OF_METRIC.values(), "pending"), 0.0)
    seen = False
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.labels.get("model") != model:
                continue
            name = sample.name.removesuffix("_total")
            if name == PENDING_GAUGE:
                sums["pending"] += sample.value
                seen = True
            elif name in _COUNTER_OF_METRIC:
                sums[_COUNTER_OF_METRIC[name]] += sample.value
                seen = True
    return TritonCounters(**sums) if seen else None


@dataclass
class PodSignals:
    """Reads services' pods and keeps each one's reads: the operator's one reader of Triton's counters."""

    http: httpx.AsyncClient
    clock: Clock = SYSTEM_CLOCK
    _histories: dict[tuple[str, str], ReadHistory] = field(default_factory=dict)
    #: Pods whose page the last read could not fetch (logged when that changes, not every period).
    _unreadable: dict[tuple[str, str], frozenset[str]] = field(default_factory=dict)

    def forget(self, namespace: str, name: str) -> None:
        """Drop a service's reads (deleted, or no longer served)."""
        self._histories.pop((namespace, name), None)
        self._unreadable.pop((namespace, name), None)

    def history(self, namespace: str, name: str) -> ReadHistory | None:
        """The service's reads, or None before its first."""
        return self._histories.get((namespace, name))

    async def read(
        self, namespace: str, name: str, *, model: str, pod_ips: Mapping[str, str], keep_s: float
    ) -> PodRead:
        """Read the pods (name -> IP) now, add the read to the service's history and return it."""
        counters = await self._fetch(pod_ips, model=model)
        self._note_unreadable((namespace, name), frozenset(pod_ips) - set(counters))
        read = PodRead(at_s=self.clock.time(), pods=counters)
        history = self._histories.get((namespace, name))
        if history is None or history.keep_s != keep_s:
            kept = history.reads if history is not None else ()
            history = self._histories[(namespace, name)] = ReadHistory(keep_s=keep_s)
            for earlier in kept:
                history.add(earlier)
        history.add(read)
        return read

    async def _fetch(self, pod_ips: Mapping[str, str], *, model: str) -> dict[str, TritonCounters]:
        names = list(pod_ips)
        pages = await asyncio.gather(
            *(
                self.http.get(
                    f"http://{pod_ips[n]}:{c.TRITON_METRICS_PORT}/metrics", timeout=METRICS_TIMEOUT_S
                )
                for n in names
            ),
            return_exceptions=True,
        )
        out = {}
        for pod, page in zip(names, pages, strict=True):
            if isinstance(page, BaseException) or page.status_code != 200:
                log.debug("metrics of pod %s unreadable: %r", pod, page)
                continue
            counters = parse_triton_counters(page.text, model=model)
            if counters is not None:
                out[pod] = counters
        return out

    def _note_unreadable(self, key: tuple[str, str], pods: frozenset[str]) -> None:
        """Warn when pods become unreadable: their arrivals are missed until Prometheus stands in."""
        before = self._unreadable.get(key, frozenset())
        if pods - before:
            log.warning(
                "%s/%s: cannot read the Triton metrics of %s on port %d",
                *key,
                ", ".join(sorted(pods - before)),
                c.TRITON_METRICS_PORT,
            )
        self._unreadable[key] = pods
