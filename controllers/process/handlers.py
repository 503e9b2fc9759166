"""kopf wiring: one long-lived reconcile loop per InferenceService, woken by events.

Why a loop per object instead of on.create/on.update handlers: the
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
import random
from collections.abc import Mapping
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Any, Protocol

import kopf

from tailpilot.api import constants as c
from tailpilot.controllers.alerting.alert_webhook import AlertNotification
from tailpilot.controllers.alerting.alerts import FiringAlerts
from tailpilot.controllers.autoscale.fast_checks import FastCheck
from tailpilot.controllers.core.clock import SYSTEM_CLOCK, Clock, utc_now
from tailpilot.controllers.core.events import EventRecord, post_events
from tailpilot.controllers.core.kubeapi import ISVC
from tailpilot.controllers.core.seams import EventsKube
from tailpilot.controllers.core.settings import DEFAULT_CONTROL_PERIOD_S
from tailpilot.controllers.core.watched import WatchedObjects
from tailpilot.controllers.process.activator_watch import ActivatorWatch
from tailpilot.controllers.process.progress import PassWatch
from tailpilot.controllers.reconcile.reconciler import ReconcileResult
from tailpilot.controllers.rollout.canary_analysis import ANALYSIS_PERIOD_S
from tailpilot.controllers.signals.service_runtime import ServiceRuntime, ServiceRuntimes
from tailpilot.policy.surge import SurgeReading

log = logging.getLogger("tailpilot.handlers")


#: Seconds a shutdown waits for held pods to be put back in their Services.
RELEASE_TIMEOUT_S = 10.0
#: Seconds before a reconcile or decision that raised is tried again, the first time; each failure
#: in a row doubles it, up to `RETRY_MAX_S`, and each wait is jittered (`retry_delay_s`).
RETRY_S = 5.0
RETRY_MAX_S = 300.0
#: A decision that raised is tried again after at most this many seconds (one default control
#: period): autoscaling resumes within a period of the API server's or Prometheus' return.
DECISION_RETRY_MAX_S = DEFAULT_CONTROL_PERIOD_S
#: An error told in an Event is cut to this many characters.
MAX_ERROR_CHARS = 512


def retry_delay_s(failures: int, *, jitter: float) -> float:
    """Seconds before the next try after `failures` failed passes in a row (`jitter` in [0, 1)).

    Doubling, capped, so an API server or Prometheus that is down is not hammered by every service
    every 5 s; the wait is between half and all of that ("equal jitter"), so services that failed
    together (an API server restart) do not all come back in the same second.
    """
    ceiling = min(RETRY_MAX_S, RETRY_S * 2.0 ** max(0, failures - 1))
    return ceiling / 2 + ceiling / 2 * jitter


@dataclass
class _PartRetries:
    """The failures in a row of one part of a service's loop (its reconcile, decision or analysis).

    Each part backs off on its own: `cap_s` bounds its wait, so a decision that failed while the
    API server was away is tried again within a control period of its return.
    """

    what: str
    reason: str
    cap_s: float
    failures: int = 0
    #: The last error told in an Event (the same error is not told again while it repeats).
    told: str = ""

    def failed(self, *, jitter: float) -> float:
        self.failures += 1
        return min(self.cap_s, retry_delay_s(self.failures, jitter=jitter))

    def succeeded(self) -> None:
        self.failures = 0


# What a service's loop calls of the jobs it runs (`reconciler.Reconciler`, `autoscaler.Autoscaler`,
# `fast_checks.FastChecker` and `canary_analysis.CanaryAnalyst` in the operator), so that the loop's
# tests hand it doubles with just these calls, checked. Here where they are called, not in `seams`:
# they name the jobs' results, and `seams` sits in the layer below the jobs.


class LoopReconciler(Protocol):
    """Reconciles a service on the loop's worker; its client also tells the loop's Events."""

    @property
    def kube(self) -> EventsKube:
        """The client the loop posts its Events through."""
        ...

    def reconcile(self, namespace: str, name: str, /) -> ReconcileResult:
        """One pass over the service."""
        ...


class LoopAutoscaler(Protocol):
    """Decides a service's replicas once per control period."""

    async def step(
        self, namespace: str, name: str, /, *, alert_active: bool, surge: SurgeReading | None
    ) -> tuple[float, bool]:
        """One period: (seconds until the next, whether the Deployment must change)."""
        ...

    def forget(self, namespace: str, name: str, /) -> None:
        """Drop a deleted service's state."""
        ...


