"""The autoscalers people use today, reduced to their decision rules, as simulator controllers.

Each reads only what it would read in a cluster (through `FleetView`) and keeps its own
state, like the real component.  Parameters follow the upstream defaults named in the
brief; where an upstream knob needs a value tied to the model (a queue threshold, a
concurrency target) it is derived from the engine profile and the SLO in `BaselineParams`
and documented in docs/benchmarks/README.md.  None of them tunes batching except the
Clipper-style one; all others keep `default_batching` (no delay, max batch = the largest
batch whose latency fits the SLO), which is a good static choice, not a strawman.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from tailpilot.api.autoscaling import BatchingConfig
from tailpilot.api.engine import ServiceTimeModel
from tailpilot.bench.simulator import FleetView, SimConfig, Target, simulate

#: Shares of one replica's capacity at which the load tests run: 70% is the default setting of KEDA
#: and KPA (the value a careful operator reads off a load test); 50% and 90% are their other settings.
LOAD_TEST_SHARES = (0.5, 0.7, 0.9)
DEFAULT_LOAD_SHARE = 0.7


@dataclass(frozen=True)
class LoadTest:
    """One replica under Poisson load at `share` of its capacity: mean queued and in flight (each >= 1)."""

    share: float
    queued: float
    inflight: float


@dataclass(frozen=True)
class BaselineParams:
    """Model- and SLO-derived values shared by the baselines."""

    slo_ms: float
    batching: BatchingConfig
    initial_replicas: int
    min_replicas: int
    max_replicas: int
    profile_max_batch: int
    #: One replica's load tests, one per share of its capacity in `LOAD_TEST_SHARES`: what KEDA's
    #: queue target and KPA's concurrency target are read from.
    load_tests: tuple[LoadTest, ...]

    def _load_test(self, share: float) -> LoadTest:
        for test in self.load_tests:
            if math.isclose(test.share, share):
                return test
        raise ValueError(f"no load test at {share:g} of a replica's capacity")

    def queue_target(self, share: float = DEFAULT_LOAD_SHARE) -> float:
        """Queued requests per replica KEDA aims for: the load test's mean queue at `share`."""
        return self._load_test(share).queued

    def concurrency_target(self, share: float = DEFAULT_LOAD_SHARE) -> float:
        """Requests in flight per replica KPA aims for: the load test's mean in flight at `share`."""
        return self._load_test(share).inflight


class Static:
    """Fixed replicas and batching (static peak / static mean)."""

    tick_s = 60.0

    def __init__(self, *, replicas: int, batching: BatchingConfig) -> None:
        self._t = Target(replicas, batching)

    def initial(self) -> Target:
        return self._t

    def decide(self, view: FleetView) -> Target:
        return self._t


class HpaBehavior:
    """The Kubernetes HPA's scaling rules around a desired count (autoscaling/v2 defaults).

    Tolerance 10%; scale-up limited per 15 s period to max(2x, +4); scale-down to the
    highest recommendation of the last 300 s (stabilization window); min/max bounds.
    """

    def __init__(self, *, min_replicas: int, max_replicas: int, down_window_s: float = 300.0) -> None:
        self._min, self._max, self._down_window_s = min_replicas, max_replicas, down_window_s
        self._recs: deque[tuple[float, int]] = deque()

    def apply(self, *, now_s: float, current: int, desired: int) -> int:
        self._recs.append((now_s, desired))
        while self._recs and self._recs[0][0] < now_s - self._down_window_s:
            self._recs.popleft()
        if desired < current:
            desired = min(current, max(r for _, r in self._recs))
        elif desired > current:
            desired = min(desired, max(2 * current, current + 4))
        return max(self._min, min(self._max, desired))


def _ratio_desired(current: int, ratio: float, tolerance: float = 0.1) -> int:
    """HPA's core formula: ceil(current * metric/target), skipped within the tolerance."""
    if abs(ratio - 1.0) <= tolerance:
        return current
    return max(1, math.ceil(current * ratio))


