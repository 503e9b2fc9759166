"""The one codec between an InferenceService's status (camelCase JSON) and typed values.

The controllers read the status with `decode_status` and write it with `encode_status`; everything
in between is `InferenceServiceStatus` and the typed values of `tailpilot.api` and
`tailpilot.policy`. The conversions between the status sections and what the reconciler, the
autoscaler and the fast checks work with (the build result in service, the batching and replicas
in force, the engine profile, what the policy learned) live here and nowhere else.
"""

from __future__ import annotations

import copy
import logging
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any, Literal, get_args

import annotated_types
from pydantic import BaseModel, ValidationError
from pydantic.fields import FieldInfo

from tailpilot.api.autoscaling import BatchingConfig, Decision, Observation
from tailpilot.api.engine import (
    BatchProfilePoint,
    BuildOutcome,
    BuildResult,
    EngineProfile,
    ReloadCost,
    ServiceTimeModel,
    TensorSpec,
)
from tailpilot.api.v1alpha1 import (
    MAX_BUDGET_BUCKETS,
    MAX_DECISION_HISTORY,
    MAX_RISE_BINS,
    BatchingMode,
    BatchingStatus,
    BatchSizeStatus,
    BudgetBucketStatus,
    DecisionRecordStatus,
    DecisionStatus,
    EngineComparisonStatus,
    EngineStatus,
    ErrorBudgetStatus,
    InferenceService,
    InferenceServiceStatus,
    LearnedStatus,
    ObservedStatus,
    ProfileStatus,
    ServiceTimeStatus,
    TensorOverride,
)
from tailpilot.api.validation import check_batching
from tailpilot.controllers.core.idle_status import idle_status, restored_idle
from tailpilot.policy import Learned, PolicyState
from tailpilot.policy.batch_sizes import bounded
from tailpilot.policy.error_budget import Budget, BudgetLedger
from tailpilot.policy.headroom import RiseHistory
from tailpilot.policy.idle import IdleHistory
from tailpilot.policy.period import PeriodMemory, ServedEngine
from tailpilot.policy.regression import EngineComparison
from tailpilot.policy.service_fit import FitQuality, ServiceFit, WindowKind

log = logging.getLogger("tailpilot.status")

#: The longest message a status field takes (the CRD's maxLength).
MAX_MESSAGE = 4096
#: What ends a string `fit_status` cut to its field's maxLength.
CUT_MARKER = " [...cut]"


# ---- the codec -----------------------------------------------------------------------------------


def decode_status(raw: Mapping[str, Any] | None) -> InferenceServiceStatus:
    """The typed status of an object, keeping what this operator can read.

    A field a newer operator wrote is skipped, and a section that does not validate (e.g. an
    older operator's values outside today's bounds) is dropped whole rather than failing the
    service: everything on the status is either recomputed or learned again.
    """
    document: dict[str, Any] = copy.deepcopy(dict(raw or {}))
    try:
        return InferenceServiceStatus.model_validate(document)
    except ValidationError as error:
        problems = error.errors()
    for problem in problems:
        if problem["type"] == "extra_forbidden":
            _remove(document, problem["loc"])
    try:
        return InferenceServiceStatus.model_validate(document)
    except ValidationError as error:
        broken = {str(problem["loc"][0]) for problem in error.errors() if problem["loc"]}
    log.warning("ignoring status sections that do not validate: %s", ", ".join(sorted(broken)))
    return InferenceServiceStatus.model_validate({k: v for k, v in document.items() if k not in broken})


def _remove(document: Any, location: tuple[int | str, ...]) -> None:
    """Delete the key at `location` (a pydantic error location) from a nested JSON document."""
    *parents, last = location
    node = document
    for step in parents:
        try:
            node = node[step]
        except (KeyError, IndexError, TypeError):
            return
    if isinstance(node, dict):
        node.pop(last, None)


def encode_status(status: InferenceServiceStatus) -> dict[str, Any]:
    """The status as the CRD stores it (camelCase JSON, unset fields left out)."""
    return status.model_dump(by_alias=True, exclude_none=True, mode="json")


@dataclass(frozen=True)
class FittedStatus:
    """A status cut to the CRD's schema, and what was cut (empty: it fitted as it was)."""

    status: InferenceServiceStatus
    #: One entry per cut, e.g. "build.message (5012 characters, at most 4096)".
    cuts: tuple[str, ...] = ()


