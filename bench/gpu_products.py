"""GPU product choice against a product picked by hand: money, SLO and moves per trace.

`python -P -m tailpilot.bench.gpu_products` (`make bench-products`) runs, on `make bench`'s traces at
one start-up time, three TailPilot runs per trace:

- `choice`: TailPilot with product choice, as the operator's autoscaler runs it: every control
  period (and a surge's) is `tailpilot.policy.period.run_period` given one option per product (its
  engine profile and price), which chooses the product after `decide` exactly as the operator's
  period does (the same Observation, the decided batching, the replicas in force, the start-up
  time, the choice's memory from the period before).
  Every run first serves an unscored warm-up of the same arrival process (`make bench`'s, half the
  trace's length), as a running service would have; the service is placed by `choose_product` with
  nothing serving at the rate of the warm-up's first control period, and what it learns there (the
  rises, the choice's memory, the product it moved to) carries into the hour scored. A move (the
  plan's `move`) is that period's decision: the new product's own
  fleet (choice.replicas) starts at the batching in force; the old product's ready replicas serve
  until all of the new ones are ready, then go together (the simulator's move,
  `tailpilot.bench.simulator`; the operator's hand-over, which releases the old ReplicaSets from the
  Deployment, `tailpilot.controllers.reconcile.move_handover`); the policy's state restarts on the
  new product's profile. While the new replicas start the period holds them (`MovingGpuProduct`).
  A request goes to any ready replica, of either product.
- `fixed <product>`: TailPilot on one product the whole run (the product picked by hand), placed
  the same way (the same sizing at the same first rate) on that product.

The traces are `make bench`'s generators and SLO, their rates scaled to one H100 replica's capacity
within the SLO (`products_setup`), so that the load crosses the rate where the cheaper product
changes.

Money is every replica's time, starting and draining included, x GPUs per replica x the product's
price per GPU-hour. The best single product in hindsight is the cheapest `fixed` run that holds
the SLO as well as `choice` (its share of requests within the SLO at least `choice`'s, less
`SLO_TOLERANCE_PP`); when none does, the `fixed` run with the most requests within the SLO, marked.

The products, their profiles and prices (`default_products`) are documented in
docs/benchmarks/gpu-products.md: the L4 runs `make bench`'s default profile (a scaled variant,
not measured), the H100's is derived from it by a stated scaling, the prices are illustrative.
"""

from __future__ import annotations

import argparse
import math
import multiprocessing
import os
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import numpy.typing as npt

from tailpilot.api.autoscaling import BatchingConfig, Observation
from tailpilot.api.engine import EngineProfile
from tailpilot.api.v1alpha1 import InferenceServiceSpec
from tailpilot.bench import cli_lists, quotes
from tailpilot.bench.engine_profiles import DEFAULT_PROFILE, default_batching, load_profile
from tailpilot.bench.metrics import p99, summarize
from tailpilot.bench.published import REPO, git_commit, utc_minute
from tailpilot.bench.run import default_slo_ms
from tailpilot.bench.simulator import FleetView, SimConfig, Target, simulate
from tailpilot.bench.suite import Setup, scaled_point, trace_of, trace_seed
from tailpilot.bench.tailpilot_policy import CONTROL_PERIOD_S, TailPilot, default_spec
from tailpilot.bench.traces import TRACE_NAMES, step_onsets, warmup_arrivals
from tailpilot.policy import PolicyConfig
from tailpilot.policy.from_spec import policy_config
from tailpilot.policy.gpu_choice import (
    REASON_MOVE_DEFERRED,
    MoveMemory,
    ProductChoice,
    ProductOption,
    capacity_at_slo,
    choose_product,
    size_products,
)
from tailpilot.policy.period import PeriodPlan, ProductContext
from tailpilot.policy.signals import READ_PERIOD_S

