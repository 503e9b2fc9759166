"""A service allowed several GPU products lands on the cheapest one that holds its SLO.

On the local cluster's KWOK H100 and L4 nodes, with each product's build and profile played (no GPU
here): the engines of both products are built and profiled up front, on their own product's nodes,
and the service is served on the cheaper one. With no free GPU of that product, the other serves,
and the condition says why.
"""

from __future__ import annotations

import copy
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, watch

from tailpilot.api.autoscaling import BatchingConfig
from tailpilot.api.engine import (
    BuildResult,
    ProfileResult,
    ProfileSummary,
    ProfileSummaryPoint,
    ServiceTimeModel,
)
from tailpilot.builders.triton_server import TritonServer
from tailpilot_e2e.monitoring import LocalPrometheus
from tailpilot_e2e.operator_harness import (
    RESNET_H100_PROFILE,
    OperatorProcess,
    condition,
    custom_object,
    dump,
    events_once,
    play_engine_pods,
    played_profile,
)
from tailpilot_e2e.wait import eventually
from tests.controllers import triton_fixtures

from .conftest import gpu_build_result
from .test_autoscaling import echo_result

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

H100, L4 = "NVIDIA-H100-80GB-HBM3", "NVIDIA-L4"
#: Where the console scripts are, `kubectl-tailpilot` among them (the plugin kubectl finds on the PATH).
VENV_BIN = Path(sys.executable).parent
PRODUCT_LABEL = "nvidia.com/gpu.product"

#: The same plan on an L4: about 4x the H100's time per batch (played, as its profile Job would report it).
RESNET_L4_PROFILE = ProfileSummary(
    hardware=L4,
    service_time=ServiceTimeModel(intercept_ms=4.8, per_item_ms=0.44, jitter_cv=0.05),
    points=[
        ProfileSummaryPoint(
            batch_size=b,
            p99_ms=round(5.2 + 0.48 * b, 3),
            throughput_per_s=round(b / (4.8 + 0.44 * b) * 1000, 1),
        )
        for b in (1, 8, 32, 64)
    ],
)
PROFILES = {H100: RESNET_H100_PROFILE, L4: RESNET_L4_PROFILE}


def any_gpu_service(example, namespace: str, *, prices: bool = True) -> dict:
    isvc = copy.deepcopy(example("gpu-cheapest-product.yaml", namespace=namespace))
    if not prices:
        for option in isvc["spec"]["runtime"]["gpu"]["products"]:
            option.pop("pricePerHour")
    return isvc


def play_products(core: client.CoreV1Api, namespace: str, played: set[str]) -> int:
    """Finish every running build and profile pod with its own product's result."""

    def result(pod: client.V1Pod, component: str) -> BuildResult | ProfileResult:
        product = pod.spec.node_selector[PRODUCT_LABEL]
        assert pod.spec.node_name.startswith("gpu-h100-" if product == H100 else "gpu-l4-"), dump(pod.spec)
        if component == "engine-build":
            return gpu_build_result(engine_key=("a" if product == H100 else "b") * 32)
        return played_profile(pod, PROFILES[product])

    return play_engine_pods(core, namespace, played, result)


def create(k8s, isvc: dict) -> None:
    client.CustomObjectsApi(k8s).create_namespaced_custom_object(
        "tailpilot.io", "v1alpha1", isvc["metadata"]["namespace"], "inferenceservices", isvc
    )


def served_on(k8s, apps, namespace: str, name: str, *, played: set[str]) -> dict:
    """Play the engine Jobs until the service is Ready; its status then."""
    core = client.CoreV1Api(k8s)

    def ready():
        play_products(core, namespace, played)
        obj = custom_object(k8s, namespace, name)
        cond = condition(obj, "Ready")
        return obj if cond and cond["status"] == "True" else None

    return eventually(ready, timeout=120, interval=0.5, description=f"{name} Ready")


