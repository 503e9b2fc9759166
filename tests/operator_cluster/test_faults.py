"""Faults on the local cluster with the real operator process: each ends converged.

- A full engine store: the new build fails `EngineStoreFull` (its Job's result, as the builder
  writes it); the engine serving keeps serving, the Deployment untouched, and the failure is on the
  object and in an Event; the retry that succeeds rolls out.
- The API server restarted (stopped by PID, started with the same flags) while services are being
  reconciled: the operator neither exits nor loses its watches (a service created afterwards is
  picked up before any resync), and every service converges with no duplicate or orphaned child.
- Prometheus stopped for exactly 120 s while a scale-down comes due: the autoscaler holds the replicas
  for the whole outage (MetricsMissing or MetricsStale: the last decision's reason, and the start
  of ScalingActive's message) and scales down once the data is back.

SIGKILLs of the operator during builds, rollouts and rebatches are in `test_crash_recovery.py`,
the leader killed with two replicas in `test_leader_election.py`.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from kubernetes import client

from tailpilot.api.autoscaling import BatchingConfig
from tailpilot.api.engine import BuildOutcome, BuildResult
from tailpilot.builders.errors import ENGINE_STORE_FULL
from tailpilot.builders.triton_server import TritonServer
from tailpilot_e2e.monitoring import LocalPrometheus
from tailpilot_e2e.operator_harness import (
    OperatorProcess,
    condition,
    custom_object,
    free_port,
    play_build,
    play_engine_jobs,
    play_profile,
    running_build_pod,
)
from tailpilot_e2e.wait import eventually
from tests.controllers import triton_fixtures

from .children import assert_converged_children
from .conftest import GPU_PROFILE, gpu_build_result
from .test_autoscaling import ECHO_PROFILE, echo_result

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

#: The outage the issue names: Prometheus away for two minutes.
OUTAGE_S = 120.0


def create(k8s: client.ApiClient, obj: dict) -> None:
    client.CustomObjectsApi(k8s).create_namespaced_custom_object(
        "tailpilot.io", "v1alpha1", obj["metadata"]["namespace"], "inferenceservices", obj
    )


def ready(k8s: client.ApiClient, namespace: str, name: str) -> dict | None:
    obj = custom_object(k8s, namespace, name)
    cond = condition(obj, "Ready") or {}
    seen = (obj.get("status") or {}).get("observedGeneration") == obj["metadata"]["generation"]
    return obj if cond.get("status") == "True" and seen else None


def test_a_full_store_fails_the_new_build_while_the_serving_engine_keeps_serving(
    k8s, namespace, operator, example
):
    core, apps = client.CoreV1Api(k8s), client.AppsV1Api(k8s)
    isvc = example("gpu-tensorrt-h100.yaml", namespace=namespace)
    name = isvc["metadata"]["name"]
    create(k8s, isvc)
    play_build(core, running_build_pod(core, namespace), result=gpu_build_result("1" * 32))
    play_profile(core, namespace, GPU_PROFILE)
    eventually(lambda: ready(k8s, namespace, name), timeout=90, description="Ready on engine 1")
    before = apps.read_namespaced_deployment(name, namespace)

    # A new engine is asked for; its build finds the store full, as the builder reports it.
    client.CustomObjectsApi(k8s).patch_namespaced_custom_object(
        "tailpilot.io",
        "v1alpha1",
        namespace,
        "inferenceservices",
        name,
        {"spec": {"engine": {"precision": "fp32"}}},
    )
    full = BuildResult(
        outcome=BuildOutcome.FAILED,
        reason=ENGINE_STORE_FULL,
        message="the engine store is full: 12 KiB free of 10 GiB on /mnt/pvc/tailpilot-engines",
    )
    first = running_build_pod(core, namespace)
    play_build(core, first, result=full)

    def store_full() -> dict | None:
        cond = condition(custom_object(k8s, namespace, name), "EngineReady") or {}
        return cond if cond.get("reason") == ENGINE_STORE_FULL else None

    cond = eventually(store_full, timeout=60, description="EngineReady=False EngineStoreFull")
    assert cond["status"] == "False" and "store is full" in cond["message"], cond
    warnings = [
        e.message
        for e in core.list_namespaced_event(namespace, field_selector=f"involvedObject.name={name}").items
        if e.reason == ENGINE_STORE_FULL and e.type == "Warning"
    ]
    assert warnings and "store is full" in warnings[0], warnings
    # The engine serving keeps serving: the Deployment is the one before, its pod available.
    after = apps.read_namespaced_deployment(name, namespace)
    assert after.metadata.generation == before.metadata.generation
    assert after.spec.template == before.spec.template
    assert after.metadata.annotations["tailpilot.io/engine-key"] == "1" * 32
    assert after.status.available_replicas == 1
    assert custom_object(k8s, namespace, name)["status"]["engine"]["key"] == "1" * 32

    # The build is backed off and retried; once space is free, the retry rolls the new engine out.
    retry = running_build_pod(core, namespace, timeout=60)
    assert retry.metadata.uid != first.metadata.uid
    play_build(core, retry, result=gpu_build_result("2" * 32))
    play_profile(core, namespace, GPU_PROFILE)
    rolled = eventually(
        lambda: (obj := ready(k8s, namespace, name)) and obj["status"]["engine"]["key"] == "2" * 32 and obj,
        timeout=90,
        description="the retried build served",
    )
    assert condition(rolled, "EngineReady")["status"] == "True"
    assert_converged_children(k8s, namespace, [name], engines=2)


def test_an_api_server_restart_during_reconciles_converges_without_duplicates(
    k8s, crds, namespace, engine_store, example
):
    core = client.CoreV1Api(k8s)
    played: set[str] = set()

    def play() -> int:
        return play_engine_jobs(
            core, namespace, played, build=lambda _: gpu_build_result(), profile=GPU_PROFILE
        )

    with OperatorProcess(crds, namespace=namespace, log_dir=crds.paths.root / "logs") as operator:
        for name in ("svc-a", "svc-b"):
            create(k8s, example("gpu-tensorrt-h100.yaml", namespace=namespace, name=name))
        # Builds done, profiles running: the restart lands amid Job creations, status writes and rollouts.
        eventually(lambda: play() and len(played) >= 2, timeout=60, description="both builds played")
        started = time.monotonic()
        crds.restart_apiserver()
        down_s = time.monotonic() - started
        assert operator.process is not None and operator.process.poll() is None, "the operator exited"

        # Its watches came back: a service created now is picked up well before the 60 s resync.
        create(k8s, example("gpu-tensorrt-h100.yaml", namespace=namespace, name="svc-c"))
        eventually(
            lambda: (
                core.list_namespaced_pod(
                    namespace, label_selector="tailpilot.io/inferenceservice=svc-c"
                ).items
            ),
            timeout=45,
            description="svc-c's build pod (the watch re-established)",
        )

        def all_ready() -> bool:
            play()
            return all(ready(k8s, namespace, n) for n in ("svc-a", "svc-b", "svc-c"))

        eventually(all_ready, timeout=120, description="every service Ready after the restart")
        kinds = assert_converged_children(k8s, namespace, ["svc-a", "svc-b", "svc-c"])
        assert kinds["Deployment"] == 3, kinds
        assert operator.process.poll() is None, "the operator exited"
    print(f"kube-apiserver down and back in {down_s:.1f} s")


def prometheus_targets(
    triton: TritonServer, namespace: str, pods: list[str]
) -> list[tuple[str, dict[str, str]]]:
    """The one Triton process scraped as each of the service's pods (no pod on a KWOK node runs one).

    One target per pod: a scrape that sees fewer pods than are Ready is partial, and the policy does
    not scale down on it (PodsUnobserved).
    """
    address = triton.metrics_url.split("//")[1].split("/")[0]
    return [
        (address, {"namespace": namespace, "inferenceservice": triton_fixtures.MODEL, "pod": p}) for p in pods
    ]


#: Decisions that hold for want of data: none may be the reason before the outage.
NO_DATA = {"MetricsMissing", "MetricsStale", "PodsUnobserved"}


def test_prometheus_down_for_two_minutes_holds_the_replicas_then_the_autoscaler_resumes(
    k8s, crds, namespace, engine_store, tmp_path: Path
):
    """Three replicas with no traffic: a scale-down is due after 45 s, but not on missing data."""
    core, apps = client.CoreV1Api(k8s), client.AppsV1Api(k8s)
    name = triton_fixtures.MODEL
    repo = triton_fixtures.write_repository(tmp_path / "repo", batching=BatchingConfig(max_batch_size=1))
    service = triton_fixtures.echo_service(
        namespace,
        slo={"p99LatencyMs": 100, "evaluationWindowSeconds": 10},
        autoscaling={"minReplicas": 1, "maxReplicas": 4, "scaleDownStabilizationSeconds": 45},
    )
    service["spec"]["replicas"] = 3
    prometheus = LocalPrometheus(tmp_path / "prometheus")
    with TritonServer(repo, work_dir=tmp_path / "triton") as triton:
        prometheus.start()
        try:
            args = ["--prometheus-url", prometheus.url, "--control-period-seconds", "3",
                    "--metrics-port", str(free_port()), "--bind-address", "127.0.0.1"]  # fmt: skip
            with OperatorProcess(crds, namespace=namespace, log_dir=tmp_path, extra_args=args) as operator:
                create(k8s, service)
                play_build(core, running_build_pod(core, namespace), result=echo_result())
                play_profile(core, namespace, ECHO_PROFILE)
                selector = (
                    f"tailpilot.io/inferenceservice={name},app.kubernetes.io/component=inference-server"
                )
                pods = eventually(
                    lambda: (
                        (found := core.list_namespaced_pod(namespace, label_selector=selector).items)
                        and len(found) == 3
                        and all(p.status.phase == "Running" for p in found)
                        and sorted(p.metadata.name for p in found)
                    ),
                    timeout=90,
                    description="three serving pods",
                )
                prometheus.set_targets(prometheus_targets(triton, namespace, pods))

                def deciding_on_data() -> dict | None:
                    obj = custom_object(k8s, namespace, name)
                    decision = (obj.get("status") or {}).get("lastDecision") or {}
                    cond = condition(obj, "ScalingActive") or {}
                    on_data = decision.get("reason") not in NO_DATA | {None}
                    return decision if cond.get("status") == "True" and on_data else None

                before = eventually(deciding_on_data, timeout=60, description="a decision on the pods' data")
                assert apps.read_namespaced_deployment(name, namespace).spec.replicas == 3, before

                # Prometheus away for exactly OUTAGE_S, the replicas watched the whole time.
                prometheus.stop()
                stopped = time.monotonic()
                held: set[str] = set()

                def outage_over() -> bool:
                    obj = custom_object(k8s, namespace, name)
                    replicas = apps.read_namespaced_deployment(name, namespace).spec.replicas
                    assert replicas == 3 and obj["status"]["replicas"] == 3, f"scaled to {replicas} blind"
                    # Each decision holds and says why, on ScalingActive and as the last decision.
                    cond, decision = condition(obj, "ScalingActive") or {}, obj["status"]["lastDecision"]
                    if cond.get("message", "").startswith(f"{decision['reason']}: "):
                        held.add(decision["reason"])
                    return time.monotonic() - stopped >= OUTAGE_S

                eventually(outage_over, timeout=OUTAGE_S + 30, interval=1, description="the outage")
                assert held & {"MetricsMissing", "MetricsStale"}, held
                assert operator.process is not None and operator.process.poll() is None
                prometheus.start().set_targets(prometheus_targets(triton, namespace, pods))
                outage_s = time.monotonic() - stopped

                # Data again: no traffic for the stabilization window, then the scale-down.
                def scaled_down() -> bool:
                    deployment = apps.read_namespaced_deployment(name, namespace)
                    return bool(deployment.spec.replicas < 3)

                eventually(
                    scaled_down, timeout=120, interval=1, description="the scale-down after the outage"
                )
                decision = custom_object(k8s, namespace, name)["status"]["lastDecision"]
                assert decision["action"].startswith("ScaleDown"), json.dumps(decision)
        finally:
            prometheus.stop()
    print(f"before: {before['reason']}; Prometheus down for {outage_s:.0f} s, held with {sorted(held)}")
