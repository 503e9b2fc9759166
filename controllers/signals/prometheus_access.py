"""Which Prometheus a service may have the operator query, and whether its own PromQL runs (pure).

The operator sends its queries from inside the cluster, with its own network reach: to whatever
`spec.monitoring.prometheusUrl` names, it would send a GET. A tenant naming a metadata service, or
another tenant's pod that admits the operator, would have the operator fetch it. So the URL a
service names is used only when it is one of the endpoints the platform team allows (the
operator's `--allowed-prometheus-url`, the chart's `prometheus.allowedUrls`); the operator's own
Prometheus (`--prometheus-url`) is always allowed. Any other is never contacted, and the service
is told why (`resolve_prometheus`).

`spec.monitoring.clientLatencyP99Query` is PromQL a tenant writes, run on a Prometheus shared by
every tenant: PromQL has no notion of a namespace, so without a proxy that enforces the tenant's
label on every selector, such a query reads any tenant's series. It is therefore evaluated only
where the platform turns it on (`--client-latency-queries`, the chart's
`prometheus.clientLatencyQueries`), off by default (`client_query_refusal`).

Endpoints are compared whole, after normalizing what does not change where a request goes (the
scheme's and host's case, a default port, a trailing slash): scheme, user info, host, port and
path must all match one allowed endpoint. A URL with a query or a fragment is never one (the
operator appends its API path to the URL). The matching is strict on purpose: a looser one (a
prefix, a host alone) would let a path or a port the platform did not name through.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Final
from urllib.parse import urlsplit

from tailpilot.api import constants as c

#: The spec fields, as the messages name them.
URL_FIELD: Final = "spec.monitoring.prometheusUrl"
QUERY_FIELD: Final = "spec.monitoring.clientLatencyP99Query"
#: How the platform allows more endpoints, and tenant queries, as the messages name it.
ALLOW_FLAG: Final = "--allowed-prometheus-url (chart value prometheus.allowedUrls)"
QUERIES_FLAG: Final = "--client-latency-queries (chart value prometheus.clientLatencyQueries)"
#: Of a refused URL, this many characters at most are quoted back.
_QUOTED_URL_CHARS: Final = 200
_DEFAULT_PORTS: Final = {"http": 80, "https": 443}


@dataclass(frozen=True)
class Endpoint:
    """A Prometheus base URL, normalized: what decides where a request goes."""

    scheme: str
    userinfo: str
    host: str
    port: int
    path: str


def endpoint_of(url: str) -> Endpoint | None:
    """The normalized endpoint of a base URL; None when it is not one (scheme, no host, a query...)."""
    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError:  # a malformed port or an unbalanced IPv6 bracket
        return None
    scheme = parts.scheme.lower()
    if scheme not in _DEFAULT_PORTS or not parts.hostname or parts.query or parts.fragment:
        return None
    if "?" in url or "#" in url:  # an empty query or fragment still changes what is sent
        return None
    userinfo = parts.netloc.rpartition("@")[0] if "@" in parts.netloc else ""
    return Endpoint(
        scheme=scheme,
        userinfo=userinfo,
        host=parts.hostname.lower(),
        port=port if port is not None else _DEFAULT_PORTS[scheme],
        path=parts.path.rstrip("/"),
    )


@dataclass(frozen=True)
class PrometheusAccess:
    """What the platform lets services use of Prometheus (the operator's flags, read at start-up)."""

    #: The operator's own Prometheus: the services' default, always allowed.
    default_url: str | None = None
    #: Other base URLs a service may name in spec.monitoring.prometheusUrl.
    allowed_urls: tuple[str, ...] = ()
    #: Whether spec.monitoring.clientLatencyP99Query is evaluated at all.
    client_queries: bool = False
    _endpoints: frozenset[Endpoint] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        urls = [*self.allowed_urls, *([self.default_url] if self.default_url else [])]
        found = {e for e in map(endpoint_of, urls) if e is not None}
        object.__setattr__(self, "_endpoints", frozenset(found))

    def allows(self, url: str) -> bool:
        """Whether a base URL is the default's or an allowed endpoint's (after normalizing both)."""
        endpoint = endpoint_of(url)
        return endpoint is not None and endpoint in self._endpoints

    def allows_request(self, url: str) -> bool:
        """Whether a request URL goes to an allowed endpoint: its base, then a path under `/api/v1/`."""
        endpoint = endpoint_of(url.partition("?")[0])
        if endpoint is None:
            return False
        origin = (endpoint.scheme, endpoint.userinfo, endpoint.host, endpoint.port)
        return any(
            (e.scheme, e.userinfo, e.host, e.port) == origin and endpoint.path.startswith(f"{e.path}/api/v1/")
            for e in self._endpoints
        )


def invalid_urls(urls: Iterable[str]) -> list[str]:
    """The URLs of a list that are not Prometheus base URLs (for the operator's flags' check)."""
    return [url for url in urls if endpoint_of(url) is None]


def parse_allowed_urls(table: str, flags: Iterable[str] = ()) -> tuple[str, ...]:
    """The allowed endpoints: a JSON list (TAILPILOT_ALLOWED_PROMETHEUS_URLS, the chart's) and the flags.

    Raises:
        ValueError: on a table that is not a JSON list of strings, or an entry that is not an
            http(s) base URL without query or fragment (it could never match, and would only hide
            the platform's mistake).
    """
    urls: list[str] = []
    if table.strip():
        loaded = json.loads(table)
        if not isinstance(loaded, list) or not all(isinstance(u, str) for u in loaded):
            raise ValueError(f"TAILPILOT_ALLOWED_PROMETHEUS_URLS must be a JSON list of URLs, got {table!r}")
        urls += loaded
    urls = [u.strip() for u in [*urls, *flags] if u.strip()]
    bad = invalid_urls(urls)
    if bad:
        raise ValueError(f"allowed Prometheus URLs must be http(s) base URLs without query, got {bad!r}")
    return tuple(dict.fromkeys(urls))


@dataclass(frozen=True)
class PrometheusChoice:
    """The Prometheus a service's queries go to, or why none (a reason and a message for ScalingActive)."""

    url: str | None
    reason: str = ""
    message: str = ""


def resolve_prometheus(spec_url: str | None, access: PrometheusAccess) -> PrometheusChoice:
    """The Prometheus of a service: the URL it names if the platform allows it, else the default.

    A URL that is named but not allowed gives no Prometheus at all, not the default: the service
    asked for another one, and its figures from the default would be someone else's answer.
    """
    if spec_url:
        if access.allows(spec_url):
            return PrometheusChoice(spec_url)
        quoted = spec_url[:_QUOTED_URL_CHARS] + ("..." if len(spec_url) > _QUOTED_URL_CHARS else "")
        return PrometheusChoice(
            None,
            c.REASON_PROMETHEUS_URL_NOT_ALLOWED,
            f"{URL_FIELD} {quoted!r} is not among the Prometheus endpoints the platform allows "
            f"(the operator's {ALLOW_FLAG}), so it is never contacted; leave the field out to use the "
            "operator's Prometheus, or ask the platform team to allow this endpoint",
        )
    if access.default_url is None:
        return PrometheusChoice(
            None,
            c.REASON_METRICS_UNAVAILABLE,
            f"no Prometheus URL ({URL_FIELD} or the operator's --prometheus-url)",
        )
    return PrometheusChoice(access.default_url)


def client_query_refusal(access: PrometheusAccess) -> str | None:
    """Why the service's clientLatencyP99Query is not evaluated (None: the platform allows it)."""
    if access.client_queries:
        return None
    return (
        "not evaluated: the operator runs tenants' PromQL on a shared Prometheus only where the "
        f"platform turns it on (the operator's {QUERIES_FLAG}), since a query can read any "
        "tenant's series"
    )
