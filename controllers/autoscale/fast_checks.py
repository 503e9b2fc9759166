"""The fast loop of a served service: read its pods every `READ_PERIOD_S`, then the fast rules.

Each period, for every service the autoscaler drives (and every one with backlogRotation):

- the ready pods and their `tailpilot.io/rotation` label, as the operator's watches delivered them
  (`tailpilot.controllers.core.watched`: no request to the API server per period);
- one read of their Triton metrics pages (`tailpilot.controllers.signals.pod_signals.PodSignals`), kept in
  the service's read history: the autoscaler's Observation is built from it at each decision;
- then, each turned on by its own field of spec.autoscaling, the two rules that act between
  decisions, on the same reads:
  - backlogRotation: hold backlogged Triton pods out of the Service while they drain
    (`tailpilot.policy.rotation.choose_rotation`, measured in the simulator: docs/autoscaling.md);
  - surgeResponse: call a decision early when the arrivals exceed what the replicas asked for serve
    (`tailpilot.policy.surge.surge_step`); the service's loop then runs the autoscaler at once with
    the check's reading (`FastCheck.surge`).

Both rules use one replica's capacity at the batching in force, from the engine profile and the
service-time scale the autoscaler learned: its live policy state on the service's runtime
(`service_runtime.ServiceRuntime.policy_state`), seeded from status.learned until it decided once.
The rotation flips the label (`in` <-> `held`) on the pods whose place changes, posts an Event and
sets `tailpilot_replicas_held_out`. A pod whose metrics cannot be read is never held (and a held one
is put back): without data nothing is held.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tailpilot.api import constants as c
from tailpilot.api.v1alpha1 import InferenceService
from tailpilot.controllers.core.clock import SYSTEM_CLOCK, Clock, utc_now
from tailpilot.controllers.core.events import EventRecord, post_events
from tailpilot.controllers.core.kubeapi import PODS, ready_pod_ip
from tailpilot.controllers.core.metrics import OperatorMetrics
from tailpilot.controllers.core.seams import FastCheckKube
from tailpilot.controllers.core.settings import DEFAULT_CONTROL_PERIOD_S
from tailpilot.controllers.core.status import (
    batching_in_force,
    decode_status,
    engine_profile,
    service_without_status,
)
from tailpilot.controllers.core.watched import DirectReads, ObjectSource
from tailpilot.controllers.signals.pod_signals import PodSignals
from tailpilot.controllers.signals.service_runtime import ServiceRuntime, ServiceRuntimes
from tailpilot.policy.core import replica_capacity_per_s
from tailpilot.policy.from_spec import observation_windows
from tailpilot.policy.rotation import RotationConfig, choose_rotation
from tailpilot.policy.signals import (
    ARRIVAL_SPAN_S,
    PodRead,
    TritonCounters,
    arrival_rate_per_s,
    completion_rate_per_s,
)
from tailpilot.policy.surge import SurgeConfig, SurgeReading, surge_step

log = logging.getLogger("tailpilot.rotation")


def label_changes(labels: Mapping[str, str], held_out: frozenset[str]) -> dict[str, str]:
    """The rotation label each pod must get (pod -> value), for the pods whose label differs."""
    changes = {}
    for pod, current in labels.items():
        wanted = c.ROTATION_HELD if pod in held_out else c.ROTATION_IN
        if current != wanted:
            changes[pod] = wanted
    return changes


def _rotation_label(pod: Mapping[str, Any]) -> str | None:
    """A pod's `tailpilot.io/rotation` label (None: the pod takes no part in the rotation)."""
    value = (pod["metadata"].get("labels") or {}).get(c.LABEL_ROTATION)
    return None if value is None else str(value)


def _serving_ip(pod: Mapping[str, Any]) -> str | None:
    """A Ready pod's IP, unless it is being deleted (it leaves the endpoints anyway)."""
    deleting = bool((pod.get("metadata") or {}).get("deletionTimestamp"))
    return None if deleting else ready_pod_ip(pod)


