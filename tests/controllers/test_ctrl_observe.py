"""Query building, response parsing and observe_service against a scripted Prometheus API."""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any

import httpx
import pytest

from tailpilot.controllers.signals.observe import (
    LatencyBoard,
    ObservationError,
    Selector,
    arrival_counts,
    arrival_queries,
    build_queries,
    latency_by_service,
    latency_query,
    observe_service,
    parse_series,
    parse_vector,
    pod_metrics_from_results,
)
from tailpilot.controllers.signals.prometheus_access import PrometheusAccess
from tailpilot.controllers.signals.prometheus_client import PrometheusClient
from tailpilot.policy.estimate import Summary
from tailpilot.policy.signals import PodLatency

NOW = 1_800_000_000.0


def vector(*items: tuple[dict[str, str], str]) -> dict[str, Any]:
    return {
        "status": "success",
        "data": {"resultType": "vector", "result": [{"metric": m, "value": [NOW, v]} for m, v in items]},
    }


def test_queries_select_the_service_and_aggregate_by_pod():
    queries = build_queries(Selector(namespace="shop", service="resnet"), window_s=60)
    sel = 'namespace="shop",inferenceservice="resnet"'
    assert queries["request_rate"] == f"sum by (pod) (rate(nv_inference_request_success{{{sel}}}[60s]))"
    assert queries["failure_rate"] == f"sum by (pod) (rate(nv_inference_request_failure{{{sel}}}[60s]))"
    assert queries["compute_duration_us_rate"].startswith(
        "sum by (pod) (rate(nv_inference_compute_infer_duration_us"
    )
    assert queries["pending_requests"] == f"sum by (pod) (nv_inference_pending_request_count{{{sel}}})"
    assert queries["quantiles"] == f"max by (pod, quantile) (nv_inference_request_summary_us{{{sel}}})"
    assert queries["queue_quantiles"] == f"max by (pod, quantile) (nv_inference_queue_summary_us{{{sel}}})"
    assert queries["compute_quantiles"] == (
        f"max by (pod, quantile) (nv_inference_compute_infer_summary_us{{{sel}}})"
    )
    assert queries["last_sample"] == f"max by (pod) (timestamp(nv_inference_pending_request_count{{{sel}}}))"
    metrics = {m for q in queries.values() for m in re.findall(r"rate\((\w+)\{", q)}
    assert metrics == {
        "nv_inference_request_success",
        "nv_inference_request_failure",
        "nv_inference_count",
        "nv_inference_exec_count",
        "nv_inference_request_duration_us",
        "nv_inference_queue_duration_us",
        "nv_inference_compute_infer_duration_us",
        "nv_inference_compute_input_duration_us",
        "nv_inference_compute_output_duration_us",
    }


def test_label_names_are_parameters_and_values_are_escaped():
    sel = Selector(
        namespace='we"ird',
        service="a\\b",
        namespace_label="kubernetes_namespace",
        service_label="isvc",
        pod_label="pod_name",
    )
    q = build_queries(sel, window_s=29.6)["request_rate"]
    assert 'kubernetes_namespace="we\\"ird",isvc="a\\\\b"' in q
    assert q.startswith("sum by (pod_name) ") and q.endswith("[30s]))")


def test_parse_vector_values_and_errors():
    got = parse_vector(vector(({"pod": "a"}, "1.5"), ({"pod": "b"}, "NaN"), ({"pod": "c"}, "+Inf")))
    assert got == [({"pod": "a"}, 1.5), ({"pod": "b"}, None), ({"pod": "c"}, None)]
    with pytest.raises(ObservationError, match="bad_data"):
        parse_vector({"status": "error", "errorType": "bad_data", "error": "parse error"})
    with pytest.raises(ObservationError, match="instant vector"):
        parse_vector({"status": "success", "data": {"resultType": "matrix", "result": []}})


