"""spec.autoscaling.surgeResponse on real pods: a step is answered by the fast checks, not the period.

Real parts only, as in the SLO-loop test: the build Job and the Triton pod on local-0, Prometheus
configured by the prometheus-operator, the operator reading each pod's Triton metrics page every 3 s, and an
open-loop load generator in its own process. The operator's control period is ten minutes here,
so no regular decision can answer the step within the test: any scale-up during it is the surge
check's, and says so in its Event.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from kubernetes import client

from tailpilot.bench import traces
from tailpilot.policy.config import Reason
from tailpilot_e2e.agent_cgroups import CpuCgroups
from tailpilot_e2e.calibration import calibrate, example_load
from tailpilot_e2e.cluster import LocalCluster
from tailpilot_e2e.operator_harness import custom_object
from tailpilot_e2e.real_pods import (
    SINGLE_REQUESTS,
    SLO_LOOP_MODEL_WIDTH,
    MonitoredOperator,
    prepare_storage,
    ready_endpoints,
    serve_and_wait_ready,
    slo_loop_service,
)
from tailpilot_e2e.wait import eventually

pytestmark = [pytest.mark.cluster, pytest.mark.slo_loop]
NAME = "mlp-cpu"
#: Longer than the test: the only decisions during the step are the ones the surge check calls.
CONTROL_PERIOD_S = 600
CALM_S, STEP_S = 15.0, 40.0
#: The step over what one replica serves at its CPU limit (calibrated): the profile's capacity is
#: within a few percent of it (48-51 req/s on this machine), so 1.4x is over it in every check.
STEP_OVER_ONE_REPLICA = 1.4
CALM_OVER_STEP = 0.2
#: Two 3 s checks over capacity on a 5 s span, a reconcile, and slack for a slow spell.
ANSWERED_WITHIN_S = 25.0
#: The reasons a scale-up decision carries (`tailpilot.policy.config.Reason`).
SCALE_UP_REASONS = frozenset({Reason.SLO_AT_RISK, Reason.AT_MAX_REPLICAS, Reason.QUEUE_DEPTH_HIGH})


@pytest.fixture
def monitored(monitored_operator: Callable[[float], MonitoredOperator]) -> MonitoredOperator:
    return monitored_operator(CONTROL_PERIOD_S)


def test_a_step_is_answered_by_a_surge_decision_seconds_after_it_began(
    real_cluster: LocalCluster,
    real_api: client.ApiClient,
    real_namespace: str,
    monitored: MonitoredOperator,
    tmp_path: Path,
) -> None:
    core, ns = client.CoreV1Api(real_api), real_namespace
    prepare_storage(core, ns, tmp_path / "pvc", model_width=SLO_LOOP_MODEL_WIDTH)
    service = slo_loop_service(ns, name=NAME, max_replicas=2, stabilization_s=60, batching=SINGLE_REQUESTS)
    service["spec"]["autoscaling"]["surgeResponse"] = True
    serve_and_wait_ready(real_api, service)
    calibration = calibrate(
        core,
        CpuCgroups.of(real_cluster.agent_state_dir),
        custom_object(real_api, ns, NAME),
        tmp_path / "calibration",
    )
    assert custom_object(real_api, ns, NAME)["status"]["replicas"] == 1
    high = STEP_OVER_ONE_REPLICA * calibration.capacity_per_s
    arrivals = traces.piecewise_poisson(
        steps=[(CALM_S, CALM_OVER_STEP * high), (STEP_S, high)], rng=np.random.default_rng(11)
    )
    load = example_load(
        tmp_path / "load", arrivals, duration_s=CALM_S + STEP_S, targets=ready_endpoints(core, ns, NAME)
    )
    scaled_at: list[float] = []  # load time of the first scale-up seen
    with load:

        def until_done() -> bool:
            load.set_targets(ready_endpoints(core, ns, NAME))
            progress = load.progress()
            if progress and not scaled_at and custom_object(real_api, ns, NAME)["status"]["replicas"] > 1:
                scaled_at.append(progress[-1].t_s)
            return load.process is not None and load.process.poll() is not None

        eventually(until_done, timeout=CALM_S + STEP_S + 60, interval=1.0, description="the load ran")
        load.wait(timeout=30)

    # The Event is posted after the status write the test saw, so it is waited for, not read once.
    # Its reason is the policy's for a scale-up: SLOAtRisk, or AtMaxReplicas when even the maximum
    # fleet is predicted to miss the SLO at the surge's rate (at 1.4x one replica's calibrated capacity
    # and maxReplicas 2 that depends on the machine's speed: both happen), or QueueDepthHigh.
    surge_events: list[str] = []

    def surge_event_posted() -> bool:
        surge_events[:] = [
            f"{e.reason}: {e.message}"
            for e in core.list_namespaced_event(
                ns, field_selector=f"involvedObject.kind=InferenceService,involvedObject.name={NAME}"
            ).items
            if e.reason in SCALE_UP_REASONS and (e.message or "").startswith("ScaleUp: replicas 1->")
        ]
        if not any("(surge: " in m for m in surge_events):
            raise AssertionError(f"the service's scale-up Events so far: {surge_events}")
        return True

    story = f"step {high:.1f} req/s at {CALM_S:g} s; {calibration}; scaled at {scaled_at}"
    print(story)  # shown with -s, and by pytest on failure
    # Not before the step (the calm phase fits one replica), and within seconds of it.
    assert scaled_at and CALM_S <= scaled_at[0] <= CALM_S + ANSWERED_WITHIN_S, story
    # The decision that scaled was the surge check's: its Event names what the check measured.
    eventually(
        surge_event_posted, timeout=30, interval=1.0, description=f"the surge's ScaleUp Event ({story})"
    )
