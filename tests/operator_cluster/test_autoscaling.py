"""The SLO loop end to end: real Triton metrics in a real Prometheus drive the operator's decisions,
and a real Alertmanager alert reaches the operator's webhook and triggers an immediate decision.

The service's Deployment runs on simulated nodes (nothing executes there), so
its traffic is served by one real Triton process on this machine, which
Prometheus scrapes with the labels a Triton pod of the service would carry.
Load comes from a bounded closed-loop generator.
"""

from __future__ import annotations

import json
import re
from typing import Any

import httpx
import pytest
from kubernetes import client

from tailpilot.api.autoscaling import BatchingConfig
from tailpilot.api.engine import (
    BuildOutcome,
    BuildResult,
    ProfileSummary,
    ProfileSummaryPoint,
    ServiceTimeModel,
)
from tailpilot.builders.triton_server import TritonServer
from tailpilot_e2e.monitoring import LocalAlertmanager, LocalPrometheus
from tailpilot_e2e.operator_harness import (
    OperatorProcess,
    condition,
    custom_object,
    free_port,
    play_build,
    play_profile,
    running_build_pod,
    running_profile_pod,
)
from tailpilot_e2e.wait import eventually
from tests.controllers import triton_fixtures

pytestmark = [pytest.mark.cluster, pytest.mark.triton, pytest.mark.prometheus, pytest.mark.slow]

NAME = triton_fixtures.MODEL  # the InferenceService is named after the model
BASE_MS = 20.0  # the echo model's time per batch: one replica serves about 45 requests/s unbatched


def echo_result() -> BuildResult:
    return BuildResult(
        outcome=BuildOutcome.SUCCEEDED,
        engine_key="e" * 32,
        artifact="pvc://tailpilot-engines/echo",
        triton_backend="python",
        inputs=triton_fixtures.INPUTS,
        outputs=triton_fixtures.OUTPUTS,
    )


#: The echo model's profile, as its profile Job would report it.
ECHO_PROFILE = ProfileSummary(
    hardware="cpu",
    service_time=ServiceTimeModel(intercept_ms=BASE_MS + 2, per_item_ms=0.3, jitter_cv=0.1),
    points=[ProfileSummaryPoint(batch_size=1, p99_ms=26.0, throughput_per_s=44.0)],
)


def service(namespace: str) -> dict:
    return triton_fixtures.echo_service(
        namespace,
        slo={"p99LatencyMs": 100, "evaluationWindowSeconds": 10},
        autoscaling={"minReplicas": 1, "maxReplicas": 4, "scaleDownStabilizationSeconds": 600},
    )


def overload_until_scaled_out(
    apps: client.AppsV1Api, namespace: str, http_url: str
) -> tuple[triton_fixtures.BoundedLoad, Any]:
    """Overload the single replica (~80 requests/s offered for at most 40 s) until it is scaled out."""
    load = triton_fixtures.BoundedLoad(
        [http_url], workers=8, rate_per_worker=10, max_requests=3200, max_seconds=40
    )
    with load:

        def scaled_out() -> Any:
            d = apps.read_namespaced_deployment(NAME, namespace)
            return d if d.spec.replicas > 1 else None

        deployment = eventually(scaled_out, timeout=40, interval=0.5, description="ScaleUp")
    return load, deployment


def decisions_total(metrics_url: str) -> float:
    text = httpx.get(metrics_url, timeout=5).text
    return sum(float(v) for v in re.findall(r"^tailpilot_decisions_total\{[^}]*\} ([0-9.e+]+)$", text, re.M))


