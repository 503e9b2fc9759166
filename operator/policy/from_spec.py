"""The policy's knobs and observation windows, from an InferenceService's spec (pure).

One source for the operator and the benchmark: the benchmark builds a spec with the API's defaults
(only the SLO target and the replica bounds set, as a user's manifest would) and calls these, so
every row it prints runs the policy as a deployed operator would.
"""

from __future__ import annotations

from tailpilot.api.v1alpha1 import InferenceServiceSpec
from tailpilot.policy.config import PolicyConfig
from tailpilot.policy.signals import READ_PERIOD_S, ObservationWindows


def policy_config(spec: InferenceServiceSpec, *, control_period_s: float) -> PolicyConfig:
    """The policy's bounds and knobs."""
    fixed = spec.batching.mode.value == "fixed"
    return PolicyConfig(
        p99_target_ms=spec.slo.p99_latency_ms,
        min_replicas=spec.autoscaling.min_replicas,
        max_replicas=spec.autoscaling.max_replicas,
        batching_mode="fixed" if fixed else "auto",
        max_batch_size_cap=spec.batching.max_batch_size,
        fixed_batching=spec.batching.to_config() if fixed else None,
        max_queue_depth=float(spec.slo.max_queue_depth) if spec.slo.max_queue_depth else None,
        scale_down_stabilization_s=float(spec.autoscaling.scale_down_stabilization_seconds),
        scale_up_stabilization_s=float(spec.autoscaling.scale_up_stabilization_seconds),
        max_scale_up_step=spec.autoscaling.max_scale_up_step,
        control_period_s=control_period_s,
        dry_run=spec.autoscaling.dry_run,
        objective=spec.slo.objective_percent / 100.0,
        compliance_period_s=spec.slo.compliance_period_hours * 3600.0,
        scale_to_zero_idle_s=float(spec.autoscaling.idle_before_zero_seconds),
    )


def arrival_lookback_s(spec: InferenceServiceSpec) -> float | None:
    """How far back the arrival curve looks for bursts (None: `spec.autoscaling.absorbBursts` is false).

    As long as a scale-down is held back by the stabilization window: burst capacity goes the way a
    stabilized recommendation does.
    """
    autoscaling = spec.autoscaling
    return float(autoscaling.scale_down_stabilization_seconds) if autoscaling.absorb_bursts else None


def observation_windows(
    spec: InferenceServiceSpec, *, control_period_s: float, read_period_s: float = READ_PERIOD_S
) -> ObservationWindows:
    """The windows the pods' reads are turned into an Observation over.

    The recent rate is one control period: what changed since the last decision. Arrivals are binned
    by the read period in force: a burst of a few seconds stays a burst, and a bin shorter than the
    period would read as empty bins and double ones.
    """
    return ObservationWindows(
        window_s=float(spec.slo.evaluation_window_seconds),
        recent_window_s=max(control_period_s, read_period_s),
        arrival_lookback_s=arrival_lookback_s(spec),
        arrival_bin_s=read_period_s,
    )


def prometheus_recent_window_s(spec: InferenceServiceSpec, *, control_period_s: float) -> float:
    """The recent-rate window when the rates come from Prometheus (pods unreadable).

    One control period, but at least two scrapes (`rate` needs two samples).
    """
    return max(control_period_s, 2.0 * spec.monitoring.scrape_interval_seconds)
