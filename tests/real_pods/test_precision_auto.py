"""`precision: auto` on real pods: FP32 and INT8 engines built, checked and profiled for real, one served.

The CPU example with `precision: auto`. On local-0 the build Jobs optimize the example model in
FP32 and quantize it to INT8, each run beside the FP32 model on the same inputs by the accuracy
guard; the profile Jobs measure each engine in the service's own Triton container under its CPU
limit, one after the other. The operator serves the engine needing the fewest replicas for the
SLO (at no load, the one with more capacity per replica), with every candidate's figures on the
status, and the served engine answers.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from kubernetes import client

from tailpilot_e2e.cluster import LocalCluster
from tailpilot_e2e.operator_harness import OperatorProcess, condition, custom_object
from tailpilot_e2e.real_pods import cpu_example, infer, prepare_storage, ready_endpoints
from tailpilot_e2e.wait import eventually

pytestmark = [pytest.mark.cluster, pytest.mark.slow]
NAME = "mlp-auto"


def serving(api: client.ApiClient, ns: str) -> dict | None:  # type: ignore[type-arg]
    obj = custom_object(api, ns, NAME)
    ready = (condition(obj, "Ready") or {}).get("status") == "True"
    rolled = (condition(obj, "RolloutReady") or {}).get("status") == "True"
    return obj if ready and rolled else None


def test_auto_precision_builds_profiles_and_serves_one_with_its_reasons(
    real_cluster: LocalCluster,
    real_api: client.ApiClient,
    real_namespace: str,
    operator: OperatorProcess,
    tmp_path: Path,
) -> None:
    core, ns = client.CoreV1Api(real_api), real_namespace
    prepare_storage(core, ns, tmp_path)
    service = cpu_example(ns, name=NAME)
    service["spec"]["engine"]["precision"] = "auto"
    client.CustomObjectsApi(real_api).create_namespaced_custom_object(
        "tailpilot.io", "v1alpha1", ns, "inferenceservices", service
    )
    obj = eventually(lambda: serving(real_api, ns), timeout=600, interval=1.0, description=f"{NAME} Ready")

    choice = obj["status"]["precision"]
    print("status.precision:", json.dumps(choice, indent=1))  # the figures, shown with pytest -rP
    assert choice["reason"] == "FewestReplicasForSLO", choice
    by = {x["precision"]: x for x in choice["candidates"]}
    assert set(by) == {"fp32", "int8"}
    chosen, other = by[choice["precision"]], by[{"fp32": "int8", "int8": "fp32"}[choice["precision"]]]
    assert (chosen["phase"], other["phase"]) == ("Serving", "Profiled"), choice
    # Both measured for real: distinct engines, each profiled, the INT8 one checked against FP32.
    assert chosen["engineKey"] != other["engineKey"]
    for candidate in (chosen, other):
        assert candidate["serviceTime"]["perItemMs"] > 0 or candidate["serviceTime"]["interceptMs"] > 0
        assert candidate["capacityPerReplicaPerS"] > 0
        assert candidate["replicasNeeded"] == 1  # at no load, the minimum
    int8 = by["int8"]["accuracy"]
    assert int8["checked"] and int8["samples"] > 0 and int8["maxRelativeError"] <= 0.1, int8
    # The choice: the more capacity per replica (both need the minimum at no load), its reasons kept.
    assert chosen["capacityPerReplicaPerS"] >= other["capacityPerReplicaPerS"]
    assert f"{other['precision']}: 1 replica(s)" in choice["message"], choice["message"]
    assert obj["status"]["engine"]["key"] == chosen["engineKey"]
    # Measured one at a time: the second profile Job started after the first had ended.
    jobs = (
        client.BatchV1Api(real_api)
        .list_namespaced_job(ns, label_selector="app.kubernetes.io/component=engine-profile")
        .items
    )
    assert len(jobs) == 2, [j.metadata.name for j in jobs]
    first, second = sorted(jobs, key=lambda j: j.status.start_time)
    assert second.status.start_time >= first.status.completion_time
    # The served engine answers.
    (endpoint,) = ready_endpoints(core, ns, NAME)
    logits = infer(endpoint)
    assert logits.size > 0
