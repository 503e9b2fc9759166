"""`tailpilot status NAME` (and `kubectl tailpilot status NAME`): one service's state, readable in a terminal.

What the operator decided and why, from the object alone (one GET, no Prometheus): the SLO and the P99
now, where requests' time goes, the engine and its profile against what is observed, the GPU product
and precision choices, the recent decisions and the conditions. `render` is pure (the object's JSON
in, text out); `status_main` reads the object through the current kubeconfig.

As a kubectl plugin: the `kubectl-tailpilot` console script is this same CLI, so `kubectl tailpilot
status NAME -n NAMESPACE` runs it (kubectl finds `kubectl-*` executables on the PATH).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from tailpilot.api import constants as c


def _ms(value: Any) -> str:
    return f"{float(value):.1f} ms" if isinstance(value, int | float) else "-"


def _part_ms(value: Any) -> str:
    # Compute input and output often take tens of microseconds: one decimal would show 0.0 ms.
    if isinstance(value, int | float) and abs(value) < 1:
        return f"{float(value):.2f} ms"
    return _ms(value)


def _num(value: Any, unit: str = "", digits: int = 1) -> str:
    return f"{float(value):.{digits}f}{unit}" if isinstance(value, int | float) else "-"


def _condition(status: dict[str, Any], type_: str) -> dict[str, Any]:
    return next((x for x in status.get("conditions") or [] if x.get("type") == type_), {})


def _serving(status: dict[str, Any]) -> list[str]:
    engine, batching = status.get("engine") or {}, status.get("batching") or {}
    if not engine:
        return ["Serving     no engine yet"]
    line = (
        f"Serving     engine {str(engine.get('key', ''))[:12]} ({engine.get('tritonBackend') or '?'}), "
        f"{status.get('readyReplicas', 0)}/{status.get('replicas', 0)} replicas ready"
    )
    if batching:
        line += (
            f", max batch {batching.get('maxBatchSize')}, queue delay "
            f"{batching.get('maxQueueDelayMicroseconds')} us, {batching.get('instancesPerReplica', 1)} "
            "instance(s) per replica"
        )
    return [line]


def _observed(spec: dict[str, Any], status: dict[str, Any]) -> list[str]:
    observed = status.get("observed") or {}
    slo = (spec.get("slo") or {}).get("p99LatencyMs")
    met = _condition(status, c.CONDITION_SLO_MET)
    lines = [
        f"Now         P99 {_ms(observed.get('p99Ms'))} against the SLO's {_ms(slo)}"
        f" ({met.get('status', '?')}: {met.get('reason', '-')}), "
        f"{_num(observed.get('requestRate'), ' req/s')}, "
        f"{_num(observed.get('queueDepth'), ' queued per replica')}, predicted P99 "
        f"{_ms(status.get('predictedP99Ms'))}"
    ]
    if observed.get("queueTimeMs") is not None or observed.get("serverTimeMs") is not None:
        lines.append(
            f"Time        queue {_ms(observed.get('queueTimeMs'))}, "
            f"server {_ms(observed.get('serverTimeMs'))} (compute {_ms(observed.get('computeTimeMs'))}), "
            f"mean batch {_num(observed.get('meanBatchSize'))}"
            f": {observed.get('timeDominatedBy') or '?'} dominates"
        )
    lines += _parts(observed, _condition(status, c.CONDITION_LATENCY_BREAKDOWN))
    lines += _batch_sizes(observed)
    lines += _budget(status)
    return lines


def budget_words(status: Mapping[str, Any]) -> str | None:
    """The attainment objective, its error budget and the headroom it holds (None before the first decision).

    `tailpilot status` and `tailpilot report` both say it in these words.
    """
    budget, learned = status.get("errorBudget") or {}, status.get("learned") or {}
    if not budget:
        return None
    measured, missed = budget.get("measuredSeconds") or 0, budget.get("missedSeconds") or 0
    met = f"{100 * (1 - missed / measured):.2f}% met" if measured else "nothing measured yet"
    return (
        f"objective {_num(budget.get('objectivePercent'), '%', 2)} over "
        f"{budget.get('compliancePeriodHours', '?')} h: {met} in {measured / 3600:.1f} h measured, "
        f"{_num(budget.get('remainingPercent'), '%')} of the budget left; headroom "
        f"x{_num(learned.get('headroom') or 1.0, '', 2)} over the arrivals"
    )


def _budget(status: dict[str, Any]) -> list[str]:
    words = budget_words(status)
    return [f"Budget      {words}"] if words else []


def _batch_sizes(observed: dict[str, Any]) -> list[str]:
    """The executed batch sizes on one line: size x executions (share of requests), ascending."""
    sizes = [entry for entry in observed.get("batchSizes") or () if isinstance(entry, dict)]
    if not sizes:
        return []
    shown = []
    for i, entry in enumerate(sizes):
        size = f"{entry.get('size')}-{entry['maxSize']}" if entry.get("maxSize") else f"{entry.get('size')}"
        share_of = entry.get("requestShare")
        share = _num(100 * share_of if isinstance(share_of, int | float) else None, "%", 0)
        compute = entry.get("computeMs")
        took = f", {_ms(compute)} each" if isinstance(compute, int | float) else ""
        shown.append(
            f"{size} x {entry.get('executions', '?')} ({share}{' of requests' if i == 0 else ''}{took})"
        )
    return [f"Batch sizes {', '.join(shown)}"]


def _parts(observed: dict[str, Any], breakdown: dict[str, Any]) -> list[str]:
    """The server time's compute parts, the queue's and compute's P99s, and the largest part."""
    compute = [
        f"{label} {_part_ms(observed.get(key))}"
        for label, key in (
            ("compute input", "computeInputTimeMs"),
            ("compute infer", "computeTimeMs"),
            ("compute output", "computeOutputTimeMs"),
        )
    ]
    tails = [
        f"{label} {_part_ms(observed.get(key))}"
        for label, key in (("queue", "queueTimeP99Ms"), ("compute infer", "computeTimeP99Ms"))
        if observed.get(key) is not None
    ]
    shown = observed.get("computeInputTimeMs") is not None or observed.get("computeOutputTimeMs") is not None
    lines = [f"Parts       {', '.join(compute)}"] if shown else []
    if tails:
        lines.append(f"Tails       P99 {', '.join(tails)}")
    if observed.get("clientP99Ms") is not None:
        lines.append(
            f"Clients     P99 {_part_ms(observed.get('clientP99Ms'))}, outside the server "
            f"{_part_ms(observed.get('outsideServerP99Ms'))} (the clients' P99 less the server's)"
        )
    if breakdown:
        lines.append(
            f"Largest     {breakdown.get('reason', '-')} ({breakdown.get('status', '?')}): "
            f"{breakdown.get('message', '')}"
        )
    return lines


