"""Where a decision's rates come from: the pods' fresh reads, or Prometheus when there are none.

A period takes its `now` before it waits (its pod list, the API server, the event loop); meanwhile
the fast loop may store a newer read of the service. That read is the freshest there is: the
decision must use it, not fall back to the per-service Prometheus queries (about 14 of them),
which at 500 services made most of the operator's Prometheus load. A read far from `now` (old, or
from before a clock stepped back) is not fresh.
"""

from __future__ import annotations

import asyncio
import json

import httpx

from tailpilot.bench.triton_metrics import latency_answer, metrics_page
from tailpilot.controllers.autoscale.autoscaler import FRESH_READS, Autoscaler
from tailpilot.controllers.core.metrics import OperatorMetrics
from tailpilot.controllers.signals.pod_signals import READ_PERIOD_S, PodSignals
from tailpilot.policy.signals import PodLatency, TritonCounters
from tests.controllers.specs import service
from tests.fakes import FakeClock, PageServer, UnexpectedKube

MODEL = "resnet"
PODS = {"resnet-a": "10.1.0.1", "resnet-b": "10.1.0.2"}
TEXT = "text/plain; version=0.0.4"


def observe_after_reads(decision_now_s: list[float]) -> list[tuple[str | None, int]]:
    """Read the pods at 100 s and 102 s, then observe at each `now`: (rates_from, queries sent)."""
    isvc = service()
    clock = FakeClock()

    async def run(server: PageServer) -> list[tuple[str | None, int]]:
        async with httpx.AsyncClient() as http:
            signals = PodSignals(clock=clock, url_of=lambda ip: f"{server.url}/pods/{ip}/metrics")
            autoscaler = Autoscaler(
                kube=UnexpectedKube(),  # _observe talks to the pods and Prometheus only
                http=http,
                metrics=OperatorMetrics(),
                default_prometheus_url=None,
                control_period_s=15.0,
                clock=clock,
                signals=signals,
            )
            for at_s, success in ((100.0, 1000.0), (102.0, 1040.0)):
                clock.now = at_s
                for ip in PODS.values():
                    page = metrics_page(TritonCounters(success=success, pending=0.0), model=MODEL)
                    server.pages[f"/pods/{ip}/metrics"] = (TEXT, page)
                await signals.read("shop", "resnet", model=MODEL, pod_ips=PODS, keep_s=120.0)
            seen = []
            for now_s in decision_now_s:
                before = server.hits.get("/api/v1/query", 0)
                observation = await autoscaler._observe(isvc, server.url, now_s)
                seen.append((observation.rates_from, server.hits.get("/api/v1/query", 0) - before))
            await signals.close()
            return seen

    with PageServer() as server:
        latency = {pod: PodLatency.of([(0.99, 9000.0)]) for pod in PODS}
        answer = latency_answer({("shop", "resnet"): latency}, at_s=102.0)
        server.pages["/api/v1/query"] = ("application/json", json.dumps(answer))
        return asyncio.run(run(server))


def test_a_read_stored_after_the_decisions_now_is_used_and_a_far_one_is_not():
    horizon = FRESH_READS * READ_PERIOD_S
    seen = observe_after_reads(
        [
            101.0,  # the decision took its time before the read at 102 s was stored
            102.0 + horizon,  # the newest read is as old as fresh allows
            102.0 - horizon - 1.0,  # a read well after now: a clock stepped back
            102.0 + horizon + 1.0,  # too old
        ]
    )
    # Fresh: the pods' rates, and only the one shared latency query (answered once, then reused
    # within its age).
    assert [rates for rates, _ in seen[:2]] == ["Pods", "Pods"]
    assert sum(queries for _, queries in seen[:2]) <= 2
    # Not fresh: every signal asked of Prometheus, one query per signal of the service (this
    # scripted Prometheus answers each with the latency vector, so no rate comes of it).
    for rates, queries in seen[2:]:
        assert rates != "Pods"
        assert queries > 2
