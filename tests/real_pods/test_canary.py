"""The canary on real pods: a slower engine is rolled back, a faster one promoted, no request failing.

Real parts only: the build Jobs and the Triton pods on local-0, Prometheus scraping the pods as the
prometheus-operator configures it from the generated ServiceMonitor, the operator analysing the
canary from Prometheus, and an open-loop load generator in its own process spreading requests over
the Service's ready endpoints (as kube-proxy would) the whole time. Profiling is off on purpose:
nothing predicts the engines' speed, so the canary alone judges them, from what the pods serve.

The service starts on the example model at twice its width. A model update to six times the width
(about eight times the compute per request) is served by one canary replica beside the stable one,
found slower, and rolled back: the stable engine never stops serving. An update to the example model
itself (faster) is promoted and rolled onto the stable replica.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from kubernetes import client

from tailpilot.bench import traces
from tailpilot.builders import example_model
from tailpilot_e2e.calibration import example_load
from tailpilot_e2e.cluster import LocalCluster
from tailpilot_e2e.operator_harness import condition, custom_object
from tailpilot_e2e.real_pods import (
    MonitoredOperator,
    cpu_example,
    prepare_storage,
    ready_endpoints,
    server_pods,
)
from tailpilot_e2e.wait import eventually

pytestmark = [pytest.mark.cluster, pytest.mark.slow, pytest.mark.timeout(1200)]
NAME = "mlp-rollout"
BASE_WIDTH, HEAVY_WIDTH, LIGHT_WIDTH = 2, 6, 1
#: Requests per second the whole time: the canary's half is 900 requests in its analysis.
RATE_PER_S = 20.0
#: The canary's analysis: past the minute Triton's latency summaries cover, so the P99s compared
#: leave out the new pod's first requests.
ANALYSIS_S = 90
#: What the test prints of status.canary at each verdict (docs/rollouts.md quotes it).
FIGURES = ("reason", "message", "trafficPercent", "candidate", "stable", "analysisStartedAt", "finishedAt")
#: The load runs at most this long (bounded; stopped once the test has seen everything).
LOAD_S = 1000.0


@pytest.fixture
def monitored(monitored_operator: Callable[[float], MonitoredOperator]) -> MonitoredOperator:
    return monitored_operator(4)


def set_model(api: client.ApiClient, ns: str, uri: str) -> None:
    client.CustomObjectsApi(api).patch_namespaced_custom_object(
        "tailpilot.io", "v1alpha1", ns, "inferenceservices", NAME, {"spec": {"model": {"uri": uri}}}
    )


def canary_deployment_exists(apps: client.AppsV1Api, ns: str) -> bool:
    try:
        apps.read_namespaced_deployment(f"{NAME}-canary", ns)
    except client.ApiException as error:
        if error.status == 404:
            return False
        raise
    return True


def test_a_slower_engine_is_rolled_back_and_a_faster_one_promoted_without_a_failed_request(
    real_cluster: LocalCluster,
    real_api: client.ApiClient,
    real_namespace: str,
    monitored: MonitoredOperator,
    tmp_path: Path,
) -> None:
    core, apps, ns = client.CoreV1Api(real_api), client.AppsV1Api(real_api), real_namespace
    prepare_storage(core, ns, tmp_path, model_width=BASE_WIDTH)
    models = tmp_path / "models"
    example_model.write_example_model(models / "heavy" / "model.onnx", width=HEAVY_WIDTH)
    example_model.write_example_model(models / "light" / "model.onnx", width=LIGHT_WIDTH)
    service = cpu_example(
        ns,
        name=NAME,
        rollout={"strategy": "canary", "canary": {"analysisSeconds": ANALYSIS_S, "minRequests": 100}},
    )
    service["spec"]["engine"]["profile"] = False
    # One stable replica throughout: the canary's replica takes half of the traffic.
    service["spec"]["autoscaling"]["enabled"] = False
    client.CustomObjectsApi(real_api).create_namespaced_custom_object(
        "tailpilot.io", "v1alpha1", ns, "inferenceservices", service
    )

    def ready_on(key: str | None = None) -> dict[str, Any] | None:
        obj = custom_object(real_api, ns, NAME)
        status = obj.get("status") or {}
        on_it = key is None or (status.get("engine") or {}).get("key") == key
        current = status.get("observedGeneration") == obj["metadata"]["generation"]
        rolled = (condition(obj, "RolloutReady") or {}).get("status") == "True"
        ready = (condition(obj, "Ready") or {}).get("status") == "True"
        return obj if on_it and current and rolled and ready else None

    first = eventually(ready_on, timeout=420, interval=1.0, description="the base model Ready")
    base_key = first["status"]["engine"]["key"]
    arrivals = traces.piecewise_poisson(steps=[(LOAD_S, RATE_PER_S)], rng=np.random.default_rng(11))
    load = example_load(
        tmp_path / "load", arrivals, duration_s=LOAD_S, targets=ready_endpoints(core, ns, NAME)
    )
    canary_ips: set[str] = set()

    def follow(until: Callable[[dict[str, Any]], bool]) -> Callable[[], dict[str, Any] | None]:
        """Keep the load's targets on the Service's endpoints; the object once `until` holds."""

        def step() -> dict[str, Any] | None:
            load.set_targets(ready_endpoints(core, ns, NAME))
            for pod in server_pods(core, ns, NAME):
                if (pod.metadata.labels or {}).get("tailpilot.io/track") == "canary" and pod.status.pod_ip:
                    canary_ips.add(pod.status.pod_ip)
            obj = custom_object(real_api, ns, NAME)
            return obj if until(obj) else None

        return step

    def phase(obj: dict[str, Any]) -> str:
        return ((obj.get("status") or {}).get("canary") or {}).get("phase", "")

    with contextlib.ExitStack() as stack:
        stack.enter_context(load)

        # 1. The heavier model: its canary serves, is found slower, and is rolled back.
        set_model(real_api, ns, "pvc://models/heavy/model.onnx")
        rolled_back = eventually(
            follow(lambda obj: phase(obj) == "RolledBack"),
            timeout=400,
            interval=0.5,
            description="the heavy engine's canary rolled back",
        )
        canary = rolled_back["status"]["canary"]
        print(f"rolled back: {json.dumps({k: canary.get(k) for k in FIGURES})}")  # the docs' figures (-s)
        # Slower than the stable replicas beyond the budget, or past the SLO they keep: either way, slower.
        assert canary["reason"] in ("CanaryLatencyRegression", "CanaryOverSLO"), json.dumps(canary)
        heavy_key = canary["engine"]["key"]
        assert heavy_key != base_key
        # Both sides served real traffic, each enough for a P99; the canary's half by replica count.
        assert canary["candidate"]["requests"] >= 100 and canary["stable"]["requests"] >= 100, canary
        assert 25 <= canary["trafficPercent"] <= 75, canary
        assert canary["candidate"]["p99Ms"] > 1.2 * canary["stable"]["p99Ms"], canary
        assert canary["candidate"]["failures"] == 0 and canary["stable"]["failures"] == 0, canary
        blocked = condition(rolled_back, "RolloutBlocked")
        assert (blocked["status"], blocked["reason"]) == ("True", "CanaryRolledBack"), blocked
        assert f"tailpilot.io/accept-engine={heavy_key[:12]}" in blocked["message"]
        # The base engine kept serving; the canary's Deployment is gone.
        assert rolled_back["status"]["engine"]["key"] == base_key
        assert condition(rolled_back, "Ready")["status"] == "True"
        eventually(
            follow(lambda obj: not canary_deployment_exists(apps, ns)),
            timeout=60,
            interval=0.5,
            description="the canary Deployment removed",
        )
        assert canary_ips, "no canary pod was seen serving"

        # 2. The example model itself, faster than the base: promoted, then on the stable replica.
        set_model(real_api, ns, "pvc://models/light/model.onnx")
        promoted = eventually(
            follow(
                lambda obj: (
                    phase(obj) == "Promoted"
                    and obj["status"]["canary"]["engine"]["key"] not in (base_key, heavy_key)
                    and ready_on(obj["status"]["canary"]["engine"]["key"]) is not None
                )
            ),
            timeout=400,
            interval=0.5,
            description="the light engine's canary promoted and rolled out",
        )
        canary = promoted["status"]["canary"]
        print(f"promoted: {json.dumps({k: canary.get(k) for k in FIGURES})}")
        assert canary["reason"] == "CanaryHeldUp", json.dumps(canary)
        assert canary["candidate"]["requests"] >= 100, canary
        light_key = canary["engine"]["key"]
        assert condition(promoted, "RolloutBlocked")["status"] == "False"
        eventually(
            follow(lambda obj: not canary_deployment_exists(apps, ns)),
            timeout=60,
            interval=0.5,
            description="the canary Deployment removed after the promotion",
        )
        # Only the light engine serves now, on the stable replica.
        eventually(
            follow(
                lambda obj: (
                    [p.metadata.labels.get("tailpilot.io/engine-key") for p in server_pods(core, ns, NAME)]
                    == [light_key[:63]]
                )
            ),
            timeout=120,
            interval=0.5,
            description="the stable replica alone, on the light engine",
        )
        progress = load.progress()
    assert progress, "the load generator reported nothing"
    last = progress[-1]
    # Every request answered, through both canaries, the rollback, the promotion and the rollout.
    assert last.errors == 0, last
    assert last.ok >= RATE_PER_S * 120, last
    reasons = [
        e.reason
        for e in core.list_namespaced_event(
            ns, field_selector=f"involvedObject.kind=InferenceService,involvedObject.name={NAME}"
        ).items
    ]
    assert {"CanaryStarted", "CanaryRolledBack", "CanaryPromoted"} <= set(reasons), reasons
