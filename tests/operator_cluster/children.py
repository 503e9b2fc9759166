"""What "converged" means for a namespace's InferenceServices after a fault: no duplicate, no orphan.

Every object carrying a service's label (`tailpilot.io/inferenceservice`) must be controlled by that
service (a controller owner reference with its current uid), and each service has exactly one
Deployment, one model-config ConfigMap, one admin-key Secret, its Services, and one build and one
profile Job.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from kubernetes import client

from tailpilot_e2e.operator_harness import custom_object

LABEL = "tailpilot.io/inferenceservice"


def _labelled(k8s: client.ApiClient, namespace: str) -> list[tuple[str, Any]]:
    core, apps, batch = client.CoreV1Api(k8s), client.AppsV1Api(k8s), client.BatchV1Api(k8s)
    networking = client.NetworkingV1Api(k8s)
    lists = {
        "Deployment": apps.list_namespaced_deployment,
        "Service": core.list_namespaced_service,
        "ConfigMap": core.list_namespaced_config_map,
        "Secret": core.list_namespaced_secret,
        "Job": batch.list_namespaced_job,
        "NetworkPolicy": networking.list_namespaced_network_policy,
        "PodDisruptionBudget": client.PolicyV1Api(k8s).list_namespaced_pod_disruption_budget,
    }
    return [
        (kind, obj) for kind, list_ in lists.items() for obj in list_(namespace, label_selector=LABEL).items
    ]


def assert_converged_children(
    k8s: client.ApiClient, namespace: str, services: list[str], *, engines: int = 1
) -> Counter[str]:
    """Assert no orphan and no duplicate child of `services`; return the count of children per kind.

    `engines`: the engine requests each service went through (one build and one profile Job each).
    """
    uids = {name: custom_object(k8s, namespace, name)["metadata"]["uid"] for name in services}
    per_service: dict[str, Counter[str]] = {name: Counter() for name in services}
    kinds: Counter[str] = Counter()
    for kind, obj in _labelled(k8s, namespace):
        owner = obj.metadata.labels[LABEL]
        controllers = [r for r in obj.metadata.owner_references or [] if r.controller]
        where = f"{kind} {obj.metadata.name}"
        assert owner in uids, f"{where} belongs to no service of {sorted(uids)}"
        assert [(r.kind, r.name, r.uid) for r in controllers] == [("InferenceService", owner, uids[owner])], (
            f"{where} is not controlled by its service: {controllers}"
        )
        component = (obj.metadata.labels or {}).get("app.kubernetes.io/component", "")
        per_service[owner][f"{kind}/{component}"] += 1
        kinds[kind] += 1
    for name, counts in per_service.items():
        assert counts["Deployment/inference-server"] == 1, (name, counts)
        jobs = (counts["Job/engine-build"], counts["Job/engine-profile"])
        assert jobs == (engines, engines), (name, counts)
        configmaps = sum(n for key, n in counts.items() if key.startswith("ConfigMap/"))
        assert configmaps == 1 and sum(n for k, n in counts.items() if k.startswith("Secret/")) == 1, (
            name,
            counts,
        )
    return kinds
