"""Scale to zero and back on real pods: requests sent at zero are held, a replica is woken, nothing is lost.

The chart's activator (two pods on local-0, as in `test_chart_activator.py`) and the operator (a
local process with `--activator-service` naming the chart's activator Service) serve the CPU example
at `minReplicas: 0`: a real build, real Triton pods. With no traffic the service goes to zero and its
Service lists the activator's pods instead of its own (the operator's EndpointSlice). Then a load
generator sends through the Service's endpoints as kube-proxy would (`tailpilot_e2e.service_load`):
its requests reach the activator, which holds them and wakes the service. During the wake a burst
larger than both activator pods may hold (their per-service bound is lowered to 6) is sent, then
the activator pod that took the first request is deleted (it drains: the requests it holds are still
forwarded, and the Service's copy of the activator's pods follows at once); once a Triton pod is in
the Service, requests go straight to it again. Every request must be answered except those the bound
refused, each with the documented 503, its error and `Retry-After`; and at least one was refused.
The cold start the operator breaks down on `status.coldStart` is the wait of the request that opened
it, within 10%, and that request was answered within it plus a second.
"""

from __future__ import annotations

import contextlib
import ipaddress
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from tailpilot_e2e.cluster import LocalCluster
from tailpilot_e2e.host_addresses import REAL_POD_NETWORK
from tailpilot_e2e.operator_harness import custom_object
from tailpilot_e2e.real_pods import (
    MODEL_NAME,
    SINGLE_REQUESTS,
    SLO_LOOP_MODEL_WIDTH,
    is_ready,
    prepare_storage,
    serve_and_wait_ready,
    server_pods,
    slo_loop_service,
    start_monitored_operator,
)
from tailpilot_e2e.service_load import Sent, ServiceLoad, service_targets
from tailpilot_e2e.wait import eventually

from .test_chart_activator import SELECTOR, two_ready
from .test_chart_operator import installed_chart

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

NAME = "mlp-zero"
#: The chart with its activator and no operator pods (the operator runs here, as the SLO-loop runs').
#: Its bound on requests held per service is lowered so that a burst reaches it (the default, 1000,
#: would take a thousand requests).
MAX_HELD = 6
VALUES = {
    "image": {"repository": "ghcr.io/tailpilot/tailpilot-operator"},
    "replicaCount": 0,
    "activator": {"maxHeldPerService": MAX_HELD},
}
#: The burst sent during the wake: more than both activator pods may hold, so one of them refuses.
BURST = 2 * MAX_HELD + 1
#: The bound's documented error (docs/activator.md), and its `Retry-After` (the chart's default).
BOUND_ERROR = (
    f"while it has no ready replica, the activator's bound (max held requests per service: {MAX_HELD})"
)
RETRY_AFTER = "5"
#: The shortest idle window the API allows: the test waits it out once.
IDLE_BEFORE_ZERO_S = 30
#: The load: bounded in count and time; it spans the cold start and some time after it.
REQUESTS, INTERVAL_S, REQUEST_TIMEOUT_S = 40, 0.5, 120.0
#: A request opened the recorded cold episode if it was sent within this of its heldAt (well under
#: the load's interval, so one request at most matches).
HOLD_MATCH_S = 0.25


def zero_service(namespace: str) -> dict[str, Any]:
    """The CPU example as the SLO-loop runs apply it, allowed to go to zero after the shortest idle."""
    service = slo_loop_service(
        namespace, name=NAME, max_replicas=2, stabilization_s=20, batching=SINGLE_REQUESTS
    )
    service["spec"]["autoscaling"].update(minReplicas=0, idleBeforeZeroSeconds=IDLE_BEFORE_ZERO_S)
    return service


def at_zero_behind(core: client.CoreV1Api, api: client.ApiClient, ns: str, activators: set[str]) -> bool:
    """At zero: the status says so, no Triton pod is left, and the Service lists the activators only."""
    status = custom_object(api, ns, NAME).get("status") or {}
    if status.get("replicas") != 0 or not status.get("scaledToZeroAt") or server_pods(core, ns, NAME):
        return False
    listed = {target.split(":")[0] for target in service_targets(client.DiscoveryV1Api(api), ns, NAME)}
    return listed == activators