class HpaUtilization:
    """HPA on GPU utilization (busy fraction), target 70%, 15 s sync."""

    tick_s = 15.0

    def __init__(self, params: BaselineParams, *, target: float = 0.7) -> None:
        self._p, self._target = params, target
        self._hpa = HpaBehavior(min_replicas=params.min_replicas, max_replicas=params.max_replicas)
        self._batching = params.batching

    def initial(self) -> Target:
        return Target(self._p.initial_replicas, self._batching)

    def _batching_for(self, view: FleetView) -> BatchingConfig:
        return self._batching

    def decide(self, view: FleetView) -> Target:
        current = view.target_replicas
        util = view.utilization(self.tick_s)
        ready = max(1, view.ready_replicas)
        desired = _ratio_desired(ready, util / self._target)
        return Target(
            self._hpa.apply(now_s=view.now_s, current=current, desired=desired), self._batching_for(view)
        )


class ClipperAimd(HpaUtilization):
    """Clipper-style AIMD on the max batch size, with HPA replicas.

    As in Clipper (NSDI'17, section 4.3) the signal is the batch *processing* time, not
    the end-to-end latency: the max batch grows by 1 while a batch runs within half the
    SLO (a request may wait for one batch and then run in the next) and shrinks by 10%
    when it does not.
    """

    def __init__(self, params: BaselineParams, *, target: float = 0.7, start_batch: int = 4) -> None:
        super().__init__(params, target=target)
        self._mb = min(start_batch, params.profile_max_batch)
        self._batching = params.batching.model_copy(update={"max_batch_size": self._mb})

    def _batching_for(self, view: FleetView) -> BatchingConfig:
        compute_ms = view.observation(self.tick_s).compute_time_ms
        if compute_ms is not None:
            if compute_ms > self._p.slo_ms / 2:
                self._mb = max(1, math.floor(self._mb * 0.9))
            elif self._mb < self._p.profile_max_batch:
                self._mb += 1
        self._batching = self._batching.model_copy(update={"max_batch_size": self._mb})
        return self._batching


class KedaQueue:
    """KEDA Prometheus scaler on `sum(nv_inference_pending_request_count)`, AverageValue target, HPA rules."""

    tick_s = 15.0

    def __init__(self, params: BaselineParams, *, share: float = DEFAULT_LOAD_SHARE) -> None:
        self._p = params
        self._per_replica = params.queue_target(share)
        self._hpa = HpaBehavior(min_replicas=params.min_replicas, max_replicas=params.max_replicas)

    def initial(self) -> Target:
        return Target(self._p.initial_replicas, self._p.batching)

    def decide(self, view: FleetView) -> Target:
        queued = view.mean_queued(self.tick_s)
        desired = max(1, math.ceil(queued / self._per_replica))
        current = view.target_replicas
        ready = max(1, view.ready_replicas)
        if abs(queued / (ready * self._per_replica) - 1.0) <= 0.1:
            desired = current
        return Target(self._hpa.apply(now_s=view.now_s, current=current, desired=desired), self._p.batching)


class KnativeKpa:
    """Knative KPA on concurrency: 60 s stable window, 6 s panic window, panic at 200%, 2 s tick.

    In panic mode the fleet never shrinks; panic ends after a stable window without
    panic.  Scale-down is limited to halving per tick (max-scale-down-rate 2).
    """

    tick_s = 2.0

    def __init__(
        self,
        params: BaselineParams,
        *,
        share: float = DEFAULT_LOAD_SHARE,
        stable_s: float = 60.0,
        panic_s: float = 6.0,
    ) -> None:
        self._p, self._stable_s, self._panic_s = params, stable_s, panic_s
        self._target = params.concurrency_target(share)
        self._panic_until: float | None = None

    def initial(self) -> Target:
        return Target(self._p.initial_replicas, self._p.batching)

    def decide(self, view: FleetView) -> Target:
        target = self._target
        stable = math.ceil(view.mean_inflight(self._stable_s) / target)
        panic = math.ceil(view.mean_inflight(self._panic_s) / target)
        ready = max(1, view.ready_replicas)
        current = view.target_replicas
        if panic / ready >= 2.0:
            self._panic_until = view.now_s + self._stable_s
        if self._panic_until is not None and view.now_s < self._panic_until:
            desired = max(current, panic)
        else:
            self._panic_until = None
            desired = stable
        desired = max(desired, math.ceil(ready / 2)) if desired < current else desired
        return Target(max(self._p.min_replicas, min(self._p.max_replicas, desired)), self._p.batching)


