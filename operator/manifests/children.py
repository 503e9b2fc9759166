"""Every child of a served InferenceService: those its spec wants, in creation order, and those it turned off.

The controller's one call once the engine is ready: it creates or updates each wanted child that
differs from the live one (`tailpilot.controllers.reconcile.drift`), and deletes the optional children the
spec turned off where this service controls them. The build Job is not here: it exists before the
engine does (see `build_job`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tailpilot.api import constants as c
from tailpilot.api.autoscaling import BatchingConfig
from tailpilot.api.engine import BuildResult
from tailpilot.api.v1alpha1 import InferenceService
from tailpilot.manifests.activator_routing import ActivatorRouting, routing_children
from tailpilot.manifests.deployment import deployment_name, triton_deployment
from tailpilot.manifests.network_policy import triton_network_policy
from tailpilot.manifests.pdb import triton_pdb
from tailpilot.manifests.prometheus_rule import prometheus_rule
from tailpilot.manifests.service import triton_metrics_service, triton_service
from tailpilot.manifests.service_monitor import service_monitor
from tailpilot.manifests.settings import ManifestSettings, NetworkPolicySettings
from tailpilot.manifests.triton_access import AdminKeyRef
from tailpilot.manifests.triton_configmap import configmap_name, rollout_hash, triton_configmap


@dataclass(frozen=True, kw_only=True)
class ClusterCapabilities:
    """Optional APIs present in the cluster (discovered by the controller at start-up)."""

    service_monitors: bool = False
    prometheus_rules: bool = False


@dataclass(frozen=True)
class Children:
    """The children a spec wants, in creation order, the optional ones it turned off, a canary's once over."""

    wanted: tuple[dict[str, Any], ...]
    turned_off: tuple[dict[str, Any], ...]
    #: The canary's ConfigMap and Deployment when no canary runs (deleted where they exist).
    canary_over: tuple[dict[str, Any], ...] = ()


@dataclass(frozen=True)
class CanaryPlan:
    """The canary replicas of a new engine (spec.rollout.strategy canary): its build and its replicas."""

    result: BuildResult
    replicas: int


def is_canary_child(obj: dict[str, Any]) -> bool:
    """Whether a child is one of a canary's (its ConfigMap or Deployment)."""
    name = obj["metadata"]["name"]
    owner = obj["metadata"]["labels"][c.LABEL_ISVC]
    return name in (configmap_name(owner, canary=True), deployment_name(owner, canary=True))


_Optional = list[tuple[dict[str, Any], bool]]


def _optional_children(
    *, isvc: InferenceService, settings: ManifestSettings, capabilities: ClusterCapabilities
) -> tuple[_Optional, _Optional, _Optional]:
    """The metrics Service, the NetworkPolicy and the monitoring objects, each with whether it is on."""
    monitoring = isvc.spec.monitoring
    policy = settings.network_policy
    optional_policy = [
        (triton_network_policy(isvc=isvc, settings=policy or NetworkPolicySettings()), policy is not None)
    ]
    optional_services = [(triton_metrics_service(isvc=isvc), isvc.spec.autoscaling.backlog_rotation)]
    optional_monitoring: _Optional = []
    if capabilities.service_monitors:
        monitor = service_monitor(isvc=isvc, settings=settings)
        optional_monitoring.append((monitor, monitoring.service_monitor))
    if capabilities.prometheus_rules:
        rule = prometheus_rule(isvc=isvc, settings=settings)
        optional_monitoring.append((rule, monitoring.prometheus_rule))
    return optional_services, optional_policy, optional_monitoring


def plan_children(
    *,
    isvc: InferenceService,
    result: BuildResult,
    batching: BatchingConfig,
    replicas: int,
    settings: ManifestSettings,
    capabilities: ClusterCapabilities,
    admin_key: AdminKeyRef,
    select_rotation: bool = False,
    moving: bool = False,
    canary: CanaryPlan | None = None,
    routing: ActivatorRouting | None = None,
) -> Children:
    """ConfigMap, Deployment, Service, metrics Service, PDB, NetworkPolicy, ServiceMonitor, PrometheusRule.

    The admin-key Secret (`triton_access`) is not here: its value is random, so the controller
    creates it once, before any pod that reads it (the profile Job's too), and passes `admin_key`.
    The NetworkPolicy goes with the PDB when the operator is configured with one
    (`settings.network_policy`); otherwise it is turned off (a policy this service owns is deleted).

    The metrics Service (spec.autoscaling.backlogRotation) goes with the Service, before the PDB;
    the ServiceMonitor and PrometheusRule (spec.monitoring) last, and only where their CRDs exist
    (otherwise they are neither wanted nor turned off). `select_rotation`: see `triton_service`
    (the controller knows whether every pod has the label). `moving`: the service moves to another
    GPU product (see `triton_deployment`). `canary`: a new engine's canary replicas run beside the
    stable ones (their own ConfigMap and Deployment, after the stable Deployment); without one, those
    two are `canary_over`. `routing`: with an activator configured, the `<name>-pods` Service (for
    `minReplicas: 0`) and the EndpointSlice routing the Service to the activator (while it must), first,
    so that the activator is in the Service before a Deployment scaled to zero lets its last pod go
    (`activator_routing`); turned off otherwise. Without one, neither is wanted nor turned off.
    """
    optional_services, optional_policy, optional_monitoring = _optional_children(
        isvc=isvc, settings=settings, capabilities=capabilities
    )
    new = canary.result if canary is not None else result
    canary_children = [
        triton_configmap(isvc=isvc, result=new, batching=batching, canary=True),
        triton_deployment(
            isvc=isvc,
            engine_key=new.engine_key,
            rollout_hash=rollout_hash(isvc=isvc, result=new),
            replicas=canary.replicas if canary is not None else 1,
            settings=settings,
            admin_key=admin_key,
            canary=True,
        ),
    ]
    routed, unrouted = routing_children(isvc=isvc, routing=routing) if routing is not None else ([], [])
    wanted = [
        *routed,
        triton_configmap(isvc=isvc, result=result, batching=batching),
        triton_deployment(
            isvc=isvc,
            engine_key=result.engine_key,
            rollout_hash=rollout_hash(isvc=isvc, result=result),
            replicas=replicas,
            settings=settings,
            admin_key=admin_key,
            moving=moving,
        ),
        *(canary_children if canary is not None else ()),
        triton_service(isvc=isvc, select_rotation=select_rotation),
        *(obj for obj, on in optional_services if on),
        triton_pdb(isvc=isvc),
        *(obj for obj, on in optional_policy if on),
        *(obj for obj, on in optional_monitoring if on),
    ]
    turned_off = [
        *unrouted,
        *(obj for obj, on in (*optional_services, *optional_policy, *optional_monitoring) if not on),
    ]
    return Children(
        wanted=tuple(wanted),
        turned_off=tuple(turned_off),
        canary_over=tuple(canary_children) if canary is None else (),
    )
