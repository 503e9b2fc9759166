"""The rule by which Triton's dynamic batcher decides to send a batch, as a pure function.

It follows `GetDynamicBatch` in triton-inference-server/core `src/dynamic_batch_scheduler.cc`
(2.x), reduced to requests of batch size 1 and no shape constraints:

* the batcher scans the FIFO queue and never grows a batch past the largest preferred
  batch size (or `max_batch_size` when no preferred sizes are set), itself capped by
  `max_batch_size`;
* if, while scanning, the pending batch reached a preferred size and the oldest request
  has not yet waited `max_queue_delay`, the largest preferred size reached is sent now;
* if the oldest request has waited `max_queue_delay` (always true for a delay of 0), or the
  batch cannot grow any more, whatever is pending is sent now;
* otherwise the batcher waits until the oldest request's delay expires (or more arrive).

A batch is only formed when a model instance is free; that part lives in the simulator.
"""

from __future__ import annotations

from tailpilot.api.autoscaling import BatchingConfig

#: Floating-point slack when comparing a waited time with the queue delay (a timer set at
#: exactly arrival + delay must see the delay as exceeded).
_EPS_S = 1e-9


def batch_cap(cfg: BatchingConfig) -> int:
    """Largest batch the batcher will form under `cfg`."""
    pref = cfg.preferred_batch_sizes
    cap = max(pref) if pref else cfg.max_batch_size
    return int(min(cap, cfg.max_batch_size))


def batch_to_send(*, queued: int, oldest_wait_s: float, cfg: BatchingConfig) -> int:
    """Number of queued requests to send as one batch now; 0 means wait for the queue delay.

    Args:
        queued: Requests waiting in this replica's queue (each of batch size 1).
        oldest_wait_s: How long the oldest queued request has waited.
        cfg: Batching in force.
    """
    if queued <= 0:
        return 0
    cap = batch_cap(cfg)
    pending = min(queued, cap)
    delay_exceeded = oldest_wait_s + _EPS_S >= cfg.max_queue_delay_us / 1e6
    if not delay_exceeded:
        best_preferred = max((p for p in cfg.preferred_batch_sizes if p <= pending), default=0)
        if best_preferred:
            return best_preferred
        return pending if pending >= cap else 0
    return pending
