"""`tailpilot status NAME` (and `kubectl tailpilot status NAME`): one service's state, readable in a terminal.

What the operator decided and why, from the object alone (one GET, no Prometheus): the SLO and the P99
now, the last cold start from zero and where its time went, where requests' time goes, the engine
and its profile against what is observed, the GPU product and precision choices, the recent
decisions and the conditions. `render` is pure (the object's JSON in, text out); `status_main`
reads the object through the current kubeconfig.

The status is read as the operator writes it: through its codec (`decode_status`), once
(`read_status`), then as typed values. What the codec cannot read (a section an older or newer
operator wrote in another form) is named on a line of its own, `Unreadable`, never shown as absent.

As a kubectl plugin: the `kubectl-tailpilot` console script is this same CLI, so `kubectl tailpilot
status NAME -n NAMESPACE` runs it (kubectl finds `kubectl-*` executables on the PATH).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC
from typing import Any, get_origin

from pydantic import BaseModel, ValidationError

from tailpilot.api import constants as c
from tailpilot.api.v1alpha1 import (
    BatchSizeStatus,
    ColdStartStatus,
    Condition,
    InferenceServiceStatus,
    ObservedStatus,
)
from tailpilot.controllers.core import status as codec

# ---- reading the status --------------------------------------------------------------------------


@dataclass(frozen=True)
class StatusRead:
    """An object's status as the operator's codec reads it, and what of it the codec could not read.

    The codec drops a section that does not validate; the tools name it instead (`Unreadable`), so a
    section that could not be read is never taken for one the operator has not written yet.
    """

    status: InferenceServiceStatus
    #: JSON paths of what could not be read: "status.observed", one item of a list
    #: ("status.decisions[2]": the list's other items are kept), or "status" (none of it).
    unreadable: tuple[str, ...] = ()

    def lost(self, *fields: str) -> tuple[str, ...]:
        """The unreadable paths among these status fields (JSON names), in full or in part."""
        wanted = [f"status.{name}" for name in fields]
        return tuple(
            path
            for path in self.unreadable
            if path == "status" or any(path == w or path.startswith(f"{w}[") for w in wanted)
        )


def read_status(raw: object) -> StatusRead:
    """The object's status through the operator's codec, read once (pure; never raises).

    A list section (conditions, decisions) whose items do not all validate keeps those that do.
    """
    if raw is None:
        return StatusRead(InferenceServiceStatus())
    if not isinstance(raw, Mapping):
        return StatusRead(InferenceServiceStatus(), ("status",))
    unreadable: list[str] = []
    kept: dict[str, list[Any]] = {}
    with _codec_quiet():
        try:
            status = codec.decode_status(raw)
            for name, field in InferenceServiceStatus.model_fields.items():
                key = field.alias or name
                value = raw.get(key)
                if value is None or name in status.model_fields_set:
                    continue
                if isinstance(value, list) and get_origin(field.annotation) is list:
                    kept[name] = _readable_items(key, name, value, unreadable)
                else:
                    unreadable.append(f"status.{key}")
        except (ValidationError, TypeError, ValueError):
            return StatusRead(InferenceServiceStatus(), ("status",))
    return StatusRead(status.model_copy(update=kept) if kept else status, tuple(unreadable))


def _readable_items(key: str, name: str, items: list[Any], unreadable: list[str]) -> list[BaseModel]:
    """The items of the list section `key` the codec reads one by one; the others' paths to `unreadable`."""
    readable: list[BaseModel] = []
    for i, item in enumerate(items):
        one = codec.decode_status({key: [item]})
        if name in one.model_fields_set:
            readable += getattr(one, name)
        else:
            unreadable.append(f"status.{key}[{i}]")
    return readable


@contextmanager
def _codec_quiet() -> Iterator[None]:
    """The codec's warning about what it dropped stays unsaid: the tool says it in its own output."""
    was, codec.log.disabled = codec.log.disabled, True
    try:
        yield
    finally:
        codec.log.disabled = was


def _given(section: BaseModel | None) -> bool:
    """A section the status holds with at least one field (an empty object `{}` shows as absent)."""
    return section is not None and bool(section.model_fields_set)


# ---- rendering -----------------------------------------------------------------------------------


def _ms(value: float | None) -> str:
    return f"{float(value):.1f} ms" if isinstance(value, int | float) else "-"


def _part_ms(value: float | None) -> str:
    # Compute input and output often take tens of microseconds: one decimal would show 0.0 ms.
    if isinstance(value, int | float) and abs(value) < 1:
        return f"{float(value):.2f} ms"
    return _ms(value)


def _num(value: float | None, unit: str = "", digits: int = 1) -> str:
    return f"{float(value):.{digits}f}{unit}" if isinstance(value, int | float) else "-"