class ReadPeriod(Protocol):
    """How often the fast checks read a service's pods."""

    @property
    def period_s(self) -> float:
        """Seconds between two checks of a service."""
        ...


class LoopFastChecker(Protocol):
    """Runs a service's fast checks, and puts its held pods back at shutdown."""

    @property
    def signals(self) -> ReadPeriod:
        """The pods' reader, whose period paces the checks."""
        ...

    async def check(self, namespace: str, name: str, /) -> FastCheck:
        """One check of the service."""
        ...

    async def release(self, namespace: str, name: str, /) -> object:
        """Put the service's held pods back (the answer is not read)."""
        ...

    async def close(self) -> None:
        """Close the connections to the pods."""
        ...

    def forget(self, namespace: str, name: str, /) -> None:
        """Drop a service's reads."""
        ...


class LoopCanaryAnalyst(Protocol):
    """Judges a service's canary once per analysis period."""

    async def analyse(self, namespace: str, name: str, /) -> bool:
        """Whether a verdict was reached."""
        ...


class ServiceLoops:
    """One asyncio task per InferenceService that reconciles it whenever woken, and on a timer.

    Why not kopf daemons: kopf puts a finalizer on every object that has a
    daemon, so a service deleted while the operator is down would hang in
    Terminating (and its namespace with it). These tasks need no finalizer:
    children are garbage-collected through their owner references.
    """

    def __init__(
        self,
        *,
        reconciler: LoopReconciler,
        executor: Executor | None,
        autoscaler: LoopAutoscaler | None = None,
        fast_checker: LoopFastChecker | None = None,
        canary_analyst: LoopCanaryAnalyst | None = None,
        clock: Clock = SYSTEM_CLOCK,
        runtimes: ServiceRuntimes | None = None,
    ):
        """`runtimes`: each service's memory, shared with the jobs (the operator's one registry)."""
        self._reconciler = reconciler
        self._executor = executor  # None: the event loop's default executor
        self.autoscaler = autoscaler
        self.fast_checker = fast_checker
        self.clock = clock
        self.canary_analyst = canary_analyst
        #: Each service's loop task, wake-up, timers, fast loop and firing alerts, on its runtime;
        #: forgetting a deleted service there forgets it in every job.
        self.runtimes = runtimes if runtimes is not None else ServiceRuntimes()
        #: Events being posted about alerts (kept so the tasks are not collected mid-way).
        self._alert_events: set[asyncio.Task[None]] = set()
        #: The passes in flight, which the liveness probe reads (`progress`).
        self.passes = PassWatch(clock=clock)

    def ensure(self, namespace: str, name: str, *, uid: str = "") -> None:
        """Start the loop of a service if it is not running, and make it reconcile now.

        `uid`: the object's UID, which its alerts must carry (a service deleted and created again
        under its name has another).
        """
        runtime = self.runtimes.get(namespace, name)
        if uid:
            runtime.uid = uid
        if runtime.task is None or runtime.task.done():
            runtime.wakeup = asyncio.Event()
            runtime.task = asyncio.create_task(self._loop(runtime), name=f"reconcile {namespace}/{name}")
        runtime.wake()

    def wake(self, namespace: str | None, name: str | None) -> None:
        """Make a running loop reconcile now (events of children)."""
        runtime = self.runtimes.find(namespace, name) if namespace and name else None
        if runtime is not None:
            runtime.wake()

    def alert(self, alert: AlertNotification) -> None:
        """An SLO alert fired or resolved: decide now, in the aggressive mode while any fires.

        Alerts about services this operator does not run are dropped: kept, anyone who reaches the
        webhook could grow its memory with made-up names. An alert that starts or stops firing is
        told on the InferenceService with an Event.
        """
        namespace, name = alert.namespace, alert.inferenceservice
        runtime = self.runtimes.find(namespace, name)
        if runtime is None or runtime.task is None:
            log.info("alert about %s/%s, which this operator does not serve: ignored", namespace, name)
            return
        uid = runtime.uid
        if not uid or alert.service_uid != uid:
            # Not this service's rule: another namespace's rule with this service's labels, or the
            # rule of a service deleted under this name. Its labels alone must not steer the service.
            log.warning(
                "alert %s about %s/%s carries service UID %r, not the service's %r: ignored",
                alert.alertname,
                namespace,
                name,
                alert.service_uid[:64],
                uid,
            )
            return
        alerts = runtime.attached(FiringAlerts) or runtime.attach(FiringAlerts())
        event = alerts.update(alert, now_s=self.clock.monotonic())
        if event is not None:
            self._post_alert_event(namespace, name, event)
        runtime.decide_now()

    async def _post_event(self, namespace: str, name: str, event: EventRecord) -> None:
        kube = self._reconciler.kube
        try:
            body = await asyncio.to_thread(kube.get, ISVC, namespace, name)
            if body is not None:
                await asyncio.to_thread(post_events, kube, body, [event], now=utc_now(self.clock))
        except Exception:  # noqa: BLE001 - an Event lost must not stop the webhook or the loop
            log.exception("could not post the %s Event about %s/%s", event.reason, namespace, name)

    def _post_alert_event(self, namespace: str, name: str, event: EventRecord) -> None:
        task = asyncio.get_running_loop().create_task(self._post_event(namespace, name, event))
        self._alert_events.add(task)
        task.add_done_callback(self._alert_events.discard)

    def _is_alerted(self, key: tuple[str, str]) -> bool:
        """Whether an alert fires for the service (those not notified again for long are let go)."""
        runtime = self.runtimes.find(*key)
        alerts = runtime.attached(FiringAlerts) if runtime is not None else None
        if alerts is None:
            return False
        for event in alerts.expire(now_s=self.clock.monotonic()):
            self._post_alert_event(*key, event)
        return alerts.active

    def stop(self, namespace: str, name: str) -> None:
        """Stop the loops of a deleted service and forget it: its runtime, every job's memory of it."""
        runtime = self.runtimes.forget(namespace, name)
        if self.autoscaler is not None:
            self.autoscaler.forget(namespace, name)  # its gauges
        if runtime is None:
            return
        for task in (runtime.task, runtime.fast_task):
            if task is not None:
                task.cancel()

    async def stop_all(self) -> None:
        """Cancel every loop, then put held pods back in their Services (operator shutdown)."""
        runtimes = list(self.runtimes)
        checked = [r.key for r in runtimes if r.fast_task is not None]
        tasks = [t for r in runtimes for t in (r.task, r.fast_task) if t is not None]
        for runtime in runtimes:
            runtime.fast_task = None
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for runtime in runtimes:
            runtime.task = None
        if self.fast_checker is not None:
            await self.fast_checker.close()
        if self.fast_checker is not None and checked:
            releases = [self.fast_checker.release(*key) for key in checked]
            # Bounded: a shutdown must not hang on an API server that does not answer.
            try:
                results = await asyncio.wait_for(
                    asyncio.gather(*releases, return_exceptions=True), timeout=RELEASE_TIMEOUT_S
                )
            except TimeoutError:
                log.warning("held pods not all put back within %.0f s of shutdown", RELEASE_TIMEOUT_S)
                return
            for key, result in zip(checked, results, strict=True):
                if isinstance(result, BaseException):
                    log.warning("%s/%s: held pods not put back at shutdown: %r", *key, result)

    async def _loop(self, runtime: ServiceRuntime) -> None:
        """Reconcile when woken or when the reconciler's requeue time comes; decide when the period comes.

        A decision alone does not reconcile: with both on one timer, every control period cost a
        full reconcile (five API reads), 33 reconciles/s at 500 services (`make bench-scale`). A
        decision that changes the replicas wakes the loop, which reconciles at once.

        The three parts fail apart. A reconcile that raises backs off doubling up to `RETRY_MAX_S`;
        a decision or a canary analysis that raises is tried again after at most its own period
        (`_PartRetries`). With one back-off for all, a two-minute API outage paused the service's
        decisions for up to five minutes after the API server came back.
        """
        namespace, name = key = runtime.key
        wake = runtime.wakeup
        loop = asyncio.get_running_loop()
        woken, reconcile_due = True, 0.0
        reconciles = _PartRetries("a pass", c.REASON_RECONCILE_FAILED, cap_s=RETRY_MAX_S)
        decisions = _PartRetries("a decision", c.REASON_DECISION_FAILED, cap_s=DECISION_RETRY_MAX_S)
        analyses = _PartRetries("a canary analysis", c.REASON_DECISION_FAILED, cap_s=ANALYSIS_PERIOD_S)
        while True:
            wake.clear()
            with self.passes.watching(key):
                if woken or self.clock.monotonic() >= reconcile_due:
                    try:
                        result = await loop.run_in_executor(
                            self._executor, self._reconciler.reconcile, namespace, name
                        )
                    except Exception as exc:  # noqa: BLE001 - one bad pass must not end the loop
                        delay = await self._failed(key, reconciles, exc)
                        reconcile_due = self.clock.monotonic() + delay
                    else:
                        reconciles.succeeded()
                        reconcile_due = self.clock.monotonic() + result.requeue_after
                        self._sync_fast_checks(key, wanted=result.fast_checks)
                        self._sync_canary(key, wanted=result.canary_analysis)
                try:
                    control_in = await self._control(namespace, name, wake)
                    decisions.succeeded()
                except Exception as exc:  # noqa: BLE001 - a failed decision is tried again
                    control_in = await self._failed(key, decisions, exc)
                    runtime.next_decision_s = self.clock.monotonic() + control_in
                try:
                    analysis_in = await self._analyse_canary(namespace, name, wake)
                    analyses.succeeded()
                except Exception as exc:  # noqa: BLE001 - a failed analysis is tried again
                    analysis_in = await self._failed(key, analyses, exc)
                    if runtime.canary_due_s is not None:
                        runtime.canary_due_s = self.clock.monotonic() + analysis_in
            delay = min(reconcile_due - self.clock.monotonic(), control_in, analysis_in)
            try:
                await asyncio.wait_for(wake.wait(), timeout=max(0.0, delay))
                woken = True
            except TimeoutError:
                woken = False

    async def _failed(self, key: tuple[str, str], part: _PartRetries, exc: Exception) -> float:
        """Log a part that raised, tell it once per distinct error; return the seconds until its retry."""
        delay = part.failed(jitter=random.random())
        log.error(
            "%s of %s/%s failed (%d in a row); retrying in %.0f s",
            part.what,
            *key,
            part.failures,
            delay,
            exc_info=exc,
        )
        error = f"{type(exc).__name__}: {exc}"[:MAX_ERROR_CHARS]
        if error != part.told:  # told once per distinct error, not every retry
            part.told = error
            await self._post_event(
                *key,
                EventRecord(
                    "Warning",
                    part.reason,
                    f"{part.what} failed ({part.failures} in a row; retrying in {delay:.0f} s, doubling "
                    f"up to {part.cap_s:.0f} s): {error}",
                ),
            )
        return delay

    def _sync_fast_checks(self, key: tuple[str, str], *, wanted: bool) -> None:
        """Run the fast checks of a service while it asks for them (and a fast checker exists)."""
        runtime = self.runtimes.get(*key)
        task = runtime.fast_task
        running = task is not None and not task.done()
        if wanted and self.fast_checker is not None and not running:
            runtime.fast_task = asyncio.create_task(
                self._run_fast_checks(*key), name=f"fast checks {key[0]}/{key[1]}"
            )
        elif not wanted and task is not None:
            task.cancel()
            runtime.fast_task = None
            if self.fast_checker is not None:
                self.fast_checker.forget(*key)

    async def _run_fast_checks(self, namespace: str, name: str) -> None:
        assert self.fast_checker is not None
        key = (namespace, name)
        while True:
            try:
                self.surge(key, (await self.fast_checker.check(namespace, name)).surge)
            except Exception:  # noqa: BLE001 - one failed check must not end the checks
                log.exception("fast check of %s/%s failed; retrying", namespace, name)
            await asyncio.sleep(self.fast_checker.signals.period_s)

    def _sync_canary(self, key: tuple[str, str], *, wanted: bool) -> None:
        runtime = self.runtimes.get(*key)
        if not wanted or self.canary_analyst is None:
            runtime.canary_due_s = None
        elif runtime.canary_due_s is None:
            runtime.canary_due_s = 0.0

    async def _analyse_canary(self, namespace: str, name: str, wake: asyncio.Event) -> float:
        """Run the canary analysis when due; return the time until it is due again."""
        runtime = self.runtimes.get(namespace, name)
        due = runtime.canary_due_s
        if due is None or self.canary_analyst is None:
            return float("inf")
        now = self.clock.monotonic()
        if now < due:
            return due - now
        if await self.canary_analyst.analyse(namespace, name):
            runtime.canary_due_s = None
            wake.set()  # a verdict: reconcile at once to promote or roll back
            return float("inf")
        runtime.canary_due_s = self.clock.monotonic() + ANALYSIS_PERIOD_S
        return ANALYSIS_PERIOD_S

    def surge(self, key: tuple[str, str], reading: SurgeReading | None) -> None:
        """A fast check saw a surge: decide now (the decision takes the reading), not at the period's end."""
        if reading is None or self.autoscaler is None:
            return
        log.info("%s/%s: %s; deciding now", *key, reading.describe())
        self.runtimes.get(*key).decide_now(surge=reading)  # the reading goes to that decision

    async def _control(self, namespace: str, name: str, wake: asyncio.Event) -> float:
        """Run the autoscaler when its period is due; return the time until it is due again."""
        if self.autoscaler is None:
            return float("inf")
        runtime = self.runtimes.get(namespace, name)
        now = self.clock.monotonic()
        due = runtime.next_decision_s
        if now < due:
            return due - now
        period, scale = await self.autoscaler.step(
            namespace, name, alert_active=self._is_alerted(runtime.key), surge=runtime.take_surge()
        )
        runtime.next_decision_s = self.clock.monotonic() + period
        if scale:
            wake.set()  # reconcile at once to move the Deployment to the new replica count
        return period


