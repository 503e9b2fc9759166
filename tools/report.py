"""`tailpilot report NAME`: one service's P99, load, replicas, batching and time breakdown over a time range.

Everything comes from Prometheus (Triton's per-pod metrics, as the operator's ServiceMonitor
labels them) and the object itself (the SLO, the decisions it recorded), so the report works for any
service on any cluster whose Prometheus scrapes its pods, after the fact. Three files:

- `report.md`: the period in figures (time within the SLO, P99 and rate percentiles, replicas,
  the mean time per request by part and which part dominates), the last cold start from zero in
  its parts (from the object's status), and the decisions within the period;
- `report.png`: the series over time, the decisions marked (`report_plot`);
- `report.json`: the series as plotted, for scripts.

Split so the I/O is thin: `series_queries` and `summarize`/`render_markdown` are pure, `fetch_series`
runs the range queries. The P99 plotted is the worst pod's (Triton's per-pod summaries cannot be
merged exactly in PromQL): an upper bound of the service's.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
from pydantic import TypeAdapter

from tailpilot.api.v1alpha1 import DecisionRecordStatus, InferenceServiceStatus
from tailpilot.controllers.signals.observe import (
    LATENCY_SUMMARY,
    PENDING_GAUGE,
    ObservationError,
    Selector,
    parse_series,
)
from tailpilot.tools.report_data import PARTS, ReportData
from tailpilot.tools.status_view import (
    budget_words,
    cold_start_parts,
    cold_start_summary,
    read_service,
    read_status,
)

SUCCESS = "nv_inference_request_success"
#: Prometheus' own series of its alerts; the operator's burn-rate alerts keep the service's labels.
ALERTS = "ALERTS"


def series_queries(selector: Selector, *, rate_window_s: float) -> dict[str, str]:
    """One PromQL range query per plotted series, keyed by its name (pure)."""
    sel = selector.matchers()
    w = f"{max(1, round(rate_window_s))}s"

    def rate(metric: str) -> str:
        return f"sum(rate({metric}{{{sel}}}[{w}]))"

    queries = {
        "rate_per_s": rate(SUCCESS),
        "failures_per_s": rate("nv_inference_request_failure"),
        "p99_ms": f'max({LATENCY_SUMMARY}{{{sel},quantile="0.99"}}) / 1000',
        "replicas": f"count({PENDING_GAUGE}{{{sel}}})",
        "mean_batch": f"{rate('nv_inference_count')} / {rate('nv_inference_exec_count')}",
        # How many of the service's SLO alerts fire (absent, so NaN, while none does).
        "alerts_firing": f'count({ALERTS}{{{sel},alertstate="firing"}})',
    }
    for part, metric in PARTS.items():
        queries[f"{part}_ms"] = f"{rate(metric)} / {rate(SUCCESS)} / 1000"
    return queries


def _align(points: Mapping[str, Mapping[float, float]], times: Sequence[float], step_s: float) -> list[float]:
    """One series' values at `times` (the single, unlabelled result of an aggregate), NaN where absent.

    Matched by step index: Prometheus returns the timestamps rounded to milliseconds.
    """
    at = {round((t - times[0]) / step_s): v for t, v in next(iter(points.values()), {}).items()}
    return [at.get(i, math.nan) for i in range(len(times))]


def fetch_series(
    prometheus_url: str,
    selector: Selector,
    *,
    start_s: float,
    end_s: float,
    step_s: float,
    client: httpx.Client | None = None,
) -> tuple[list[float], dict[str, list[float]]]:
    """Run every range query; (the time axis, name -> values on it).

    Raises:
        httpx.HTTPError: When Prometheus cannot be reached.
        ObservationError: When it answers an error.
    """
    queries = series_queries(selector, rate_window_s=max(2 * step_s, 20.0))
    times = [start_s + i * step_s for i in range(int((end_s - start_s) // step_s) + 1)]
    url = prometheus_url.rstrip("/") + "/api/v1/query_range"
    http = client or httpx.Client(timeout=30.0)
    try:
        out: dict[str, list[float]] = {}
        for name, query in queries.items():
            params = {"query": query, "start": f"{start_s:.3f}", "end": f"{end_s:.3f}", "step": f"{step_s:g}"}
            body = http.get(url, params=params).json()
            # An aggregate without `by` has no pod label: its one series is keyed by "".
            out[name] = _align(parse_series(body, pod_label="__none__"), times, step_s)
        return times, out
    finally:
        if client is None:
            http.close()


def _finite(values: Sequence[float]) -> list[float]:
    return [v for v in values if math.isfinite(v)]


def _quantile(values: Sequence[float], q: float) -> float:
    ordered = sorted(_finite(values))
    if not ordered:
        return math.nan
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


def _mean(values: Sequence[float]) -> float:
    finite = _finite(values)
    return sum(finite) / len(finite) if finite else math.nan


@dataclass(frozen=True)
class Summary:
    """The period in figures."""

    within_slo_share: float
    p99_median_ms: float
    p99_max_ms: float
    rate_mean_per_s: float
    rate_peak_per_s: float
    replicas_min: float
    replicas_max: float
    mean_batch: float
    failures: float
    #: Share of the points at which an SLO alert fired, and when one first did (None: never).
    alert_share: float
    first_alert_s: float | None
    #: Mean time per request by part (ms), weighted by the request rate.
    parts_ms: dict[str, float]
    dominant: str


def summarize(data: ReportData) -> Summary:
    """The period's figures from its series (pure)."""
    s = data.series
    p99 = _finite(s["p99_ms"])
    rates = s["rate_per_s"]
    # Absent means none fired: a point counts as alerting only where the count is positive.
    alerts = [v if math.isfinite(v) else 0.0 for v in s.get("alerts_firing", [math.nan] * len(data.times_s))]
    parts: dict[str, float] = {}
    for part in PARTS:
        pairs = [
            (r, v)
            for r, v in zip(rates, s[f"{part}_ms"], strict=True)
            if math.isfinite(r) and math.isfinite(v)
        ]
        weight = sum(r for r, _ in pairs)
        parts[part] = sum(r * v for r, v in pairs) / weight if weight > 0 else math.nan
    compute = sum(v for k, v in parts.items() if k != "queue" and math.isfinite(v))
    queue = parts["queue"]
    dominant = "-" if not math.isfinite(queue) else "queue" if queue > compute else "compute"
    return Summary(
        within_slo_share=sum(1 for v in p99 if v <= data.slo_ms) / len(p99) if p99 else math.nan,
        p99_median_ms=_quantile(p99, 0.5),
        p99_max_ms=max(p99) if p99 else math.nan,
        rate_mean_per_s=_mean(rates),
        rate_peak_per_s=max(_finite(rates), default=math.nan),
        replicas_min=min(_finite(s["replicas"]), default=math.nan),
        replicas_max=max(_finite(s["replicas"]), default=math.nan),
        mean_batch=_mean(s["mean_batch"]),
        failures=sum(v * data.step_s for v in _finite(s["failures_per_s"])),
        alert_share=sum(1 for v in alerts if v > 0) / len(alerts) if alerts else math.nan,
        first_alert_s=next((t for t, v in zip(data.times_s, alerts, strict=True) if v > 0), None),
        parts_ms=parts,
        dominant=dominant,
    )


