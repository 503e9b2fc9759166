"""A minimal valid InferenceService for the controllers' pure tests."""

from __future__ import annotations

from typing import Any

from tailpilot.api.v1alpha1 import InferenceService


def service(**spec: Any) -> InferenceService:
    """The resnet service of namespace shop, P99 50 ms, with `spec` sections added or replaced."""
    return InferenceService.model_validate(
        {
            "apiVersion": "tailpilot.io/v1alpha1",
            "kind": "InferenceService",
            "metadata": {"name": "resnet", "namespace": "shop"},
            "spec": {"model": {"uri": "pvc://models/resnet50.onnx"}, "slo": {"p99LatencyMs": 50}, **spec},
        }
    )
