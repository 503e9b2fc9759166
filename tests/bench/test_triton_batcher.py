"""Triton's payload batcher in the simulator, against cases worked by hand from Triton's source.

Every case uses 100 ms per batch whatever its size and no jitter, so every time is exact.
"""

from __future__ import annotations

import numpy as np
import pytest

from tailpilot.api.autoscaling import BatchingConfig
from tailpilot.api.engine import ServiceTimeModel
from tailpilot.bench.baselines import Static
from tailpilot.bench.simulator import SimConfig, SimResult, simulate
from tailpilot.bench.triton_batcher import is_plain, preferred_sizes

FLAT = ServiceTimeModel(intercept_ms=100.0, per_item_ms=0.0, jitter_cv=0.0)
PREFERRED_4_8_DELAY_5MS = BatchingConfig(
    max_batch_size=16, preferred_batch_sizes=(4, 8), max_queue_delay_us=5000
)


def run(arrivals: list[float], cfg: BatchingConfig, *, race: float = 0.5, instances: int = 1) -> SimResult:
    cfg = cfg.model_copy(update={"instances_per_replica": instances})
    return simulate(
        arrivals_s=np.asarray(arrivals),
        config=SimConfig(service=FLAT, duration_s=5.0, startup_s=0.0, batcher_wins_race=race),
        controller=Static(replicas=1, batching=cfg),
    )


def test_plain_batchings_are_the_ones_without_delay_and_without_smaller_preferred_sizes() -> None:
    assert is_plain(BatchingConfig(max_batch_size=16))
    assert is_plain(BatchingConfig(max_batch_size=16, preferred_batch_sizes=(16,)))
    assert not is_plain(BatchingConfig(max_batch_size=16, preferred_batch_sizes=(4, 8)))
    assert not is_plain(BatchingConfig(max_batch_size=16, max_queue_delay_us=1000))
    # Triton turns an empty list into [max_batch_size].
    assert preferred_sizes(BatchingConfig(max_batch_size=8)) == (8,)


@pytest.mark.parametrize(
    ("race", "batches", "late_done_s"),
    [
        # The batcher thread wins: `late` joins the payload that waits for the instance.
        (1.0, [1, 2], 0.205),
        # The instance thread wins: the payload leaves as it was; `late` waits a batch more.
        (0.0, [1, 1, 1], 0.305),
    ],
)
def test_a_request_after_the_payload_formed_joins_it_only_when_the_batcher_wins_the_race(
    race: float, batches: list[int], late_done_s: float
) -> None:
    # The probe's case: `blocker` runs 5-105 ms; `early`'s delay expires at 25 ms, so its payload
    # waits from then; `late` arrives at 50 ms, too few queued to wake the batcher.
    res = run([0.0, 0.02, 0.05], PREFERRED_4_8_DELAY_5MS, race=race)
    assert res.batch_size.tolist() == batches
    assert res.done_s[1] == pytest.approx(0.205)
    assert res.done_s[2] == pytest.approx(late_done_s)


def test_a_payload_taken_at_once_by_an_idle_instance_leaves_after_the_delay() -> None:
    res = run([0.0, 0.001, 0.002], PREFERRED_4_8_DELAY_5MS)
    assert res.batch_size.tolist() == [3]
    assert res.start_s.tolist() == pytest.approx([0.005] * 3)


def test_reaching_the_next_preferred_size_wakes_the_batcher_before_the_delay() -> None:
    res = run([0.0, 0.001, 0.002, 0.003], PREFERRED_4_8_DELAY_5MS)
    assert res.batch_size.tolist() == [4]
    assert res.start_s.tolist() == pytest.approx([0.003] * 4)


def test_without_delay_one_arrival_at_a_time_fills_a_payload_only_to_the_first_preferred_size() -> None:
    # Busy 0-100 ms; six arrive one by one. Each joins the waiting payload at once (no delay),
    # and reaching 4 saturates it: the next two start another. The instance takes 4, then 2
    # (payloads merge only under a delay), where an instance-free rule would send all six.
    cfg = BatchingConfig(max_batch_size=16, preferred_batch_sizes=(4, 8))
    res = run([0.0, 0.01, 0.02, 0.03, 0.04, 0.05, 0.06], cfg)
    assert res.batch_size.tolist() == [1, 4, 2]
    assert res.batch_start_s.tolist() == pytest.approx([0.0, 0.1, 0.2])


def test_waiting_payloads_past_the_delay_merge_when_an_instance_takes_them() -> None:
    # Preferred 2, max 4, delay 5 ms. Busy 5-105 ms with the first. r1 and r2 make a payload of
    # the preferred 2 at 12 ms; r4 (21 ms) wakes the batcher, which puts r3 into that payload
    # (Triton's scan marks one request past the largest preferred size) and starts a new one of
    # r4, sent at its delay (26 ms). At 105 ms the instance takes the first and merges the second,
    # which waited past the delay: one batch of 4.
    cfg = BatchingConfig(max_batch_size=4, preferred_batch_sizes=(2,), max_queue_delay_us=5000)
    res = run([0.0, 0.01, 0.012, 0.02, 0.021], cfg)
    assert res.batch_size.tolist() == [1, 4]
    assert res.batch_start_s.tolist() == pytest.approx([0.005, 0.105])


def test_a_second_instance_takes_the_next_waiting_payload() -> None:
    res = run([0.0, 0.02], PREFERRED_4_8_DELAY_5MS, instances=2)
    assert res.batch_size.tolist() == [1, 1]
    assert res.start_s.tolist() == pytest.approx([0.005, 0.025])


def test_every_request_is_served_once_under_load_whoever_wins() -> None:
    rng = np.random.default_rng(3)
    arrivals = np.sort(rng.uniform(0.0, 4.0, 400)).tolist()
    for race in (0.0, 0.5, 1.0):
        res = run(arrivals, PREFERRED_4_8_DELAY_5MS, race=race, instances=2)
        assert np.isfinite(res.done_s).all()
        assert int(res.batch_size.sum()) == len(arrivals)
        assert res.batch_size.max() <= 16
        assert (res.start_s >= res.arrival_s).all()
