"""The batching in force on a service's Triton pods: pushed live at a change, restored on a pod that lost it.

The autoscaler records a batching change only once every ready pod runs it (`PodBatching.change`:
a live reload, verified, rolled back where one refuses), and each period makes sure the pods that
came up since run it too (`PodBatching.keep_at`: a restarted Triton, or a pod created before the
ConfigMap caught up). Only the pods' reload and config APIs are called, with the service's admin key.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any

from tailpilot.api import constants as c
from tailpilot.api.autoscaling import BatchingConfig
from tailpilot.api.engine import BuildResult
from tailpilot.api.v1alpha1 import InferenceService, InferenceServiceStatus
from tailpilot.controllers.autoscale.batching import BatchingApplyResult, apply_batching, check_config
from tailpilot.controllers.core.admin_key import read_admin_key
from tailpilot.controllers.core.events import EventRecord
from tailpilot.controllers.core.kubeapi import PODS, pod_url, ready_pod_ip
from tailpilot.controllers.core.metrics import OperatorMetrics
from tailpilot.controllers.core.seams import ServiceReadsKube
from tailpilot.controllers.core.status import served_result
from tailpilot.controllers.core.watched import ObjectSource
from tailpilot.controllers.rollout.canary_rollout import canary_plan
from tailpilot.controllers.signals.service_runtime import PodsAtBatching, ServiceKey, ServiceRuntime
from tailpilot.manifests import placement, triton_model_config
from tailpilot.manifests.meta import selector_string

log = logging.getLogger("tailpilot.autoscaler")

#: The Event of a pod whose Triton came up with another batching than the one in force, reloaded.
REASON_BATCHING_RESTORED = "BatchingRestored"


def incarnation(pod: dict[str, Any]) -> str:
    """One run of a pod's containers: its uid and restart count (a restarted Triton is a new one)."""
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    restarts = sum(int(s.get("restartCount") or 0) for s in statuses)
    return f"{(pod.get('metadata') or {}).get('uid', '')}/{restarts}"


def _serves(pod: dict[str, Any], engine_key: str) -> bool:
    """Whether a pod is a stable replica of this engine (the label holds the key's first 63 characters)."""
    labels = (pod.get("metadata") or {}).get("labels") or {}
    return not _on_canary_track(pod) and labels.get(c.LABEL_ENGINE_KEY) == engine_key[:63]


def _on_canary_track(pod: dict[str, Any]) -> bool:
    labels = (pod.get("metadata") or {}).get("labels") or {}
    return labels.get(c.LABEL_TRACK) == c.TRACK_CANARY