def test_results_join_by_pod():
    results = {
        "request_rate": [({"pod": "a"}, 100.0), ({"pod": "b"}, 50.0)],
        "quantiles": [
            ({"pod": "a", "quantile": "0.5"}, 3000.0),
            ({"pod": "a", "quantile": "0.99"}, 9000.0),
            ({"pod": "a", "quantile": "0.9"}, 6000.0),
            ({"pod": "b", "quantile": "0.99"}, None),
        ],
        "last_sample": [({"pod": "a"}, NOW - 5), ({"pod": "b"}, NOW - 7)],
        "pending_requests": [({"pod": "b"}, 3.0), ({}, 9.0)],
    }
    a, b = pod_metrics_from_results(results)
    # A pod that only range queries still return (it stopped being scraped inside the window) is gone.
    results["request_rate"].append(({"pod": "deleted"}, 40.0))
    assert [p.pod for p in pod_metrics_from_results(results)] == ["a", "b"]
    assert (a.pod, a.request_rate, a.p99_us, a.quantiles_us, a.last_sample_s) == (
        "a",
        100.0,
        9000.0,
        ((0.5, 3000.0), (0.9, 6000.0)),
        NOW - 5,
    )
    assert (b.pod, b.p99_us, b.pending_requests, b.failure_rate) == ("b", None, 3.0, None)
    assert (a.queue_summary, a.compute_summary) == (None, None)  # not asked for: not exported


def test_the_queue_and_compute_summaries_join_by_pod_apart_from_the_requests():
    results = {
        "request_rate": [({"pod": "a"}, 100.0), ({"pod": "b"}, 50.0)],
        "quantiles": [({"pod": "a", "quantile": "0.99"}, 9000.0)],
        "queue_quantiles": [
            ({"pod": "a", "quantile": "0.99"}, 4000.0),
            ({"pod": "a", "quantile": "0.5"}, 100.0),
            ({"pod": "b", "quantile": "0.99"}, None),  # NaN: no request in the summary's minute
        ],
        "compute_quantiles": [({"pod": "b", "quantile": "0.99"}, 2500.0)],
    }
    a, b = pod_metrics_from_results(results)
    assert (a.p99_us, a.quantiles_us) == (9000.0, ())
    assert a.queue_summary == Summary(p99_us=4000.0, quantiles_us=((0.5, 100.0),))
    assert a.compute_summary is None
    assert b.queue_summary is None  # only a NaN point: nothing to merge
    assert b.compute_summary == Summary(p99_us=2500.0)


def test_one_latency_query_fetches_the_three_summaries_and_keeps_each_family_apart():
    query = latency_query()
    assert query == (
        "max by (__name__, namespace, inferenceservice, pod, quantile) "
        '({__name__=~"nv_inference_request_summary_us|nv_inference_queue_summary_us|'
        'nv_inference_compute_infer_summary_us",inferenceservice!=""})'
    )
    answer = vector(
        ({"__name__": "nv_inference_request_summary_us", **POD_A, "quantile": "0.99"}, "9000"),
        ({"__name__": "nv_inference_queue_summary_us", **POD_A, "quantile": "0.99"}, "4000"),
        ({"__name__": "nv_inference_queue_summary_us", **POD_A, "quantile": "0.9"}, "1000"),
        ({"__name__": "nv_inference_compute_infer_summary_us", **POD_A, "quantile": "0.99"}, "NaN"),
        # A series without its family's name (an answer to the request-only query): the request's.
        ({**POD_B, "quantile": "0.99"}, "7000"),
    )
    pods = latency_by_service(parse_vector(answer))[("shop", "resnet")]
    assert pods["a"] == PodLatency(
        p99_us=9000.0, queue=Summary(p99_us=4000.0, quantiles_us=((0.9, 1000.0),)), compute=None
    )
    assert pods["b"] == PodLatency(p99_us=7000.0)


POD_A = {"namespace": "shop", "inferenceservice": "resnet", "pod": "a"}
POD_B = {"namespace": "shop", "inferenceservice": "resnet", "pod": "b"}


class ScriptedPrometheus:
    """Answers each instant query from a table keyed by the metric name in it."""

    def __init__(self, answers: dict[str, dict[str, Any]], status: int = 200) -> None:
        self.answers = answers
        self.status = status
        self.seen: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.seen.append(request)
        query = request.url.params["query"]
        for needle, body in self.answers.items():
            if needle in query:
                return httpx.Response(self.status, json=body)
        return httpx.Response(200, json=vector())


def observe(transport: httpx.MockTransport, **kw: Any) -> Any:
    async def main() -> Any:
        async with httpx.AsyncClient(transport=transport) as client:
            return await observe_service(
                client,
                prometheus_url="http://prom:9090/",
                namespace="shop",
                service="resnet",
                window_s=60,
                now_s=NOW,
                **kw,
            )

    return asyncio.run(main())


