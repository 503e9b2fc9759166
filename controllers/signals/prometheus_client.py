"""The operator's Prometheus client: an httpx client that contacts only the allowed endpoints.

Every query the operator sends to a Prometheus (the autoscaler's, the canary analysis') goes
through one client. This one carries the platform's `PrometheusAccess` and refuses, before
anything is sent, a request to any URL that is not under an allowed endpoint's `/api/v1/`: the
services' URLs are resolved against the same list first (`prometheus_access.resolve_prometheus`,
which also says why to the service), so this is the second lock, the one no future caller can
forget. It follows no redirect (httpx's default, kept explicitly), so an allowed endpoint cannot
send the operator elsewhere either.
"""

from __future__ import annotations

import httpx

from tailpilot.controllers.signals.prometheus_access import (
    PrometheusAccess,
    PrometheusChoice,
    client_query_refusal,
    resolve_prometheus,
)


class EndpointNotAllowed(httpx.RequestError):
    """A request to a URL outside the allowed Prometheus endpoints: refused, never sent."""


class PrometheusClient(httpx.AsyncClient):
    """An `httpx.AsyncClient` bound to the Prometheus endpoints `access` allows."""

    def __init__(
        self,
        access: PrometheusAccess,
        *,
        timeout: float = 10.0,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        super().__init__(
            timeout=timeout,
            transport=transport,
            follow_redirects=False,
            event_hooks={"request": [self._refuse_unlisted]},
        )
        self.access = access

    async def _refuse_unlisted(self, request: httpx.Request) -> None:
        # Request hooks run before the transport is called (redirects, were they followed, too).
        if not self.access.allows_request(str(request.url)):
            raise EndpointNotAllowed(
                f"{request.url.scheme}://{request.url.host}:{request.url.port or ''}{request.url.path} "
                "is not an allowed Prometheus endpoint",
                request=request,
            )


def access_of(client: httpx.AsyncClient, *, default_url: str | None) -> PrometheusAccess:
    """The access a client carries; a plain client allows the operator's default Prometheus only."""
    if isinstance(client, PrometheusClient):
        return client.access
    return PrometheusAccess(default_url=default_url)


def prometheus_for(
    client: httpx.AsyncClient, spec_url: str | None, *, default_url: str | None
) -> PrometheusChoice:
    """The Prometheus a service's queries go to through `client`, or why none (`resolve_prometheus`)."""
    return resolve_prometheus(spec_url, access_of(client, default_url=default_url))


def client_query_refused(client: httpx.AsyncClient) -> str | None:
    """Why tenants' PromQL is not run through `client` (None: the platform turned it on)."""
    return client_query_refusal(access_of(client, default_url=None))
