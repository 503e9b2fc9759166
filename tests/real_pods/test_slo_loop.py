"""The SLO loop end to end on real pods: a load step is answered by the operator, then undone.

Real parts only: the build Job and Triton pods run on local-0, the operator reads the pods' Triton
counters every 2 s and their P99 from Prometheus (the prometheus-operator's, configured from the
generated ServiceMonitor), all at the API's defaults, and an open-loop load generator in its own
process measures the client-side P99 against the pods' IPs.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from kubernetes import client

from tailpilot.api import constants as c
from tailpilot.bench import traces
from tailpilot.controllers.core.settings import DEFAULT_CONTROL_PERIOD_S
from tailpilot.tools.report import build_report, summarize, write_report
from tailpilot.tools.report_plot import COLOURS
from tailpilot_e2e.agent_cgroups import CpuCgroups
from tailpilot_e2e.calibration import calibrate, example_load
from tailpilot_e2e.cluster import LocalCluster
from tailpilot_e2e.operator_harness import condition, custom_object
from tailpilot_e2e.real_pods import (
    SINGLE_REQUESTS,
    SLO_LOOP_MODEL_WIDTH,
    SLO_LOOP_P99_MS,
    MonitoredOperator,
    prepare_storage,
    ready_endpoints,
    serve_and_wait_ready,
    slo_loop_service,
)
from tailpilot_e2e.wait import eventually
from tests.tools.test_tool_report import colour_pixels

# Part of `make test`; `make test-slo-loop` runs it alone and prints its timeline.
pytestmark = [pytest.mark.cluster, pytest.mark.slo_loop]
NAME = "mlp-cpu"
SLO_MS = SLO_LOOP_P99_MS
STABILIZATION_S = 20
#: The node runs every replica on the machine's two cores: a third replica adds contention, not
#: capacity (run of 00:51 UTC: compute 1.63x the profile at three replicas, P99 over the SLO there).
MAX_REPLICAS = 2
LOW_S, HIGH_S = 20.0, 150.0
#: The calm phase's rate over the step's: 35% of one replica's capacity, where one replica holds the
#: SLO with room. At 0.4 (46%) a slow spell of the machine put the calm P99 at 424 ms against a
#: 425 ms margin and the loop rightly added a replica before the step (CI run of 2026-11-30 12:39).
CALM_OVER_STEP = 0.3
#: The step's rate over what one replica serves at its CPU limit (`tailpilot_e2e.calibration`):
#: past it, so one replica cannot keep up and the loop must answer; two replicas run at 58% of theirs.
#: At 1.25x the backlog one replica built before the second was ready drained only 30 s later (run
#: of 2026-11-30 06:41 UTC), as round robin gives the backlogged replica half the new requests.
STEP_OVER_ONE_REPLICA = 1.15
#: From this long after the answer is in place (its replicas ready), the client P99 must be back under
#: the SLO until the step ends: the backlog built before has drained by then (15 s at 1.15x, 06:46).
SETTLE_S = 30.0
#: The answer must be in place with at least this much of the step left to judge it on.
JUDGED_S = 60.0


@pytest.fixture
def monitored(monitored_operator: Callable[[float], MonitoredOperator]) -> MonitoredOperator:
    # The operator's default control period: the fast loop's surge check answers a step between
    # decisions.
    return monitored_operator(DEFAULT_CONTROL_PERIOD_S)


def timeline(
    sent_s: np.ndarray,
    latency_s: np.ndarray,
    ok: np.ndarray,
    samples: list[tuple[float, int, int, str]],
    *,
    bin_s: float = 5.0,
) -> str:
    """Per `bin_s`: requests sent, client P99, and the operator's target/ready replicas and reason."""
    lines = ["   t  sent  p99 ms  target ready reason"]
    end = float(sent_s.max()) if sent_s.size else 0.0
    for start in np.arange(0.0, end + bin_s, bin_s):
        inside = (sent_s >= start) & (sent_s < start + bin_s)
        lat = latency_s[inside & ok]
        p99 = f"{np.quantile(lat, 0.99) * 1000:7.0f}" if lat.size else "      -"
        seen = [s for s in samples if start <= s[0] < start + bin_s]
        target, ready, reason = seen[-1][1:] if seen else ("-", "-", "")
        lines.append(f"{start:4.0f} {int(inside.sum()):5d} {p99} {target!s:>7} {ready!s:>5} {reason}")
    return "\n".join(lines)


