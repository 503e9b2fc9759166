"""A spec whose pod template the API server refuses stops before any build, and what serves keeps serving.

The CRD keeps `spec.runtime.affinity` whole, and `check_spec` reads only its top-level fields: an
operator that no node selector knows passes both. Here the real API server judges the template (the
operator's dry run): the service says `Ready=False InvalidSpec`, naming the service's own field, and
no build Job starts; a serving service given such a block keeps its Deployment as it was.
"""

from __future__ import annotations

import pytest
from kubernetes import client

from tailpilot.api import constants as c
from tailpilot_e2e.operator_harness import condition, custom_object, dump, events_once
from tailpilot_e2e.wait import eventually

from .test_updates import patch, ready_at_generation, serve_gpu_example

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

#: An affinity every schema here admits and the API server refuses: no such operator.
BAD_AFFINITY = {
    "nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "Sometimes"}]}]
        }
    }
}
NAMED = "spec.runtime.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"


def _invalid_at_generation(k8s, namespace, name):  # type: ignore[no-untyped-def]
    obj = custom_object(k8s, namespace, name)
    cond = condition(obj, "Ready")
    at = (obj.get("status") or {}).get("observedGeneration") == obj["metadata"]["generation"]
    return obj if at and cond and cond["reason"] == c.REASON_INVALID_SPEC else None


def test_a_template_the_api_server_refuses_stops_before_the_build_naming_the_field(
    k8s, namespace, operator, example
):
    isvc = example("gpu-tensorrt-h100.yaml", namespace=namespace, name="unplaceable")
    isvc["spec"]["runtime"]["affinity"] = BAD_AFFINITY
    client.CustomObjectsApi(k8s).create_namespaced_custom_object(
        "tailpilot.io", "v1alpha1", namespace, "inferenceservices", isvc
    )
    obj = eventually(
        lambda: _invalid_at_generation(k8s, namespace, "unplaceable"), timeout=30, description="InvalidSpec"
    )
    message = condition(obj, "Ready")["message"]
    assert NAMED in message and "Sometimes" in message, message
    assert "spec.template" not in message  # in the service's terms, not the Deployment's
    assert client.BatchV1Api(k8s).list_namespaced_job(namespace).items == [], dump(obj.get("status"))
    events = events_once(
        client.CoreV1Api(k8s),
        namespace,
        lambda es: any(e.reason == "InvalidSpec" for e in es),
        name="unplaceable",
    )
    assert [e.reason for e in events].count("InvalidSpec") == 1


def test_a_serving_service_given_such_a_block_keeps_serving_as_it_was(k8s, namespace, operator, example):
    isvc = example("gpu-tensorrt-h100.yaml", namespace=namespace, name="steady")
    serve_gpu_example(k8s, namespace, isvc, "ab" * 16)
    apps = client.AppsV1Api(k8s)
    before = apps.read_namespaced_deployment("steady", namespace)

    patch(k8s, namespace, "steady", {"runtime": {**isvc["spec"]["runtime"], "affinity": BAD_AFFINITY}})
    obj = eventually(
        lambda: _invalid_at_generation(k8s, namespace, "steady"), timeout=30, description="InvalidSpec"
    )
    assert NAMED in condition(obj, "Ready")["message"]
    after = apps.read_namespaced_deployment("steady", namespace)
    assert after.metadata.generation == before.metadata.generation
    assert after.spec.template.spec.affinity == before.spec.template.spec.affinity

    # Put right, the service is Ready again at the new generation, on the same engine.
    patch(k8s, namespace, "steady", {"runtime": {**isvc["spec"]["runtime"], "affinity": None}})
    eventually(lambda: ready_at_generation(k8s, namespace, "steady"), timeout=60, description="Ready again")
