"""The product choice's status records: a move's replicas, the memory after a restart, the options."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from tailpilot.api.v1alpha1 import (
    GpuCandidateStatus,
    GpuChoiceStatus,
    InferenceService,
    InferenceServiceStatus,
    ServiceTimeStatus,
)
from tailpilot.controllers.gpu.gpu_products import (
    choice_status,
    memory_of,
    options_of,
    price_of,
    serving_spec,
)
from tailpilot.policy.gpu_choice import MoveMemory, ProductChoice, ProductFigures
from tests.controllers.specs import service as make_service

H100, L4 = "NVIDIA-H100-80GB-HBM3", "NVIDIA-L4"
NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)


def service() -> InferenceService:
    gpu = {"products": [{"name": H100}, {"name": L4, "pricePerHour": 0.5}], "count": 2}
    return make_service(runtime={"device": "gpu", "gpu": gpu})


def moved(product: str, replicas: int) -> ProductChoice:
    figure = ProductFigures(product, 1.0, replicas, 10.0, "", float(replicas))
    return ProductChoice(product, replicas, True, "MovedForCost", "m", (figure,), MoveMemory())


def test_a_move_starts_at_the_new_products_size_and_leaves_nothing_to_shrink():
    # A move an earlier operator version began at the old count is superseded by a new one.
    previous = GpuChoiceStatus(product=L4, moving_to=L4, replicas_after_move=3)
    move = choice_status(previous, moved(H100, 2), [], now=NOW)
    assert (move.product, move.moving_to, move.replicas_after_move, move.moved_at) == (H100, H100, None, NOW)
    placed = choice_status(None, moved(L4, 6), [], now=NOW)
    assert (placed.product, placed.moving_to, placed.replicas_after_move) == (L4, None, None)


def test_a_restarted_operator_keeps_the_last_moves_time():
    status = GpuChoiceStatus(product=L4, moved_at=NOW - timedelta(seconds=120))
    assert memory_of(status, now=NOW, now_s=1000.0).moved_at_s == 880.0
    assert memory_of(None, now=NOW, now_s=1000.0).moved_at_s is None


def test_prices_from_the_spec_over_the_operators_table_and_the_pinned_spec():
    isvc = service()
    table = {H100: 4.0, L4: 0.8}
    assert (price_of(isvc, H100, table), price_of(isvc, L4, table), price_of(isvc, "NVIDIA-A10G", table)) == (
        4.0,
        0.5,
        None,
    )
    pinned = serving_spec(isvc, _status(L4))
    assert pinned.spec.runtime.gpu is not None and pinned.spec.runtime.gpu.product == L4
    assert pinned.spec.runtime.gpu.products is None and pinned.spec.runtime.gpu.count == 2
    assert serving_spec(isvc, _status("NVIDIA-A10G")) is isvc  # not allowed by the spec: not placed


def test_options_say_why_a_product_cannot_be_chosen():
    fit = ServiceTimeStatus(intercept_ms=1.0, per_item_ms=0.1)
    candidates = [
        GpuCandidateStatus(product=H100, phase="Profiled", service_time=fit),  # no price
        GpuCandidateStatus(
            product=L4, phase="NoCapacity", price_per_hour=0.5, message="no node of NVIDIA-L4 has a free GPU"
        ),
    ]
    by = {o.product: o for o in options_of(service(), candidates)}
    assert "no price" in by[H100].unusable and by[H100].profile is not None
    assert by[L4].unusable == "no node of NVIDIA-L4 has a free GPU" and by[L4].gpus_per_replica == 2


def _status(product: str) -> InferenceServiceStatus:
    return InferenceServiceStatus(gpu=GpuChoiceStatus(product=product))