H100 = "NVIDIA-H100-80GB-HBM3"
L4 = "NVIDIA-L4"
#: Illustrative prices per GPU-hour, of the order of on-demand cloud list prices (not quotes).
H100_PRICE_PER_GPU_HOUR = 4.00
L4_PRICE_PER_GPU_HOUR = 0.80
#: The H100's engine against the L4's: a batch's fixed time divided by this (kernel launches,
#: host-side work and the batch-1 weight read scale far less than the GPU's peak figures)...
H100_INTERCEPT_DIVISOR = 3.0
#: ...and its time per item divided by this (dense FP16 tensor throughput, about 990 against 121
#: TFLOPS on the two datasheets).
H100_PER_ITEM_DIVISOR = 8.0
#: The traces' rates are scaled to this fleet (`products_setup`).
REFERENCE_PRODUCT = H100
REFERENCE_REPLICAS = 1
#: Noise allowed when comparing shares of requests within the SLO (percentage points).
SLO_TOLERANCE_PP = 0.1
#: The batching the first placement is sized with: nothing serves yet, none is in force.
PLACEMENT_BATCHING = BatchingConfig(max_batch_size=1)
CHOICE = "choice"
FIXED = "fixed "
#: Where `make bench-products` writes its page.
DEFAULT_PAGE = REPO / "docs" / "benchmarks" / "gpu-products.md"


@dataclass(frozen=True)
class Product:
    """One GPU product a service may run on: its name, price and engine profile."""

    name: str
    short: str
    price_per_gpu_hour: float
    profile: EngineProfile
    gpus_per_replica: int = 1

    def option(self) -> ProductOption:
        """What the operator passes `choose_product` for this product (no node limit)."""
        return ProductOption(self.name, self.price_per_gpu_hour, self.gpus_per_replica, self.profile)


def derived_profile(
    base: EngineProfile, *, intercept_divisor: float, per_item_divisor: float, hardware: str
) -> EngineProfile:
    """`base` on faster hardware: its intercept and per-item times divided, its measured points rescaled.

    Each point's percentiles scale with its batch's mean time (the jitter's CV is kept, so its
    quantiles are the same multiples of the mean) and its throughput inversely.
    """
    st = base.service_time
    new = st.model_copy(
        update={
            "intercept_ms": st.intercept_ms / intercept_divisor,
            "per_item_ms": st.per_item_ms / per_item_divisor,
        }
    )
    points = [scaled_point(p, new.mean_ms(p.batch_size) / st.mean_ms(p.batch_size)) for p in base.points]
    return base.model_copy(
        update={
            "engine_key": f"{base.engine_key}-on-{hardware}",
            "hardware": hardware,
            "service_time": new,
            "points": points,
            "method": f"{base.method} [DERIVED for {hardware}: intercept / {intercept_divisor:g}, "
            f"per item / {per_item_divisor:g}; not measured]",
        }
    )


def default_products() -> tuple[Product, ...]:
    """The H100 and the L4: the L4 runs `make bench`'s default profile, the H100 a profile derived from it."""
    base = load_profile(DEFAULT_PROFILE)
    l4 = base.model_copy(update={"hardware": L4})
    h100 = derived_profile(
        base, intercept_divisor=H100_INTERCEPT_DIVISOR, per_item_divisor=H100_PER_ITEM_DIVISOR, hardware=H100
    )
    return (
        Product(H100, "H100", H100_PRICE_PER_GPU_HOUR, h100),
        Product(L4, "L4", L4_PRICE_PER_GPU_HOUR, l4),
    )


def products_setup(
    products: Sequence[Product],
    *,
    seed: int = 1,
    duration_s: float = 3600.0,
    traces: Sequence[str] = TRACE_NAMES,
) -> Setup:
    """`make bench`'s traces and SLO, the traces scaled to `REFERENCE_REPLICAS` of `REFERENCE_PRODUCT`.

    The SLO is `make bench`'s (derived from its default profile, the L4's here). Each trace's
    generator is `make bench`'s; its rates are scaled to the reference fleet's capacity within the
    SLO (peaks at 90% of it) instead of to four replicas of the default profile, so that the load
    crosses the point where the cheaper product changes.
    """
    reference = next(p for p in products if p.name == REFERENCE_PRODUCT)
    return Setup(
        profile=reference.profile,
        slo_ms=default_slo_ms(DEFAULT_PROFILE),
        seed=seed,
        duration_s=duration_s,
        ts_values=(30.0,),
        traces=tuple(traces),
        ref_replicas=REFERENCE_REPLICAS,
    )