def window_p99_ms(
    sent_s: np.ndarray, latency_s: np.ndarray, ok: np.ndarray, start: float, end: float
) -> float:
    mask = ok & (sent_s >= start) & (sent_s < end)
    return float(np.quantile(latency_s[mask], 0.99) * 1000) if mask.sum() >= 50 else math.nan


def check_report(
    api: client.ApiClient,
    ns: str,
    monitored: MonitoredOperator,
    out: Path,
    *,
    start_s: float,
    high_per_s: float,
) -> None:
    """`tailpilot report` on the live service over the run: its figures, its decisions, its PNG's series."""
    obj = custom_object(api, ns, NAME)
    data = build_report(obj, monitored.prometheus.url, start_s=start_s, end_s=time.time(), step_s=5.0)
    write_report(data, out)
    summary = summarize(data)
    # What Prometheus saw is what was sent and done: the step's rate, the replicas, the decisions.
    assert 0.6 * high_per_s <= summary.rate_peak_per_s <= 1.4 * high_per_s, summary
    assert data.decisions, obj["status"].get("decisions")  # the loop acted in the step (checked above)
    assert summary.replicas_max >= max(d["replicasAfter"] for d in data.decisions), (summary, data.decisions)
    assert summary.dominant in ("queue", "compute") and summary.mean_batch >= 1.0, summary
    markdown = (out / "report.md").read_text()
    assert f"# TailPilot report: {NAME} in {ns}" in markdown
    assert data.decisions[0]["action"] in markdown
    png = out / "report.png"
    for series in ("p99_ms", "rate_per_s", "replicas", "queue_ms", "compute_infer_ms", "mean_batch"):
        assert colour_pixels(png, COLOURS[series]) > 200, series


#: How far the status's queue and compute time per request may be from Triton's own counters
#: over the same window (the operator reads the pods every 2 s, Prometheus scrapes them every 2 s).
BREAKDOWN_TOLERANCE = 0.15
#: Below this many requests in a window, its per-request times are not compared (a handful of
#: requests at a window's edge would decide it).
BREAKDOWN_MIN_REQUESTS = 100


#: Where each part's time per request is counted (cumulative microseconds).
PARTS_COUNTERS = {
    "queue": "nv_inference_queue_duration_us",
    "compute": "nv_inference_compute_infer_duration_us",
}
#: How far from the observation's time the reference windows may end (seconds).
ALIGNMENT_S = (-4.0, -3.0, -2.0, -1.0, 0.0, 1.0, 2.0, 3.0, 4.0)


