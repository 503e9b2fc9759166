"""The operator's own configuration (flags / environment, read once at start-up)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

from tailpilot.manifests.settings import ManifestSettings

#: Seconds between two decisions of a service's autoscaler when --control-period-seconds is not set:
#: the benchmark runs the policy at this period too.
DEFAULT_CONTROL_PERIOD_S: Final = 15.0


@dataclass(frozen=True, kw_only=True)
class OperatorSettings:
    """Everything the reconciler needs besides the cluster.

    Attributes:
        manifests: Settings handed to every manifest builder.
        build_pod_labels: Extra labels on build Job pods (cost allocation, or a
            simulator's hook such as KWOK's `kwok.tailpilot.io/await-result`).
        resync_seconds: Longest time between two reconciles of an unchanged service.
        build_retry_base_seconds: First back-off before a failed build Job is retried.
        build_retry_max_seconds: Cap of the exponential back-off.
        prometheus_url: Default Prometheus for services without spec.monitoring.prometheusUrl.
        control_period_seconds: How often the autoscaler evaluates a Ready service.
    """

    manifests: ManifestSettings
    build_pod_labels: Mapping[str, str] = field(default_factory=dict)
    resync_seconds: float = 300.0
    build_retry_base_seconds: float = 30.0
    build_retry_max_seconds: float = 900.0
    prometheus_url: str | None = None
    control_period_seconds: float = DEFAULT_CONTROL_PERIOD_S