def fit_status(status: InferenceServiceStatus) -> FittedStatus:
    """`status` with every string and list within its field's maxLength / maxItems.

    The API server refuses a whole status patch for one field past its schema, and the operator
    would send the same patch on every pass, for ever: a build's message, a termination message
    quoted in it, a model's tensors are not the operator's to bound. `model_copy(update=...)` does
    not validate, so the bounds are applied here, at the one place every status write passes
    (`status_patch`). A cut string keeps its start and ends with CUT_MARKER (strings with a pattern,
    reasons, are cut short without it); a long list keeps its first items.
    """
    document = encode_status(status)
    cuts: list[str] = []
    _fit_object(document, InferenceServiceStatus, "", cuts)
    if not cuts:
        return FittedStatus(status)
    return FittedStatus(InferenceServiceStatus.model_validate(document), tuple(cuts))


def _max_length(field: FieldInfo) -> int | None:
    return next((m.max_length for m in field.metadata if isinstance(m, annotated_types.MaxLen)), None)


def _has_pattern(field: FieldInfo) -> bool:
    return any(getattr(m, "pattern", None) for m in field.metadata)


def _fit_object(document: dict[str, Any], model: type[BaseModel], path: str, cuts: list[str]) -> None:
    for name, field in model.model_fields.items():
        key = field.alias or name
        value = document.get(key)
        where = f"{path}{key}"
        limit = _max_length(field)
        if isinstance(value, str) and limit is not None and len(value) > limit:
            marker = "" if _has_pattern(field) or limit <= 2 * len(CUT_MARKER) else CUT_MARKER
            document[key] = value[: limit - len(marker)] + marker
            cuts.append(f"{where} ({len(value)} characters, at most {limit})")
        elif isinstance(value, list):
            if limit is not None and len(value) > limit:
                cuts.append(f"{where} ({len(value)} items, at most {limit})")
                document[key] = value = value[:limit]
            item_model = _item_model(field.annotation)
            if item_model is not None:
                for i, item in enumerate(value):
                    if isinstance(item, dict):
                        _fit_object(item, item_model, f"{where}[{i}].", cuts)
        elif isinstance(value, dict):
            section = _model_of(field.annotation)
            if section is not None:
                _fit_object(value, section, f"{where}.", cuts)


def _item_model(annotation: Any) -> type[BaseModel] | None:
    """The pydantic model a list field's items are (`list[Model]`, `list[Model] | None`), if any."""
    for arg in get_args(annotation):
        found = _model_of(arg) or _item_model(arg)
        if found is not None:
            return found
    return None


def status_patch(live: Mapping[str, Any] | None, status: InferenceServiceStatus) -> dict[str, Any]:
    """The JSON merge patch that makes the live status `status` (fitted to the schema first).

    A merge patch leaves alone what it does not name, at every level, so a field `status` no
    longer has (the profile of the engine served before, a learned value reset) is named with
    null, in the status and in its sections; fields this operator does not know (a newer one's)
    are left as they are.
    """
    fitted = fit_status(status)
    if fitted.cuts:
        log.warning("status cut to the CRD's limits: %s", "; ".join(fitted.cuts))
    patch = encode_status(fitted.status)
    _null_gone(patch, live or {}, InferenceServiceStatus)
    return patch


def _null_gone(patch: dict[str, Any], live: Mapping[str, Any], model: type[BaseModel]) -> None:
    """Set to null in `patch` the fields of `model` that `live` has and `patch` does not; recurse."""
    for name, field in model.model_fields.items():
        key = field.alias or name
        if key not in live:
            continue
        if key not in patch:
            patch[key] = None
            continue
        section = _model_of(field.annotation)
        if section is not None and isinstance(patch[key], dict) and isinstance(live[key], Mapping):
            _null_gone(patch[key], live[key], section)


def _model_of(annotation: Any) -> type[BaseModel] | None:
    """The pydantic model a field holds (`Model` or `Model | None`), else None (lists, scalars)."""
    for candidate in (annotation, *get_args(annotation)):
        if isinstance(candidate, type) and issubclass(candidate, BaseModel):
            return candidate
    return None


def service_without_status(body: Mapping[str, Any]) -> InferenceService:
    """The object's spec and metadata, validated (ValidationError names the spec field).

    The status is decoded on its own (`decode_status`): a status this operator cannot fully read
    must not make a valid spec look invalid.
    """
    return InferenceService.model_validate({**body, "status": None})


# ---- the engine in service -----------------------------------------------------------------------


