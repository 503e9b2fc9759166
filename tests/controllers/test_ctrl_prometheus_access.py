"""A service's Prometheus and PromQL run with the operator's reach: only what the platform allows.

- a URL a service names that the platform did not allow is never contacted, and the service says why;
- the operator's Prometheus client refuses any other URL before sending (the second lock);
- a tenant's PromQL runs only where the platform turned it on;
- no text of an answer (body, Prometheus' error message, a header, an exception quoting the
  bytes received) reaches what the service's tenant reads.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest

from tailpilot.api import constants as c
from tailpilot.controllers.autoscale.autoscaler import Autoscaler
from tailpilot.controllers.core.metrics import OperatorMetrics
from tailpilot.controllers.process.main import parse_args, prometheus_access
from tailpilot.controllers.rollout.canary_analysis import CanaryAnalyst
from tailpilot.controllers.signals.observe import (
    ObservationError,
    Selector,
    _query,
    client_latency,
    pod_metrics,
)
from tailpilot.controllers.signals.prometheus_access import (
    PrometheusAccess,
    parse_allowed_urls,
    resolve_prometheus,
)
from tailpilot.controllers.signals.prometheus_client import EndpointNotAllowed, PrometheusClient
from tests.controllers.specs import service
from tests.fakes import UnexpectedKube

KEY = "0123456789abcdef0123456789abcdef"
DEFAULT = "http://prometheus.monitoring.svc:9090"
TEAM = "https://prom.team-a.example:9443/prometheus"
#: What a tenant would have the operator fetch: a cloud metadata service, another tenant's pod.
METADATA = "http://169.254.169.254/latest/meta-data/iam"
SECRET = "AKIA-SECRET-FROM-INSIDE"


def test_a_url_the_platform_did_not_allow_is_refused_and_the_default_is_always_allowed() -> None:
    access = PrometheusAccess(default_url=DEFAULT, allowed_urls=(TEAM,))
    assert resolve_prometheus(None, access).url == DEFAULT
    assert resolve_prometheus(DEFAULT, access).url == DEFAULT
    assert resolve_prometheus(TEAM, access).url == TEAM
    # What does not change where a request goes is normalized: case, a default port, a trailing slash.
    assert resolve_prometheus("HTTPS://Prom.Team-A.example:9443/prometheus/", access).url is not None
    assert resolve_prometheus("http://prometheus.monitoring.svc:9090/", access).url is not None
    for refused in (
        METADATA,
        "http://10.0.3.7:9090",  # another tenant's pod that admits the operator
        "http://prometheus.monitoring.svc:9091",  # another port
        "http://prometheus.monitoring.svc:9090/../admin",  # another path
        "https://prometheus.monitoring.svc:9090",  # another scheme
        "http://user@prometheus.monitoring.svc:9090",  # another user
        "http://prometheus.monitoring.svc:9090?x=1",  # a query
        "http://prometheus.monitoring.svc.evil.example:9090",
        "https://prom.team-a.example:9443/prometheus/api/v1/admin/tsdb",
    ):
        choice = resolve_prometheus(refused, access)
        assert choice.url is None, refused
        assert choice.reason == c.REASON_PROMETHEUS_URL_NOT_ALLOWED
        assert "spec.monitoring.prometheusUrl" in choice.message and "never contacted" in choice.message
    # Without a default, a service naming no URL has none, and says so.
    assert resolve_prometheus(None, PrometheusAccess()).reason == c.REASON_METRICS_UNAVAILABLE


class StatusKube(UnexpectedKube):
    """Status patches recorded; `body` answered to every GET."""

    def __init__(self, body: dict[str, Any] | None = None) -> None:
        self.body, self.patches = body, []  # type: ignore[var-annotated]

    def get(self, resource: Any, namespace: str, name: str) -> dict[str, Any] | None:
        return self.body

    def patch_status(self, body: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
        self.patches.append(patch)
        return body

    def list(self, *args: Any, **kwargs: Any) -> list[dict[str, Any]]:
        return []


def _serving_body(prometheus_url: str, **status: Any) -> dict[str, Any]:
    """A served service (an engine, rolled out) naming its own Prometheus."""
    isvc = service(monitoring={"prometheusUrl": prometheus_url})
    body = isvc.model_dump(by_alias=True, exclude_none=True, mode="json")
    body["metadata"] |= {"generation": 1, "uid": "u1"}
    ready = {
        "type": "RolloutReady",
        "status": "True",
        "reason": "RolledOut",
        "lastTransitionTime": "2026-01-01T00:00:00Z",
    }
    body["status"] = {"engine": {"key": KEY, "tritonBackend": "onnxruntime"}, "conditions": [ready], **status}
    return body


class Recorder:
    """A transport that records every request that reached it (none must, for a refused URL)."""

    def __init__(self, answer: httpx.Response | None = None) -> None:
        self.seen: list[str] = []
        self.answer = answer

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.seen.append(str(request.url))
        return self.answer or httpx.Response(200, text=SECRET)


def test_the_autoscaler_never_contacts_a_url_not_allowed_and_scaling_says_why() -> None:
    body = _serving_body(METADATA)
    kube, sent = StatusKube(), Recorder()

    async def run() -> Any:
        access = PrometheusAccess(default_url=DEFAULT)
        async with PrometheusClient(access, transport=httpx.MockTransport(sent)) as http:
            autoscaler = Autoscaler(
                kube=kube, http=http, metrics=OperatorMetrics(), default_prometheus_url=DEFAULT
            )
            return await autoscaler._inputs(body)  # noqa: SLF001

    assert asyncio.run(run()) is None
    assert sent.seen == []
    (patch,) = kube.patches
    (scaling,) = [x for x in patch["conditions"] if x["type"] == c.CONDITION_SCALING_ACTIVE]
    assert (scaling["status"], scaling["reason"]) == ("False", c.REASON_PROMETHEUS_URL_NOT_ALLOWED)
    assert "spec.monitoring.prometheusUrl" in scaling["message"]


def test_the_canary_analysis_resolves_the_same_way_and_never_contacts_a_url_not_allowed() -> None:
    started = datetime(2026, 1, 1, tzinfo=UTC).isoformat()
    canary = {"engine": {"key": KEY}, "phase": "Analysing", "replicas": 1, "analysisStartedAt": started}
    kube, sent = StatusKube(_serving_body(METADATA, canary=canary)), Recorder()

    async def run() -> bool:
        async with PrometheusClient(
            PrometheusAccess(default_url=DEFAULT), transport=httpx.MockTransport(sent)
        ) as http:
            analyst = CanaryAnalyst(
                kube=kube, http=http, metrics=OperatorMetrics(), default_prometheus_url=DEFAULT
            )
            return await analyst.analyse("shop", "resnet")

    assert asyncio.run(run()) is False
    assert sent.seen == []
    (patch,) = kube.patches
    assert "analysis paused" in patch["canary"]["message"]
    assert "is not among the Prometheus endpoints the platform allows" in patch["canary"]["message"]


def test_the_prometheus_client_refuses_any_other_url_before_sending_and_follows_no_redirect() -> None:
    sent = Recorder(httpx.Response(302, headers={"location": METADATA}))

    async def run() -> list[str]:
        outcomes = []
        async with PrometheusClient(
            PrometheusAccess(default_url=DEFAULT, allowed_urls=(TEAM,)), transport=httpx.MockTransport(sent)
        ) as http:
            for url in (
                f"{DEFAULT}/api/v1/query",
                f"{TEAM}/api/v1/query",
                METADATA,
                f"{DEFAULT}/federate",  # the allowed host, but not its query API
                "http://10.0.3.7:9090/api/v1/query",
            ):
                try:
                    response = await http.get(url, params={"query": "up"})
                    outcomes.append(f"HTTP {response.status_code}")
                except EndpointNotAllowed:
                    outcomes.append("refused")
        return outcomes

    assert asyncio.run(run()) == ["HTTP 302", "HTTP 302", "refused", "refused", "refused"]
    # Only the two allowed endpoints were reached, and the redirect to the metadata service was not taken.
    assert [u.split("?")[0] for u in sent.seen] == [f"{DEFAULT}/api/v1/query", f"{TEAM}/api/v1/query"]


def test_a_tenants_promql_runs_only_where_the_platform_turned_it_on() -> None:
    vector = {"status": "success", "data": {"resultType": "vector", "result": [{"value": [1, "75"]}]}}

    async def run(client: httpx.AsyncClient) -> Any:
        async with client:
            return await client_latency(
                client, prometheus_url=DEFAULT, query='sum(other_tenant_series{namespace="b"})', now_s=1.0
            )

    for client_queries in (False, True):
        sent = Recorder(httpx.Response(200, json=vector))
        access = PrometheusAccess(default_url=DEFAULT, client_queries=client_queries)
        answer = asyncio.run(run(PrometheusClient(access, transport=httpx.MockTransport(sent))))
        if client_queries:
            assert (answer.p99_ms, len(sent.seen)) == (75.0, 1)
        else:
            assert answer.p99_ms is None and sent.seen == []
            assert answer.error is not None and answer.error.startswith("not evaluated")
            assert "--client-latency-queries" in answer.error
    # A client that carries no platform decision runs none.
    sent = Recorder(httpx.Response(200, json=vector))
    plain = asyncio.run(run(httpx.AsyncClient(transport=httpx.MockTransport(sent))))
    assert plain.p99_ms is None and sent.seen == []


def _hostile_answers() -> list[Any]:
    """Answers of endpoints that are not Prometheus, or of a Prometheus quoting other tenants' data."""
    return [
        httpx.Response(200, text=f"<html>{SECRET}</html>", headers={"content-type": "text/html"}),
        httpx.Response(200, json={"AccessKeyId": SECRET, "Code": "Success"}),
        httpx.Response(200, json=[SECRET]),
        httpx.Response(200, text=SECRET, headers={"content-type": f"text/{SECRET}; x=1 {SECRET}"}),
        httpx.Response(
            422,
            json={
                "status": "error",
                "errorType": "execution",
                "error": f'duplicate series {{pod="{SECRET}"}}',
            },
        ),
        httpx.Response(400, json={"status": "error", "errorType": SECRET, "error": SECRET}),
        httpx.Response(200, json={"status": "success", "data": {"resultType": SECRET, "result": SECRET}}),
        httpx.Response(
            200,
            json={"status": "success", "data": {"resultType": "vector", "result": [{"value": [1, SECRET]}]}},
        ),
        httpx.RemoteProtocolError(f"illegal status line: bytearray(b'{SECRET}')"),
    ]