def register(
    registry: kopf.OperatorRegistry,
    *,
    loops: ServiceLoops,
    watched: WatchedObjects | None = None,
    activator: ActivatorWatch | None = None,
) -> None:
    """Register the handlers on an explicit registry (no module-level global state).

    `watched` keeps every InferenceService and Triton pod the watches deliver, for the fast loop.
    `activator` (with `--activator-service`) watches the activator's ready pods: when they change,
    the services that may be at zero reconcile, so their Service's copy of them follows.
    """

    @kopf.on.login(registry=registry)
    def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
        # An explicit registry does not get kopf's default login handlers; use the same
        # credentials the `kubernetes` client finds (in-cluster, else the kubeconfig).
        return kopf.login_via_client(**kwargs)

    @kopf.on.probe(id="progress", registry=registry)
    def progress(**_: Any) -> str:
        # kopf's liveness endpoint answers 500 when a probe raises: the kubelet restarts a stuck operator.
        problem = loops.passes.problem()
        if problem is not None:
            raise kopf.PermanentError(f"no progress: {problem}")
        return "service loops progress"

    @kopf.on.event(c.GROUP, c.VERSION, c.PLURAL, registry=registry)
    async def on_service_event(
        type: str | None,  # noqa: A002 - kopf's keyword
        name: str,
        namespace: str | None,
        event: Mapping[str, Any],
        **_: Any,
    ) -> None:
        if watched is not None:
            watched.on_service_event(type, event.get("object") or {})
        if type == "DELETED":
            loops.stop(namespace or "default", name)
        else:  # initial listing (None), ADDED, MODIFIED
            meta = (event.get("object") or {}).get("metadata") or {}
            loops.ensure(namespace or "default", name, uid=str(meta.get("uid") or ""))

    managed = {c.LABEL_ISVC: kopf.PRESENT}

    async def on_child_event(labels: Mapping[str, str], namespace: str | None, **_: Any) -> None:
        loops.wake(namespace, labels.get(c.LABEL_ISVC))

    async def on_pod_event(
        type: str | None,  # noqa: A002 - kopf's keyword
        event: Mapping[str, Any],
        labels: Mapping[str, str],
        namespace: str | None,
        **_: Any,
    ) -> None:
        if watched is not None:
            watched.on_pod_event(type, event.get("object") or {})
        loops.wake(namespace, labels.get(c.LABEL_ISVC))

    for group, plural in CHILD_RESOURCES:
        handler = on_pod_event if (group, plural) == ("", "pods") else on_child_event
        kopf.on.event(group, "v1", plural, labels=managed, registry=registry)(handler)

    _register_activator_watch(registry, loops=loops, watched=watched, activator=activator)

    @kopf.on.cleanup(registry=registry)
    async def stop_loops(**_: Any) -> None:
        await loops.stop_all()