#: Status fields whose value is an engine's key in the store (`engine.key` besides).
_ENGINE_KEY_FIELDS = frozenset({"engineKey", "servingEngineKey", "candidateEngineKey"})


def engines_named(statuses: Iterable[Mapping[str, Any] | None]) -> frozenset[str]:
    """Every engine key the statuses name: served, profiled, compared, a canary's or a candidate's.

    What a build Job's store GC must keep. Read from the raw statuses, not the typed ones, so that a
    section this operator cannot decode (a newer operator's) still protects the engines it names.
    """
    keys: set[str] = set()

    def walk(node: Any) -> None:
        if isinstance(node, Mapping):
            for name, value in node.items():
                if name in _ENGINE_KEY_FIELDS and isinstance(value, str) and value:
                    keys.add(value)
                elif name == "engine" and isinstance(value, Mapping) and isinstance(value.get("key"), str):
                    keys.add(value["key"])
                walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    for status in statuses:
        walk(status)
    return frozenset(k for k in keys if k)


def served_result(status: InferenceServiceStatus) -> BuildResult | None:
    """The BuildResult of the engine in service, rebuilt from status.engine."""
    engine = status.engine
    if engine is None or not engine.key:
        return None
    return engine_result(engine)


def engine_result(engine: EngineStatus) -> BuildResult:
    """The BuildResult an engine's status records (what its pods' manifests are rendered from)."""
    return BuildResult(
        outcome=BuildOutcome.SUCCEEDED,
        engine_key=engine.key,
        artifact=engine.artifact,
        triton_backend=engine.triton_backend,
        inputs=tuple(_tensor(t) for t in engine.inputs),
        outputs=tuple(_tensor(t) for t in engine.outputs),
        cache_hit=engine.cache_hit,
        model_sha256=engine.model_sha256,
        model_revision=engine.model_revision,
    )


def _tensor(override: TensorOverride) -> TensorSpec:
    return TensorSpec.model_validate(override.model_dump(by_alias=True, exclude_none=True))


def engine_status(result: BuildResult, *, request_key: str, built_at: datetime | None) -> EngineStatus:
    """status.engine for a successful build, its strings cut to the schema (an accuracy note...).

    The tensors are not cut: the pods' config is rendered from them, so a build whose tensors do
    not fit is failed before this (`build_state.unservable_tensors`).
    """
    document: dict[str, Any] = {
        "key": result.engine_key,
        "requestKey": request_key,
        "artifact": result.artifact,
        "builtAt": built_at,
        "tritonBackend": result.triton_backend,
        "cacheHit": result.cache_hit,
        "modelSha256": result.model_sha256,
        "modelRevision": result.model_revision,
        "inputs": [t.model_dump(by_alias=True) for t in result.inputs],
        "outputs": [t.model_dump(by_alias=True) for t in result.outputs],
        "accuracy": result.accuracy.model_dump(by_alias=True) if result.accuracy else None,
    }
    cuts: list[str] = []
    _fit_object(document, EngineStatus, "engine.", cuts)
    if cuts:
        log.warning("build result cut to the CRD's limits: %s", "; ".join(cuts))
    return EngineStatus.model_validate(document)


def engine_profile(status: InferenceServiceStatus, *, max_batch_size: int) -> EngineProfile | None:
    """The policy's view of the engine, from the profile summary on the status.

    The summary keeps each batch size's P99 and throughput only; the policy reads the fitted
    service and compute times, so the points carry no P50/P95.
    """
    profile, engine = status.profile, status.engine
    if profile is None or not profile.points:
        return None
    one = profile.service_time.intercept_ms + profile.service_time.per_item_ms
    if not one > 0:
        # A batch that takes no time is a broken measurement, not an infinitely fast engine: sized by
        # it, any load would fit one replica. Without a profile the service time is learned online.
        return None
    return EngineProfile(
        engine_key=engine.key if engine else "",
        backend=engine.triton_backend if engine else "",
        precision="",
        hardware=profile.hardware,
        cpu_limit_millis=profile.cpu_limit_millis,
        reload=ReloadCost.model_validate(profile.reload.model_dump()) if profile.reload else None,
        max_batch_size=max_batch_size,
        points=[
            BatchProfilePoint(batch_size=p.batch_size, p99_ms=p.p99_ms, throughput_per_s=p.throughput_per_s)
            for p in profile.points
        ],
        service_time=_service_time(profile.service_time),
        compute_time=_service_time(profile.compute_time) if profile.compute_time else None,
        method="profile summary from the InferenceService status",
    )


