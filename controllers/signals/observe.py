"""Observation of one InferenceService from Prometheus (Triton's per-pod metrics).

Split in three so the I/O is thin:

- `build_queries` (pure): one PromQL instant query per signal, each aggregated
  `by (pod)` over the service's pods, selected by the labels `namespace` and
  `inferenceservice` that the operator's ServiceMonitor relabelling puts on
  every series, the same ones its PrometheusRule selects (both label names are
  parameters);
- `parse_vector` / `pod_metrics_from_results` (pure): Prometheus' JSON answers
  into `PodMetrics`;
- `observe_service` (async, httpx): runs the queries concurrently at `now_s`
  and merges the pods with `tailpilot.policy.observation_from_pod_metrics`
  (rate-weighted mixture P99, never an average of quantiles).

Pods are discovered from `nv_inference_pending_request_count`, a gauge every
loaded model exports from its first scrape: a pod is current when an instant
query of that gauge returns it (Prometheus marks the series of a target that
went away or failed its scrape as stale, and instant queries skip stale
series), and the age of its newest sample comes from `timestamp()` of the
gauge. Range queries (`rate`) still return pods that disappeared inside the
window; they are dropped, not counted as replicas. Counters are turned
into per-second rates with `rate(...[window])`; Triton does not reset them on
a model reload, and `rate` handles pod restarts. The P99 is the newest value of
Triton's summary (its own sliding window); all quantiles are fetched so the
merge can fit each pod's tail. The queue's and compute infer's summaries are
fetched and merged the same way (their P99s on the status beside the request's).

The burst sizing needs the service's arrivals per scrape interval over a lookback
(`arrival_queries`, `arrival_counts`): subqueries sample each pod's success counter and
pending gauge at every scrape step (and the time of its newest counter sample), and a bin's
arrivals are the pods' completions plus their queues' growth, counted per pod so that pods
coming and going count only what they served.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import weakref
from collections.abc import Mapping
from contextlib import AbstractAsyncContextManager, nullcontext
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import httpx

from tailpilot.api import constants as c
from tailpilot.api.autoscaling import Observation
from tailpilot.controllers.signals.prometheus_answer import (
    not_an_api_answer,
    refusal,
    result_kind,
    value_words,
)
from tailpilot.controllers.signals.prometheus_client import client_query_refused
from tailpilot.policy import PodMetrics, observation_from_pod_metrics
from tailpilot.policy.estimate import Summary
from tailpilot.policy.signals import PodLatency

log = logging.getLogger("tailpilot.observe")

#: Label with the service's name on its series: what the generated ServiceMonitor relabels to.
DEFAULT_SERVICE_LABEL = c.METRIC_LABEL_ISVC
DEFAULT_NAMESPACE_LABEL = c.METRIC_LABEL_NAMESPACE
DEFAULT_POD_LABEL = "pod"

#: PodMetrics field -> Triton counter whose per-second rate it is.
RATE_COUNTERS: Mapping[str, str] = {
    "request_rate": "nv_inference_request_success",
    "failure_rate": "nv_inference_request_failure",
    "inference_count_rate": "nv_inference_count",
    "exec_count_rate": "nv_inference_exec_count",
    "request_duration_us_rate": "nv_inference_request_duration_us",
    "queue_duration_us_rate": "nv_inference_queue_duration_us",
    "compute_duration_us_rate": "nv_inference_compute_infer_duration_us",
    "compute_input_duration_us_rate": "nv_inference_compute_input_duration_us",
    "compute_output_duration_us_rate": "nv_inference_compute_output_duration_us",
}
PENDING_GAUGE = "nv_inference_pending_request_count"
LATENCY_SUMMARY = "nv_inference_request_summary_us"
#: Triton's summaries of two parts of a request's time (with `--metrics-config=summary_latencies=true`,
#: which the serving pods run with, beside the request's): the P99s of the queue and of compute infer.
QUEUE_SUMMARY = "nv_inference_queue_summary_us"
COMPUTE_SUMMARY = "nv_inference_compute_infer_summary_us"
#: Query key -> the summary family it fetches every quantile of, per pod.
SUMMARY_QUERIES: Mapping[str, str] = {
    "quantiles": LATENCY_SUMMARY,
    "queue_quantiles": QUEUE_SUMMARY,
    "compute_quantiles": COMPUTE_SUMMARY,
}


class ObservationError(RuntimeError):
    """Prometheus could not be queried or answered with an error; the caller treats it as missing data.

    Its text may reach the service's status: it is built from `prometheus_answer`'s fixed words,
    never from the answer's own text.
    """


@dataclass(frozen=True)
class Selector:
    """Which series belong to one service."""

    namespace: str
    service: str
    namespace_label: str = DEFAULT_NAMESPACE_LABEL
    service_label: str = DEFAULT_SERVICE_LABEL
    pod_label: str = DEFAULT_POD_LABEL

    def matchers(self) -> str:
        """PromQL label matchers, with values escaped."""
        ns = f'{self.namespace_label}="{_escape(self.namespace)}"'
        return f'{ns},{self.service_label}="{_escape(self.service)}"'


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _window(window_s: float) -> str:
    return f"{max(1, round(window_s))}s"


def build_queries(
    selector: Selector, *, window_s: float, recent_window_s: float | None = None
) -> dict[str, str]:
    """Return one PromQL instant query per signal, keyed by PodMetrics field, "quantiles", "last_sample".

    With a `recent_window_s` shorter than the window, "recent_request_rate" is the success rate
    over that recent window too (a load step shows there before the window's average moves).
    """
    sel = selector.matchers()
    by = f"by ({selector.pod_label})"
    w = _window(window_s)
    queries = {field: f"sum {by} (rate({metric}{{{sel}}}[{w}]))" for field, metric in RATE_COUNTERS.items()}
    if recent_window_s is not None and recent_window_s < window_s:
        success = RATE_COUNTERS["request_rate"]
        queries["recent_request_rate"] = f"sum {by} (rate({success}{{{sel}}}[{_window(recent_window_s)}]))"
    queries["pending_requests"] = f"sum {by} ({PENDING_GAUGE}{{{sel}}})"
    # max over models/versions in a pod: conservative when a pod serves more than one.
    for key, family in SUMMARY_QUERIES.items():
        queries[key] = f"max by ({selector.pod_label}, quantile) ({family}{{{sel}}})"
    queries["last_sample"] = f"max {by} (timestamp({PENDING_GAUGE}{{{sel}}}))"
    return queries


def arrival_queries(selector: Selector, *, lookback_s: float, bin_s: float) -> dict[str, str]:
    """Subqueries (range vectors, one series per pod, a point per bin) for the arrival curve.

    Each pod's success counter and pending gauge, and the time of its newest counter sample.
    """
    sel = selector.matchers()
    by = f"by ({selector.pod_label})"
    span, step = _window(lookback_s + bin_s), _window(bin_s)
    success = f"{RATE_COUNTERS['request_rate']}{{{sel}}}"
    return {
        "arrivals_completed": f"sum {by} ({success})[{span}:{step}]",
        "arrivals_pending": f"sum {by} ({PENDING_GAUGE}{{{sel}}})[{span}:{step}]",
        "arrivals_sampled": f"max {by} (timestamp({success}))[{span}:{step}]",
    }


def _result(body: Mapping[str, Any], result_type: str, what: str) -> list[Any]:
    """The "result" list of a successful answer of `result_type`.

    Raises:
        ObservationError: When the answer is an error or of another type.
    """
    if body.get("status") != "success":
        raise ObservationError(_refused(body))
    data = body.get("data")
    result = data.get("result") if isinstance(data, dict) else None
    if not isinstance(data, dict) or data.get("resultType") != result_type or not isinstance(result, list):
        raise ObservationError(f"expected {what}, got a {result_kind(data)} answer")
    return result


def _refused(body: Mapping[str, Any]) -> str:
    """An error answer's words for the status; Prometheus' own message goes to the operator's log."""
    said = body.get("error")
    log.warning("Prometheus refused a query (%s): %.500s", body.get("errorType"), said)
    return refusal(dict(body))


def parse_series(
    body: Mapping[str, Any], *, pod_label: str = DEFAULT_POD_LABEL
) -> dict[str, dict[float, float]]:
    """Pod -> (timestamp -> value) of a range-vector answer; NaN/Inf points are left out.

    Raises:
        ObservationError: When the answer is an error or not a matrix.
    """
    out: dict[str, dict[float, float]] = {}
    for item in _result(body, "matrix", "a range vector"):
        if not isinstance(item, dict):
            continue
        pod = str((item.get("metric") or {}).get(pod_label, ""))
        points = out.setdefault(pod, {})
        for point in item.get("values", []):
            if isinstance(point, list) and len(point) == 2:
                t, value = _number(point[0]), _number(point[1])
                if t is not None and value is not None:
                    points[t] = value
    return out


#: Per pod: timestamp -> value.
_PodSeries = Mapping[str, Mapping[float, float]]


def arrival_counts(
    completed: _PodSeries, pending: _PodSeries, sampled: _PodSeries, *, step_s: float
) -> tuple[tuple[float, ...], float | None]:
    """(arrivals per bin, oldest first; the bin's seconds), from each pod's counter and queue.

    A pod's arrivals between two of its samples are its completions (counter growth, never
    negative: a restart resets it) plus its queue's growth, counted at the step where the newer
    sample first shows. Per pod, so pods that come and go count only what they served: a new pod's
    first sample (its warm-up requests) and a gone pod's absence count nothing. When Prometheus
    scrapes less often than the step (a scrape interval other than the spec's), steps are grouped
    by the median gap between samples: otherwise an empty step and a double one would read as a
    burst at twice the rate.
    """
    steps = sorted({t for series in completed.values() for t in series})
    if len(steps) < 2:
        return (), None
    at = {t: i for i, t in enumerate(steps)}
    per_step = [0.0] * len(steps)
    gaps: list[float] = []
    for pod, series in completed.items():
        times, seen, queue = sorted(series), sampled.get(pod, {}), pending.get(pod, {})
        last, last_queue = times[0], queue.get(times[0], 0.0)
        last_seen = seen.get(last, last)
        for t in times[1:]:
            t_seen = seen.get(t, t)
            if t_seen <= last_seen:
                continue  # the same sample as before: nothing new to count
            queued = queue.get(t, last_queue)
            per_step[at[t]] += max(0.0, series[t] - series[last]) + queued - last_queue
            gaps.append(t_seen - last_seen)
            last, last_queue, last_seen = t, queued, t_seen
    gaps.sort()
    group = max(1, round(gaps[len(gaps) // 2] / step_s)) if gaps else 1
    deltas = per_step[1:]
    deltas = deltas[len(deltas) % group :]  # whole groups, the newest ending now
    counts = tuple(max(0.0, sum(deltas[i : i + group])) for i in range(0, len(deltas), group))
    return counts, group * step_s


def _number(raw: object) -> float | None:
    try:
        value = float(raw)  # type: ignore[arg-type]  # Prometheus sends numbers as strings
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None


def parse_vector(body: Mapping[str, Any]) -> list[tuple[dict[str, str], float | None]]:
    """Return the (labels, value) pairs of an instant-vector answer; NaN/Inf become None.

    Raises:
        ObservationError: When the answer is an error or not a vector.
    """
    out: list[tuple[dict[str, str], float | None]] = []
    for item in _result(body, "vector", "an instant vector"):
        metric = item.get("metric", {}) if isinstance(item, dict) else {}
        value = item.get("value") if isinstance(item, dict) else None
        number = _number(value[1]) if isinstance(value, list) and len(value) == 2 else None
        out.append(({str(k): str(v) for k, v in metric.items()}, number))
    return out


def pod_metrics_from_results(
    results: Mapping[str, list[tuple[dict[str, str], float | None]]], *, pod_label: str = DEFAULT_POD_LABEL
) -> list[PodMetrics]:
    """Join the per-query vectors by pod into PodMetrics (a pod missing from a query gets None there).

    Only pods present in the "last_sample" vector (an instant selector, so series
    Prometheus marked stale are absent) are returned when that key is given: range
    queries such as `rate(...[window])` still return pods that stopped being scraped
    inside the window, and those are gone, not replicas.
    """
    fields: dict[str, dict[str, Any]] = {}
    # Summary query key -> pod -> its (quantile, us) points.
    quantiles: dict[str, dict[str, list[tuple[float, float]]]] = {key: {} for key in SUMMARY_QUERIES}
    for key, vector in results.items():
        for labels, value in vector:
            pod = labels.get(pod_label)
            if not pod:
                continue
            entry = fields.setdefault(pod, {})
            if key in SUMMARY_QUERIES:
                q = _number(labels.get("quantile"))
                if q is not None and value is not None:
                    quantiles[key].setdefault(pod, []).append((q, value))
            elif key == "last_sample":
                entry["last_sample_s"] = value
            else:
                entry[key] = value
    current = {labels.get(pod_label) for labels, _ in results.get("last_sample", [])}
    pods = []
    for pod in sorted(fields):
        if "last_sample" in results and pod not in current:
            continue
        summary = PodLatency.of(
            quantiles["quantiles"].get(pod, []),
            queue=_summary(quantiles["queue_quantiles"].get(pod)),
            compute=_summary(quantiles["compute_quantiles"].get(pod)),
        )
        pods.append(
            PodMetrics(
                pod=pod,
                p99_us=summary.p99_us,
                quantiles_us=summary.quantiles_us,
                queue_summary=summary.queue,
                compute_summary=summary.compute,
                **fields[pod],
            )
        )
    return pods


def _summary(points: list[tuple[float, float]] | None) -> Summary | None:
    """A part's summary from its points; None when Prometheus had none for the pod (not exported)."""
    return Summary.of(points) if points else None


def latency_query(
    *,
    namespace_label: str = DEFAULT_NAMESPACE_LABEL,
    service_label: str = DEFAULT_SERVICE_LABEL,
    pod_label: str = DEFAULT_POD_LABEL,
) -> str:
    """One query for the latency summaries of every service a Prometheus scrapes, grouped by pod.

    The fast signals take everything else from the pods; only the P99 feedback comes from
    Prometheus, and one query a period serves every service (not one per service). It fetches the
    request's, the queue's and compute infer's summaries at once, keeping each series' family
    (`__name__`) apart (checked against Prometheus 3.16: grouping by `__name__` keeps it).
    """
    by = f"__name__, {namespace_label}, {service_label}, {pod_label}, quantile"
    families = "|".join(SUMMARY_QUERIES.values())
    return f'max by ({by}) ({{__name__=~"{families}",{service_label}!=""}})'


def latency_by_service(
    vector: list[tuple[dict[str, str], float | None]],
    *,
    namespace_label: str = DEFAULT_NAMESPACE_LABEL,
    service_label: str = DEFAULT_SERVICE_LABEL,
    pod_label: str = DEFAULT_POD_LABEL,
) -> dict[tuple[str, str], dict[str, PodLatency]]:
    """(namespace, service) -> pod -> its summaries, from `latency_query`'s answer.

    A series without a family name is the request's summary (what the query asked for before it
    fetched the parts' too).
    """
    # (namespace, service, pod) -> family -> (quantile, us) points.
    points: dict[tuple[str, str, str], dict[str, list[tuple[float, float]]]] = {}
    for labels, value in vector:
        q = _number(labels.get("quantile"))
        pod = labels.get(pod_label)
        if q is None or value is None or not pod:
            continue
        key = (labels.get(namespace_label, ""), labels.get(service_label, ""), pod)
        family = labels.get("__name__", LATENCY_SUMMARY)
        points.setdefault(key, {}).setdefault(family, []).append((q, value))
    out: dict[tuple[str, str], dict[str, PodLatency]] = {}
    for (namespace, service, pod), families in points.items():
        out.setdefault((namespace, service), {})[pod] = PodLatency.of(
            families.get(LATENCY_SUMMARY, []),
            queue=_summary(families.get(QUEUE_SUMMARY)),
            compute=_summary(families.get(COMPUTE_SUMMARY)),
        )
    return out


@dataclass
class LatencyBoard:
    """The latest latency summaries of every service, one query per Prometheus per `max_age_s`.

    Decisions of many services fall within a few seconds of each other; they share one answer
    (concurrent callers wait for the query in flight rather than sending their own). An answer
    fetched for a later moment than a caller's `now_s` serves it too: the callers waiting on the
    lock took their `now_s` before it, in any order, and each one that found the answer "from the
    future" sent its own query, which made the queue longer and the next callers later still. Only
    an answer more than `max_age_s` away on either side (old, or from a clock stepped back) is
    fetched again.
    """

    max_age_s: float = 5.0
    _answers: dict[str, tuple[float, dict[tuple[str, str], dict[str, PodLatency]]]] = field(
        default_factory=dict
    )
    _locks: dict[str, asyncio.Lock] = field(default_factory=dict)
    #: Queries sent (for the scale benchmark and the tests).
    queries: int = 0

    async def latency(
        self, client: httpx.AsyncClient, *, prometheus_url: str, namespace: str, service: str, now_s: float
    ) -> dict[str, PodLatency]:
        """Pod -> latency summary of one service (empty: Prometheus has none for it yet).

        Raises:
            ObservationError: When Prometheus is unreachable or answers an error.
        """
        lock = self._locks.setdefault(prometheus_url, asyncio.Lock())
        async with lock:
            cached = self._answers.get(prometheus_url)
            if cached is None or abs(now_s - cached[0]) > self.max_age_s:
                url = prometheus_url.rstrip("/") + "/api/v1/query"
                self.queries += 1
                body = await _query(client, url, latency_query(), now_s)
                cached = (now_s, latency_by_service(parse_vector(body)))
                self._answers[prometheus_url] = cached
        return cached[1].get((namespace, service), {})


#: Queries in flight at once to one Prometheus (by scheme, host and port). Services may each name
#: their own Prometheus (`spec.monitoring.prometheusUrl`): one that answers slowly holds at most
#: this many of the operator's shared connections (httpx keeps 100), not all of them, so every
#: other service's observations still go out. Below Prometheus' own `--query.max-concurrency`
#: (20 by default), past which queries only wait inside Prometheus.
MAX_IN_FLIGHT_PER_PROMETHEUS = 16
#: Queries in flight at once for one namespace's services, whichever Prometheus they go to. One
#: tenant whose services name several allowed endpoints (or whose observations are slow) then holds
#: at most this many of the operator's connections, and another tenant's observations still go out.
#: One service's observation sends about 13 queries at once: they wait their turn, a few ms each.
MAX_IN_FLIGHT_PER_NAMESPACE = 8
#: Largest answer read from Prometheus for the operator's own shared queries (one answer holds
#: every service's pods: it grows with the fleet). A bigger one is refused, not parsed.
MAX_RESPONSE_BYTES = 16 << 20
#: Largest answer read for one tenant's queries. They select one service's pods (a few KB an
#: answer, about 200 bytes a pod and family); a bigger one is a wrong URL or a hostile endpoint,
#: and at 16 MiB each one service's 13 concurrent queries held 200 MiB of the shared operator.
MAX_TENANT_RESPONSE_BYTES = 1 << 20
#: Answers larger than this are parsed in a worker thread: a multi-megabyte JSON document takes the
#: event loop for tens of ms, and the loop also serves the webhook, `/healthz`, the Lease and every
#: other service's loop. Smaller ones parse inline, faster than the hop to a thread.
INLINE_PARSE_BYTES = 64 << 10

_gates: weakref.WeakKeyDictionary[httpx.AsyncClient, dict[str, asyncio.Semaphore]] = (
    weakref.WeakKeyDictionary()
)


def _gate(client: httpx.AsyncClient, url: str) -> asyncio.Semaphore:
    """The in-flight bound of `url`'s Prometheus, per client (a client lives on one event loop)."""
    parts = urlsplit(url)
    per_client = _gates.setdefault(client, {})
    return per_client.setdefault(
        f"{parts.scheme}://{parts.netloc}", asyncio.Semaphore(MAX_IN_FLIGHT_PER_PROMETHEUS)
    )


def _tenant_gate(client: httpx.AsyncClient, namespace: str | None) -> AbstractAsyncContextManager[Any]:
    """The in-flight bound of one namespace's queries (none for the operator's own shared queries)."""
    if namespace is None:
        return nullcontext()
    per_client = _gates.setdefault(client, {})
    # A key no URL's "scheme://host:port" can take (a space is never in one).
    return per_client.setdefault(f"namespace {namespace}", asyncio.Semaphore(MAX_IN_FLIGHT_PER_NAMESPACE))


def _json_or_none(raw: bytes | bytearray) -> Any:
    """The JSON document `raw` holds; None when it holds none (or nests past Python's stack)."""
    try:
        return json.loads(raw)
    except (ValueError, RecursionError):
        return None


async def _query(
    client: httpx.AsyncClient, url: str, query: str, now_s: float, *, namespace: str | None = None
) -> Any:
    """One instant query; `namespace`: the tenant it is for (None: the operator's own, shared)."""
    limit = MAX_RESPONSE_BYTES if namespace is None else MAX_TENANT_RESPONSE_BYTES
    try:
        async with (
            _tenant_gate(client, namespace),
            _gate(client, url),
            client.stream("GET", url, params={"query": query, "time": f"{now_s:.3f}"}) as response,
        ):
            raw = bytearray()
            async for chunk in response.aiter_bytes():
                raw += chunk
                if len(raw) > limit:
                    raise ObservationError(f"Prometheus at {url} answered more than {limit} bytes: refused")
            status, content_type = response.status_code, response.headers.get("content-type")
    except httpx.HTTPError as exc:
        # The exception's type only: a protocol error's text can quote what the other end sent
        # (h11 quotes a status line that is not HTTP's); the log keeps all of it.
        log.warning("Prometheus at %s: %r", url, exc)
        raise ObservationError(f"Prometheus unreachable at {url} ({type(exc).__name__})") from exc
    body = (
        await asyncio.to_thread(_json_or_none, raw) if len(raw) > INLINE_PARSE_BYTES else _json_or_none(raw)
    )
    # Prometheus' API answers a JSON object with "status" success or error, whatever the HTTP status;
    # anything else is another service's answer, and only described.
    if not isinstance(body, dict) or body.get("status") not in ("success", "error"):
        raise ObservationError(
            not_an_api_answer(url=url, status=status, content_type=content_type, size=len(raw))
        )
    return body


async def _query_all(
    client: httpx.AsyncClient,
    prometheus_url: str,
    queries: Mapping[str, str],
    now_s: float,
    *,
    namespace: str | None = None,
) -> dict[str, Any]:
    """Every query at `now_s`, concurrently (within `namespace`'s bound); key -> Prometheus' answer."""
    url = prometheus_url.rstrip("/") + "/api/v1/query"
    answers = await asyncio.gather(
        *(_query(client, url, q, now_s, namespace=namespace) for q in queries.values())
    )
    return dict(zip(queries, answers, strict=True))


async def pod_metrics(
    client: httpx.AsyncClient, *, prometheus_url: str, selector: Selector, window_s: float, now_s: float
) -> list[PodMetrics]:
    """Each current pod's metrics over `window_s` before `now_s` (what `observe_service` merges).

    Raises:
        ObservationError: When Prometheus is unreachable or answers an error.
    """
    queries = build_queries(selector, window_s=window_s)
    bodies = await _query_all(client, prometheus_url, queries, now_s, namespace=selector.namespace)
    return pod_metrics_from_results(
        {key: parse_vector(body) for key, body in bodies.items()}, pod_label=selector.pod_label
    )


async def observe_service(
    client: httpx.AsyncClient,
    *,
    prometheus_url: str,
    namespace: str,
    service: str,
    window_s: float,
    now_s: float,
    recent_window_s: float | None = None,
    arrival_lookback_s: float | None = None,
    arrival_bin_s: float | None = None,
    namespace_label: str = DEFAULT_NAMESPACE_LABEL,
    service_label: str = DEFAULT_SERVICE_LABEL,
    pod_label: str = DEFAULT_POD_LABEL,
) -> Observation:
    """Query Prometheus for one service's pods at `now_s` and build its Observation.

    No pods (the service has no scraped Triton) gives `request_rate=None`, which
    the policy reports as MetricsMissing; samples older than the window count
    as gone and `data_age_s` exposes staleness.

    Raises:
        ObservationError: When Prometheus is unreachable or answers an error.
    """
    selector = Selector(
        namespace=namespace,
        service=service,
        namespace_label=namespace_label,
        service_label=service_label,
        pod_label=pod_label,
    )
    queries = build_queries(selector, window_s=window_s, recent_window_s=recent_window_s)
    curve_queries = (
        arrival_queries(selector, lookback_s=arrival_lookback_s, bin_s=arrival_bin_s)
        if arrival_lookback_s and arrival_bin_s
        else {}
    )
    bodies = await _query_all(
        client, prometheus_url, {**queries, **curve_queries}, now_s, namespace=namespace
    )
    results = {key: parse_vector(bodies[key]) for key in queries}
    pods = pod_metrics_from_results(results, pod_label=pod_label)
    recent = recent_window_s if "recent_request_rate" in queries else None
    counts: tuple[float, ...] = ()
    bin_s: float | None = None
    if curve_queries and arrival_bin_s:
        series = {key: parse_series(bodies[key], pod_label=pod_label) for key in curve_queries}
        counts, bin_s = arrival_counts(
            series["arrivals_completed"],
            series["arrivals_pending"],
            series["arrivals_sampled"],
            step_s=arrival_bin_s,
        )
    return observation_from_pod_metrics(
        pods=pods,
        window_s=window_s,
        now_s=now_s,
        recent_window_s=recent,
        arrival_counts=counts,
        arrival_bin_s=bin_s,
    )


@dataclass(frozen=True)
class ClientLatency:
    """The clients' P99 from the spec's query (ms), or why there is none (fixed words, never the answer's)."""

    p99_ms: float | None
    error: str | None = None


def client_latency_of(body: Any) -> ClientLatency:
    """The one finite number of an instant query's answer (a scalar, or a vector of one series).

    An error, no series, several series or a value that is not finite (a quantile of no requests is
    NaN) or negative gives no figure and says which.
    """
    if not isinstance(body, dict):
        return ClientLatency(None, "not a Prometheus API answer")
    if body.get("status") != "success":
        return ClientLatency(None, _refused(body))
    data = body.get("data")
    kind = data.get("resultType") if isinstance(data, dict) else None
    result = data.get("result") if isinstance(data, dict) else None
    if kind == "scalar" and isinstance(result, list) and len(result) == 2:
        raw = result[1]
    elif kind == "vector" and isinstance(result, list):
        if len(result) != 1:
            return ClientLatency(None, f"{len(result) or 'no'} series, one expected")
        value = result[0].get("value") if isinstance(result[0], dict) else None
        raw = value[1] if isinstance(value, list) and len(value) == 2 else None
    else:
        expected = "a vector of one series or a scalar expected"
        return ClientLatency(None, f"a {result_kind(data)} answer, {expected}")
    number = _number(raw)
    if number is None or number < 0:
        return ClientLatency(None, f"the value is {value_words(raw)}, not a finite number of ms at least 0")
    return ClientLatency(number)


async def client_latency(
    client: httpx.AsyncClient, *, prometheus_url: str, query: str, now_s: float, namespace: str | None = None
) -> ClientLatency:
    """Evaluate the spec's clientLatencyP99Query at `now_s`; never raises (a failure is the error).

    Only where the platform turned tenants' queries on (the client's access): otherwise nothing is
    sent, and the error says why. A tenant's PromQL on a shared Prometheus reads any tenant's series.
    """
    refused = client_query_refused(client)
    if refused is not None:
        return ClientLatency(None, refused)
    url = prometheus_url.rstrip("/") + "/api/v1/query"
    try:
        body = await _query(client, url, query, now_s, namespace=namespace)
    except ObservationError as error:
        return ClientLatency(None, str(error))
    return client_latency_of(body)
