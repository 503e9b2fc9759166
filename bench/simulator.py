"""Seeded discrete-event simulator of a fleet of Triton replicas behind a Kubernetes Service.

Model (each choice is deliberate; see docs/benchmarks/README.md):

* Requests of batch size 1 arrive at the times given (a sorted array); the Service sends
  each to a ready replica, round robin by default (kube-proxy in IPVS `rr` mode; its
  iptables mode is random, which is no better) or to the replica with the fewest
  requests pending (`least_pending`).  With no ready replica the request fails.
* Each replica has one FIFO queue and `instances_per_replica` model instances that run
  batches in parallel (a GPU runs concurrent instances with some overlap; full overlap is
  the simplification).  Batching follows Triton's dynamic batcher: with no queue delay and no
  preferred size below the max, a free instance takes up to `max_batch_size` of the queue;
  otherwise `tailpilot.bench.triton_batcher` hands payloads to the instances as Triton does.
* A batch of b takes (a + c*b) * X ms, with a, c from the engine profile's
  `ServiceTimeModel` and X lognormal with mean 1 and CV `jitter_cv`.
* A replica asked for at t serves from t + Ts (Ts = start-up time) and costs from t.  A
  replica removed while starting is cancelled; a ready one stops taking traffic, finishes
  what it holds, then goes (its cost stops when it is removed from the Service).
* A batching change reaches every replica `reload_s` after the decision (Triton's live
  reload took 1.5 s with no failed request on these machines) and applies to new batches.
* The controller runs every `tick_s`; it reads the fleet only through `FleetView`, which
  exposes what Prometheus would (Triton counters, summary quantiles, gauges sampled every
  `scrape_s`, busy fraction) — never the simulator's internals.
* GPU products (only when a controller names one, `Target.product`; `SimConfig.products` gives
  each product's service time, the jitter's CV stays `service`'s): every replica runs on the
  product in force when it was asked for. A move to another product starts the target's replicas
  there; the old product's ready replicas keep serving until every replica of the new one is
  ready (a rolling update with no pod unavailable, taken as one step), then drain and go. Its
  starting ones are cancelled at once. A controller that names no product runs one fleet on
  `service`, as before.
"""

from __future__ import annotations

import bisect
import heapq
import math
from collections import deque
from dataclasses import dataclass, field
from typing import Literal, Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from tailpilot.api.autoscaling import BatchingConfig, Observation
from tailpilot.api.engine import ServiceTimeModel
from tailpilot.bench.observe import PodWindow, merge_pod_windows, pod_window
from tailpilot.bench.triton_batcher import PayloadBatcher, batch_cap, is_plain
from tailpilot.policy.batch_sizes import BatchCounts, SizeCounts
from tailpilot.policy.signals import PodLatency, TritonCounters

# Event kinds; the number also orders simultaneous events (completions free instances first).
_DONE, _READY, _REBATCH, _ROTATE, _TIMER, _SCRAPE, _TICK, _ROTATION_TICK, _WAKE = range(9)

_STARTING, _SERVING, _DRAINING, _GONE = range(4)

Balancer = Literal["round_robin", "least_pending"]


@dataclass(frozen=True)
class Target:
    """What a controller wants: replicas and batching."""

    replicas: int
    batching: BatchingConfig
    #: The GPU product to serve on (`SimConfig.products`); None: the one in force.
    product: str | None = None


class Controller(Protocol):
    """An autoscaling policy run inside the simulator."""

    @property
    def tick_s(self) -> float:
        """Seconds between two decisions."""
        ...

    def initial(self) -> Target:
        """Fleet at t=0 (replicas start ready)."""
        ...

    def decide(self, view: FleetView) -> Target:
        """Target after looking at the fleet at `view.now_s`."""
        ...


@runtime_checkable
class RotatingController(Controller, Protocol):
    """A controller that also holds backlogged replicas out of the Service's rotation."""

    @property
    def rotation_period_s(self) -> float:
        """Seconds between two rotation checks."""
        ...

    def rotation(self, view: FleetView) -> frozenset[str]:
        """Pods (`FleetView.pod_windows` names) to hold out of the rotation from now on."""
        ...


@dataclass(frozen=True)
class ActivatorModel:
    """The activator in front of a fleet that may scale to zero (`tailpilot.activator`, its defaults).

    A request that finds no serving replica is held (at most `hold_limit` at once; beyond, refused at
    once) and fails if no replica serves within `hold_timeout_s`. The first held request wakes the
    service: `wake_delay_s` later (the annotation's patch and the operator's handler) one replica is
    asked for, whatever the controller's next period says; held requests go to the first replica
    ready. Controllers see the count held (`FleetView.held_requests`, `held_since_s`), as the
    operator reads it from the activator's metrics.
    """

    hold_limit: int = 1000
    hold_timeout_s: float = 300.0
    wake_delay_s: float = 1.0


