"""The executed batch-size distribution over the evaluation window (pure).

Triton's metrics page counts executions (`nv_inference_exec_count`) but not per batch size; its
statistics extension (`GET /v2/models/<model>/stats`) does: `batch_stats[]` holds, per version, each
batch size executed and the cumulative count of executions at it (`compute_infer.count`). The fast
loop's reader (`tailpilot.controllers.signals.pod_signals`) reads those every `BATCH_STATS_PERIOD_S` and
keeps each pod's counts, summed over versions, on its `PodRead`; this module turns them into
executions per size over the window.

Each size also carries the compute time of its executions (`compute_infer.ns` of the same entry),
so the window gives the mean time of one batch of each size executed: the points the policy's
hardware-speed learning fits (`tailpilot.policy.speed`).

Per pod, the counts grow between two reads: the base is the pod's newest read carrying counts at or
before the window's start, else its oldest after it (the rates' rule, `signals._pod_reads`), the end
its newest read carrying counts. A pod restarted in between (a size's count went down) contributes
its newest counts alone: all of them were executed since the restart, inside the span. A pod with
one read carrying counts contributes nothing yet. The pods are summed; each size's request share
is size x executions over the sum of size x executions (Triton's batch size counts inferences, so a
request carrying several items counts each).

The status bounds the list (`bounded`, `MAX_OBSERVED_BATCH_SIZES`): beyond it, the largest sizes
are merged into the last entry, which then says the sizes it holds (`max_size`), so the totals and
shares stay whole.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from tailpilot.api.autoscaling import ExecutedBatchSize
from tailpilot.api.v1alpha1 import MAX_OBSERVED_BATCH_SIZES


@dataclass(frozen=True, slots=True)
class SizeCounts:
    """One batch size's cumulative figures on a pod: executions, and the compute time they took (us)."""

    executions: int
    compute_us: float = 0.0


#: Batch size -> cumulative figures at that size (one pod, every version of the model).
BatchCounts = Mapping[int, SizeCounts]
_NONE = SizeCounts(0)


def grown(newest: BatchCounts, base: BatchCounts) -> dict[int, SizeCounts]:
    """What each size added between two reads of a pod's counts (a count that went down: a restart)."""
    if any(newest.get(size, _NONE).executions < was.executions for size, was in base.items()):
        return {size: now for size, now in newest.items() if now.executions > 0}
    out = {}
    for size, now in newest.items():
        was = base.get(size, _NONE)
        if now.executions > was.executions:
            out[size] = SizeCounts(now.executions - was.executions, max(0.0, now.compute_us - was.compute_us))
    return out


def _span(
    reads: Sequence[tuple[float, BatchCounts]], since_s: float
) -> tuple[float, BatchCounts, float, BatchCounts] | None:
    """(base time, base counts, newest time, newest counts) of a pod's reads, oldest first; None: one read."""
    if len(reads) < 2:
        return None
    base = reads[0]
    for read in reads:
        if read[0] > since_s:
            break
        base = read
    newest = reads[-1]
    if newest[0] <= base[0]:
        return None
    return base[0], base[1], newest[0], newest[1]


def executed_batch_sizes(
    pods: Mapping[str, Sequence[tuple[float, BatchCounts]]], *, since_s: float
) -> tuple[ExecutedBatchSize, ...] | None:
    """Executions per batch size since `since_s`, summed across pods, ascending by size.

    `pods`: each pod's (time, counts) reads, oldest first. None when no pod was read twice; an empty
    tuple when the pods executed nothing over the window.
    """
    executions: dict[int, int] = {}
    compute_us: dict[int, float] = {}
    per_s: dict[int, float] = {}
    measured = False
    for reads in pods.values():
        span = _span(reads, since_s)
        if span is None:
            continue
        measured = True
        base_s, base, newest_s, newest = span
        for size, added in grown(newest, base).items():
            executions[size] = executions.get(size, 0) + added.executions
            compute_us[size] = compute_us.get(size, 0.0) + added.compute_us
            per_s[size] = per_s.get(size, 0.0) + added.executions / (newest_s - base_s)
    if not measured:
        return None
    items = sum(size * count for size, count in executions.items())
    return tuple(
        ExecutedBatchSize(
            size=size,
            executions=executions[size],
            executions_per_s=per_s[size],
            request_share=min(1.0, size * executions[size] / items),
            compute_ms=compute_us[size] / executions[size] / 1000.0 if compute_us[size] > 0 else None,
        )
        for size in sorted(executions)
    )


def bounded(
    sizes: Sequence[ExecutedBatchSize], *, limit: int = MAX_OBSERVED_BATCH_SIZES
) -> tuple[ExecutedBatchSize, ...]:
    """At most `limit` entries: the smallest sizes as they are, the largest merged into the last one.

    The merged entry has the smallest merged size as `size`, the largest as `max_size`, and the
    merged executions, executions per second and request shares summed.
    """
    if len(sizes) <= limit:
        return tuple(sizes)
    kept, merged = sizes[: limit - 1], sizes[limit - 1 :]
    last = ExecutedBatchSize(
        size=merged[0].size,
        max_size=merged[-1].max_size or merged[-1].size,
        executions=sum(s.executions for s in merged),
        executions_per_s=sum(s.executions_per_s for s in merged),
        request_share=min(1.0, sum(s.request_share for s in merged)),
        compute_ms=_mean_compute_ms(merged),
    )
    return (*kept, last)


def _mean_compute_ms(sizes: Sequence[ExecutedBatchSize]) -> float | None:
    """The mean compute time of one execution over these sizes' executions (those that carry one)."""
    timed = [(s.executions, s.compute_ms) for s in sizes if s.compute_ms is not None and s.executions > 0]
    executions = sum(n for n, _ in timed)
    return sum(n * ms for n, ms in timed) / executions if executions else None
