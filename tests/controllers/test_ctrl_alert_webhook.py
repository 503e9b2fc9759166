"""The Alertmanager webhook over real HTTP on 127.0.0.1 (aiohttp's test server)."""

from __future__ import annotations

import asyncio
import io
import json
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from tailpilot.controllers.alerting.alert_webhook import (
    AlertNotification,
    MalformedPayload,
    make_webhook_app,
    parse_payload,
)
from tailpilot.controllers.core.metrics import OperatorMetrics

TOKEN = "s3cret-token"


def alert(status: str = "firing", **labels: str) -> dict[str, Any]:
    base = {
        "alertname": "TailPilotP99BurnFast",
        "namespace": "shop",
        "inferenceservice": "resnet",
        "tailpilot_service_uid": "uid-resnet",
        "severity": "critical",
    }
    return {
        "status": status,
        "labels": {**base, **labels},
        "annotations": {},
        "startsAt": "2026-11-29T14:00:00Z",
        "endsAt": "0001-01-01T00:00:00Z",
        "generatorURL": "",
        "fingerprint": "abc123",
    }


def payload(*alerts: dict[str, Any], status: str = "firing") -> dict[str, Any]:
    return {
        "version": "4",
        "groupKey": '{}:{alertname="x"}',
        "truncatedAlerts": 0,
        "status": status,
        "receiver": "tailpilot",
        "groupLabels": {},
        "commonLabels": {},
        "commonAnnotations": {},
        "externalURL": "http://alertmanager",
        "alerts": list(alerts),
    }


def counts(metrics: OperatorMetrics) -> dict[str, float]:
    out = {}
    for family in metrics.registry.collect():
        if family.name == "tailpilot_webhook_requests":
            for sample in family.samples:
                if sample.name.endswith("_total"):
                    out[sample.labels["result"]] = sample.value
    return out


def run_with_client(
    body: Callable[[TestClient[Any, Any], list[AlertNotification]], Awaitable[None]],
    *,
    metrics: OperatorMetrics,
    fail: bool = False,
) -> list[AlertNotification]:
    received: list[AlertNotification] = []

    async def on_alert(n: AlertNotification) -> None:
        if fail:
            raise RuntimeError("queue full")
        received.append(n)

    async def main() -> None:
        app = make_webhook_app(token=TOKEN, on_alert=on_alert, metrics=metrics)
        async with TestClient(TestServer(app, host="127.0.0.1")) as client:
            await body(client, received)

    asyncio.run(main())
    return received


def auth(token: str = TOKEN) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def test_firing_and_resolved_alerts_reach_the_handler():
    metrics = OperatorMetrics()

    async def body(client: TestClient[Any, Any], received: list[AlertNotification]) -> None:
        r = await client.post(
            "/alerts",
            json=payload(alert(), alert(namespace="other", inferenceservice="bert")),
            headers=auth(),
        )
        assert r.status == 200
        assert (await r.json()) == {"accepted": 2}
        r = await client.post("/alerts", json=payload(alert("resolved"), status="resolved"), headers=auth())
        assert r.status == 200

    received = run_with_client(body, metrics=metrics)
    assert [(n.status, n.namespace, n.inferenceservice) for n in received] == [
        ("firing", "shop", "resnet"),
        ("firing", "other", "bert"),
        ("resolved", "shop", "resnet"),
    ]
    assert received[0] == AlertNotification(
        status="firing",
        alertname="TailPilotP99BurnFast",
        namespace="shop",
        inferenceservice="resnet",
        severity="critical",
        starts_at="2026-11-29T14:00:00Z",
        fingerprint="abc123",
        service_uid="uid-resnet",
    )
    assert counts(metrics) == {"accepted": 2.0}


@pytest.mark.parametrize(
    "headers",
    [{}, auth("wrong"), {"Authorization": TOKEN}, {"Authorization": "Basic eDp5"}, auth(TOKEN + "x")],
)
def test_unauthenticated_requests_are_rejected_and_counted(headers: dict[str, str]):
    metrics = OperatorMetrics()

    async def body(client: TestClient[Any, Any], received: list[AlertNotification]) -> None:
        r = await client.post("/alerts", json=payload(alert()), headers=headers)
        assert r.status == 401
        assert r.headers["WWW-Authenticate"] == "Bearer"

    assert run_with_client(body, metrics=metrics) == []
    assert counts(metrics) == {"unauthorized": 1.0}


@pytest.mark.parametrize(
    "raw",
    [
        b"not json",
        b"[]",
        json.dumps({"version": "3", "alerts": []}).encode(),
        json.dumps({"version": "4", "alerts": {}}).encode(),
        json.dumps({"version": "4", "alerts": [{"status": "pending", "labels": {}}]}).encode(),
        json.dumps({"version": "4", "alerts": [{"status": "firing", "labels": {"a": 1}}]}).encode(),
        b"\xff\xfe",
        b"[" * 100_000,  # nested past the parser's recursion limit
    ],
)
def test_malformed_payloads_are_rejected_and_counted(raw: bytes):
    metrics = OperatorMetrics()

    async def body(client: TestClient[Any, Any], received: list[AlertNotification]) -> None:
        r = await client.post("/alerts", data=raw, headers={**auth(), "Content-Type": "application/json"})
        assert r.status == 400
        assert "error" in await r.json()

    assert run_with_client(body, metrics=metrics) == []
    assert counts(metrics) == {"malformed": 1.0}


def test_oversized_body_is_rejected():
    metrics = OperatorMetrics()

    async def body(client: TestClient[Any, Any], received: list[AlertNotification]) -> None:
        r = await client.post("/alerts", data=io.BytesIO(b"x" * (2 << 20)), headers=auth())
        assert r.status == 413

    assert run_with_client(body, metrics=metrics) == []
    assert counts(metrics) == {"malformed": 1.0}


def test_handler_failure_answers_500_so_alertmanager_retries():
    metrics = OperatorMetrics()

    async def body(client: TestClient[Any, Any], received: list[AlertNotification]) -> None:
        r = await client.post("/alerts", json=payload(alert()), headers=auth())
        assert r.status == 500

    run_with_client(body, metrics=metrics, fail=True)
    assert counts(metrics) == {"error": 1.0}


def test_parse_skips_alerts_that_name_no_service_and_uses_common_labels():
    doc = payload(alert(), {"status": "firing", "labels": {"alertname": "Watchdog"}})
    doc["alerts"].append(
        {"status": "resolved", "labels": {"alertname": "X", "tailpilot_io_inferenceservice": "m"}}
    )
    doc["commonLabels"] = {"namespace": "shop"}
    got = parse_payload(json.dumps(doc).encode())
    assert [(n.alertname, n.namespace, n.inferenceservice, n.status) for n in got] == [
        ("TailPilotP99BurnFast", "shop", "resnet", "firing"),
        ("X", "shop", "m", "resolved"),
    ]
    with pytest.raises(MalformedPayload):
        parse_payload(b'{"version": "4"}')


def test_empty_token_is_refused():
    with pytest.raises(ValueError, match="token"):
        make_webhook_app(token="", on_alert=lambda n: asyncio.sleep(0), metrics=OperatorMetrics())


def test_healthz():
    async def body(client: TestClient[Any, Any], received: list[AlertNotification]) -> None:
        r = await client.get("/healthz")
        assert r.status == 200

    run_with_client(body, metrics=OperatorMetrics())
