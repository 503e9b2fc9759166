"""An engine built without a profile still scales: the SLO loop on the service time its pods report.

Real parts only, as in the SLO-loop test: the build Job (profiling off) and the Triton pods on
local-0, Prometheus configured by the prometheus-operator, the operator fitting the service time
from the pods' own Triton counters, and an open-loop load generator in its own process measuring the
client P99.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from kubernetes import client

from tailpilot.bench import traces
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

pytestmark = [pytest.mark.cluster, pytest.mark.slo_loop]
NAME = "mlp-noprof"
CALM_S, STEP_S = 15.0, 120.0
#: The calibration's light load: without a profile nothing says what one replica serves, and this
#: is a fifth or less of it for the example model at the SLO-loop's CPU limit on this machine.
CALIBRATION_RATE_PER_S = 5.0
#: As in the SLO-loop test: past one replica's capacity, within two replicas'.
STEP_OVER_ONE_REPLICA = 1.15
CALM_OVER_STEP = 0.3
#: From this long after the second replica serves, the client P99 must be under the SLO.
SETTLE_S = 30.0


@pytest.fixture
def monitored(monitored_operator: Callable[[float], MonitoredOperator]) -> MonitoredOperator:
    return monitored_operator(4)


def test_a_service_built_without_a_profile_learns_its_service_time_and_answers_a_step(
    real_cluster: LocalCluster,
    real_api: client.ApiClient,
    real_namespace: str,
    monitored: MonitoredOperator,
    tmp_path: Path,
) -> None:
    core, ns = client.CoreV1Api(real_api), real_namespace
    prepare_storage(core, ns, tmp_path / "pvc", model_width=SLO_LOOP_MODEL_WIDTH)
    service = slo_loop_service(ns, name=NAME, max_replicas=2, stabilization_s=60, batching=SINGLE_REQUESTS)
    service["spec"].setdefault("engine", {})["profile"] = False
    serve_and_wait_ready(real_api, service)
    status = custom_object(real_api, ns, NAME)["status"]
    assert "profile" not in status, status["profile"]
    # Nothing served yet: nothing to size with, and the status says what the autoscaler waits for.
    eventually(
        lambda: (
            (condition(custom_object(real_api, ns, NAME), "ScalingActive") or {}).get("reason")
            == "LearningServiceTime"
        ),
        timeout=60,
        description="ScalingActive LearningServiceTime before any request",
    )

    calibration = calibrate(
        core,
        CpuCgroups.of(real_cluster.agent_state_dir),
        custom_object(real_api, ns, NAME),
        tmp_path / "calibration",
        rate_per_s=CALIBRATION_RATE_PER_S,
    )
    assert custom_object(real_api, ns, NAME)["status"]["replicas"] == 1
    high = STEP_OVER_ONE_REPLICA * calibration.capacity_per_s
    arrivals = traces.piecewise_poisson(
        steps=[(CALM_S, CALM_OVER_STEP * high), (STEP_S, high)], rng=np.random.default_rng(17)
    )
    load = example_load(
        tmp_path / "load", arrivals, duration_s=CALM_S + STEP_S, targets=ready_endpoints(core, ns, NAME)
    )
    two_serving_at: list[float] = []  # load time when a second replica first served
    with load:

        def until_done() -> bool:
            ready = ready_endpoints(core, ns, NAME)
            load.set_targets(ready)
            progress = load.progress()
            if progress and not two_serving_at and len(ready) > 1:
                two_serving_at.append(progress[-1].t_s)
            return load.process is not None and load.process.poll() is not None

        eventually(until_done, timeout=CALM_S + STEP_S + 60, interval=1.0, description="the load ran")
        result = load.wait(timeout=30)

    obj = custom_object(real_api, ns, NAME)
    learned = obj["status"]["learned"]
    sent = np.asarray(result.sent_s, dtype=np.float64)
    latency = np.asarray(result.latency_s, dtype=np.float64)
    ok = np.asarray(result.status) == 200
    story = (
        f"step {high:.1f} req/s at {CALM_S:g} s; {calibration}; second replica serving at {two_serving_at}; "
        f"learned {learned}; last decision {obj['status'].get('lastDecision')}; "
        # The decisions that changed the replicas, with their times and reasons: a scale-down
        # during the step shows here, when it happened and on what rate.
        f"changes {obj['status'].get('decisions')}"
    )
    print(story)  # shown with -s, and by pytest on failure
    # The service time came from the pods: fitted (batches of one need no spread), or provisional
    # from saturated windows (they measure what a replica serves, and outrank a fit of steady ones),
    # and of the order of what the calibration measured a request to cost in CPU at the replica's limit.
    fit = (learned.get("serviceTimeFit"), learned.get("serviceTimeFrom"))
    assert fit[0] == "Fitted" or fit == ("Provisional", "Saturated"), story
    per_request_ms = learned["serviceTime"]["interceptMs"] + learned["serviceTime"]["perItemMs"]
    measured_ms = 1000.0 / calibration.capacity_per_s
    assert 0.3 * measured_ms <= per_request_ms <= 3.0 * measured_ms, story
    accurate = condition(obj, "ProfileAccurate")
    assert accurate is not None and accurate["reason"] == "NoProfile", accurate
    # The step was answered with a second replica, and held the SLO once it served.
    assert two_serving_at and CALM_S <= two_serving_at[0] <= CALM_S + STEP_S - 2 * SETTLE_S, story
    judged = ok & (sent >= two_serving_at[0] + SETTLE_S) & (sent < CALM_S + STEP_S)
    assert judged.sum() >= 100, story
    settled_p99 = float(np.quantile(latency[judged], 0.99) * 1000)
    assert math.isfinite(settled_p99) and settled_p99 <= SLO_LOOP_P99_MS, f"P99 {settled_p99:.0f} ms\n{story}"
    assert result.ok >= 0.99 * len(result.status), dict(result.errors)
