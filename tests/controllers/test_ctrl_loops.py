"""A service's loop: a surge from the fast checks makes the autoscaler decide now, with the reading."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tailpilot.controllers.alerting.alert_webhook import AlertNotification
from tailpilot.controllers.alerting.alerts import FiringAlerts
from tailpilot.controllers.autoscale.fast_checks import FastCheck
from tailpilot.controllers.process.handlers import ServiceLoops
from tailpilot.controllers.reconcile.reconciler import ReconcileResult
from tailpilot.controllers.signals.pod_signals import PodSignals
from tailpilot.policy.surge import SurgeReading

READING = SurgeReading(
    arrival_rate_per_s=30.0, completion_rate_per_s=20.0, span_s=5.0, capacity_per_s=19.1, replicas=1
)
PERIOD_S = 15.0


class RecordingAutoscaler:
    """Answers every step with a 15 s period and records the surge each one was given."""

    def __init__(self) -> None:
        self.surges: list[SurgeReading | None] = []

    async def step(
        self, namespace: str, name: str, *, alert_active: bool, surge: SurgeReading | None = None
    ) -> tuple[float, bool]:
        self.surges.append(surge)
        return PERIOD_S, False

    def forget(self, namespace: str, name: str) -> None:
        pass


def test_a_surge_is_decided_at_once_and_only_once():
    autoscaler = RecordingAutoscaler()
    loops = ServiceLoops(reconciler=CountingReconciler(), executor=None, autoscaler=autoscaler)

    async def scenario() -> list[float]:
        wake = asyncio.Event()
        waits = [await loops._control("ns", "svc", wake)]  # the first pass decides
        waits.append(await loops._control("ns", "svc", wake))  # within the period: no decision
        loops.surge(("ns", "svc"), None)  # a check that saw no surge changes nothing
        waits.append(await loops._control("ns", "svc", wake))
        loops.surge(("ns", "svc"), READING)
        waits.append(await loops._control("ns", "svc", wake))  # decides now, with the reading
        waits.append(await loops._control("ns", "svc", wake))  # the reading was taken
        return waits

    waits = asyncio.run(scenario())
    assert autoscaler.surges == [None, READING]
    assert waits[0] == PERIOD_S and waits[3] == PERIOD_S
    assert all(0 < w <= PERIOD_S for w in (waits[1], waits[2], waits[4]))


def test_without_an_autoscaler_a_surge_is_ignored():
    loops = ServiceLoops(reconciler=CountingReconciler(), executor=None)
    loops.surge(("ns", "svc"), READING)
    assert asyncio.run(loops._control("ns", "svc", asyncio.Event())) == float("inf")


class ReleasingFastChecker:
    """Counts the fast checks it ran and the services whose held pods it put back."""

    def __init__(self) -> None:
        self.checks = 0
        self.released: list[tuple[str, str]] = []
        self.closed = False
        self.signals = PodSignals()

    async def check(self, namespace: str, name: str) -> FastCheck:
        self.checks += 1
        return FastCheck()

    async def release(self, namespace: str, name: str) -> frozenset[str]:
        self.released.append((namespace, name))
        return frozenset()

    async def close(self) -> None:
        self.closed = True

    def forget(self, namespace: str, name: str) -> None:
        pass


def test_shutdown_puts_held_pods_back_for_every_service_with_fast_checks_only():
    checker = ReleasingFastChecker()
    loops = ServiceLoops(reconciler=CountingReconciler(), executor=None, fast_checker=checker)

    async def scenario() -> None:
        loops._sync_fast_checks(("ns", "rotating"), wanted=True)
        loops._sync_fast_checks(("ns", "plain"), wanted=False)
        await asyncio.sleep(0)  # the fast-check task runs its first check
        await loops.stop_all()

    asyncio.run(scenario())
    assert checker.checks == 1
    assert checker.released == [("ns", "rotating")]
    assert checker.closed


class CountingReconciler:
    """Reconciles nothing, asks to be called again in 300 s, and counts its calls."""

    def __init__(self) -> None:
        self.calls = 0
        self.kube = EventSink()

    def reconcile(self, namespace: str, name: str) -> Any:
        self.calls += 1
        return ReconcileResult(requeue_after=300.0)


class FastAutoscaler:
    """Decides every 10 ms; sets `decided` after `wanted` decisions."""

    def __init__(self, wanted: int) -> None:
        self.steps, self.wanted = 0, wanted
        self.decided = asyncio.Event()

    async def step(self, namespace: str, name: str, **_: Any) -> tuple[float, bool]:
        self.steps += 1
        if self.steps >= self.wanted:
            self.decided.set()
        return 0.01, False

    def forget(self, namespace: str, name: str) -> None:
        pass


def test_decisions_run_on_their_period_without_a_reconcile_each_and_a_wake_reconciles():
    from concurrent.futures import ThreadPoolExecutor

    reconciler = CountingReconciler()

    async def scenario() -> tuple[int, int, int]:
        autoscaler = FastAutoscaler(wanted=5)
        with ThreadPoolExecutor(1) as executor:
            loops = ServiceLoops(reconciler=reconciler, executor=executor, autoscaler=autoscaler)
            loops.ensure("ns", "svc")
            await asyncio.wait_for(autoscaler.decided.wait(), timeout=10)
            after_decisions = reconciler.calls
            autoscaler.decided.clear()
            autoscaler.wanted = autoscaler.steps + 1
            loops.wake("ns", "svc")  # a child changed: reconcile now (and the loop goes on deciding)
            await asyncio.wait_for(autoscaler.decided.wait(), timeout=10)
            await loops.stop_all()
        return after_decisions, reconciler.calls, autoscaler.steps

    after_decisions, total, steps = asyncio.run(scenario())
    assert after_decisions == 1 and steps >= 6
    assert total == 2


class EventSink:
    """The Kube a loop posts Events through: the service is found, each Event kept."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str, str]] = []

    def get(self, resource: Any, namespace: str, name: str) -> dict[str, Any]:
        return {"metadata": {"namespace": namespace, "name": name, "uid": "u1"}}

    def post_event(
        self, involved: dict[str, Any], *, type_: str, reason: str, message: str, now: str
    ) -> None:
        self.events.append((type_, reason, message))


