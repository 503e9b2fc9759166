"""kopf wiring: one long-lived reconcile loop per InferenceService, woken by events.

Why a daemon per object instead of on.create/on.update handlers: the
reconciler is level-based (it reads everything each pass), so it only needs
"something changed, look again" signals. Raw watch events (`on.event`) of the
InferenceService and of its children give exactly that without kopf writing
progress annotations or diff-bases onto the object, which keeps the write
rate at rest at zero. The loop also resyncs periodically and on the
reconciler's own requeue time (build back-off, rollout progress).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import kopf

from tailpilot.api import constants as c
from tailpilot.controllers.reconciler import Reconciler

log = logging.getLogger("tailpilot.handlers")


@dataclass
class Wakeups:
    """One asyncio.Event per service: set it to make that service's loop reconcile now."""

    events: dict[tuple[str, str], asyncio.Event] = field(default_factory=dict)

    def get(self, namespace: str, name: str) -> asyncio.Event:  # noqa: D102
        return self.events.setdefault((namespace, name), asyncio.Event())

    def wake(self, namespace: str | None, name: str | None) -> None:  # noqa: D102
        if namespace and name and (namespace, name) in self.events:
            self.events[(namespace, name)].set()

    def forget(self, namespace: str, name: str) -> None:  # noqa: D102
        self.events.pop((namespace, name), None)


def register(registry: kopf.OperatorRegistry, *, reconciler: Reconciler, wakeups: Wakeups) -> None:
    """Register the handlers on an explicit registry (no module-level global state)."""

    @kopf.on.login(registry=registry)
    def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
        # An explicit registry does not get kopf's default login handlers; use the same
        # credentials the `kubernetes` client finds (in-cluster, else the kubeconfig).
        return kopf.login_via_client(**kwargs)

    @kopf.daemon(c.GROUP, c.VERSION, c.PLURAL, registry=registry, cancellation_timeout=10.0)
    async def serve(name: str, namespace: str | None, stopped: kopf.DaemonStopped, **_: Any) -> None:
        namespace = namespace or "default"
        wake = wakeups.get(namespace, name)
        try:
            while not stopped:
                wake.clear()
                try:
                    result = await asyncio.to_thread(reconciler.reconcile, namespace, name)
                    delay = result.requeue_after
                except Exception:  # noqa: BLE001 - one bad pass must not end the loop
                    log.exception("reconcile of %s/%s failed; retrying", namespace, name)
                    delay = 5.0
                try:
                    await asyncio.wait_for(wake.wait(), timeout=delay)
                except TimeoutError:
                    pass
        finally:
            wakeups.forget(namespace, name)

    @kopf.on.event(c.GROUP, c.VERSION, c.PLURAL, registry=registry)
    def on_service_event(name: str, namespace: str | None, **_: Any) -> None:
        wakeups.wake(namespace, name)

    managed = {c.LABEL_ISVC: kopf.PRESENT}

    def on_child_event(labels: Mapping[str, str], namespace: str | None, **_: Any) -> None:
        wakeups.wake(namespace, labels.get(c.LABEL_ISVC))

    for group, plural in CHILD_RESOURCES:
        kopf.on.event(group, "v1", plural, labels=managed, registry=registry)(on_child_event)


#: Children whose changes (a build pod finishing, a replica becoming ready, a hand edit) wake the owner.
CHILD_RESOURCES = (
    ("batch", "jobs"),
    ("apps", "deployments"),
    ("", "pods"),
    ("", "configmaps"),
    ("", "services"),
    ("policy", "poddisruptionbudgets"),
)
