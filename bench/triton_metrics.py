"""Triton's metrics page, statistics answer and Prometheus' latency answer for simulated pods.

What a real Triton serves on :8002/metrics (the counters and gauge the operator reads, in the
Prometheus text exposition format) and on :8000/v2/models/M/stats (executions and compute time per
batch size), and what a real Prometheus answers to the operator's latency
query (`tailpilot.controllers.signals.observe.latency_query`), built from the simulator's values. Used where
the operator's own I/O code must read the simulated fleet: the observation-parity test (and any
local endpoint that plays Triton for simulated pods).

Values are written with `repr`, so a parser reads back exactly the float that was written.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tailpilot.api import constants as c
from tailpilot.controllers.signals.observe import LATENCY_SUMMARY, PENDING_GAUGE
from tailpilot.controllers.signals.pod_signals import FIELD_OF_METRIC
from tailpilot.policy.batch_sizes import BatchCounts
from tailpilot.policy.signals import PodLatency, TritonCounters


def metrics_page(
    counters: TritonCounters, *, model: str, version: str = "1", latency: PodLatency | None = None
) -> str:
    """Triton's metrics page for one pod serving `model`, with its latency summary when given."""
    labels = f'model="{model}",version="{version}"'
    lines = []
    # Exactly the metrics the operator's reader parses, so the two cannot drift apart.
    for metric, field in FIELD_OF_METRIC.items():
        kind = "gauge" if metric == PENDING_GAUGE else "counter"
        lines += [
            f"# HELP {metric} Triton's {field.replace('_', ' ')}",
            f"# TYPE {metric} {kind}",
            f"{metric}{{{labels}}} {getattr(counters, field)!r}",
        ]
    if latency is not None:
        # What Prometheus scrapes for the operator's latency query (Triton's summary metric).
        points = [*latency.quantiles_us, *([(0.99, latency.p99_us)] if latency.p99_us is not None else [])]
        lines += [f"# HELP {LATENCY_SUMMARY} Triton's request latency", f"# TYPE {LATENCY_SUMMARY} summary"]
        lines += [f'{LATENCY_SUMMARY}{{{labels},quantile="{q!r}"}} {v!r}' for q, v in sorted(points)]
        lines += [
            f"{LATENCY_SUMMARY}_count{{{labels}}} {counters.success!r}",
            f"{LATENCY_SUMMARY}_sum{{{labels}}} {counters.request_duration_us!r}",
        ]
    return "\n".join(lines) + "\n"


def stats_answer(batches: BatchCounts, *, model: str, version: str = "1") -> dict[str, Any]:
    """Triton's answer to `GET /v2/models/<model>/stats` for one pod: its figures per batch size.

    Triton counts time in integer nanoseconds; the simulator's figures are whole nanoseconds too, so
    the reader's conversion gives back exactly the microseconds it holds.
    """

    def timing(count: int, ns: float) -> dict[str, int]:
        return {"count": count, "ns": round(ns)}

    return {
        "model_stats": [
            {
                "name": model,
                "version": version,
                "batch_stats": [
                    {
                        "batch_size": size,
                        "compute_input": timing(figures.executions, 0),
                        "compute_infer": timing(figures.executions, figures.compute_us * 1000.0),
                        "compute_output": timing(figures.executions, 0),
                    }
                    for size, figures in sorted(batches.items())
                ],
            }
        ]
    }


def latency_answer(
    latency: Mapping[tuple[str, str], Mapping[str, PodLatency]], *, at_s: float
) -> dict[str, Any]:
    """Prometheus' JSON answer to the latency query: (namespace, service) -> pod -> summary."""
    result = []
    for (namespace, service), pods in latency.items():
        for pod, summary in pods.items():
            quantiles = list(summary.quantiles_us)
            if summary.p99_us is not None:
                quantiles.append((0.99, summary.p99_us))
            for q, value in quantiles:
                labels = {
                    c.METRIC_LABEL_NAMESPACE: namespace,
                    c.METRIC_LABEL_ISVC: service,
                    "pod": pod,
                    "quantile": repr(q),
                }
                result.append({"metric": labels, "value": [at_s, repr(value)]})
    return {"status": "success", "data": {"resultType": "vector", "result": result}}
