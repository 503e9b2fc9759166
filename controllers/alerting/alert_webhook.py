"""Alertmanager webhook receiver: authenticated, typed, counted.

Alertmanager (webhook_config, payload version "4") POSTs a JSON group of
alerts. Each alert that names an InferenceService (labels `namespace` and
`inferenceservice`, the labels TailPilot's generated PrometheusRule puts on
its burn-rate alerts) becomes an `AlertNotification` handed to `on_alert`:
a firing one makes the operator re-evaluate at once in its aggressive mode,
a resolved one returns it to normal.

Security: the receiver requires `Authorization: Bearer <token>` (Alertmanager's
`http_config.authorization.credentials`), compared in constant time; an empty
token is refused at construction, and a rotated one is taken from where it lives
(`tailpilot.controllers.alerting.webhook_guard`). Requests past the rate limit get 429,
unauthenticated ones 401, malformed ones 400 (nothing is passed on), and every
request is counted by result in `tailpilot_webhook_requests_total`.

`on_alert` is awaited before the response (a failure answers 500, so
Alertmanager retries); it should only record the alert and schedule the
re-evaluation, not run it.
"""

from __future__ import annotations

import json
import math
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from aiohttp import web

from tailpilot.api import constants as c
from tailpilot.controllers.alerting.webhook_guard import RateLimit, RotatingToken
from tailpilot.controllers.core.metrics import OperatorMetrics, WebhookResult

#: Largest accepted body; Alertmanager groups are far smaller.
MAX_BODY_BYTES = 1 << 20
#: Label carrying the InferenceService name on TailPilot's alerts, and the relabelled pod label as a fallback.
SERVICE_LABELS = ("inferenceservice", "tailpilot_io_inferenceservice")


class MalformedPayload(ValueError):
    """The body is not an Alertmanager webhook payload (version 4)."""


@dataclass(frozen=True)
class AlertNotification:
    """One alert about one InferenceService."""

    status: Literal["firing", "resolved"]
    alertname: str
    namespace: str
    inferenceservice: str
    severity: str
    starts_at: str = ""
    fingerprint: str = ""
    #: The UID of the service whose rule made the alert ("" when the alert carries none).
    service_uid: str = ""


def _str_map(value: object, what: str) -> Mapping[str, str]:
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        raise MalformedPayload(f"{what} must be an object of strings")
    return value


def parse_payload(body: bytes) -> list[AlertNotification]:
    """Parse an Alertmanager webhook body into the notifications that name an InferenceService.

    Alerts without a namespace or service label are not TailPilot's and are skipped.

    Raises:
        MalformedPayload: On invalid JSON, a version other than "4", or a wrong structure.
    """
    try:
        doc: Any = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise MalformedPayload(f"body is not JSON: {exc}") from exc
    except RecursionError as exc:  # a megabyte of "[" nests past Python's stack: refused, not a 500
        raise MalformedPayload("body nests too deeply") from exc
    if not isinstance(doc, dict):
        raise MalformedPayload("body must be a JSON object")
    if doc.get("version") != "4":
        raise MalformedPayload(f"unsupported payload version {doc.get('version')!r}; expected '4'")
    alerts = doc.get("alerts")
    if not isinstance(alerts, list):
        raise MalformedPayload("'alerts' must be a list")
    common = _str_map(doc.get("commonLabels", {}), "commonLabels")
    out: list[AlertNotification] = []
    for alert in alerts:
        if not isinstance(alert, dict):
            raise MalformedPayload("every alert must be an object")
        status = alert.get("status")
        if status not in ("firing", "resolved"):
            raise MalformedPayload(f"alert status {status!r} is neither 'firing' nor 'resolved'")
        labels = {**common, **_str_map(alert.get("labels", {}), "labels")}
        service = next((labels[k] for k in SERVICE_LABELS if labels.get(k)), "")
        namespace = labels.get("namespace", "")
        if not service or not namespace:
            continue
        out.append(
            AlertNotification(
                status=status,
                alertname=labels.get("alertname", ""),
                namespace=namespace,
                inferenceservice=service,
                severity=labels.get("severity", ""),
                starts_at=str(alert.get("startsAt", "")),
                fingerprint=str(alert.get("fingerprint", "")),
                service_uid=labels.get(c.ALERT_SERVICE_UID_LABEL, ""),
            )
        )
    return out


