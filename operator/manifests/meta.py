"""Object metadata shared by every child: names, standard labels, owner references, stable hashes.

Every child of an InferenceService carries the standard `app.kubernetes.io/*`
labels plus `tailpilot.io/inferenceservice=<name>`, and one owner reference
(controller, blockOwnerDeletion) so deleting the InferenceService garbage-
collects it. Drift (a hand edit, a spec change) is found by comparing the
fields the builders set with the live object (`tailpilot.controllers.reconcile.drift`).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

from tailpilot import __version__
from tailpilot.api import constants as c
from tailpilot.api.v1alpha1 import InferenceService


def standard_labels(*, isvc_name: str, component: str, app_name: str = c.APP_NAME_TRITON) -> dict[str, str]:
    """Labels of a child object: app.kubernetes.io/* and the owning InferenceService's name."""
    return {
        c.LABEL_NAME: app_name,
        c.LABEL_INSTANCE: isvc_name,
        c.LABEL_COMPONENT: component,
        c.LABEL_PART_OF: c.PART_OF,
        c.LABEL_MANAGED_BY: c.MANAGED_BY,
        c.LABEL_VERSION: __version__,
        c.LABEL_ISVC: isvc_name,
    }


def selector_labels(isvc_name: str) -> dict[str, str]:
    """Labels that select a service's Triton pods (immutable on a Deployment: never add keys here)."""
    return {c.LABEL_NAME: c.APP_NAME_TRITON, c.LABEL_ISVC: isvc_name, c.LABEL_COMPONENT: c.COMPONENT_SERVER}


def selector_string(isvc_name: str) -> str:
    """Return the selector as a string, for status.selector (the scale subresource's labelSelectorPath)."""
    return ",".join(f"{k}={v}" for k, v in sorted(selector_labels(isvc_name).items()))


def controlled_by(obj: Mapping[str, Any], isvc: InferenceService) -> bool:
    """Whether `obj`'s controller owner reference is this InferenceService (same uid, not just name)."""
    return controlled_by_uid(obj, isvc.metadata.get("uid"))


def controlled_by_uid(obj: Mapping[str, Any], uid: object) -> bool:
    """Whether `obj`'s controller owner reference names the object of this uid (never for no uid)."""
    refs = (obj.get("metadata") or {}).get("ownerReferences") or []
    return bool(uid) and any(ref.get("controller") is True and ref.get("uid") == str(uid) for ref in refs)


def owner_reference(isvc: InferenceService) -> dict[str, Any]:
    """Return the controller owner reference to the InferenceService (needs metadata.uid)."""
    uid = isvc.metadata.get("uid")
    if not uid:
        raise ValueError(f"InferenceService {isvc.name!r} has no metadata.uid; owner references need it")
    return {
        "apiVersion": c.API_VERSION,
        "kind": c.KIND,
        "name": isvc.name,
        "uid": str(uid),
        "controller": True,
        "blockOwnerDeletion": True,
    }


def object_meta(
    *,
    isvc: InferenceService,
    name: str,
    component: str,
    app_name: str = c.APP_NAME_TRITON,
    extra_labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    """Metadata of a child: name, namespace, standard labels, owner reference."""
    meta: dict[str, Any] = {
        "name": name,
        "namespace": isvc.namespace,
        "labels": {
            **standard_labels(isvc_name=isvc.name, component=component, app_name=app_name),
            **(extra_labels or {}),
        },
        "ownerReferences": [owner_reference(isvc)],
    }
    if annotations:
        meta["annotations"] = dict(annotations)
    return meta


def stable_hash(value: Any, length: int = 16) -> str:
    """Hex SHA-256 of the canonical JSON of a value (sorted keys, no whitespace), truncated."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:length]
