"""Triton's dynamic batcher with a queue delay, as the simulator runs it: payloads handed over early.

It follows triton-inference-server/core 2.x (`src/dynamic_batch_scheduler.cc` `BatcherThread` and
`GetDynamicBatch`, `src/rate_limiter.cc` `PayloadSlotAvailable`, `src/instance_queue.cc` `Dequeue`),
reduced to requests of batch size 1, no shape constraints, no priorities and no queue policy (the
configs the operator writes):

* **Payloads.** The batcher thread moves queued requests into a *payload* and hands it to the
  instances' queue as soon as its rule says send, whether or not an instance is free. Up to two
  payloads per instance may wait there (prefetching). While the payload waits, the batcher may
  still grow it, but only when the batcher thread runs.
* **When the batcher thread runs.** An arrival wakes it only when the payload was sent full
  (saturated), was taken by an instance, or at least the next preferred batch size of requests is
  queued; otherwise it sleeps until its queue-delay timer, or until an instance takes a payload or
  finishes a batch.
* **The rule** (`GetDynamicBatch`): scanning the queue, the payload and the requests taken so far
  never grow past the largest preferred size (past it the payload is sent as *saturated*);
  reaching a preferred size before the oldest queued request's delay expired sends that size;
  a batch that cannot grow any more, an expired delay or a zero delay sends what is pending; a
  waiting payload that is not at a preferred size takes whatever is queued; else the thread
  waits out the oldest request's delay.
* **Dequeue.** An instance takes the oldest waiting payload and merges the next ones into it while
  they waited past the delay and the sum fits `max_batch_size`.
* **The race.** When a batch ends, the instance thread takes the next payload and the batcher
  thread is woken to look at the queue; which acts first is not determined. A request that arrived
  after the waiting payload was formed joins it only when the batcher wins. The caller draws the
  winner (`SimConfig.batcher_wins_race`, measured by `bench/batcher_probe.py`). An instance that
  is idle when a payload is handed over takes it once the batcher thread sleeps again (the
  batcher is running then; the instance thread has to be woken).

Without a queue delay and with no preferred size but the largest (Triton makes `[max_batch_size]`
of an empty list), this is exactly "an instance that comes free takes up to `max_batch_size` of the
queue": every arrival wakes the batcher and joins the waiting payload. The simulator keeps that
fast path (`is_plain`) for those configs, which are the only ones the operator writes.
"""

from __future__ import annotations

import bisect
import math
from collections import deque
from collections.abc import Sequence

from tailpilot.api.autoscaling import BatchingConfig

#: Floating-point slack when comparing a waited time with the queue delay (a timer set at
#: exactly arrival + delay must see the delay as exceeded).
_EPS_S = 1e-9
#: Prefetched payloads allowed per instance (`PayloadSlotAvailable`: twice the instances).
SLOTS_PER_INSTANCE = 2


def preferred_sizes(cfg: BatchingConfig) -> tuple[int, ...]:
    """The preferred batch sizes Triton runs: the config's, or `[max_batch_size]` when it sets none."""
    return tuple(sorted(set(cfg.preferred_batch_sizes))) or (cfg.max_batch_size,)


def batch_cap(cfg: BatchingConfig) -> int:
    """The batch a full queue sends: the largest preferred size (Triton's list), within `max_batch_size`.

    Payloads may end a little larger (a merge of waiting payloads, or one request past the
    largest preferred size in Triton's scan); capacity estimates use this size.
    """
    return int(min(max(preferred_sizes(cfg)), cfg.max_batch_size))


def is_plain(cfg: BatchingConfig) -> bool:
    """Whether the batcher reduces to "a free instance takes up to max_batch_size of the queue"."""
    return cfg.max_queue_delay_us == 0 and preferred_sizes(cfg) == (cfg.max_batch_size,)


class _Payload:
    __slots__ = ("requests",)

    def __init__(self) -> None:
        self.requests: list[int] = []


