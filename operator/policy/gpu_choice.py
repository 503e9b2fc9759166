"""Which GPU product serves a service, and on how many replicas: the lowest price that holds the SLO (pure).

A service may list several GPU products (`spec.runtime.gpu.products`), each with a price per GPU-hour.
Every product gets its own engine and profile (a TensorRT plan runs only on the product it was built
for), so each product's capacity at the SLO is known before anything moves. Each product is sized the
way `decide` sizes replicas (`core.fewest_replicas_at`: the same model, batching candidates and SLO
margin, and the same recent bursts of the arrival curve, which a slow product needs many more replicas
to absorb), within the replicas its nodes can hold; its cost is replicas x GPUs per replica x price.
The cheapest product that holds the SLO is the best one; on equal cost, the one serving, then the one
with more capacity per replica.

Moving is not free: the new product's replicas (its own fleet at the demand) start and are paid for
while the old ones still serve, for about the replicas' start-up time. So a service moves only when

- the product serving cannot hold the SLO at the demand rate (its bound or its free GPUs are too few):
  at once, to the cheapest one that can (`MovedForCapacity`); or
- the product serving, sized to hold the SLO, missed it in practice in a quarter of the decisions of
  the last `MOVE_DWELL_S` (bursts its smaller replicas absorb too slowly): to the cheapest product with
  more capacity per replica (`MovedForSLO`); a product that missed so is not moved back to for cost
  while it is remembered (`COST_HISTORY_S`); or
- another product was cheaper by at least `MIN_SAVING` on average over the last `MOVE_DWELL_S` (longer
  when the saving takes longer to pay for the move), held the SLO at every call of that window, and
  the last move is `MOVE_COOLDOWN_S` old (`MovedForCost`). Averages, not every call: on bursty traffic
  the cheapest product flips from one call to the next, and a dwell that restarts at each flip never
  ends. While the window fills, the decision says so (`MoveDeferred`).

A service not placed yet (no product serving) takes the cheapest product that holds the SLO at once.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Final

from tailpilot.api.autoscaling import BatchingConfig, Observation
from tailpilot.api.engine import EngineProfile, ServiceTimeModel
from tailpilot.policy.bursts import NO_BURSTS, Bursts
from tailpilot.policy.config import PolicyConfig
from tailpilot.policy.core import fewest_replicas_at, observed_bursts
from tailpilot.policy.model import BatchShape, capacity_per_s

#: Least saving, as a share of the current cost per hour, worth a move.
MIN_SAVING: Final = 0.10
#: The shortest window over which another product must have been cheaper on average before a move.
MOVE_DWELL_S: Final = 300.0
#: The longest window of costs (and SLO misses) remembered.
COST_HISTORY_S: Final = 1800.0
#: Share of a window's calls whose observed P99 missed the SLO from which the product serving is
#: found not to hold it in practice (its replicas too few, too slowly, for the bursts it sees).
MISS_SHARE: Final = 0.25
#: Fewest calls on the product serving, since it was moved to, before its misses count.
MIN_MISS_CALLS: Final = 4
#: No move for cost within this long of the last move (capacity moves are never held).
MOVE_COOLDOWN_S: Final = 600.0

#: Decision reasons (CamelCase, for conditions and Events).
REASON_CHEAPEST: Final = "CheapestHoldingSLO"
REASON_PLACED: Final = "PlacedOnCheapest"
REASON_MOVED_FOR_COST: Final = "MovedForCost"
REASON_MOVED_FOR_CAPACITY: Final = "MovedForCapacity"
REASON_MOVED_FOR_SLO: Final = "MovedForSLO"
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

    #: Each call's cost per hour of every product's sized fleet, (time, ((product, cost or None),
    #: ...)), over the last `COST_HISTORY_S` (seconds, the caller's clock).
    costs: tuple[tuple[float, tuple[tuple[str, float | None], ...]], ...] = ()
    #: When the service last moved (None: never, or only placed).
    moved_at_s: float | None = None
    #: Each call's product serving and whether its observed P99 missed the SLO, (time, product,
    #: missed), over the last `COST_HISTORY_S`; kept across moves.
    misses: tuple[tuple[float, str, bool], ...] = ()


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
    options: tuple[ProductOption, ...],
    *,
    config: PolicyConfig,
    rate_per_s: float,
    batching: BatchingConfig,
    bursts: Bursts = NO_BURSTS,
) -> tuple[ProductFigures, ...]:
    """Each product's fewest replicas and cost at `rate_per_s`, absorbing `bursts` (pure)."""
    out: list[ProductFigures] = []
    for option in options:
        capacity = _capacity(option, config, batching)
        if option.unusable or option.profile is None:
            why = option.unusable or "not profiled yet"
            out.append(ProductFigures(option.product, option.price_per_gpu_hour, None, capacity, why))
            continue
        most = config.max_replicas if option.replicas_available is None else option.replicas_available
        n = fewest_replicas_at(
            config=config,
            profile=option.profile,
            rate_per_s=rate_per_s,
            batching=batching,
            most=most,
            bursts=bursts,
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
    observation: Observation,
    batching: BatchingConfig,
    startup_s: float,
    now_s: float,
    memory: MoveMemory,
    headroom: float = 1.0,
) -> ProductChoice:
    """The product (and replicas) to serve on now, with the guardrails of a move (pure).

    The demand is the observation's: its request rate (the recent one when higher) times `headroom`
    (the rise the traffic showed within a reaction time, `tailpilot.policy.headroom`, which `decide`
    sizes the fleet for too), and the bursts of its arrival curve, as `decide` reads them. With the
    headroom, a product whose small replicas must be many to hold the rises costs what holding them
    costs, not what the mean rate would.

    Stages, the first that decides wins: no product holds the SLO (`_none_holds`); the service is not
    placed yet, or its product cannot hold the SLO (`_placement`); its product missed the SLO in
    practice (`_move_for_slo`); else the costs compare (`_cost_choice`).
    """
    call = _sized_call(
        options,
        current=current,
        config=config,
        observation=observation,
        batching=batching,
        now_s=now_s,
        memory=memory,
        headroom=headroom,
    )
    if not call.holding:
        return _none_holds(call)
    here = call.here
    if current is None or here is None or here.cost_per_hour is None:
        return _placement(call)
    slo_move = _move_for_slo(call, current=current, now_s=now_s)
    if slo_move is not None:
        return slo_move
    return _cost_choice(
        call,
        current=current,
        here=here,
        options=options,
        startup_s=startup_s,
        now_s=now_s,
        hold_s=config.scale_down_stabilization_s,
    )


