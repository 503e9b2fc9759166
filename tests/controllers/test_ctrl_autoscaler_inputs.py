"""The autoscaler's pure parts: the knobs and windows from the spec, and when a status is worth writing."""

from __future__ import annotations

from datetime import UTC, datetime

from tailpilot.api.autoscaling import Observation
from tailpilot.api.v1alpha1 import Condition, InferenceServiceStatus, ObservedStatus
from tailpilot.controllers.autoscale.autoscaler import significant_change, with_unobserved
from tailpilot.policy.from_spec import (
    arrival_lookback_s,
    observation_windows,
    policy_config,
    prometheus_recent_window_s,
)
from tailpilot.policy.signals import READ_PERIOD_S
from tailpilot.policy.surge import SurgeReading, with_surge
from tests.controllers.specs import service
from tests.fakes import UnexpectedKube


def test_from_the_pods_the_recent_window_is_a_control_period_and_arrivals_are_binned_by_reads():
    windows = observation_windows(service().spec, control_period_s=15)
    assert (windows.window_s, windows.recent_window_s) == (60, 15)
    assert (windows.arrival_lookback_s, windows.arrival_bin_s) == (300, READ_PERIOD_S)
    # Reads are kept for the longest window and one bin more.
    assert windows.keep_s == 300 + READ_PERIOD_S
    short = service(
        slo={"p99LatencyMs": 50, "evaluationWindowSeconds": 120}, autoscaling={"absorbBursts": False}
    )
    assert observation_windows(short.spec, control_period_s=15).keep_s == 120 + READ_PERIOD_S


def test_from_prometheus_the_recent_window_is_a_control_period_but_at_least_two_scrapes():
    assert prometheus_recent_window_s(service().spec, control_period_s=15) == 30  # 15 s scrapes: two
    fast = service(monitoring={"scrapeIntervalSeconds": 1})
    assert prometheus_recent_window_s(fast.spec, control_period_s=4) == 4


def test_bursts_are_looked_for_over_the_stabilization_window_unless_switched_off():
    assert arrival_lookback_s(service().spec) == 300
    assert arrival_lookback_s(service(autoscaling={"scaleDownStabilizationSeconds": 120}).spec) == 120
    assert arrival_lookback_s(service(autoscaling={"absorbBursts": False}).spec) is None


def test_policy_config_carries_the_spec_bounds():
    config = policy_config(
        service(autoscaling={"minReplicas": 2, "maxReplicas": 7, "dryRun": True}).spec, control_period_s=10
    )
    assert (config.min_replicas, config.max_replicas, config.dry_run) == (2, 7, True)
    assert (config.p99_target_ms, config.control_period_s) == (50, 10)


def test_a_surge_decision_reads_the_fast_checks_completions_as_the_recent_rate():
    surge = SurgeReading(
        arrival_rate_per_s=30.0, completion_rate_per_s=20.0, span_s=5.0, capacity_per_s=19.1, replicas=1
    )
    seen = Observation(
        at_s=100.0, request_rate=12.0, p99_ms=80.0, recent_request_rate=14.0, recent_window_s=15.0
    )
    used = with_surge(seen, surge)
    assert (used.recent_request_rate, used.recent_window_s) == (20.0, 5.0)
    assert used.model_copy(update={"recent_request_rate": 14.0, "recent_window_s": 15.0}) == seen
    assert with_surge(seen, None) is seen
    # No data from Prometheus: the policy holds; the fast check does not stand in for it.
    missing = Observation(at_s=100.0, request_rate=None, p99_ms=None)
    assert with_surge(missing, surge) is missing


def test_past_the_read_budget_arrivals_are_binned_by_the_longer_period():
    windows = observation_windows(service().spec, control_period_s=15, read_period_s=4.0)
    assert (windows.arrival_bin_s, windows.recent_window_s, windows.keep_s) == (4.0, 15, 304.0)


def _status(message: str, reason: str = "Hold", p99_ms: float = 20.0) -> InferenceServiceStatus:
    condition = Condition(
        type="ScalingActive",
        status="True",
        reason=reason,
        message=message,
        last_transition_time=datetime(2026, 12, 1, tzinfo=UTC),
        observed_generation=1,
    )
    return InferenceServiceStatus(
        conditions=[condition], observed=ObservedStatus(p99_ms=p99_ms, request_rate=40.0)
    )


def test_a_condition_message_with_the_periods_figures_alone_is_no_reason_to_write_the_status():
    before = _status("Hold: 39.8 requests/s fit 2 replicas")
    assert not significant_change(before, _status("Hold: 40.1 requests/s fit 2 replicas"))
    assert significant_change(before, _status("ScaleUp: 80 requests/s", reason="ScaleUp"))
    assert significant_change(before, _status("Hold: 39.8 requests/s fit 2 replicas", p99_ms=23.0))


