"""The regression gate on real pods: a heavier model's engine, profiled for real, is held until accepted.

The CPU example serves the example model; a model update points it at a six times wider version of
the same network (measurably slower per request). Its build and profile Jobs run for real on
local-0; the profile says it is slower, so the operator holds it: both figures on the status, the
old engine serving every request meanwhile. The annotation accepts it; going back to the light
model is an engine the gate lets through by itself (faster than the one serving).
"""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from kubernetes import client

from tailpilot.builders import example_model
from tailpilot_e2e.cluster import LocalCluster
from tailpilot_e2e.operator_harness import OperatorProcess, condition, custom_object
from tailpilot_e2e.real_pods import cpu_example, infer, prepare_storage, ready_endpoints
from tailpilot_e2e.wait import eventually

pytestmark = [pytest.mark.cluster, pytest.mark.slow]
NAME = "mlp-gate"
LIGHT_URI = "pvc://models/mlp/model.onnx"
HEAVY_URI = "pvc://models/mlp-heavy/model.onnx"
#: Channel multiplier of the heavy model: about six times the light model's time per image.
HEAVY_WIDTH = 6


def set_model(api: client.ApiClient, ns: str, uri: str) -> None:
    client.CustomObjectsApi(api).patch_namespaced_custom_object(
        "tailpilot.io", "v1alpha1", ns, "inferenceservices", NAME, {"spec": {"model": {"uri": uri}}}
    )


def serving(api: client.ApiClient, ns: str, engine_key: str | None = None) -> dict | None:  # type: ignore[type-arg]
    """The object once Ready on the latest generation (and serving `engine_key`, if given)."""
    obj = custom_object(api, ns, NAME)
    ready = (condition(obj, "Ready") or {}).get("status") == "True"
    current = obj["status"].get("observedGeneration") == obj["metadata"]["generation"]
    key = (obj["status"].get("engine") or {}).get("key")
    engine_ok = engine_key is None or key == engine_key
    rolled = (condition(obj, "RolloutReady") or {}).get("status") == "True"
    return obj if ready and current and engine_ok and rolled else None


def test_a_heavier_model_is_held_while_the_old_engine_serves_then_accepted(
    real_cluster: LocalCluster,
    real_api: client.ApiClient,
    real_namespace: str,
    operator: OperatorProcess,
    tmp_path: Path,
) -> None:
    core, ns = client.CoreV1Api(real_api), real_namespace
    prepare_storage(core, ns, tmp_path)
    example_model.write_example_model(tmp_path / "models" / "mlp-heavy" / "model.onnx", width=HEAVY_WIDTH)
    service = cpu_example(ns, name=NAME)
    client.CustomObjectsApi(real_api).create_namespaced_custom_object(
        "tailpilot.io", "v1alpha1", ns, "inferenceservices", service
    )
    first = eventually(lambda: serving(real_api, ns), timeout=420, description="the light model Ready")
    light_key = first["status"]["engine"]["key"]
    (endpoint,) = ready_endpoints(core, ns, NAME)

    # The update to the heavier model: built and profiled for real, then held by the gate.
    set_model(real_api, ns, HEAVY_URI)
    answered, failed = 0, []

    def blocked_while_serving() -> dict | None:  # type: ignore[type-arg]
        nonlocal answered
        # The old engine keeps answering every request while the new one is built, profiled, held.
        try:
            infer(endpoint)
            answered += 1
        except (httpx.HTTPError, ValueError) as error:
            failed.append(repr(error))
        obj = custom_object(real_api, ns, NAME)
        cond = condition(obj, "RolloutBlocked") or {}
        return obj if cond.get("status") == "True" else None

    held = eventually(blocked_while_serving, timeout=420, interval=0.2, description="RolloutBlocked=True")
    assert not failed, failed[:3]
    assert answered > 0
    cond = condition(held, "RolloutBlocked")
    assert cond["reason"] == "LatencyRegression", cond
    comparison = held["status"]["engineComparison"]
    heavy_key = comparison["candidateEngineKey"]
    assert (comparison["verdict"], comparison["servingEngineKey"]) == ("Blocked", light_key)
    # Both figures, measured by the two profile Jobs: the heavy engine is slower by far.
    assert comparison["candidateP99Ms"] > comparison["servingP99Ms"]
    assert comparison["candidateCapacityPerS"] < comparison["servingCapacityPerS"]
    assert comparison["regressionPercent"] > 100, comparison
    assert held["status"]["engine"]["key"] == light_key
    assert condition(held, "Ready")["status"] == "True"
    assert f"tailpilot.io/accept-engine={heavy_key[:12]}" in cond["message"]
    assert held["status"]["profiling"]["engineKey"] == heavy_key
    assert held["status"]["profiling"]["phase"] == "Succeeded"

    # Accepted by its key, the heavy engine rolls out.
    client.CustomObjectsApi(real_api).patch_namespaced_custom_object(
        "tailpilot.io",
        "v1alpha1",
        ns,
        "inferenceservices",
        NAME,
        {"metadata": {"annotations": {"tailpilot.io/accept-engine": heavy_key[:12]}}},
    )
    accepted = eventually(
        lambda: serving(real_api, ns, heavy_key), timeout=300, description="the accepted heavy engine serving"
    )
    assert accepted["status"]["engineComparison"]["verdict"] == "Accepted"
    assert condition(accepted, "RolloutBlocked")["reason"] == "RegressionAccepted"

    # Back to the light model: faster than the engine serving, it needs nobody.
    set_model(real_api, ns, LIGHT_URI)
    back = eventually(
        lambda: serving(real_api, ns, light_key), timeout=300, description="the light engine back by itself"
    )
    assert back["status"]["engineComparison"]["verdict"] == "Promoted"
    assert back["status"]["engineComparison"]["regressionPercent"] < 0
    assert condition(back, "RolloutBlocked")["reason"] == "WithinRegressionBudget"