@dataclass(frozen=True)
class _Call:
    """One call of the choice: the products sized at the demand, and the memory with this call in it."""

    current: str | None
    rate_per_s: float
    figures: tuple[ProductFigures, ...]
    #: The products that hold the SLO at the demand (a cost per hour).
    holding: tuple[ProductFigures, ...]
    by_name: dict[str, ProductFigures]
    #: The product serving's figures; None when nothing serves or the spec no longer lists it.
    here: ProductFigures | None
    #: Each product's capacity per replica at the SLO (0 when unprofiled).
    capacity: dict[str, float]
    #: The memory with this call's costs and miss (kept when nothing moves).
    remembered: MoveMemory
    #: The memory after a move: the move's time, the misses kept.
    moved: MoveMemory

    def choice(
        self, product: str | None, reason: str, message: str, memory: MoveMemory, moved: bool = False
    ) -> ProductChoice:
        """The choice of `product` (its replicas from this call's figures), with this call's figures."""
        replicas = self.by_name[product].replicas if product in self.by_name else None
        return ProductChoice(product, replicas, moved, reason, message, self.figures, memory)


def _sized_call(
    options: tuple[ProductOption, ...],
    *,
    current: str | None,
    config: PolicyConfig,
    observation: Observation,
    batching: BatchingConfig,
    now_s: float,
    memory: MoveMemory,
    headroom: float,
) -> _Call:
    """Size every product at the observation's demand and remember this call."""
    rate = max(observation.request_rate or 0.0, observation.recent_request_rate or 0.0)
    bursts = observed_bursts(observation, rate_per_s=rate)
    sized = rate * max(1.0, headroom)
    figures = size_products(options, config=config, rate_per_s=sized, batching=batching, bursts=bursts)
    by_name = {f.product: f for f in figures}
    missed = observation.p99_ms is not None and observation.p99_ms > config.p99_target_ms
    remembered = _remember(memory, figures, now_s, current=current, missed=missed)
    return _Call(
        current=current,
        rate_per_s=rate,
        figures=figures,
        holding=tuple(f for f in figures if f.cost_per_hour is not None),
        by_name=by_name,
        here=by_name.get(current) if current else None,
        capacity={f.product: f.capacity_per_replica_per_s or 0.0 for f in figures},
        remembered=remembered,
        moved=MoveMemory(moved_at_s=now_s, misses=remembered.misses),
    )