@dataclass(frozen=True)
class SimConfig:
    """Fleet parameters that do not depend on the policy."""

    service: ServiceTimeModel
    duration_s: float
    startup_s: float
    seed: int = 0
    balancer: Balancer = "round_robin"
    scrape_s: float = 1.0
    reload_s: float = 1.5
    #: Seconds from a rotation decision to the Service's endpoints (the EndpointSlice update).
    rotation_delay_s: float = 1.0
    min_replicas: int = 1
    max_replicas: int = 64
    #: (GPU product, its service time) for controllers that choose a product (`Target.product`).
    products: tuple[tuple[str, ServiceTimeModel], ...] = ()
    #: With a queue delay or preferred sizes below the max batch (`triton_batcher`): the chance
    #: that, when a batch ends, Triton's batcher thread moves queued requests into the waiting
    #: payload before the instance takes it. `make bench-batcher-probe` measured about one half on
    #: this project's machines (docs/benchmarks/batcher-probe.md).
    batcher_wins_race: float = 0.5
    #: Seconds of unscored warm-up at the start of the run: the fleet serves and the controller
    #: decides from 0 s, but the result covers [score_from_s, duration_s) only, its times shifted so
    #: that the scored part starts at 0 (the requests, batches, samples, actions and replica-seconds
    #: of the warm-up are left out; the work it left queued is served within the scored part).
    score_from_s: float = 0.0
    #: Requests at zero serving replicas wait at this activator (None: they fail, as with no activator).
    activator: ActivatorModel | None = None


@dataclass(frozen=True)
class SimResult:
    """Everything a run produced, as arrays (one row per request, batch or sample)."""

    arrival_s: npt.NDArray[np.float64]
    start_s: npt.NDArray[np.float64]
    done_s: npt.NDArray[np.float64]  # inf for failed requests
    batch_start_s: npt.NDArray[np.float64]
    batch_size: npt.NDArray[np.int64]
    sample_s: npt.NDArray[np.float64]
    sample_ready: npt.NDArray[np.int64]
    sample_provisioned: npt.NDArray[np.int64]
    #: (time, old replica target, new replica target) for each change of the replica target.
    actions: list[tuple[float, int, int]]
    #: (time the change was decided, batching) for each change of batching, first entry at t=0.
    batching_changes: list[tuple[float, BatchingConfig]]
    replica_seconds: float
    duration_s: float
    #: Replica-seconds per GPU product ("" for replicas of no named product); they sum to
    #: `replica_seconds`.
    replica_seconds_by_product: dict[str, float] = field(default_factory=dict)
    #: (time, product left, product moved to) for each move between GPU products.
    moves: list[tuple[float, str | None, str]] = field(default_factory=list)
    #: Times the activator woke the fleet from zero (each a cold start).
    wakes_s: list[float] = field(default_factory=list)
    #: Per request, whether it waited at the activator (empty: no activator in the run).
    held: npt.NDArray[np.bool_] = field(default_factory=lambda: np.zeros(0, dtype=np.bool_))

    @property
    def latency_s(self) -> npt.NDArray[np.float64]:
        """Server-side latency per request (inf when it failed)."""
        return self.done_s - self.arrival_s


class _Replica:
    __slots__ = (
        "idx",
        "queue",
        "free",
        "state",
        "requested_at",
        "ended_at",
        "timer_at",
        "executing",
        "product",
        "a_ms",
        "c_ms",
        "batcher",
    )

    def __init__(
        self, idx: int, requested_at: float, instances: int, state: int, product: str | None = None
    ) -> None:
        self.idx = idx
        self.product = product
        # The batch time's intercept and per-item ms on this replica's product (set by the simulation).
        self.a_ms = 0.0
        self.c_ms = 0.0
        self.queue: deque[int] = deque()
        self.free = instances
        self.state = state
        self.requested_at = requested_at
        self.ended_at = math.inf
        self.timer_at = -1.0
        self.executing = 0  # requests in running batches
        # Triton's payloads, for batchings that are not plain (`triton_batcher.is_plain`); its
        # queue is `queue`.
        self.batcher: PayloadBatcher | None = None

    def pending(self) -> int:
        """Requests waiting: in the queue, and in payloads no instance has taken yet."""
        return len(self.queue) + (self.batcher.held if self.batcher is not None else 0)


@dataclass
class _Samples:
    t: list[float] = field(default_factory=list)
    queued: list[int] = field(default_factory=list)
    inflight: list[int] = field(default_factory=list)
    ready: list[int] = field(default_factory=list)
    provisioned: list[int] = field(default_factory=list)
    busy_cum: list[float] = field(default_factory=list)
    capacity_cum: list[float] = field(default_factory=list)