def _profile(status: dict[str, Any]) -> list[str]:
    profile, learned = status.get("profile") or {}, status.get("learned") or {}
    if not profile:
        fit = learned.get("serviceTime") or {}
        if fit:
            return [
                f"Profile     none; learned online: {_ms(fit.get('interceptMs'))} + "
                f"{_ms(fit.get('perItemMs'))} x batch"
            ]
        return ["Profile     none yet"]
    fit = profile.get("serviceTime") or {}
    line = (
        f"Profile     {_ms(fit.get('interceptMs'))} + {_ms(fit.get('perItemMs'))} x batch per batch, "
        f"measured on {profile.get('hardware', '?')}"
    )
    scale = learned.get("serviceTimeScale")
    if isinstance(scale, int | float) and abs(scale - 1) > 0.1:
        line += f"; the serving pods compute x{scale:.2f} of it"
    slope = learned.get("serviceTimeSlopeScale")
    if isinstance(slope, int | float) and abs(slope - 1) > 0.1:
        line += f"; each item costs x{slope:.2f} of the profile's slope"
    return [line]


def _choices(status: dict[str, Any]) -> list[str]:
    lines = []
    gpu = status.get("gpu")
    if gpu:
        lines.append(
            f"GPU         {gpu.get('product') or 'not placed'} ({gpu.get('reason', '')}): "
            f"{gpu.get('message', '')}"
        )
        for x in gpu.get("candidates") or []:
            lines.append(
                f"  {x.get('product', ''):<26} {x.get('phase', ''):<10} "
                f"${_num(x.get('pricePerHour'), '/GPU-h', 2)}, "
                f"{_num(x.get('capacityPerReplicaPerS'), ' req/s')} "
                f"per replica, needs {x.get('replicasNeeded', '-')}, ${_num(x.get('costPerHour'), '/h', 2)}"
            )
    precision = status.get("precision")
    if precision:
        lines.append(
            f"Precision   {precision.get('precision') or 'not chosen'} ({precision.get('reason', '')}): "
            f"{precision.get('message', '')}"
        )
    canary = status.get("canary")
    if canary:
        engine = (canary.get("engine") or {}).get("key", "")[:12]
        lines.append(
            f"Canary      engine {engine} {canary.get('phase', '')} ({canary.get('reason', '')}), "
            f"{canary.get('replicas', '-')} replica(s), {_num(canary.get('trafficPercent'), '%')} of requests"
        )
        for side in ("candidate", "stable"):
            track = canary.get(side) or {}
            if track:
                lines.append(
                    f"  {side:<10} P99 {_ms(track.get('p99Ms'))}, {track.get('requests', 0)} requests, "
                    f"{track.get('failures', 0)} failed, {track.get('pods', 0)} pod(s)"
                )
    return lines


