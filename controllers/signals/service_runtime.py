"""Each served InferenceService's memory in the operator, in one object per service.

What the service's loop (`handlers.ServiceLoops`), its fast loop (`fast_checks.FastChecker` and
`pod_signals.PodSignals`) and its decisions (`autoscaler.Autoscaler`) keep between their passes
lives on one `ServiceRuntime`: the loop's tasks and timers, the pods' reads, the surge the fast loop
hands to the decision it calls, and the policy's memory. `ServiceRuntimes` makes a service's runtime
on first use and forgets it in one call, so a deleted service leaves nothing behind in any of them.

Two hand-offs go through the runtime, each one typed field written by one side and read by the other:
- the pods' reads (`ServiceRuntime.reads`): written by the fast loop every read period, read by the
  decision's Observation and by the fast rules;
- a surge (`ServiceRuntime.decide_now` / `take_surge`): the fast loop's reading, taken by the
  decision it calls.

The learned speed has one source, the live policy state the last period left
(`ServiceRuntime.policy_state`); the object's status only seeds it until a first period has run in
this process (a new service, or an operator restarted).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TypeVar

from tailpilot.api.autoscaling import BatchingConfig
from tailpilot.api.v1alpha1 import InferenceServiceStatus
from tailpilot.controllers.core.status import restore_learned, restored_memory
from tailpilot.controllers.signals.observe import ClientLatency
from tailpilot.policy import PolicyState
from tailpilot.policy.period import PeriodMemory
from tailpilot.policy.signals import ReadHistory
from tailpilot.policy.surge import SurgeReading

#: A service: (namespace, name).
ServiceKey = tuple[str, str]

_T = TypeVar("_T")


@dataclass
class PodReads:
    """What the fast loop keeps of a service's pods' metrics reads (`pod_signals.PodSignals`)."""

    #: The reads within the observation windows; None before the first.
    history: ReadHistory | None = None
    #: Pods the last read asked for and could not read (logged when that changes, not every period).
    unreadable: frozenset[str] = frozenset()
    #: Pods the last read asked for: this service's share of the global read budget.
    asked: int = 0
    #: When the pods' statistics were last asked for.
    stats_at_s: float | None = None


@dataclass(frozen=True)
class ClientAnswer:
    """The last answer of the service's clients' P99 query, reused for most of a control period."""

    query: str
    at_s: float
    answer: ClientLatency


@dataclass(frozen=True)
class PodsAtBatching:
    """The pod incarnations read, or made, to run `batching` (each new one is checked once)."""

    batching: BatchingConfig
    incarnations: frozenset[str] = frozenset()


@dataclass(eq=False)
class ServiceRuntime:
    """One service's memory in this process: its loop, its fast loop, its decisions, their hand-offs."""

    namespace: str
    name: str
    # The service's loop (`handlers.ServiceLoops`).
    #: The UID of the service, as its last watch event said (alerts must name it).
    uid: str = ""
    #: The loop that reconciles, decides and analyses; None: not served (never started, or stopped).
    task: asyncio.Task[None] | None = None
    #: Set to make the loop pass now (an event of the service or its children, a decision called).
    wakeup: asyncio.Event = field(default_factory=asyncio.Event)
    #: The fast loop (pod reads, then the fast rules), while the last reconcile asks for it.
    fast_task: asyncio.Task[None] | None = None
    #: When the next decision is due (monotonic seconds; 0: at the next pass).
    next_decision_s: float = 0.0
    #: When the canary analysis is next due, while a canary is analysed (None: none is).
    canary_due_s: float | None = None
    # The fast loop (`pod_signals.PodSignals`, `fast_checks.FastChecker`).
    reads: PodReads = field(default_factory=PodReads)
    #: Fast checks in a row whose arrivals exceeded the capacity of the replicas asked for.
    over_in_a_row: int = 0
    # The decisions (`autoscaler.Autoscaler`).
    #: What the last control period handed the next (`tailpilot.policy.period`); None: none ran yet.
    memory: PeriodMemory | None = None
    client_answer: ClientAnswer | None = None
    #: The pods known to run the batching in force (`pod_batching.PodBatching.keep_at`).
    at_batching: PodsAtBatching | None = None
    #: A surge the fast loop saw, for the decision it called.
    _surge: SurgeReading | None = None
    #: What the layers above the jobs keep of the service (its firing alerts), one value per type:
    #: this module sits below them and cannot name their types.
    _attached: dict[type, object] = field(default_factory=dict)

    @property
    def key(self) -> ServiceKey:
        """(namespace, name)."""
        return (self.namespace, self.name)

    def wake(self) -> None:
        """Make the service's loop pass now."""
        self.wakeup.set()

    def decide_now(self, surge: SurgeReading | None = None) -> None:
        """Make the next pass decide at once (an alert, a surge); a surge's reading goes to that decision."""
        if surge is not None:
            self._surge = surge
        self.next_decision_s = 0.0
        self.wake()

    def take_surge(self) -> SurgeReading | None:
        """The surge the fast loop handed on, once: the decision that takes it consumes it."""
        surge, self._surge = self._surge, None
        return surge

    def period_memory(self, status: InferenceServiceStatus) -> PeriodMemory:
        """What the next period starts from: this process's memory, else what the status kept."""
        return self.memory or restored_memory(status)

    def policy_state(
        self, status: InferenceServiceStatus, *, replicas: int, batching: BatchingConfig
    ) -> PolicyState:
        """The live policy state (what was learned) at the size in force.

        The status seeds it until a period has run in this process (a new service, a restart).
        """
        live = self.memory.state if self.memory is not None else None
        start = PolicyState.initial(replicas=replicas, batching=batching)
        state = live or restore_learned(start, status.learned)
        return state.with_actual(replicas=replicas, batching=batching)

    def attached(self, kind: type[_T]) -> _T | None:
        """The value of `kind` a layer above attached to the service, if any."""
        found = self._attached.get(kind)
        return found if isinstance(found, kind) else None

    def attach(self, value: _T) -> _T:
        """Keep `value` with the service (in place of another of its type) until it is forgotten."""
        self._attached[type(value)] = value
        return value