def check_breakdown(
    monitored: MonitoredOperator, ns: str, observed: list[tuple[float, dict[str, Any]]], *, window_s: float
) -> None:
    """status.observed's queue and compute per request against Triton's counters; the dominant part's flips.

    The reference is the same counters summed over the same window, through Prometheus' own scrapes of
    the pods (not the operator's reads). "The same window" is known to a few seconds: the operator's
    ends at its newest read of the pods (every 2 s) and Prometheus' samples are 2 s apart. In steady
    traffic that does not matter (the figures agree to 1-3%); while a queue builds or drains, the
    counters move in bursts (queue time is counted when a request completes) and a window ending 2 s
    earlier can show half the queue time. So each figure is compared with the reference windows ending
    up to 4 s either side of the observation's time: within the tolerance of their range.
    """
    sel = f'namespace="{ns}",inferenceservice="{NAME}"'

    def scalar_at(promql: str, when: float) -> float:
        params = {"query": promql, "time": f"{when:.3f}"}
        body = httpx.get(f"{monitored.prometheus.url}/api/v1/query", params=params, timeout=5).json()
        result = body["data"]["result"]
        return float(result[0]["value"][1]) if result else math.nan

    def per_request_ms(counter: str, when: float) -> tuple[float, float]:
        served = scalar_at(f"sum(increase(nv_inference_request_success{{{sel}}}[{window_s:g}s]))", when)
        spent = scalar_at(f"sum(increase({counter}{{{sel}}}[{window_s:g}s]))", when)
        return (spent / served / 1000.0 if served > 0 else math.nan), served

    compared, far = 0, []
    for t, seen in observed:
        at = datetime.fromisoformat(seen["at"].replace("Z", "+00:00")).timestamp()
        requests = per_request_ms(PARTS_COUNTERS["queue"], at)[1]
        if not requests >= BREAKDOWN_MIN_REQUESTS or seen.get("computeTimeMs") is None:
            continue
        compared += 1
        for part, status_ms in (("queue", seen["queueTimeMs"]), ("compute", seen["computeTimeMs"])):
            references = [per_request_ms(PARTS_COUNTERS[part], at + shift)[0] for shift in ALIGNMENT_S]
            finite = [r for r in references if math.isfinite(r)]
            print(  # `make test-slo-loop` shows the comparison (-s)
                f"breakdown at {t:.0f} s, {requests:.0f} requests: {part} {status_ms} ms; Triton, windows "
                f"ending -4..+4 s from it: {[round(r, 1) for r in references]}"
            )
            # Within the tolerance of the possible windows' range (a millisecond's floor for a queue
            # that is all but empty).
            low, high = (min(finite), max(finite)) if finite else (math.nan, math.nan)
            slack_low, slack_high = max(BREAKDOWN_TOLERANCE * low, 1.0), max(BREAKDOWN_TOLERANCE * high, 1.0)
            if not low - slack_low <= status_ms <= high + slack_high:
                far.append((round(t), part, status_ms, [round(r, 2) for r in references], round(requests)))
    # The status is written when its figures move (not every period): a run writes eight or so.
    assert compared >= 5, (
        f"{compared} of {len(observed)} observations had {BREAKDOWN_MIN_REQUESTS} requests: "
        f"{[(round(t), seen.get('at'), seen.get('requestRate')) for t, seen in observed[:5]]}"
    )
    assert not far, (far, compared)
    # The dominant part: the server's before the step, the queue's while one replica is overrun,
    # the server's again once the second replica has drained it.
    parts = [(t, seen.get("timeDominatedBy")) for t, seen in observed if seen.get("timeDominatedBy")]
    assert [p for t, p in parts if t < LOW_S] and all(p == "Server" for t, p in parts if t < LOW_S), parts
    assert any(p == "Queue" for t, p in parts if t >= LOW_S), parts
    assert parts[-1][1] == "Server", parts


def adds_or_reloads(before: dict[str, Any], after: dict[str, Any]) -> bool:
    """Whether what is in force changed by adding replicas or by a batching change."""
    return after["replicas"] > before["replicas"] or after.get("batching") != before.get("batching")