def money(replica_seconds_by_product: Mapping[str, float], products: Sequence[Product]) -> float:
    """Dollars: each product's replica-seconds x GPUs per replica x its price per GPU-hour."""
    by_name = {p.name: p for p in products}
    total = 0.0
    for name, seconds in replica_seconds_by_product.items():
        product = by_name[name]
        total += seconds / 3600.0 * product.gpus_per_replica * product.price_per_gpu_hour
    return total


def first_rate(arrivals_s: npt.NDArray[np.float64], *, period_s: float = CONTROL_PERIOD_S) -> float:
    """Requests per second over the trace's first control period (0 for none)."""
    return float(np.count_nonzero(arrivals_s < period_s)) / period_s


def place(products: Sequence[Product], *, config: PolicyConfig, rate_per_s: float) -> ProductChoice:
    """The first placement: `choose_product` with nothing serving, at `rate_per_s`."""
    return choose_product(
        tuple(p.option() for p in products),
        current=None,
        config=config,
        observation=Observation(at_s=0.0, request_rate=rate_per_s, p99_ms=None),
        batching=PLACEMENT_BATCHING,
        startup_s=config.replica_startup_s,
        now_s=0.0,
        memory=MoveMemory(),
    )


def sized_on(product: Product, *, config: PolicyConfig, rate_per_s: float) -> int:
    """Replicas a placement on `product` alone takes at `rate_per_s` (its bound when none holds the SLO)."""
    (figures,) = size_products(
        (product.option(),), config=config, rate_per_s=rate_per_s, batching=PLACEMENT_BATCHING
    )
    return figures.replicas if figures.replicas is not None else config.max_replicas


@dataclass(frozen=True)
class MoveRecord:
    """One move of the `choice` run."""

    at_s: float
    left: str
    to: str
    reason: str
    replicas: int


class ChoosingTailPilot(TailPilot):
    """The adapter with the service's GPU products given to its control period (module docstring)."""

    def __init__(
        self,
        *,
        products: Sequence[Product],
        spec: InferenceServiceSpec,
        initial: Target,
        memory: MoveMemory,
        control_period_s: float = CONTROL_PERIOD_S,
        scored_from_s: float = 0.0,
    ) -> None:
        assert initial.product is not None
        self._products = {p.name: p for p in products}
        super().__init__(
            profile=self._products[initial.product].profile,
            spec=spec,
            initial=initial,
            control_period_s=control_period_s,
        )
        self._options = tuple(p.option() for p in products)
        self._product = initial.product
        #: The choice's memory before the first period (the placement's); later ones are the plan's.
        self._placement_memory = memory
        #: The warm-up's end: what happens before it is not recorded, and times are counted from it.
        self._scored_from_s = scored_from_s
        self.moves: list[MoveRecord] = []
        #: Each choice's reason, in order.
        self.choice_reasons: list[str] = []
        #: At each choice: (replicas `choose_product` sized on the product serving, replicas in force).
        self.sized_and_held: list[tuple[int, int]] = []

    def products(self, view: FleetView) -> ProductContext:
        """Every product, the one serving, the choice's memory (kept by `run_period`'s plan).

        And whether a move's new replicas are still starting (the operator's status.gpu.movingTo).
        """
        return ProductContext(
            moving=view.moving,
            options=self._options,
            current=self._product,
            serving=self._product,
            memory=self._placement_memory,
        )

    def execute(self, view: FleetView, plan: PeriodPlan) -> Target:
        """The plan, and the product it chose: a move starts the new product's replicas."""
        target = super().execute(view, plan)
        choice, move = plan.choice, plan.move
        scored = view.now_s >= self._scored_from_s
        if choice is not None and scored:
            self.choice_reasons.append(choice.reason)
            here = next((f for f in choice.figures if f.product == self._product), None)
            if here is not None and here.replicas is not None:
                self.sized_and_held.append((here.replicas, view.target_replicas))
        if move is not None:
            assert choice is not None  # a move is a choice's
            if scored:
                at = view.now_s - self._scored_from_s
                self.moves.append(MoveRecord(at, self._product, move.product, choice.reason, move.replicas))
            self._product = move.product
            self._profile = self._products[move.product].profile
            # The move is the decision: its replicas and batching no longer apply.
            target = Target(move.replicas, view.batching)
        self._last = replace(target, product=self._product)
        return self._last


