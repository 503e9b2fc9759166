"""The Service in front of a service's Triton pods (HTTP, gRPC and metrics ports), and its metrics twin.

With spec.autoscaling.backlogRotation the Service also selects `tailpilot.io/rotation=in`, so a
pod the operator labels `held` leaves its endpoints while it works off a backlog. The selector
gains that key only once every pod carries the label (`select_rotation`): during the rollout that
adds it, pods without it must keep serving. The ServiceMonitor then scrapes a headless Service
without that key, so a held pod stays scraped while its queue matters.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from tailpilot.api import constants as c
from tailpilot.api.v1alpha1 import InferenceService
from tailpilot.manifests.meta import object_meta, selector_labels


def _metrics_port() -> dict[str, Any]:
    return {
        "name": c.PORT_NAME_METRICS,
        "port": c.TRITON_METRICS_PORT,
        "targetPort": c.PORT_NAME_METRICS,
        "protocol": "TCP",
    }


def triton_service(*, isvc: InferenceService, select_rotation: bool = False) -> dict[str, Any]:
    """Build the v1 Service named like the InferenceService (clients call `<name>.<namespace>:8000`).

    Args:
        isvc: The InferenceService.
        select_rotation: Select only pods labelled `tailpilot.io/rotation=in` (backlogRotation on,
            and every pod already carries the label).
    """
    selector = selector_labels(isvc.name)
    if select_rotation:
        selector[c.LABEL_ROTATION] = c.ROTATION_IN
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": object_meta(isvc=isvc, name=isvc.name, component=c.COMPONENT_SERVER),
        "spec": {
            "type": "ClusterIP",
            "selector": selector,
            "ports": [
                {
                    "name": c.PORT_NAME_HTTP,
                    "port": c.TRITON_HTTP_PORT,
                    "targetPort": c.PORT_NAME_HTTP,
                    "protocol": "TCP",
                },
                {
                    "name": c.PORT_NAME_GRPC,
                    "port": c.TRITON_GRPC_PORT,
                    "targetPort": c.PORT_NAME_GRPC,
                    "protocol": "TCP",
                    "appProtocol": "grpc",
                },
                _metrics_port(),
            ],
        },
    }


def rotation_selectable(pods: Sequence[Mapping[str, Any]]) -> bool:
    """Whether the Service may select on the rotation label: every live pod of the service carries it.

    Pods being deleted are left out (they leave the endpoints anyway); with no pod at all it may.
    """
    return all(
        c.LABEL_ROTATION in ((pod.get("metadata") or {}).get("labels") or {})
        for pod in pods
        if not (pod.get("metadata") or {}).get("deletionTimestamp")
    )


def metrics_service_name(isvc_name: str) -> str:
    """Name of the headless metrics Service (InferenceService names are at most 46 characters)."""
    return f"{isvc_name}-metrics"


def metrics_service_labels(isvc_name: str) -> dict[str, str]:
    """Labels the ServiceMonitor selects the metrics Service by."""
    return {c.LABEL_NAME: c.APP_NAME_TRITON, c.LABEL_ISVC: isvc_name, c.LABEL_COMPONENT: c.COMPONENT_METRICS}


def triton_metrics_service(*, isvc: InferenceService) -> dict[str, Any]:
    """Build the headless Service over every Triton pod, held or not, for the ServiceMonitor."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": object_meta(
            isvc=isvc, name=metrics_service_name(isvc.name), component=c.COMPONENT_METRICS
        ),
        "spec": {
            "clusterIP": "None",
            "selector": selector_labels(isvc.name),
            # A pod failing readiness under load is the one whose queue matters.
            "publishNotReadyAddresses": True,
            "ports": [_metrics_port()],
        },
    }
