"""Timing each cold start and recording it once on the InferenceService: episodes, writes, wiring."""

from __future__ import annotations

import asyncio
import logging
import time
from datetime import UTC, datetime, timedelta

import pytest

from tailpilot.activator.cold_start import (
    ColdStarts,
    KubeColdStartWriter,
    cold_start_patch,
)
from tailpilot.activator.metrics import ActivatorMetrics
from tailpilot.activator.routing import ServiceKey
from tailpilot.activator.waking import Wakes
from tailpilot.api.cold_start import ColdStartEpisode, parse_episode
from tests.activator.harness import SERVICE, RecordingWaker, eventually, fast_settings, started
from tests.activator.replicas import EchoHttpReplica
from tests.activator.test_http_proxy import INFER, infer_body
from tests.activator.test_waking import FakeCustomObjects

A = ServiceKey(namespace="shop", name="a")
T0 = datetime(2026, 12, 6, 5, 31, 30, 123000, tzinfo=UTC)


class RecordingWriter:
    """A `ColdStartWriter` that keeps what it was given; the first `failures` writes raise."""

    def __init__(self, *, failures: int = 0) -> None:
        self.written: list[tuple[ServiceKey, ColdStartEpisode]] = []
        self.failures = failures

    async def write(self, key: ServiceKey, episode: ColdStartEpisode) -> None:
        if self.failures > 0:
            self.failures -= 1
            raise ConnectionError("the API server is unreachable")
        self.written.append((key, episode))


class SteppedClock:
    """A wall clock a test moves: `now()` is T0 plus the seconds set."""

    def __init__(self) -> None:
        self.seconds = 0.0

    def __call__(self) -> datetime:
        return T0 + timedelta(seconds=self.seconds)

    def at(self, seconds: float) -> SteppedClock:
        self.seconds = seconds
        return self


def records(metrics: ActivatorMetrics, result: str) -> float:
    value = metrics.registry.get_sample_value(
        "tailpilot_activator_cold_start_records_total", {"result": result}
    )
    return value or 0.0


def recorder(writer: RecordingWriter, clock: SteppedClock) -> tuple[ColdStarts, ActivatorMetrics]:
    metrics = ActivatorMetrics()
    return ColdStarts(writer, metrics=metrics, now=clock), metrics


def test_an_episode_is_timed_from_the_first_hold_to_its_answer_and_written_once() -> None:
    async def scenario() -> None:
        writer, clock = RecordingWriter(), SteppedClock()
        cold, metrics = recorder(writer, clock)
        cold.woke(A)  # no episode open: nothing to time
        first = cold.held(A)
        clock.at(0.04)
        cold.woke(A)
        clock.at(2.0)
        joined = cold.held(A)
        clock.at(9.0)
        cold.woke(A)  # a second wake (after a hold timeout) lands: the first one counts
        clock.at(44.5)
        cold.backend_ready(A)
        clock.at(44.55)
        cold.backend_ready(A)
        clock.at(44.6)
        cold.answered(joined)  # a later client answered first: the first client's answer ends it
        assert cold.open(A) and writer.written == []
        clock.at(44.62)
        cold.answered(first)
        assert not cold.open(A)
        await cold.close()
        assert writer.written == [
            (
                A,
                ColdStartEpisode(
                    held_at=T0,
                    woke_at=T0 + timedelta(seconds=0.04),
                    backend_ready_at=T0 + timedelta(seconds=44.5),
                    answered_at=T0 + timedelta(seconds=44.62),
                ),
            )
        ]
        assert (records(metrics, "ok"), records(metrics, "failed")) == (1, 0)

    asyncio.run(scenario())


def test_when_the_first_client_leaves_the_next_answer_ends_the_episode() -> None:
    async def scenario() -> None:
        writer, clock = RecordingWriter(), SteppedClock()
        cold, _ = recorder(writer, clock)
        first, second, third = cold.held(A), cold.held(A), cold.held(A)
        clock.at(5.0)
        cold.gave_up(first)  # hung up
        clock.at(30.0)
        cold.answered(second)
        cold.answered(third)  # its episode is over: nothing more
        await cold.close()
        [(_, episode)] = writer.written
        assert (episode.held_at, episode.answered_at) == (T0, T0 + timedelta(seconds=30))

    asyncio.run(scenario())


def test_an_episode_nobody_saw_answered_is_dropped_and_the_next_hold_opens_a_new_one() -> None:
    async def scenario() -> None:
        writer, clock = RecordingWriter(), SteppedClock()
        cold, _ = recorder(writer, clock)
        first, second = cold.held(A), cold.held(A)
        cold.gave_up(second)
        cold.gave_up(first)  # both timed out
        assert not cold.open(A)
        clock.at(400.0)
        again = cold.held(A)
        assert again.first
        clock.at(430.0)
        cold.answered(again)
        await cold.close()
        [(_, episode)] = writer.written
        assert episode.held_at == T0 + timedelta(seconds=400) and episode.woke_at is None

    asyncio.run(scenario())


