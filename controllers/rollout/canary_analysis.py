"""The canary analysis's I/O: both sides' metrics from Prometheus, the verdict on the status.

While a canary is Analysing (see `canary_rollout`), its service's loop calls `CanaryAnalyst.analyse`
every `ANALYSIS_PERIOD_S`. One analysis: the service's pods' metrics over the window so far (the
same per-pod PromQL the autoscaler's Prometheus path uses, `observe.pod_metrics`), split by the
canary track label of the pods listed now, each side merged as the autoscaler merges a service
(rate-weighted mixture P99, never an average of quantiles), judged by
`tailpilot.policy.canary.judge_canary`. The figures go on status.canary each time; a verdict moves
the phase (Promoting or RolledBack), posts an Event and wakes the reconcile that acts on it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from dataclasses import dataclass
from typing import Any, Final

import httpx
from pydantic import ValidationError

from tailpilot.api import constants as c
from tailpilot.api.v1alpha1 import CanaryStatus, CanaryTrackStatus, InferenceService
from tailpilot.controllers.core.clock import SYSTEM_CLOCK, Clock, utc_now
from tailpilot.controllers.core.conditions import merge_conditions
from tailpilot.controllers.core.events import EventRecord, post_events
from tailpilot.controllers.core.kubeapi import ISVC, PODS
from tailpilot.controllers.core.metrics import OperatorMetrics
from tailpilot.controllers.core.seams import CanaryKube
from tailpilot.controllers.core.status import decode_status, service_without_status, status_patch
from tailpilot.controllers.rollout.canary_rollout import phase_conditions
from tailpilot.controllers.signals.observe import ObservationError, Selector, pod_metrics
from tailpilot.controllers.signals.prometheus_client import prometheus_for
from tailpilot.policy import PodMetrics, observation_from_pod_metrics
from tailpilot.policy.canary import CanaryCriteria, TrackReading, Verdict, judge_canary

log = logging.getLogger("tailpilot.canary")

#: Seconds between two analyses of a canary.
ANALYSIS_PERIOD_S: Final = 10.0


def criteria_of(isvc: InferenceService) -> CanaryCriteria:
    """What the service's canary is held to."""
    rollout = isvc.spec.rollout
    return CanaryCriteria(
        analysis_s=float(rollout.canary.analysis_seconds),
        min_requests=rollout.canary.min_requests,
        max_latency_regression_percent=rollout.max_latency_regression_percent,
        max_error_rate_percent=rollout.canary.max_error_rate_percent,
        slo_p99_ms=isvc.spec.slo.p99_latency_ms,
    )


def track_reading(pods: list[PodMetrics], *, window_s: float, now_s: float) -> TrackReading:
    """One side's requests, failures and merged P99 over the window."""
    answered = sum((p.request_rate or 0.0) for p in pods) * window_s
    failed = sum((p.failure_rate or 0.0) for p in pods) * window_s
    merged = observation_from_pod_metrics(pods=pods, window_s=window_s, now_s=now_s)
    return TrackReading(pods=len(pods), requests=answered + failed, failures=failed, p99_ms=merged.p99_ms)


def restarts_of(pod: dict[str, Any]) -> int:
    """Container restarts of a pod (init containers included: a sidecar's crash counts)."""
    status = pod.get("status") or {}
    statuses = [*(status.get("containerStatuses") or []), *(status.get("initContainerStatuses") or [])]
    return sum(int(s.get("restartCount") or 0) for s in statuses)


def track_status(reading: TrackReading) -> CanaryTrackStatus:
    """A side's reading as status.canary records it."""
    errors = reading.error_rate_percent
    return CanaryTrackStatus(
        pods=reading.pods,
        requests=round(reading.requests),
        failures=round(reading.failures),
        p99_ms=round(reading.p99_ms, 2) if reading.p99_ms is not None else None,
        error_rate_percent=round(min(errors, 100.0), 3) if errors is not None else None,
    )


