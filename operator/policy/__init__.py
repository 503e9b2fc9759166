"""The SLO autoscaling policy: pure, clock-free, shared by the operator and the benchmark simulator.

Public interface::

    from tailpilot.policy import PolicyConfig, PolicyState, decide, PodMetrics, observation_from_pod_metrics

    obs = observation_from_pod_metrics(pods=[PodMetrics(pod="a", request_rate=..., p99_us=...)],
                                       window_s=60, now_s=now)
    decision, state = decide(config=cfg, profile=profile, observation=obs, state=state, now_s=now)

`decide` never reads a clock or the environment; the caller keeps the returned
`PolicyState` and passes it back (its `learned` part, `Learned`, is what outlives the operator
process, on the object's status). See docs/autoscaling.md for the model, the
guardrails, the P99 estimator and the meaning of every reason.
"""

from tailpilot.policy.config import Learned, PolicyConfig, PolicyState, Reason, Timers, WindowMemory
from tailpilot.policy.core import decide
from tailpilot.policy.estimate import PodMetrics, merge_p99_us, observation_from_pod_metrics
from tailpilot.policy.model import BatchShape, capacity_per_s, predict_p99_ms

__all__ = [
    "BatchShape",
    "Learned",
    "PodMetrics",
    "PolicyConfig",
    "PolicyState",
    "Reason",
    "Timers",
    "WindowMemory",
    "capacity_per_s",
    "decide",
    "merge_p99_us",
    "observation_from_pod_metrics",
    "predict_p99_ms",
]