def service_on_its_pods_alone(core: client.CoreV1Api, api: client.ApiClient, ns: str) -> bool:
    """The Service lists ready Triton pods of the service, and nothing else."""
    listed = {target.split(":")[0] for target in service_targets(client.DiscoveryV1Api(api), ns, NAME)}
    ready = {p.status.pod_ip for p in server_pods(core, ns, NAME) if is_ready(p)}
    return bool(listed) and listed <= ready


def wake_requested(api: client.ApiClient, ns: str) -> str | None:
    annotations = custom_object(api, ns, NAME)["metadata"].get("annotations") or {}
    return annotations.get("tailpilot.io/wake-requested-at")


def is_bound_refusal(sent: Sent, activator_ips: set[str], ns: str) -> bool:
    """An activator's 503 for its per-service bound, with the documented error and `Retry-After`."""
    return (
        sent.target.split(":")[0] in activator_ips
        and sent.status == 503
        and sent.retry_after == RETRY_AFTER
        and f"already held for {ns}/{NAME} {BOUND_ERROR}" in (sent.error or "")
    )


def describe(results: list[Sent]) -> str:
    return "\n".join(
        f"#{r.index} -> {r.target} {r.status} {r.latency_s:.2f}s {r.error or ''}" for r in results
    )


def test_requests_at_zero_are_held_woken_and_answered_with_an_activator_pod_lost_meanwhile(
    real_cluster: LocalCluster, real_api: client.ApiClient, real_namespace: str, tmp_path: Path
) -> None:
    core, ns = client.CoreV1Api(real_api), real_namespace
    prepare_storage(core, ns, tmp_path / "pvc", model_width=SLO_LOOP_MODEL_WIDTH)
    with contextlib.ExitStack() as stack:
        release = stack.enter_context(installed_chart(real_cluster, tmp_path, VALUES))
        release_ns = f"{release}-system"
        activator_pods = eventually(
            lambda: two_ready(core, release_ns), timeout=90, description="two activator pods Ready"
        )
        activator_ips = {p.status.pod_ip for p in activator_pods}
        start_monitored_operator(
            stack,
            real_cluster,
            namespace=ns,
            work_dir=tmp_path / "monitoring",
            control_period_s=4,
            operator_args=["--activator-service", f"{release_ns}/{release}-tailpilot-activator"],
        )
        serve_and_wait_ready(real_api, zero_service(ns), timeout_s=420)

        # Idle: the service goes to zero, and its Service now lists the activator's two pods.
        eventually(
            lambda: at_zero_behind(core, real_api, ns, activator_ips),
            timeout=IDLE_BEFORE_ZERO_S + 150,
            interval=1,
            description="at zero, the Service routed to the activator",
        )

        # The load, through the Service's endpoints; the first request is held and wakes the service.
        def started_load(count: int, interval_s: float, seed: int) -> ServiceLoad:
            load = ServiceLoad(
                real_api,
                namespace=ns,
                service=NAME,
                model=MODEL_NAME,
                count=count,
                interval_s=interval_s,
                timeout_s=REQUEST_TIMEOUT_S,
                seed=seed,
            ).start()
            stack.callback(load.stop)
            return load

        load = started_load(REQUESTS, INTERVAL_S, seed=7)
        eventually(lambda: wake_requested(real_api, ns), timeout=30, description="the activator's wake")
        # During the wake, a burst over the bound: both activator pods hold what they may, one refuses.
        burst = started_load(BURST, 0, seed=11)
        eventually(lambda: len(burst.targets) == BURST, timeout=30, description="the burst sent")
        # Then the activator pod that took the first request is deleted: it drains what it holds.
        first_ip = load.targets[0].split(":")[0]
        assert first_ip in activator_ips, load.targets
        (lost,) = [p for p in activator_pods if p.status.pod_ip == first_ip]
        core.delete_namespaced_pod(lost.metadata.name, release_ns)
        results, burst_results = load.join(), burst.join()

        # The deleted pod's replacement may have been routed to before the wake ended.
        activator_ips |= {p.status.pod_ip for p in two_ready(core, release_ns) or ()}
        everything = results + burst_results
        refused = [r for r in everything if is_bound_refusal(r, activator_ips, ns)]
        # Nothing failed but what the bound refused, with its documented error; it did refuse.
        assert [r for r in everything if not r.ok and r not in refused] == [], describe(everything)
        assert refused, describe(everything)
        via_activator = [r for r in everything if r.ok and r.target.split(":")[0] in activator_ips]
        to_pods = [r for r in everything if r.target.split(":")[0] not in activator_ips]
        assert results[0].ok and results[0] in via_activator, describe(results)
        # Once a Triton pod was in the Service, requests went straight to it.
        assert to_pods and all(r.ok for r in to_pods), describe(everything)
        # Those went to the node agent's pod network (the service may have scaled out meanwhile, and
        # a pod may have left again, so no list of pods taken now holds every one of them).
        assert all(ipaddress.ip_address(r.target.split(":")[0]) in REAL_POD_NETWORK for r in to_pods), (
            describe(to_pods)
        )
        # The Service lists the pods only now: the activator's slice is gone.
        eventually(
            lambda: service_on_its_pods_alone(core, real_api, ns),
            timeout=30,
            description="the Service back on the pods alone",
        )
        # The deleted activator pod was replaced (the Deployment), and it drained without loss.
        eventually(
            lambda: (
                (pods := two_ready(core, release_ns))
                and lost.metadata.uid not in {p.metadata.uid for p in pods}
            ),
            timeout=120,
            description="the lost activator pod replaced",
        )
        first = results[0]
        # The cold start, broken down on the status: one of the activator pods' episodes (each records
        # its own; the last record stands), so no longer than the first request's wait.
        cold = eventually(
            lambda: (custom_object(real_api, ns, NAME).get("status") or {}).get("coldStart"),
            timeout=60,
            description="status.coldStart",
        )
        parts = {part["name"]: part["seconds"] for part in cold["parts"]}
        assert sum(parts.values()) == pytest.approx(cold["totalSeconds"], abs=0.01 * len(parts)), cold
        # The client whose request opened the recorded episode (sent when the activator held it):
        # answered within the measured cold start plus a second, which is within 10% of its wait.
        held_s = datetime.fromisoformat(cold["heldAt"].replace("Z", "+00:00")).timestamp()
        opened = [r for r in via_activator if abs(r.sent_wall_s - held_s) < HOLD_MATCH_S]
        assert opened, (cold, describe(via_activator))
        client_of_episode = min(opened, key=lambda r: abs(r.sent_wall_s - held_s))
        assert client_of_episode.latency_s <= cold["totalSeconds"] + 1.0, (cold, client_of_episode)
        assert cold["totalSeconds"] == pytest.approx(client_of_episode.latency_s, rel=0.10), (
            cold,
            client_of_episode,
        )
        print(
            f"first request: {first.latency_s:.2f} s through {first.target}; "
            f"{len(via_activator)} answered via the activator, {len(refused)} refused by its bound, "
            f"{len(to_pods)} to the pods; "
            f"activator pods {SELECTOR}: {sorted(activator_ips)}; at {time.strftime('%H:%M:%S')}\n"
            f"status.coldStart: {cold['totalSeconds']} s for request #{client_of_episode.index}, "
            f"which waited {client_of_episode.latency_s:.3f} s; pod {cold.get('pod')}: "
            + ", ".join(f"{name} {seconds} s" for name, seconds in parts.items())
            + "\ndecisions: "
            + "; ".join(
                f"{d['reason']} {d['replicasBefore']}->{d['replicasAfter']}"
                for d in (custom_object(real_api, ns, NAME).get("status") or {}).get("decisions", [])
            )
        )
