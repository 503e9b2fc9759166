"""The InferenceServices and Triton pods the operator's watches delivered, for the loop that runs every 2 s.

The fast loop reads every autoscaled service's pods every `READ_PERIOD_S`. Asking the API server
each time for the service (a GET) and its pods (a LIST) costs two requests per service per period:
500 requests/s at 500 services, for answers the operator's own watches already carry. kopf watches
InferenceServices and the pods the operator made (to wake the reconcile loops); its handlers also
hand each event's object to `WatchedObjects`, as an informer's store would, and the fast loop reads
from there. Everything runs on the event loop (the handlers and the readers): only a request the
store must send goes to a thread, and its answer is kept on the loop.

Where the store cannot answer, it asks the API server and keeps the answer:
- a service not seen yet (the watch's first listing is still running);
- a service's pods not listed for `RELIST_S`: a watch that broke and listed again delivers no
  DELETED event for a pod deleted in between, so the pod set is listed afresh now and then, which
  bounds how long such a pod can linger (its reads fail meanwhile, and the pods that answer
  count for it: `tailpilot.controllers.signals.pod_signals`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

from tailpilot.api import constants as c
from tailpilot.controllers.core.clock import SYSTEM_CLOCK, Clock
from tailpilot.controllers.core.kubeapi import ISVC, PODS
from tailpilot.controllers.core.seams import ServiceReadsKube
from tailpilot.manifests.meta import selector_labels, selector_string

#: Seconds after which a service's pods are listed from the API server again (see the module doc).
RELIST_S: Final = 60.0

_Key = tuple[str, str]


def _meta(body: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = body.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


class ObjectSource(Protocol):
    """Where the loops that run every few seconds get a service and its Triton pods."""

    async def service(self, namespace: str, name: str) -> dict[str, Any] | None: ...  # noqa: D102

    async def pods(self, namespace: str, service: str) -> list[dict[str, Any]]: ...  # noqa: D102


@dataclass(frozen=True)
class DirectReads:
    """The same answers asked of the API server every time.

    Where no watch feeds a store (tests), and where the objects must be seen as they are now (a
    shutdown putting held pods back).
    """

    kube: ServiceReadsKube

    async def service(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The service's body now (None: it does not exist)."""
        return await asyncio.to_thread(self.kube.get, ISVC, namespace, name)

    async def pods(self, namespace: str, service: str) -> list[dict[str, Any]]:
        """The service's Triton pods now (those its selector selects)."""
        return await asyncio.to_thread(
            self.kube.list, PODS, namespace, label_selector=selector_string(service)
        )


@dataclass
class WatchedObjects:
    """Newest InferenceService and pod bodies by service, from watch events, else from the API server."""

    kube: ServiceReadsKube
    clock: Clock = SYSTEM_CLOCK
    _services: dict[_Key, dict[str, Any]] = field(default_factory=dict)
    #: (namespace, service) -> pod name -> body, and when that set was last listed whole.
    _pods: dict[_Key, dict[str, dict[str, Any]]] = field(default_factory=dict)
    _listed_at: dict[_Key, float] = field(default_factory=dict)
    #: Pod events delivered while a service's pods are being listed, applied after the list.
    _listing: dict[_Key, list[tuple[str | None, str, dict[str, Any], bool]]] = field(default_factory=dict)
    #: Requests sent to the API server because the store could not answer (tests, benchmarks).
    requests: int = 0

    def on_service_event(self, event_type: str | None, body: Mapping[str, Any]) -> None:
        """An InferenceService watch event: keep the newest body, drop it (and its pods) on DELETED."""
        meta = _meta(body)
        key = (str(meta.get("namespace") or "default"), str(meta.get("name") or ""))
        if event_type == "DELETED":
            self.forget(*key)
        else:
            self._services[key] = dict(body)

    def on_pod_event(self, event_type: str | None, body: Mapping[str, Any]) -> None:
        """A watch event of a pod the operator made: keep a service's Triton pod, drop it on DELETED."""
        meta = _meta(body)
        labels = meta.get("labels") or {}
        service = labels.get(c.LABEL_ISVC)
        if not service:
            return
        key = (str(meta.get("namespace") or "default"), str(service))
        name = str(meta.get("name") or "")
        selected = all(labels.get(k) == v for k, v in selector_labels(str(service)).items())
        if key in self._listing:
            self._listing[key].append((event_type, name, dict(body), selected))
        self._apply(key, event_type, name, dict(body), selected)

    def _apply(
        self, key: _Key, event_type: str | None, name: str, body: dict[str, Any], selected: bool
    ) -> None:
        if event_type == "DELETED" or not selected:
            self._pods.get(key, {}).pop(name, None)
        elif key in self._pods:
            # Only services listed once take events: a set built from events alone could lack the
            # pods that no event has mentioned since the watch started.
            self._pods[key][name] = body

    def may_scale_to_zero(self) -> list[_Key]:
        """The services whose spec lets them go to zero (`minReplicas: 0`): those the activator serves."""
        return [
            key
            for key, body in self._services.items()
            if ((body.get("spec") or {}).get("autoscaling") or {}).get("minReplicas") == 0
        ]

    def forget(self, namespace: str, name: str) -> None:
        """Drop a service and its pods (deleted)."""
        key = (namespace, name)
        self._services.pop(key, None)
        self._pods.pop(key, None)
        self._listed_at.pop(key, None)

    async def service(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The service's newest body (None: it does not exist)."""
        key = (namespace, name)
        body = self._services.get(key)
        if body is None:
            self.requests += 1
            body = await DirectReads(self.kube).service(namespace, name)
            if body is not None:
                self._services.setdefault(key, body)
        return body

    async def pods(self, namespace: str, service: str) -> list[dict[str, Any]]:
        """The service's Triton pods (those its selector selects)."""
        key = (namespace, service)
        listed = self._listed_at.get(key)
        if key in self._listing:  # another caller is listing them: what the store has meanwhile
            return list(self._pods.get(key, {}).values())
        if listed is None or self.clock.monotonic() - listed >= RELIST_S:
            self.requests += 1
            self._listing[key] = []
            try:
                fresh = await DirectReads(self.kube).pods(namespace, service)
            finally:
                arrived = self._listing.pop(key)
            self._pods[key] = {str(_meta(p).get("name")): p for p in fresh}
            # Events delivered while the list ran are at least as new as what it shows of their pods.
            for event in arrived:
                self._apply(key, *event)
            self._listed_at[key] = self.clock.monotonic()
        return list(self._pods[key].values())
