"""docs/architecture.md's recipe for an autoscaling signal, followed field by field.

A Triton counter reaches the policy through five hands: the pods' reader (`FIELD_OF_METRIC`), the
counters (`TritonCounters`), their rates (`RATE_FIELDS` into `PodMetrics`), the Prometheus fallback
(`RATE_COUNTERS`) and the simulator the benchmark measures with (`FleetView.pod_counters`). A
counter added to one hand and forgotten in another is a signal the operator reads on one path
only, or one the benchmark never exercises; each test here fails on such a counter and names it.
"""

from __future__ import annotations

import dataclasses

from tailpilot.api.autoscaling import BatchingConfig
from tailpilot.bench.engine_profiles import DEFAULT_PROFILE, load_profile
from tailpilot.bench.simulator import FleetView, Target, simulate
from tailpilot.bench.suite import Setup, sim_config, trace_of
from tailpilot.controllers.signals.observe import PENDING_GAUGE, RATE_COUNTERS
from tailpilot.controllers.signals.pod_signals import FIELD_OF_METRIC
from tailpilot.policy.estimate import PodMetrics
from tailpilot.policy.signals import RATE_FIELDS, TritonCounters

COUNTER_FIELDS = {f.name for f in dataclasses.fields(TritonCounters)}
#: Counters the simulator knowingly leaves at zero: it fails no request, and it does not split a
#: batch's compute time into input, infer and output. A new counter joins this set only on purpose.
NOT_SIMULATED = {"failure", "compute_input_duration_us", "compute_output_duration_us"}


def test_every_counter_is_read_from_the_pods_metrics_page() -> None:
    assert set(FIELD_OF_METRIC.values()) == COUNTER_FIELDS
    assert FIELD_OF_METRIC[PENDING_GAUGE] == "pending"


def test_every_cumulative_counter_becomes_a_rate_the_policy_sees() -> None:
    assert set(RATE_FIELDS.values()) == COUNTER_FIELDS - {"pending"}  # the queue is a gauge, not a rate
    pod_metrics_fields = {f.name for f in dataclasses.fields(PodMetrics)}
    assert set(RATE_FIELDS) <= pod_metrics_fields


def test_the_prometheus_fallback_asks_for_the_same_counters_as_the_pods_reader() -> None:
    assert set(RATE_COUNTERS) == set(RATE_FIELDS)
    for rate_field, metric in RATE_COUNTERS.items():
        assert FIELD_OF_METRIC.get(metric) == RATE_FIELDS[rate_field], (rate_field, metric)


class _CounterReader:
    """A fixed fleet that reads every pod's counters at each tick, as the fast loop would."""

    tick_s = 2.0

    def __init__(self, batching: BatchingConfig) -> None:
        self._target = Target(replicas=2, batching=batching)
        self.reads: list[dict[str, TritonCounters]] = []

    def initial(self) -> Target:
        return self._target

    def decide(self, view: FleetView) -> Target:
        self.reads.append(view.pod_counters())
        return self._target


def test_the_simulator_produces_every_counter_the_operator_reads() -> None:
    setup = Setup(profile=load_profile(DEFAULT_PROFILE), slo_ms=880.0, duration_s=120.0, max_replicas=4)
    reader = _CounterReader(BatchingConfig(max_batch_size=8, max_queue_delay_us=2000))
    simulate(
        arrivals_s=trace_of(setup, "T1-poisson").arrivals,
        config=sim_config(setup, "T1-poisson", startup_s=30.0),
        controller=reader,
    )
    last = reader.reads[-1]
    assert last, "the fleet must serve"
    cumulative = COUNTER_FIELDS - {"pending"}
    produced = {name for name in cumulative for pod in last.values() if getattr(pod, name) > 0}
    assert produced == cumulative - NOT_SIMULATED