def _or(value: object, absent: str) -> object:
    """`value`, or what the raw JSON's `.get(key, absent)` gave for a field the status leaves out."""
    return absent if value is None else value


def _condition(status: InferenceServiceStatus, type_: str) -> Condition | None:
    return next((x for x in status.conditions if x.type == type_), None)


def _unreadable(read: StatusRead) -> list[str]:
    if not read.unreadable:
        return []
    return [
        f"Unreadable  {', '.join(read.unreadable)}: could not be read, not in the form this tailpilot "
        "reads (kubectl get -o yaml shows it as written)"
    ]


def _serving(read: StatusRead) -> list[str]:
    status = read.status
    engine, batching = status.engine, status.batching
    if engine is None:
        if read.lost("engine"):
            return ["Serving     unknown: status.engine could not be read"]
        return ["Serving     no engine yet"]
    line = (
        f"Serving     engine {engine.key[:12]} ({engine.triton_backend or '?'}), "
        f"{_or(status.ready_replicas, '0')}/{_or(status.replicas, '0')} replicas ready"
    )
    if batching is not None:
        line += (
            f", max batch {batching.max_batch_size}, queue delay "
            f"{batching.max_queue_delay_microseconds} us, {batching.instances_per_replica} "
            "instance(s) per replica"
        )
    if status.scaled_to_zero_at is not None:
        return [
            line,
            f"Zero        scaled to zero at {status.scaled_to_zero_at.isoformat()}: its Service routes to "
            "the activator, which holds requests and wakes it",
        ]
    return [line]


def cold_start_parts(cold: ColdStartStatus) -> list[tuple[str, float, float]]:
    """Each part of a cold start: its name, seconds and share of the total (%), in order.

    `tailpilot status` and `tailpilot report` both show them so.
    """
    total = cold.total_seconds
    return [(p.name, p.seconds, 100 * p.seconds / total if total > 0 else 0.0) for p in cold.parts]


def cold_start_summary(cold: ColdStartStatus) -> str:
    """The last cold start in one line: when its first request was held, the total, the pod read."""
    held = cold.held_at.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]
    pod = f"pod {cold.pod}" if cold.pod else "no serving pod found"
    return f"{cold.total_seconds:.3f} s from the first request held ({held} UTC) to its answer; {pod}"


def _cold_start(read: StatusRead) -> list[str]:
    """The last cold start from zero and its parts, one per line (nothing before the first)."""
    cold = read.status.cold_start
    if cold is None:
        lost = read.lost("coldStart")
        return [f"Cold start  unknown: {lost[0]} could not be read"] if lost else []
    lines = [f"Cold start  {cold_start_summary(cold)}"]
    for name, seconds, share in cold_start_parts(cold):
        lines.append(f"  {name:<26} {seconds:9.3f} s {share:5.1f}%")
    return lines


def _observed(spec: Mapping[str, Any], read: StatusRead) -> list[str]:
    status = read.status
    observed = status.observed or ObservedStatus()
    slo = (spec.get("slo") or {}).get("p99LatencyMs")
    met = _condition(status, c.CONDITION_SLO_MET)
    lines = [
        f"Now         P99 {_ms(observed.p99_ms)} against the SLO's {_ms(slo)}"
        f" ({met.status if met else '?'}: {met.reason if met else '-'}), "
        f"{_num(observed.request_rate, ' req/s')}, "
        f"{_num(observed.queue_depth, ' queued per replica')}, predicted P99 "
        f"{_ms(status.predicted_p99_ms)}"
    ]
    if observed.queue_time_ms is not None or observed.server_time_ms is not None:
        lines.append(
            f"Time        queue {_ms(observed.queue_time_ms)}, "
            f"server {_ms(observed.server_time_ms)} (compute {_ms(observed.compute_time_ms)}), "
            f"mean batch {_num(observed.mean_batch_size)}"
            f": {observed.time_dominated_by or '?'} dominates"
        )
    lines += _parts(observed, _condition(status, c.CONDITION_LATENCY_BREAKDOWN))
    lines += _batch_sizes(observed.batch_sizes or [])
    lines += _budget(read)
    return lines


def budget_words(read: StatusRead) -> str | None:
    """The attainment objective, its error budget and the headroom it holds (None before the first decision).

    `tailpilot status` and `tailpilot report` both say it in these words; an error budget the codec
    could not read is said to be so.
    """
    budget, learned = read.status.error_budget, read.status.learned
    if budget is None:
        lost = read.lost("errorBudget")
        return f"{lost[0]} could not be read" if lost else None
    measured, missed = budget.measured_seconds, budget.missed_seconds
    met = f"{100 * (1 - missed / measured):.2f}% met" if measured else "nothing measured yet"
    if learned is None and read.lost("learned"):
        headroom = "headroom unknown (status.learned could not be read)"
    else:
        headroom = (
            f"headroom x{_num((learned.headroom if learned else None) or 1.0, '', 2)} over the arrivals"
        )
    return (
        f"objective {_num(budget.objective_percent, '%', 2)} over "
        f"{budget.compliance_period_hours} h: {met} in {measured / 3600:.1f} h measured, "
        f"{_num(budget.remaining_percent, '%')} of the budget left; {headroom}"
    )