def test_a_failed_write_is_logged_and_counted_never_raised(caplog: pytest.LogCaptureFixture) -> None:
    async def scenario() -> None:
        writer, clock = RecordingWriter(failures=1), SteppedClock()
        cold, metrics = recorder(writer, clock)
        ticket = cold.held(A)
        clock.at(1.0)
        cold.answered(ticket)  # returns at once: the write runs in the background
        await eventually(lambda: records(metrics, "failed") == 1)
        await cold.close()
        assert writer.written == [] and records(metrics, "ok") == 0

    with caplog.at_level(logging.WARNING, logger="tailpilot.activator.cold_start"):
        asyncio.run(scenario())
    assert "recording the cold start of shop/a failed: the API server is unreachable" in caplog.text


def test_the_kube_writer_merge_patches_the_annotation_onto_the_inference_service() -> None:
    api = FakeCustomObjects()
    episode = ColdStartEpisode(held_at=T0, answered_at=T0 + timedelta(seconds=44.62))
    asyncio.run(KubeColdStartWriter(api).write(A, episode))
    assert api.patches == [
        ("tailpilot.io", "v1alpha1", "shop", "inferenceservices", "a", cold_start_patch(episode))
    ]
    assert api.options == [{"_content_type": "application/merge-patch+json"}]
    assert cold_start_patch(episode) == {
        "metadata": {
            "annotations": {
                "tailpilot.io/cold-start": (
                    '{"heldAt":"2026-12-06T05:31:30.123Z","answeredAt":"2026-12-06T05:32:14.743Z"}'
                )
            }
        }
    }


def test_a_landed_wake_is_told_and_a_failed_one_is_not() -> None:
    async def scenario() -> None:
        landed: list[ServiceKey] = []
        waker = RecordingWaker(failures=1)
        wakes = Wakes(
            waker,
            rewake_after_s=60.0,
            metrics=ActivatorMetrics(),
            retry_first_s=0.001,
            on_woken=landed.append,
        )
        wakes.request(A, still_wanted=lambda: True)
        await eventually(lambda: not wakes.pending(A))
        assert (waker.calls, landed) == ([A, A], [A])

    asyncio.run(scenario())


def test_a_cold_start_through_the_activator_is_recorded_with_every_time_in_order() -> None:
    async def scenario() -> None:
        writer = RecordingWriter()
        async with EchoHttpReplica() as replica, started(cold_start_writer=writer) as harness:
            sent = time.monotonic()
            first = asyncio.create_task(harness.post(INFER, data=infer_body(0)))
            await eventually(lambda: harness.held() == 1)
            others = [asyncio.create_task(harness.post(INFER, data=infer_body(n))) for n in (1, 2)]
            await eventually(lambda: harness.held() == 3 and len(harness.waker.calls) == 1)
            await asyncio.sleep(0.3)  # the replica takes its time to come up
            harness.table.set_endpoints(SERVICE, [replica.endpoint])
            status, _, _ = await asyncio.wait_for(first, timeout=10.0)
            waited_s = time.monotonic() - sent
            await asyncio.wait_for(asyncio.gather(*others), timeout=10.0)
            await eventually(lambda: len(writer.written) == 1)
        assert status == 200
        [(key, episode)] = writer.written
        assert key == SERVICE
        assert episode.woke_at is not None and episode.backend_ready_at is not None
        assert episode.held_at <= episode.woke_at <= episode.backend_ready_at <= episode.answered_at
        total_s = (episode.answered_at - episode.held_at).total_seconds()
        assert 0.3 <= total_s <= waited_s  # what the first client waited, less its own round trip
        assert waited_s - total_s < 0.1 * waited_s
        # The annotation's value reads back as the same episode, to the millisecond.
        assert parse_episode(episode.to_annotation()).held_at == episode.held_at.replace(
            microsecond=episode.held_at.microsecond // 1000 * 1000
        )

    asyncio.run(scenario())


def test_a_failing_record_never_touches_the_answer_and_a_timed_out_hold_records_nothing() -> None:
    async def scenario() -> None:
        writer = RecordingWriter(failures=1)
        async with EchoHttpReplica() as replica, started(cold_start_writer=writer) as harness:
            held = asyncio.create_task(harness.post(INFER, data=infer_body()))
            await eventually(lambda: harness.held() == 1)
            harness.table.set_endpoints(SERVICE, [replica.endpoint])
            status, _, _ = await asyncio.wait_for(held, timeout=10.0)
            assert status == 200
            assert not harness.running.activation.cold_starts.open(SERVICE)
        assert writer.written == []
        quiet = RecordingWriter()
        async with started(settings=fast_settings(hold_timeout_s=0.2), cold_start_writer=quiet) as harness:
            status, _, _ = await harness.post(INFER, data=infer_body())
            assert status == 504
            assert not harness.running.activation.cold_starts.open(SERVICE)
        assert quiet.written == []

    asyncio.run(scenario())
