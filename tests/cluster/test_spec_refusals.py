"""What the operator refuses before any build is what the real API server refuses in every pod.

`check_spec` names resource amounts and affinities no pod of the service could carry, so that such
a spec stops at once with `InvalidSpec` instead of failing the Deployment on every pass after its
engine was built. These cases tie that check to the API server's own validation (a server-side
dry run of a pod with the same block): refused there, named here; accepted there, not named here.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from tailpilot.api.v1alpha1 import InferenceServiceSpec
from tailpilot.api.validation import check_spec
from tailpilot.controllers.core.kubeapi import PODS, Kube
from tests.api.invalid_specs import CPU_BASE, merge

pytestmark = pytest.mark.cluster

CASES: list[tuple[str, dict[str, Any], bool]] = [
    ("memory not a quantity", {"resources": {"limits": {"memory": "lots"}}}, False),
    ("request above limit", {"resources": {"limits": {"cpu": "1"}, "requests": {"cpu": "2"}}}, False),
    (
        "memory request above limit",
        {"resources": {"limits": {"memory": "1Gi"}, "requests": {"memory": "2Gi"}}},
        False,
    ),
    ("negative storage", {"resources": {"requests": {"ephemeral-storage": "-1"}}}, False),
    ("affinity field misspelt", {"affinity": {"nodeAfinity": {}}}, False),
    ("affinity not an object", {"affinity": {"podAntiAffinity": ["x"]}}, False),
    (
        "equal amounts in two spellings",
        {
            "resources": {
                "limits": {"cpu": "1", "memory": "1Gi"},
                "requests": {"cpu": "1000m", "memory": "1073741824"},
            }
        },
        True,
    ),
]


def pod(runtime: dict[str, Any]) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "triton", "image": "registry.example/triton:1"}
    if "resources" in runtime:
        container["resources"] = runtime["resources"]
    spec: dict[str, Any] = {"containers": [container]}
    if "affinity" in runtime:
        spec["affinity"] = runtime["affinity"]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "probe"}, "spec": spec}


@pytest.mark.parametrize(("case", "runtime", "accepted"), CASES, ids=[c[0] for c in CASES])
def test_the_api_server_and_the_operator_agree(k8s, namespace, case, runtime, accepted):
    # As the operator writes its children: a server-side apply (here dry-run), through its own client.
    kube = Kube(k8s)
    try:
        kube._call(  # noqa: SLF001 - the operator's request, with dryRun added
            "PATCH",
            PODS.path(namespace, "probe"),
            body=json.dumps(pod(runtime)),
            content_type="application/apply-patch+yaml",
            query=[("fieldManager", "tailpilot"), ("force", "true"), ("dryRun", "All")],
        )
        server_accepts = True
    except ApiException as refused:
        # 422 for a pod the API server's validation refuses; 500 for a body server-side apply
        # cannot type (an unknown field, a quantity that does not parse): refused either way.
        assert refused.status in (400, 422, 500), (case, refused.status, refused.body)
        server_accepts = False
    spec = InferenceServiceSpec.model_validate(merge(CPU_BASE, {"runtime": runtime}))
    named = [p.field for p in check_spec(spec, name="x")]
    assert server_accepts is accepted, case
    assert (named == []) is accepted, (case, named)