async def _authorized(header: str | None, token: RotatingToken) -> bool:
    if not header or not header.startswith("Bearer "):
        return False
    return await token.matches(header[len("Bearer ") :])


def make_webhook_app(
    *,
    token: str | RotatingToken,
    on_alert: Callable[[AlertNotification], Awaitable[None]],
    metrics: OperatorMetrics,
    path: str = "/alerts",
    rate_limit: RateLimit | None = None,
    refusal_limit: RateLimit | None = None,
) -> web.Application:
    """Build the aiohttp application serving the webhook at `path` (POST) and `/healthz` (GET).

    `token`: a fixed token, or one re-read where it lives when rotated. `rate_limit`: authenticated
    requests over it answer 429 with Retry-After before their body is read. Requests without the
    token draw on a bucket of their own (`refusal_limit`, the same size by default): a flood of them
    is answered 429 once it is spent, and never spends what Alertmanager's requests draw on. The
    token's check comes first because it is cheap and bounded (a constant-time compare of a header
    aiohttp caps at 8 KiB; a re-read of a rotated token at most every 30 s).

    Raises:
        ValueError: When `token` is empty (an unauthenticated receiver is never served).
    """
    secret = token if isinstance(token, RotatingToken) else RotatingToken(lambda: token)

    refusals = (
        refusal_limit
        if refusal_limit is not None
        else (
            RateLimit(rate_per_s=rate_limit.rate_per_s, burst=rate_limit.burst, clock=rate_limit.clock)
            if rate_limit is not None
            else None
        )
    )

    def too_many(wait_s: float) -> web.Response:
        metrics.record_webhook(WebhookResult.RATE_LIMITED)
        return web.json_response(
            {"error": "too many requests"},
            status=429,
            headers={"Retry-After": str(max(1, math.ceil(wait_s)))},
        )

    async def receive(request: web.Request) -> web.Response:
        if not await _authorized(request.headers.get("Authorization"), secret):
            wait_s = refusals.take() if refusals is not None else 0.0
            if wait_s > 0:
                return too_many(wait_s)
            metrics.record_webhook(WebhookResult.UNAUTHORIZED)
            return web.json_response(
                {"error": "missing or invalid bearer token"},
                status=401,
                headers={"WWW-Authenticate": "Bearer"},
            )
        wait_s = rate_limit.take() if rate_limit is not None else 0.0
        if wait_s > 0:
            return too_many(wait_s)
        try:
            notifications = parse_payload(await request.read())
        except web.HTTPRequestEntityTooLarge:
            metrics.record_webhook(WebhookResult.MALFORMED)
            return web.json_response({"error": f"body larger than {MAX_BODY_BYTES} bytes"}, status=413)
        except MalformedPayload as exc:
            metrics.record_webhook(WebhookResult.MALFORMED)
            return web.json_response({"error": str(exc)}, status=400)
        try:
            for notification in notifications:
                await on_alert(notification)
        except Exception as exc:  # noqa: BLE001 - answered as 500 so Alertmanager retries
            metrics.record_webhook(WebhookResult.ERROR)
            return web.json_response({"error": f"handling failed: {exc}"}, status=500)
        metrics.record_webhook(WebhookResult.ACCEPTED)
        return web.json_response({"accepted": len(notifications)})

    async def healthz(_: web.Request) -> web.Response:
        return web.Response(text="ok")

    app = web.Application(client_max_size=MAX_BODY_BYTES)
    app.router.add_post(path, receive)
    app.router.add_get("/healthz", healthz)
    return app
