"""A small typed wrapper over the Kubernetes REST API for the reconciler (all cluster I/O is here).

Objects are plain dicts (what the manifest builders produce). Writes are
server-side applies with the field manager `tailpilot`, so the operator owns
exactly the fields it sets and corrects drift in them, without fighting other
controllers over fields it never set. Every call is counted by verb so the
benchmark can report the operator's write rate at rest.
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from urllib3.util.retry import Retry

from tailpilot.api import constants as c

FIELD_MANAGER = "tailpilot"
#: Seconds to connect to the API server, and to wait for its answer, on every call. Without them a
#: connection that stops answering (a half-open TCP connection, an API server stuck mid-request)
#: held a reconcile worker for good while the process looked healthy. The read bound covers the
#: largest answer the operator asks for (one page of a list, `LIST_PAGE_SIZE` objects).
API_CONNECT_TIMEOUT_S = 5.0
API_READ_TIMEOUT_S = 60.0
#: Attempts of one call that the API server turned away without doing it: 429 (its priority and
#: fairness sheds load) for every verb, and 5xx for reads, which are safe to repeat. Two minutes of
#: an overloaded API server used to fail every call at once and send the whole reconcile into its
#: back-off, autoscaling included.
API_ATTEMPTS = 3
#: Longest wait between two attempts, whatever Retry-After asks: a worker is never held longer.
MAX_RETRY_WAIT_S = 10.0
#: Wait between attempts when the answer names none (or names a date rather than seconds).
DEFAULT_RETRY_WAIT_S = 1.0
#: Objects per page of a list: a list of every pod in a large cluster arrives in bounded answers
#: instead of one answer of them all.
LIST_PAGE_SIZE = 500


@dataclass(frozen=True)
class Resource:
    """Where a kind lives in the REST API."""

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool = True

    @property
    def api_version(self) -> str:  # noqa: D102
        return f"{self.group}/{self.version}" if self.group else self.version

    def path(
        self, namespace: str | None = None, name: str | None = None, subresource: str | None = None
    ) -> str:
        """The REST path of a collection, an object, or one of its subresources."""
        root = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if self.namespaced and namespace:
            root += f"/namespaces/{namespace}"
        root += f"/{self.plural}"
        if name:
            root += f"/{name}"
        if subresource:
            root += f"/{subresource}"
        return root


CONFIGMAPS = Resource("", "v1", "configmaps", "ConfigMap")
SERVICES = Resource("", "v1", "services", "Service")
PODS = Resource("", "v1", "pods", "Pod")
EVENTS = Resource("", "v1", "events", "Event")
SECRETS = Resource("", "v1", "secrets", "Secret")
DEPLOYMENTS = Resource("apps", "v1", "deployments", "Deployment")
REPLICA_SETS = Resource("apps", "v1", "replicasets", "ReplicaSet")
JOBS = Resource("batch", "v1", "jobs", "Job")
PDBS = Resource("policy", "v1", "poddisruptionbudgets", "PodDisruptionBudget")
NETWORK_POLICIES = Resource("networking.k8s.io", "v1", "networkpolicies", "NetworkPolicy")
SERVICE_MONITORS = Resource("monitoring.coreos.com", "v1", "servicemonitors", "ServiceMonitor")
PROMETHEUS_RULES = Resource("monitoring.coreos.com", "v1", "prometheusrules", "PrometheusRule")
NODES = Resource("", "v1", "nodes", "Node", namespaced=False)
LEASES = Resource("coordination.k8s.io", "v1", "leases", "Lease")
ENDPOINT_SLICES = Resource("discovery.k8s.io", "v1", "endpointslices", "EndpointSlice")
ISVC = Resource(c.GROUP, c.VERSION, c.PLURAL, c.KIND)

BY_KIND = {
    r.kind: r
    for r in (
        CONFIGMAPS,
        SERVICES,
        PODS,
        SECRETS,
        DEPLOYMENTS,
        JOBS,
        PDBS,
        NETWORK_POLICIES,
        SERVICE_MONITORS,
        PROMETHEUS_RULES,
        ENDPOINT_SLICES,
    )
}


def resource_of(obj: Mapping[str, Any]) -> Resource:
    """The REST resource of a manifest, by its kind (KeyError for a kind the operator never writes)."""
    return BY_KIND[obj["kind"]]


#: urllib3's own retries, for what never reached the API server (a refused or reset connection, a
#: pooled connection gone stale). Its retries on status are off: urllib3 honours any Retry-After, an
#: hour included, on a reconcile worker. `Kube._call` repeats turned-away calls with its own bound.
CONNECTION_RETRIES = Retry(total=3, redirect=0, status=0, respect_retry_after_header=False)


def api_client(configuration: client.Configuration) -> client.ApiClient:
    """The operator's API client for `configuration`: connection retries only, a pool per worker."""
    configuration.retries = CONNECTION_RETRIES
    # The reconciler runs in a few worker threads; give each its own pooled connection.
    configuration.connection_pool_maxsize = 16
    return client.ApiClient(configuration)


