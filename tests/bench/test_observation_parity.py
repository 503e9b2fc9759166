"""One loop: the benchmark's TailPilot observes exactly what the operator's own code observes.

A simulated service (T5's load step, scale-ups included) is run with the benchmark's TailPilot. Every
read period its pods' counters, figures per batch size and Prometheus' latency summaries are recorded;
then they are replayed to the operator's I/O code over real HTTP: each pod's Triton metrics page and
statistics answer and Prometheus' query answer served by a local server, read by `PodSignals` and
`LatencyBoard` and turned into an Observation by `Autoscaler._observe` with the service's spec (API
defaults). Every decision's observation must be identical on both paths, field by field.
"""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest

from tailpilot.api import constants as c
from tailpilot.api.v1alpha1 import InferenceService
from tailpilot.bench.engine_profiles import DEFAULT_PROFILE, load_profile
from tailpilot.bench.simulator import FleetView, Target, simulate
from tailpilot.bench.suite import Setup, baseline_params, make_controller, oracle_needs, sim_config, trace_of
from tailpilot.bench.tailpilot_policy import CONTROL_PERIOD_S, TailPilot
from tailpilot.bench.triton_metrics import latency_answer, metrics_page, stats_answer
from tailpilot.controllers.autoscale.autoscaler import Autoscaler
from tailpilot.controllers.core.metrics import OperatorMetrics
from tailpilot.controllers.signals.pod_signals import PodSignals
from tailpilot.policy.batch_sizes import BatchCounts
from tailpilot.policy.from_spec import observation_windows
from tailpilot.policy.signals import PodLatency, TritonCounters
from tests.fakes import FakeClock, PageServer, UnexpectedKube

NAMESPACE, NAME, MODEL = "shop", "resnet", "resnet"
TEXT = "text/plain; version=0.0.4"


class Recorder:
    """Wraps the benchmark's TailPilot; records what each read period gave it."""

    def __init__(self, inner: TailPilot, *, scrape_s: float, window_s: float) -> None:
        self.inner, self.tick_s = inner, inner.tick_s
        self._scrape_s, self._window_s = scrape_s, window_s
        self.ticks: list[
            tuple[float, dict[str, TritonCounters], dict[str, BatchCounts], dict[str, PodLatency], bool]
        ] = []

    def initial(self) -> Target:
        return self.inner.initial()

    def decide(self, view: FleetView) -> Target:
        counters, batches = view.pod_counters(), view.pod_batches()
        latency = view.scraped_latency(window_s=self._window_s, scrape_s=self._scrape_s)
        decisions = len(self.inner.observations)
        target = self.inner.decide(view)
        self.ticks.append((view.now_s, counters, batches, latency, len(self.inner.observations) > decisions))
        return target


def pod_ip(pod: str) -> str:
    index = int(pod.rsplit("-", 1)[1])
    return f"10.1.{index // 256}.{index % 256}"


@pytest.mark.slow
def test_the_operator_and_the_benchmark_build_the_same_observation_from_one_stream():
    setup = Setup(profile=load_profile(DEFAULT_PROFILE), slo_ms=880.0, duration_s=633.0, max_replicas=12)
    _, needs = oracle_needs((setup, "T5-step"))
    inner = make_controller(
        setup, policy="tailpilot", ts=30.0, needs=needs, params=baseline_params(setup, needs[0].replicas)
    )
    assert isinstance(inner, TailPilot)
    isvc = InferenceService.model_validate(
        {
            "apiVersion": f"{c.GROUP}/{c.VERSION}",
            "kind": "InferenceService",
            "metadata": {"name": NAME, "namespace": NAMESPACE},
            "spec": inner._spec.model_dump(by_alias=True, exclude_none=True, mode="json"),
        }
    )
    spec = isvc.spec
    recorder = Recorder(
        inner, scrape_s=spec.monitoring.scrape_interval_seconds, window_s=spec.slo.evaluation_window_seconds
    )
    result = simulate(
        arrivals_s=trace_of(setup, "T5-step").arrivals,
        config=sim_config(setup, "T5-step", startup_s=30.0),
        controller=recorder,
    )
    assert any(new > old for _, old, new in result.actions), "the step must make the fleet grow"
    assert not inner.errors

    clock = FakeClock()
    windows = observation_windows(spec, control_period_s=CONTROL_PERIOD_S)

    async def replay(server: PageServer) -> list:
        async with httpx.AsyncClient() as http:
            signals = PodSignals(
                clock=clock,
                url_of=lambda ip: f"{server.url}/pods/{ip}/metrics",
                stats_url_of=lambda ip, model: f"{server.url}/pods/{ip}/models/{model}/stats",
            )
            autoscaler = Autoscaler(
                kube=UnexpectedKube(),  # _observe talks to the pods and Prometheus only
                http=http,
                metrics=OperatorMetrics(),
                default_prometheus_url=None,
                control_period_s=CONTROL_PERIOD_S,
                clock=clock,
                signals=signals,
            )
            observed = []
            for at_s, counters, batches, latency, decided in recorder.ticks:
                clock.now = at_s
                for pod, values in counters.items():
                    server.pages[f"/pods/{pod_ip(pod)}/metrics"] = (TEXT, metrics_page(values, model=MODEL))
                    server.pages[f"/pods/{pod_ip(pod)}/models/{MODEL}/stats"] = (
                        "application/json",
                        json.dumps(stats_answer(batches[pod], model=MODEL)),
                    )
                await signals.read(
                    NAMESPACE,
                    NAME,
                    model=MODEL,
                    pod_ips={p: pod_ip(p) for p in counters},
                    keep_s=windows.keep_s,
                )
                if decided:
                    answer = latency_answer({(NAMESPACE, NAME): latency}, at_s=at_s)
                    server.pages["/api/v1/query"] = ("application/json", json.dumps(answer))
                    observed.append(await autoscaler._observe(isvc, server.url, at_s))
            await signals.close()
            return observed

    with PageServer() as server:
        observed = asyncio.run(replay(server))
        queries = server.hits.get("/api/v1/query", 0)
    assert len(observed) == len(inner.observations) >= 600 // CONTROL_PERIOD_S
    for operator, bench in zip(observed, inner.observations, strict=True):
        assert operator.rates_from == "Pods"
        assert operator.model_copy(update={"rates_from": None}) == bench
    # Every decision's observation had traffic, latency, a burst curve and timed batch sizes to compare.
    assert all(o.request_rate and o.p99_ms and o.arrival_counts for o in observed[2:])
    assert all(o.executed_batch_sizes and o.executed_batch_sizes[0].compute_ms for o in observed[2:])
    # One latency query a decision (the board's answer is older than its age limit each period).
    assert queries == len(observed)