@dataclass
class CanaryAnalyst:
    """Judges the canaries being analysed (one call per service and period)."""

    kube: CanaryKube
    http: httpx.AsyncClient
    metrics: OperatorMetrics
    default_prometheus_url: str | None = None
    clock: Clock = SYSTEM_CLOCK

    async def analyse(self, namespace: str, name: str) -> bool:
        """Analyse the service's canary if it is Analysing; True when a verdict was reached."""
        body = await asyncio.to_thread(self.kube.get, ISVC, namespace, name)
        if body is None:
            return False
        status = decode_status(body.get("status"))
        canary = status.canary
        if canary is None or canary.phase != "Analysing" or canary.analysis_started_at is None:
            return False
        try:
            isvc = service_without_status(body)
        except ValidationError:
            return False
        # The autoscaler's resolution: a URL the platform does not allow is never contacted.
        prometheus = prometheus_for(
            self.http, isvc.spec.monitoring.prometheus_url, default_url=self.default_prometheus_url
        )
        now = self.clock.time()
        elapsed = max(0.0, now - canary.analysis_started_at.timestamp())
        if prometheus.url is None:
            message = f"analysis paused: {prometheus.message}"[:1024]
            return await self._record(body, canary.model_copy(update={"message": message}), None)
        window = max(elapsed, 1.0)
        try:
            pods = await pod_metrics(
                self.http,
                prometheus_url=prometheus.url,
                selector=Selector(namespace=namespace, service=name),
                window_s=window,
                now_s=now,
            )
        except ObservationError as error:
            log.warning("canary of %s/%s: %s", namespace, name, error)
            message = f"Prometheus unavailable, analysis paused: {error}"[:1024]
            return await self._record(body, canary.model_copy(update={"message": message}), None)
        selector = f"{c.LABEL_ISVC}={name},{c.LABEL_TRACK}={c.TRACK_CANARY}"
        listed = await asyncio.to_thread(self.kube.list, PODS, namespace, label_selector=selector)
        canary_pods = {p["metadata"]["name"] for p in listed}
        candidate = track_reading([p for p in pods if p.pod in canary_pods], window_s=window, now_s=now)
        candidate = dataclasses.replace(candidate, restarts=sum(restarts_of(p) for p in listed))
        stable = track_reading([p for p in pods if p.pod not in canary_pods], window_s=window, now_s=now)
        judgement = judge_canary(
            stable=stable, candidate=candidate, elapsed_s=elapsed, criteria=criteria_of(isvc)
        )
        total = stable.requests + candidate.requests
        update: dict[str, Any] = {
            "reason": judgement.reason,
            "message": judgement.message[:4096],
            "stable": track_status(stable),
            "candidate": track_status(candidate),
            "traffic_percent": round(100.0 * candidate.requests / total, 1) if total > 0 else None,
        }
        event: EventRecord | None = None
        if judgement.verdict is not Verdict.CONTINUE:
            promoted = judgement.verdict is Verdict.PROMOTE
            update |= {"phase": "Promoting" if promoted else "RolledBack", "finished_at": utc_now(self.clock)}
            verb = "promoted" if promoted else "rolled back"
            event = EventRecord(
                "Normal" if promoted else "Warning",
                c.REASON_CANARY_PROMOTED if promoted else c.REASON_CANARY_ROLLED_BACK,
                f"canary of engine {canary.engine.key[:12]} {verb} ({judgement.reason}): {judgement.message}",
            )
            self.metrics.record_canary_verdict(
                namespace=namespace, service=name, verdict=judgement.verdict.value, reason=judgement.reason
            )
        await self._record(body, canary.model_copy(update=update), event)
        return event is not None

    async def _record(self, body: dict[str, Any], canary: CanaryStatus, event: EventRecord | None) -> bool:
        """Write status.canary (when it changed) and post the verdict's Event; False (no verdict).

        A verdict's phase goes in the same patch as the conditions that say it (`phase_conditions`,
        which the reconcile's pass uses too): a reader never sees the canary rolled back while
        RolloutBlocked still says it is being analysed.
        """
        old = decode_status(body.get("status"))
        new = old.model_copy(update={"canary": canary})
        if event is not None:
            updates = [u for u in phase_conditions(canary) if u is not None]
            generation = old.observed_generation or int(body.get("metadata", {}).get("generation") or 0)
            conditions = merge_conditions(
                old.conditions, updates, generation=generation, now=utc_now(self.clock)
            )
            new = new.model_copy(update={"conditions": conditions})
        if new != old:
            await asyncio.to_thread(self.kube.patch_status, body, status_patch(body.get("status"), new))
        if event is not None:
            await asyncio.to_thread(post_events, self.kube, body, [event], now=utc_now(self.clock))
        return False