def retry_wait_s(method: str, status: int, retry_after: str | None) -> float | None:
    """Seconds to wait before repeating a call that answered `status`; None: do not repeat it.

    429 is repeated for every verb (the API server refused it before doing anything); a 5xx only for
    GET, since a write may have been done before the server failed.
    """
    if status != 429 and not (method == "GET" and status in (500, 502, 503, 504)):
        return None
    try:
        asked = float(retry_after) if retry_after else DEFAULT_RETRY_WAIT_S
    except ValueError:  # an HTTP date: not worth a clock comparison for a bounded wait
        asked = DEFAULT_RETRY_WAIT_S
    if asked != asked:  # NaN
        asked = DEFAULT_RETRY_WAIT_S
    return min(MAX_RETRY_WAIT_S, max(0.0, asked))


def ready_pod_ip(pod: Mapping[str, Any]) -> str | None:
    """The IP of a pod whose Ready condition is True (None if not Ready or not yet addressed)."""
    status = pod.get("status") or {}
    ready = any(
        cond.get("type") == "Ready" and cond.get("status") == "True" for cond in status.get("conditions", [])
    )
    ip = status.get("podIP")
    return str(ip) if ready and ip else None


def pod_url(ip: str, port: int, path: str = "") -> str:
    """`http://IP:PORT/path` of a pod, an IPv6 address in brackets (dual-stack and IPv6 clusters)."""
    host = f"[{ip}]" if ":" in ip else ip
    return f"http://{host}:{port}{path}"


