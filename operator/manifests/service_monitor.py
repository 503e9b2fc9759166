"""The ServiceMonitor (prometheus-operator) scraping a service's Triton metrics port.

The relabeling copies the Service's `tailpilot.io/inferenceservice` label onto
every series as `inferenceservice`, so queries and alerts select one service
by (namespace, inferenceservice) whatever the pod names.
"""

from __future__ import annotations

from typing import Any

from tailpilot.api import constants as c
from tailpilot.api.v1alpha1 import InferenceService
from tailpilot.manifests.meta import object_meta, selector_labels
from tailpilot.manifests.service import metrics_service_labels
from tailpilot.manifests.settings import ManifestSettings

MONITORING_API_VERSION = "monitoring.coreos.com/v1"


def _meta_label(label_key: str) -> str:
    """Prometheus' service-discovery name of a Kubernetes label (non-alphanumerics become `_`)."""
    return "__meta_kubernetes_service_label_" + "".join(ch if ch.isalnum() else "_" for ch in label_key)


def service_monitor(*, isvc: InferenceService, settings: ManifestSettings) -> dict[str, Any]:
    """Build the monitoring.coreos.com/v1 ServiceMonitor for the service's metrics port."""
    return {
        "apiVersion": MONITORING_API_VERSION,
        "kind": "ServiceMonitor",
        "metadata": object_meta(
            isvc=isvc,
            name=isvc.name,
            component=c.COMPONENT_MONITORING,
            extra_labels=dict(settings.monitoring_labels),
        ),
        "spec": {
            # With backlogRotation a held pod leaves the main Service; the headless metrics
            # Service keeps every pod.
            "selector": {
                "matchLabels": metrics_service_labels(isvc.name)
                if isvc.spec.autoscaling.backlog_rotation
                else selector_labels(isvc.name)
            },
            "namespaceSelector": {"matchNames": [isvc.namespace]},
            "endpoints": [
                {
                    "port": c.PORT_NAME_METRICS,
                    "path": "/metrics",
                    "interval": f"{isvc.spec.monitoring.scrape_interval_seconds}s",
                    "relabelings": [
                        {
                            "sourceLabels": [_meta_label(c.LABEL_ISVC)],
                            "targetLabel": c.METRIC_LABEL_ISVC,
                            "action": "replace",
                        }
                    ],
                }
            ],
        },
    }
