"""The oracle: per 10 s window, the fewest replicas (with the best batching) that meet the SLO.

Windows are solved in time order.  For each window the oracle replays the *actual*
arrivals of that window, preceded by those of the window before on the fleet already
chosen for it (so backlog carried into the window is seen), on a fleet of n ready
replicas for each candidate batching and keeps the smallest n for
which some candidate's P99 over the window's requests is within the SLO; among the
candidates that pass at that n it keeps the first in throughput order.  The search for n
starts at half the fluid bound (window rate / best per-replica throughput) and goes up;
tests check it against a brute force from n = 1 on small cases.

Two schedules follow from the per-window needs:
* fluid: the replicas are there exactly when needed (start-up time ignored);
* realizable: each replica is asked for Ts ahead, so it is ready when its window starts
  (and is paid from when it was asked for).
Both are then run through the full simulator, so their scores are measured like any
policy's (windows judged in isolation can still miss once backlog carries over).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from tailpilot.api.autoscaling import BatchingConfig
from tailpilot.api.engine import ServiceTimeModel
from tailpilot.bench.metrics import p99
from tailpilot.bench.simulator import FleetView, SimConfig, Target, simulate
from tailpilot.bench.triton_batcher import batch_cap


@dataclass(frozen=True)
class WindowNeed:
    """What one window needs."""

    replicas: int
    batching: BatchingConfig


def _throughput(service: ServiceTimeModel, cfg: BatchingConfig) -> float:
    b = batch_cap(cfg)
    return float(cfg.instances_per_replica * b * 1000.0 / service.mean_ms(b))


class SwitchAt:
    """One fleet until `at_s`, then another (ready at once when start-up is 0)."""

    def __init__(self, before: Target, after: Target, at_s: float) -> None:
        self._before, self._after = before, after
        self.tick_s = at_s if at_s > 0 else 1e9

    def initial(self) -> Target:
        return self._before if self.tick_s < 1e9 else self._after

    def decide(self, view: FleetView) -> Target:
        return self._after


def window_p99_ms(
    arrivals_s: npt.NDArray[np.float64],
    *,
    replicas: int,
    batching: BatchingConfig,
    service: ServiceTimeModel,
    seed: int,
    judge_from_s: float = 0.0,
    warmup: WindowNeed | None = None,
) -> float:
    """P99 (ms) of the arrivals at or after `judge_from_s` on `replicas` ready replicas.

    Before `judge_from_s` the fleet is `warmup` (default: the same fleet); it starts empty.
    """
    if arrivals_s.size == 0 or arrivals_s[-1] < judge_from_s:
        return 0.0
    span = float(arrivals_s[-1]) + 1.0
    after = Target(replicas, batching)
    before = Target(warmup.replicas, warmup.batching) if warmup is not None else after
    res = simulate(
        arrivals_s=arrivals_s,
        config=SimConfig(
            service=service,
            duration_s=span,
            startup_s=0.0,
            seed=seed,
            max_replicas=max(replicas, before.replicas),
            reload_s=0.0,
        ),
        controller=SwitchAt(before, after, judge_from_s),
    )
    return float(p99(res.latency_s[res.arrival_s >= judge_from_s]) * 1000.0)


def window_need(
    arrivals_s: npt.NDArray[np.float64],
    *,
    window_s: float,
    service: ServiceTimeModel,
    slo_ms: float,
    candidates: Sequence[BatchingConfig],
    max_replicas: int,
    seed: int,
    start_at: int | None = None,
    judge_from_s: float = 0.0,
    warmup: WindowNeed | None = None,
) -> WindowNeed:
    """Fewest replicas (and the first passing candidate) for a window's arrivals judged from `judge_from_s`.

    Arrivals before `judge_from_s` are the warm-up (the previous window); times start at 0.
    """
    judged = int(np.count_nonzero(arrivals_s >= judge_from_s))
    if judged == 0:
        return WindowNeed(1, candidates[0])
    best_tp = max(_throughput(service, c) for c in candidates)
    fluid = judged / window_s / best_tp
    n = start_at if start_at is not None else max(1, math.floor(fluid / 2))

    def ok(n: int, cand: BatchingConfig) -> float:
        return window_p99_ms(
            arrivals_s,
            replicas=n,
            batching=cand,
            service=service,
            seed=seed,
            judge_from_s=judge_from_s,
            warmup=warmup,
        )

    while n < max_replicas:
        for cand in candidates:
            if ok(n, cand) <= slo_ms:
                return WindowNeed(n, cand)
        n += 1
    # At the cap: the best the fleet can do (lowest P99) even if it misses the SLO.
    scored = [(ok(max_replicas, c), i) for i, c in enumerate(candidates)]
    return WindowNeed(max_replicas, candidates[min(scored)[1]])


def window_needs(
    arrivals_s: npt.NDArray[np.float64],
    *,
    duration_s: float,
    service: ServiceTimeModel,
    slo_ms: float,
    candidates: Sequence[BatchingConfig],
    max_replicas: int,
    seed: int,
    window_s: float = 10.0,
) -> list[WindowNeed]:
    """Per-window needs over a whole trace."""
    nwin = max(1, math.ceil(duration_s / window_s))
    bounds = np.searchsorted(arrivals_s, np.arange(nwin + 1) * window_s)
    out: list[WindowNeed] = []
    for k in range(nwin):
        warm = window_s if k > 0 else 0.0
        chunk = arrivals_s[bounds[max(0, k - 1)] : bounds[k + 1]] - (k * window_s - warm)
        out.append(
            window_need(
                chunk,
                window_s=window_s,
                service=service,
                slo_ms=slo_ms,
                candidates=candidates,
                max_replicas=max_replicas,
                seed=seed + k,
                judge_from_s=warm,
                warmup=out[-1] if out else None,
            )
        )
    return out


class ScheduledOracle:
    """Plays a per-window schedule: replicas asked for `lead_s` ahead, batching reloaded `reload_s` ahead."""

    tick_s = 0.5

    def __init__(
        self,
        needs: Sequence[WindowNeed],
        *,
        window_s: float = 10.0,
        lead_s: float = 0.0,
        reload_s: float = 1.5,
    ) -> None:
        self._needs, self._w, self._lead, self._reload = list(needs), window_s, lead_s, reload_s

    def _at(self, t: float) -> int:
        return min(len(self._needs) - 1, max(0, int(t // self._w)))

    def replicas_at(self, t: float) -> int:
        """Replicas the schedule pays for at `t` (the most any window up to `t + lead_s` needs)."""
        k0, k1 = self._at(t), self._at(t + self._lead)
        return max(n.replicas for n in self._needs[k0 : k1 + 1])

    def initial(self) -> Target:
        return Target(self.replicas_at(0.0), self._needs[0].batching)

    def decide(self, view: FleetView) -> Target:
        t = view.now_s
        return Target(self.replicas_at(t), self._needs[self._at(t + self._reload)].batching)
