"""Which GPU product serves a service, and on how many replicas: the lowest price that holds the SLO (pure).

A service may list several GPU products (`spec.runtime.gpu.products`), each with a price per GPU-hour.
Every product gets its own engine and profile (a TensorRT plan runs only on the product it was built
for), so each product's capacity at the SLO is known before anything moves. At the demand rate, each
product is sized the way `decide` sizes replicas (`core.fewest_replicas_at`: the same model, batching
candidates and SLO margin), within the replicas its nodes can hold; its cost is replicas x GPUs per
replica x price. The cheapest product that holds the SLO is the best one.

Moving is not free: the new product's replicas start (and are paid for) while the old ones still serve,
for about the replicas' start-up time, and a rolling update moves the pods. So a service moves only when

- the product serving cannot hold the SLO at the demand rate (its bound or its free GPUs are too few),
  or has no profile: at once, to the cheapest one that can (`MovedForCapacity`); or
- another product is cheaper by at least `MIN_SAVING` of the current cost, and has stayed the
  cheapest for `MOVE_DWELL_S` and for the time its saving takes to pay for the move, and the last move
  is `MOVE_COOLDOWN_S` old (`MovedForCost`). While the dwell runs, the decision says so
  (`MoveDeferred`).

A service not placed yet (no product serving) takes the cheapest product that holds the SLO at once.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Final

from tailpilot.api.autoscaling import BatchingConfig
from tailpilot.api.engine import EngineProfile
from tailpilot.policy.config import PolicyConfig
from tailpilot.policy.core import fewest_replicas_at
from tailpilot.policy.model import BatchShape, capacity_per_s

#: Least saving, as a share of the current cost per hour, worth a move.
MIN_SAVING: Final = 0.10
#: How long another product must stay the cheapest before a move for cost.
MOVE_DWELL_S: Final = 300.0
#: No move for cost within this long of the last move (capacity moves are never held).
MOVE_COOLDOWN_S: Final = 600.0

#: Decision reasons (CamelCase, for conditions and Events).
REASON_CHEAPEST: Final = "CheapestHoldingSLO"
REASON_PLACED: Final = "PlacedOnCheapest"
REASON_MOVED_FOR_COST: Final = "MovedForCost"
REASON_MOVED_FOR_CAPACITY: Final = "MovedForCapacity"
REASON_MOVE_DEFERRED: Final = "MoveDeferred"
REASON_NO_PRODUCT: Final = "NoProductHoldsSLO"
REASON_WAITING: Final = "WaitingForProfiles"


@dataclass(frozen=True)
class ProductOption:
    """One GPU product a service may run on, as far as it is known."""

    product: str
    price_per_gpu_hour: float
    gpus_per_replica: int
    #: The product's engine profile; None until it is profiled (or when profiling failed).
    profile: EngineProfile | None
    #: Replicas the product's nodes can hold for this service now (free GPUs, plus those the service
    #: holds there); None when not known (no limit beyond the spec's bound).
    replicas_available: int | None = None
    #: Why the product cannot be used at all (e.g. its build failed); empty when it can.
    unusable: str = ""


@dataclass(frozen=True)
class ProductFigures:
    """What one product would take at the demand rate."""

    product: str
    price_per_gpu_hour: float
    #: Fewest replicas holding the SLO there; None when it cannot (see `why_not`).
    replicas: int | None
    #: The highest rate one replica serves within the SLO (minus its margin); None unprofiled.
    capacity_per_replica_per_s: float | None
    why_not: str = ""
    #: Replicas x GPUs per replica x price; None when the product cannot hold the SLO.
    cost_per_hour: float | None = None


@dataclass(frozen=True)
class MoveMemory:
    """What the choice remembers between calls (the caller keeps it)."""

    #: The product found cheaper than the serving one, and since when (seconds, the caller's clock).
    cheaper: str | None = None
    cheaper_since_s: float | None = None
    #: When the service last moved (or was first placed).
    moved_at_s: float | None = None


@dataclass(frozen=True)
class ProductChoice:
    """Where the service should serve now."""

    #: The product to serve on (the current one when nothing moves; None: nothing can be chosen yet).
    product: str | None
    #: Replicas it needs there at the demand rate (None when unknown).
    replicas: int | None
    moved: bool
    reason: str
    message: str
    figures: tuple[ProductFigures, ...]
    memory: MoveMemory


def size_products(
    options: tuple[ProductOption, ...], *, config: PolicyConfig, rate_per_s: float, batching: BatchingConfig
) -> tuple[ProductFigures, ...]:
    """Each product's fewest replicas and cost at `rate_per_s` (pure)."""
    out: list[ProductFigures] = []
    for option in options:
        capacity = _capacity(option, config, batching)
        if option.unusable or option.profile is None:
            why = option.unusable or "not profiled yet"
            out.append(ProductFigures(option.product, option.price_per_gpu_hour, None, capacity, why))
            continue
        most = config.max_replicas if option.replicas_available is None else option.replicas_available
        n = fewest_replicas_at(
            config=config, profile=option.profile, rate_per_s=rate_per_s, batching=batching, most=most
        )
        if n is None:
            why = (
                f"its nodes hold {option.replicas_available} replica(s), too few"
                if option.replicas_available is not None and option.replicas_available < config.max_replicas
                else f"{config.max_replicas} replica(s) (the bound) are too few"
            )
            out.append(ProductFigures(option.product, option.price_per_gpu_hour, None, capacity, why))
            continue
        cost = n * option.gpus_per_replica * option.price_per_gpu_hour
        out.append(ProductFigures(option.product, option.price_per_gpu_hour, n, capacity, "", round(cost, 4)))
    return tuple(out)


