"""The report's figure: P99 against the SLO, rate, replicas, time breakdown, batching, decisions marked.

matplotlib is imported here only (the operator never loads it). Each series has a fixed colour
(`COLOURS`), so a reader, and a test opening the PNG, can find it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path

from tailpilot.tools.report_data import PARTS, ReportData

#: Series -> its colour in the figure (RGB hex).
COLOURS: Mapping[str, str] = {
    "p99_ms": "#1f77b4",
    "slo": "#d62728",
    "rate_per_s": "#2ca02c",
    "replicas": "#9467bd",
    "queue_ms": "#ff7f0e",
    "compute_input_ms": "#8c564b",
    "compute_infer_ms": "#17becf",
    "compute_output_ms": "#bcbd22",
    "mean_batch": "#e377c2",
    "alerts_firing": "#f4cccc",
}


def plot(data: ReportData, path: Path) -> None:
    """Write the figure of `data` to `path` (PNG)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t = [x - data.start_s for x in data.times_s]
    s = data.series
    fig, axes = plt.subplots(5, 1, figsize=(10, 12), sharex=True)
    p99, rate, replicas, parts, batch = axes
    p99.plot(t, s["p99_ms"], color=COLOURS["p99_ms"], linewidth=2, label="P99 (worst pod)")
    p99.axhline(data.slo_ms, color=COLOURS["slo"], linestyle="--", linewidth=2, label="SLO")
    firing = [t[i] for i, v in enumerate(s.get("alerts_firing", [])) if math.isfinite(v) and v > 0]
    for i, start in enumerate(firing):  # a band per point at which an SLO alert fired, behind the lines
        p99.axvspan(
            start,
            start + data.step_s,
            color=COLOURS["alerts_firing"],
            zorder=0,
            linewidth=0,
            label="SLO alert firing" if i == 0 else None,
        )
    p99.set_ylabel("ms")
    p99.legend(loc="upper left")
    rate.plot(t, s["rate_per_s"], color=COLOURS["rate_per_s"], linewidth=2, label="answered")
    rate.set_ylabel("req/s")
    rate.legend(loc="upper left")
    replicas.step(
        t, s["replicas"], where="post", color=COLOURS["replicas"], linewidth=2, label="serving pods"
    )
    replicas.set_ylabel("replicas")
    replicas.legend(loc="upper left")
    stacked = [[v if math.isfinite(v) else 0.0 for v in s[f"{part}_ms"]] for part in PARTS]
    parts.stackplot(
        t,
        *stacked,
        colors=[COLOURS[f"{part}_ms"] for part in PARTS],
        labels=[part.replace("_", " ") for part in PARTS],
    )
    parts.set_ylabel("ms per request")
    parts.legend(loc="upper left", fontsize=8)
    batch.plot(t, s["mean_batch"], color=COLOURS["mean_batch"], linewidth=2, label="mean executed batch")
    batch.set_ylabel("batch")
    batch.set_xlabel(f"seconds from {data.start_s:.0f} (Unix time)")
    batch.legend(loc="upper left")
    for decision in data.decisions:  # every decision on every panel, named on the first
        at = float(decision["at"]) - data.start_s
        for ax in axes:
            ax.axvline(at, color="grey", linestyle=":", linewidth=1)
        p99.annotate(
            f"{decision.get('action', '')} {decision.get('replicasBefore')}->{decision.get('replicasAfter')}",
            (at, 0.98),
            xycoords=("data", "axes fraction"),
            rotation=90,
            fontsize=7,
            va="top",
        )
    fig.suptitle(f"{data.name} in {data.namespace}")
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)
