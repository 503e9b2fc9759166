"""The status codec: typed values in and out of the object's status, and what the controllers read from it."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import pytest

from tailpilot.api.autoscaling import BatchingConfig
from tailpilot.api.engine import AccuracyReport, BuildOutcome, BuildResult, TensorSpec
from tailpilot.api.v1alpha1 import InferenceServiceStatus
from tailpilot.controllers.core.status import (
    applied_spec_replicas,
    batching_in_force,
    batching_status,
    budget_status,
    decode_status,
    encode_status,
    engine_profile,
    engine_status,
    learned_status,
    manual_scale_pending,
    replicas_in_force,
    restore_learned,
    restored_ledger,
    restored_memory,
    restored_rises,
    served_result,
    service_without_status,
    status_patch,
)
from tailpilot.policy import Learned, PolicyState, error_budget, headroom, idle
from tailpilot.policy.error_budget import BudgetLedger
from tailpilot.policy.from_spec import policy_config
from tailpilot.policy.headroom import RiseHistory
from tailpilot.policy.idle import IdleHistory
from tailpilot.policy.service_fit import WindowKind
from tests.controllers.specs import service
from tests.policy.policy_fakes import fitted_service


def learned_dict(learned: Learned) -> dict[str, Any]:
    return learned_status(learned).model_dump(by_alias=True, exclude_none=True)


def test_status_learned_shows_the_corrections_and_a_timed_start_up_only_once_timed():
    learned = Learned(correction_light=0.7234, correction_heavy=1.31, service_scale=1.6666, slope_scale=0.52)
    assert learned_dict(learned) == {
        "modelCorrectionLightLoad": 0.723,
        "modelCorrectionHeavyLoad": 1.31,
        "serviceTimeScale": 1.667,
        "serviceTimeSlopeScale": 0.52,
    }
    timed = learned_dict(replace(learned, replica_startup_s=41.26))
    assert timed["replicaStartupSeconds"] == 41.3
    # It is what the CRD's status schema (generated from the same model) accepts.
    assert InferenceServiceStatus.model_validate({"learned": timed}).learned is not None


def test_a_restarted_operator_starts_from_what_the_status_kept():
    fresh = PolicyState.initial(replicas=3, batching=BatchingConfig(max_batch_size=8))
    learned = replace(
        fresh,
        learned=Learned(
            correction_light=0.8,
            correction_heavy=1.4,
            service_scale=1.9,
            slope_scale=1.7,
            replica_startup_s=0.0,
        ),
    )
    restored = restore_learned(fresh, learned_status(learned.learned))
    assert restored == learned
    # Nothing kept (a new service, or one an older operator wrote): the initial state as is.
    assert restore_learned(fresh, None) == fresh

    def kept(section: dict[str, Any]) -> PolicyState:
        return restore_learned(fresh, decode_status({"learned": section}).learned)

    untimed = kept({"modelCorrectionLightLoad": 0.9})
    assert (untimed.learned.correction_light, untimed.learned.service_scale) == (0.9, 1.0)
    assert untimed.learned.replica_startup_s is None
    # A field a newer operator wrote is skipped; a value that does not validate drops it all.
    newer = kept({"serviceTimeScale": 1.5, "queueingModel": "v2"})
    assert newer.learned.service_scale == 1.5
    assert kept({"serviceTimeScale": -1, "modelCorrectionLightLoad": 0.9}) == fresh


def test_the_policys_profile_carries_tritons_compute_time_when_the_build_recorded_it():
    raw: dict[str, Any] = {
        "engine": {"key": "abc", "tritonBackend": "onnxruntime"},
        "profile": {
            "hardware": "cpu",
            "serviceTime": {"interceptMs": 2.0, "perItemMs": 1.0, "jitterCv": 0.1},
            "computeTime": {"interceptMs": 1.5, "perItemMs": 0.9},
            "points": [{"batchSize": 1, "p99Ms": 4.0, "throughputPerS": 300.0}],
        },
    }
    profile = engine_profile(decode_status(raw), max_batch_size=8)
    assert profile is not None and profile.compute_time is not None
    assert (profile.compute_time.intercept_ms, profile.compute_time.per_item_ms) == (1.5, 0.9)
    assert profile.service_time.jitter_cv == 0.1
    assert profile.points[0].p99_ms == 4.0 and profile.points[0].p50_ms is None
    raw["profile"]["computeTime"] = None  # an older build's profile
    older = engine_profile(decode_status(raw), max_batch_size=8)
    assert older is not None and older.compute_time is None
    assert engine_profile(decode_status({"engine": raw["engine"]}), max_batch_size=8) is None
    # A profile whose batches take no time would size any load onto one replica: not used.
    raw["profile"]["serviceTime"] = {"interceptMs": 0.0, "perItemMs": 0.0}
    assert engine_profile(decode_status(raw), max_batch_size=8) is None


def test_the_codec_round_trips_what_the_api_server_stores():
    raw = {
        "observedGeneration": 3,
        "conditions": [
            {
                "type": "Ready",
                "status": "True",
                "reason": "AllReady",
                "message": "serving",
                "lastTransitionTime": "2026-12-01T15:20:55Z",
                "observedGeneration": 3,
            }
        ],
        "replicas": 2,
        "batching": {"maxBatchSize": 8, "preferredBatchSizes": [8], "maxQueueDelayMicroseconds": 500},
        "lastDecision": {"action": "None", "reason": "WithinSLO", "time": "2026-12-01T15:21:10Z"},
    }
    status = decode_status(raw)
    assert status.conditions[0].last_transition_time == datetime(2026, 12, 1, 15, 20, 55, tzinfo=UTC)
    encoded = encode_status(status)
    assert encoded["conditions"][0]["lastTransitionTime"] == "2026-12-01T15:20:55Z"
    assert encoded["lastDecision"]["time"] == "2026-12-01T15:21:10Z"
    assert decode_status(encoded) == status
    assert decode_status(None) == InferenceServiceStatus()


def test_a_status_section_this_operator_cannot_read_is_dropped_not_the_whole_status():
    key = "0123456789abcdef0123456789abcdef"
    status = decode_status({"replicas": 4, "observed": {"p99Ms": -1}, "engine": {"key": key, "future": 1}})
    assert status.replicas == 4
    assert status.observed is None
    assert status.engine is not None and status.engine.key == key
    # An engine key that is not a hex digest is such a section: dropped, never served from.
    hostile = decode_status({"replicas": 4, "engine": {"key": "x; reboot"}})
    assert hostile.replicas == 4 and hostile.engine is None


def test_a_valid_spec_is_read_whatever_its_status_holds():
    body = {**service().model_dump(by_alias=True, exclude_none=True), "status": {"replicas": -3}}
    assert service_without_status(body).spec.slo.p99_latency_ms == 50


def test_the_engine_in_service_round_trips_through_status_engine():
    result = BuildResult(
        outcome=BuildOutcome.SUCCEEDED,
        engine_key="e" * 64,
        artifact="pvc://tailpilot-engines/e",
        triton_backend="onnxruntime",
        inputs=(TensorSpec(name="x", data_type="TYPE_FP32", dims=(3, -1)),),
        outputs=(TensorSpec(name="y", data_type="TYPE_FP32", dims=(10,)),),
        cache_hit=True,
        model_sha256="a" * 64,
        model_revision="sha256:" + "b" * 64,  # an OCI manifest digest
    )
    built = datetime(2026, 12, 1, 15, 0, tzinfo=UTC)
    status = InferenceServiceStatus(engine=engine_status(result, request_key="r" * 20, built_at=built))
    assert served_result(decode_status(encode_status(status))) == result
    assert encode_status(status)["engine"]["builtAt"] == "2026-12-01T15:00:00Z"
    # What the engine was built from is shown: the bytes' hash and what pinned them at the source.
    assert encode_status(status)["engine"]["modelRevision"] == "sha256:" + "b" * 64
    assert encode_status(status)["engine"]["modelSha256"] == "a" * 64
    assert served_result(InferenceServiceStatus()) is None
    # What the build measured against the FP32 model is shown on status.engine.accuracy.
    measured = AccuracyReport(samples=32, inputs="calibration", max_relative_error=0.03, top1_agreement=0.94)
    shown = encode_status(
        InferenceServiceStatus(
            engine=engine_status(
                result.model_copy(update={"accuracy": measured}), request_key="r", built_at=built
            )
        )
    )["engine"]["accuracy"]
    assert (shown["maxRelativeError"], shown["top1Agreement"], shown["inputs"]) == (0.03, 0.94, "calibration")


def test_batching_and_replicas_in_force_stay_within_the_spec():
    isvc = service(batching={"maxBatchSize": 8}, autoscaling={"minReplicas": 2, "maxReplicas": 5})
    chosen = BatchingConfig(max_batch_size=4, preferred_batch_sizes=(4,), max_queue_delay_us=200)
    assert batching_in_force(isvc, InferenceServiceStatus(batching=batching_status(chosen))) == chosen
    too_big = BatchingConfig(max_batch_size=16)
    assert batching_in_force(isvc, InferenceServiceStatus(batching=batching_status(too_big))) == (
        isvc.spec.batching.to_config()
    )
    assert replicas_in_force(isvc, InferenceServiceStatus()) == 2
    assert replicas_in_force(isvc, InferenceServiceStatus(replicas=9)) == 5
    assert replicas_in_force(isvc, InferenceServiceStatus(replicas=3)) == 3


def test_kubectl_scale_is_applied_once_and_then_leaves_the_count_to_the_autoscaler():
    bounds = {"minReplicas": 1, "maxReplicas": 8}
    unset, scaled_3, scaled_2 = (
        service(autoscaling=bounds),
        service(autoscaling=bounds, replicas=3),
        service(autoscaling=bounds, replicas=2),
    )
    # A new service starts at spec.replicas (minReplicas when unset); the rollout records it as applied.
    assert replicas_in_force(unset, InferenceServiceStatus()) == 1
    assert replicas_in_force(scaled_3, InferenceServiceStatus()) == 3
    assert (applied_spec_replicas(unset), applied_spec_replicas(scaled_3)) == (0, 3)
    # The autoscaler went to 5: its count is in force.
    assert replicas_in_force(unset, InferenceServiceStatus(replicas=5, applied_spec_replicas=0)) == 5
    # `kubectl scale --replicas=3`: a value not applied yet, in force at once.
    autoscaled = InferenceServiceStatus(replicas=5, applied_spec_replicas=0)
    assert manual_scale_pending(scaled_3, autoscaled)
    assert replicas_in_force(scaled_3, autoscaled) == 3
    # Once applied, the autoscaler continues from it: its later 6 is not overridden by the stale 3,
    # by this operator or by a restarted one (both read the same status).
    nudged = InferenceServiceStatus(replicas=3, applied_spec_replicas=3)
    assert replicas_in_force(scaled_3, nudged) == 3
    later = InferenceServiceStatus(replicas=6, applied_spec_replicas=3)
    assert not manual_scale_pending(scaled_3, later)
    assert replicas_in_force(scaled_3, decode_status(encode_status(later))) == 6
    assert encode_status(later)["appliedSpecReplicas"] == 3
    # A second nudge, to another value, is applied again.
    assert replicas_in_force(scaled_2, later) == 2
    # A status from an operator older than appliedSpecReplicas: the spec.replicas of then was applied.
    assert not manual_scale_pending(scaled_3, InferenceServiceStatus(replicas=6))
    assert replicas_in_force(scaled_3, InferenceServiceStatus(replicas=6)) == 6
    # The autoscaler's count stays within the bounds, whatever the status says.
    assert replicas_in_force(scaled_3, InferenceServiceStatus(replicas=12, applied_spec_replicas=3)) == 8


def test_with_autoscaling_off_spec_replicas_is_the_count_and_toggling_keeps_it():
    off = {"enabled": False, "minReplicas": 2, "maxReplicas": 8}
    later = InferenceServiceStatus(replicas=6, applied_spec_replicas=3)
    assert replicas_in_force(service(autoscaling=off, replicas=3), later) == 3
    assert replicas_in_force(service(autoscaling=off), later) == 2  # unset: minReplicas
    # Turned back on: the rollout while off applied spec.replicas, so the autoscaler starts from it.
    was_off = InferenceServiceStatus(replicas=3, applied_spec_replicas=3)
    assert replicas_in_force(service(autoscaling={**off, "enabled": True}, replicas=3), was_off) == 3


def test_policy_config_carries_the_scale_up_stabilization():
    assert policy_config(service().spec, control_period_s=15).scale_up_stabilization_s == 0
    windowed = service(autoscaling={"scaleUpStabilizationSeconds": 120})
    assert policy_config(windowed.spec, control_period_s=15).scale_up_stabilization_s == 120


def test_the_patch_removes_what_the_status_no_longer_has_at_every_level():
    live = {
        "replicas": 2,
        "profile": {"hardware": "cpu", "serviceTime": {"interceptMs": 1, "perItemMs": 2}, "points": []},
        "learned": {"serviceTimeScale": 1.0, "serviceTime": {"interceptMs": 0, "perItemMs": 20}},
        "futureField": {"kept": True},
    }
    now = InferenceServiceStatus(replicas=3, learned=learned_status(Learned()))
    patch = status_patch(live, now)
    assert patch["replicas"] == 3
    assert patch["profile"] is None  # another engine's profile goes
    assert patch["learned"]["serviceTime"] is None  # a learned value reset goes
    assert patch["learned"]["serviceTimeScale"] == 1.0
    assert "futureField" not in patch  # what this operator does not know is left alone


def test_the_observation_says_where_the_time_went():
    from tailpilot.api.autoscaling import Observation
    from tailpilot.controllers.core.status import observed_status

    queued = Observation(
        at_s=0.0,
        request_rate=40.0,
        p99_ms=180.0,
        queue_time_ms=95.123,
        compute_time_ms=30.0,
        service_time_ms=41.0,
        mean_batch_size=2.5,
    )
    shown = encode_status(InferenceServiceStatus(observed=observed_status(queued)))["observed"]
    assert (shown["queueTimeMs"], shown["serverTimeMs"], shown["computeTimeMs"]) == (95.12, 41.0, 30.0)
    assert (shown["meanBatchSize"], shown["timeDominatedBy"]) == (2.5, "Queue")
    served = observed_status(queued.model_copy(update={"queue_time_ms": 3.0}))
    assert served.time_dominated_by == "Server"
    # Without traffic (or without the split) there is nothing to attribute.
    assert observed_status(queued.model_copy(update={"request_rate": 0.0})).time_dominated_by is None
    assert observed_status(queued.model_copy(update={"queue_time_ms": None})).time_dominated_by is None
    # The observation's time, so its figures can be checked against the same window elsewhere.
    assert "at" not in shown  # at_s 0: an observation without a time
    timed = encode_status(
        InferenceServiceStatus(observed=observed_status(queued.model_copy(update={"at_s": 1.8e9})))
    )
    assert timed["observed"]["at"] == "2027-01-15T08:00:00Z"


def test_the_observation_gives_each_compute_part_and_the_tails_beside_the_existing_figures():
    from tailpilot.api.autoscaling import Observation
    from tailpilot.controllers.core.status import observed_status

    observation = Observation(
        at_s=0.0,
        request_rate=40.0,
        p99_ms=180.0,
        queue_time_ms=95.123,
        compute_time_ms=30.0,
        service_time_ms=41.0,
        compute_input_time_ms=0.0571,
        compute_output_time_ms=0.314,
        queue_time_p99_ms=250.456,
        compute_time_p99_ms=38.1,
    )
    shown = encode_status(InferenceServiceStatus(observed=observed_status(observation)))["observed"]
    assert (shown["computeInputTimeMs"], shown["computeOutputTimeMs"]) == (0.06, 0.31)
    assert (shown["queueTimeP99Ms"], shown["computeTimeP99Ms"]) == (250.46, 38.1)
    assert (shown["queueTimeMs"], shown["serverTimeMs"], shown["computeTimeMs"]) == (95.12, 41.0, 30.0)
    assert shown["timeDominatedBy"] == "Queue"
    # An older operator's status (none of the new fields) still reads; unmeasured figures are left out.
    old = decode_status({"observed": {"queueTimeMs": 1.0, "serverTimeMs": 2.0, "timeDominatedBy": "Server"}})
    assert old.observed is not None and old.observed.compute_input_time_ms is None
    bare = encode_status(
        InferenceServiceStatus(observed=observed_status(Observation(at_s=0.0, request_rate=0.0, p99_ms=None)))
    )
    assert not {"computeInputTimeMs", "queueTimeP99Ms", "computeTimeP99Ms"} & set(bare["observed"])


def test_the_decision_history_keeps_the_last_ten_oldest_first():
    from datetime import UTC, datetime

    from tailpilot.api.v1alpha1 import MAX_DECISION_HISTORY, DecisionRecordStatus
    from tailpilot.controllers.core.status import with_decision

    def record(i: int) -> DecisionRecordStatus:
        return DecisionRecordStatus(
            time=datetime(2026, 12, 2, 0, 0, i, tzinfo=UTC),
            action="ScaleUp",
            reason="SLO",
            replicas_before=i,
            replicas_after=i + 1,
            max_batch_size_before=8,
            max_batch_size_after=8,
        )

    history: list[DecisionRecordStatus] = []
    for i in range(MAX_DECISION_HISTORY + 3):
        history = with_decision(history, record(i))
    assert len(history) == MAX_DECISION_HISTORY
    assert [r.replicas_before for r in history] == list(range(3, MAX_DECISION_HISTORY + 3))


def test_the_observation_gives_the_executed_batch_sizes_bounded_and_none_when_not_measured():
    from tailpilot.api.autoscaling import ExecutedBatchSize, Observation
    from tailpilot.controllers.core.status import observed_status

    def size(n: int, executions: int, share: float) -> ExecutedBatchSize:
        return ExecutedBatchSize(
            size=n, executions=executions, executions_per_s=executions / 30, request_share=share
        )

    observation = Observation(
        at_s=0.0,
        request_rate=10.0,
        p99_ms=20.0,
        executed_batch_sizes=(size(1, 20, 0.08032), size(2, 17, 0.13655), size(8, 1, 0.03213)),
    )
    shown = encode_status(InferenceServiceStatus(observed=observed_status(observation)))["observed"]
    assert shown["batchSizes"] == [
        {"size": 1, "executions": 20, "requestShare": 0.08},
        {"size": 2, "executions": 17, "requestShare": 0.137},
        {"size": 8, "executions": 1, "requestShare": 0.032},
    ]
    many = observation.model_copy(
        update={"executed_batch_sizes": tuple(size(n, 1, 1 / 40) for n in range(1, 41))}
    )
    bounded = encode_status(InferenceServiceStatus(observed=observed_status(many)))["observed"]["batchSizes"]
    assert len(bounded) == 32
    assert bounded[-1] == {"size": 32, "maxSize": 40, "executions": 9, "requestShare": 0.225}
    # Not measured (the Prometheus path), or nothing executed: no list on the object.
    for sizes in (None, ()):
        bare = observation.model_copy(update={"executed_batch_sizes": sizes})
        shown = encode_status(InferenceServiceStatus(observed=observed_status(bare)))["observed"]
        assert "batchSizes" not in shown
    # An older operator's status (without the field) still reads.
    old = decode_status({"observed": {"meanBatchSize": 2.0}}).observed
    assert old is not None and old.batch_sizes is None


def test_the_observation_gives_the_clients_p99_and_the_part_outside_the_server_floored_at_zero():
    from tailpilot.api.autoscaling import Observation
    from tailpilot.controllers.core.status import observed_status

    def shown(client: float | None, p99: float | None) -> dict[str, Any]:
        observation = Observation(at_s=0.0, request_rate=10.0, p99_ms=p99, client_p99_ms=client)
        return encode_status(InferenceServiceStatus(observed=observed_status(observation)))["observed"]

    got = shown(190.456, 60.0)
    assert (got["clientP99Ms"], got["outsideServerP99Ms"]) == (190.46, 130.46)
    # A client P99 under the server's (other windows, other requests): nothing outside, not negative.
    assert shown(55.0, 60.0)["outsideServerP99Ms"] == 0.0
    # Without the query's figure, or without the server's P99: no remainder.
    assert not {"clientP99Ms", "outsideServerP99Ms"} & set(shown(None, 60.0))
    no_server = shown(190.0, None)
    assert no_server["clientP99Ms"] == 190.0 and "outsideServerP99Ms" not in no_server


def test_a_restarted_operator_keeps_the_rises_behind_the_headroom_and_the_error_budget():
    rises = RiseHistory()
    for i, (base, peak) in enumerate([(10.0, 10.0)] * 12 + [(10.0, 35.0)] * 3):
        rises = headroom.learn(rises, headroom.Rise(base, peak), now_s=15.0 * i)
    kept = encode_status(InferenceServiceStatus(learned=learned_status(Learned(), headroom=2.5, rises=rises)))
    restored = restored_rises(decode_status(kept).learned)
    assert restored.bins == tuple((b, v, pytest.approx(w, rel=1e-3)) for b, v, w in rises.bins)
    assert headroom.headroom(
        restored, rate_per_s=10.0, objective=0.99, budget_remaining=1.0
    ) == pytest.approx(
        headroom.headroom(rises, rate_per_s=10.0, objective=0.99, budget_remaining=1.0), rel=1e-3
    )
    ledger = BudgetLedger()
    for t in range(0, 1800, 15):
        ledger = error_budget.record(
            ledger, now_s=1.7e9 + t, met=t % 300 != 0, compliance_period_s=24 * 3600.0, control_period_s=15
        )
    left = error_budget.budget(ledger, objective=0.99, compliance_period_s=24 * 3600.0)
    shown = encode_status(InferenceServiceStatus(error_budget=budget_status(left, ledger)))
    assert shown["errorBudget"]["remainingPercent"] == round(100 * left.remaining, 2)
    again = restored_ledger(decode_status(shown).error_budget)
    assert (again.met_s, again.missed_s) == (pytest.approx(ledger.met_s), pytest.approx(ledger.missed_s))


def test_a_restarted_operator_keeps_the_idle_stretches_that_price_the_zero_choice():
    history, now = IdleHistory(), 1.7e9
    # Woken every few minutes: idle for 100-200 s between bursts of traffic, then idle again now.
    for length in (100, 150, 200, 120, 180):
        history = idle.record(history, now_s=now, idle=True, quiet_s=15)
        now += length
        history = idle.record(history, now_s=now, idle=False)
        now += 60
    history = idle.record(history, now_s=now, idle=True, quiet_s=15)
    now += 90
    learned = learned_status(Learned(), idle=history)
    kept = encode_status(InferenceServiceStatus(learned=learned))
    assert len(kept["learned"]["idle"]["stretches"]) == 5 and kept["learned"]["idle"]["idleSince"]
    restored = restored_memory(decode_status(kept)).idle
    assert [(s.start_s, s.length_s) for s in restored.stretches] == [
        (round(s.start_s), pytest.approx(s.length_s, abs=0.05)) for s in history.stretches
    ]
    assert restored.idle_for_s(now) == pytest.approx(history.idle_for_s(now), abs=1)

    def choice(h: IdleHistory) -> idle.ZeroChoice:
        return idle.zero_choice(
            h,
            now_s=now,
            idle_window_s=60,
            miss_per_wake_s=40,
            startup_s=30,
            objective=0.99,
            budget_remaining=1,
        )

    # The restarted operator prices zero as the one before it did: not the bare idle window.
    assert choice(restored).threshold_s == choice(history).threshold_s != 60
    assert choice(restored).to_zero == choice(history).to_zero
    # Nothing learned yet: no idle entry at all; an old status without one restores an empty history.
    assert "idle" not in encode_status(InferenceServiceStatus(learned=learned_status(Learned())))["learned"]
    assert restored_memory(InferenceServiceStatus()).idle == IdleHistory()


def test_a_restarted_operator_keeps_the_fit_and_the_kind_of_windows_behind_it():
    fit = fitted_service(per_item_ms=19.2, windows=WindowKind.SATURATED)
    kept = encode_status(InferenceServiceStatus(learned=learned_status(Learned(), fit)))
    assert kept["learned"]["serviceTimeFrom"] == "Saturated"
    restored = restored_memory(decode_status(kept)).fitted
    assert restored is not None and restored.windows is WindowKind.SATURATED
    assert restored.model.mean_ms(1) == pytest.approx(19.2)
    # An older operator's status says nothing of the windows: not known, which saturated ones replace.
    del kept["learned"]["serviceTimeFrom"]
    older = restored_memory(decode_status(kept)).fitted
    assert older is not None and older.windows is WindowKind.MIXED