def choose_product(
    options: tuple[ProductOption, ...],
    *,
    current: str | None,
    config: PolicyConfig,
    rate_per_s: float,
    batching: BatchingConfig,
    startup_s: float,
    now_s: float,
    memory: MoveMemory,
) -> ProductChoice:
    """The product (and replicas) to serve on now, with the guardrails of a move (pure)."""
    figures = size_products(options, config=config, rate_per_s=rate_per_s, batching=batching)
    holding = [f for f in figures if f.cost_per_hour is not None]
    by_name = {f.product: f for f in figures}
    here = by_name.get(current) if current else None

    def done(
        product: str | None, reason: str, message: str, mem: MoveMemory, moved: bool = False
    ) -> ProductChoice:
        replicas = by_name[product].replicas if product in by_name else None
        return ProductChoice(product, replicas, moved, reason, message, figures, mem)

    if not holding:
        pending = [f.product for f in figures if f.why_not == "not profiled yet"]
        if here is None and pending:
            return done(None, REASON_WAITING, f"waiting for the profiles of {', '.join(pending)}", memory)
        return done(
            current,
            REASON_NO_PRODUCT,
            f"no product holds the SLO at {rate_per_s:.1f} req/s: {_why_nots(figures)}",
            memory,
        )
    best = min(holding, key=lambda f: (f.cost_per_hour, f.product != current, f.product))
    assert best.cost_per_hour is not None
    if here is None or here.cost_per_hour is None:
        placed = MoveMemory(moved_at_s=now_s)
        if current is None or here is None:
            return done(best.product, REASON_PLACED, _placed(best, figures), placed, moved=True)
        return done(
            best.product,
            REASON_MOVED_FOR_CAPACITY,
            f"{current} cannot hold the SLO ({here.why_not}); {_placed(best, figures)}",
            placed,
            moved=True,
        )
    if best.product == current:
        return done(
            current,
            REASON_CHEAPEST,
            _placed(best, figures),
            replace(memory, cheaper=None, cheaper_since_s=None),
        )
    saving = here.cost_per_hour - best.cost_per_hour
    if saving < MIN_SAVING * here.cost_per_hour:
        return done(
            current,
            REASON_CHEAPEST,
            f"{best.product} would save {_money(saving)}/h, under {MIN_SAVING:.0%} of "
            f"{_money(here.cost_per_hour)}/h; {_placed(here, figures)}",
            replace(memory, cheaper=None, cheaper_since_s=None),
        )
    since = (
        memory.cheaper_since_s
        if memory.cheaper == best.product and memory.cheaper_since_s is not None
        else now_s
    )
    kept = replace(memory, cheaper=best.product, cheaper_since_s=since)
    # The move's price: the new replicas run beside the old ones while they start.
    move_cost = best.cost_per_hour * startup_s / 3600.0
    payback_s = 3600.0 * move_cost / saving
    dwell_s = max(MOVE_DWELL_S, payback_s)
    cooling = memory.moved_at_s is not None and now_s - memory.moved_at_s < MOVE_COOLDOWN_S
    if now_s - since < dwell_s or cooling:
        wait = max(
            dwell_s - (now_s - since),
            MOVE_COOLDOWN_S - (now_s - memory.moved_at_s)
            if cooling and memory.moved_at_s is not None
            else 0.0,
        )
        return done(
            current,
            REASON_MOVE_DEFERRED,
            f"{best.product} would save {_money(saving)}/h ({_fleet(best)} against {_fleet(here)}); "
            f"moving once it stays the cheapest another {math.ceil(wait)} s",
            kept,
        )
    return done(
        best.product,
        REASON_MOVED_FOR_COST,
        f"{best.product} saves {_money(saving)}/h: {_fleet(best)} against {_fleet(here)}, the cheapest "
        f"for {now_s - since:.0f} s (the move costs about {_money(move_cost)})",
        MoveMemory(moved_at_s=now_s),
        moved=True,
    )


