"""The PodDisruptionBudget of a service's Triton pods.

`maxUnavailable: 1` (not `minAvailable: 1`): a one-replica service can still be
drained off a node, while larger services lose at most one replica at a time
to voluntary disruptions. Unhealthy pods may always be evicted, so a broken
pod never blocks a node drain.
"""

from __future__ import annotations

from typing import Any

from tailpilot.api import constants as c
from tailpilot.api.v1alpha1 import InferenceService
from tailpilot.manifests.meta import object_meta, selector_labels


def triton_pdb(*, isvc: InferenceService) -> dict[str, Any]:
    """Build the policy/v1 PodDisruptionBudget."""
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": object_meta(isvc=isvc, name=isvc.name, component=c.COMPONENT_SERVER),
        "spec": {
            "maxUnavailable": 1,
            "selector": {"matchLabels": selector_labels(isvc.name)},
            "unhealthyPodEvictionPolicy": "AlwaysAllow",
        },
    }