def test_a_service_allowed_h100_and_l4_is_built_on_both_and_served_on_the_cheaper(
    k8s, crds, namespace, operator, example
):
    apps, batch = client.AppsV1Api(k8s), client.BatchV1Api(k8s)
    isvc = any_gpu_service(example, namespace)
    name = isvc["metadata"]["name"]
    create(k8s, isvc)
    played: set[str] = set()
    obj = served_on(k8s, apps, namespace, name, played=played)

    gpu = obj["status"]["gpu"]
    assert gpu["product"] == L4, dump(gpu)
    assert gpu["reason"] == "PlacedOnCheapest"
    # Both products' engines were built and profiled, each on its own product's nodes.
    jobs = batch.list_namespaced_job(namespace).items
    products = sorted(
        (j.metadata.labels["app.kubernetes.io/component"], j.spec.template.spec.node_selector[PRODUCT_LABEL])
        for j in jobs
    )
    assert products == sorted(
        [("engine-build", H100), ("engine-build", L4), ("engine-profile", H100), ("engine-profile", L4)]
    ), products
    by_product = {x["product"]: x for x in gpu["candidates"]}
    assert by_product[L4]["phase"] == "Serving" and by_product[H100]["phase"] == "Profiled", dump(gpu)
    assert by_product[L4]["pricePerHour"] == 0.8 and by_product[H100]["pricePerHour"] == 4.0
    # The H100 holds more per replica; at no load one replica of either holds the SLO, the L4's for less.
    assert by_product[H100]["capacityPerReplicaPerS"] > 2 * by_product[L4]["capacityPerReplicaPerS"] > 0
    assert by_product[L4]["engineKey"] != by_product[H100]["engineKey"]
    # Served on the L4: its engine and its profile, its pods pinned to L4 nodes.
    assert obj["status"]["profile"]["hardware"] == L4
    assert obj["status"]["engine"]["key"] == by_product[L4]["engineKey"]
    deployment = apps.read_namespaced_deployment(name, namespace)
    assert deployment.spec.template.spec.node_selector[PRODUCT_LABEL] == L4
    chosen = condition(obj, "GpuProductChosen")
    assert chosen["status"] == "True" and chosen["reason"] == "PlacedOnCheapest", chosen
    assert "serving on NVIDIA-L4" in chosen["message"] and H100 in chosen["message"]
    events_once(
        client.CoreV1Api(k8s),
        namespace,
        lambda es: any(e.reason == "PlacedOnCheapest" and L4 in e.message for e in es),
        name=name,
        description="the PlacedOnCheapest Event",
    )

    # The same, as a user reads it: kubectl's plugin mechanism runs `kubectl-tailpilot status`.
    path = f"{VENV_BIN}:{os.environ['PATH']}"
    shown = subprocess.run(  # noqa: S603
        [str(crds.binaries.kubectl), "tailpilot", "status", name, "-n", namespace],
        env={**os.environ, "KUBECONFIG": str(crds.paths.kubeconfig), "PATH": path},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert shown.returncode == 0, shown.stderr
    assert f"{name} in {namespace}: Ready True" in shown.stdout, shown.stdout
    assert "GPU         NVIDIA-L4 (PlacedOnCheapest)" in shown.stdout, shown.stdout
    assert H100 in shown.stdout and "$0.80/GPU-h" in shown.stdout


def test_with_no_free_l4_the_service_serves_on_h100_and_says_why(
    k8s, crds, namespace, engine_store, tmp_path, example
):
    core, apps = client.CoreV1Api(k8s), client.AppsV1Api(k8s)
    l4_nodes = [n.metadata.name for n in core.list_node(label_selector=f"{PRODUCT_LABEL}={L4}").items]
    assert l4_nodes
    # Prices from the operator's table (the chart's gpuPrices) this time, not from the spec.
    args = ["--gpu-price", f"{H100}=4.0", "--gpu-price", f"{L4}=0.8"]
    try:
        for node in l4_nodes:
            core.patch_node(node, {"spec": {"unschedulable": True}})
        with OperatorProcess(crds, namespace=namespace, log_dir=tmp_path, extra_args=args):
            isvc = any_gpu_service(example, namespace, prices=False)
            name = isvc["metadata"]["name"]
            create(k8s, isvc)
            played: set[str] = set()
            obj = served_on(k8s, apps, namespace, name, played=played)
            gpu = obj["status"]["gpu"]
            assert gpu["product"] == H100, dump(gpu)
            by_product = {x["product"]: x for x in gpu["candidates"]}
            assert by_product[L4]["phase"] == "NoCapacity" and by_product[L4]["replicasAvailable"] == 0
            assert by_product[L4]["pricePerHour"] == 0.8, dump(by_product)
            # Nothing was started on the L4s: no Job would have been scheduled.
            jobs = client.BatchV1Api(k8s).list_namespaced_job(namespace).items
            assert {j.spec.template.spec.node_selector[PRODUCT_LABEL] for j in jobs} == {H100}
            chosen = condition(obj, "GpuProductChosen")
            assert chosen["status"] == "True", chosen
            assert f"no node of {L4} has a free GPU" in chosen["message"], chosen
            assert (
                apps.read_namespaced_deployment(name, namespace).spec.template.spec.node_selector[
                    PRODUCT_LABEL
                ]
                == H100
            )
    finally:
        for node in l4_nodes:
            core.patch_node(node, {"spec": {"unschedulable": False}})


#: The echo model's engine on each product, as the profile Jobs would report it: on an L4 it needs
#: 62 ms a request, so two replicas (the bound) cannot hold a 100 ms P99 at 30 requests/s; on an
#: H100, 5 ms.
ECHO_PROFILES = {
    L4: ProfileSummary(
        hardware=L4,
        service_time=ServiceTimeModel(intercept_ms=60.0, per_item_ms=2.0, jitter_cv=0.05),
        points=[ProfileSummaryPoint(batch_size=1, p99_ms=70.0, throughput_per_s=16.0)],
    ),
    H100: ProfileSummary(
        hardware=H100,
        service_time=ServiceTimeModel(intercept_ms=4.0, per_item_ms=1.0, jitter_cv=0.05),
        points=[ProfileSummaryPoint(batch_size=1, p99_ms=6.0, throughput_per_s=200.0)],
    ),
}


def echo_on_any_gpu(namespace: str) -> dict:
    isvc = triton_fixtures.echo_service(
        namespace,
        slo={"p99LatencyMs": 100, "evaluationWindowSeconds": 10},
        autoscaling={"minReplicas": 1, "maxReplicas": 2},
    )
    isvc["spec"]["runtime"] = {
        "device": "gpu",
        "servingVariant": "python",
        "gpu": {"products": [{"name": H100}, {"name": L4}], "count": 1},
    }
    return isvc


@pytest.mark.triton
@pytest.mark.prometheus
@dataclass(frozen=True)
class ReplicaSetSeen:
    """One watch event of a ReplicaSet, as the hand-over's checks read it."""

    kind: str
    name: str
    product: str | None
    replicas: int
    ready: int
    owner: str | None
    released: bool


class ReplicaSetLog:
    """Every ReplicaSet event of a namespace, in the API server's order, while the block runs.

    One watch stream keeps every change (a poll could miss an old ReplicaSet scaled down and back).
    Bounded: the stream ends after `timeout_s` at the latest, and the thread is a daemon.
    """

    def __init__(self, apps: client.AppsV1Api, namespace: str, *, timeout_s: int = 240) -> None:
        self.seen: list[ReplicaSetSeen] = []
        #: What ended the stream early, while the block still ran (None: nothing did).
        self.failure: Exception | None = None
        self._stopped = threading.Event()
        self._watch = watch.Watch()
        start = apps.list_namespaced_replica_set(namespace).metadata.resource_version
        self._thread = threading.Thread(
            target=self._follow, args=(apps, namespace, start, timeout_s), daemon=True
        )

    def _follow(self, apps: client.AppsV1Api, namespace: str, start: str, timeout_s: int) -> None:
        stream = self._watch.stream(
            apps.list_namespaced_replica_set, namespace, resource_version=start, timeout_seconds=timeout_s
        )
        try:
            self._record(stream)
        except Exception as error:  # the connection closed under it: a failure only while watched
            if not self._stopped.is_set():
                self.failure = error

    def _record(self, stream: Iterator[dict[str, Any]]) -> None:
        for event in stream:
            rs = event["object"]
            owner = next((r.kind for r in rs.metadata.owner_references or [] if r.controller), None)
            self.seen.append(
                ReplicaSetSeen(
                    kind=event["type"],
                    name=rs.metadata.name,
                    product=(rs.spec.template.spec.node_selector or {}).get(PRODUCT_LABEL),
                    replicas=rs.spec.replicas or 0,
                    ready=rs.status.ready_replicas or 0,
                    owner=owner,
                    released=(rs.metadata.labels or {}).get("tailpilot.io/released-by-move") == "true",
                )
            )

    def __enter__(self) -> ReplicaSetLog:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stopped.set()
        self._watch.stop()


def test_a_load_the_l4s_cannot_carry_moves_the_service_to_h100_at_its_size_while_the_l4s_serve(
    k8s, crds, namespace, engine_store, tmp_path
):
    """Real Triton metrics in a real Prometheus show a rate two L4 replicas cannot hold: the service moves.

    The H100 needs fewer replicas than the L4s serve: its own fleet starts, and the L4 pods (their
    ReplicaSet released from the Deployment) serve, never scaled down, until it is ready.
    """
    core, apps = client.CoreV1Api(k8s), client.AppsV1Api(k8s)
    repo = triton_fixtures.write_repository(
        tmp_path / "repo", batching=BatchingConfig(max_batch_size=1), base_ms=20.0
    )
    with TritonServer(repo, work_dir=tmp_path / "triton") as triton:
        prometheus = LocalPrometheus(tmp_path / "prometheus").start()
        try:
            target = triton.metrics_url.split("//")[1].split("/")[0]
            labels = {"namespace": namespace, "inferenceservice": triton_fixtures.MODEL}
            prometheus.set_targets([(target, {**labels, "pod": f"{triton_fixtures.MODEL}-local-0"})])
            args = [
                "--prometheus-url",
                prometheus.url,
                "--control-period-seconds",
                "3",
                "--gpu-price",
                f"{H100}=4.0",
                "--gpu-price",
                f"{L4}=0.8",
            ]
            with OperatorProcess(crds, namespace=namespace, log_dir=tmp_path, extra_args=args):
                create(k8s, echo_on_any_gpu(namespace))
                name = triton_fixtures.MODEL
                played: set[str] = set()

                def ready_and_scaling():
                    play_echo(core, namespace, played)
                    obj = custom_object(k8s, namespace, name)
                    cond = condition(obj, "ScalingActive")
                    return obj if cond and cond["status"] == "True" else None

                obj = eventually(ready_and_scaling, timeout=120, interval=0.5, description="ScalingActive")
                assert obj["status"]["gpu"]["product"] == L4, dump(obj["status"]["gpu"])
                before = apps.read_namespaced_deployment(name, namespace).spec.replicas

                load = triton_fixtures.BoundedLoad(
                    [triton.http_url], workers=6, rate_per_worker=6, max_requests=2400, max_seconds=60
                )
                with ReplicaSetLog(apps, namespace) as replica_sets, load:

                    def moved():
                        obj = custom_object(k8s, namespace, name)
                        gpu = obj["status"].get("gpu") or {}
                        return obj if gpu.get("product") == H100 else None

                    obj = eventually(moved, timeout=50, interval=0.5, description="a move to H100")
                    gpu = obj["status"]["gpu"]
                    assert gpu["reason"] == "MovedForCapacity", dump(gpu)
                    assert "NVIDIA-L4 cannot hold the SLO" in gpu["message"], gpu["message"]
                    move = obj["status"]["decisions"][-1]
                    assert (move["action"], move["reason"], move["gpuProduct"]) == (
                        "MoveGpuProduct",
                        "MovedForCapacity",
                        H100,
                    ), move
                    # The H100's own fleet: one of its replicas serves what the L4s could not.
                    assert move["replicasAfter"] == 1 and move["replicasBefore"] >= before, move

                    def move_done():
                        d = apps.read_namespaced_deployment(name, namespace)
                        gpu = custom_object(k8s, namespace, name)["status"]["gpu"]
                        settled = d.spec.strategy.rolling_update.max_surge == 1 and not gpu.get("movingTo")
                        return d if settled else None

                    # Once every pod runs on the H100, the surge of the move goes back to one pod.
                    deployment = eventually(
                        move_done, timeout=60, interval=0.5, description="the move completed"
                    )
                assert replica_sets.failure is None, replica_sets.failure
                assert (deployment.spec.template.spec.node_selector or {}).get(PRODUCT_LABEL) == H100
                assert not deployment.spec.paused
                l4 = [s for s in replica_sets.seen if s.product == L4]
                # The L4 pods are never scaled down (not even to the H100's count) before they go.
                counts = [s.replicas for s in l4 if s.kind != "DELETED"]
                assert counts and counts == sorted(counts) and counts[-1] >= before, l4
                released = [s for s in l4 if s.released]
                assert released and all(s.owner == "InferenceService" for s in released), l4
                gone = next(
                    i for i, s in enumerate(replica_sets.seen) if s.kind == "DELETED" and s.product == L4
                )
                h100 = [s for s in replica_sets.seen[:gone] if s.product == H100]
                # The H100's fleet started at its own size, and the L4 pods went once it was ready.
                assert h100 and max(s.replicas for s in h100) == 1, replica_sets.seen
                assert h100[-1].ready >= h100[-1].replicas == 1, replica_sets.seen
                served = eventually(
                    lambda: (
                        (p := custom_object(k8s, namespace, name)["status"].get("profile"))
                        and p["hardware"] == H100
                        and p
                    ),
                    timeout=30,
                    description="the H100 engine's profile served",
                )
                assert served["serviceTime"]["interceptMs"] == 4.0
                events = core.list_namespaced_event(namespace, field_selector=f"involvedObject.name={name}")
                reasons = {e.reason for e in events.items}
                assert {"MovedForCapacity", "OldPodsKeptForMove", "OldPodsGoneAfterMove"} <= reasons, reasons
                blocked = condition(custom_object(k8s, namespace, name), "RolloutBlocked")
                assert blocked is None or blocked["status"] == "False", blocked
        finally:
            prometheus.stop()
    assert not load.result.failures[:1], load.result.failures[:3]


def play_echo(core: client.CoreV1Api, namespace: str, played: set[str]) -> int:
    """Finish running build and profile pods with the echo engine and its product's profile."""

    def result(pod: client.V1Pod, component: str) -> BuildResult | ProfileResult:
        product = pod.spec.node_selector[PRODUCT_LABEL]
        if component == "engine-build":
            return echo_result().model_copy(update={"engine_key": ("c" if product == H100 else "d") * 32})
        return played_profile(pod, ECHO_PROFILES[product])

    return play_engine_pods(core, namespace, played, result)