def _service_time(fit: ServiceTimeStatus) -> ServiceTimeModel:
    return ServiceTimeModel(
        intercept_ms=fit.intercept_ms,
        per_item_ms=fit.per_item_ms,
        jitter_cv=fit.jitter_cv,
        per_request_ms=fit.per_request_ms,
    )


def service_time_of(profile: ProfileStatus) -> ServiceTimeModel:
    """The fitted service time of a profile on the status."""
    return _service_time(profile.service_time)


def comparison_status(
    comparison: EngineComparison,
    serving_key: str,
    candidate_key: str,
    verdict: Literal["Promoted", "Blocked", "Accepted"],
) -> EngineComparisonStatus:
    """status.engineComparison from the regression gate's comparison (unbounded figures are absent)."""

    def finite(value: float, digits: int) -> float | None:
        return round(value, digits) if math.isfinite(value) else None

    return EngineComparisonStatus(
        serving_engine_key=serving_key,
        candidate_engine_key=candidate_key,
        rate_per_s=round(comparison.rate_per_s, 3),
        replicas=comparison.replicas,
        serving_p99_ms=finite(comparison.serving.p99_ms, 3),
        candidate_p99_ms=finite(comparison.candidate.p99_ms, 3),
        serving_capacity_per_s=round(comparison.serving.capacity_per_s, 3),
        candidate_capacity_per_s=round(comparison.candidate.capacity_per_s, 3),
        regression_percent=finite(comparison.regression_percent, 1),
        verdict=verdict,
    )


# ---- what is in force ----------------------------------------------------------------------------


def batching_in_force(isvc: InferenceService, status: InferenceServiceStatus) -> BatchingConfig:
    """Spec values in fixed mode; in auto mode the autoscaler's choice, if still within the spec's bounds."""
    wanted = isvc.spec.batching.to_config()
    if isvc.spec.batching.mode is BatchingMode.FIXED or status.batching is None:
        return wanted
    chosen = status.batching.to_config()
    if (
        check_batching(chosen, engine_max_batch_size=wanted.max_batch_size)
        or chosen.instances_per_replica != wanted.instances_per_replica
    ):
        return wanted
    return chosen


def batching_status(batching: BatchingConfig) -> BatchingStatus:
    """status.batching for a batching config."""
    return BatchingStatus.from_config(batching)


def replicas_in_force(isvc: InferenceService, status: InferenceServiceStatus) -> int:
    """The replica count to run, within [minReplicas, maxReplicas].

    - Autoscaling off: spec.replicas (minReplicas when unset).
    - Autoscaling on: a manual scale not applied yet (`manual_scale_pending`) at once; otherwise the
      autoscaler's count (status.replicas); before there is one, spec.replicas (or minReplicas).

    A pass that rolls out this count records `applied_spec_replicas(isvc)` with it, so the same
    spec.replicas never overrides the autoscaler's later decisions, across restarts too.
    """
    bounds = isvc.spec.autoscaling
    asked = isvc.spec.replicas if isvc.spec.replicas is not None else bounds.min_replicas
    if bounds.enabled and status.replicas is not None and not manual_scale_pending(isvc, status):
        asked = status.replicas
    return int(max(bounds.min_replicas, min(bounds.max_replicas, asked)))


def manual_scale_pending(isvc: InferenceService, status: InferenceServiceStatus) -> bool:
    """Whether spec.replicas is a value the operator has not applied yet (e.g. a new `kubectl scale`).

    Compared with status.appliedSpecReplicas. Without that field (a status written before it existed,
    or before the first rollout) nothing is pending: the spec.replicas of that time counts as applied.
    """
    asked, applied = isvc.spec.replicas, status.applied_spec_replicas
    return asked is not None and applied is not None and asked != applied


def applied_spec_replicas(isvc: InferenceService) -> int:
    """status.appliedSpecReplicas once this spec's replica count is rolled out (0: spec.replicas unset)."""
    return 0 if isvc.spec.replicas is None else int(isvc.spec.replicas)


# ---- what the autoscaler saw, decided and learned ------------------------------------------------