def test_alerts_about_services_without_a_loop_are_dropped_not_kept():
    class Noop:
        def __init__(self) -> None:
            self.kube = EventSink()

        def reconcile(self, namespace: str, name: str) -> ReconcileResult:
            return ReconcileResult(requeue_after=300.0)

    async def scenario() -> tuple[dict[Any, Any], dict[Any, Any]]:
        loops = ServiceLoops(reconciler=Noop(), executor=None)
        for i in range(1000):  # made-up names from anyone who reaches the webhook
            loops.alert(firing("ns", f"nobody-{i}"))
        before = {r.key: a for r in loops.runtimes if (a := r.attached(FiringAlerts)) is not None}
        loops.ensure("ns", "svc", uid=UID)
        loops.alert(firing("ns", "svc"))
        after = {
            r.key: sorted(a.firing) for r in loops.runtimes if (a := r.attached(FiringAlerts)) is not None
        }
        await loops.stop_all()
        return before, after

    before, after = asyncio.run(scenario())
    assert before == {}
    assert after == {("ns", "svc"): ["TailPilotP99BurnFast"]}


def test_an_alert_that_starts_or_stops_firing_is_told_on_the_service_once():
    class Noop:
        def __init__(self) -> None:
            self.kube = EventSink()

        def reconcile(self, namespace: str, name: str) -> ReconcileResult:
            return ReconcileResult(requeue_after=300.0)

    reconciler = Noop()

    async def scenario() -> list[bool]:
        loops = ServiceLoops(reconciler=reconciler, executor=None)
        loops.ensure("ns", "svc", uid=UID)
        active = []
        for alert in (
            firing("ns", "svc"),
            firing("ns", "svc"),  # Alertmanager repeats a firing alert
            firing("ns", "svc", alert="TailPilotQueueBurnFast"),
            firing("ns", "svc", status="resolved"),
            firing("ns", "svc", alert="TailPilotQueueBurnFast", status="resolved"),
        ):
            loops.alert(alert)
            active.append(loops._is_alerted(("ns", "svc")))
        await asyncio.gather(*loops._alert_events)
        await loops.stop_all()
        return active

    active = asyncio.run(scenario())
    # One alert resolving leaves the other firing: the autoscaler stays alerted until both resolve.
    assert active == [True, True, True, True, False]
    assert [(t, r) for t, r, _ in reconciler.kube.events] == [
        ("Warning", "SLOAlertFiring"),
        ("Warning", "SLOAlertFiring"),
        ("Normal", "SLOAlertResolved"),
        ("Normal", "SLOAlertResolved"),
    ]


UID = "6f0c2a4e-0000-4000-8000-000000000001"


def firing(
    namespace: str,
    name: str,
    *,
    alert: str = "TailPilotP99BurnFast",
    status: str = "firing",
    uid: str = UID,
) -> AlertNotification:
    return AlertNotification(
        status=status,  # type: ignore[arg-type]
        alertname=alert,
        namespace=namespace,
        inferenceservice=name,
        severity="critical",
        service_uid=uid,
    )


def test_an_alert_is_taken_only_for_the_service_of_the_uid_it_carries():
    """Another namespace's rule labelled with this service's name, or a deleted namesake's, steers nothing."""

    class Noop:
        def __init__(self) -> None:
            self.kube = EventSink()

        def reconcile(self, namespace: str, name: str) -> ReconcileResult:
            return ReconcileResult(requeue_after=300.0)

    async def scenario() -> list[bool]:
        loops = ServiceLoops(reconciler=Noop(), executor=None)
        loops.ensure("ns", "svc", uid=UID)
        alerted = []
        for uid in ("", "someone-elses-uid", UID):
            loops.alert(firing("ns", "svc", uid=uid))
            alerted.append(loops._is_alerted(("ns", "svc")))
        # Deleted and created again under its name: the old incarnation's alerts are not its own.
        loops.stop("ns", "svc")
        loops.ensure("ns", "svc", uid="a-new-uid")
        loops.alert(firing("ns", "svc", uid=UID))
        alerted.append(loops._is_alerted(("ns", "svc")))
        await loops.stop_all()
        return alerted

    assert asyncio.run(scenario()) == [False, False, True, False]