class Simulation:
    """One run of one controller on one arrival sequence."""

    def __init__(
        self, *, arrivals_s: npt.NDArray[np.float64], config: SimConfig, controller: Controller
    ) -> None:
        self._cfg = config
        self._ctl = controller
        self._arr: list[float] = [float(x) for x in np.asarray(arrivals_s, dtype=np.float64)]
        n = len(self._arr)
        self._start: list[float] = [math.inf] * n
        self._done: list[float] = [math.inf] * n
        self._pod: list[int] = [-1] * n
        self._completed: list[int] = []  # request ids in completion order
        self._b_start: list[float] = []
        self._b_size: list[int] = []
        self._exec_done_t: list[float] = []  # batch completions, in time order
        self._exec_done_pod: list[int] = []
        # Each completed batch's size and compute time (integer ns, as Triton counts it), in the
        # order of `_exec_done_pod`: what Triton's statistics extension counts per batch size.
        self._exec_done_size: list[int] = []
        self._exec_done_ns: list[int] = []
        # (time, kind, sequence, replica of a batch, payload): the sequence breaks ties.
        self._heap: list[tuple[float, int, int, _Replica | None, object]] = []
        self._seq = 0
        self._replicas: list[_Replica] = []
        self._serving: list[_Replica] = []
        self._held_out: frozenset[int] = frozenset()  # replica idx out of the rotation
        self._rr = 0
        self._busy_s = 0.0
        self._capacity_s = 0.0
        self._samples = _Samples()
        self._actions: list[tuple[float, int, int]] = []
        self._services = dict(config.products)
        self._moves: list[tuple[float, str | None, str]] = []
        # Ready replicas of the product left by a move, serving until the new product's are ready.
        self._retiring: list[_Replica] = []
        # Each replica's cumulative Triton counters, brought up to date lazily (`_counters_now`):
        # [success, exec count, request, queue and compute durations in us].
        self._cum: dict[int, list[float]] = {}
        self._cum_requests = 0  # requests of `_completed` already counted
        self._cum_batches = 0  # batches of `_exec_done_pod` already counted
        # Each replica's cumulative executions per batch size: size -> [executions, compute ns].
        self._cum_sizes: dict[int, dict[int, list[int]]] = {}
        self._cum_sized = 0  # batches of `_exec_done_size` already counted
        self._rng = np.random.default_rng(config.seed)
        self._jitter: list[float] = []
        self._jitter_i = 0
        # Who wins Triton's race at the end of a batch (`triton_batcher`), drawn apart from the
        # jitter so that plain batchings draw exactly what they drew before.
        self._race_rng = np.random.default_rng([config.seed, 1])
        self._race: list[bool] = []
        self._race_i = 0
        # Requests held at the activator (ids, arrival order) while no replica serves.
        self._held: list[int] = []
        self._ever_held: list[int] = []
        self._wake_pending = False
        self._wakes: list[float] = []
        init = controller.initial()
        self._product = init.product
        self._set_batching(init.batching)
        self._batch_changes: list[tuple[float, BatchingConfig]] = [(0.0, init.batching)]
        self._target = self._clamp(init.replicas)
        for _ in range(self._target):
            self._add_replica(0.0, ready_now=True)
        self.now_s = 0.0

    # ----------------------------------------------------------------- helpers
    def _clamp(self, replicas: int) -> int:
        return max(self._cfg.min_replicas, min(self._cfg.max_replicas, replicas))

    def _push(self, t: float, kind: int, obj: object) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (t, kind, self._seq, None, obj))

    def _refill_jitter(self) -> None:
        cv = self._cfg.service.jitter_cv
        if cv <= 0:
            self._jitter = [1.0] * 4096
        else:
            sigma2 = math.log1p(cv * cv)
            draws = self._rng.lognormal(-sigma2 / 2, math.sqrt(sigma2), 4096)
            self._jitter = [float(x) for x in draws]
        self._jitter_i = 0

    def _service_of(self, product: str | None) -> ServiceTimeModel:
        if product is None:
            return self._cfg.service
        if product not in self._services:
            raise ValueError(f"product {product!r} has no service time in SimConfig.products")
        return self._services[product]

    def _add_replica(self, t: float, *, ready_now: bool) -> None:
        rep = _Replica(len(self._replicas), t, self._batching.instances_per_replica, _STARTING, self._product)
        service = self._service_of(self._product)
        rep.a_ms, rep.c_ms = service.intercept_ms, service.per_item_ms
        self._attach_batcher(rep)
        self._replicas.append(rep)
        if ready_now or self._cfg.startup_s <= 0:
            rep.state = _SERVING
            self._serving.append(rep)
        else:
            self._push(t + self._cfg.startup_s, _READY, rep)

    def _scale_to(self, t: float, target: int) -> None:
        # The product in force only: a move's retiring replicas are not part of the target.
        product = self._product
        live = [r for r in self._replicas if r.state in (_STARTING, _SERVING) and r.product == product]
        if target > len(live):
            for _ in range(target - len(live)):
                self._add_replica(t, ready_now=False)
            return
        excess = len(live) - target
        # Cancel replicas still starting (newest first) before removing serving ones.
        for rep in sorted((r for r in live if r.state == _STARTING), key=lambda r: -r.requested_at):
            if excess == 0:
                return
            rep.state, rep.ended_at = _GONE, t
            excess -= 1
        serving = [r for r in self._serving if r.product == product]
        for rep in sorted(serving, key=lambda r: (r.pending() + r.executing, -r.idx))[:excess]:
            self._drain(rep, t)

    def _drain(self, rep: _Replica, t: float) -> None:
        rep.state, rep.ended_at = _DRAINING, t
        self._serving.remove(rep)
        self._maybe_gone(rep)

    def _move(self, t: float, product: str, target: int) -> None:
        """Move the fleet to `product`: `target` replicas start there, the old ones serve meanwhile."""
        self._moves.append((t, self._product, product))
        self._product = product
        # Moving back: the product's replicas still serving are the fleet again.
        self._retiring = [r for r in self._retiring if r.product != product]
        for rep in self._replicas:
            if rep.product == product or rep.state in (_DRAINING, _GONE) or rep in self._retiring:
                continue
            if rep.state == _STARTING:
                rep.state, rep.ended_at = _GONE, t
            else:
                self._retiring.append(rep)
        self._scale_to(t, target)
        self._retire_if_moved(t)

    def _retire_if_moved(self, t: float) -> None:
        """Once every replica of the product in force is ready, the old product's replicas go."""
        if not self._retiring:
            return
        product = self._product
        if any(r.state == _STARTING and r.product == product for r in self._replicas):
            return
        for rep in self._retiring:
            if rep.state == _SERVING:
                self._drain(rep, t)
        self._retiring = []

    def _maybe_gone(self, rep: _Replica) -> None:
        if rep.state == _DRAINING and rep.executing == 0 and not rep.pending():
            rep.state = _GONE

    def _pick(self) -> _Replica | None:
        serving = self._serving
        if not serving:
            return None
        if self._held_out:
            # A held replica still serves what it holds; new requests go to the others.
            serving = [r for r in serving if r.idx not in self._held_out] or serving
        if self._cfg.balancer == "least_pending":
            return min(serving, key=lambda r: r.pending() + r.executing)
        self._rr += 1
        return serving[self._rr % len(serving)]

    def _set_batching(self, cfg: BatchingConfig) -> None:
        self._batching = cfg
        self._cap = batch_cap(cfg)
        self._plain = is_plain(cfg)

    def _attach_batcher(self, rep: _Replica) -> None:
        """Give `rep` Triton's payload batcher for the batching in force, or take it away (plain)."""
        if self._plain:
            if rep.batcher is not None:
                # Back to the plain rule: requests of payloads no instance took queue again, first.
                held = [r for payload in rep.batcher.waiting for r in payload.requests]
                rep.queue.extendleft(reversed(held))
                rep.batcher = None
            return
        if rep.batcher is None:
            rep.batcher = PayloadBatcher(self._batching, self._arr)
            rep.batcher.queue = rep.queue
        else:
            rep.batcher.reconfigure(self._batching)

    def _dispatch(self, rep: _Replica, t: float) -> None:
        """Start what the batching in force starts now on `rep`'s free instances."""
        if rep.batcher is not None:
            self._start_all(rep, rep.batcher.settle(t, rep.free), t)
            return
        # The plain rule (`triton_batcher.is_plain`): a free instance takes up to the cap.
        q = rep.queue
        cap = self._cap
        while rep.free > 0 and q:
            k = len(q) if len(q) < cap else cap
            self._start_batch(rep, [q.popleft()] if k == 1 else [q.popleft() for _ in range(k)], t)

    def _start_all(self, rep: _Replica, batches: list[list[int]], t: float) -> None:
        """Start the batches the payload batcher handed to instances, and keep its timer."""
        for batch in batches:
            self._start_batch(rep, batch, t)
        assert rep.batcher is not None
        due = rep.batcher.wake_at
        if due != math.inf and rep.timer_at != due:
            rep.timer_at = due
            self._push(due, _TIMER, rep)

    def _start_batch(self, rep: _Replica, batch: list[int], t: float) -> None:
        k = len(batch)
        st = self._start
        for r in batch:
            st[r] = t
        if self._jitter_i >= len(self._jitter):
            self._refill_jitter()
        svc = (rep.a_ms + rep.c_ms * k) * self._jitter[self._jitter_i] / 1000.0
        self._jitter_i += 1
        rep.free -= 1
        rep.executing += k
        self._busy_s += svc
        self._b_start.append(t)
        self._b_size.append(k)
        self._seq += 1
        heapq.heappush(self._heap, (t + svc, _DONE, self._seq, rep, batch))

    def _arrive(self, rep: _Replica, request: int, t: float) -> None:
        if rep.batcher is not None:
            self._start_all(rep, rep.batcher.arrive(t, request, rep.free), t)
            return
        rep.queue.append(request)
        if rep.free > 0:
            self._dispatch(rep, t)

    def _payload_batch_done(self, rep: _Replica, t: float) -> None:
        """A batch ended on a replica with Triton's payload batcher: draw the race, start what follows."""
        assert rep.batcher is not None
        self._start_all(rep, rep.batcher.batch_done(t, rep.free, batcher_first=self._batcher_wins()), t)
        if rep.state == _DRAINING:
            self._maybe_gone(rep)

    def _batcher_wins(self) -> bool:
        if self._race_i >= len(self._race):
            self._race = (self._race_rng.random(4096) < self._cfg.batcher_wins_race).tolist()
            self._race_i = 0
        self._race_i += 1
        return bool(self._race[self._race_i - 1])

    # ------------------------------------------------------------- event loop
    def run(self) -> SimResult:
        """Run to the end of the arrivals and of the work they caused."""
        end = self._cfg.duration_s
        self._push(self._cfg.scrape_s, _SCRAPE, None)
        self._push(self._ctl.tick_s, _TICK, None)
        if isinstance(self._ctl, RotatingController):
            self._push(self._ctl.rotation_period_s, _ROTATION_TICK, None)
        arr, heap, n, i = self._arr, self._heap, len(self._arr), 0
        done, completed = self._done, self._completed
        exec_t, exec_pod = self._exec_done_t, self._exec_done_pod
        exec_size, exec_ns, start = self._exec_done_size, self._exec_done_ns, self._start
        heappop, inf = heapq.heappop, math.inf
        while True:
            next_arrival = arr[i] if i < n else inf
            if heap and heap[0][0] <= next_arrival:
                t, kind, _, rep, obj = heappop(heap)
                self.now_s = t
                if kind == _DONE:
                    # Hot path: a batch finished; record it and refill the freed instance.
                    assert rep is not None and isinstance(obj, list)
                    for r in obj:
                        done[r] = t
                    completed.extend(obj)
                    exec_t.append(t)
                    exec_pod.append(rep.idx)
                    exec_size.append(len(obj))
                    exec_ns.append(round((t - start[obj[0]]) * 1e9))
                    rep.free += 1
                    rep.executing -= len(obj)
                    if rep.batcher is not None:
                        self._payload_batch_done(rep, t)
                    elif rep.queue:
                        self._dispatch(rep, t)
                    elif rep.state == _DRAINING:
                        self._maybe_gone(rep)
                elif t > end and kind in (_SCRAPE, _TICK, _ROTATION_TICK):
                    continue
                else:
                    self._handle(t, kind, obj)
            elif i < n:
                t = next_arrival
                self.now_s = t
                self._route(i, t)
                i += 1
            else:
                break
        return self._result()

    def _handle(self, t: float, kind: int, obj: object) -> None:
        if kind == _TIMER:
            rep = obj
            assert isinstance(rep, _Replica)
            rep.timer_at = -1.0
            if rep.batcher is not None:
                self._start_all(rep, rep.batcher.timer(t, rep.free), t)
        elif kind == _READY:
            rep = obj
            assert isinstance(rep, _Replica)
            if rep.state == _STARTING:
                rep.state = _SERVING
                self._serving.append(rep)
                self._retire_if_moved(t)
                if self._held:
                    self._release_held(t)
        elif kind == _WAKE:
            self._wake(t)
        elif kind == _REBATCH:
            assert isinstance(obj, BatchingConfig)
            self._apply_batching(t, obj)
        elif kind == _SCRAPE:
            self._scrape(t)
            self._push(t + self._cfg.scrape_s, _SCRAPE, None)
        elif kind == _TICK:
            self._tick(t)
            self._push(t + self._ctl.tick_s, _TICK, None)
        elif kind == _ROTATION_TICK:
            assert isinstance(self._ctl, RotatingController)
            held = self._ctl.rotation(FleetView(self, t))
            self._push(t + self._cfg.rotation_delay_s, _ROTATE, frozenset(_replica_index(p) for p in held))
            self._push(t + self._ctl.rotation_period_s, _ROTATION_TICK, None)
        elif kind == _ROTATE:
            assert isinstance(obj, frozenset)
            self._held_out = obj

    def _held_mask(self) -> npt.NDArray[np.bool_]:
        if self._cfg.activator is None:
            return np.zeros(0, dtype=np.bool_)
        mask = np.zeros(len(self._arr), dtype=np.bool_)
        mask[self._ever_held] = True
        return mask

    def _route(self, request: int, t: float) -> None:
        """An arrival goes to a serving replica, else waits at the activator (if any) or fails."""
        target = self._pick()
        if target is not None:
            self._pod[request] = target.idx
            self._arrive(target, request, t)
        elif self._cfg.activator is not None:
            self._hold(request, t, self._cfg.activator)

    # ----------------------------------------------------------------- activator
    def _hold(self, request: int, t: float, activator: ActivatorModel) -> None:
        """Hold a request that found no serving replica (refused when the activator is full)."""
        arr = self._arr
        self._held = [r for r in self._held if arr[r] + activator.hold_timeout_s >= t]
        if len(self._held) >= activator.hold_limit:
            return  # refused: its done time stays inf
        self._held.append(request)
        self._ever_held.append(request)
        starting = any(r.state == _STARTING for r in self._replicas)
        if not self._wake_pending and not starting:
            self._wake_pending = True
            self._push(t + activator.wake_delay_s, _WAKE, None)

    def _wake(self, t: float) -> None:
        """The activator's wake: one replica asked for at once, if none serves or starts."""
        self._wake_pending = False
        if self._serving or any(r.state == _STARTING for r in self._replicas):
            return
        target = max(1, self._cfg.min_replicas)
        self._actions.append((t, self._target, target))
        self._wakes.append(t)
        self._target = target
        self._scale_to(t, target)

    def _release_held(self, t: float) -> None:
        """Forward the held requests that have not timed out to the replicas now serving."""
        activator = self._cfg.activator
        assert activator is not None
        held, self._held = self._held, []
        for r in held:
            if self._arr[r] + activator.hold_timeout_s < t:
                continue  # timed out at the activator: its done time stays inf
            target = self._pick()
            assert target is not None
            self._pod[r] = target.idx
            self._arrive(target, r, t)

    def _apply_batching(self, t: float, cfg: BatchingConfig) -> None:
        delta = cfg.instances_per_replica - self._batching.instances_per_replica
        self._set_batching(cfg)
        for rep in self._replicas:
            if rep.state != _GONE:
                rep.free += delta
                rep.timer_at = -1.0
                self._attach_batcher(rep)
                self._dispatch(rep, t)

    def _scrape(self, t: float) -> None:
        s = self._samples
        live = [r for r in self._replicas if r.state != _GONE]
        s.t.append(t)
        s.queued.append(sum(r.pending() for r in live))
        # The activator's held requests count too, as Knative's activator reports them to the KPA.
        s.inflight.append(sum(r.pending() + r.executing for r in live) + len(self._held))
        s.ready.append(len(self._serving))
        s.provisioned.append(sum(1 for r in live if r.state != _DRAINING))
        self._capacity_s += len(self._serving) * self._batching.instances_per_replica * self._cfg.scrape_s
        s.busy_cum.append(self._busy_s)
        s.capacity_cum.append(self._capacity_s)

    def _tick(self, t: float) -> None:
        want = self._ctl.decide(FleetView(self, t))
        target = self._clamp(want.replicas)
        if want.product is not None and want.product != self._product:
            if target != self._target:
                self._actions.append((t, self._target, target))
            self._target = target
            self._move(t, want.product, target)
        elif target != self._target:
            self._actions.append((t, self._target, target))
            self._target = target
            self._scale_to(t, target)
            self._retire_if_moved(t)
        pending = self._batch_changes[-1][1]
        if want.batching != pending:
            self._batch_changes.append((t, want.batching))
            self._push(t + self._cfg.reload_s, _REBATCH, want.batching)

    def _counters_now(self) -> dict[int, list[float]]:
        """Every replica's cumulative counters over what completed so far (events run in time order)."""
        cum, arr, start, done, pod = self._cum, self._arr, self._start, self._done, self._pod
        completed = self._completed
        for r in completed[self._cum_requests :]:
            c = cum.setdefault(pod[r], [0.0] * 5)
            c[0] += 1
            c[2] += (done[r] - arr[r]) * 1e6
            c[3] += (start[r] - arr[r]) * 1e6
            c[4] += (done[r] - start[r]) * 1e6
        self._cum_requests = len(completed)
        for p in self._exec_done_pod[self._cum_batches :]:
            cum.setdefault(p, [0.0] * 5)[1] += 1
        self._cum_batches = len(self._exec_done_pod)
        return cum

    def _batch_counts_now(self) -> dict[int, dict[int, list[int]]]:
        """Every replica's cumulative [executions, compute ns] per batch size over what completed so far."""
        cum, pods, sizes, times = (
            self._cum_sizes,
            self._exec_done_pod,
            self._exec_done_size,
            self._exec_done_ns,
        )
        for i in range(self._cum_sized, len(sizes)):
            figures = cum.setdefault(pods[i], {}).setdefault(sizes[i], [0, 0])
            figures[0] += 1
            figures[1] += times[i]
        self._cum_sized = len(sizes)
        return cum

    def _result(self) -> SimResult:
        end, begin = self._cfg.duration_s, self._cfg.score_from_s
        by_product: dict[str, float] = {}
        for r in self._replicas:
            key = r.product or ""
            held = max(0.0, min(r.ended_at, end) - max(r.requested_at, begin))
            by_product[key] = by_product.get(key, 0.0) + held
        cost = sum(max(0.0, min(r.ended_at, end) - max(r.requested_at, begin)) for r in self._replicas)
        s = self._samples
        full = SimResult(
            arrival_s=np.asarray(self._arr, dtype=np.float64),
            start_s=np.asarray(self._start, dtype=np.float64),
            done_s=np.asarray(self._done, dtype=np.float64),
            batch_start_s=np.asarray(self._b_start, dtype=np.float64),
            batch_size=np.asarray(self._b_size, dtype=np.int64),
            sample_s=np.asarray(s.t, dtype=np.float64),
            sample_ready=np.asarray(s.ready, dtype=np.int64),
            sample_provisioned=np.asarray(s.provisioned, dtype=np.int64),
            actions=list(self._actions),
            batching_changes=list(self._batch_changes),
            replica_seconds=cost,
            duration_s=end,
            replica_seconds_by_product=by_product,
            moves=list(self._moves),
            wakes_s=list(self._wakes),
            held=self._held_mask(),
        )
        return scored_part(full, begin) if begin > 0 else full