def test_observe_service_builds_the_observation():
    two_pods = ({"pod": "a"}, "x"), ({"pod": "b"}, "x")
    answers = {
        "nv_inference_request_success": vector(({"pod": "a"}, "300"), ({"pod": "b"}, "100")),
        "nv_inference_request_duration_us": vector(
            ({"pod": "a"}, str(300 * 4000)), ({"pod": "b"}, str(100 * 9000))
        ),
        "nv_inference_queue_duration_us": vector(
            ({"pod": "a"}, str(300 * 1000)), ({"pod": "b"}, str(100 * 5000))
        ),
        "nv_inference_compute_infer_duration_us": vector(
            ({"pod": "a"}, str(300 * 2500)), ({"pod": "b"}, str(100 * 2500))
        ),
        "nv_inference_count": vector(({"pod": "a"}, "300"), ({"pod": "b"}, "100")),
        "nv_inference_exec_count": vector(({"pod": "a"}, "75"), ({"pod": "b"}, "25")),
        "nv_inference_request_failure": vector(({"pod": "a"}, "0"), ({"pod": "b"}, "0.2")),
        "timestamp(nv_inference_pending": vector(*((m, str(NOW - 4)) for m, _ in two_pods)),
        "nv_inference_pending_request_count": vector(({"pod": "a"}, "2"), ({"pod": "b"}, "6")),
        "nv_inference_compute_input_duration_us": vector(
            ({"pod": "a"}, str(300 * 100)), ({"pod": "b"}, str(100 * 300))
        ),
        "nv_inference_compute_output_duration_us": vector(
            ({"pod": "a"}, str(300 * 50)), ({"pod": "b"}, str(100 * 50))
        ),
        "nv_inference_request_summary_us": vector(
            ({"pod": "a", "quantile": "0.99"}, "8000"), ({"pod": "b", "quantile": "0.99"}, "20000")
        ),
        "nv_inference_queue_summary_us": vector(
            ({"pod": "a", "quantile": "0.99"}, "3000"), ({"pod": "b", "quantile": "0.99"}, "3000")
        ),
        "nv_inference_compute_infer_summary_us": vector(
            ({"pod": "a", "quantile": "0.99"}, "2000"), ({"pod": "b", "quantile": "0.99"}, "6000")
        ),
    }
    prom = ScriptedPrometheus(answers)
    obs = observe(httpx.MockTransport(prom))
    assert len(prom.seen) == 14
    assert all(r.url.path == "/api/v1/query" and r.url.params["time"] == f"{NOW:.3f}" for r in prom.seen)
    assert obs.request_rate == pytest.approx(400.0)
    assert 8.0 < obs.p99_ms < 20.0  # a mixture, not the mean (14) of two quantiles by construction
    assert obs.queue_depth_per_replica == pytest.approx(4.0)
    assert obs.queue_time_ms == pytest.approx((300 * 1.0 + 100 * 5.0) / 400)
    assert obs.compute_time_ms == pytest.approx(2.5)
    assert obs.compute_input_time_ms == pytest.approx((300 * 0.1 + 100 * 0.3) / 400)
    assert obs.compute_output_time_ms == pytest.approx(0.05)
    assert obs.queue_time_p99_ms == pytest.approx(3.0)  # both pods agree: their P99 exactly
    assert 2.0 < obs.compute_time_p99_ms < 6.0  # merged between the pods' P99s, as the request's
    assert obs.mean_batch_size == pytest.approx(4.0)
    assert obs.failure_rate == pytest.approx(0.2)
    assert obs.ready_replicas == 2
    assert obs.data_age_s == pytest.approx(4.0)


def test_no_pods_is_missing_and_old_samples_are_stale():
    obs = observe(httpx.MockTransport(ScriptedPrometheus({})))
    assert obs.request_rate is None and obs.ready_replicas == 0
    answers = {
        "timestamp(nv_inference_pending": vector(({"pod": "a"}, str(NOW - 600))),
        "nv_inference_request_success": vector(({"pod": "a"}, "10")),
    }
    stale = observe(httpx.MockTransport(ScriptedPrometheus(answers)))
    assert stale.data_age_s == pytest.approx(600.0)
    assert stale.request_rate is None  # the only pod is older than the window: gone