class ServiceRuntimes:
    """Every service's runtime: made on first use, forgotten in one call.

    Also the sum of the pods every service's last read asked for (the read budget's figure): a
    forgotten service's share leaves it with the service.
    """

    def __init__(self) -> None:
        """No service yet."""
        self._runtimes: dict[ServiceKey, ServiceRuntime] = {}
        self._asked_total = 0

    def get(self, namespace: str, name: str) -> ServiceRuntime:
        """The service's runtime, made now if it has none."""
        runtime = self._runtimes.get((namespace, name))
        if runtime is None:
            runtime = self._runtimes[(namespace, name)] = ServiceRuntime(namespace, name)
        return runtime

    def find(self, namespace: str, name: str) -> ServiceRuntime | None:
        """The service's runtime, or None: never made one for a name nobody serves."""
        return self._runtimes.get((namespace, name))

    def forget(self, namespace: str, name: str) -> ServiceRuntime | None:
        """Drop everything kept of a service (deleted); the runtime it had, for its tasks to be cancelled."""
        runtime = self._runtimes.pop((namespace, name), None)
        if runtime is not None:
            self._asked_total -= runtime.reads.asked
        return runtime

    def forget_reads(self, namespace: str, name: str) -> None:
        """Drop what the fast loop kept of a service (its reads, its surge count): it no longer runs."""
        runtime = self._runtimes.get((namespace, name))
        if runtime is not None:
            self._asked_total -= runtime.reads.asked
            runtime.reads = PodReads()
            runtime.over_in_a_row = 0

    def count_asked(self, runtime: ServiceRuntime, pods: int) -> int:
        """Record that the service's read asks for `pods` pods; return what all services' reads ask for."""
        self._asked_total += pods - runtime.reads.asked
        runtime.reads.asked = pods
        return self._asked_total

    def __iter__(self) -> Iterator[ServiceRuntime]:
        """Every service's runtime, oldest first."""
        return iter(list(self._runtimes.values()))

    def __len__(self) -> int:
        """How many services have a runtime."""
        return len(self._runtimes)