class KnativeKpaZero(KnativeKpa):
    """KPA with scale to zero at Knative's defaults (the fleet runs behind `ActivatorModel`).

    The activator's held requests count as concurrency (`FleetView.mean_inflight` samples them), so a
    held request asks for a replica at the next tick. The last replica goes once the stable window
    saw no request in flight and then the scale-to-zero grace period (30 s) passed; a fleet at zero
    stays there until a request is held.
    """

    def __init__(
        self, params: BaselineParams, *, share: float = DEFAULT_LOAD_SHARE, grace_s: float = 30.0
    ) -> None:
        super().__init__(params, share=share)
        self._grace_s = grace_s
        self._quiet_since: float | None = None

    def decide(self, view: FleetView) -> Target:
        held = view.held_requests
        if held > 0 and view.target_replicas == 0:
            self._quiet_since = None
            return Target(max(1, math.ceil(held / self._target)), self._p.batching)
        if view.target_replicas <= 1 and held == 0 and view.mean_inflight(self._stable_s) == 0:
            if view.target_replicas == 0:
                return Target(0, self._p.batching)
            if self._quiet_since is None:
                self._quiet_since = view.now_s
            if view.now_s - self._quiet_since >= self._grace_s:
                self._quiet_since = None
                return Target(0, self._p.batching)
            return Target(view.target_replicas, self._p.batching)
        self._quiet_since = None
        want = super().decide(view)
        return Target(max(1, want.replicas), want.batching)


class WvaSaturation:
    """WVA-style saturation scaler: +1 replica when saturated, -1 when the rest keep spare capacity.

    Saturated: busy > 80% (`saturated`) over the tick, or more than a max-size batch queued per
    replica. Spare: the same work on one replica fewer would keep them below 60% busy (`saturated`
    - 0.2) with almost nothing queued.  30 s reconcile period, one replica per step (as the
    llm-d workload-variant-autoscaler's saturation mode does).
    """

    tick_s = 30.0

    def __init__(self, params: BaselineParams, *, saturated: float = 0.8) -> None:
        self._p = params
        self._saturated, self._spare = saturated, saturated - 0.2

    def initial(self) -> Target:
        return Target(self._p.initial_replicas, self._p.batching)

    def decide(self, view: FleetView) -> Target:
        util = view.utilization(self.tick_s)
        ready = max(1, view.ready_replicas)
        queued = view.mean_queued(self.tick_s) / ready
        current = view.target_replicas
        desired = current
        if util > self._saturated or queued > self._p.profile_max_batch:
            desired = current + 1 if ready >= current else current
        elif ready > 1 and util * ready / (ready - 1) < self._spare and queued < 1.0:
            desired = current - 1
        return Target(max(self._p.min_replicas, min(self._p.max_replicas, desired)), self._p.batching)


BaselineController = HpaUtilization | KedaQueue | KnativeKpa | WvaSaturation


@dataclass(frozen=True)
class BaselineSetting:
    """One autoscaler at one setting of its main knob.

    Attributes:
        family: The autoscaler (one line per family in the trade plots).
        make: The controller at this setting, from the model-derived params.
        default: Whether this is the setting the main tables and the default goals compare against
            (the upstream default, or the value a careful operator reads off a load test).
    """

    family: str
    make: Callable[[BaselineParams], BaselineController]
    default: bool = False


