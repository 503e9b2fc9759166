"""Operator-level settings the manifest builders need (set by the chart, passed in by the controller).

A frozen value, so builders stay pure: the controller reads flags/environment
once at start-up and hands this object to every builder call.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tailpilot.api import constants as c
from tailpilot.api.quantity import quantity_value

#: A NetworkPolicyPeer as the API server takes it (`namespaceSelector`, `podSelector`, `ipBlock`).
Peer = Mapping[str, Any]


@dataclass(frozen=True, kw_only=True)
class NetworkPolicySettings:
    """Who may reach a service's Triton pods (`tailpilot.manifests.network_policy`); set by the chart.

    Attributes:
        clients: Peers allowed to the inference ports (HTTP, gRPC). Empty: every source, since the
            operator cannot know a service's clients.
        prometheus: Peers allowed to the metrics port (the Prometheus that scrapes the pods). Empty:
            none but the operator.
        operator: The operator's own pods: the live reloads and statistics (HTTP) and the fast loop's
            metrics reads. Empty: none, where the clients' rule does not already admit them.
    """

    clients: tuple[Peer, ...] = ()
    prometheus: tuple[Peer, ...] = ()
    operator: tuple[Peer, ...] = ()


@dataclass(frozen=True, kw_only=True)
class ManifestSettings:
    """Everything a builder needs that is not on the InferenceService.

    Attributes:
        builder_image: Image of the engine build Job (`tailpilot build`).
        triton_image: Default Triton image when spec.runtime.image is unset.
        image_pull_policy: Pull policy of every container the operator creates.
        engine_store_claim: PVC holding the engine store, in the service's namespace.
        build_backoff_limit: Retries of a failed build pod before the Job fails.
        build_deadline_seconds: activeDeadlineSeconds of a build Job.
        build_ttl_seconds: ttlSecondsAfterFinished of a build or profile Job; the operator reads the
            result first.
        profile_backoff_limit: Retries of a failed profile pod before the Job fails (none by default: a
            failed measurement rarely succeeds again, and the engine serves without it meanwhile).
        profile_deadline_seconds: activeDeadlineSeconds of a profile Job, pending time included; past
            it, the engine serves without a profile (and the autoscaler learns its speed online).
        run_as_user: UID (and GID) of every container the operator creates. Above 10000, clear of the
            users and groups a node's own accounts take (1000 is the first regular user on most
            distributions, and Triton's image user): a container escape lands on no host account.
        gpu_startup_seconds: How long a GPU replica may take to start (TensorRT plans load slowly).
        cpu_startup_seconds: How long a CPU replica may take to start.
        shm_size: Size of /dev/shm (Triton's Python backend passes tensors through shared memory).
        build_memory_request: Memory a build pod requests (what the scheduler sets aside for it).
        build_memory_limit: Memory a build pod may use; past it the kernel kills it (OOMKilled) and
            the Job retries it within its backoffLimit.
        build_tmp_size: sizeLimit of a build or profile pod's /tmp emptyDir (its only writable path besides
            the store; the root filesystem is read-only). Past it the kubelet evicts the pod.
        store_retention_hours: The store's GC removes an engine no service's status names once no
            build has used it for this long.
        store_budget_bytes: While the store's engines take more, the GC removes unnamed engines,
            least recently used first; None: no budget.
        monitoring_labels: Extra labels on ServiceMonitors and PrometheusRules (e.g. a Prometheus's selector).
        network_policy: Each service's NetworkPolicy over its Triton pods; None: none is created
            (and one this service owns is deleted).
    """

    builder_image: str
    triton_image: str = c.DEFAULT_TRITON_IMAGE
    image_pull_policy: str = "IfNotPresent"
    engine_store_claim: str = c.DEFAULT_ENGINE_STORE_CLAIM
    build_backoff_limit: int = 2
    build_deadline_seconds: int = 3600
    build_ttl_seconds: int = 86400
    profile_backoff_limit: int = 0
    profile_deadline_seconds: int = 900
    run_as_user: int = 10001
    gpu_startup_seconds: int = 900
    cpu_startup_seconds: int = 180
    shm_size: str = "1Gi"
    build_memory_request: str = "1Gi"
    build_memory_limit: str = "8Gi"
    build_tmp_size: str = "4Gi"
    store_retention_hours: float = 30 * 24.0
    store_budget_bytes: int | None = None
    monitoring_labels: Mapping[str, str] = field(default_factory=dict)
    network_policy: NetworkPolicySettings | None = None


# Environment variables the chart sets on the operator (templates/operator-deployment.yaml) that
# feed these settings. The controller (`controllers.process.main.parse_args`, the operator's one settings
# path) passes its environment in; the parsing stays pure.
ENV_BUILDER_IMAGE = "TAILPILOT_BUILDER_IMAGE"
ENV_TRITON_IMAGE = "TAILPILOT_TRITON_IMAGE"
ENV_ENGINE_STORE_CLAIM = "TAILPILOT_ENGINE_STORE_CLAIM"
ENV_MONITORING_LABELS = "TAILPILOT_MONITORING_LABELS"
ENV_BUILD_MEMORY_REQUEST = "TAILPILOT_BUILD_MEMORY_REQUEST"
ENV_BUILD_MEMORY_LIMIT = "TAILPILOT_BUILD_MEMORY_LIMIT"
ENV_BUILD_TMP_SIZE = "TAILPILOT_BUILD_TMP_SIZE"
ENV_STORE_RETENTION_HOURS = "TAILPILOT_STORE_RETENTION_HOURS"
#: A quantity (`500Gi`); unset or empty: no budget.
ENV_STORE_BUDGET = "TAILPILOT_STORE_BUDGET"
#: JSON `{"clients": [peer...], "prometheus": [peer...], "operator": [peer...]}`: the services'
#: NetworkPolicies are on when it is set (the chart sets it unless `networkPolicy.enabled` is false).
#: Unset, the operator creates none: run outside the chart, it knows neither its own pods' labels nor
#: the Prometheus, and a policy without them would cut its own reads off.
ENV_NETWORK_POLICY = "TAILPILOT_NETWORK_POLICY"


def network_policy_from_json(text: str) -> NetworkPolicySettings | None:
    """Parse TAILPILOT_NETWORK_POLICY; None for an empty value.

    Raises:
        ValueError: When it is not a JSON object whose known keys hold lists of JSON objects.
    """
    if not text.strip():
        return None
    try:
        loaded = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{ENV_NETWORK_POLICY} must be a JSON object: {exc}") from exc
    if not isinstance(loaded, dict):
        raise ValueError(f"{ENV_NETWORK_POLICY} must be a JSON object, got {loaded!r}")
    unknown = sorted(set(loaded) - {"clients", "prometheus", "operator"})
    if unknown:
        raise ValueError(f"{ENV_NETWORK_POLICY}: unknown keys {unknown}")
    peers: dict[str, tuple[Peer, ...]] = {}
    for key in ("clients", "prometheus", "operator"):
        value = loaded.get(key) or []
        if not isinstance(value, list) or not all(isinstance(p, dict) and p for p in value):
            raise ValueError(f"{ENV_NETWORK_POLICY}: {key} must be a list of NetworkPolicyPeer objects")
        peers[key] = tuple(value)
    return NetworkPolicySettings(**peers)


def settings_from_env(environ: Mapping[str, str], *, default_builder_image: str = "") -> ManifestSettings:
    """Build the settings from the operator's environment (a mapping, e.g. `os.environ`).

    An unset or empty variable takes its default; only the keys below are read.

    Raises:
        ValueError: When the builder image is missing (and no default is given) or the monitoring
            labels are not a JSON object of strings.
    """
    builder_image = environ.get(ENV_BUILDER_IMAGE) or default_builder_image
    if not builder_image:
        raise ValueError(f"{ENV_BUILDER_IMAGE} must name the engine builder image")
    try:
        labels = json.loads(environ.get(ENV_MONITORING_LABELS) or "{}")
    except json.JSONDecodeError as exc:
        raise ValueError(f"{ENV_MONITORING_LABELS} must be a JSON object of strings: {exc}") from exc
    if not isinstance(labels, dict) or not all(isinstance(v, str) for v in labels.values()):
        raise ValueError(f"{ENV_MONITORING_LABELS} must be a JSON object of strings, got {labels!r}")
    defaults = ManifestSettings(builder_image=builder_image)
    build_memory_request = _quantity(environ, ENV_BUILD_MEMORY_REQUEST, defaults.build_memory_request)
    build_memory_limit = _quantity(environ, ENV_BUILD_MEMORY_LIMIT, defaults.build_memory_limit)
    if quantity_value(build_memory_request) > quantity_value(build_memory_limit):
        raise ValueError(
            f"{ENV_BUILD_MEMORY_REQUEST} ({build_memory_request}) is above {ENV_BUILD_MEMORY_LIMIT} "
            f"({build_memory_limit})"
        )
    retention = environ.get(ENV_STORE_RETENTION_HOURS) or ""
    try:
        retention_hours = float(retention) if retention else defaults.store_retention_hours
    except ValueError as exc:
        raise ValueError(f"{ENV_STORE_RETENTION_HOURS} must be a number of hours, got {retention!r}") from exc
    if not retention_hours > 0:
        raise ValueError(f"{ENV_STORE_RETENTION_HOURS} must be above 0, got {retention!r}")
    budget = environ.get(ENV_STORE_BUDGET) or ""
    return ManifestSettings(
        builder_image=builder_image,
        build_memory_request=build_memory_request,
        build_memory_limit=build_memory_limit,
        build_tmp_size=_quantity(environ, ENV_BUILD_TMP_SIZE, defaults.build_tmp_size),
        store_retention_hours=retention_hours,
        store_budget_bytes=int(quantity_value(_quantity(environ, ENV_STORE_BUDGET, budget)))
        if budget
        else None,
        triton_image=environ.get(ENV_TRITON_IMAGE) or c.DEFAULT_TRITON_IMAGE,
        engine_store_claim=environ.get(ENV_ENGINE_STORE_CLAIM) or c.DEFAULT_ENGINE_STORE_CLAIM,
        monitoring_labels={str(k): str(v) for k, v in labels.items()},
        network_policy=network_policy_from_json(environ.get(ENV_NETWORK_POLICY) or ""),
    )


def _quantity(environ: Mapping[str, str], name: str, default: str) -> str:
    """A Kubernetes quantity from the environment (the default when unset or empty), checked.

    Raises:
        ValueError: When it is not a quantity above zero.
    """
    text = environ.get(name) or default
    try:
        positive = quantity_value(text) > 0
    except ValueError as exc:
        raise ValueError(f"{name} must be a Kubernetes quantity such as 4Gi, got {text!r}") from exc
    if not positive:
        raise ValueError(f"{name} must be above 0, got {text!r}")
    return text