def test_prometheus_errors_raise():
    bad = {"nv_inference": {"status": "error", "errorType": "timeout", "error": "query timed out"}}
    with pytest.raises(ObservationError, match="timeout"):
        observe(httpx.MockTransport(ScriptedPrometheus(bad, status=503)))

    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    with pytest.raises(ObservationError, match="unreachable"):
        observe(httpx.MockTransport(refuse))


def test_a_recent_window_shorter_than_the_window_adds_the_recent_success_rate():
    sel = Selector(namespace="shop", service="resnet")
    queries = build_queries(sel, window_s=60, recent_window_s=15)
    assert queries["recent_request_rate"] == (
        'sum by (pod) (rate(nv_inference_request_success{namespace="shop",inferenceservice="resnet"}[15s]))'
    )
    assert "recent_request_rate" not in build_queries(sel, window_s=60, recent_window_s=60)
    answers = {
        "[15s]": vector(({"pod": "a"}, "500"), ({"pod": "b"}, "300")),  # first: both pods, recent window
        "nv_inference_request_success": vector(({"pod": "a"}, "300"), ({"pod": "b"}, "100")),
        "timestamp(nv_inference_pending": vector(({"pod": "a"}, str(NOW)), ({"pod": "b"}, str(NOW))),
    }
    obs = observe(httpx.MockTransport(ScriptedPrometheus(answers)), recent_window_s=15)
    assert obs.request_rate == pytest.approx(400.0)
    assert (obs.recent_request_rate, obs.recent_window_s) == (pytest.approx(800.0), 15)
    plain = observe(httpx.MockTransport(ScriptedPrometheus(answers)))
    assert (plain.recent_request_rate, plain.recent_window_s) == (None, None)


def matrix(*series: tuple[str, list[tuple[float, str]]]) -> dict[str, Any]:
    result = [{"metric": {"pod": pod}, "values": [list(p) for p in points]} for pod, points in series]
    return {"status": "success", "data": {"resultType": "matrix", "result": result}}


def every(step_s: float, values: list[float]) -> dict[float, float]:
    """A series with a point every `step_s` from 0."""
    return {i * step_s: v for i, v in enumerate(values)}


def test_arrivals_per_bin_are_each_pods_completions_plus_its_queues_growth():
    sel = Selector(namespace="shop", service="resnet")
    matchers = '{namespace="shop",inferenceservice="resnet"}'
    assert arrival_queries(sel, lookback_s=300, bin_s=2) == {
        "arrivals_completed": f"sum by (pod) (nv_inference_request_success{matchers})[302s:2s]",
        "arrivals_pending": f"sum by (pod) (nv_inference_pending_request_count{matchers})[302s:2s]",
        "arrivals_sampled": f"max by (pod) (timestamp(nv_inference_request_success{matchers}))[302s:2s]",
    }
    # Pod a serves 10 per step; its queue grows by 5 in the second bin and drains in the third; it
    # restarts in the fourth (its counter resets: nothing counted, never a negative number). Pod b
    # appears at 4 s with 7 warm-up requests already done (not arrivals of the lookback) and serves 3
    # per step; pod c is gone after 2 s (its series ends: nothing counted).
    completed = {
        "a": every(2, [100, 110, 120, 130, 5]),
        "b": {4.0: 7.0, 6.0: 10.0, 8.0: 13.0},
        "c": every(2, [50, 60]),
    }
    pending = {"a": every(2, [0, 0, 5, 0, 0])}
    sampled = {pod: {t: t - 0.5 for t in series} for pod, series in completed.items()}
    counts, bin_s = arrival_counts(completed, pending, sampled, step_s=2)
    assert (counts, bin_s) == ((20.0, 15.0, 8.0, 3.0), 2)
    assert arrival_counts({}, {}, {}, step_s=2) == ((), None)
    got = parse_series(matrix(("a", [(2.0, "7"), (0.0, "3"), (4.0, "NaN")]), ("b", [(0.0, "1")])))
    assert got == {"a": {0.0: 3.0, 2.0: 7.0}, "b": {0.0: 1.0}}
    assert parse_series({"status": "success", "data": {"resultType": "matrix", "result": []}}) == {}
    with pytest.raises(ObservationError, match="range vector"):
        parse_series(vector(({"pod": "a"}, "1")))


