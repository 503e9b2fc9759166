"""TailPilot's real policy (`tailpilot.policy`) run unchanged inside the simulator.

Each tick the simulated pods' Triton metrics over the evaluation window become the
policy's `PodMetrics` (rates per second, the pod's summary quantiles), are merged by the
policy's own `observation_from_pod_metrics`, and go to `decide`; the returned state is kept
for the next tick exactly as the operator keeps it on the object.  No SLO alert is
simulated (`alert_active=False`).

If the policy raises, the adapter keeps the previous target (as the operator's timer
would, retrying next period) and records the error with its input, so the report shows
it instead of the benchmark crashing.
"""

from __future__ import annotations

from tailpilot.api.engine import EngineProfile
from tailpilot.bench.observe import PodWindow
from tailpilot.bench.simulator import FleetView, Target
from tailpilot.policy import PodMetrics, PolicyConfig, PolicyState, decide, observation_from_pod_metrics
from tailpilot.policy.core import replica_capacity_per_s
from tailpilot.policy.fast_checks import ARRIVAL_SPAN_S, FAST_CHECK_PERIOD_S
from tailpilot.policy.rotation import RotationConfig, choose_rotation
from tailpilot.policy.surge import SurgeConfig, surge_step


def pod_metrics(
    w: PodWindow, *, window_s: float, now_s: float, recent: PodWindow | None = None, recent_s: float = 0.0
) -> PodMetrics:
    """The policy's per-pod input from a simulated pod window (and the same pod's recent one)."""
    q = w.request_summary_us
    return PodMetrics(
        pod=w.pod,
        request_rate=w.success_count / window_s,
        p99_us=q.get(0.99),
        pending_requests=float(w.pending_request_count),
        queue_duration_us_rate=w.queue_duration_us / window_s,
        compute_duration_us_rate=w.compute_infer_duration_us / window_s,
        inference_count_rate=w.inference_count / window_s,
        exec_count_rate=w.exec_count / window_s,
        failure_rate=0.0,
        last_sample_s=now_s,
        request_duration_us_rate=w.request_duration_us / window_s,
        quantiles_us=tuple((k, v) for k, v in q.items() if k != 0.99),
        recent_request_rate=recent.success_count / recent_s if recent is not None and recent_s > 0 else None,
    )


class TailPilot:
    """Controller adapter around `tailpilot.policy.decide`.

    With `surge`, the adapter also runs the surge check (`tailpilot.policy.surge.surge_step`, as the
    operator's fast check does) every `surge.period_s` between decisions, on the arrivals of the
    last `surge.span_s`, and decides at once when it fires, with that span as the recent window (as
    the operator does with spec.autoscaling.surgeResponse); the next regular decision is then a
    control period later.
    """

    def __init__(
        self,
        *,
        profile: EngineProfile,
        config: PolicyConfig,
        initial: Target,
        window_s: float = 60.0,
        surge: SurgeConfig | None = None,
    ) -> None:
        self._profile, self._config, self._window_s = profile, config, window_s
        self._initial = initial
        self._state = PolicyState.initial(replicas=initial.replicas, batching=initial.batching)
        self._surge = surge
        self.tick_s = config.control_period_s if surge is None else surge.period_s
        self._next_decision_s = config.control_period_s
        self._over_in_a_row = 0
        self.surge_decisions = 0
        self.reasons: list[str] = []
        self.errors: list[str] = []
        self._last = initial

    def initial(self) -> Target:
        return self._initial

    def decide(self, view: FleetView) -> Target:
        period = self._config.control_period_s
        if self._surge is None or view.now_s + 1e-9 >= self._next_decision_s:
            return self._decide(view, recent_s=period)
        span = self._surge.span_s
        check = surge_step(
            self._surge,
            over_in_a_row=self._over_in_a_row,
            arrival_rate_per_s=view.arrival_rate(span),
            completion_rate_per_s=sum(w.success_count for w in view.pod_windows(span)) / span,
            capacity_per_s=replica_capacity_per_s(self._profile, self._state),
            replicas=view.target_replicas,
        )
        self._over_in_a_row = check.over_in_a_row
        if check.reading is None:
            return self._last
        self.surge_decisions += 1
        # The reading's completions over its span are the decision's recent rate, as in the operator.
        return self._decide(view, recent_s=check.reading.span_s)

    def _decide(self, view: FleetView, *, recent_s: float) -> Target:
        """One decision; `recent_s` is the operator's recent window (a control period, or the surge span)."""
        now = view.now_s
        self._next_decision_s = now + self._config.control_period_s
        recent = {w.pod: w for w in view.pod_windows(recent_s)}
        pods = [
            pod_metrics(w, window_s=self._window_s, now_s=now, recent=recent.get(w.pod), recent_s=recent_s)
            for w in view.pod_windows(self._window_s)
        ]
        try:
            counts, bin_s = view.arrival_counts(self._config.scale_down_stabilization_s)
            obs = observation_from_pod_metrics(
                pods=pods,
                window_s=self._window_s,
                now_s=now,
                recent_window_s=recent_s,
                arrival_counts=counts,
                arrival_bin_s=bin_s,
            )
            decision, self._state = decide(
                config=self._config, profile=self._profile, observation=obs, state=self._state, now_s=now
            )
        except (ArithmeticError, ValueError) as exc:
            self.errors.append(f"t={now:.0f}s {type(exc).__name__}: {exc}; pods={pods!r}")
            return self._last
        self.reasons.append(decision.reason)
        self._last = Target(decision.replicas, decision.batching)
        return self._last


class RotatingTailPilot(TailPilot):
    """The adapter plus the rotation rule (`tailpilot.policy.rotation`), checked every `rotation_period_s`.

    The rule reads what a check of the pods' Triton metrics gives: each ready replica's pending
    queue, and the arrivals (completions plus queue growth) over the last `ARRIVAL_SPAN_S` (the
    operator's fast-check span).
    """

    def __init__(self, *, rotation_period_s: float = FAST_CHECK_PERIOD_S, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.rotation_period_s = rotation_period_s
        self._rotation_config = RotationConfig(p99_target_ms=self._config.p99_target_ms)
        self._held: frozenset[str] = frozenset()

    def rotation(self, view: FleetView) -> frozenset[str]:
        self._held = choose_rotation(
            config=self._rotation_config,
            pending_by_replica=view.pending_by_replica(),
            held_out=self._held,
            rate_per_s=view.arrival_rate(ARRIVAL_SPAN_S),
            capacity_per_s=replica_capacity_per_s(self._profile, self._state),
        ).held_out
        return self._held