def test_a_load_step_is_answered_until_the_client_p99_is_back_under_the_slo_then_undone(
    real_cluster: LocalCluster,
    real_api: client.ApiClient,
    real_namespace: str,
    monitored: MonitoredOperator,
    tmp_path: Path,
) -> None:
    core, apps = client.CoreV1Api(real_api), client.AppsV1Api(real_api)
    ns = real_namespace
    prepare_storage(core, ns, tmp_path / "pvc", model_width=SLO_LOOP_MODEL_WIDTH)
    service = slo_loop_service(
        ns, name=NAME, max_replicas=MAX_REPLICAS, stabilization_s=STABILIZATION_S, batching=SINGLE_REQUESTS
    )
    serve_and_wait_ready(real_api, service)
    assert monitored.prometheus.load_cluster_rules(real_api, ns)
    status = custom_object(real_api, ns, NAME)["status"]
    cgroups = CpuCgroups.of(real_cluster.agent_state_dir)
    calibration = calibrate(core, cgroups, custom_object(real_api, ns, NAME), tmp_path / "calibration")
    high = STEP_OVER_ONE_REPLICA * calibration.capacity_per_s
    arrivals = traces.piecewise_poisson(
        steps=[(LOW_S, CALM_OVER_STEP * high), (HIGH_S, high)], rng=np.random.default_rng(5)
    )
    initial_replicas = status["replicas"]
    # The calibration's light load can itself move the loop: a scale-up during it left the calm
    # phase at two replicas (CI run of 2026-11-30 11:07 UTC); in the demo of 10:43 UTC such a
    # scale-up named the onset's burst ("bursts up to 20 requests in 8 s" at 1.2 req/s). The
    # scenario starts where it means to: the service back at its rolled-out size, once the
    # scale-down guardrails (stabilization window, cooldown after a scale-up) let it go.
    eventually(
        lambda: (
            custom_object(real_api, ns, NAME)["status"]["replicas"] == initial_replicas
            and len(ready_endpoints(core, ns, NAME)) == initial_replicas
        ),
        timeout=STABILIZATION_S + 120,
        interval=1.0,
        description=f"back to {initial_replicas} replica(s) after the calibration",
    )

    load = example_load(
        tmp_path / "load", arrivals, duration_s=LOW_S + HIGH_S, targets=ready_endpoints(core, ns, NAME)
    )
    load_started = time.time()
    # What was in force just before the step (the policy may tune batching in the calm phase), and
    # when that first changed after it: the answer to the step.
    before_step: dict[str, Any] | None = None
    acted_at: float | None = None
    # When what was in force last changed during the step, replicas added or batching reloaded: the
    # answer's last part (a reload of the Python backend stalls requests 2-3.5 s, a transient of the
    # answer like a replica's start). Replicas removed are not part of answering the step: the P99
    # judged to the end of the step covers them (run of 2026-11-30 04:07 UTC: with the corrections
    # learned, one replica was predicted at 338 ms for 12.6 req/s and the loop went back to it 5 s
    # before the step ended; the client P99 after it was 276 ms).
    last_change_at: float | None = None
    last_in_force: dict[str, Any] | None = None
    peak_replicas = initial_replicas
    samples: list[tuple[float, int, int, str]] = []  # (load time, target replicas, ready, reason)
    #: status.observed as the loop saw it, by its time: (load time, the observation).
    observed_by_time: dict[str, tuple[float, dict[str, Any]]] = {}
    #: The LatencyBreakdown condition's reason as the loop wrote it: (load time, reason).
    breakdowns: list[tuple[float, str]] = []
    with load:

        def follow_pods_until_done() -> bool:
            nonlocal acted_at, peak_replicas, before_step, last_change_at, last_in_force
            ready = ready_endpoints(core, ns, NAME)
            load.set_targets(ready)
            now = custom_object(real_api, ns, NAME)["status"]
            peak_replicas = max(peak_replicas, now["replicas"])
            progress = load.progress()
            if progress:
                t = progress[-1].t_s
                reason = (now.get("lastDecision") or {}).get("reason", "")
                samples.append((t, now["replicas"], len(ready), reason))
                seen = now.get("observed") or {}
                if seen.get("at") and seen.get("queueTimeMs") is not None:
                    observed_by_time[seen["at"]] = (t, seen)
                named = condition({"status": now}, c.CONDITION_LATENCY_BREAKDOWN) or {}
                if named.get("status") == "True":
                    breakdowns.append((t, named["reason"]))
                in_force = {"replicas": now["replicas"], "batching": now.get("batching")}
                if t < LOW_S:
                    before_step = in_force
                elif acted_at is None and before_step is not None and in_force != before_step:
                    acted_at = t
                if t >= LOW_S and last_in_force is not None and adds_or_reloads(last_in_force, in_force):
                    last_change_at = t
                last_in_force = in_force
            return load.process is not None and load.process.poll() is not None

        eventually(
            follow_pods_until_done, timeout=LOW_S + HIGH_S + 60, interval=1.0, description="the load ran"
        )
        result = load.wait(timeout=30)

    sent = np.asarray(result.sent_s, dtype=np.float64)
    latency = np.asarray(result.latency_s, dtype=np.float64)
    ok = np.asarray(result.status) == 200
    final = custom_object(real_api, ns, NAME)["status"]
    decision = final["lastDecision"]
    events = [
        e.reason if e.type != "Warning" else f"{e.reason}: {e.message}"
        for e in core.list_namespaced_event(
            ns, field_selector=f"involvedObject.kind=InferenceService,involvedObject.name={NAME}"
        ).items
    ]
    profile = custom_object(real_api, ns, NAME)["status"]["profile"]["serviceTime"]
    story = f"step {high:.1f} req/s; {calibration}; profile {profile}\n{decision}\n{events}\n" + timeline(
        sent, latency, ok, samples
    )
    print(story)  # `make test-slo-loop` shows it (-s); pytest shows it on failure
    # The calm phase needs one replica; the step is answered (replicas or batching) once it began.
    assert before_step is not None and before_step["replicas"] == initial_replicas, story
    assert acted_at is not None, story
    # The answer is in place once the replicas it asked for are ready and its last change (replicas
    # or a batching reload) is made, with a minute of the step left: a loop still changing things
    # then has not answered it. (CI run of 02:26 UTC: the one reload of a step, from the spec's max
    # batch 4 to 1 some 40 s after the step, stalled requests 2.6 s inside the judged window.)
    in_place_at = max(
        [
            acted_at,
            *([last_change_at] if last_change_at is not None else []),
            *(t for t, target, ready, _ in samples if t >= LOW_S and ready < target),
        ]
    )
    assert in_place_at <= LOW_S + HIGH_S - JUDGED_S, f"answer in place at {in_place_at:.0f} s\n{story}"
    # Under the SLO again: the P99 of every request from SETTLE_S after that to the end of the step
    # (a thousand or more). A step left unanswered keeps it at 1.3x the SLO or more; a few seconds in
    # which the two cores run every replica slower (CI runs saw them, with no action near) move it
    # little, where the P99 of the last 40 s alone (~500 requests) failed on them.
    settled_p99 = window_p99_ms(sent, latency, ok, in_place_at + SETTLE_S, LOW_S + HIGH_S)
    assert settled_p99 <= SLO_MS, (
        f"P99 {settled_p99:.0f} ms from {in_place_at + SETTLE_S:.0f} s, acted at {acted_at:.0f} s\n{story}"
    )
    assert result.ok >= 0.99 * len(result.status), dict(result.errors)
    # The loop ran on the pods' own counters (the fast loop read them), not on Prometheus' rates.
    assert (final.get("observed") or {}).get("ratesFrom") == "Pods", final.get("observed")

    check_report(real_api, ns, monitored, tmp_path / "report", start_s=load_started, high_per_s=high)
    check_breakdown(monitored, ns, list(observed_by_time.values()), window_s=30.0)
    # The condition names the same flips, in words: compute (the model at batch 1) before the step,
    # the queue while one replica is overrun, compute again once the second has drained it.
    assert [r for t, r in breakdowns if t < LOW_S], breakdowns
    assert all(r == c.REASON_COMPUTE_DOMINATED for t, r in breakdowns if t < LOW_S), breakdowns
    assert any(r == c.REASON_QUEUE_DOMINATED for t, r in breakdowns if t >= LOW_S), breakdowns
    assert breakdowns[-1][1] == c.REASON_COMPUTE_DOMINATED, breakdowns

    # With the load gone, back to one replica once the stabilization window has passed.
    if peak_replicas == 1:
        return  # batching alone answered the step
    eventually(
        lambda: apps.read_namespaced_deployment(NAME, ns).spec.replicas == 1,
        timeout=STABILIZATION_S + 90,
        interval=1.0,
        description="scaled back down",
    )
