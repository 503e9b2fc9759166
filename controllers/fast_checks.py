"""The fast checks: reading the pods' Triton metrics every few seconds, between decisions.

Two rules use them, each turned on by its own field of spec.autoscaling:

- backlogRotation: hold backlogged Triton pods out of the Service while they drain
  (`tailpilot.policy.rotation.choose_rotation`, measured in the simulator: docs/autoscaling.md
  section 10);
- surgeResponse: call a decision early when the arrivals exceed what the replicas asked for serve
  (`tailpilot.policy.surge.surge_step`); the service's loop then runs the autoscaler at once with
  the check's reading (`FastCheck.surge`).

This module gathers their inputs and acts on the rotation, every `FAST_CHECK_PERIOD_S` for each
service with either field:

- the ready pods and their `tailpilot.io/rotation` label, from the API server;
- each pod's queue (`nv_inference_pending_request_count`) and success counter, read from its
  Triton metrics port directly: a Prometheus scrape interval (15 s by default) is too slow for a
  backlog that drains in seconds;
- the arrival rate over the last `ARRIVAL_SPAN_S` (completions plus queue growth, from the counters
  of successive checks), since the replicas left in rotation must carry the arrivals;
- one replica's capacity at the batching in force, from the engine profile and the service-time
  scale the autoscaler learned (status.learned).

It then flips the label (`in` <-> `held`) on the pods whose place changes, posts an Event and
sets `tailpilot_replicas_held_out`. A pod whose metrics cannot be read is never held (and a held
one is put back): without data nothing is held.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from tailpilot.api import constants as c
from tailpilot.api.v1alpha1 import InferenceService
from tailpilot.controllers.clock import SYSTEM_CLOCK, Clock, utc_now
from tailpilot.controllers.events import EventRecord, post_events
from tailpilot.controllers.kubeapi import ISVC, PODS, Kube, ready_pod_ip
from tailpilot.controllers.metrics import OperatorMetrics
from tailpilot.controllers.observe import PENDING_GAUGE
from tailpilot.controllers.status import (
    batching_in_force,
    decode_status,
    engine_profile,
    restore_learned,
    service_without_status,
)
from tailpilot.manifests.meta import selector_string
from tailpilot.policy import PolicyState
from tailpilot.policy.core import replica_capacity_per_s
from tailpilot.policy.fast_checks import ARRIVAL_SPAN_S
from tailpilot.policy.rotation import RotationConfig, choose_rotation
from tailpilot.policy.surge import SurgeConfig, SurgeReading, surge_step

log = logging.getLogger("tailpilot.rotation")

#: A pod's metrics page must answer within this, or the pod counts as unreadable.
METRICS_TIMEOUT_S = 1.0
SUCCESS_COUNTER = "nv_inference_request_success"


@dataclass(frozen=True, slots=True)
class PodCounters:
    """What one check reads from one pod: requests answered so far, and queued now."""

    success: float
    pending: float


@dataclass(frozen=True, slots=True)
class Sample:
    """One check's counters of every readable ready pod."""

    at_s: float
    pods: Mapping[str, PodCounters]


def parse_pod_counters(text: str, *, model: str) -> PodCounters | None:
    """Sum the success counter and the pending gauge of `model` (every version) in Triton's metrics page.

    None when the page has neither for the model (not loaded yet, or another server).
    """
    success = pending = 0.0
    seen = False
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.labels.get("model") != model:
                continue
            if sample.name in (SUCCESS_COUNTER, f"{SUCCESS_COUNTER}_total"):
                success += sample.value
                seen = True
            elif sample.name == PENDING_GAUGE:
                pending += sample.value
                seen = True
    return PodCounters(success=success, pending=pending) if seen else None


def _span(samples: Iterable[Sample], span_s: float) -> tuple[Sample, Sample] | None:
    """(the newest sample at least `span_s` older than the newest, or the oldest; the newest)."""
    kept = list(samples)  # a deque does not slice
    if len(kept) < 2:
        return None
    newest = kept[-1]
    older = [s for s in kept[:-1] if s.at_s <= newest.at_s - span_s]
    base = older[-1] if older else kept[0]
    return (base, newest) if newest.at_s > base.at_s else None


def arrival_rate_per_s(samples: Iterable[Sample], *, span_s: float) -> float | None:
    """Requests that arrived per second between the newest sample and the newest one `span_s` older.

    Arrivals on a pod are its completions plus the growth of its queue. A pod absent from the older
    sample started since: its whole counter counts (it can only overstate the rate, which holds
    fewer pods). None with a single sample.
    """
    pair = _span(samples, span_s)
    if pair is None:
        return None
    base, newest = pair
    arrivals = 0.0
    for pod, now in newest.pods.items():
        then = base.pods.get(pod, PodCounters(success=0.0, pending=0.0))
        arrivals += max(0.0, now.success - then.success) + now.pending - then.pending
    return max(0.0, arrivals) / (newest.at_s - base.at_s)


