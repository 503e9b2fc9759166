"""`precision: auto` on the local cluster: every precision built and profiled, the best accurate one served.

A CPU service on KWOK CPU nodes, its builds and profiles played (as in the other KWOK tests): FP32
and INT8 engines are built, each with the accuracy its build measured, and profiled; the INT8
engine (twice the capacity per replica, within the tolerance) serves, with every candidate's
figures on the status. When the INT8 build is refused by the accuracy guard, the FP32 engine serves
and the status keeps why INT8 was not.
"""

from __future__ import annotations

import json

import pytest
from kubernetes import client

from tailpilot.api.engine import (
    AccuracyReport,
    BuildOutcome,
    BuildResult,
    ProfileResult,
    ProfileSummary,
    ProfileSummaryPoint,
    ServiceTimeModel,
    TensorSpec,
)
from tailpilot_e2e.operator_harness import (
    condition,
    custom_object,
    dump,
    events_once,
    play_engine_pods,
    played_profile,
)
from tailpilot_e2e.wait import eventually

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

NAME = "mlp-auto"
ENGINE_KEYS = {"fp32": "f" * 32, "int8": "1" * 32}
ACCURACY = AccuracyReport(
    samples=64, inputs="generated", max_relative_error=0.03, mean_absolute_error=0.002, top1_agreement=0.94
)
PROFILES = {
    "fp32": ServiceTimeModel(intercept_ms=4.0, per_item_ms=2.0, jitter_cv=0.1),
    "int8": ServiceTimeModel(intercept_ms=2.0, per_item_ms=1.0, jitter_cv=0.1),
}


def auto_service(namespace: str) -> dict:
    return {
        "apiVersion": "tailpilot.io/v1alpha1",
        "kind": "InferenceService",
        "metadata": {"name": NAME, "namespace": namespace},
        "spec": {
            "model": {"uri": "https://models.example.com/mlp.onnx", "sha256": "0" * 64},
            "engine": {"backend": "onnxruntime", "precision": "auto"},
            "runtime": {"device": "cpu", "resources": {"limits": {"cpu": "2"}}},
            "batching": {"mode": "auto", "maxBatchSize": 8},
            "slo": {"p99LatencyMs": 50},
            "autoscaling": {"minReplicas": 1, "maxReplicas": 4},
        },
    }


def build_result(precision: str, *, refused: bool) -> BuildResult:
    if refused:
        return BuildResult(
            outcome=BuildOutcome.FAILED,
            reason="AccuracyOutOfTolerance",
            message="the int8 engine's outputs stray from the FP32 model's on 64 generated inputs: top-1 "
            "agreement 3.1% < 90%",
        )
    tensor = TensorSpec(name="x", data_type="TYPE_FP32", dims=(16,))
    return BuildResult(
        outcome=BuildOutcome.SUCCEEDED,
        engine_key=ENGINE_KEYS[precision],
        artifact=f"pvc://tailpilot-engines/{ENGINE_KEYS[precision]}",
        triton_backend="onnxruntime",
        inputs=(tensor,),
        outputs=(tensor,),
        accuracy=ACCURACY if precision == "int8" else AccuracyReport(samples=64, inputs="generated"),
    )


def play_candidates(core: client.CoreV1Api, namespace: str, played: set[str], *, refuse_int8: bool) -> int:
    """Finish every running build and profile pod with its precision's result."""
    by_engine = {v: k for k, v in ENGINE_KEYS.items()}

    def result(pod: client.V1Pod, component: str) -> BuildResult | ProfileResult:
        args = next(c for c in pod.spec.containers if c.name != "triton").args
        request = json.loads(args[args.index("--request") + 1])
        if component == "engine-build":
            precision = request["precision"]
            return build_result(precision, refused=refuse_int8 and precision == "int8")
        fit = PROFILES[by_engine[request["engineKey"]]]
        points = [
            ProfileSummaryPoint(
                batch_size=b, p99_ms=fit.mean_ms(b) * 1.3, throughput_per_s=1000 * b / fit.mean_ms(b)
            )
            for b in (1, 4, 8)
        ]
        return played_profile(pod, ProfileSummary(hardware="cpu", service_time=fit, points=points))

    return play_engine_pods(core, namespace, played, result)


def serve(k8s, namespace: str, *, refuse_int8: bool) -> dict:
    core = client.CoreV1Api(k8s)
    client.CustomObjectsApi(k8s).create_namespaced_custom_object(
        "tailpilot.io", "v1alpha1", namespace, "inferenceservices", auto_service(namespace)
    )
    played: set[str] = set()

    def ready():
        play_candidates(core, namespace, played, refuse_int8=refuse_int8)
        obj = custom_object(k8s, namespace, NAME)
        cond = condition(obj, "Ready")
        return obj if cond and cond["status"] == "True" else None

    return eventually(ready, timeout=120, interval=0.5, description=f"{NAME} Ready")


def test_auto_precision_serves_the_accurate_engine_with_the_most_capacity(k8s, namespace, operator):
    obj = serve(k8s, namespace, refuse_int8=False)
    choice = obj["status"]["precision"]
    assert (choice["precision"], choice["reason"]) == ("int8", "FewestReplicasForSLO"), dump(choice)
    by = {x["precision"]: x for x in choice["candidates"]}
    assert by["int8"]["phase"] == "Serving" and by["fp32"]["phase"] == "Profiled", dump(choice)
    assert by["int8"]["accuracy"]["top1Agreement"] == 0.94
    assert by["int8"]["capacityPerReplicaPerS"] > by["fp32"]["capacityPerReplicaPerS"] > 0
    assert "fp32: 1 replica(s)" in choice["message"], choice["message"]
    assert obj["status"]["engine"]["key"] == ENGINE_KEYS["int8"]
    deployment = client.AppsV1Api(k8s).read_namespaced_deployment(NAME, namespace)
    assert ENGINE_KEYS["int8"] in json.dumps(deployment.spec.template.to_dict())
    events_once(
        client.CoreV1Api(k8s),
        namespace,
        lambda es: any(e.reason == "FewestReplicasForSLO" and "int8" in e.message for e in es),
        name=NAME,
        description="the FewestReplicasForSLO Event",
    )


def test_an_int8_engine_refused_by_the_accuracy_guard_leaves_fp32_serving_and_says_why(
    k8s, namespace, operator
):
    obj = serve(k8s, namespace, refuse_int8=True)
    choice = obj["status"]["precision"]
    assert choice["precision"] == "fp32", dump(choice)
    by = {x["precision"]: x for x in choice["candidates"]}
    assert by["int8"]["phase"] == "Failed" and "top-1 agreement 3.1% < 90%" in by["int8"]["message"], dump(by)
    assert "int8:" in choice["message"] and "3.1%" in choice["message"]
    assert obj["status"]["engine"]["key"] == ENGINE_KEYS["fp32"]