def test_retries_back_off_doubling_to_a_cap_with_jitter():
    from tailpilot.controllers.process.handlers import RETRY_MAX_S, retry_delay_s

    assert [retry_delay_s(n, jitter=0.0) for n in (1, 2, 3)] == [2.5, 5.0, 10.0]
    assert [retry_delay_s(n, jitter=0.999) for n in (1, 2)] == pytest.approx([5.0, 10.0], abs=0.01)
    assert retry_delay_s(30, jitter=1.0) == RETRY_MAX_S  # capped, never overflowing


def test_a_failing_pass_is_retried_with_growing_waits_and_told_once_per_error(
    monkeypatch: pytest.MonkeyPatch,
):
    from tailpilot.controllers.process import handlers

    asked: list[int] = []

    def quick(failures: int, *, jitter: float) -> float:
        asked.append(failures)
        return 0.01

    monkeypatch.setattr(handlers, "retry_delay_s", quick)

    class Flaky:
        """Fails three passes (the API server refusing, twice alike), then succeeds."""

        def __init__(self) -> None:
            self.kube = EventSink()
            self.calls = 0
            self.done = asyncio.Event()

        def reconcile(self, namespace: str, name: str) -> ReconcileResult:
            self.calls += 1
            if self.calls <= 2:
                raise ConnectionError("API server refused the connection")
            if self.calls == 3:
                raise ValueError("status patch rejected")
            self.done.set()
            return ReconcileResult(requeue_after=300.0)

    reconciler = Flaky()

    async def scenario() -> None:
        loops = ServiceLoops(reconciler=reconciler, executor=None)
        loops.ensure("ns", "svc")
        await asyncio.wait_for(reconciler.done.wait(), timeout=10)
        await loops.stop_all()

    asyncio.run(scenario())
    assert asked == [1, 2, 3]  # the failures in a row, each wait from its count
    told = [(t, r, m.split("): ")[-1]) for t, r, m in reconciler.kube.events]
    assert told == [
        ("Warning", "ReconcileFailed", "ConnectionError: API server refused the connection"),
        ("Warning", "ReconcileFailed", "ValueError: status patch rejected"),
    ]


def test_decisions_go_on_while_every_reconcile_fails():
    """A failing reconcile backs off; the decisions keep their own period meanwhile."""
    from concurrent.futures import ThreadPoolExecutor

    class Refusing:
        def __init__(self) -> None:
            self.kube = EventSink()
            self.calls = 0

        def reconcile(self, namespace: str, name: str) -> ReconcileResult:
            self.calls += 1
            raise ConnectionError("API server refused the connection")

    reconciler = Refusing()

    async def scenario() -> int:
        autoscaler = FastAutoscaler(wanted=5)
        with ThreadPoolExecutor(1) as executor:
            loops = ServiceLoops(reconciler=reconciler, executor=executor, autoscaler=autoscaler)
            loops.ensure("ns", "svc")
            # Five decisions 10 ms apart, well before the reconcile's first retry (2.5 s at least).
            await asyncio.wait_for(autoscaler.decided.wait(), timeout=2.0)
            await loops.stop_all()
        return autoscaler.steps

    assert asyncio.run(scenario()) >= 5
    assert reconciler.calls == 1
    assert [r for _, r, _ in reconciler.kube.events] == ["ReconcileFailed"]


def test_a_failing_decision_is_retried_within_its_cap_without_a_reconcile_and_told_once(
    monkeypatch: pytest.MonkeyPatch,
):
    from concurrent.futures import ThreadPoolExecutor

    from tailpilot.controllers.process import handlers

    monkeypatch.setattr(handlers, "DECISION_RETRY_MAX_S", 0.01)

    class FailingTwice(FastAutoscaler):
        async def step(self, namespace: str, name: str, **kwargs: Any) -> tuple[float, bool]:
            if self.steps < 2:
                self.steps += 1
                raise ConnectionError("Prometheus refused the connection")
            return await super().step(namespace, name, **kwargs)

    reconciler = CountingReconciler()

    async def scenario() -> int:
        autoscaler = FailingTwice(wanted=4)
        with ThreadPoolExecutor(1) as executor:
            loops = ServiceLoops(reconciler=reconciler, executor=executor, autoscaler=autoscaler)
            loops.ensure("ns", "svc")
            # Under the reconcile's back-off the first retry would wait 2.5 s at least.
            await asyncio.wait_for(autoscaler.decided.wait(), timeout=2.0)
            await loops.stop_all()
        return autoscaler.steps

    assert asyncio.run(scenario()) >= 4
    assert reconciler.calls == 1  # a failed decision does not make the service reconcile
    told = [(r, m.split("): ")[-1]) for _, r, m in reconciler.kube.events]
    assert told == [("DecisionFailed", "ConnectionError: Prometheus refused the connection")]