def _register_activator_watch(
    registry: kopf.OperatorRegistry,
    *,
    loops: ServiceLoops,
    watched: WatchedObjects | None,
    activator: ActivatorWatch | None,
) -> None:
    """Run the activator's watch with the operator; a change wakes the services that may be at zero."""
    if activator is None:
        return

    def wake_zero_services() -> None:
        keys = watched.may_scale_to_zero() if watched is not None else [r.key for r in loops.runtimes]
        for namespace, name in keys:
            loops.wake(namespace, name)

    # The Services' own slices: a pod listed there (or gone from there) decides the routing.
    @kopf.on.event(
        "discovery.k8s.io", "v1", "endpointslices", labels={c.LABEL_ISVC: kopf.PRESENT}, registry=registry
    )
    async def on_slice_event(labels: Mapping[str, str], namespace: str | None, **_: Any) -> None:
        loops.wake(namespace, labels.get(c.LABEL_ISVC))

    @kopf.on.startup(registry=registry)
    async def watch_activator(**_: Any) -> None:
        loop = asyncio.get_running_loop()

        def on_change() -> None:  # in the watch's thread: the wakes run on the event loop
            loop.call_soon_threadsafe(wake_zero_services)

        activator.start(on_change)

    @kopf.on.cleanup(registry=registry)
    async def stop_activator_watch(**_: Any) -> None:
        await asyncio.to_thread(activator.stop)


#: Children whose changes (a build pod finishing, a replica becoming ready, a hand edit) wake the owner.
CHILD_RESOURCES = (
    ("batch", "jobs"),
    ("apps", "deployments"),
    ("", "pods"),
    ("", "configmaps"),
    ("", "services"),
    ("policy", "poddisruptionbudgets"),
    ("networking.k8s.io", "networkpolicies"),
)
# Not the admin-key Secrets: watching them would need list and watch on every Secret of the cluster.
# A deleted one is recreated by the service's next pass (any event of it or its children, or the resync).
