"""Reading the requests the activator holds for a service: the I/O behind sizing a wake.

While a service woken from zero has no ready replica, every request it gets waits at the activator
(`tailpilot.activator`), and the policy sizes the wake from them (`tailpilot.policy.wake`). Each
activator pod exports how many it holds per service on its metrics port
(`tailpilot_activator_held_requests{namespace,service}`), and the operator already follows the
activator's ready pods (`tailpilot.controllers.process.activator_watch`), so this reads each pod's
page at once and sums the service's gauge. The chart's NetworkPolicy admits the operator's pods on
that port.

A pod that does not answer within `HELD_TIMEOUT_S`, or answers more than `MAX_PAGE_BYTES`, is left
out of the sum; when none answers, there is no reading (None) and the decision is the policy's
without it. Only services that are woken and have no ready replica are read, so this costs one GET
per activator pod per such service per control period.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from tailpilot.controllers.signals.pod_signals import AnswerTooLarge, read_page
from tailpilot.manifests.activator_routing import ActivatorEndpoints

log = logging.getLogger("tailpilot.signals")

#: The activator's gauge of requests held now, per service (`tailpilot.activator.metrics`).
HELD_GAUGE = "tailpilot_activator_held_requests"
#: The activator Service's port that serves the metrics page (the chart names it so).
METRICS_PORT_NAME = "metrics"
#: An activator pod must answer within this, or it is left out of the sum.
HELD_TIMEOUT_S = 1.0
#: The activator's page: a few families plus one line per service it held for; past this, not read.
MAX_PAGE_BYTES = 4 << 20


def held_in_page(text: str, *, namespace: str, service: str) -> int:
    """The requests an activator's metrics page says it holds for `namespace/service` (0 if none)."""
    held = 0.0
    for family in text_string_to_metric_families(text):
        if family.name != HELD_GAUGE:
            continue
        for sample in family.samples:
            if sample.labels.get("namespace") == namespace and sample.labels.get("service") == service:
                held += sample.value
    return max(0, round(held))


class ActivatorHeld:
    """Sums the requests the activator's ready pods hold for one service.

    A session per reading: it runs only while a service is woken and not yet served, at most once a
    control period, so no connection is kept open between readings (nor needs closing at exit).
    """

    def __init__(self, endpoints: Callable[[], ActivatorEndpoints | None]) -> None:
        """Read the pods `endpoints()` lists now (None: none seen yet)."""
        self._endpoints = endpoints

    async def held(self, namespace: str, service: str) -> int | None:
        """Requests held for `namespace/service` across the activator's pods (None: none answered)."""
        endpoints = self._endpoints()
        port = endpoints.ports.get(METRICS_PORT_NAME) if endpoints is not None else None
        if endpoints is None or port is None or not endpoints.addresses:
            return None
        timeout = aiohttp.ClientTimeout(total=HELD_TIMEOUT_S)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            pages = await asyncio.gather(
                *(_page(session, f"http://{_host(ip)}:{port}/metrics") for ip in endpoints.addresses)
            )
        read = [held_in_page(p, namespace=namespace, service=service) for p in pages if p is not None]
        return sum(read) if read else None


async def _page(session: aiohttp.ClientSession, url: str) -> str | None:
    try:
        return await read_page(session, url, limit=MAX_PAGE_BYTES)
    except (TimeoutError, aiohttp.ClientError, AnswerTooLarge, ValueError) as error:
        log.warning("cannot read the requests held at the activator (%s): %s", url, error)
        return None


def _host(address: str) -> str:
    return f"[{address}]" if ":" in address else address