def _decisions(status: dict[str, Any]) -> list[str]:
    decisions = status.get("decisions") or []
    if not decisions:
        last = status.get("lastDecision") or {}
        return [
            f"Decision    {last.get('action', '-')} ({last.get('reason', '-')}): {last.get('message', '')}"
        ]
    lines = [f"Decisions   the last {len(decisions)}, oldest first"]
    for d in decisions:
        when = str(d.get("time", ""))[11:19]
        moved = f" -> {d['gpuProduct']}" if d.get("gpuProduct") else ""
        lines.append(
            f"  {when}  {d.get('action', ''):<14} {d.get('reason', ''):<22} replicas "
            f"{d.get('replicasBefore')}->{d.get('replicasAfter')}, batch {d.get('maxBatchSizeBefore')}->"
            f"{d.get('maxBatchSizeAfter')}{moved}; {_num(d.get('requestRate'), ' req/s')}, P99 "
            f"{_ms(d.get('observedP99Ms'))} (predicted {_ms(d.get('predictedP99Ms'))})"
        )
    return lines


def render(obj: dict[str, Any]) -> str:
    """The service's state in words and figures (pure)."""
    meta, spec, status = obj.get("metadata") or {}, obj.get("spec") or {}, obj.get("status") or {}
    ready = _condition(status, c.CONDITION_READY)
    lines = [
        f"{meta.get('name', '?')} in {meta.get('namespace', 'default')}: "
        f"Ready {ready.get('status', 'Unknown')}"
        f" ({ready.get('reason', '-')}){': ' + ready['message'] if ready.get('message') else ''}",
        *_serving(status),
        *_observed(spec, status),
        *_profile(status),
        *_choices(status),
        *_decisions(status),
        "Conditions",
    ]
    for cond in status.get("conditions") or []:
        lines.append(
            f"  {cond.get('type', ''):<18} {cond.get('status', ''):<8} {cond.get('reason', ''):<24} "
            f"{cond.get('message', '')}"[:240]
        )
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

    from tailpilot.controllers.kubeapi import ISVC, Kube

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
