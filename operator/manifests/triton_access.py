"""Who may use a serving Triton's admin APIs: the per-service admin key and the restricted-API flags.

Triton in explicit model-control mode loads and unloads models on request (`POST
/v2/repository/models/NAME/load|unload`), and with the Python backend a loaded model runs code. Every
serving pod therefore runs with Triton's restricted APIs (`--http-restricted-api` and
`--grpc-restricted-protocol`, `<apis>:<header>=<value>`): a restricted call without the header and its
value is answered 403 (HTTP) or UNAVAILABLE (gRPC), before Triton does anything.

The value is a random key per InferenceService, in a Secret the service owns (named like the service).
The controller generates it (`secrets.token_urlsafe`) and creates the Secret once; this module only
builds objects from it. The pods never carry the value in their spec: the Triton container reads it
through an env var from a secretKeyRef, and Kubernetes expands `$(TAILPILOT_TRITON_ADMIN_KEY)` in its
args when the container starts. The operator reads the Secret and sends the header on its admin calls
(the live batching reloads and their config reads), and the profile Job's profiler gets it the same way
as the sidecar it drives.

The Secret is immutable: its value never changes in place, so the Secret's uid names the value, and
the pod template carries that uid (`tailpilot.io/admin-key-secret-uid`). A running container keeps the
value it started with; a Secret deleted and recreated (a new key, a new uid) rolls the pods, so they
take the new key, and until they have, the operator's reloads of the old pods are refused (its
batching change fails and is rolled back; the next decision retries).

What is restricted, and why (gRPC names its protocols as HTTP names its APIs):

- `model-repository` (load, unload, the repository index): loading is running code, unloading is
  taking the service down;
- `model-config` (reading a model's config): the operator reads it to verify and roll back a reload;
  it tells clients nothing they need (inputs and outputs are in `metadata`);
- `trace` and `logging`: their settings change what the server writes (trace files, verbose logs) and
  how fast it serves;
- `shared-memory`: registering regions is for clients on the same host as Triton; serving clients reach
  the pod over the network, so no legitimate one needs it.

Open: `health` (the kubelet's probes, load balancers), `metadata` and `inference` (the clients), and
`statistics`, read-only counters of the service's own traffic that the operator's fast loop reads from
every pod (executions per batch size); restricting them would cost that loop a Secret read per
service and protect figures of the same kind the metrics port publishes.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import Any, Final

from tailpilot.api import constants as c
from tailpilot.api.v1alpha1 import InferenceService
from tailpilot.manifests.meta import object_meta

#: The header the admin calls carry (HTTP). Header names are case-insensitive on HTTP.
ADMIN_KEY_HEADER: Final = "tailpilot-admin-key"
#: What a gRPC call carries as metadata: Triton expects the header with this prefix on gRPC
#: (tritonserver 2.51 answers "expecting header 'triton-grpc-protocol-<header>'").
GRPC_ADMIN_KEY_HEADER: Final = f"triton-grpc-protocol-{ADMIN_KEY_HEADER}"
#: The container env var holding the key (from the Secret), expanded in Triton's args by Kubernetes.
ADMIN_KEY_ENV: Final = "TAILPILOT_TRITON_ADMIN_KEY"
#: The Secret's data key.
SECRET_KEY: Final = "admin-key"
#: Triton's API categories that need the key (see the module docstring for each reason).
RESTRICTED_APIS: Final = ("model-repository", "model-config", "trace", "logging", "shared-memory")
#: Pod-template annotation: the uid of the Secret the pods read the key from (a recreated Secret rolls them).
ANNOTATION_SECRET_UID: Final = f"{c.GROUP}/admin-key-secret-uid"


@dataclass(frozen=True, kw_only=True)
class AdminKeyRef:
    """Where a service's pods read the admin key: the Secret's name, its data key, and its uid."""

    secret_name: str
    key: str = SECRET_KEY
    #: The live Secret's uid: a new one (the Secret was recreated with a new key) rolls the pods.
    secret_uid: str = ""


def admin_key_secret_name(isvc_name: str) -> str:
    """Name of the service's admin-key Secret: the service's name and a suffix the CRD reserves.

    Not the bare name: teams often name their own Secrets after the application (credentials of
    `resnet`), and a Secret of the service's name that the service does not control stops it
    (`ChildNameTaken`). The suffix is in `RESERVED_NAME_SUFFIXES`, so no service can be named like
    another's Secret.
    """
    return f"{isvc_name}{c.ADMIN_KEY_SECRET_SUFFIX}"


def admin_key_ref(isvc_name: str, *, secret_uid: str = "") -> AdminKeyRef:
    """The reference to a service's own admin-key Secret."""
    return AdminKeyRef(secret_name=admin_key_secret_name(isvc_name), secret_uid=secret_uid)


def admin_key_secret(*, isvc: InferenceService, key: str) -> dict[str, Any]:
    """Build the immutable Secret holding `key` (generated by the controller; never derived here)."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": object_meta(
            isvc=isvc, name=admin_key_secret_name(isvc.name), component=c.COMPONENT_SERVER
        ),
        "type": "Opaque",
        # Immutable: the value is never changed in place, so the Secret's uid names it (see above).
        "immutable": True,
        "data": {SECRET_KEY: base64.b64encode(key.encode()).decode()},
    }


def secret_key_value(secret: dict[str, Any], key: str = SECRET_KEY) -> str | None:
    """The key held by a Secret read from the API server (base64 `data`), None when absent or empty."""
    encoded = (secret.get("data") or {}).get(key)
    if not encoded:
        return None
    try:
        value = base64.b64decode(encoded, validate=True).decode()
    except ValueError:  # binascii.Error and UnicodeDecodeError are ValueErrors
        return None
    return value or None


def admin_key_env(ref: AdminKeyRef) -> dict[str, Any]:
    """The container env var that holds the key, from the Secret (never optional: no key, no start)."""
    return {
        "name": ADMIN_KEY_ENV,
        "valueFrom": {"secretKeyRef": {"name": ref.secret_name, "key": ref.key}},
    }


def restricted_api_args() -> list[str]:
    """Triton's flags restricting `RESTRICTED_APIS` to calls with the key (expanded from the env var)."""
    apis = ",".join(RESTRICTED_APIS)
    value = f"$({ADMIN_KEY_ENV})"
    return [
        f"--http-restricted-api={apis}:{ADMIN_KEY_HEADER}={value}",
        f"--grpc-restricted-protocol={apis}:{ADMIN_KEY_HEADER}={value}",
    ]
