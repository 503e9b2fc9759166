"""Every desired child of a served InferenceService, in creation order, each stamped with its desired hash.

The controller's one call once the engine is ready: it compares each object
with the live one (by the `tailpilot.io/desired-hash` annotation and the
fields the builders set) and creates or patches what differs. The build Job
is not here: it exists before the engine does (see `build_job`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tailpilot.api.autoscaling import BatchingConfig
from tailpilot.api.engine import BuildResult
from tailpilot.api.v1alpha1 import InferenceService
from tailpilot.manifests.deployment import triton_deployment
from tailpilot.manifests.meta import with_desired_hash
from tailpilot.manifests.pdb import triton_pdb
from tailpilot.manifests.prometheus_rule import prometheus_rule
from tailpilot.manifests.service import triton_metrics_service, triton_service
from tailpilot.manifests.service_monitor import service_monitor
from tailpilot.manifests.settings import ManifestSettings
from tailpilot.manifests.triton_configmap import rollout_hash, triton_configmap


@dataclass(frozen=True, kw_only=True)
class ClusterCapabilities:
    """Optional APIs present in the cluster (discovered by the controller at start-up)."""

    service_monitors: bool = False
    prometheus_rules: bool = False


def desired_children(
    *,
    isvc: InferenceService,
    result: BuildResult,
    batching: BatchingConfig,
    replicas: int,
    settings: ManifestSettings,
    capabilities: ClusterCapabilities,
    select_rotation: bool = False,
) -> list[dict[str, Any]]:
    """ConfigMap, Deployment, Service(s), PDB, and ServiceMonitor/PrometheusRule when wanted and available.

    `select_rotation`: see `triton_service` (the controller knows whether every pod has the label).
    """
    children = [
        triton_configmap(isvc=isvc, result=result, batching=batching),
        triton_deployment(
            isvc=isvc,
            engine_key=result.engine_key,
            rollout_hash=rollout_hash(isvc=isvc, result=result),
            replicas=replicas,
            settings=settings,
        ),
        triton_service(isvc=isvc, select_rotation=select_rotation),
        triton_pdb(isvc=isvc),
    ]
    if isvc.spec.autoscaling.backlog_rotation:
        children.insert(3, triton_metrics_service(isvc=isvc))
    monitoring = isvc.spec.monitoring
    if monitoring.service_monitor and capabilities.service_monitors:
        children.append(service_monitor(isvc=isvc, settings=settings))
    if monitoring.prometheus_rule and capabilities.prometheus_rules:
        children.append(prometheus_rule(isvc=isvc, settings=settings))
    return [with_desired_hash(child) for child in children]