def test_a_prometheus_scraping_less_often_than_the_step_gives_longer_bins_not_bursts():
    # Steps of 2 s, samples every 4 s at a steady 10 req/s: without the sample times the bins read
    # 0, 40, 0, 40 (a burst at twice the rate); with them, 40 per 4 s.
    completed = {"a": every(2, [0, 0, 40, 40, 80, 80, 120])}
    sampled = {"a": every(2, [0, 0, 4, 4, 8, 8, 12])}
    assert arrival_counts(completed, {}, sampled, step_s=2) == ((40.0, 40.0, 40.0), 4)


def test_observe_service_passes_the_arrival_curve_on_when_asked():
    answers = {
        "(timestamp(nv_inference_request_success": matrix(("a", [(0.0, "0"), (2.0, "2"), (4.0, "4")])),
        "[302s:2s]": matrix(("a", [(0.0, "0"), (2.0, "10"), (4.0, "40")])),
        "nv_inference_request_success": vector(({"pod": "a"}, "300")),
        "timestamp(nv_inference_pending": vector(({"pod": "a"}, str(NOW))),
    }
    prom = ScriptedPrometheus(answers)
    obs = observe(httpx.MockTransport(prom), arrival_lookback_s=300, arrival_bin_s=2)
    # The counter and the pending gauge got the same series here: (10 + 10, 30 + 30).
    assert (obs.arrival_counts, obs.arrival_bin_s) == ((20.0, 60.0), 2)
    assert len(prom.seen) == 17
    plain = observe(httpx.MockTransport(ScriptedPrometheus(answers)))
    assert (plain.arrival_counts, plain.arrival_bin_s) == ((), None)


def test_the_clients_p99_is_the_one_finite_figure_of_the_answer_or_says_why_not():
    from tailpilot.controllers.signals.observe import ClientLatency, client_latency_of

    def vector(*values: str) -> dict[str, Any]:
        result = [{"metric": {"i": str(i)}, "value": [1.0, v]} for i, v in enumerate(values)]
        return {"status": "success", "data": {"resultType": "vector", "result": result}}

    assert client_latency_of(vector("182.5")) == ClientLatency(182.5)
    scalar = {"status": "success", "data": {"resultType": "scalar", "result": [1.0, "40"]}}
    assert client_latency_of(scalar) == ClientLatency(40.0)
    assert client_latency_of(vector()) == ClientLatency(None, "no series, one expected")
    assert client_latency_of(vector("1", "2")) == ClientLatency(None, "2 series, one expected")
    for raw in ("NaN", "+Inf", "-3"):
        answer = client_latency_of(vector(raw))
        assert answer.p99_ms is None and f"'{raw}', not a finite number of ms" in (answer.error or "")
    # Prometheus' error type is said, its message is not (it can quote other tenants' label sets).
    said = 'found duplicate series for the match group {pod="other-tenants-pod"}'
    error = {"status": "error", "errorType": "execution", "error": said}
    refused = client_latency_of(error)
    assert refused.p99_ms is None and "Prometheus refused the query (execution)" in (refused.error or "")
    assert "other-tenants-pod" not in (refused.error or "")
    matrix = {"status": "success", "data": {"resultType": "matrix", "result": []}}
    assert "a matrix answer" in (client_latency_of(matrix).error or "")


def test_the_clients_query_is_sent_at_the_observations_time_and_an_unreachable_prometheus_is_an_error():
    from tailpilot.controllers.signals.observe import client_latency

    sent: list[httpx.QueryParams] = []

    def answer(request: httpx.Request) -> httpx.Response:
        sent.append(request.url.params)
        body = {"status": "success", "data": {"resultType": "vector", "result": [{"value": [1, "75"]}]}}
        return httpx.Response(200, json=body)

    # The platform allows this Prometheus and turned tenants' queries on.
    access = PrometheusAccess(default_url="http://prom:9090", client_queries=True)

    async def run(transport: httpx.AsyncBaseTransport) -> Any:
        async with PrometheusClient(access, transport=transport) as client:
            return await client_latency(client, prometheus_url="http://prom:9090/", query="q", now_s=1234.5)

    assert asyncio.run(run(httpx.MockTransport(answer))).p99_ms == 75.0
    assert sent == [httpx.QueryParams({"query": "q", "time": "1234.500"})]

    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    down = asyncio.run(run(httpx.MockTransport(refuse)))
    assert down.p99_ms is None
    assert "Prometheus unreachable at http://prom:9090/api/v1/query" in (down.error or "")