def scored_part(full: SimResult, begin_s: float) -> SimResult:
    """`full` from `begin_s` on, every time shifted by -`begin_s` (its replica-seconds already are).

    The batching in force at `begin_s` becomes the first change, at 0 s.
    """
    keep = full.arrival_s >= begin_s
    batches = full.batch_start_s >= begin_s
    samples = full.sample_s >= begin_s
    before = [cfg for t, cfg in full.batching_changes if t < begin_s]
    after = [(t - begin_s, cfg) for t, cfg in full.batching_changes if t >= begin_s]
    changes = ([(0.0, before[-1])] if before and (not after or after[0][0] > 0) else []) + after
    return SimResult(
        arrival_s=full.arrival_s[keep] - begin_s,
        start_s=full.start_s[keep] - begin_s,
        done_s=full.done_s[keep] - begin_s,
        batch_start_s=full.batch_start_s[batches] - begin_s,
        batch_size=full.batch_size[batches],
        sample_s=full.sample_s[samples] - begin_s,
        sample_ready=full.sample_ready[samples],
        sample_provisioned=full.sample_provisioned[samples],
        actions=[(t - begin_s, old, new) for t, old, new in full.actions if t >= begin_s],
        batching_changes=changes,
        replica_seconds=full.replica_seconds,
        duration_s=full.duration_s - begin_s,
        replica_seconds_by_product=full.replica_seconds_by_product,
        moves=[(t - begin_s, old, new) for t, old, new in full.moves if t >= begin_s],
        wakes_s=[t - begin_s for t in full.wakes_s if t >= begin_s],
        held=full.held[keep] if full.held.size else full.held,
    )


