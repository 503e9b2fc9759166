"""Decide whether a live child object has drifted from what the operator wants (pure).

The desired object is what our manifest builders produce; the live object
also carries what the API server and other controllers add (defaults, status,
metadata). So "in sync" means: every field we set has our value in the live
object. Extra live fields are ignored; a changed or missing field we own is
drift and is corrected by a server-side apply. This avoids writing when
nothing changed (zero writes per minute at rest) while still fixing a
hand-edited replica count or GPU limit.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from enum import StrEnum
from typing import Any

from tailpilot.api.constants import ANNOTATION_PAUSED_FOR_MOVE
from tailpilot.api.quantity import quantity_value

#: Metadata fields the API server owns or that we never compare.
IGNORED_METADATA = frozenset(
    {
        "resourceVersion",
        "uid",
        "creationTimestamp",
        "generation",
        "managedFields",
        "selfLink",
        "ownerReferences",
    }
)

#: Maps compared whole, per kind: an extra live key changes what they mean (a Service selecting on
#: a label the operator dropped would leave pods out of its endpoints).
EXACT_FIELDS: dict[str, tuple[tuple[str, ...], ...]] = {"Service": (("spec", "selector"),)}

#: Annotations whose presence on the live object, when the desired one lacks them, is drift: the
#: operator set them with a field it no longer wants (the pause of a GPU product move's hand-over),
#: and the next server-side apply drops both, since it owns them.
OWNED_MARKERS: tuple[str, ...] = (ANNOTATION_PAUSED_FOR_MOVE,)


def _at(obj: Mapping[str, Any] | None, path: tuple[str, ...]) -> Any:
    for key in path:
        if not isinstance(obj, Mapping):
            return None
        obj = obj.get(key)
    return obj


class Outcome(StrEnum):
    """What to do with one child."""

    CREATE = "Create"
    UPDATE = "Update"
    NONE = "None"


def _normalize_scalar(value: Any) -> Any:
    """Make equal values compare equal: '1' vs 1 in quantities and int-or-string ports."""
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        try:
            return float(quantity_value(value))
        except ValueError:
            return value
    return value


def is_subset(desired: Any, live: Any) -> bool:
    """True when every field in `desired` is present in `live` with an equal value.

    Lists must have the same length; dict elements of a list compare as subsets
    (the API server adds defaults inside containers, ports, tolerations...).
    """
    if isinstance(desired, Mapping):
        if not isinstance(live, Mapping):
            return False
        return all(key in live and is_subset(value, live[key]) for key, value in desired.items())
    if isinstance(desired, Sequence) and not isinstance(desired, str):
        if not isinstance(live, Sequence) or isinstance(live, str) or len(desired) != len(live):
            return False
        return all(is_subset(d, item) for d, item in zip(desired, live, strict=True))
    return bool(_normalize_scalar(desired) == _normalize_scalar(live))


def comparable(desired: Mapping[str, Any]) -> dict[str, Any]:
    """The part of a desired object that is compared with the live one (no status, owned metadata only)."""
    metadata = {k: v for k, v in desired.get("metadata", {}).items() if k not in IGNORED_METADATA}
    body = {k: v for k, v in desired.items() if k not in {"metadata", "status", "apiVersion", "kind"}}
    return {"metadata": metadata, **body}


def plan(desired: Mapping[str, Any], live: Mapping[str, Any] | None) -> Outcome:
    """Create when missing, update when drifted, else nothing."""
    if live is None:
        return Outcome.CREATE
    for path in EXACT_FIELDS.get(str(desired.get("kind")), ()):
        want = _at(desired, path)
        if want is not None and _at(live, path) != want:
            return Outcome.UPDATE
    wanted, present = (
        _at(desired, ("metadata", "annotations")) or {},
        _at(live, ("metadata", "annotations")) or {},
    )
    if any(key in present and key not in wanted for key in OWNED_MARKERS):
        return Outcome.UPDATE
    return Outcome.NONE if is_subset(comparable(desired), live) else Outcome.UPDATE