@dataclass(frozen=True)
class ProductRun:
    """One policy on one trace."""

    trace: str
    policy: str
    dollars: float
    #: Product name -> replica-seconds.
    replica_seconds: dict[str, float]
    pct_requests_in_slo: float
    pct_windows_in_slo: float
    p99_ms: float
    moves: tuple[MoveRecord, ...] = ()
    errors: tuple[str, ...] = ()
    #: Each choice's reason -> how many times it was given (choice run only).
    reasons: dict[str, int] = field(default_factory=dict)
    #: Mean over the choices of the replicas `choose_product` sized on the product serving, and of
    #: the replicas in force then (choice run only; nan: no choice sized it).
    mean_sized: float = math.nan
    mean_held: float = math.nan


@dataclass(frozen=True)
class TraceResult:
    """A trace's runs and the comparison of `choice` with the best single product in hindsight."""

    trace: str
    choice: ProductRun
    fixed: tuple[ProductRun, ...]
    best_single: ProductRun
    #: Whether the best single product holds the SLO as well as `choice` (False: none did; the one
    #: with the most requests within the SLO is taken).
    best_holds_as_well: bool

    @property
    def saving(self) -> float:
        """The money `choice` saves against the best single product, as a share of the latter's."""
        return 1.0 - self.choice.dollars / self.best_single.dollars if self.best_single.dollars else math.nan


def best_single(choice: ProductRun, fixed: Sequence[ProductRun]) -> tuple[ProductRun, bool]:
    """The cheapest `fixed` run holding the SLO as well as `choice`; else the best-held one (False)."""
    as_well = [r for r in fixed if r.pct_requests_in_slo >= choice.pct_requests_in_slo - SLO_TOLERANCE_PP]
    if as_well:
        return min(as_well, key=lambda r: r.dollars), True
    return max(fixed, key=lambda r: (r.pct_requests_in_slo, -r.dollars)), False


def run_on(
    arrivals_s: npt.NDArray[np.float64],
    *,
    products: Sequence[Product],
    policy: str,
    slo_ms: float,
    duration_s: float,
    startup_s: float,
    max_replicas: int,
    seed: int,
    trace: str = "custom",
    step_onsets_s: Sequence[float] = (),
    warmup_s: float = 0.0,
) -> ProductRun:
    """One policy (`CHOICE` or `FIXED` + a product's name) on one arrival sequence.

    `warmup_s`: the first seconds of `arrivals_s` are an unscored warm-up (the service runs, is
    placed at its first rate and learns, as a running service would have before the hour scored);
    `duration_s` is the scored part after it.
    """
    spec = default_spec(p99_target_ms=slo_ms, max_replicas=max_replicas)
    config = policy_config(spec, control_period_s=CONTROL_PERIOD_S)
    rate = first_rate(arrivals_s)
    by_name = {p.name: p for p in products}
    controller: TailPilot
    if policy == CHOICE:
        placed = place(products, config=config, rate_per_s=rate)
        if placed.product is None or placed.replicas is None:
            raise RuntimeError(f"{trace}: no product placed at {rate:.1f} req/s: {placed.message}")
        product = by_name[placed.product]
        initial = Target(placed.replicas, default_batching(product.profile, slo_ms), product.name)
        controller = ChoosingTailPilot(
            products=products, spec=spec, initial=initial, memory=placed.memory, scored_from_s=warmup_s
        )
    else:
        product = by_name[policy.removeprefix(FIXED)]
        replicas = sized_on(product, config=config, rate_per_s=rate)
        initial = Target(replicas, default_batching(product.profile, slo_ms), product.name)
        controller = TailPilot(profile=product.profile, spec=spec, initial=initial)
    sim = SimConfig(
        service=product.profile.service_time,
        duration_s=warmup_s + duration_s,
        score_from_s=warmup_s,
        startup_s=startup_s,
        seed=seed,
        max_replicas=max_replicas,
        products=tuple((p.name, p.profile.service_time) for p in products),
    )
    res = simulate(arrivals_s=arrivals_s, config=sim, controller=controller)
    m = summarize(res, slo_ms=slo_ms, step_onsets_s=list(step_onsets_s))
    reasons: dict[str, int] = {}
    moves: tuple[MoveRecord, ...] = ()
    sized = held = math.nan
    if isinstance(controller, ChoosingTailPilot):
        for reason in controller.choice_reasons:
            reasons[reason] = reasons.get(reason, 0) + 1
        moves = tuple(controller.moves)
        assert len(moves) == len(res.moves)
        if controller.sized_and_held:
            sized = float(np.mean([a for a, _ in controller.sized_and_held]))
            held = float(np.mean([b for _, b in controller.sized_and_held]))
    return ProductRun(
        trace=trace,
        policy=policy,
        dollars=money(res.replica_seconds_by_product, products),
        replica_seconds=dict(res.replica_seconds_by_product),
        pct_requests_in_slo=m.pct_requests_in_slo,
        pct_windows_in_slo=m.pct_windows_in_slo,
        p99_ms=p99(res.latency_s) * 1000.0,
        moves=moves,
        errors=tuple(controller.errors),
        reasons=reasons,
        mean_sized=sized,
        mean_held=held,
    )