def _pod_name(idx: int) -> str:
    return f"replica-{idx}"


def _replica_index(pod: str) -> int:
    return int(pod.rsplit("-", 1)[1])


class FleetView:
    """What a controller may read at one instant: Prometheus-like signals, nothing else."""

    def __init__(self, sim: Simulation, now_s: float) -> None:
        self._sim = sim
        self.now_s = now_s

    @property
    def ready_replicas(self) -> int:
        """Replicas in the Service's endpoints."""
        return len(self._sim._serving)

    @property
    def target_replicas(self) -> int:
        """Replicas last asked for (ready, starting)."""
        return self._sim._target

    @property
    def batching(self) -> BatchingConfig:
        """Batching last asked for (may still be reloading)."""
        return self._sim._batch_changes[-1][1]

    @property
    def product(self) -> str | None:
        """The GPU product last asked for (None: no controller named one)."""
        return self._sim._product

    @property
    def moving(self) -> bool:
        """Whether a move between products is under way (the old product's replicas still serve)."""
        return bool(self._sim._retiring)

    def _sample_slice(self, window_s: float) -> slice:
        s = self._sim._samples
        k = max(1, round(window_s / self._sim._cfg.scrape_s))
        return slice(max(0, len(s.t) - k), len(s.t))

    def _held_arrivals(self) -> list[float]:
        """Arrival times of the requests waiting at the activator, not yet timed out (none without one)."""
        sim, activator = self._sim, self._sim._cfg.activator
        if activator is None:
            return []
        return [float(sim._arr[r]) for r in sim._held if sim._arr[r] + activator.hold_timeout_s >= self.now_s]

    @property
    def held_requests(self) -> int:
        """Requests waiting at the activator for a replica, not yet timed out (0 without one)."""
        return len(self._held_arrivals())

    @property
    def held_since_s(self) -> float | None:
        """Arrival of the oldest request still held at the activator (None when none is)."""
        return min(self._held_arrivals(), default=None)

    def mean_inflight(self, window_s: float) -> float:
        """Mean total requests queued or executing across the fleet (sampled gauge)."""
        sl = self._sample_slice(window_s)
        vals = self._sim._samples.inflight[sl]
        return sum(vals) / len(vals) if vals else 0.0

    def mean_queued(self, window_s: float) -> float:
        """Mean total of `nv_inference_pending_request_count` across the fleet."""
        sl = self._sample_slice(window_s)
        vals = self._sim._samples.queued[sl]
        return sum(vals) / len(vals) if vals else 0.0

    def utilization(self, window_s: float) -> float:
        """Fraction of the ready instances' time spent executing (a GPU-utilization gauge)."""
        s = self._sim._samples
        if len(s.t) < 2:
            return 0.0
        sl = self._sample_slice(window_s)
        j0 = max(0, sl.start - 1)
        cap = s.capacity_cum[-1] - s.capacity_cum[j0]
        busy = s.busy_cum[-1] - s.busy_cum[j0]
        return min(1.0, busy / cap) if cap > 0 else 0.0

    def pod_windows(self, window_s: float) -> list[PodWindow]:
        """Per-pod Triton metrics over the last `window_s` (counter deltas, summary quantiles)."""
        return self._pod_windows(end_s=self.now_s, window_s=window_s)

    def _pod_windows(self, *, end_s: float, window_s: float) -> list[PodWindow]:
        sim = self._sim
        t0 = end_s - window_s
        comp = sim._completed
        j = bisect.bisect_left(comp, t0, key=sim._done.__getitem__)
        k = bisect.bisect_right(comp, end_s, key=sim._done.__getitem__)
        ids = comp[j:k]
        b = bisect.bisect_left(sim._exec_done_t, t0)
        e = bisect.bisect_right(sim._exec_done_t, end_s)
        live = [r for r in sim._replicas if r.state in (_SERVING, _DRAINING)]
        execs: dict[int, int] = {}
        for p in sim._exec_done_pod[b:e]:
            execs[p] = execs.get(p, 0) + 1
        windows = []
        if ids:
            pods = np.asarray([sim._pod[r] for r in ids], dtype=np.int64)
            arr = np.asarray([sim._arr[r] for r in ids], dtype=np.float64)
            st = np.asarray([sim._start[r] for r in ids], dtype=np.float64)
            dn = np.asarray([sim._done[r] for r in ids], dtype=np.float64)
        for rep in live:
            if ids:
                m = pods == rep.idx
                a_p, s_p, d_p = arr[m], st[m], dn[m]
            else:
                a_p = s_p = d_p = np.empty(0)
            windows.append(
                pod_window(
                    pod=_pod_name(rep.idx),
                    arrival_s=a_p,
                    start_s=s_p,
                    done_s=d_p,
                    exec_count=execs.get(rep.idx, 0),
                    pending=rep.pending(),
                )
            )
        return windows

    def pod_counters(self) -> dict[str, TritonCounters]:
        """What a read of each Ready pod's Triton metrics page gives now: cumulative counters, queue."""
        cum = self._sim._counters_now()
        out = {}
        for rep in self._sim._serving:
            success, execs, request_us, queue_us, compute_us = cum.get(rep.idx, (0.0,) * 5)
            out[_pod_name(rep.idx)] = TritonCounters(
                success=success,
                pending=float(rep.pending()),
                inference_count=success,  # one item per request
                exec_count=execs,
                request_duration_us=request_us,
                queue_duration_us=queue_us,
                compute_duration_us=compute_us,
            )
        return out

    def pod_batches(self) -> dict[str, BatchCounts]:
        """What a read of each Ready pod's Triton statistics gives now: cumulative figures per batch size."""
        cum = self._sim._batch_counts_now()
        return {
            _pod_name(rep.idx): {
                # As the operator's reader converts Triton's integer ns.
                size: SizeCounts(n, ns / 1000.0)
                for size, (n, ns) in cum.get(rep.idx, {}).items()
            }
            for rep in self._sim._serving
        }

    def scraped_latency(self, *, window_s: float, scrape_s: float) -> dict[str, PodLatency]:
        """Each pod's latency summary as Prometheus holds it now.

        Triton's quantiles over `window_s`, as of the last scrape (every `scrape_s`, the service's
        scrape interval).
        """
        scraped_at = math.floor(self.now_s / scrape_s + 1e-9) * scrape_s
        out = {}
        for w in self._pod_windows(end_s=scraped_at, window_s=window_s):
            if w.request_summary_us:
                out[w.pod] = PodLatency.of(w.request_summary_us.items())
        return out

    def observation(self, window_s: float) -> Observation:
        """Service-level observation merged from per-pod metrics, as the controller builds it."""
        return merge_pod_windows(
            self.pod_windows(window_s),
            window_s=window_s,
            now_s=self.now_s,
            ready_replicas=self.ready_replicas,
        )


def simulate(*, arrivals_s: npt.NDArray[np.float64], config: SimConfig, controller: Controller) -> SimResult:
    """Run one controller on one arrival sequence."""
    return Simulation(arrivals_s=arrivals_s, config=config, controller=controller).run()
