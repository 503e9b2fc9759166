"""Waking a cold service: the annotation patch, once per cold episode, retried while requests wait."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

from tailpilot.activator.metrics import ActivatorMetrics
from tailpilot.activator.routing import ServiceKey
from tailpilot.activator.waking import (
    ANNOTATION_WAKE_REQUESTED_AT,
    KubeWaker,
    Wakes,
    rfc3339_utc,
    wake_due,
    wake_patch,
    wake_retry_delay_s,
)
from tests.activator.harness import RecordingWaker, eventually

A = ServiceKey(namespace="shop", name="a")


def wakes_total(metrics: ActivatorMetrics, result: str) -> float:
    value = metrics.registry.get_sample_value("tailpilot_activator_wakes_total", {"result": result})
    return value or 0.0


def test_the_annotation_is_rfc3339_utc_to_the_second() -> None:
    moment = datetime(2026, 1, 31, 13, 4, 5, 987654, tzinfo=timezone(timedelta(hours=1)))
    assert rfc3339_utc(moment) == "2026-01-31T12:04:05Z"
    assert ANNOTATION_WAKE_REQUESTED_AT == "tailpilot.io/wake-requested-at"
    assert wake_patch(moment) == {
        "metadata": {"annotations": {ANNOTATION_WAKE_REQUESTED_AT: "2026-01-31T12:04:05Z"}}
    }


def test_a_wake_is_due_first_and_again_after_the_rewake_time() -> None:
    assert wake_due(last_wake_at=None, now=0.0, rewake_after_s=60.0)
    assert not wake_due(last_wake_at=10.0, now=69.9, rewake_after_s=60.0)
    assert wake_due(last_wake_at=10.0, now=70.0, rewake_after_s=60.0)


def test_retry_delays_double_up_to_the_maximum() -> None:
    assert [wake_retry_delay_s(n, first_s=0.5, max_s=3.0) for n in range(5)] == [0.5, 1.0, 2.0, 3.0, 3.0]


class FakeCustomObjects:
    def __init__(self) -> None:
        self.patches: list[tuple[Any, ...]] = []
        self.options: list[dict[str, Any]] = []

    def patch_namespaced_custom_object(self, *args: Any, **options: Any) -> dict[str, Any]:
        self.patches.append(args)
        self.options.append(options)
        return {}


def test_the_kube_waker_merge_patches_the_inference_service() -> None:
    api = FakeCustomObjects()
    moment = datetime(2026, 1, 31, 12, 0, 0, tzinfo=UTC)
    asyncio.run(KubeWaker(api, now=lambda: moment).wake(A))
    assert api.patches == [
        ("tailpilot.io", "v1alpha1", "shop", "inferenceservices", "a", wake_patch(moment)),
    ]
    assert api.options == [{"_content_type": "application/merge-patch+json"}]


def test_many_held_requests_make_one_wake() -> None:
    async def scenario() -> None:
        waker, metrics = RecordingWaker(), ActivatorMetrics()
        wakes = Wakes(waker, rewake_after_s=60.0, metrics=metrics)
        for _ in range(10):
            wakes.request(A, still_wanted=lambda: True)
        await eventually(lambda: not wakes.pending(A))
        for _ in range(10):
            wakes.request(A, still_wanted=lambda: True)
        await eventually(lambda: not wakes.pending(A))
        assert waker.calls == [A]
        assert wakes_total(metrics, "ok") == 1

    asyncio.run(scenario())


def test_a_wake_is_sent_again_after_the_rewake_time_and_after_a_ready_replica() -> None:
    async def scenario() -> None:
        now = [0.0]
        waker = RecordingWaker()
        wakes = Wakes(waker, rewake_after_s=60.0, metrics=ActivatorMetrics(), clock=lambda: now[0])
        wakes.request(A, still_wanted=lambda: True)
        await eventually(lambda: not wakes.pending(A))
        now[0] = 59.0
        wakes.request(A, still_wanted=lambda: True)  # the first wake is recent: no new one
        now[0] = 60.0
        wakes.request(A, still_wanted=lambda: True)  # a hold timeout passed without a replica
        await eventually(lambda: not wakes.pending(A))
        assert waker.calls == [A, A]
        wakes.episode_over(A)  # a replica was ready: the next cold start wakes at once
        now[0] = 61.0
        wakes.request(A, still_wanted=lambda: True)
        await eventually(lambda: not wakes.pending(A))
        assert waker.calls == [A, A, A]

    asyncio.run(scenario())


def test_a_failed_wake_is_retried_while_requests_wait() -> None:
    async def scenario() -> None:
        waker, metrics = RecordingWaker(failures=2), ActivatorMetrics()
        wakes = Wakes(waker, rewake_after_s=60.0, metrics=metrics, retry_first_s=0.001, retry_max_s=0.01)
        wakes.request(A, still_wanted=lambda: True)
        await eventually(lambda: not wakes.pending(A))
        assert waker.calls == [A, A, A]
        assert (wakes_total(metrics, "failed"), wakes_total(metrics, "ok")) == (2, 1)

    asyncio.run(scenario())


def test_a_failed_wake_is_not_retried_once_nothing_waits() -> None:
    async def scenario() -> None:
        waker = RecordingWaker(failures=5)
        wakes = Wakes(waker, rewake_after_s=60.0, metrics=ActivatorMetrics(), retry_first_s=0.001)
        wakes.request(A, still_wanted=lambda: False)
        await eventually(lambda: not wakes.pending(A))
        assert waker.calls == [A]

    asyncio.run(scenario())


def test_close_stops_pending_retries() -> None:
    async def scenario() -> None:
        waker = RecordingWaker(failures=1000)
        wakes = Wakes(waker, rewake_after_s=60.0, metrics=ActivatorMetrics(), retry_first_s=10.0)
        wakes.request(A, still_wanted=lambda: True)
        await eventually(lambda: len(waker.calls) == 1)
        await asyncio.wait_for(wakes.close(), timeout=5.0)
        assert not wakes.pending(A)

    asyncio.run(scenario())
