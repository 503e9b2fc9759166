"""The last cold start, broken down, in the reconcile pass: status.coldStart and a ColdStart Event.

The activator writes one episode per cold start on the InferenceService (the annotation
`tailpilot.io/cold-start`, `tailpilot.api.cold_start`): when it held the first request, when its
wake landed, when it saw a ready replica and when the first answer was complete. Writing the
annotation changes the object, so a pass follows at once; a pass that finds an episode that ended
after `status.coldStart.answeredAt` (or no cold start recorded yet) reads the service's pods, takes
the one that turned Ready first after the request was held, breaks the time down with its
timestamps (`tailpilot.policy.cold_start`), writes it to the status and tells it in one Event.

The annotation is the activator's; a value that is not an episode is logged (once per value) and
left alone, never failing the pass.
"""

from __future__ import annotations

import logging

from tailpilot.api import constants as c
from tailpilot.api.cold_start import ColdStartEpisode, parse_episode
from tailpilot.api.v1alpha1 import ColdStartPartStatus, ColdStartStatus, InferenceService
from tailpilot.controllers.core.events import EventRecord
from tailpilot.controllers.core.kubeapi import PODS
from tailpilot.controllers.reconcile.deps import PassDeps
from tailpilot.controllers.reconcile.pass_context import ReconcilePass
from tailpilot.manifests.deployment import CONTAINER_NAME, MODEL_REPOSITORY_CONTAINER
from tailpilot.manifests.meta import selector_string
from tailpilot.policy.cold_start import ColdStartBreakdown, break_down, first_ready_since, pod_milestones

log = logging.getLogger(__name__)


def cold_start_status(breakdown: ColdStartBreakdown) -> ColdStartStatus:
    """The breakdown as status.coldStart."""
    return ColdStartStatus(
        held_at=breakdown.held_at,
        answered_at=breakdown.answered_at,
        total_seconds=breakdown.total_milliseconds / 1000,
        parts=[ColdStartPartStatus(name=part.name, seconds=part.seconds) for part in breakdown.parts],
        pod=breakdown.pod,
    )


def cold_start_message(breakdown: ColdStartBreakdown) -> str:
    """The ColdStart Event's words: the total, each part in order, the pod read."""
    parts = ", ".join(f"{part.name} {part.seconds:.3f} s" for part in breakdown.parts)
    pod = f"pod {breakdown.pod}" if breakdown.pod else "no serving pod found: the pod's parts are merged"
    return (
        f"cold start of {breakdown.total_milliseconds / 1000:.3f} s (first request held at "
        f"{breakdown.held_at.isoformat(timespec='milliseconds')}): {parts} ({pod})"
    )


class ColdStartReport:
    """Reads the activator's last episode into status.coldStart, once per episode."""

    def __init__(self, deps: PassDeps) -> None:
        self.deps = deps
        #: The last unreadable annotation logged per service: said once, not on every pass.
        self._unreadable: dict[tuple[str, str], str] = {}

    def run(self, p: ReconcilePass) -> None:
        """A new episode on the object: its breakdown on the status and in one Event."""
        episode = self.episode(p.isvc)
        if episode is None:
            return
        last = p.status.cold_start
        if last is not None and episode.answered_at <= last.answered_at:
            return  # already told
        pods = self.deps.kube.list(PODS, p.isvc.namespace, label_selector=selector_string(p.isvc.name))
        pod = first_ready_since(pods, episode.held_at)
        milestones = None
        if pod is not None:
            milestones = pod_milestones(
                pod, fetch_container=MODEL_REPOSITORY_CONTAINER, server_container=CONTAINER_NAME
            )
        breakdown = break_down(episode, milestones)
        p.status = p.status.model_copy(update={"cold_start": cold_start_status(breakdown)})
        p.events.append(EventRecord("Normal", c.EVENT_COLD_START, cold_start_message(breakdown)))

    def episode(self, isvc: InferenceService) -> ColdStartEpisode | None:
        """The episode the activator last wrote on `isvc` (None: none, or not readable: logged once)."""
        raw = (isvc.metadata.get("annotations") or {}).get(c.ANNOTATION_COLD_START)
        if raw is None:
            return None
        key = (isvc.namespace, isvc.name)
        try:
            if not isinstance(raw, str):
                raise ValueError("not a string")
            episode = parse_episode(raw)
        except ValueError as error:
            text = str(raw)[:200]
            if self._unreadable.get(key) != text:
                self._unreadable[key] = text
                log.warning(
                    "%s/%s: ignoring the annotation %s=%r: %s",
                    *key,
                    c.ANNOTATION_COLD_START,
                    text,
                    error,
                )
            return None
        self._unreadable.pop(key, None)
        return episode