def test_the_clients_query_runs_once_a_control_period_and_a_failure_never_fails_the_observation():
    import asyncio

    import httpx

    from tailpilot.controllers.autoscale.autoscaler import Autoscaler
    from tailpilot.controllers.core.metrics import OperatorMetrics
    from tailpilot.controllers.signals.prometheus_access import PrometheusAccess
    from tailpilot.controllers.signals.prometheus_client import PrometheusClient

    answers = iter(
        [
            {"status": "error", "errorType": "bad_data", "error": "1:5: parse error: unexpected <EOF>"},
            {"status": "success", "data": {"resultType": "vector", "result": [{"value": [1, "88.5"]}]}},
        ]
    )
    sent: list[str] = []

    def prometheus(request: httpx.Request) -> httpx.Response:
        sent.append(request.url.params["time"])
        return httpx.Response(400 if not sent[1:] else 200, json=next(answers))

    isvc = service(monitoring={"clientLatencyP99Query": "histogram_quantile(0.99, x) * 1000"})
    seen = Observation(at_s=0.0, request_rate=5.0, p99_ms=40.0)

    # The platform turned tenants' queries on (they are off by default).
    access = PrometheusAccess(default_url="http://prom:9090", client_queries=True)

    async def run() -> list[tuple[Observation, str | None]]:
        async with PrometheusClient(access, transport=httpx.MockTransport(prometheus)) as http:
            autoscaler = Autoscaler(
                kube=UnexpectedKube(),  # the clients' query talks to Prometheus only
                http=http,
                metrics=OperatorMetrics(),
                default_prometheus_url="http://prom:9090",
                control_period_s=15.0,
            )
            out = []
            # A period, a surge decision 3 s later, the next period, and the query removed.
            for now in (100.0, 103.0, 115.0):
                out.append(await autoscaler._client_latency(isvc, "http://prom:9090", seen, now))
            plain = service()
            out.append(await autoscaler._client_latency(plain, "http://prom:9090", seen, 130.0))
            return out

    (first, again, later, without) = asyncio.run(run())
    assert sent == ["100.000", "115.000"]  # not again at 103 s: within the control period
    assert first[0].client_p99_ms is None
    assert first[1] is not None and first[1].startswith("Prometheus refused the query (bad_data)")
    assert again == first
    assert later == (seen.model_copy(update={"client_p99_ms": 88.5}), None)
    assert without == (seen, None)


def test_pods_ready_but_absent_from_prometheus_are_counted_as_unobserved():
    seen = Observation(at_s=100.0, request_rate=12.0, p99_ms=80.0, ready_replicas=2)
    assert with_unobserved(seen, 3).pods_unobserved == 1  # one of three Ready pods not scraped
    assert with_unobserved(seen, 2).pods_unobserved == 0
    assert with_unobserved(seen, 1).pods_unobserved == 0  # a pod more than the status knew: not missing
    assert with_unobserved(seen, None).pods_unobserved == 0


def test_the_held_requests_are_read_only_for_a_woken_service_at_min_zero_with_no_ready_replica():
    import asyncio

    from tailpilot.api.v1alpha1 import InferenceService
    from tailpilot.controllers.autoscale.autoscaler import Autoscaler, _Inputs
    from tailpilot.controllers.core.metrics import OperatorMetrics
    from tailpilot.policy.wake import HeldRequests

    asked: list[tuple[str, str]] = []

    class Held:
        async def held(self, namespace: str, name: str) -> int | None:
            asked.append((namespace, name))
            return 12

    def inputs(
        min_replicas: int = 0, wake: str | None = "2026-12-06T10:00:05Z", replicas: int = 1
    ) -> _Inputs:
        isvc = service(autoscaling={"minReplicas": min_replicas})
        if wake is not None:
            body = isvc.model_dump(by_alias=True, exclude_none=True)
            body["metadata"]["annotations"] = {"tailpilot.io/wake-requested-at": wake}
            isvc = InferenceService.model_validate(body)
        status = InferenceServiceStatus(replicas=replicas)
        return _Inputs(body={}, isvc=isvc, status=status, prometheus_url="", profile=None)

    waking = Observation(at_s=0.0, request_rate=None, p99_ms=None, ready_replicas=0)
    serving = waking.model_copy(update={"ready_replicas": 1})

    def autoscaler(*, scale_to_zero: bool = True, held: object | None = None) -> Autoscaler:
        return Autoscaler(
            kube=UnexpectedKube(),
            http=None,  # type: ignore[arg-type]  # nothing asks Prometheus here
            metrics=OperatorMetrics(),
            default_prometheus_url=None,
            scale_to_zero=scale_to_zero,
            activator_held=held if held is not None else Held(),  # type: ignore[arg-type]
        )

    async def run() -> list[HeldRequests | None]:
        return [
            await autoscaler()._held(inputs(), waking),
            await autoscaler()._held(inputs(), serving),  # a replica is ready: the pods' traffic
            await autoscaler()._held(inputs(min_replicas=1), waking),  # never at zero
            await autoscaler()._held(inputs(wake=None), waking),  # no wake to date them from
            await autoscaler(scale_to_zero=False)._held(inputs(), waking),  # no activator configured
            await autoscaler()._held(inputs(replicas=0), waking),  # at zero, not woken yet
        ]

    got = asyncio.run(run())
    since = datetime(2026, 12, 6, 10, 0, 5, tzinfo=UTC).timestamp()
    assert got == [HeldRequests(count=12, since_s=since), None, None, None, None, None]
    assert asked == [("shop", "resnet")]