def _utc(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _f(value: float, digits: int = 1) -> str:
    return f"{value:.{digits}f}" if math.isfinite(value) else "-"


def _alerts(summary: Summary) -> str:
    if summary.first_alert_s is None:
        return "never"
    return f"{_f(100 * summary.alert_share)}% of the points, first at {_utc(summary.first_alert_s)[11:19]}"


def render_markdown(data: ReportData, summary: Summary, *, png_name: str = "report.png") -> str:
    """The Markdown report (pure)."""
    parts = ", ".join(f"{k.replace('_', ' ')} {_f(v, 2)} ms" for k, v in summary.parts_ms.items())
    lines = [
        f"# TailPilot report: {data.name} in {data.namespace}",
        "",
        f"{_utc(data.start_s)} to {_utc(data.end_s)}, one point every {data.step_s:g} s, from Prometheus "
        "(Triton's per-pod metrics). The P99 is the worst pod's, an upper bound of the service's.",
        "",
        "| | |",
        "|---|---|",
        f"| SLO | P99 <= {data.slo_ms:g} ms |",
        f"| P99 within the SLO | {_f(100 * summary.within_slo_share)}% of the points |",
        f"| P99 median / max | {_f(summary.p99_median_ms)} / {_f(summary.p99_max_ms)} ms |",
        f"| request rate mean / peak | {_f(summary.rate_mean_per_s)} / {_f(summary.rate_peak_per_s)} req/s |",
        f"| replicas min / max | {_f(summary.replicas_min, 0)} / {_f(summary.replicas_max, 0)} |",
        f"| mean executed batch | {_f(summary.mean_batch, 2)} |",
        f"| failed requests | {_f(summary.failures, 0)} |",
        f"| SLO alerts firing | {_alerts(summary)} |",
        f"| mean time per request | {parts} |",
        f"| dominated by | {summary.dominant} |",
        f"| attainment and headroom now | {data.budget_now or 'no decision recorded yet'} |",
        *_unreadable_row(data),
        "",
        f"![{data.name}]({png_name})",
        "",
        *_cold_start_section(data),
        "## Decisions in the period",
        "",
    ]
    if not data.decisions:
        lines.append("None recorded (status.decisions keeps the last ten that changed something).")
    else:
        lines += [
            "| time | action | reason | replicas | max batch | req/s | P99 observed / predicted (ms) |",
            "|---|---|---|---|---|---|---|",
        ]
        for d in data.decisions:
            lines.append(
                f"| {str(d.get('time', ''))[11:19]} | {d.get('action', '')} | {d.get('reason', '')} | "
                f"{d.get('replicasBefore')} -> {d.get('replicasAfter')} | "
                f"{d.get('maxBatchSizeBefore')} -> {d.get('maxBatchSizeAfter')} | "
                f"{d.get('requestRate', '-')} | "
                f"{d.get('observedP99Ms', '-')} / {d.get('predictedP99Ms', '-')} |"
            )
    return "\n".join(lines) + "\n"


def _cold_start_section(data: ReportData) -> list[str]:
    """The last cold start from zero (whenever it was) and where its time went, as a table."""
    cold = data.cold_start
    if cold is None:
        return []
    lines = [
        "## Last cold start",
        "",
        f"{cold_start_summary(cold)}. The parts add up to the total; those beside the pod's "
        "Kubernetes timestamps are exact to about a second.",
        "",
        "| part | seconds | share |",
        "|---|---|---|",
    ]
    lines += [f"| {name} | {seconds:.3f} | {share:.1f}% |" for name, seconds, share in cold_start_parts(cold)]
    return [*lines, f"| total | {cold.total_seconds:.3f} | 100% |", ""]


def _unreadable_row(data: ReportData) -> list[str]:
    if not data.unreadable:
        return []
    return [f"| could not be read | {', '.join(data.unreadable)} (not in the form this tailpilot reads) |"]


def decisions_within(
    status: InferenceServiceStatus | Mapping[str, Any], start_s: float, end_s: float
) -> list[dict[str, Any]]:
    """status.decisions made within [start_s, end_s], as the report holds them (`decision_json`, and `at`).

    `status` is the typed status, or its JSON (read through the codec here; a decision it cannot
    read is left out).
    """
    typed = status if isinstance(status, InferenceServiceStatus) else read_status(status).status
    return [
        {**decision_json(d), "at": d.time.timestamp()}
        for d in typed.decisions
        if start_s <= d.time.timestamp() <= end_s
    ]


_TIME = TypeAdapter(datetime)


def _json_number(value: float | None) -> float | int | None:
    """A float as the API server returns it: an integral one without its fraction (40.0 is 40).

    The API server stores the status as JSON numbers, so the report prints and writes what
    `kubectl get -o json` shows (and what it did before the status was read through the codec,
    which parses every such field as a float).
    """
    if value is not None and value.is_integer() and abs(value) < 1e21:
        return int(value)
    return value


def decision_json(d: DecisionRecordStatus) -> dict[str, Any]:
    """One of status.decisions as report.json and the Markdown hold it: its JSON as the API server returns it.

    Every field by its typed name (a field renamed in the API fails type checking here, not silently
    in the report); the keys sorted, unset ones left out, as the API server returns an object.
    """
    fields: dict[str, Any] = {
        "time": _TIME.dump_python(d.time, mode="json"),
        "action": d.action,
        "reason": d.reason,
        "replicasBefore": d.replicas_before,
        "replicasAfter": d.replicas_after,
        "maxBatchSizeBefore": d.max_batch_size_before,
        "maxBatchSizeAfter": d.max_batch_size_after,
        "requestRate": _json_number(d.request_rate),
        "observedP99Ms": _json_number(d.observed_p99_ms),
        "predictedP99Ms": _json_number(d.predicted_p99_ms),
        "gpuProduct": d.gpu_product,
    }
    return {key: value for key, value in sorted(fields.items()) if value is not None}


def write_report(data: ReportData, out_dir: Path) -> Path:
    """Write report.md, report.png and report.json into `out_dir`; the Markdown's path."""
    from tailpilot.tools.report_plot import plot  # matplotlib: only when a report is written

    out_dir.mkdir(parents=True, exist_ok=True)
    plot(data, out_dir / "report.png")
    (out_dir / "report.json").write_text(json.dumps(data.to_json(), indent=1) + "\n")
    markdown = out_dir / "report.md"
    markdown.write_text(render_markdown(data, summarize(data)))
    return markdown


def build_report(
    obj: Mapping[str, Any],
    prometheus_url: str,
    *,
    start_s: float,
    end_s: float,
    step_s: float,
    client: httpx.Client | None = None,
) -> ReportData:
    """Query Prometheus for the service `obj` over the period."""
    meta, spec = obj.get("metadata") or {}, obj.get("spec") or {}
    read = read_status(obj.get("status"))
    namespace, name = str(meta.get("namespace") or "default"), str(meta.get("name"))
    times, series = fetch_series(
        prometheus_url,
        Selector(namespace=namespace, service=name),
        start_s=start_s,
        end_s=end_s,
        step_s=step_s,
        client=client,
    )
    return ReportData(
        namespace=namespace,
        name=name,
        slo_ms=float((spec.get("slo") or {}).get("p99LatencyMs", math.nan)),
        start_s=start_s,
        end_s=end_s,
        step_s=step_s,
        times_s=times,
        series=series,
        decisions=decisions_within(read.status, start_s, end_s),
        budget_now=budget_words(read),
        unreadable=read.lost("errorBudget", "learned", "decisions", "coldStart"),
        cold_start=read.status.cold_start,
    )


def _duration_s(text: str) -> float:
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400}
    if not text or text[-1] not in units:
        raise argparse.ArgumentTypeError(f"a duration such as 90s, 30m or 2h, not {text!r}")
    return float(text[:-1]) * units[text[-1]]