@pytest.mark.parametrize("answer", range(len(_hostile_answers())))
def test_no_text_of_an_answer_reaches_what_the_tenant_reads(answer: int) -> None:
    def respond(request: httpx.Request) -> httpx.Response:
        made = _hostile_answers()[answer]
        if isinstance(made, Exception):
            raise made
        return made

    access = PrometheusAccess(default_url=DEFAULT, client_queries=True)

    async def run() -> list[str]:
        said = []
        async with PrometheusClient(access, transport=httpx.MockTransport(respond)) as http:
            # The client query's error (LatencyBreakdown) and the canary's error (status.canary).
            said.append(str((await client_latency(http, prometheus_url=DEFAULT, query="q", now_s=1.0)).error))
            try:
                await pod_metrics(
                    http, prometheus_url=DEFAULT, selector=Selector("a", "b"), window_s=60, now_s=1.0
                )
            except ObservationError as error:
                said.append(str(error))
            try:
                await _query(http, f"{DEFAULT}/api/v1/query", "q", 1.0)
            except ObservationError as error:
                said.append(str(error))
        return said

    said = asyncio.run(run())
    assert said and all(SECRET.lower() not in text.lower() for text in said), said
    assert all(text != "None" for text in said)


def test_an_answer_that_is_not_prometheus_is_described_by_its_status_type_and_size() -> None:
    page = httpx.Response(
        200, text="<html>" + "x" * 94 + "</html>", headers={"content-type": "text/html; charset=utf-8"}
    )

    async def run() -> str:
        async with PrometheusClient(
            PrometheusAccess(default_url=DEFAULT), transport=httpx.MockTransport(lambda r: page)
        ) as http:
            with pytest.raises(ObservationError) as raised:
                await _query(http, f"{DEFAULT}/api/v1/query", "up", 1.0)
            return str(raised.value)

    assert asyncio.run(run()) == (
        f"{DEFAULT}/api/v1/query answered HTTP 200 (text/html, 107 bytes): not a Prometheus API answer"
    )


def test_the_platform_names_the_allowed_endpoints_and_turns_tenant_queries_on() -> None:
    args = parse_args(
        ["--prometheus-url", DEFAULT, "--allowed-prometheus-url", TEAM],
        environ={"TAILPILOT_ALLOWED_PROMETHEUS_URLS": '["http://prom.b:9090"]'},
    )
    access = prometheus_access(args)
    assert access.allows(DEFAULT) and access.allows(TEAM) and access.allows("http://prom.b:9090")
    assert not access.allows(METADATA)
    assert access.client_queries is False  # off unless turned on
    on = parse_args([], environ={"TAILPILOT_CLIENT_LATENCY_QUERIES": "true"})
    assert prometheus_access(on).client_queries is True
    assert prometheus_access(parse_args(["--client-latency-queries"], environ={})).client_queries is True
    # An entry that could never match is the platform's mistake, said at start-up.
    with pytest.raises(ValueError, match="base URLs"):
        parse_allowed_urls('["http://prom:9090/?x=1"]')
    with pytest.raises(ValueError, match="JSON list"):
        parse_allowed_urls('{"a": 1}')
    with pytest.raises(SystemExit):
        parse_args(["--allowed-prometheus-url", "ftp://prom"], environ={})