class PayloadBatcher:
    """One replica's batcher thread and its instances' payload queue (request ids are ints)."""

    def __init__(self, cfg: BatchingConfig, arrivals_s: Sequence[float]) -> None:
        self._arr = arrivals_s
        #: The scheduler's queue: requests in no payload yet.
        self.queue: deque[int] = deque()
        #: Payloads handed to the instances and not taken yet, oldest first.
        self.waiting: deque[_Payload] = deque()
        #: Requests in `waiting`.
        self.held = 0
        #: When the batcher thread's timed wait ends (inf: it sleeps until woken).
        self.wake_at = math.inf
        self._curr: _Payload | None = None  # None: taken by an instance (stale), a new one is due
        self._saturated = False
        self._next_preferred = 0
        self.reconfigure(cfg)

    def reconfigure(self, cfg: BatchingConfig) -> None:
        """A new batching (a live reload): waiting payloads stay; the batcher starts afresh."""
        self._preferred = preferred_sizes(cfg)
        self._max_preferred = max(self._preferred)
        self._max_batch = cfg.max_batch_size
        self._delay_s = cfg.max_queue_delay_us / 1e6
        self._slots = SLOTS_PER_INSTANCE * cfg.instances_per_replica
        self._curr = None
        self._saturated = False
        self._next_preferred = 0
        self.wake_at = math.inf

    # ------------------------------------------------------------------ events
    def arrive(self, t: float, request: int, free: int) -> list[list[int]]:
        """A request enters the queue; returns the batches that start now (at most `free`)."""
        self.queue.append(request)
        if len(self.waiting) >= self._slots:
            return []
        curr = self._curr
        if self._saturated or curr is None or len(self.queue) >= self._next_preferred:
            return self.settle(t, free)
        return []

    def timer(self, t: float, free: int) -> list[list[int]]:
        """The batcher's timed wait may have ended at `t` (a stale timer does nothing)."""
        if t < self.wake_at:
            return []
        self.wake_at = math.inf
        return self.settle(t, free)

    def batch_done(self, t: float, free: int, *, batcher_first: bool) -> list[list[int]]:
        """An instance finished a batch (`free` counts it); `batcher_first`: who wins the race."""
        started: list[list[int]] = []
        if not batcher_first and free > 0 and self.waiting:
            started.append(self._dequeue(t))
        return started + self.settle(t, free - len(started))

    def settle(self, t: float, free: int) -> list[list[int]]:
        """Run the batcher thread until it sleeps, letting idle instances take payloads between runs."""
        started: list[list[int]] = []
        while True:
            self._run(t)
            if len(started) < free and self.waiting:
                started.append(self._dequeue(t))  # its callback wakes the batcher: run again
                continue
            return started

    # ------------------------------------------------------------- the thread
    def _run(self, t: float) -> None:
        for _ in range(4 * self._max_batch + 8):
            if self._saturated or self._curr is None:
                self._curr = _Payload()
                self._saturated = False
                self._next_preferred = 0
            if not self.queue or len(self.waiting) >= self._slots:
                self.wake_at = math.inf
                return
            wait_s = self._get_dynamic_batch(t)
            if wait_s > 0:
                self.wake_at = t + wait_s
                return
        raise RuntimeError("the batcher made no progress")  # pragma: no cover - a bug, not a state

    def _get_dynamic_batch(self, t: float) -> float:
        """`GetDynamicBatch`: move requests into the payload and return 0, or return how long to wait."""
        assert self._curr is not None
        payload = len(self._curr.requests)
        preferred, max_preferred, max_batch = self._preferred, self._max_preferred, self._max_batch
        best = 0
        pending = 0
        send_now = False
        for _ in range(len(self.queue)):
            if payload + pending > 0:
                if payload + pending + 1 > max_preferred and best == 0:
                    best = pending
                    self._saturated = True
                if payload + pending + 1 > max_batch:
                    send_now = True
                    break
            pending += 1
            if payload + pending in preferred:
                best = pending
        waited = t - self._arr[self.queue[0]]
        delay_exceeded = self._delay_s > 0 and waited + _EPS_S >= self._delay_s
        if best and not delay_exceeded:
            if self._delay_s == 0:
                self._saturated = True
            self._move(best)
            return 0.0
        if pending == 0:
            return 0.0
        if send_now or payload + pending >= max_preferred:
            self._saturated = True
            self._move(pending)
            return 0.0
        if delay_exceeded or self._delay_s == 0:
            self._move(pending)
            return 0.0
        i = bisect.bisect_right(preferred, pending + payload)
        self._next_preferred = (preferred[i] if i < len(preferred) else preferred[0]) - payload
        if not self._saturated and payload and payload not in preferred:
            self._move(pending)
            return 0.0
        return self._delay_s - waited

    def _move(self, n: int) -> None:
        curr = self._curr
        assert curr is not None
        if not curr.requests:
            self.waiting.append(curr)  # EnqueuePayload: handed to the instances
        pop = self.queue.popleft
        curr.requests.extend(pop() for _ in range(n))
        self.held += n

    def _dequeue(self, t: float) -> list[int]:
        """An instance takes the oldest waiting payload, merging later ones that waited past the delay."""
        taken = self.waiting.popleft()
        if taken is self._curr:
            self._curr = None
        batch = taken.requests
        if self._delay_s > 0 and self._max_batch > 1:
            while self.waiting:
                nxt = self.waiting[0]
                if t - self._arr[nxt.requests[0]] <= self._delay_s:
                    break
                # Triton marks the next payload executing before it checks the size, so the
                # batcher stops growing it even when it does not fit and stays in the queue.
                if nxt is self._curr:
                    self._curr = None
                if len(batch) + len(nxt.requests) > self._max_batch:
                    break
                self.waiting.popleft()
                batch = batch + nxt.requests
        self.held -= len(batch)
        return batch