def run_one(
    setup: Setup, products: Sequence[Product], trace: str, policy: str, *, startup_s: float
) -> ProductRun:
    """One policy on one of `setup`'s traces, on the jitter seed every policy gets on it.

    Every run, fixed or choosing, first serves `setup.warmup_s` unscored seconds of the same
    arrival process (`make bench`'s warm-up, `tailpilot.bench.traces.warmup_arrivals`).
    """
    lead = setup.warmup_s
    history = warmup_arrivals(
        trace, capacity_rps=setup.capacity_rps, duration_s=setup.duration_s, warmup_s=lead, seed=setup.seed
    )
    return run_on(
        np.concatenate([history, trace_of(setup, trace).arrivals + lead]),
        products=products,
        policy=policy,
        slo_ms=setup.slo_ms,
        duration_s=setup.duration_s,
        startup_s=startup_s,
        max_replicas=setup.max_replicas,
        seed=trace_seed(setup, trace),
        trace=trace,
        step_onsets_s=step_onsets(trace, setup.duration_s),
        warmup_s=lead,
    )


def _task(task: tuple[Setup, tuple[Product, ...], str, str, float]) -> ProductRun:
    setup, products, trace, policy, startup_s = task
    return run_one(setup, products, trace, policy, startup_s=startup_s)


def run_products(
    setup: Setup, products: Sequence[Product], *, startup_s: float, jobs: int = 2
) -> list[TraceResult]:
    """Every trace of `setup`: `choice` and one `fixed` run per product, compared (deterministic)."""
    policies = [CHOICE, *(FIXED + p.name for p in products)]
    tasks = [(setup, tuple(products), t, p, startup_s) for t in setup.traces for p in policies]
    ctx = multiprocessing.get_context("fork")
    with ctx.Pool(max(1, jobs)) as pool:
        runs = pool.map(_task, tasks, chunksize=1)
    out = []
    for t in setup.traces:
        mine = [r for r in runs if r.trace == t]
        choice = next(r for r in mine if r.policy == CHOICE)
        fixed = tuple(r for r in mine if r.policy != CHOICE)
        best, as_well = best_single(choice, fixed)
        out.append(TraceResult(t, choice, fixed, best, as_well))
    return out


def _short(name: str, products: Sequence[Product]) -> str:
    return next((p.short for p in products if p.name == name), name)


def _label(run: ProductRun, products: Sequence[Product]) -> str:
    return CHOICE if run.policy == CHOICE else "fixed " + _short(run.policy.removeprefix(FIXED), products)