def observed_status(observation: Observation) -> ObservedStatus:
    """status.observed: the service-level P99, queue depth, rate and where the time went, to 0.01."""

    def rounded(value: float | None) -> float | None:
        return None if value is None else round(value, 2)

    queue, server = observation.queue_time_ms, observation.service_time_ms
    client, p99 = observation.client_p99_ms, observation.p99_ms
    # What the clients see beyond Triton's tail; never below 0 (the two P99s are of different
    # windows and requests: a client P99 under the server's says nothing is outside).
    outside = None if client is None or p99 is None else max(0.0, client - p99)
    dominated: Literal["Queue", "Server"] | None = None
    if queue is not None and server is not None and (observation.request_rate or 0) > 0:
        dominated = "Queue" if queue > server else "Server"
    return ObservedStatus(
        p99_ms=rounded(observation.p99_ms),
        queue_depth=rounded(observation.queue_depth_per_replica),
        request_rate=rounded(observation.request_rate),
        queue_time_ms=rounded(queue),
        server_time_ms=rounded(server),
        compute_time_ms=rounded(observation.compute_time_ms),
        compute_input_time_ms=rounded(observation.compute_input_time_ms),
        compute_output_time_ms=rounded(observation.compute_output_time_ms),
        queue_time_p99_ms=rounded(observation.queue_time_p99_ms),
        compute_time_p99_ms=rounded(observation.compute_time_p99_ms),
        client_p99_ms=rounded(client),
        outside_server_p99_ms=rounded(outside),
        mean_batch_size=rounded(observation.mean_batch_size),
        batch_sizes=batch_sizes_status(observation),
        time_dominated_by=dominated,
        rates_from=observation.rates_from,
        at=datetime.fromtimestamp(observation.at_s, UTC) if observation.at_s > 0 else None,
    )


def batch_sizes_status(observation: Observation) -> list[BatchSizeStatus] | None:
    """status.observed.batchSizes: the executed sizes, bounded (the largest merged), shares to 0.001.

    None when not measured or when the window executed nothing (no list of nothing on the object).
    """
    sizes = observation.executed_batch_sizes
    if not sizes:
        return None
    return [
        BatchSizeStatus(
            size=size.size,
            max_size=size.max_size,
            executions=size.executions,
            request_share=round(size.request_share, 3),
            compute_ms=None if size.compute_ms is None else round(size.compute_ms, 3),
        )
        for size in bounded(sizes)
    ]


def decision_status(decision: Decision, *, at: datetime) -> DecisionStatus:
    """status.lastDecision."""
    return DecisionStatus(
        action=decision.action.value,
        reason=decision.reason,
        message=decision.message[:MAX_MESSAGE],
        time=at,
        replicas=decision.replicas,
        dry_run=decision.dry_run,
    )


def with_decision(
    history: list[DecisionRecordStatus], record: DecisionRecordStatus
) -> list[DecisionRecordStatus]:
    """status.decisions with `record` appended, the oldest dropped beyond `MAX_DECISION_HISTORY`."""
    return [*history, record][-MAX_DECISION_HISTORY:]


def learned_status(
    learned: Learned,
    fit: ServiceFit | None = None,
    *,
    headroom: float | None = None,
    rises: RiseHistory | None = None,
    idle: IdleHistory | None = None,
) -> LearnedStatus:
    """status.learned: corrections, hardware speed, start-up time once timed, the online service time.

    With the period's headroom and the rises behind it (the heaviest `MAX_RISE_BINS` bins), and the
    traffic's idle stretches.
    """
    startup = learned.replica_startup_s
    return LearnedStatus(
        headroom=None if headroom is None else round(headroom, 3),
        rises=(_rise_bins(rises) or None) if rises is not None else None,
        idle=None if idle is None or idle == IdleHistory() else idle_status(idle),
        model_correction_light_load=round(learned.correction_light, 3),
        model_correction_heavy_load=round(learned.correction_heavy, 3),
        service_time_scale=round(learned.service_scale, 3),
        service_time_slope_scale=round(learned.slope_scale, 3),
        replica_startup_seconds=None if startup is None else round(startup, 1),
        service_time=None
        if fit is None
        else ServiceTimeStatus(
            intercept_ms=round(fit.model.intercept_ms, 3),
            per_item_ms=round(fit.model.per_item_ms, 3),
            jitter_cv=round(fit.model.jitter_cv, 3),
        ),
        service_time_fit=None if fit is None else fit.quality.value,
        service_time_windows=None if fit is None else fit.samples,
        service_time_from=None if fit is None else fit.windows.value,
    )


