"""TailPilot in the simulator: the operator's own observation and decision code, at its defaults.

The adapter does what a deployed operator does for one service, through the same functions:

- every `READ_PERIOD_S` it reads the Ready pods' cumulative Triton counters
  (`FleetView.pod_counters`, what `tailpilot.controllers.signals.pod_signals` parses from each pod's
  metrics page) into a `ReadHistory`;
- every control period (the operator's default, `DEFAULT_CONTROL_PERIOD_S`) it builds
  the Observation with `tailpilot.policy.signals.observation_from_reads`, taking each pod's latency
  summary as Prometheus holds it (`FleetView.scraped_latency`: Triton's quantiles as of the last
  scrape, at the spec's default scrape interval), and runs the operator's whole control period,
  `tailpilot.policy.period.run_period` (the online service-time fit, `decide`, the product choice
  where products are given, the plan), then executes the plan on the simulated fleet;
- the policy's knobs and windows come from `tailpilot.policy.from_spec` applied to a spec with the
  API's defaults, only the SLO target and the replica bounds set (as a user's manifest would).

Opt-in fields of the spec run their fast rules between decisions on the same reads: surgeResponse
(`tailpilot.policy.surge.surge_step`; a surge decides at once with `with_surge`, as the operator
does) and backlogRotation (`RotatingTailPilot`). No SLO alert is simulated (`alert_active=False`).

If the policy raises, the adapter keeps the previous target (as the operator's loop would, retrying
next period) and records the error with its input, so the report shows it instead of the
benchmark crashing.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from tailpilot.api.autoscaling import Observation
from tailpilot.api.engine import EngineProfile
from tailpilot.api.v1alpha1 import InferenceServiceSpec
from tailpilot.bench.simulator import FleetView, Target
from tailpilot.controllers.core.settings import DEFAULT_CONTROL_PERIOD_S
from tailpilot.policy import PolicyConfig, PolicyState
from tailpilot.policy.core import replica_capacity_per_s
from tailpilot.policy.from_spec import observation_windows, policy_config
from tailpilot.policy.period import (
    PeriodInput,
    PeriodMemory,
    PeriodPlan,
    ProductContext,
    ServedEngine,
    run_period,
)
from tailpilot.policy.rotation import RotationConfig, choose_rotation
from tailpilot.policy.signals import (
    ARRIVAL_SPAN_S,
    READ_PERIOD_S,
    PodRead,
    ReadHistory,
    arrival_rate_per_s,
    batch_stats_due,
    completion_rate_per_s,
    observation_from_reads,
)
from tailpilot.policy.surge import SurgeConfig, SurgeReading, surge_step
from tailpilot.policy.wake import HeldRequests, reads_held

#: The operator's control period when nobody sets --control-period-seconds.
CONTROL_PERIOD_S = DEFAULT_CONTROL_PERIOD_S


def default_spec(
    *, p99_target_ms: float, max_replicas: int, objective_percent: float | None = None, **autoscaling: Any
) -> InferenceServiceSpec:
    """A service's spec with the API's defaults: the SLO target and replica bounds set, opt-ins as given.

    `objective_percent`: the attainment objective, where a run sets one (None: the API's default).
    """
    slo: dict[str, Any] = {"p99LatencyMs": p99_target_ms}
    if objective_percent is not None:
        slo["objectivePercent"] = objective_percent
    return InferenceServiceSpec.model_validate(
        {
            "model": {"uri": "pvc://models/model.onnx"},
            "slo": slo,
            "autoscaling": {"minReplicas": 1, "maxReplicas": max_replicas, **autoscaling},
        }
    )


class TailPilot:
    """The operator's observation and control period (`run_period`) for one simulated service."""

    def __init__(
        self,
        *,
        profile: EngineProfile,
        spec: InferenceServiceSpec,
        initial: Target,
        control_period_s: float = CONTROL_PERIOD_S,
    ) -> None:
        self._profile, self._spec = profile, spec
        self._config = policy_config(spec, control_period_s=control_period_s)
        self._windows = observation_windows(spec, control_period_s=control_period_s)
        self._history = ReadHistory(keep_s=self._windows.keep_s)
        self._scrape_s = float(spec.monitoring.scrape_interval_seconds)
        self._initial = initial
        #: What the periods hand on; before the first, the policy's state starts from the initial size.
        self._memory = PeriodMemory()
        self._initial_state = PolicyState.initial(replicas=initial.replicas, batching=initial.batching)
        self._surge = SurgeConfig() if spec.autoscaling.surge_checks() else None
        self.tick_s = READ_PERIOD_S
        self._stats_at: float | None = None
        self._next_decision_s = control_period_s
        self._over_in_a_row = 0
        self.surge_decisions = 0
        self.reasons: list[str] = []
        #: Each decision's observation, as the operator's autoscaler would have built it.
        self.observations: list[Observation] = []
        self.errors: list[str] = []
        #: (time, the learned `service_scale` after the decision made then), from (0, its start value):
        #: how the online correction of the profile's speed moves (`tailpilot.bench.metrics.settle_time`).
        self.service_scales: list[tuple[float, float]] = [(0.0, self.state.learned.service_scale)]
        #: The same for the learned per-item `slope_scale`.
        self.slope_scales: list[tuple[float, float]] = [(0.0, self.state.learned.slope_scale)]
        self._last = initial

    def initial(self) -> Target:
        return self._initial

    @property
    def reads(self) -> ReadHistory:
        """The pods' reads so far (kept for the longest window)."""
        return self._history

    @property
    def config(self) -> PolicyConfig:
        """The policy's knobs, from the spec."""
        return self._config

    @property
    def state(self) -> PolicyState:
        """What the policy remembers now (what the operator keeps on the object's status)."""
        return self._memory.state or self._initial_state

    def products(self, view: FleetView) -> ProductContext | None:
        """The GPU products the service may move between; None: one product."""
        return None

    def decide(self, view: FleetView) -> Target:
        # Every read has the metrics pages; every `BATCH_STATS_PERIOD_S` one also has the statistics
        # (executions and compute time per batch size), as the operator's reader asks them.
        stats = batch_stats_due(now_s=view.now_s, last_s=self._stats_at, read_period_s=self.tick_s)
        if stats:
            self._stats_at = view.now_s
        batches = view.pod_batches() if stats else None
        self._history.add(PodRead.sampled(view.now_s, view.pod_counters(), batches=batches))
        if view.now_s + 1e-9 >= self._next_decision_s:
            # Due every control period, as the operator's loop is; decided at the first read at or
            # after it (a read period does not divide a control period).
            self._next_decision_s += self._config.control_period_s
            return self._decide(view, surge=None)
        if self._surge is None:
            return self._between_periods(view)
        reads = self._history.reads
        check = surge_step(
            self._surge,
            over_in_a_row=self._over_in_a_row,
            arrival_rate_per_s=arrival_rate_per_s(reads, span_s=self._surge.span_s),
            completion_rate_per_s=completion_rate_per_s(reads, span_s=self._surge.span_s),
            capacity_per_s=replica_capacity_per_s(self._profile, self.state),
            replicas=view.target_replicas,
        )
        self._over_in_a_row = check.over_in_a_row
        if check.reading is None:
            return self._between_periods(view)
        self.surge_decisions += 1
        # The operator's loop counts the next period from a surge decision.
        self._next_decision_s = view.now_s + self._config.control_period_s
        return self._decide(view, surge=check.reading)

    def _between_periods(self, view: FleetView) -> Target:
        """No decision: the fleet keeps its size (which the activator's wake may have set), and batching."""
        return replace(self._last, replicas=view.target_replicas)

    def _decide(self, view: FleetView, *, surge: SurgeReading | None) -> Target:
        """One control period, as the operator's autoscaler runs it (a surge: at once, with its reading)."""
        now = view.now_s
        latency = view.scraped_latency(window_s=self._windows.window_s, scrape_s=self._scrape_s)
        try:
            obs = observation_from_reads(
                self._history.reads, windows=self._windows, now_s=now, latency=latency
            )
            self.observations.append(obs)
            plan = run_period(self.period_input(view, obs, surge=surge))
        except (ArithmeticError, ValueError) as exc:
            self.errors.append(f"t={now:.0f}s {type(exc).__name__}: {exc}; reads={len(self._history)}")
            return self._between_periods(view)
        return self.execute(view, plan)

    def period_input(
        self, view: FleetView, observation: Observation, *, surge: SurgeReading | None
    ) -> PeriodInput:
        """What the operator's autoscaler gives `run_period` for this service, from the simulated fleet."""
        return PeriodInput(
            config=self._config,
            profile=self._profile,
            engine=ServedEngine(
                key=self._profile.engine_key,
                backend=self._profile.backend,
                max_batch_size=self._spec.batching.max_batch_size,
            ),
            observation=observation,
            surge=surge,
            state=self.state.with_actual(replicas=view.target_replicas, batching=view.batching),
            memory=self._memory,
            products=self.products(view),
            replicas=view.target_replicas,
            batching=view.batching,
            now_s=view.now_s,
            held=held_requests(view),
        )

    def execute(self, view: FleetView, plan: PeriodPlan) -> Target:
        """The plan on the simulated fleet: its batching and replicas are the next target."""
        decision, decided = plan.decision, plan.decided
        assert decision is not None and decided is not None  # the simulated engine has a profile
        self._memory = plan.memory
        self.reasons.append(decision.reason)
        self.service_scales.append((view.now_s, decided.learned.service_scale))
        self.slope_scales.append((view.now_s, decided.learned.slope_scale))
        self._last = Target(
            plan.replicas if plan.replicas is not None else view.target_replicas,
            plan.batching if plan.batching is not None else view.batching,
        )
        return self._last


def held_requests(view: FleetView) -> HeldRequests | None:
    """The activator's held requests, as the operator reads them: woken, and no replica ready yet."""
    since = view.held_since_s
    if since is None or view.held_requests == 0:
        return None  # not woken, or nothing held
    if not reads_held(woken=True, ready_replicas=view.ready_replicas, replicas=view.target_replicas):
        return None
    return HeldRequests(count=view.held_requests, since_s=since)


class RotatingTailPilot(TailPilot):
    """The adapter plus the rotation rule (`tailpilot.policy.rotation`), checked every read period.

    The rule reads what the operator's fast loop gives it: each Ready pod's pending queue in the
    newest read, and the arrivals (completions plus queue growth) over the last `ARRIVAL_SPAN_S`.
    """

    rotation_period_s = READ_PERIOD_S

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._rotation_config = RotationConfig(p99_target_ms=self._config.p99_target_ms)
        self._held: frozenset[str] = frozenset()

    def rotation(self, view: FleetView) -> frozenset[str]:
        newest = self._history.newest
        pending = {pod: counters.pending for pod, counters in newest.pods.items()} if newest else {}
        self._held = choose_rotation(
            config=self._rotation_config,
            pending_by_replica=pending,
            held_out=self._held,
            rate_per_s=arrival_rate_per_s(self._history.reads, span_s=ARRIVAL_SPAN_S),
            capacity_per_s=replica_capacity_per_s(self._profile, self.state),
        ).held_out
        return self._held