def text_table(results: Sequence[TraceResult], products: Sequence[Product]) -> str:
    """Fixed-width table: every run, then each trace's saving against the best single product."""
    seconds_head = " ".join(f"{p.short + ' rep-s':>10}" for p in products)
    head = (
        f"{'trace':15} {'policy':10} {'$':>7} {seconds_head} {'%req':>7} {'%win':>6} {'P99 ms':>7} "
        f"{'moves':>5}  {'vs best single':<24}"
    )
    lines = [head, "-" * len(head)]
    for r in results:
        for run in (r.choice, *r.fixed):
            seconds = " ".join(f"{run.replica_seconds.get(p.name, 0.0):>10.0f}" for p in products)
            versus = ""
            if run.policy == CHOICE:
                mark = "" if r.best_holds_as_well else " *"
                versus = f"{r.saving:+.1%} vs {_label(r.best_single, products)}{mark}"
            lines.append(
                f"{r.trace:15} {_label(run, products):10} {run.dollars:>7.2f} {seconds} "
                f"{run.pct_requests_in_slo:>7.3f} {run.pct_windows_in_slo:>6.2f} {run.p99_ms:>7.0f} "
                f"{len(run.moves) if run.policy == CHOICE else '-':>5}  {versus:<24}"
            )
    return "\n".join(lines)


def totals(results: Sequence[TraceResult], products: Sequence[Product]) -> str:
    """One line: the dollars of each policy and of the best single products, summed over the traces."""
    choice = sum(r.choice.dollars for r in results)
    best = sum(r.best_single.dollars for r in results)
    fixed = {
        _label(run, products): sum(x.dollars for rr in results for x in rr.fixed if x.policy == run.policy)
        for run in results[0].fixed
    }
    parts = ", ".join(f"{k} ${v:.2f}" for k, v in fixed.items())
    saving = 1.0 - choice / best if best else math.nan
    return (
        f"all traces: choice ${choice:.2f}, {parts}, best single per trace ${best:.2f} "
        f"(choice {saving:+.1%} against it)"
    )


def move_lines(results: Sequence[TraceResult], products: Sequence[Product]) -> list[str]:
    """Each trace's moves, deferrals and fleets in force against sized, and any error the runs recorded."""
    lines = []
    for r in results:
        moves = ", ".join(
            f"{m.at_s:.0f} s {_short(m.left, products)}->{_short(m.to, products)} "
            f"({m.reason}, {m.replicas} started)"
            for m in r.choice.moves
        )
        deferred = r.choice.reasons.get(REASON_MOVE_DEFERRED, 0)
        held = f"; a move deferred in {deferred} control period(s)" if deferred else ""
        fleet = (
            f"; replicas in force {r.choice.mean_held:.1f} on average where choose_product sized "
            f"{r.choice.mean_sized:.1f}"
        )
        lines.append(f"{r.trace}: {moves or 'no move'}{held}{fleet}")
        for run in (r.choice, *r.fixed):
            lines += [f"  error in {_label(run, products)}: {e[:300]}" for e in run.errors[:3]]
    return lines


def crossover_lines(
    products: Sequence[Product], *, config: PolicyConfig, rates: Sequence[float]
) -> list[str]:
    """What `size_products` gives each product at a few rates (replicas, $/h): where the answer turns."""
    lines = []
    for rate in rates:
        figures = size_products(
            tuple(p.option() for p in products), config=config, rate_per_s=rate, batching=PLACEMENT_BATCHING
        )
        cells = ", ".join(
            f"{_short(f.product, products)} {f.replicas} x = ${f.cost_per_hour:.2f}/h"
            if f.cost_per_hour is not None
            else f"{_short(f.product, products)}: {f.why_not}"
            for f in figures
        )
        lines.append(f"{rate:>6.0f} req/s: {cells}")
    return lines