def _none_holds(call: _Call) -> ProductChoice:
    """No product holds the SLO: wait for the profiles still to come, else stay and say why not."""
    pending = [f.product for f in call.figures if f.why_not == "not profiled yet"]
    if call.here is None and pending:
        return call.choice(
            None, REASON_WAITING, f"waiting for the profiles of {', '.join(pending)}", call.remembered
        )
    return call.choice(
        call.current,
        REASON_NO_PRODUCT,
        f"no product holds the SLO at {call.rate_per_s:.1f} req/s: {_why_nots(call.figures)}",
        call.remembered,
    )


def _placement(call: _Call) -> ProductChoice:
    """Put the service on the cheapest product holding the SLO: placed, or moved for capacity.

    Placed when nothing serves yet (or the spec no longer allows the product serving); moved at once
    when the product serving cannot hold the SLO.
    """
    best = min(
        call.holding,
        key=lambda f: (f.cost_per_hour, f.product != call.current, -call.capacity[f.product], f.product),
    )
    if call.current is None or call.here is None:
        # Placed (or the spec no longer allows the product serving): no cooldown, the dwell still applies.
        placed = MoveMemory(misses=call.remembered.misses)
        return call.choice(best.product, REASON_PLACED, _placed(best, call.figures), placed, moved=True)
    return call.choice(
        best.product,
        REASON_MOVED_FOR_CAPACITY,
        f"{call.current} cannot hold the SLO ({call.here.why_not}); {_placed(best, call.figures)}",
        call.moved,
        moved=True,
    )


def _move_for_slo(call: _Call, *, current: str, now_s: float) -> ProductChoice | None:
    """Move to the cheapest roomier product when `current` missed the SLO in practice; None: no move.

    Missed: in `MISS_SHARE` of at least `MIN_MISS_CALLS` decisions of the last `MOVE_DWELL_S` since
    it was moved to. Roomier: more capacity per replica, and not a product that missed so itself.
    """
    remembered, capacity = call.remembered, call.capacity
    share, calls = _miss_share(remembered, current, since_s=max(now_s - MOVE_DWELL_S, _since(remembered)))
    if calls >= MIN_MISS_CALLS and share >= MISS_SHARE:
        roomier = [
            f
            for f in call.holding
            if capacity[f.product] > capacity[current] and not _missed_there(remembered, f.product)
        ]
        if roomier:
            better = min(roomier, key=lambda f: (f.cost_per_hour, -capacity[f.product], f.product))
            return call.choice(
                better.product,
                REASON_MOVED_FOR_SLO,
                f"{current} missed the SLO in {share:.0%} of the last {calls} decisions, sized to hold it; "
                f"{better.product} holds {capacity[better.product]:.1f} req/s per replica against "
                f"{capacity[current]:.1f}: {_fleet(better)}",
                call.moved,
                moved=True,
            )
    return None


