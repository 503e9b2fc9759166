"""The operator's own configuration (flags / environment, read once at start-up)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

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
        gpu_prices: Price of one GPU per hour by GPU product (node label value): what a service
            listing several products (spec.runtime.gpu.products) pays where it sets no price itself.
        activator_service: (namespace, name) of the activator's Service: a service with
            `minReplicas: 0` is routed to its pods while it has no ready replica. None: no activator,
            and such a service keeps one replica.
    """

    manifests: ManifestSettings
    build_pod_labels: Mapping[str, str] = field(default_factory=dict)
    resync_seconds: float = 300.0
    build_retry_base_seconds: float = 30.0
    build_retry_max_seconds: float = 900.0
    prometheus_url: str | None = None
    control_period_seconds: float = DEFAULT_CONTROL_PERIOD_S
    gpu_prices: Mapping[str, float] = field(default_factory=dict)
    activator_service: tuple[str, str] | None = None


def parse_gpu_prices(table: str, flags: list[str] | tuple[str, ...] = ()) -> dict[str, float]:
    """GPU prices from a JSON object (TAILPILOT_GPU_PRICES) and PRODUCT=PRICE flags over it.

    Raises:
        ValueError: on a malformed table or flag, or a price that is not a positive number.
    """
    import json

    prices: dict[str, Any] = {}
    if table.strip():
        loaded = json.loads(table)
        if not isinstance(loaded, dict):
            raise ValueError(f"TAILPILOT_GPU_PRICES must be a JSON object, got {table!r}")
        prices.update(loaded)
    for item in flags:
        product, sep, price = item.partition("=")
        if not sep or not product:
            raise ValueError(f"--gpu-price takes PRODUCT=PRICE, got {item!r}")
        prices[product] = price
    out: dict[str, float] = {}
    for product, price in prices.items():
        try:
            value = float(price)
        except (TypeError, ValueError):
            raise ValueError(f"GPU price of {product!r} is not a number: {price!r}") from None
        if not value > 0:
            raise ValueError(f"GPU price of {product!r} must be above zero, got {value}")
        out[str(product)] = value
    return out
