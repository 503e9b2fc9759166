"""The admin-key Secret of a service: created once with a random key, read for the admin calls (I/O).

The object and the flags are built purely (`tailpilot.manifests.triton_access`); here is what needs
the cluster and randomness: the key is `secrets.token_urlsafe(32)` (256 bits), generated only when
the Secret does not exist, and never compared or rewritten afterwards (the Secret is immutable).

Ownership as for every child: a Secret of that name that this service does not control is never
used, adopted or overwritten, including one that appears between the read and the create (a 409).
Its value would be someone else's choice, so the service does not start pods on it: the reconciler
says `ChildNameTaken`. A Secret that is deleted is recreated on the next pass with a new key and a
new uid; the pod template names the uid, so the pods roll onto the new key (see `triton_access`).
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from dataclasses import dataclass

from tailpilot.api.v1alpha1 import InferenceService
from tailpilot.controllers.core.kubeapi import SECRETS
from tailpilot.controllers.core.seams import AdminKeyKube, GetsObjects
from tailpilot.manifests.meta import controlled_by
from tailpilot.manifests.triton_access import (
    AdminKeyRef,
    admin_key_ref,
    admin_key_secret,
    admin_key_secret_name,
    secret_key_value,
)

#: Bytes of randomness in a key (token_urlsafe encodes them in base64url: letters, digits, - and _,
#: none of which Triton's `<apis>:<header>=<value>` flag syntax treats specially).
KEY_BYTES = 32


@dataclass(frozen=True)
class AdminKey:
    """A service's admin key: where its pods read it, and the value the operator sends."""

    ref: AdminKeyRef
    value: str


@dataclass(frozen=True)
class AdminKeyUnavailable:
    """Why a service has no usable admin key this pass (a Secret of its name that is not its own)."""

    message: str


def generate_key() -> str:
    """A new random key."""
    return secrets.token_urlsafe(KEY_BYTES)


def ensure_admin_key(
    kube: AdminKeyKube, isvc: InferenceService, *, generate: Callable[[], str] = generate_key
) -> AdminKey | AdminKeyUnavailable:
    """The service's admin key, creating its Secret when missing (one GET per call at rest)."""
    name = admin_key_secret_name(isvc.name)
    live = kube.get(SECRETS, isvc.namespace, name)
    if live is None:
        live = kube.create(admin_key_secret(isvc=isvc, key=generate()))
        if live is None:  # created meanwhile: by a pass before this one, or by someone else
            live = kube.get(SECRETS, isvc.namespace, name)
    if live is None:
        return AdminKeyUnavailable(f"Secret {name} could not be created or read")
    if not controlled_by(live, isvc):
        return AdminKeyUnavailable(
            f"Secret {name} exists and is not controlled by this InferenceService; it is left alone "
            "and no pod is started on a key someone else chose: rename or remove it"
        )
    value = secret_key_value(live)
    if value is None:
        # Only a Secret someone else created with this service's owner reference can be like this
        # (the operator's is immutable and never empty). The operator deletes no Secret (its RBAC
        # has no such verb), so the message says what to do.
        return AdminKeyUnavailable(
            f"Secret {name} holds no admin key: delete it and the operator creates a new one"
        )
    uid = str(live["metadata"].get("uid", ""))
    return AdminKey(ref=admin_key_ref(isvc.name, secret_uid=uid), value=value)


def read_admin_key(kube: GetsObjects, isvc: InferenceService) -> str | None:
    """The key the operator sends on admin calls, or None without a Secret this service controls."""
    live = kube.get(SECRETS, isvc.namespace, admin_key_secret_name(isvc.name))
    if live is None or not controlled_by(live, isvc):
        return None
    return secret_key_value(live)