def _cost_choice(
    call: _Call,
    *,
    current: str,
    here: ProductFigures,
    options: tuple[ProductOption, ...],
    startup_s: float,
    now_s: float,
    hold_s: float,
) -> ProductChoice:
    """Stay on `current` (`here`: its figures), defer a move for cost, or move for cost."""
    move = _move_for_cost(
        call.remembered,
        current=current,
        options=options,
        figures=call.by_name,
        startup_s=startup_s,
        now_s=now_s,
        hold_s=hold_s,
    )
    if move is None:
        return call.choice(current, REASON_CHEAPEST, _placed(here, call.figures), call.remembered)
    target, average_here, average_there, waited_s, wait_s = move
    saving = average_here - average_there
    summary = (
        f"{target} averaged {_money(average_there)}/h against {_money(average_here)}/h on {current} over "
        f"{waited_s:.0f} s"
    )
    if wait_s > 0:
        return call.choice(
            current,
            REASON_MOVE_DEFERRED,
            f"{summary}; moving once it has for another {math.ceil(wait_s)} s",
            call.remembered,
        )
    return call.choice(
        target,
        REASON_MOVED_FOR_COST,
        f"{summary}: saves {_money(saving)}/h ({_fleet(call.by_name[target])} against {_fleet(here)} now)",
        call.moved,
        moved=True,
    )


def _held_costs(memory: MoveMemory, hold_s: float) -> list[tuple[float, dict[str, float | None]]]:
    """Each remembered call's costs of the fleets held: per product, the largest over `hold_s` before it.

    None where the product could not hold the SLO at some call of that span. A sliding-window maximum
    per product (calls x products, not calls squared: this runs at every decision).
    """
    times = [t for t, _ in memory.costs]
    calls = [dict(costs) for _, costs in memory.costs]
    held: list[dict[str, float | None]] = [{} for _ in calls]
    for product in set().union(*(c.keys() for c in calls)):
        values = [c.get(product) for c in calls]
        window: deque[tuple[int, float]] = deque()  # (call, cost) within the span, costs decreasing
        missed_at = -math.inf  # the latest call at which the product could not hold the SLO
        for i, (t, cost) in enumerate(zip(times, values, strict=True)):
            if cost is None:
                missed_at = t
            else:
                while window and window[-1][1] <= cost:
                    window.pop()
                window.append((i, cost))
            while window and times[window[0][0]] < t - hold_s:
                window.popleft()
            held[i][product] = None if missed_at >= t - hold_s or not window else window[0][1]
    return list(zip(times, held, strict=True))


def _since(memory: MoveMemory) -> float:
    return memory.moved_at_s if memory.moved_at_s is not None else -math.inf


def _miss_share(memory: MoveMemory, product: str, *, since_s: float) -> tuple[float, int]:
    """(share of calls missing the SLO, calls) while `product` served, from `since_s` on."""
    seen = [missed for t, p, missed in memory.misses if p == product and t >= since_s]
    return (sum(seen) / len(seen), len(seen)) if seen else (0.0, 0)


def _missed_there(memory: MoveMemory, product: str) -> bool:
    """Whether `product` missed the SLO in `MISS_SHARE` of any `MOVE_DWELL_S` it served lately.

    Such a product is not moved back to for cost: its model said it holds the SLO, and in practice
    it did not (for the load's bursts, too few replicas too slowly); moving back would trade the
    SLO for a saving that is not real.
    """
    served = [(t, missed) for t, p, missed in memory.misses if p == product]  # in time order
    end, missed_in = 0, 0
    for start, (t0, _) in enumerate(served):  # two pointers: each window starting at a call
        while end < len(served) and served[end][0] < t0 + MOVE_DWELL_S:
            missed_in += served[end][1]
            end += 1
        calls = end - start
        if calls >= MIN_MISS_CALLS and missed_in / calls >= MISS_SHARE:
            return True
        missed_in -= served[start][1]
    return False