class Kube:
    """Thread-safe enough for the reconciler's worker threads (urllib3 pools its connections)."""

    def __init__(
        self,
        api: client.ApiClient,
        *,
        connect_timeout_s: float | None = API_CONNECT_TIMEOUT_S,
        read_timeout_s: float | None = API_READ_TIMEOUT_S,
        attempts: int = API_ATTEMPTS,
        sleep: Callable[[float], None] = time.sleep,
        page_size: int = LIST_PAGE_SIZE,
    ):
        self._api = api
        self._lock = threading.Lock()
        self._timeout = (connect_timeout_s, read_timeout_s)
        self._attempts = max(1, attempts)
        self._sleep = sleep
        self._page_size = page_size
        self.requests: Counter[str] = Counter()

    def _call(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        query: list[tuple[str, str]] | None = None,
        content_type: str = "application/json",
        once_within_s: float | None = None,
    ) -> Any:
        """Send, repeating what the API server turned away; `once_within_s`: one attempt, bounded in all."""
        attempts = 1 if once_within_s is not None else self._attempts
        for attempt in range(1, attempts + 1):
            status, reason, response, raw = self._send(
                method, path, body, query, content_type, timeout=once_within_s
            )
            if 200 <= status < 300:
                return json.loads(raw) if raw else None
            wait_s = retry_wait_s(method, status, response.headers.get("Retry-After"))
            if wait_s is None or attempt == attempts:
                break
            self._sleep(wait_s)
        raise ApiException(
            status=status,
            reason=reason,
            http_resp=response,
            body=raw.decode(errors="replace") if raw else None,
        )

    def _send(
        self,
        method: str,
        path: str,
        body: Any,
        query: list[tuple[str, str]] | None,
        content_type: str,
        *,
        timeout: float | None = None,
    ) -> tuple[int, str, Any, bytes | None]:
        """One request: (status, reason, the response, its body); `timeout`: its whole time, if given."""
        with self._lock:
            self.requests[method] += 1
        method_, url, headers, payload, _ = self._api.param_serialize(
            method=method,
            resource_path=path,
            query_params=query or [],
            header_params={"Content-Type": content_type, "Accept": "application/json"},
            body=body,
            auth_settings=["BearerToken"],
        )
        response = self._api.call_api(
            method_,
            url,
            header_params=headers,
            body=payload,
            _request_timeout=self._timeout if timeout is None else timeout,
        )
        raw: bytes | None = response.read()  # type: ignore[no-untyped-call]
        return int(response.status), str(response.reason), response, raw

    def get(self, resource: Resource, namespace: str | None, name: str) -> dict[str, Any] | None:
        """The object, or None when it does not exist."""
        try:
            return dict(self._call("GET", resource.path(namespace, name)))
        except ApiException as error:
            if error.status == 404:
                return None
            raise

    def list(
        self, resource: Resource, namespace: str | None, *, label_selector: str = "", field_selector: str = ""
    ) -> list[dict[str, Any]]:
        """Objects matching the selectors; in every namespace when namespace is None.

        Read in pages of `LIST_PAGE_SIZE`. A continue token that expired between pages (410: the
        list's snapshot left etcd's compaction window) restarts the list once from a fresh snapshot.
        """
        query = [("labelSelector", label_selector)] if label_selector else []
        if field_selector:
            query.append(("fieldSelector", field_selector))
        query.append(("limit", str(self._page_size)))
        for fresh_start in (False, True):
            items: list[dict[str, Any]] = []
            token = ""
            try:
                while True:
                    page = self._call(
                        "GET",
                        resource.path(namespace),
                        query=query + ([("continue", token)] if token else []),
                    )
                    items.extend(page["items"])
                    token = (page.get("metadata") or {}).get("continue") or ""
                    if not token:
                        return items
            except ApiException as error:
                if error.status != 410 or not token or fresh_start:
                    raise
        raise AssertionError("unreachable: the second start returns or raises")

    def apply(self, body: dict[str, Any], *, subresource: str | None = None) -> dict[str, Any]:
        """Server-side apply `body` (force: the operator owns what it sets)."""
        resource = resource_of(body)
        meta = body["metadata"]
        return dict(
            self._call(
                "PATCH",
                resource.path(meta.get("namespace"), meta["name"], subresource),
                body=json.dumps(body),
                content_type="application/apply-patch+yaml",
                query=[("fieldManager", FIELD_MANAGER), ("force", "true")],
            )
        )

    def dry_run_create(self, body: dict[str, Any]) -> dict[str, Any]:
        """Have the API server judge a create of `body` without persisting it (`dryRun=All`).

        Raises:
            ApiException: What the API server refused, as for a create (422 for an invalid object).
        """
        resource = resource_of(body)
        return dict(
            self._call(
                "POST",
                resource.path(body["metadata"].get("namespace")),
                body=body,
                query=[("fieldManager", FIELD_MANAGER), ("dryRun", "All")],
            )
        )

    def create(self, body: dict[str, Any]) -> dict[str, Any] | None:
        """Create; None when an object of that name already exists (idempotent re-runs)."""
        resource = resource_of(body)
        try:
            return dict(
                self._call(
                    "POST",
                    resource.path(body["metadata"].get("namespace")),
                    body=body,
                    query=[("fieldManager", FIELD_MANAGER)],
                )
            )
        except ApiException as error:
            if error.status == 409:
                return None
            raise

    def patch_status(self, body: Mapping[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
        """Merge-patch the status subresource of the InferenceService `body` with `patch`."""
        meta = body["metadata"]
        return self.merge_patch(
            ISVC, meta["namespace"], meta["name"], {"status": patch}, subresource="status"
        )

    def merge_patch(
        self,
        resource: Resource,
        namespace: str | None,
        name: str,
        patch: dict[str, Any],
        *,
        subresource: str | None = None,
    ) -> dict[str, Any]:
        """JSON merge patch (used for status and for the custom resource)."""
        return dict(
            self._call(
                "PATCH",
                resource.path(namespace, name, subresource),
                body=patch,
                content_type="application/merge-patch+json",
                query=[("fieldManager", FIELD_MANAGER)],
            )
        )

    def delete(self, resource: Resource, namespace: str | None, name: str, *, uid: str | None = None) -> bool:
        """Delete in the background (dependents go too); False if it was already gone.

        With `uid`, only the object of that uid: the API server refuses (409) when the name now holds
        another object, one created since the caller read it, which is then left alone (False).
        """
        body: dict[str, Any] = {"propagationPolicy": "Background"}
        if uid:
            body["preconditions"] = {"uid": uid}
        try:
            self._call("DELETE", resource.path(namespace, name), body=body)
        except ApiException as error:
            if error.status == 404 or (uid and error.status == 409):
                return False
            raise
        return True

    def post_event(
        self, involved: dict[str, Any], *, type_: str, reason: str, message: str, now: str
    ) -> None:
        """Post a core/v1 Event about an object (what `kubectl describe` and `get events` show).

        `now` is RFC 3339 text (`iso_time`); the typed model parses it into a datetime, which the
        serializer writes back as "...+00:00" instead of "...Z": the same instant, and the API
        server (metav1.Time) decodes both alike and stores UTC "Z".
        """
        meta = involved["metadata"]
        event = client.CoreV1Event(
            api_version="v1",
            kind="Event",
            metadata=client.V1ObjectMeta(generate_name=f"{meta['name']}.", namespace=meta["namespace"]),
            involved_object=client.V1ObjectReference(
                api_version=involved["apiVersion"],
                kind=involved["kind"],
                name=meta["name"],
                namespace=meta["namespace"],
                uid=meta.get("uid"),
            ),
            type=type_,
            reason=reason,
            message=message[:1024],
            source=client.V1EventSource(component="tailpilot-operator"),
            reporting_component="tailpilot.io/operator",
            reporting_instance="tailpilot-operator",
            first_timestamp=now,
            last_timestamp=now,
            count=1,
        )
        # camelCase JSON; unset (None) fields are left out.
        body = self._api.sanitize_for_serialization(event)  # type: ignore[no-untyped-call]
        self._call("POST", EVENTS.path(meta["namespace"]), body=body)

    def read_lease(self, namespace: str, name: str, *, timeout_s: float) -> dict[str, Any] | None:
        """The Lease, or None when there is none: one attempt, within `timeout_s` in all.

        The leader election bounds each request by the time left before its renew deadline, so a
        call that the API server turns away is not repeated here: the election tries again itself.
        """
        try:
            return dict(self._call("GET", LEASES.path(namespace, name), once_within_s=timeout_s))
        except ApiException as error:
            if error.status == 404:
                return None
            raise

    def write_lease(self, body: dict[str, Any], *, create: bool, timeout_s: float) -> dict[str, Any]:
        """Create the Lease `body`, or replace it; the stored Lease.

        A replace is a PUT, which the API server refuses (409) unless the body's resourceVersion is
        the stored one. One attempt, within `timeout_s` in all (see `read_lease`).
        """
        meta = body["metadata"]
        if create:
            answer = self._call("POST", LEASES.path(meta["namespace"]), body=body, once_within_s=timeout_s)
        else:
            path = LEASES.path(meta["namespace"], meta["name"])
            answer = self._call("PUT", path, body=body, once_within_s=timeout_s)
        return dict(answer)

    def has_resource(self, group: str, version: str, plural: str) -> bool:
        """Whether the cluster serves a resource (e.g. the prometheus-operator CRDs)."""
        try:
            found = self._call("GET", f"/apis/{group}/{version}")
        except ApiException as error:
            if error.status == 404:
                return False
            raise
        return any(r.get("name") == plural for r in found.get("resources", []))

    def writes(self) -> int:
        """Number of write requests sent so far."""
        return sum(n for verb, n in self.requests.items() if verb in {"POST", "PUT", "PATCH", "DELETE"})