@dataclass(frozen=True)
class PodBatching:
    """Changes the batching on a service's ready pods, and restores it on those that came up without it."""

    kube: ServiceReadsKube
    metrics: OperatorMetrics
    #: Where the period's pods come from (the watches' store, or the API server).
    objects: ObjectSource

    async def keep_at(
        self,
        runtime: ServiceRuntime,
        isvc: InferenceService,
        status: InferenceServiceStatus,
        batching: BatchingConfig,
    ) -> list[EventRecord]:
        """Reload the batching in force on the ready pods that came up running another.

        A Triton restarted in its pod (a crash, an OOM kill) loads the config its init container
        copied when the pod started, and a pod created before the ConfigMap caught up with a live
        change starts with the old one: both would serve another batching than the status says until
        the next change. So every pod incarnation (pod and restart count) not yet known to run the
        batching in force has its config read once (one call each: changes are minutes apart, pods
        restart rarely), and only those running another are reloaded. Only the pods of the engine
        in force: a canary's run another engine (its own config), and so do the old engine's pods
        while a new one rolls out. Returns the Events to post.
        """
        result = served_result(status)
        if result is None:
            return []
        pods = await self.objects.pods(isvc.namespace, isvc.name)
        urls = {
            incarnation(p): pod_url(ip, c.TRITON_HTTP_PORT)
            for p in pods
            if _serves(p, result.engine_key) and (ip := ready_pod_ip(p))
        }
        seen = runtime.at_batching or PodsAtBatching(batching)
        known = (seen.incarnations if seen.batching == batching else frozenset()) & set(urls)
        fresh = {pod: url for pod, url in urls.items() if pod not in known}
        runtime.at_batching = PodsAtBatching(batching, known)
        if not fresh:
            return []
        admin_key = await asyncio.to_thread(read_admin_key, self.kube, isvc)
        config_json = _override_json(isvc, result, batching)
        check = await check_config(
            pod_urls=list(fresh.values()),
            model_name=isvc.spec.model_name(isvc.name),
            config_json=config_json,
            admin_key=admin_key,
        )
        at_batching: set[str] = set(check.matching)
        events: list[EventRecord] = []
        if check.differing:
            outcome = await apply_batching(
                pod_urls=[d.pod_url for d in check.differing],
                model_name=isvc.spec.model_name(isvc.name),
                config_json=config_json,
                admin_key=admin_key,
            )
            self.metrics.record_batching_change(outcome.reason)
            at_batching.update(outcome.applied)
            names = ", ".join(d.pod_url for d in check.differing)
            events.append(_restored_event(outcome, names=names, batching=batching, key=runtime.key))
        # A pod that could not be read is a Ready pod that does not answer its config API (one
        # holding an older key is being replaced): not read again each period, where the KWOK
        # cluster's and a partitioned node's pods would cost a Secret read and a call every time.
        # A pod whose reload failed is tried again next period.
        retry = {d.pod_url for d in check.differing} - at_batching
        runtime.at_batching = PodsAtBatching(
            batching, known | {p for p, url in fresh.items() if url not in retry}
        )
        return events

    async def change(
        self,
        isvc: InferenceService,
        status: InferenceServiceStatus,
        target: BatchingConfig,
        events: list[EventRecord],
    ) -> bool:
        """Push `target` to every ready pod, the stable replicas first; False if they refused it.

        A refusal is told in `events` (the Warning of the pods that kept their old config).
        """
        result = served_result(status)
        if result is None:
            return False
        pods = await asyncio.to_thread(
            self.kube.list, PODS, isvc.namespace, label_selector=selector_string(isvc.name)
        )
        # The pods' reload and config APIs answer only the service's admin key (read at each change:
        # changes are minutes apart, and a recreated Secret's new key is then used at once).
        admin_key = await asyncio.to_thread(read_admin_key, self.kube, isvc)
        canary = canary_plan(status)
        # A canary's pods serve another engine: its own config, the same batching (a fair comparison).
        groups = [(result, [p for p in pods if not _on_canary_track(p)])]
        if canary is not None:
            groups.append((canary.result, [p for p in pods if _on_canary_track(p)]))
        for served, members in groups:
            urls = [pod_url(ip, c.TRITON_HTTP_PORT) for p in members if (ip := ready_pod_ip(p))]
            if served is not result and not urls:
                continue  # canary replicas not started yet: they start with the ConfigMap's batching
            outcome = await apply_batching(
                pod_urls=urls,
                model_name=isvc.spec.model_name(isvc.name),
                config_json=_override_json(isvc, served, target),
                admin_key=admin_key,
            )
            self.metrics.record_batching_change(outcome.reason)
            if not outcome.ok:
                on = "the canary's replicas" if served is not result else "the replicas"
                log.warning("%s/%s: batching change refused: %s", isvc.namespace, isvc.name, outcome.message)
                events.append(
                    EventRecord(
                        "Warning",
                        "BatchingRefused",
                        f"batching change refused by {on}, their old config kept: {outcome.message}",
                    )
                )
                if served is result:
                    return False  # nothing changed anywhere (the stable replicas go first)
        # The batching in force is the stable replicas': a canary that kept its own is only compared
        # under another batching until its verdict.
        return True


def _restored_event(
    outcome: BatchingApplyResult, *, names: str, batching: BatchingConfig, key: ServiceKey
) -> EventRecord:
    """The Event of a reload of the batching in force on pods found running another."""
    if outcome.ok:
        return EventRecord(
            "Normal",
            REASON_BATCHING_RESTORED,
            f"the batching in force (max batch {batching.max_batch_size}) reloaded on "
            f"{names}, found running another (restarted, or left by a failed change)",
        )
    log.warning("%s/%s: restoring the batching refused: %s", *key, outcome.message)
    return EventRecord(
        "Warning",
        "BatchingRefused",
        f"the batching in force could not be reloaded on {names}: {outcome.message}",
    )


def _override_json(isvc: InferenceService, served: BuildResult, batching: BatchingConfig) -> str:
    """The load override that serves `served` with `batching` (a live reload, or the check against one)."""
    return triton_model_config.to_load_override_json(
        triton_model_config.model_config_for(
            name=isvc.spec.model_name(isvc.name),
            triton_backend=served.triton_backend,
            inputs=served.inputs,
            outputs=served.outputs,
            batching=batching,
            placement=placement.ServingTarget.from_service(isvc),
        )
    )