def test_a_slow_prometheus_holds_only_its_own_share_of_the_connections():
    """A service's own Prometheus that never answers cannot starve another's queries."""
    from tailpilot.controllers.signals.observe import MAX_IN_FLIGHT_PER_PROMETHEUS, _query

    release, filled = asyncio.Event(), asyncio.Event()
    in_flight = {"slow": 0, "most": 0}

    async def handler(request: httpx.Request) -> httpx.Response:
        if request.url.host == "slow":
            in_flight["slow"] += 1
            in_flight["most"] = max(in_flight["most"], in_flight["slow"])
            if in_flight["slow"] == MAX_IN_FLIGHT_PER_PROMETHEUS:
                filled.set()
            await release.wait()
            in_flight["slow"] -= 1
        return httpx.Response(200, json=vector())

    async def main() -> tuple[Any, int]:
        async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
            stuck = [
                asyncio.create_task(_query(client, "http://slow:9090/api/v1/query", "up", NOW))
                for _ in range(30)
            ]
            await asyncio.wait_for(filled.wait(), timeout=5)  # the slow one's share is all taken
            fast = await asyncio.wait_for(
                _query(client, "http://fast:9090/api/v1/query", "up", NOW), timeout=5
            )
            release.set()
            await asyncio.gather(*stuck)
            return fast, in_flight["most"]

    fast, most = asyncio.run(main())
    assert fast["status"] == "success"
    assert most == MAX_IN_FLIGHT_PER_PROMETHEUS  # the slow one's queries waited at its gate, not in the pool


def test_one_namespace_holds_only_its_share_of_the_queries_whichever_prometheus_it_names():
    """A tenant's services naming several endpoints that never answer cannot starve another tenant."""
    from tailpilot.controllers.signals.observe import MAX_IN_FLIGHT_PER_NAMESPACE, _query

    release, filled = asyncio.Event(), asyncio.Event()
    in_flight = {"greedy": 0, "most": 0}

    async def handler(request: httpx.Request) -> httpx.Response:
        if request.url.host.startswith("slow"):
            in_flight["greedy"] += 1
            in_flight["most"] = max(in_flight["most"], in_flight["greedy"])
            if in_flight["greedy"] == MAX_IN_FLIGHT_PER_NAMESPACE:
                filled.set()
            await release.wait()
            in_flight["greedy"] -= 1
        return httpx.Response(200, json=vector())

    async def main() -> tuple[Any, Any, int]:
        async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
            # Four endpoints of the same tenant: each one's own bound alone would let 4 x 16 through.
            stuck = [
                asyncio.create_task(
                    _query(client, f"http://slow-{n % 4}:9090/api/v1/query", "up", NOW, namespace="greedy")
                )
                for n in range(40)
            ]
            await asyncio.wait_for(filled.wait(), timeout=5)
            other = await asyncio.wait_for(
                _query(client, "http://fast:9090/api/v1/query", "up", NOW, namespace="other"), timeout=5
            )
            # The operator's own shared query (no namespace) is not held by any tenant's bound.
            shared = await asyncio.wait_for(
                _query(client, "http://fast:9090/api/v1/query", "up", NOW), timeout=5
            )
            release.set()
            await asyncio.gather(*stuck)
            return other, shared, in_flight["most"]

    other, shared, most = asyncio.run(main())
    assert other["status"] == shared["status"] == "success"
    assert most == MAX_IN_FLIGHT_PER_NAMESPACE


def test_an_answer_past_the_size_bound_is_refused_not_parsed(monkeypatch: pytest.MonkeyPatch):
    from tailpilot.controllers.signals import observe as module

    monkeypatch.setattr(module, "MAX_RESPONSE_BYTES", 1000)
    huge = httpx.MockTransport(lambda request: httpx.Response(200, content=b"[" + b"1," * 5000 + b"1]"))

    async def main() -> None:
        async with httpx.AsyncClient(transport=huge) as client:
            await module._query(client, "http://prom:9090/api/v1/query", "up", NOW)

    with pytest.raises(ObservationError, match="more than 1000 bytes"):
        asyncio.run(main())