def _rise_bins(rises: RiseHistory) -> list[str]:
    """The rises' bins as status.learned.rises strings, the heaviest first."""
    kept = [("r", *b) for b in rises.bins] + [("p", *b) for b in rises.peaks]
    kept.sort(key=lambda b: -b[3])
    return [
        f"{kind}:{band}:{value_bin}:{weight:.4g}" for kind, band, value_bin, weight in kept[:MAX_RISE_BINS]
    ]


def restored_rises(learned: LearnedStatus | None) -> RiseHistory:
    """The rises status.learned kept (a restarted operator starts from them; unreadable entries skipped)."""
    bins: list[tuple[int, int, float]] = []
    peaks: list[tuple[int, int, float]] = []
    for entry in (learned.rises or []) if learned is not None else []:
        try:
            kind, band, value_bin, weight = entry.split(":")
            row = (int(band), int(value_bin), float(weight))
        except ValueError:
            continue
        if kind in ("r", "p") and math.isfinite(row[2]) and row[2] > 0:
            (bins if kind == "r" else peaks).append(row)
    return RiseHistory(bins=tuple(sorted(bins)), peaks=tuple(sorted(peaks)))


def budget_status(left: Budget, ledger: BudgetLedger) -> ErrorBudgetStatus:
    """status.errorBudget: what is left of the budget, and the ledger it was counted from."""
    return ErrorBudgetStatus(
        objective_percent=round(100 * left.objective, 3),
        compliance_period_hours=max(1, round(left.period_s / 3600)),
        measured_seconds=round(left.measured_s, 1),
        missed_seconds=round(left.missed_s, 1),
        remaining_percent=round(100 * left.remaining, 2),
        buckets=[
            BudgetBucketStatus(start=start, met_seconds=round(met, 1), missed_seconds=round(missed, 1))
            for start, met, missed in ledger.buckets[-MAX_BUDGET_BUCKETS:]
        ],
    )


def restored_ledger(budget: ErrorBudgetStatus | None) -> BudgetLedger:
    """The ledger status.errorBudget kept (a restarted operator counts on from it)."""
    if budget is None:
        return BudgetLedger()
    return BudgetLedger(buckets=tuple((b.start, b.met_seconds, b.missed_seconds) for b in budget.buckets))


def restored_memory(status: InferenceServiceStatus) -> PeriodMemory:
    """What a restarted operator's first control period starts from: what the status kept.

    The fit, the rises behind the headroom, the idle stretches and the error budget's ledger (the
    learned factors are the policy state's, `restore_learned`).
    """
    return PeriodMemory(
        fitted=restored_fit(status.learned),
        rises=restored_rises(status.learned),
        idle=restored_idle(status.learned),
        ledger=restored_ledger(status.error_budget),
    )


def served_engine(isvc: InferenceService, status: InferenceServiceStatus) -> ServedEngine:
    """The engine in force as the control period knows it (its key, backend and max batch size)."""
    engine = status.engine
    return ServedEngine(
        key=engine.key if engine else "",
        backend=engine.triton_backend if engine else "",
        max_batch_size=isvc.spec.batching.max_batch_size,
    )


def restored_fit(learned: LearnedStatus | None) -> ServiceFit | None:
    """The fitted service time the status kept (a restarted operator starts from it), if Fitted."""
    if learned is None or learned.service_time is None or learned.service_time_fit != FitQuality.FITTED.value:
        return None
    return ServiceFit(
        model=_service_time(learned.service_time),
        quality=FitQuality.FITTED,
        samples=learned.service_time_windows or 0,
        batch_range=(0.0, 0.0),
        # Not kept by an operator before serviceTimeFrom: Mixed, "not known", which saturated windows
        # replace as they would a fit of steady ones.
        windows=WindowKind(learned.service_time_from or WindowKind.MIXED.value),
    )


def restore_learned(state: PolicyState, learned: LearnedStatus | None) -> PolicyState:
    """The state with what `learned_status` wrote: a restarted operator keeps what it learned."""
    if learned is None:
        return state
    start = state.learned

    def either(value: float | None, default: float) -> float:
        return default if value is None else value

    return replace(
        state,
        learned=Learned(
            correction_light=either(learned.model_correction_light_load, start.correction_light),
            correction_heavy=either(learned.model_correction_heavy_load, start.correction_heavy),
            service_scale=either(learned.service_time_scale, start.service_scale),
            slope_scale=either(learned.service_time_slope_scale, start.slope_scale),
            replica_startup_s=(
                start.replica_startup_s
                if learned.replica_startup_seconds is None
                else learned.replica_startup_seconds
            ),
        ),
    )
