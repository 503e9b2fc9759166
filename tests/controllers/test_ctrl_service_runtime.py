"""Each service's runtime: made on first use, forgotten in one call, and the hand-offs it carries."""

from __future__ import annotations

from dataclasses import replace

from tailpilot.api.autoscaling import BatchingConfig
from tailpilot.api.v1alpha1 import InferenceServiceStatus
from tailpilot.controllers.core.status import learned_status
from tailpilot.controllers.signals.service_runtime import ServiceRuntimes
from tailpilot.policy import Learned, PolicyState
from tailpilot.policy.period import PeriodMemory
from tailpilot.policy.surge import SurgeReading

BATCHING = BatchingConfig(max_batch_size=8)
READING = SurgeReading(
    arrival_rate_per_s=30.0, completion_rate_per_s=20.0, span_s=5.0, capacity_per_s=19.1, replicas=1
)


def test_a_runtime_is_made_once_and_forgetting_takes_its_share_of_the_read_budget() -> None:
    runtimes = ServiceRuntimes()
    assert runtimes.find("ns", "a") is None  # a lookup alone keeps nothing
    a, b = runtimes.get("ns", "a"), runtimes.get("ns", "b")
    assert runtimes.get("ns", "a") is a and len(runtimes) == 2
    assert runtimes.count_asked(a, 3) == 3
    assert runtimes.count_asked(b, 4) == 7
    assert runtimes.count_asked(a, 1) == 5  # a service's new read replaces its share
    runtimes.forget_reads("ns", "b")  # its fast loop stopped: the reads go, the service stays
    assert runtimes.find("ns", "b") is b and b.reads.asked == 0
    assert runtimes.count_asked(b, 2) == 3
    assert runtimes.forget("ns", "a") is a
    assert runtimes.find("ns", "a") is None
    assert runtimes.count_asked(b, 2) == 2


def test_a_surge_goes_to_one_decision_and_calls_it_now() -> None:
    runtime = ServiceRuntimes().get("ns", "svc")
    runtime.next_decision_s = 100.0
    runtime.decide_now(surge=READING)
    assert runtime.next_decision_s == 0.0 and runtime.wakeup.is_set()
    assert runtime.take_surge() == READING
    assert runtime.take_surge() is None


def test_the_status_seeds_the_learned_speed_until_a_period_ran_then_the_live_state_is_the_source() -> None:
    runtime = ServiceRuntimes().get("ns", "svc")
    status = InferenceServiceStatus(learned=learned_status(Learned(service_scale=1.5)))
    seeded = runtime.policy_state(status, replicas=2, batching=BATCHING)
    assert seeded.learned.service_scale == 1.5
    assert (seeded.replicas, seeded.batching) == (2, BATCHING)
    live = PolicyState.initial(replicas=1, batching=BATCHING)
    runtime.memory = PeriodMemory(state=replace(live, learned=Learned(service_scale=1.2)))
    state = runtime.policy_state(status, replicas=3, batching=BATCHING)
    assert state.learned.service_scale == 1.2  # not the status' 1.5, which lags the live state
    assert state.replicas == 3  # at the size in force
