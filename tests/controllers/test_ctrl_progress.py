"""The liveness probe fails when a service loop stops progressing, and only then."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import kopf
import pytest

from tailpilot.controllers.process.handlers import ServiceLoops, register
from tailpilot.controllers.process.progress import MAX_PASS_S, PassWatch
from tailpilot.controllers.reconcile.reconciler import ReconcileResult
from tests.fakes import FakeClock, UnexpectedKube


def test_a_pass_in_flight_past_the_bound_is_named_and_one_that_ended_is_not():
    clock = FakeClock(100.0)
    watch = PassWatch(clock=clock)
    with watch.watching(("ns", "slow")):
        clock.advance(MAX_PASS_S)
        assert watch.problem() is None  # at the bound: still progressing
        with watch.watching(("ns", "quick")):
            clock.advance(1.0)
            problem = watch.problem()
            assert problem is not None and "ns/slow" in problem and "1 pass(es) stuck" in problem
    assert watch.problem() is None and watch.began == {}


class BlockedReconciler:
    """A reconcile that waits on an event a test sets: a worker stuck on a call that never returns."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.entered = threading.Event()
        self.kube = UnexpectedKube()  # the loop posts an Event only about a failed pass

    def reconcile(self, namespace: str, name: str) -> ReconcileResult:
        self.entered.set()
        self.release.wait(timeout=30)
        return ReconcileResult(requeue_after=300.0)


def progress_probe(loops: ServiceLoops) -> Any:
    """The probe handler `register` puts on the registry (what kopf's liveness endpoint runs)."""
    registry = kopf.OperatorRegistry()
    register(registry, loops=loops)
    (handler,) = [h for h in registry._activities.get_all_handlers() if h.id == "progress"]
    return handler.fn


def test_a_stuck_reconcile_fails_the_liveness_probe_until_it_returns():
    clock = FakeClock(0.0)
    reconciler = BlockedReconciler()

    async def scenario() -> tuple[str, str, str]:
        with ThreadPoolExecutor(1) as executor:
            loops = ServiceLoops(reconciler=reconciler, executor=executor, clock=clock)
            probe = progress_probe(loops)
            loops.ensure("ns", "svc")
            assert await asyncio.to_thread(reconciler.entered.wait, 10)
            healthy = probe()
            clock.advance(MAX_PASS_S + 1)
            with pytest.raises(kopf.PermanentError) as stuck:
                probe()
            reconciler.release.set()
            for _ in range(500):  # the pass returns on the worker; the loop then marks it ended
                if not loops.passes.began:
                    break
                await asyncio.sleep(0.01)
            recovered = probe()
            await loops.stop_all()
        return healthy, str(stuck.value), recovered

    healthy, stuck, recovered = asyncio.run(scenario())
    assert healthy == recovered == "service loops progress"
    assert "no progress" in stuck and "ns/svc" in stuck


def test_kopfs_liveness_endpoint_answers_500_when_the_progress_probe_fails():
    """What the kubelet sees: kopf's own health server runs the probe and fails the request."""
    import socket

    import httpx
    from kopf._cogs.structs import ephemera
    from kopf._core.engines.probing import health_reporter

    clock = FakeClock(0.0)
    loops = ServiceLoops(reconciler=BlockedReconciler(), executor=None, clock=clock)
    registry = kopf.OperatorRegistry()
    register(registry, loops=loops)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]

    async def scenario() -> int:
        ready = asyncio.Event()
        server = asyncio.create_task(
            health_reporter(
                f"http://127.0.0.1:{port}/healthz",
                memo=ephemera.Memo(),
                indices={},  # type: ignore[arg-type]
                registry=registry,
                settings=kopf.OperatorSettings(),
                ready_flag=ready,
            )
        )
        try:
            await asyncio.wait_for(ready.wait(), timeout=10)
            loops.passes.began[("ns", "svc")] = clock.now
            clock.advance(MAX_PASS_S + 1)
            async with httpx.AsyncClient() as client:
                return (await client.get(f"http://127.0.0.1:{port}/healthz", timeout=10)).status_code
        finally:
            server.cancel()
            await asyncio.gather(server, return_exceptions=True)

    assert asyncio.run(scenario()) == 500