def _remember(
    memory: MoveMemory,
    figures: tuple[ProductFigures, ...],
    now_s: float,
    *,
    current: str | None,
    missed: bool,
) -> MoveMemory:
    """The memory with this call's sized costs, the history bounded to `COST_HISTORY_S`.

    Sized, also for the product serving, rather than the fleet in force: a comparison of one
    product's real fleet with another's model favours the model, and the service moves back and
    forth (seen in the benchmark: five moves an hour on bursty traces).
    """
    entry = (now_s, tuple((f.product, f.cost_per_hour) for f in figures))
    kept = tuple(e for e in memory.costs if now_s - e[0] < COST_HISTORY_S)
    misses = tuple(e for e in memory.misses if now_s - e[0] < COST_HISTORY_S)
    if current is not None:
        misses = (*misses, (now_s, current, missed))
    return replace(memory, costs=(*kept, entry), misses=misses)


def _move_for_cost(
    memory: MoveMemory,
    *,
    current: str,
    options: tuple[ProductOption, ...],
    figures: dict[str, ProductFigures],
    startup_s: float,
    now_s: float,
    hold_s: float,
) -> tuple[str, float, float, float, float] | None:
    """The product worth moving to for cost: (it, average cost here, there, seconds seen, seconds left).

    Costs are those of each product's fleet as the policy holds it: the largest of its sized fleets
    over the last `hold_s` (the scale-down stabilization window), so a product whose fleet must
    swing with every burst pays for the replicas the window keeps.

    None when none saves `MIN_SAVING` on average over its window. Seconds left > 0: not yet (the
    window since the last move is shorter than the dwell, or the cooldown runs).
    """
    since = _since(memory)
    seen = [(t, held) for t, held in _held_costs(memory, hold_s) if t >= since]
    if not seen:
        return None
    gpus = {o.product: o.gpus_per_replica * o.price_per_gpu_hour for o in options}
    room = {o.product: o.replicas_available for o in options}
    best: tuple[float, str, float, float, float] | None = None
    for product, figure in figures.items():
        if product == current or figure.replicas is None or _missed_there(memory, product):
            continue
        # The move's price: its own fleet starts at once on it, beside the old one, for a start-up.
        started = figure.replicas
        if (free := room.get(product)) is not None and free < started:
            continue  # its nodes cannot start them all: not worth a move that waits for GPUs
        move_cost = gpus[product] * started * startup_s / 3600.0
        dwell = MOVE_DWELL_S
        for _ in range(2):  # the window sets the saving, the saving the payback, the payback the window
            window = [costs for t, costs in seen if now_s - t <= dwell]
            there = [costs.get(product) for costs in window]
            here = [costs.get(current) for costs in window]
            if any(x is None for x in there) or any(x is None for x in here):
                break
            average_there = sum(x for x in there if x is not None) / len(there)
            average_here = sum(x for x in here if x is not None) / len(here)
            saving = average_here - average_there
            if saving < MIN_SAVING * average_here or saving <= 0:
                break
            dwell = max(MOVE_DWELL_S, 3600.0 * move_cost / saving)
        else:
            waited = now_s - seen[0][0]
            cooling = memory.moved_at_s is not None and now_s - memory.moved_at_s < MOVE_COOLDOWN_S
            left = max(
                dwell - waited,
                MOVE_COOLDOWN_S - (now_s - memory.moved_at_s)
                if cooling and memory.moved_at_s is not None
                else 0.0,
                0.0,
            )
            key = (average_there, product, average_here, min(waited, dwell), left)
            if best is None or key < best:
                best = key
    if best is None:
        return None
    average_there, product, average_here, waited, left = best
    return product, average_here, average_there, waited, left


def capacity_at_slo(*, config: PolicyConfig, profile: EngineProfile, batching: BatchingConfig) -> float:
    """The highest request rate one replica serves within the SLO minus its margin (bisected, pure)."""
    return _capacity_at_slo(config, profile.service_time, profile.max_batch_size, batching)


@lru_cache(maxsize=1024)
def _capacity_at_slo(
    config: PolicyConfig, service: ServiceTimeModel, max_batch_size: int, batching: BatchingConfig
) -> float:
    """Cached: a product's figure is the same at every decision until its profile or the spec change."""
    profile = EngineProfile(
        engine_key="",
        backend="",
        precision="",
        hardware="",
        max_batch_size=max_batch_size,
        points=[],
        service_time=service,
    )
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