def _vector_answer(size: int) -> bytes:
    """A valid instant-query answer of about `size` bytes (one series, padded with a long label)."""
    pad = "x" * max(0, size - 120)
    return json.dumps(
        {
            "status": "success",
            "data": {"resultType": "vector", "result": [{"metric": {"p": pad}, "value": [1, "1"]}]},
        }
    ).encode()


def test_a_tenants_answer_is_bounded_tighter_than_the_operators_shared_one():
    from tailpilot.controllers.signals import observe as module

    body = _vector_answer(module.MAX_TENANT_RESPONSE_BYTES + 4096)
    transport = httpx.MockTransport(lambda request: httpx.Response(200, content=body))

    async def query(namespace: str | None) -> Any:
        async with httpx.AsyncClient(transport=transport) as client:
            return await module._query(
                client, "http://prom:9090/api/v1/query", "up", NOW, namespace=namespace
            )

    with pytest.raises(ObservationError, match=f"more than {module.MAX_TENANT_RESPONSE_BYTES} bytes"):
        asyncio.run(query("tenant"))
    assert asyncio.run(query(None))["status"] == "success"


def test_a_large_answer_is_parsed_off_the_event_loop_and_a_small_one_on_it(monkeypatch: pytest.MonkeyPatch):
    import threading

    from tailpilot.controllers.signals import observe as module

    parsed_on: list[int] = []
    parse = module._json_or_none

    def spy(raw: bytes | bytearray) -> Any:
        parsed_on.append(threading.get_ident())
        return parse(raw)

    monkeypatch.setattr(module, "_json_or_none", spy)
    sizes = {"small": 200, "large": module.INLINE_PARSE_BYTES * 4}

    async def main() -> int:
        for size in sizes.values():
            body = _vector_answer(size)
            transport = httpx.MockTransport(lambda request, body=body: httpx.Response(200, content=body))
            async with httpx.AsyncClient(transport=transport) as client:
                answer = await module._query(
                    client, "http://prom:9090/api/v1/query", "up", NOW, namespace="t"
                )
                assert answer["status"] == "success"
        return threading.get_ident()

    loop_thread = asyncio.run(main())
    assert parsed_on[0] == loop_thread and parsed_on[1] != loop_thread


def test_an_answer_nested_past_pythons_stack_is_not_an_api_answer_not_a_crash():
    deep = httpx.MockTransport(lambda request: httpx.Response(200, content=b"[" * 200_000))

    async def main() -> None:
        from tailpilot.controllers.signals import observe as module

        async with httpx.AsyncClient(transport=deep) as client:
            await module._query(client, "http://prom:9090/api/v1/query", "up", NOW, namespace="t")

    with pytest.raises(ObservationError, match="not a Prometheus API answer"):
        asyncio.run(main())


def test_the_latency_board_serves_decisions_in_any_order_from_one_answer():
    """Callers that took their time before waiting on the query in flight reuse its answer.

    Decisions of many services queue on the board's lock in any order of their `now_s`; one that
    finds an answer fetched for a slightly later moment must not send its own query. An answer
    further than `max_age_s` away on either side is fetched again: an old one, or one from before a
    clock stepped back.
    """
    answer = vector(({"__name__": "nv_inference_request_summary_us", **POD_A, "quantile": "0.99"}, "9000"))
    prom = ScriptedPrometheus({"nv_inference_request_summary_us": answer})
    board = LatencyBoard(max_age_s=5.0)

    async def main() -> list[dict[str, PodLatency]]:
        async with httpx.AsyncClient(transport=httpx.MockTransport(prom)) as client:

            async def at(now_s: float) -> dict[str, PodLatency]:
                return await board.latency(
                    client, prometheus_url="http://prom:9090", namespace="shop", service="resnet", now_s=now_s
                )

            # The first caller queries for 100.0; the others took their time before it, or after.
            served = list(await asyncio.gather(at(100.0), at(99.2), at(96.0), at(104.9)))
            served.append(await at(105.5))  # more than 5 s after the answer: asked again
            served.append(await at(99.0))  # 6.5 s before the newest answer (a clock stepped back)
            return served

    served = asyncio.run(main())
    assert all(pods["a"].p99_us == 9000.0 for pods in served)
    assert [float(r.url.params["time"]) for r in prom.seen] == [100.0, 105.5, 99.0]
    assert board.queries == 3