def capacity_at_slo(*, config: PolicyConfig, profile: EngineProfile, batching: BatchingConfig) -> float:
    """The highest request rate one replica serves within the SLO minus its margin (bisected, pure)."""
    one = replace(config, min_replicas=1)
    # No replica serves more than at full batches of the engine's largest size.
    biggest = profile.max_batch_size
    top = capacity_per_s(
        BatchShape(
            max_batch=biggest, delay_ms=0.0, instances=batching.instances_per_replica, fill_target=biggest
        ),
        profile.service_time,
    )
    if not math.isfinite(top):
        return math.inf
    low, high = 0.0, top
    if fewest_replicas_at(config=one, profile=profile, rate_per_s=low, batching=batching, most=1) is None:
        return 0.0
    for _ in range(24):
        mid = (low + high) / 2
        if fewest_replicas_at(config=one, profile=profile, rate_per_s=mid, batching=batching, most=1) is None:
            high = mid
        else:
            low = mid
    return low


def _capacity(option: ProductOption, config: PolicyConfig, batching: BatchingConfig) -> float | None:
    if option.profile is None:
        return None
    return round(capacity_at_slo(config=config, profile=option.profile, batching=batching), 2)


def _placed(best: ProductFigures, figures: tuple[ProductFigures, ...]) -> str:
    others = "; ".join(
        f"{f.product} {f.replicas} x {_money(f.price_per_gpu_hour)} = {_money(f.cost_per_hour)}/h"
        if f.cost_per_hour is not None
        else f"{f.product}: {f.why_not}"
        for f in figures
        if f.product != best.product
    )
    text = f"{best.product}: {best.replicas} replica(s) at {_money(best.cost_per_hour or 0.0)}/h"
    return text + (f" (others: {others})" if others else "")


def _fleet(f: ProductFigures) -> str:
    return f"{f.replicas} x {f.product} at {_money(f.cost_per_hour or 0.0)}/h"


def _why_nots(figures: tuple[ProductFigures, ...]) -> str:
    return "; ".join(f"{f.product}: {f.why_not}" for f in figures)


def _money(value: float) -> str:
    return f"${value:.2f}"
