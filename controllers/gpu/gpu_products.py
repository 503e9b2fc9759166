"""A service that lists several GPU products: its status records and the choice's inputs (pure).

The reconciler builds and profiles an engine per product (`GpuCandidateStatus` on
`status.gpu.candidates`) and serves the product `status.gpu.product` names, through a copy of the
service pinned to it (`serving_spec`): every manifest, build and profile request then reads one
product, as for a service that names a single one. The autoscaler moves `status.gpu.product`
(`tailpilot.policy.gpu_choice`); this module turns the status into the choice's inputs and its
answer back into status.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from tailpilot.api import constants as c
from tailpilot.api.engine import EngineProfile, ServiceTimeModel
from tailpilot.api.v1alpha1 import (
    EngineCandidateStatus,
    GpuCandidateStatus,
    GpuChoiceStatus,
    InferenceService,
    InferenceServiceStatus,
    Precision,
)
from tailpilot.controllers.core.conditions import ConditionUpdate
from tailpilot.policy import gpu_choice
from tailpilot.policy.gpu_choice import MoveMemory, ProductChoice, ProductOption

#: Candidate phases (GpuCandidateStatus.phase).
PHASE_BUILDING = "Building"
#: Built, its profile waiting for another candidate's measurement on the same hardware to end.
PHASE_BUILT = "Built"
PHASE_PROFILING = "Profiling"
PHASE_PROFILED = "Profiled"
PHASE_SERVING = "Serving"
PHASE_FAILED = "Failed"
PHASE_NO_CAPACITY = "NoCapacity"
#: Phases after which nothing more is learned about a candidate until its request changes.
SETTLED = frozenset({PHASE_PROFILED, PHASE_SERVING, PHASE_FAILED, PHASE_NO_CAPACITY})


def chooses_product(isvc: InferenceService) -> bool:
    """Whether the service lists several GPU products (spec.runtime.gpu.products)."""
    gpu = isvc.spec.runtime.gpu
    return gpu is not None and gpu.chooses_product


def serving_product(isvc: InferenceService, status: InferenceServiceStatus) -> str | None:
    """The product serving (status.gpu.product) while the spec still allows it; None: not placed yet."""
    gpu = isvc.spec.runtime.gpu
    product = status.gpu.product if status.gpu else None
    if gpu is None or product is None or product not in gpu.allowed_products():
        return None
    return product


def serving_spec(isvc: InferenceService, status: InferenceServiceStatus) -> InferenceService:
    """The service as its pods run it: pinned to the product and the precision serving.

    That is, to `status.gpu.product` when the spec lists several products, and to
    `status.precision.precision` under `precision: auto`.
    """
    if isvc.spec.engine.precision is Precision.AUTO and status.precision and status.precision.precision:
        isvc = isvc.with_precision(Precision(status.precision.precision))
    if not chooses_product(isvc):
        return isvc
    product = serving_product(isvc, status)
    return isvc.on_product(product) if product else isvc


def price_of(isvc: InferenceService, product: str, table: Mapping[str, float]) -> float | None:
    """The service's own price for `product`, else the operator's table; None when neither has one."""
    gpu = isvc.spec.runtime.gpu
    for option in (gpu.products or []) if gpu else []:
        if option.name == product and option.price_per_hour is not None:
            return option.price_per_hour
    return table.get(product)


def candidate_profile(
    candidate: EngineCandidateStatus, *, name: str, max_batch_size: int
) -> EngineProfile | None:
    """The policy's view of a candidate's engine (its fitted service time), or None unprofiled."""
    fit = candidate.service_time
    if fit is None:
        return None
    return EngineProfile(
        engine_key=candidate.engine_key,
        backend="",
        precision="",
        hardware=name,
        max_batch_size=min(max_batch_size, candidate.max_batch_size or max_batch_size),
        points=[],
        service_time=ServiceTimeModel(
            intercept_ms=fit.intercept_ms, per_item_ms=fit.per_item_ms, jitter_cv=fit.jitter_cv
        ),
        method="profile summary of a candidate engine",
    )


def options_of(
    isvc: InferenceService,
    candidates: list[GpuCandidateStatus],
    *,
    serving_profile: EngineProfile | None = None,
) -> tuple[ProductOption, ...]:
    """The choice's inputs: one per candidate; the serving product's with the profile it serves with."""
    gpu = isvc.spec.runtime.gpu
    count = gpu.count if gpu else 1
    current = candidates_serving(candidates)
    out = []
    for cand in candidates:
        profile = (
            serving_profile
            if cand.product == current and serving_profile is not None
            else candidate_profile(cand, name=cand.product, max_batch_size=isvc.spec.batching.max_batch_size)
        )
        unusable = ""
        if cand.price_per_hour is None:
            unusable = "no price (spec.runtime.gpu.products[].pricePerHour or the operator's gpuPrices)"
        elif cand.phase == PHASE_FAILED:
            unusable = cand.message or "its engine failed"
        elif cand.phase == PHASE_NO_CAPACITY:
            unusable = cand.message or "no node of the product has a free GPU"
        out.append(
            ProductOption(
                product=cand.product,
                price_per_gpu_hour=cand.price_per_hour or 0.0,
                gpus_per_replica=count,
                profile=profile,
                replicas_available=cand.replicas_available,
                unusable=unusable,
            )
        )
    return tuple(out)


def candidates_serving(candidates: list[GpuCandidateStatus]) -> str | None:
    """The candidate marked as serving."""
    return next((x.product for x in candidates if x.phase == PHASE_SERVING), None)


def with_figures(candidates: list[GpuCandidateStatus], choice: ProductChoice) -> list[GpuCandidateStatus]:
    """The candidates with what the choice computed for each (replicas needed, cost, capacity)."""
    figures = {f.product: f for f in choice.figures}
    out = []
    for cand in candidates:
        f = figures.get(cand.product)
        if f is None:
            out.append(cand)
            continue
        out.append(
            cand.model_copy(
                update={
                    "replicas_needed": f.replicas,
                    "cost_per_hour": round(f.cost_per_hour, 4) if f.cost_per_hour is not None else None,
                    "capacity_per_replica_per_s": f.capacity_per_replica_per_s,
                }
            )
        )
    return out


def choice_status(
    previous: GpuChoiceStatus | None,
    choice: ProductChoice,
    candidates: list[GpuCandidateStatus],
    *,
    now: datetime,
) -> GpuChoiceStatus:
    """status.gpu after a choice: the product, the reason and figures, and a move's bookkeeping."""
    base = previous or GpuChoiceStatus()
    update: dict[str, Any] = {
        # A choice that cannot name a product (profiles pending) leaves one already serving in place.
        "product": choice.product or base.product,
        "reason": choice.reason,
        "message": choice.message[:4096],
        "candidates": with_figures(candidates, choice),
    }
    if choice.moved:
        update["moved_at"] = now
        # The new product's own fleet starts (status.replicas); the old pods serve beside it, their
        # ReplicaSet released from the Deployment, until every new pod is ready
        # (`tailpilot.controllers.reconcile.move_handover`). Nothing is left to shrink afterwards.
        placed = previous is None or previous.product is None
        update["moving_to"] = None if placed else choice.product
        update["replicas_after_move"] = None
    return base.model_copy(update=update)


def memory_of(status: GpuChoiceStatus | None, *, now: datetime, now_s: float) -> MoveMemory:
    """The choice's memory after a restart: the last move's time from the status, on the caller's clock."""
    if status is None or status.moved_at is None:
        return MoveMemory()
    return MoveMemory(moved_at_s=now_s - (now - status.moved_at).total_seconds())


def choice_condition(status: GpuChoiceStatus | None) -> ConditionUpdate | None:
    """GpuProductChosen from status.gpu (None when the service names one product)."""
    if status is None:
        return None
    if status.product is None:
        return ConditionUpdate(
            c.CONDITION_GPU_PRODUCT_CHOSEN,
            c.STATUS_FALSE,
            status.reason or gpu_choice.REASON_WAITING,
            status.message,
        )
    return ConditionUpdate(
        c.CONDITION_GPU_PRODUCT_CHOSEN,
        c.STATUS_TRUE,
        status.reason or gpu_choice.REASON_CHEAPEST,
        f"serving on {status.product}: {status.message}"[:4096],
    )