def test_overload_scales_out_and_an_alert_triggers_an_immediate_decision(
    k8s, crds, namespace, engine_store, tmp_path
):
    core, apps = client.CoreV1Api(k8s), client.AppsV1Api(k8s)
    repo = triton_fixtures.write_repository(
        tmp_path / "repo", batching=BatchingConfig(max_batch_size=1), base_ms=BASE_MS
    )
    token_file = tmp_path / "token"
    token_file.write_text("s3cret-token")
    webhook_port, metrics_port = free_port(), free_port()
    with TritonServer(repo, work_dir=tmp_path / "triton") as triton:
        prometheus = LocalPrometheus(tmp_path / "prometheus").start()
        alertmanager = LocalAlertmanager(
            tmp_path / "alertmanager",
            token_file=token_file,
            webhook_url=f"http://127.0.0.1:{webhook_port}/alerts",
        ).start()
        try:
            prometheus.set_targets(
                [
                    (
                        triton.metrics_url.split("//")[1].split("/")[0],
                        {
                            "namespace": namespace,
                            "inferenceservice": NAME,
                            "pod": f"{NAME}-local-0",
                        },
                    )
                ]
            )
            args = [
                "--prometheus-url",
                prometheus.url,
                "--control-period-seconds",
                "3",
                "--webhook-port",
                str(webhook_port),
                "--webhook-token-file",
                str(token_file),
                "--metrics-port",
                str(metrics_port),
                "--bind-address",
                "127.0.0.1",
            ]
            with OperatorProcess(crds, namespace=namespace, log_dir=tmp_path, extra_args=args):
                client.CustomObjectsApi(k8s).create_namespaced_custom_object(
                    "tailpilot.io", "v1alpha1", namespace, "inferenceservices", service(namespace)
                )
                play_build(core, running_build_pod(core, namespace), result=echo_result())
                play_profile(core, namespace, ECHO_PROFILE)

                def scaling_active():
                    cond = condition(custom_object(k8s, namespace, NAME), "ScalingActive")
                    return cond if cond and cond["status"] == "True" else None

                eventually(scaling_active, timeout=90, description="ScalingActive=True")

                load, deployment = overload_until_scaled_out(apps, namespace, triton.http_url)
                obj = custom_object(k8s, namespace, NAME)
                decision = obj["status"]["lastDecision"]
                assert decision["action"].startswith("ScaleUp"), decision
                # The decision history has it, with what was in force before and what it asked for.
                last = obj["status"]["decisions"][-1]
                assert last["action"] == decision["action"] and last["reason"] == decision["reason"], last
                assert last["replicasBefore"] < last["replicasAfter"] == decision["replicas"], last
                assert last["requestRate"] > 0
                assert obj["status"]["replicas"] == deployment.spec.replicas
                observed = obj["status"]["observed"]
                assert observed["requestRate"] > 0 and observed["p99Ms"] > 100, (
                    observed
                )  # the overload was seen
                # The API server kept what the autoscaler learned (its status schema accepts it).
                assert {"modelCorrectionLightLoad", "modelCorrectionHeavyLoad", "serviceTimeScale"} <= set(
                    obj["status"]["learned"]
                )
                events = core.list_namespaced_event(
                    namespace, field_selector=f"involvedObject.name={NAME}"
                ).items
                assert any(e.reason == decision["reason"] for e in events), [e.reason for e in events]

                # An alert through Alertmanager: a decision well before the next control period.
                before = decisions_total(f"http://127.0.0.1:{metrics_port}/metrics")
                patch = {"spec": {"autoscaling": {"scaleDownStabilizationSeconds": 601}}}
                client.CustomObjectsApi(k8s).patch_namespaced_custom_object(
                    "tailpilot.io", "v1alpha1", namespace, "inferenceservices", NAME, patch
                )
                alertmanager.fire(
                    {
                        "alertname": "TailPilotSLOBurnFast",
                        "namespace": namespace,
                        "inferenceservice": NAME,
                        # What the generated rule labels its alerts with: the operator takes an
                        # alert only for the service of that UID.
                        "tailpilot_service_uid": obj["metadata"]["uid"],
                        "severity": "critical",
                    }
                )
                eventually(
                    lambda: decisions_total(f"http://127.0.0.1:{metrics_port}/metrics") > before,
                    timeout=10,
                    description="a decision triggered by the alert",
                )
                text = httpx.get(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5).text
                assert re.search(r'tailpilot_webhook_requests_total\{result="accepted"\} [1-9]', text), text
        finally:
            alertmanager.stop()
            prometheus.stop()
    assert not load.result.failures[:1], load.result.failures[:3]


def test_an_engine_without_a_profile_still_scales_on_the_service_time_learned_from_its_pods(
    k8s, crds, namespace, engine_store, tmp_path
):
    core, apps = client.CoreV1Api(k8s), client.AppsV1Api(k8s)
    repo = triton_fixtures.write_repository(
        tmp_path / "repo", batching=BatchingConfig(max_batch_size=1), base_ms=BASE_MS
    )
    with TritonServer(repo, work_dir=tmp_path / "triton") as triton:
        prometheus = LocalPrometheus(tmp_path / "prometheus").start()
        try:
            prometheus.set_targets(
                [
                    (
                        triton.metrics_url.split("//")[1].split("/")[0],
                        {"namespace": namespace, "inferenceservice": NAME, "pod": f"{NAME}-local-0"},
                    )
                ]
            )
            args = ["--prometheus-url", prometheus.url, "--control-period-seconds", "3"]
            with OperatorProcess(crds, namespace=namespace, log_dir=tmp_path, extra_args=args):
                client.CustomObjectsApi(k8s).create_namespaced_custom_object(
                    "tailpilot.io", "v1alpha1", namespace, "inferenceservices", service(namespace)
                )
                play_build(core, running_build_pod(core, namespace), result=echo_result())
                # The profile Job fails: the engine serves without a profile.
                failed = {"outcome": "Failed", "reason": "ProfileFailed", "message": "Triton did not start"}
                play_build(
                    core, running_profile_pod(core, namespace), exit_code=1, message=json.dumps(failed)
                )

                def waiting_for_traffic():
                    cond = condition(custom_object(k8s, namespace, NAME), "ScalingActive")
                    return cond if cond and cond["reason"] == "LearningServiceTime" else None

                # No profile and no requests yet: nothing to size with, and the status says so.
                eventually(waiting_for_traffic, timeout=90, description="ScalingActive LearningServiceTime")
                assert "profile" not in custom_object(k8s, namespace, NAME)["status"]

                # The same overload: the service time comes from the replica's own counters.
                load, _ = overload_until_scaled_out(apps, namespace, triton.http_url)
            status = custom_object(k8s, namespace, NAME)["status"]
            learned = status["learned"]
            # From the windows in which the one real replica ran with a queue, before the simulated
            # replicas it asked for (which serve nothing) joined: at least the echo model's 20 ms a
            # request (the first such window also holds the seconds before the load began, so it
            # reads long; on real pods later windows set it, tests/real_pods/test_no_profile.py).
            assert learned["serviceTimeFit"] in ("Provisional", "Fitted"), learned
            assert learned["serviceTimeWindows"] >= 1, learned
            fitted_ms = learned["serviceTime"]["interceptMs"] + learned["serviceTime"]["perItemMs"]
            assert fitted_ms >= BASE_MS, learned
            accurate = condition(custom_object(k8s, namespace, NAME), "ProfileAccurate")
            assert accurate is not None and (accurate["status"], accurate["reason"]) == ("False", "NoProfile")
            active = condition(custom_object(k8s, namespace, NAME), "ScalingActive")
            assert active is not None and active["status"] == "True", active
        finally:
            prometheus.stop()
    assert not load.result.failures[:1], load.result.failures[:3]
