"""The activator's one kind of write to the API server: a merge patch of an InferenceService.

Both of its writes (the wake annotation, `waking`; the cold-start record, `cold_start`) are merge
patches of the service's own annotations, which the chart's RBAC allows (`patch` on
inferenceservices) and nothing more. The `kubernetes` client blocks, so the patch runs in a thread.
"""

from __future__ import annotations

import asyncio
from typing import Any

from tailpilot.activator.routing import ServiceKey
from tailpilot.api.constants import GROUP, PLURAL, VERSION


async def merge_patch_service(api: Any, key: ServiceKey, patch: dict[str, Any]) -> None:
    """Apply `patch` to `key`'s InferenceService through `api`, a `kubernetes.client.CustomObjectsApi`."""
    await asyncio.to_thread(
        api.patch_namespaced_custom_object,
        GROUP,
        VERSION,
        key.namespace,
        PLURAL,
        key.name,
        patch,
        _content_type="application/merge-patch+json",
    )