def completion_rate_per_s(samples: Iterable[Sample], *, span_s: float) -> float | None:
    """Requests completed per second over the same span as `arrival_rate_per_s` (None with one sample)."""
    pair = _span(samples, span_s)
    if pair is None:
        return None
    base, newest = pair
    done = sum(
        max(0.0, now.success - base.pods.get(pod, PodCounters(success=0.0, pending=0.0)).success)
        for pod, now in newest.pods.items()
    )
    return done / (newest.at_s - base.at_s)


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
    """Runs the fast check of one service per call; keeps each service's recent samples."""

    kube: Kube
    http: httpx.AsyncClient
    metrics: OperatorMetrics
    clock: Clock = SYSTEM_CLOCK
    surge_config: SurgeConfig = field(default_factory=SurgeConfig)
    _samples: dict[tuple[str, str], deque[Sample]] = field(default_factory=dict)
    #: Pods whose metrics page the last check could not read (logged when that changes, not every 3 s).
    _unreadable: dict[tuple[str, str], frozenset[str]] = field(default_factory=dict)
    #: Checks running whose arrivals exceeded the capacity of the replicas asked for.
    _over_in_a_row: dict[tuple[str, str], int] = field(default_factory=dict)

    def forget(self, namespace: str, name: str) -> None:
        """Drop a service's samples (deleted, or its fast checks turned off)."""
        self._samples.pop((namespace, name), None)
        self._unreadable.pop((namespace, name), None)
        self._over_in_a_row.pop((namespace, name), None)

    async def check(self, namespace: str, name: str) -> FastCheck:
        """One check: the rotation rule (backlogRotation), the surge check (surgeResponse, autoscaler on)."""
        key = (namespace, name)
        body = await asyncio.to_thread(self.kube.get, ISVC, namespace, name)
        if body is None:
            return FastCheck()
        try:
            isvc = service_without_status(body)
        except ValueError:
            return FastCheck()
        status = decode_status(body.get("status"))
        profile = engine_profile(status, max_batch_size=isvc.spec.batching.max_batch_size)
        autoscaling = isvc.spec.autoscaling
        if not autoscaling.fast_checks() or profile is None:
            return FastCheck()
        pods = await asyncio.to_thread(self.kube.list, PODS, namespace, label_selector=selector_string(name))
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
        counters = await self._read(ips, model=isvc.spec.model_name(isvc.name))
        self._note_unreadable(key, frozenset(ips) - set(counters))
        samples = self._samples.setdefault(key, deque())
        now = self.clock.monotonic()
        samples.append(Sample(at_s=now, pods=counters))
        while samples and samples[0].at_s < now - 3 * max(ARRIVAL_SPAN_S, self.surge_config.span_s):
            samples.popleft()
        replicas = int(status.replicas or len(ips) or 1)
        capacity = replica_capacity_per_s(
            profile,
            restore_learned(
                PolicyState.initial(replicas=replicas, batching=batching_in_force(isvc, status)),
                status.learned,
            ),
        )
        held = (
            await self._rotate(body, isvc, labels, counters, samples, capacity)
            if autoscaling.backlog_rotation
            else frozenset()
        )
        surge = self._surge(key, samples, capacity, replicas) if autoscaling.surge_checks() else None
        return FastCheck(held_out=held, surge=surge)

    async def release(self, namespace: str, name: str) -> frozenset[str]:
        """Put every held pod of a service back in the Service (the operator is stopping).

        A held pod leaves the endpoints only while a fast check can return it; with no operator
        running, nothing would, and the pod's capacity would stay unused until the next start.
        Returns the pods put back.
        """
        body = await asyncio.to_thread(self.kube.get, ISVC, namespace, name)
        if body is None:
            return frozenset()
        pods = await asyncio.to_thread(self.kube.list, PODS, namespace, label_selector=selector_string(name))
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
        counters: Mapping[str, PodCounters],
        samples: Iterable[Sample],
        capacity_per_s: float,
    ) -> frozenset[str]:
        """The rotation rule over the labelled pods; patches the labels whose place changes."""
        rotation = choose_rotation(
            config=RotationConfig(p99_target_ms=float(isvc.spec.slo.p99_latency_ms)),
            pending_by_replica={pod: counts.pending for pod, counts in counters.items() if pod in labels},
            held_out=frozenset(pod for pod, value in labels.items() if value == c.ROTATION_HELD),
            rate_per_s=arrival_rate_per_s(samples, span_s=ARRIVAL_SPAN_S),
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
        self, key: tuple[str, str], samples: Iterable[Sample], capacity_per_s: float, replicas: int
    ) -> SurgeReading | None:
        """The surge check (`tailpilot.policy.surge.surge_step`); a reading when it fires."""
        config = self.surge_config
        kept = list(samples)
        step = surge_step(
            config,
            over_in_a_row=self._over_in_a_row.get(key, 0),
            arrival_rate_per_s=arrival_rate_per_s(kept, span_s=config.span_s),
            completion_rate_per_s=completion_rate_per_s(kept, span_s=config.span_s),
            capacity_per_s=capacity_per_s,
            replicas=replicas,
        )
        self._over_in_a_row[key] = step.over_in_a_row
        return step.reading

    async def _read(self, ips: Mapping[str, str], *, model: str) -> dict[str, PodCounters]:
        """Each pod's counters; unreadable pods are left out (and so never held)."""
        names = list(ips)
        pages = await asyncio.gather(
            *(
                self.http.get(f"http://{ips[n]}:{c.TRITON_METRICS_PORT}/metrics", timeout=METRICS_TIMEOUT_S)
                for n in names
            ),
            return_exceptions=True,
        )
        out = {}
        for pod_name, page in zip(names, pages, strict=True):
            if isinstance(page, BaseException) or page.status_code != 200:
                log.debug("rotation: metrics of pod %s unreadable: %r", pod_name, page)
                continue
            counts = parse_pod_counters(page.text, model=model)
            if counts is not None:
                out[pod_name] = counts
        return out

    def _note_unreadable(self, key: tuple[str, str], pods: frozenset[str]) -> None:
        """Warn when pods become unreadable (a NetworkPolicy, a port): they can never be held."""
        before = self._unreadable.get(key, frozenset())
        if pods - before:
            log.warning(
                "%s/%s: cannot read Triton metrics of %s on port %d; they stay in rotation",
                *key,
                ", ".join(sorted(pods - before)),
                c.TRITON_METRICS_PORT,
            )
        self._unreadable[key] = pods

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