def _budget(read: StatusRead) -> list[str]:
    words = budget_words(read)
    return [f"Budget      {words}"] if words else []


def _batch_sizes(sizes: Sequence[BatchSizeStatus]) -> list[str]:
    """The executed batch sizes on one line: size x executions (share of requests), ascending."""
    if not sizes:
        return []
    shown = []
    for i, entry in enumerate(sizes):
        size = f"{entry.size}-{entry.max_size}" if entry.max_size else f"{entry.size}"
        share = _num(100 * entry.request_share, "%", 0)
        took = f", {_ms(entry.compute_ms)} each" if entry.compute_ms is not None else ""
        shown.append(f"{size} x {entry.executions} ({share}{' of requests' if i == 0 else ''}{took})")
    return [f"Batch sizes {', '.join(shown)}"]


def _parts(observed: ObservedStatus, breakdown: Condition | None) -> list[str]:
    """The server time's compute parts, the queue's and compute's P99s, and the largest part."""
    compute = [
        f"{label} {_part_ms(value)}"
        for label, value in (
            ("compute input", observed.compute_input_time_ms),
            ("compute infer", observed.compute_time_ms),
            ("compute output", observed.compute_output_time_ms),
        )
    ]
    tails = [
        f"{label} {_part_ms(value)}"
        for label, value in (
            ("queue", observed.queue_time_p99_ms),
            ("compute infer", observed.compute_time_p99_ms),
        )
        if value is not None
    ]
    shown = observed.compute_input_time_ms is not None or observed.compute_output_time_ms is not None
    lines = [f"Parts       {', '.join(compute)}"] if shown else []
    if tails:
        lines.append(f"Tails       P99 {', '.join(tails)}")
    if observed.client_p99_ms is not None:
        lines.append(
            f"Clients     P99 {_part_ms(observed.client_p99_ms)}, outside the server "
            f"{_part_ms(observed.outside_server_p99_ms)} (the clients' P99 less the server's)"
        )
    if breakdown is not None:
        lines.append(f"Largest     {breakdown.reason} ({breakdown.status}): {breakdown.message}")
    return lines


def _profile(read: StatusRead) -> list[str]:
    profile, learned = read.status.profile, read.status.learned
    if profile is None:
        if read.lost("profile"):
            return ["Profile     unknown: status.profile could not be read"]
        fit = learned.service_time if learned else None
        if fit is not None:
            return [
                f"Profile     none; learned online: {_ms(fit.intercept_ms)} + {_ms(fit.per_item_ms)} x batch"
            ]
        return ["Profile     none yet"]
    fit = profile.service_time
    line = (
        f"Profile     {_ms(fit.intercept_ms)} + {_ms(fit.per_item_ms)} x batch per batch, "
        f"measured on {profile.hardware}"
    )
    scale = learned.service_time_scale if learned else None
    if scale is not None and abs(scale - 1) > 0.1:
        line += f"; the serving pods compute x{scale:.2f} of it"
    slope = learned.service_time_slope_scale if learned else None
    if slope is not None and abs(slope - 1) > 0.1:
        line += f"; each item costs x{slope:.2f} of the profile's slope"
    return [line]


def _choices(status: InferenceServiceStatus) -> list[str]:
    lines = []
    gpu = status.gpu
    if gpu is not None and _given(gpu):
        lines.append(f"GPU         {gpu.product or 'not placed'} ({gpu.reason}): {gpu.message}")
        for x in gpu.candidates:
            lines.append(
                f"  {x.product:<26} {x.phase:<10} "
                f"${_num(x.price_per_hour, '/GPU-h', 2)}, "
                f"{_num(x.capacity_per_replica_per_s, ' req/s')} "
                f"per replica, needs {_or(x.replicas_needed, '-')}, ${_num(x.cost_per_hour, '/h', 2)}"
            )
    precision = status.precision
    if precision is not None and _given(precision):
        lines.append(
            f"Precision   {precision.precision or 'not chosen'} ({precision.reason}): {precision.message}"
        )
    canary = status.canary
    if canary is not None:
        lines.append(
            f"Canary      engine {canary.engine.key[:12]} {canary.phase} ({canary.reason}), "
            f"{canary.replicas} replica(s), {_num(canary.traffic_percent, '%')} of requests"
        )
        for side, track in (("candidate", canary.candidate), ("stable", canary.stable)):
            if track is not None:
                lines.append(
                    f"  {side:<10} P99 {_ms(track.p99_ms)}, {track.requests} requests, "
                    f"{track.failures} failed, {track.pods} pod(s)"
                )
    return lines


