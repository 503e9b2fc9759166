"""The activator's ready pods, watched: the Services routed to the activator follow them at once.

A service at zero has an EndpointSlice of its Service (`<name>-activator`) that lists the
activator's ready pods, copied there by its reconcile pass (`tailpilot.manifests.activator_routing`).
When an activator pod goes (a rollout, a node drain, the loss of a node) or comes back, that copy
must follow before the leaving pod stops accepting: the chart's preStop sleep is all the time there
is. A pass only runs when something of the service changes, so the operator watches the activator
Service's EndpointSlices itself and, when their ready endpoints change, wakes the services that may
be at zero (`minReplicas: 0`): their passes rewrite the copy. Others have no copy and sleep on.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from tailpilot.kubewatch import ListWatch
from tailpilot.manifests.activator_routing import LABEL_SERVICE_NAME, ActivatorEndpoints, ready_endpoints

log = logging.getLogger(__name__)


class ActivatorWatch:
    """Calls `on_change()` (in its thread) whenever the activator Service's ready endpoints change."""

    def __init__(self, *, list_slices: Callable[..., Any], service_name: str) -> None:
        """Watch, through `list_slices` (one namespace's list function), the slices of `service_name`."""
        self._slices: dict[str, dict[str, Any]] = {}
        self._seen: ActivatorEndpoints | None = None
        self._on_change: Callable[[], None] = lambda: None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._list_watch = ListWatch(
            kind="the activator's endpointslices",
            list_function=list_slices,
            label_selector=f"{LABEL_SERVICE_NAME}={service_name}",
            on_list=self._listed,
            on_event=self._event,
        )

    def start(self, on_change: Callable[[], None]) -> None:
        """Start the watch thread (a daemon: a blocked watch never holds the process at exit)."""
        self._on_change = on_change
        self._thread = threading.Thread(
            target=self._list_watch.run, args=(self._stop,), name="activator-endpoints", daemon=True
        )
        self._thread.start()

    def stop(self, *, join_timeout_s: float = 2.0) -> None:
        """Stop the thread: a blocked watch is unblocked and gets `join_timeout_s` to return."""
        self._stop.set()
        self._list_watch.stop()
        if self._thread is not None:
            self._thread.join(timeout=join_timeout_s)

    @property
    def endpoints(self) -> ActivatorEndpoints | None:
        """The ready endpoints last seen (None before the first list)."""
        return self._seen

    def _listed(self, slices: list[dict[str, Any]]) -> None:
        self._slices = {_name(s): s for s in slices}
        self._publish()

    def _event(self, event_type: str, endpoint_slice: dict[str, Any]) -> None:
        if event_type == "DELETED":
            self._slices.pop(_name(endpoint_slice), None)
        else:
            self._slices[_name(endpoint_slice)] = endpoint_slice
        self._publish()

    def _publish(self) -> None:
        now = ready_endpoints(list(self._slices.values()))
        if now == self._seen:
            return  # a slice rewritten with the same ready pods (a resync, another port's change)
        log.info("the activator's ready pods are now %s", ", ".join(now.addresses) or "none")
        self._seen = now
        self._on_change()


def _name(endpoint_slice: dict[str, Any]) -> str:
    return str((endpoint_slice.get("metadata") or {}).get("name") or "")