def report_main(argv: Sequence[str]) -> int:
    """`tailpilot report NAME [-n NS] --prometheus-url URL [--since 30m] [--out DIR]`."""
    parser = argparse.ArgumentParser(
        prog="tailpilot report",
        description="Write a Markdown and PNG report of an InferenceService over a time range.",
    )
    parser.add_argument("name")
    parser.add_argument("-n", "--namespace", default=None, help="default: the kubeconfig context's namespace")
    parser.add_argument("--kubeconfig", default=None, help="default: $KUBECONFIG or ~/.kube/config")
    parser.add_argument(
        "--prometheus-url", required=True, help="the Prometheus that scrapes the service's Triton pods"
    )
    parser.add_argument(
        "--since", type=_duration_s, default=_duration_s("30m"), help="the period, ending now"
    )
    parser.add_argument(
        "--step", type=_duration_s, default=None, help="one point every (default: period / 240)"
    )
    parser.add_argument("--out", type=Path, default=Path("."), help="directory for report.md/.png/.json")
    args = parser.parse_args(list(argv))
    obj = read_service(args.name, namespace=args.namespace, kubeconfig=args.kubeconfig, command="report")
    if obj is None:
        return 1
    end = time.time()
    step = args.step or max(1.0, args.since / 240)
    try:
        data = build_report(obj, args.prometheus_url, start_s=end - args.since, end_s=end, step_s=step)
    except (httpx.HTTPError, ValueError, ObservationError) as error:
        print(f"tailpilot report: Prometheus at {args.prometheus_url}: {error}", file=sys.stderr)
        return 1
    try:
        path = write_report(data, args.out)
    except ImportError as error:  # matplotlib is the `report` extra
        print(f"tailpilot report: {error}; install it with pip install 'tailpilot[report]'", file=sys.stderr)
        return 1
    print(f"wrote {path}, {args.out / 'report.png'} and {args.out / 'report.json'}")
    return 0


__all__ = [
    "PARTS",
    "ReportData",
    "Summary",
    "build_report",
    "decision_json",
    "decisions_within",
    "render_markdown",
    "report_main",
    "series_queries",
    "summarize",
    "write_report",
]
