"""The Service in front of a service's Triton pods: HTTP, gRPC and metrics ports."""

from __future__ import annotations

from typing import Any

from tailpilot.api import constants as c
from tailpilot.api.v1alpha1 import InferenceService
from tailpilot.manifests.meta import object_meta, selector_labels


def triton_service(*, isvc: InferenceService) -> dict[str, Any]:
    """Build the v1 Service named like the InferenceService (clients call `<name>.<namespace>:8000`)."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": object_meta(isvc=isvc, name=isvc.name, component=c.COMPONENT_SERVER),
        "spec": {
            "type": "ClusterIP",
            "selector": selector_labels(isvc.name),
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
                {
                    "name": c.PORT_NAME_METRICS,
                    "port": c.TRITON_METRICS_PORT,
                    "targetPort": c.PORT_NAME_METRICS,
                    "protocol": "TCP",
                },
            ],
        },
    }
