"""A canary's lifecycle on the status (pure): start, accept, roll back, follow the Deployments, stop."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from tailpilot.api import constants as c
from tailpilot.api.engine import ProfileSummary
from tailpilot.api.v1alpha1 import (
    CanaryStatus,
    EngineStatus,
    InferenceService,
    InferenceServiceStatus,
    ProfileStatus,
    ServiceTimeStatus,
)
from tailpilot.controllers.core.events import EventRecord
from tailpilot.controllers.rollout.canary_analysis import track_reading, track_status
from tailpilot.controllers.rollout.canary_rollout import (
    canary_applies,
    canary_plan,
    canary_step,
    drop_superseded_canary,
    follow_canary,
)
from tailpilot.policy import PodMetrics
from tests.controllers.specs import service as make_service

NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)
SERVING = EngineStatus(key="1" * 32, request_key="r1", triton_backend="onnxruntime")
NEW = EngineStatus(key="2" * 32, request_key="r2", triton_backend="onnxruntime")


def canary_service(**rollout: Any) -> InferenceService:
    return make_service(rollout={"strategy": "canary", **rollout})


def serving_status(**update: Any) -> InferenceServiceStatus:
    return InferenceServiceStatus(engine=SERVING, replicas=4).model_copy(update=update)


def with_canary(phase: str, **update: Any) -> InferenceServiceStatus:
    canary = CanaryStatus(engine=NEW, phase=phase, replicas=1, started_at=NOW, **update)  # type: ignore[arg-type]
    return serving_status(canary=canary)


def deployment(*, ready: int, updated: int, stalled: bool = False) -> dict[str, Any]:
    conditions = (
        [
            {
                "type": "Progressing",
                "status": "False",
                "reason": "ProgressDeadlineExceeded",
                "message": "too slow",
            }
        ]
        if stalled
        else []
    )
    return {
        "metadata": {"generation": 2},
        "status": {
            "observedGeneration": 2,
            "readyReplicas": ready,
            "updatedReplicas": updated,
            "conditions": conditions,
        },
    }


def test_only_strategy_canary_with_an_engine_serving_on_the_same_hardware_goes_through_a_canary() -> None:
    status = serving_status()
    assert canary_applies(canary_service(), status, NEW, None)
    assert not canary_applies(make_service(), status, NEW, None)  # strategy rolling (the default)
    assert not canary_applies(canary_service(), InferenceServiceStatus(), NEW, None)  # first engine
    assert not canary_applies(canary_service(), status, SERVING, None)  # the engine serving
    profile = ProfileStatus(
        hardware="NVIDIA-L4", service_time=ServiceTimeStatus(intercept_ms=1, per_item_ms=1)
    )
    summary = ProfileSummary.model_validate(
        {"hardware": "NVIDIA-H100-80GB-HBM3", "serviceTime": {"interceptMs": 1, "perItemMs": 1}, "points": []}
    )
    # A move to another GPU product is judged by its cost, not side by side.
    assert not canary_applies(canary_service(), serving_status(profile=profile), NEW, summary)


def test_a_new_engine_starts_its_canary_with_replicas_for_the_traffic_share() -> None:
    step = canary_step(
        canary_service(canary={"trafficPercent": 20}),
        serving_status(),
        NEW,
        stable_replicas=8,
        accepted=False,
        now=NOW,
    )
    canary = step.status.canary
    assert canary is not None and (canary.phase, canary.replicas, canary.engine.key) == (
        "Starting",
        2,
        NEW.key,
    )
    assert canary.started_at == NOW
    assert step.engine_ready is not None and step.engine_ready.reason == c.REASON_CANARY_ANALYSIS
    assert (step.blocked.status, step.blocked.reason) == (c.STATUS_FALSE, c.REASON_CANARY_ANALYSIS)
    assert [e.reason for e in step.events] == [c.EVENT_CANARY_STARTED]
    assert "about 20% of the traffic" in step.events[0].message
    # The next pass: the same canary, no new Event; its replicas follow the stable count.
    again = canary_step(canary_service(), step.status, NEW, stable_replicas=12, accepted=False, now=NOW)
    assert again.events == [] and again.status.canary is not None and again.status.canary.replicas == 3
    assert canary_plan(again.status) is not None and canary_plan(again.status).replicas == 3  # type: ignore[union-attr]


def test_a_rolled_back_canary_holds_the_engine_until_accepted() -> None:
    status = with_canary(
        "RolledBack", message="the canary's P99 is 300% above", reason="CanaryLatencyRegression"
    )
    held = canary_step(canary_service(), status, NEW, stable_replicas=1, accepted=False, now=NOW)
    assert held.engine_ready is not None and held.engine_ready.reason == c.REASON_CANARY_ROLLED_BACK
    assert (held.blocked.status, held.blocked.reason) == (c.STATUS_TRUE, c.REASON_CANARY_ROLLED_BACK)
    assert (
        "300% above" in held.blocked.message
        and f"{c.ANNOTATION_ACCEPT_ENGINE}={NEW.key[:12]}" in held.blocked.message
    )
    assert canary_plan(held.status) is None  # no canary replicas run
    accepted = canary_step(canary_service(), status, NEW, stable_replicas=1, accepted=True, now=NOW)
    assert accepted.engine_ready is None  # served now
    assert accepted.status.canary is not None and accepted.status.canary.phase == "Promoted"
    assert [e.reason for e in accepted.events] == [c.REASON_REGRESSION_ACCEPTED]


def test_acceptance_promotes_a_canary_under_analysis_and_a_promoted_one_serves() -> None:
    step = canary_step(
        canary_service(), with_canary("Analysing"), NEW, stable_replicas=1, accepted=True, now=NOW
    )
    assert step.engine_ready is None
    assert step.status.canary is not None and step.status.canary.phase == "Promoting"
    assert canary_plan(step.status) is not None  # the canary serves on while the stable replicas roll
    promoting = canary_step(
        canary_service(), with_canary("Promoting"), NEW, stable_replicas=1, accepted=False, now=NOW
    )
    assert promoting.engine_ready is None and promoting.blocked.reason == c.REASON_CANARY_PROMOTED
    assert promoting.events == []


def test_follow_starts_the_analysis_when_every_canary_replica_is_ready() -> None:
    events: list[EventRecord] = []
    later = NOW + timedelta(seconds=20)
    status = follow_canary(
        with_canary("Starting"),
        canary_deployment=deployment(ready=0, updated=1),
        stable_rolled_out=True,
        now=later,
        events=events,
    )
    assert status.canary is not None and status.canary.phase == "Starting"
    status = follow_canary(
        with_canary("Starting"),
        canary_deployment=deployment(ready=1, updated=1),
        stable_rolled_out=True,
        now=later,
        events=events,
    )
    assert status.canary is not None and (status.canary.phase, status.canary.analysis_started_at) == (
        "Analysing",
        later,
    )
    assert events == []


def test_follow_rolls_back_a_canary_whose_replicas_stall() -> None:
    events: list[EventRecord] = []
    status = follow_canary(
        with_canary("Analysing"),
        canary_deployment=deployment(ready=0, updated=1, stalled=True),
        stable_rolled_out=True,
        now=NOW,
        events=events,
    )
    assert status.canary is not None and (status.canary.phase, status.canary.reason) == (
        "RolledBack",
        "CanaryNotReady",
    )
    assert "too slow" in status.canary.message
    assert [e.reason for e in events] == [c.REASON_CANARY_ROLLED_BACK]


def test_a_promotion_completes_once_the_stable_replicas_run_the_new_engine() -> None:
    events: list[EventRecord] = []
    promoting = with_canary("Promoting", finished_at=NOW)
    not_yet = follow_canary(
        promoting,
        canary_deployment=deployment(ready=1, updated=1),
        stable_rolled_out=True,
        now=NOW,
        events=events,
    )
    assert (
        not_yet.canary is not None and not_yet.canary.phase == "Promoting"
    )  # status.engine is still the old one
    served = promoting.model_copy(update={"engine": NEW})
    rolling = follow_canary(
        served,
        canary_deployment=deployment(ready=1, updated=1),
        stable_rolled_out=False,
        now=NOW,
        events=events,
    )
    assert rolling.canary is not None and rolling.canary.phase == "Promoting"
    done = follow_canary(
        served,
        canary_deployment=deployment(ready=1, updated=1),
        stable_rolled_out=True,
        now=NOW,
        events=events,
    )
    assert done.canary is not None and done.canary.phase == "Promoted"
    assert canary_plan(done) is None
    assert [e.reason for e in events] == [c.REASON_CANARY_PROMOTED]


def test_a_spec_change_stops_a_running_canary_but_not_a_promotion_in_progress() -> None:
    events: list[EventRecord] = []
    stopped = drop_superseded_canary(with_canary("Analysing"), request_key="r3", events=events)
    assert stopped.canary is None and [e.reason for e in events] == [c.EVENT_CANARY_STOPPED]
    same = with_canary("Analysing")
    assert drop_superseded_canary(same, request_key="r2", events=events) == same
    rolling = with_canary("Promoting").model_copy(update={"engine": NEW})
    assert drop_superseded_canary(rolling, request_key="r3", events=events) == rolling
    history = with_canary("RolledBack")
    assert drop_superseded_canary(history, request_key="r3", events=events) == history


def test_each_side_reading_sums_its_pods_and_merges_their_tails() -> None:
    pods = [
        PodMetrics(pod="a", request_rate=10.0, failure_rate=0.5, p99_us=4000.0, last_sample_s=100.0),
        PodMetrics(pod="b", request_rate=10.0, failure_rate=0.0, p99_us=2000.0, last_sample_s=100.0),
    ]
    reading = track_reading(pods, window_s=30.0, now_s=100.0)
    assert (reading.pods, reading.requests, reading.failures) == (2, 615.0, 15.0)
    assert reading.p99_ms is not None and 2.0 <= reading.p99_ms <= 4.0
    recorded = track_status(reading)
    assert (recorded.requests, recorded.failures) == (615, 15)
    assert recorded.error_rate_percent == round(100 * 15 / 615, 3)
    empty = track_status(track_reading([], window_s=30.0, now_s=100.0))
    assert (empty.requests, empty.p99_ms, empty.error_rate_percent) == (0, None, None)


def test_restarts_count_every_container_of_the_canarys_pods() -> None:
    from tailpilot.controllers.rollout.canary_analysis import restarts_of

    pod = {
        "status": {
            "containerStatuses": [{"restartCount": 2}],
            "initContainerStatuses": [{"restartCount": 0}, {"restartCount": 1}],
        }
    }
    assert restarts_of(pod) == 3
    assert restarts_of({"status": {}}) == 0