LEGEND = f"""\
$: money over the run (every replica's seconds, starting and draining included, x its price per
GPU-hour); <product> rep-s: replica-seconds on that product; %req / %win: requests / 1-minute
windows within the SLO; P99 ms: over the whole run; moves: product moves of the choice run.
vs best single: the choice's saving against the cheapest fixed-product run holding the SLO as well
(its %req at least the choice's less {SLO_TOLERANCE_PP} point); * when none did (then the fixed run
with the most requests within the SLO)."""


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -P -m tailpilot.bench.gpu_products", description=__doc__.split("\n")[0]
    )
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument(
        "--traces", type=cli_lists.names, default=TRACE_NAMES, help="comma-separated (default all)"
    )
    ap.add_argument(
        "--ts",
        type=cli_lists.seconds,
        default=(30.0, 90.0),
        help="replica start-up times, s (default 30,90)",
    )
    ap.add_argument("--duration-s", type=float, default=3600.0)
    ap.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1))
    ap.add_argument("--out", type=Path, default=DEFAULT_PAGE)
    ap.add_argument("--no-write", action="store_true", help="print only")
    args = ap.parse_args(argv)
    unknown = [t for t in args.traces if t not in TRACE_NAMES]
    if unknown:
        ap.error(f"--traces: unknown {', '.join(unknown)} (known: {', '.join(TRACE_NAMES)})")
    started = time.monotonic()
    commit = git_commit()  # before the run writes its page into the tree
    products = default_products()
    setup = products_setup(products, seed=args.seed, duration_s=args.duration_s, traces=tuple(args.traces))
    spec = default_spec(p99_target_ms=setup.slo_ms, max_replicas=setup.max_replicas)
    config = policy_config(spec, control_period_s=CONTROL_PERIOD_S)
    for p in products:
        st = p.profile.service_time
        capacity = capacity_at_slo(config=config, profile=p.profile, batching=PLACEMENT_BATCHING)
        print(
            f"{p.short}: {p.name}, ${p.price_per_gpu_hour:.2f}/GPU-hour, {p.gpus_per_replica} GPU(s) "
            f"per replica, t(b) = {st.intercept_ms:.2f} + {st.per_item_ms:.2f} ms x b, "
            f"max batch {p.profile.max_batch_size}, {capacity:.1f} req/s per replica within the SLO "
            f"less its margin (capacity_at_slo)"
        )
    print("\n".join(crossover_lines(products, config=config, rates=(5, 20, 40, 60, 70, 80, 100, 150, 200))))
    print(
        f"SLO {setup.slo_ms:g} ms, {args.duration_s:g} s per trace, seed {args.seed}, "
        f"control period {CONTROL_PERIOD_S:g} s, reads every {READ_PERIOD_S:g} s; traces scaled to "
        f"{setup.ref_replicas} {_short(REFERENCE_PRODUCT, products)} replica(s), "
        f"{setup.capacity_rps:.1f} req/s"
    )
    trace_lines = []
    for name in setup.traces:
        arrivals = trace_of(setup, name)
        lead = warmup_arrivals(
            name,
            capacity_rps=setup.capacity_rps,
            duration_s=setup.duration_s,
            warmup_s=setup.warmup_s,
            seed=setup.seed,
        )
        trace_lines.append(
            f"{name}: {arrivals.params}; {arrivals.arrivals.size} requests after a {setup.warmup_s:g} s "
            f"warm-up of {lead.size}, placed at the warm-up's first rate {first_rate(lead):.1f}/s"
        )
    print("\n".join("  " + line for line in trace_lines))
    results: dict[float, list[TraceResult]] = {}
    for ts in args.ts:
        results[ts] = run_products(replace(setup, ts_values=(ts,)), products, startup_s=ts, jobs=args.jobs)
        print(f"\nTs = {ts:g} s")
        print(text_table(results[ts], products))
        print(totals(results[ts], products))
        print("\n".join(move_lines(results[ts], products)))
    print(LEGEND)
    elapsed = time.monotonic() - started
    print(f"{len(setup.traces)} traces x {len(args.ts)} start-up times in {elapsed:.1f} s")
    if args.no_write:
        return 0
    from tailpilot.bench.gpu_products_page import PageRun, page  # the page module imports this one

    command = "python -P -m tailpilot.bench.gpu_products " + " ".join(
        argv if argv is not None else sys.argv[1:]
    )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(
        page(
            PageRun(
                command=command.strip(),
                commit=commit,
                date=utc_minute(),
                elapsed_s=elapsed,
                setup=setup,
                config=config,
                products=products,
                traces=tuple(trace_lines),
                results=results,
            )
        )
    )
    print(f"wrote {args.out}")
    if args.out.resolve() == DEFAULT_PAGE.resolve():
        for name in quotes.refresh():
            print(f"rewrote the figures {name} quotes from it")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