def _hpa(target: float) -> Callable[[BaselineParams], BaselineController]:
    return lambda p: HpaUtilization(p, target=target)


def _clipper(target: float) -> Callable[[BaselineParams], BaselineController]:
    return lambda p: ClipperAimd(p, target=target)


def _keda(share: float) -> Callable[[BaselineParams], BaselineController]:
    return lambda p: KedaQueue(p, share=share)


def _kpa(share: float) -> Callable[[BaselineParams], BaselineController]:
    return lambda p: KnativeKpa(p, share=share)


def _wva(saturated: float) -> Callable[[BaselineParams], BaselineController]:
    return lambda p: WvaSaturation(p, saturated=saturated)


def _share_name(base: str, share: float) -> str:
    return base if math.isclose(share, DEFAULT_LOAD_SHARE) else f"{base}-at{round(share * 100)}"


#: Every causal baseline at every setting the benchmark runs, in table order (`default` marks the
#: setting the main tables show). A user tunes these knobs to trade cost for attainment,
#: so TailPilot's curve (its attainment objectives) is compared with every point, not only the
#: defaults (docs/benchmarks/method.md, "Tuned baselines").
BASELINE_SETTINGS: dict[str, BaselineSetting] = {
    **{
        f"hpa-util{round(t * 100)}": BaselineSetting("hpa-util", _hpa(t), t == 0.7)
        for t in (0.5, 0.6, 0.7, 0.8, 0.9)
    },
    **{
        _share_name("keda-queue", s): BaselineSetting("keda-queue", _keda(s), s == DEFAULT_LOAD_SHARE)
        for s in LOAD_TEST_SHARES
    },
    **{
        _share_name("knative-kpa", s): BaselineSetting("knative-kpa", _kpa(s), s == DEFAULT_LOAD_SHARE)
        for s in LOAD_TEST_SHARES
    },
    **{
        ("clipper-aimd+hpa" if t == 0.7 else f"clipper-aimd+hpa-util{round(t * 100)}"): BaselineSetting(
            "clipper-aimd+hpa", _clipper(t), t == 0.7
        )
        for t in (0.5, 0.7, 0.9)
    },
    **{
        ("wva-saturation" if u == 0.8 else f"wva-saturation-{round(u * 100)}"): BaselineSetting(
            "wva-saturation", _wva(u), u == 0.8
        )
        for u in (0.6, 0.7, 0.8, 0.9)
    },
}

#: Name -> factory of each baseline at its default setting, in table order (the main tables and the
#: default goals; TailPilot and the oracles are added by the suite).
AUTOSCALERS: dict[str, Callable[[BaselineParams], BaselineController]] = {
    name: setting.make for name, setting in BASELINE_SETTINGS.items() if setting.default
}
#: The other settings: in results.csv and the attainment-cost section, not in the main tables.
TUNED_BASELINES: tuple[str, ...] = tuple(n for n, s in BASELINE_SETTINGS.items() if not s.default)


def load_test_targets(
    *, service: ServiceTimeModel, batching: BatchingConfig, rate: float, seed: int, duration_s: float = 600.0
) -> tuple[float, float]:
    """(mean queued, mean in flight) of one replica under Poisson load `rate`, like an operator's load test.

    KEDA's queue threshold and KPA's concurrency target are set from this at 70% of a
    replica's capacity: the values a careful operator would read off a load test.
    """
    rng = np.random.default_rng(seed)
    arrivals = np.cumsum(rng.exponential(1.0 / rate, int(rate * duration_s * 1.2) + 10))
    arrivals = arrivals[arrivals < duration_s]
    res = simulate(
        arrivals_s=arrivals,
        config=SimConfig(service=service, duration_s=duration_s, startup_s=0.0, seed=seed, max_replicas=1),
        controller=Static(replicas=1, batching=batching),
    )
    span = duration_s
    queued = float(np.sum(res.start_s - res.arrival_s)) / span  # Little's law on the queue
    inflight = float(np.sum(res.done_s - res.arrival_s)) / span
    return queued, inflight