def _decisions(status: InferenceServiceStatus) -> list[str]:
    decisions = status.decisions
    if not decisions:
        last = status.last_decision
        if last is None:
            return ["Decision    - (-): "]
        return [f"Decision    {last.action} ({last.reason}): {last.message}"]
    lines = [f"Decisions   the last {len(decisions)}, oldest first"]
    for d in decisions:
        moved = f" -> {d.gpu_product}" if d.gpu_product else ""
        lines.append(
            f"  {d.time:%H:%M:%S}  {d.action:<14} {d.reason:<22} replicas "
            f"{d.replicas_before}->{d.replicas_after}, batch {d.max_batch_size_before}->"
            f"{d.max_batch_size_after}{moved}; {_num(d.request_rate, ' req/s')}, P99 "
            f"{_ms(d.observed_p99_ms)} (predicted {_ms(d.predicted_p99_ms)})"
        )
    return lines


def render(obj: Mapping[str, Any]) -> str:
    """The service's state in words and figures (pure): the status read once, through the codec."""
    meta, spec = obj.get("metadata") or {}, obj.get("spec") or {}
    read = read_status(obj.get("status"))
    status = read.status
    ready = _condition(status, c.CONDITION_READY)
    lines = [
        f"{meta.get('name', '?')} in {meta.get('namespace', 'default')}: "
        f"Ready {ready.status if ready else 'Unknown'}"
        f" ({ready.reason if ready else '-'}){': ' + ready.message if ready and ready.message else ''}",
        *_unreadable(read),
        *_serving(read),
        *_cold_start(read),
        *_observed(spec, read),
        *_profile(read),
        *_choices(status),
        *_decisions(status),
        "Conditions",
    ]
    for cond in status.conditions:
        lines.append(f"  {cond.type:<18} {cond.status:<8} {cond.reason:<24} {cond.message}"[:240])
    return "\n".join(printable(line) for line in lines) + "\n"


def printable(text: str) -> str:
    r"""`text` with every control character shown as an escape (\x1b, \n), never sent to the terminal.

    Status messages carry what a tenant, a pod or Prometheus wrote; an escape sequence among them
    would otherwise move the cursor, retitle the window or hide lines of whoever runs the command.
    """
    return "".join(ch if ch.isprintable() else ch.encode("unicode_escape").decode("ascii") for ch in text)


def read_service(
    name: str, *, namespace: str | None, kubeconfig: str | None, command: str
) -> dict[str, Any] | None:
    """The InferenceService through the kubeconfig (its context's namespace by default), or None (said)."""
    from kubernetes import client, config
    from kubernetes.client.exceptions import ApiException

    from tailpilot.controllers.core.kubeapi import ISVC, Kube

    configuration = client.Configuration()
    config.load_kube_config(config_file=kubeconfig, client_configuration=configuration)  # type: ignore[no-untyped-call]
    if namespace is None:
        _, context = config.list_kube_config_contexts(config_file=kubeconfig)  # type: ignore[no-untyped-call]
        namespace = (context or {}).get("context", {}).get("namespace") or "default"
    # One attempt without a time bound, as kubectl's own reads: a person waits for the answer, or
    # stops the command, rather than the operator's repeats of what the API server turned away.
    kube = Kube(client.ApiClient(configuration), connect_timeout_s=None, read_timeout_s=None, attempts=1)
    try:
        obj = kube.get(ISVC, namespace, name)
    except ApiException as error:
        print(f"tailpilot {command}: {name} in {namespace}: {error.reason} ({error.status})", file=sys.stderr)
        return None
    if obj is None:  # `Kube.get` answers a 404 so; said as the API server's answer was before
        print(f"tailpilot {command}: {name} in {namespace}: Not Found (404)", file=sys.stderr)
    return obj


def status_main(argv: Sequence[str]) -> int:
    """`tailpilot status NAME [-n NAMESPACE] [--kubeconfig PATH]`."""
    parser = argparse.ArgumentParser(prog="tailpilot status", description="Show an InferenceService's state.")
    parser.add_argument("name")
    parser.add_argument("-n", "--namespace", default=None, help="default: the kubeconfig context's namespace")
    parser.add_argument("--kubeconfig", default=None, help="default: $KUBECONFIG or ~/.kube/config")
    args = parser.parse_args(list(argv))
    obj = read_service(args.name, namespace=args.namespace, kubeconfig=args.kubeconfig, command="status")
    if obj is None:
        return 1
    sys.stdout.write(render(obj))
    return 0