@dataclass(frozen=True, slots=True)
class FastCheck:
    """What one fast check did: the pods held out after it, and a surge that calls a decision."""

    held_out: frozenset[str] = frozenset()
    surge: SurgeReading | None = None


@dataclass
class FastChecker:
    """Runs one period of a service's fast loop per call: the read, then the opted-in rules."""

    kube: FastCheckKube
    signals: PodSignals
    metrics: OperatorMetrics
    control_period_s: float = DEFAULT_CONTROL_PERIOD_S
    clock: Clock = SYSTEM_CLOCK
    surge_config: SurgeConfig = field(default_factory=SurgeConfig)
    #: The service and its pods as the watches delivered them; None: a GET and a LIST per check.
    objects: ObjectSource | None = None

    @property
    def runtimes(self) -> ServiceRuntimes:
        """The services' runtimes: the pods' reader's, where the decisions read the same reads."""
        return self.signals.runtimes

    def forget(self, namespace: str, name: str) -> None:
        """Drop what the fast loop kept of a service: its reads, its surge count (no longer served)."""
        self.signals.forget(namespace, name)

    async def close(self) -> None:
        """Close the connections to the pods (the loops are stopped)."""
        await self.signals.close()

    async def check(self, namespace: str, name: str) -> FastCheck:
        """One period: read the pods, then the rotation rule and the surge check where the spec asks."""
        body = await self._objects.service(namespace, name)
        if body is None:
            return FastCheck()
        try:
            isvc = service_without_status(body)
        except ValueError:
            return FastCheck()
        autoscaling = isvc.spec.autoscaling
        if not (autoscaling.enabled or autoscaling.fast_checks()):
            return FastCheck()  # nothing would use the reads
        pods = await self._objects.pods(namespace, name)
        # Only pods carrying the label take part in the rotation: during the rollout that adds it,
        # the others are what the Service selects on. Every serving pod's arrivals count.
        labels: dict[str, str] = {}
        ips: dict[str, str] = {}
        for pod in pods:
            pod_name = pod["metadata"]["name"]
            value = _rotation_label(pod)
            ip = _serving_ip(pod)
            if ip is not None:
                ips[pod_name] = ip
                if value is not None:
                    labels[pod_name] = value
        windows = observation_windows(
            isvc.spec, control_period_s=self.control_period_s, read_period_s=self.signals.period_s
        )
        read = await self.signals.read(
            namespace, name, model=isvc.spec.model_name(isvc.name), pod_ips=ips, keep_s=windows.keep_s
        )
        self.metrics.record_pod_read(
            read=len(read.pods),
            failed=len(self.signals.unreadable(namespace, name)),
            period_s=self.signals.period_s,
        )
        status = decode_status(body.get("status"))
        profile = engine_profile(status, max_batch_size=isvc.spec.batching.max_batch_size)
        runtime = self.runtimes.get(namespace, name)
        history = runtime.reads.history
        if not autoscaling.fast_checks() or profile is None or history is None:
            return FastCheck()
        reads = history.reads
        replicas = int(status.replicas or len(ips) or 1)
        # The speed the decisions learned, live: one source for both (the status only seeds it).
        state = runtime.policy_state(status, replicas=replicas, batching=batching_in_force(isvc, status))
        capacity = replica_capacity_per_s(profile, state)
        held = (
            await self._rotate(body, isvc, labels, read.pods, reads, capacity)
            if autoscaling.backlog_rotation
            else frozenset()
        )
        surge = self._surge(runtime, reads, capacity, replicas) if autoscaling.surge_checks() else None
        return FastCheck(held_out=held, surge=surge)

    @property
    def _objects(self) -> ObjectSource:
        return self.objects or DirectReads(self.kube)

    async def release(self, namespace: str, name: str) -> frozenset[str]:
        """Put every held pod of a service back in the Service (the operator is stopping).

        A held pod leaves the endpoints only while a fast check can return it; with no operator
        running, nothing would, and the pod's capacity would stay unused until the next start.
        Returns the pods put back.
        """
        now = DirectReads(self.kube)  # as they are now, not as a watch last delivered them
        body = await now.service(namespace, name)
        if body is None:
            return frozenset()
        pods = await now.pods(namespace, name)
        # Every labelled pod, ready or not: a held pod that stopped being ready must go back too.
        labels = {pod["metadata"]["name"]: v for pod in pods if (v := _rotation_label(pod)) is not None}
        stopping = "the operator is stopping; no check would return them later"
        changes = await self._place(body, namespace, name, labels, frozenset(), stopping)
        self.forget(namespace, name)
        return frozenset(changes)

    async def _rotate(
        self,
        body: dict[str, Any],
        isvc: InferenceService,
        labels: Mapping[str, str],
        counters: Mapping[str, TritonCounters],
        reads: Sequence[PodRead],
        capacity_per_s: float,
    ) -> frozenset[str]:
        """The rotation rule over the labelled pods; patches the labels whose place changes."""
        rotation = choose_rotation(
            config=RotationConfig(p99_target_ms=float(isvc.spec.slo.p99_latency_ms)),
            pending_by_replica={pod: counts.pending for pod, counts in counters.items() if pod in labels},
            held_out=frozenset(pod for pod, value in labels.items() if value == c.ROTATION_HELD),
            rate_per_s=arrival_rate_per_s(reads, span_s=ARRIVAL_SPAN_S),
            capacity_per_s=capacity_per_s,
        )
        await self._place(body, isvc.namespace, isvc.name, labels, rotation.held_out, rotation.message)
        return rotation.held_out

    async def _place(
        self,
        body: dict[str, Any],
        namespace: str,
        name: str,
        labels: Mapping[str, str],
        held_out: frozenset[str],
        message: str,
    ) -> dict[str, str]:
        """Relabel the pods whose place changes, set the gauge, post the Events; return the changes."""
        changes = label_changes(labels, held_out)
        for pod_name, value in changes.items():
            patch = {"metadata": {"labels": {c.LABEL_ROTATION: value}}}
            await asyncio.to_thread(self.kube.merge_patch, PODS, namespace, pod_name, patch)
        self.metrics.record_held_out(namespace=namespace, service=name, replicas=len(held_out))
        await self._announce(body, changes, message)
        return changes

    def _surge(
        self, runtime: ServiceRuntime, reads: Sequence[PodRead], capacity_per_s: float, replicas: int
    ) -> SurgeReading | None:
        """The surge check (`tailpilot.policy.surge.surge_step`); a reading when it fires."""
        config = self.surge_config
        step = surge_step(
            config,
            over_in_a_row=runtime.over_in_a_row,
            arrival_rate_per_s=arrival_rate_per_s(reads, span_s=config.span_s),
            completion_rate_per_s=completion_rate_per_s(reads, span_s=config.span_s),
            capacity_per_s=capacity_per_s,
            replicas=replicas,
        )
        runtime.over_in_a_row = step.over_in_a_row
        return step.reading

    async def _announce(self, body: dict[str, Any], changes: Mapping[str, str], message: str) -> None:
        held = sorted(p for p, v in changes.items() if v == c.ROTATION_HELD)
        returned = sorted(p for p, v in changes.items() if v == c.ROTATION_IN)
        events = [
            EventRecord("Normal", reason, text[:1024])
            for pods, reason, text in (
                (held, c.EVENT_REPLICAS_HELD_OUT, f"{', '.join(held)} out of the Service: {message}"),
                (
                    returned,
                    c.EVENT_REPLICAS_RETURNED,
                    f"{', '.join(returned)} back in the Service ({message})",
                ),
            )
            if pods
        ]
        if events:
            await asyncio.to_thread(post_events, self.kube, body, events, now=utc_now(self.clock))
