"""The activator's own endpoints, on a port apart from the proxied ones: health, readiness, metrics.

Apart because the proxy ports forward every path to the model (a model server may answer
`/metrics` or `/healthz` itself), and so that a probe or a scrape never counts as a request.

- `/healthz`: 200 while the process serves (the liveness probe).
- `/readyz`: 200 once the backends' first full view has arrived and while not draining; 503
  otherwise (the readiness probe: a pod not yet synced would answer 404 for every service, and a
  draining one must leave the Service's endpoints).
- `/metrics`: the activator's Prometheus metrics, text format.
"""

from __future__ import annotations

from collections.abc import Callable

from aiohttp import web

from tailpilot.activator.backends import Backends
from tailpilot.activator.metrics import CONTENT_TYPE, ActivatorMetrics


def admin_application(
    *, backends: Backends, metrics: ActivatorMetrics, draining: Callable[[], bool]
) -> web.Application:
    """The admin application: `/healthz`, `/readyz` (synced and not `draining()`), `/metrics`."""

    async def healthz(_: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    async def readyz(_: web.Request) -> web.Response:
        if draining():
            return web.Response(status=503, text="draining\n")
        if not backends.synced:
            return web.Response(
                status=503, text="waiting for the first view of the services and their replicas\n"
            )
        return web.Response(text="ready\n")

    async def metrics_page(_: web.Request) -> web.Response:
        # CONTENT_TYPE carries parameters (version, charset): given as a header, not content_type=.
        return web.Response(body=metrics.render(), headers={"Content-Type": CONTENT_TYPE})

    app = web.Application()
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/metrics", metrics_page)
    return app
