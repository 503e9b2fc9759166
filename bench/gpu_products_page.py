"""docs/benchmarks/gpu-products.md, written from a `make bench-products` run (no figure by hand).

The prose here states only what the code does; every figure on the page comes from the run's
results or from the constants the run used, so the page and the code cannot disagree (the drift
check reruns the benchmark and compares, `tailpilot.bench.published`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from tailpilot.api.engine import EngineProfile
from tailpilot.bench.engine_profiles import DEFAULT_PROFILE
from tailpilot.bench.gpu_products import (
    FIXED,
    H100_INTERCEPT_DIVISOR,
    H100_PER_ITEM_DIVISOR,
    LEGEND,
    PLACEMENT_BATCHING,
    SLO_TOLERANCE_PP,
    Product,
    TraceResult,
    move_lines,
    text_table,
    totals,
)
from tailpilot.bench.published import provenance_lines
from tailpilot.bench.suite import Setup
from tailpilot.bench.tailpilot_policy import CONTROL_PERIOD_S
from tailpilot.policy import PolicyConfig
from tailpilot.policy.gpu_choice import MIN_SAVING, capacity_at_slo, size_products

#: The rates of the sizing table (req/s): both sides of where the cheaper product turns.
SIZING_RATES = (5, 20, 40, 60, 70, 80, 100, 150, 200)
#: A choice run within this share of the best single product's money counts as costing the same.
SAME_MONEY = 0.005


@dataclass(frozen=True)
class PageRun:
    """What the page is written from: one run of the benchmark at every start-up time."""

    command: str
    commit: str
    date: str
    elapsed_s: float
    setup: Setup
    config: PolicyConfig
    products: tuple[Product, ...]
    #: The traces' descriptions, in order.
    traces: tuple[str, ...]
    #: Start-up time (s) -> every trace's result.
    results: Mapping[float, Sequence[TraceResult]]


def _short(name: str, products: Sequence[Product]) -> str:
    return next((p.short for p in products if p.name == name), name)


def _profile_cell(profile: EngineProfile) -> str:
    st = profile.service_time
    return f"{st.intercept_ms:.4g} ms + {st.per_item_ms:.4g} ms x b"


def _capacities(run: PageRun) -> dict[str, float]:
    return {
        p.name: capacity_at_slo(config=run.config, profile=p.profile, batching=PLACEMENT_BATCHING)
        for p in run.products
    }


def products_section(run: PageRun) -> list[str]:
    """The products' table and the sizing table `choose_product` works from."""
    caps = _capacities(run)
    lines = [
        "## Products, profiles and prices",
        "",
        "| product | price per GPU-hour | engine time per batch of b | max batch | "
        "per replica within the SLO less its margin |",
        "| --- | ---: | --- | ---: | ---: |",
    ]
    for p in run.products:
        lines.append(
            f"| {p.name} | ${p.price_per_gpu_hour:.2f} | {_profile_cell(p.profile)} | "
            f"{p.profile.max_batch_size} | {caps[p.name]:.1f} req/s |"
        )
    by_price = sorted(run.products, key=lambda p: p.price_per_gpu_hour)
    cheap, dear = by_price[0], by_price[-1]
    price_ratio = dear.price_per_gpu_hour / cheap.price_per_gpu_hour
    capacity_ratio = caps[dear.name] / caps[cheap.name]
    lines += [
        "",
        "- **Prices** are illustrative, of the order of on-demand cloud prices for one such GPU; those "
        "vary between providers and regions by 2x or more. What the choice depends on is their ratio "
        f"({price_ratio:.3g}:1) against the ratio of what one replica serves ({capacity_ratio:.3g}:1 here).",
        f"- **The {cheap.short}** runs `make bench`'s default profile, "
        f"`bench/profiles/{DEFAULT_PROFILE.name}`: a scaled variant, **not measured**, relabelled as "
        "this product.",
        f"- **The {dear.short}'s** profile is derived from it (`derived_profile`), also not measured: the "
        f"time per item divided by {H100_PER_ITEM_DIVISOR:g} (dense FP16 tensor throughput on the two "
        "datasheets) and the fixed time per batch divided by "
        f"{H100_INTERCEPT_DIVISOR:g} only (kernel launches, host-side and framework work scale far less "
        "than the peak figures). The jitter and the max batch are kept.",
        "- What `choose_product` sizes at a few rates (`size_products`, with nothing serving): replicas "
        "and dollars per hour.",
        "",
        "  | req/s | " + " | ".join(str(r) for r in SIZING_RATES) + " |",
        "  | --- |" + " --- |" * len(SIZING_RATES),
    ]
    sized = {
        rate: size_products(
            tuple(p.option() for p in run.products),
            config=run.config,
            rate_per_s=rate,
            batching=PLACEMENT_BATCHING,
        )
        for rate in SIZING_RATES
    }
    for p in run.products:
        cells = []
        for rate in SIZING_RATES:
            f = next(f for f in sized[rate] if f.product == p.name)
            cells.append(f"{f.replicas} = ${f.cost_per_hour:.2f}" if f.cost_per_hour is not None else "-")
        lines.append(f"  | {p.short} | " + " | ".join(cells) + " |")
    cheapest = [
        min((f for f in sized[r] if f.cost_per_hour is not None), key=lambda f: f.cost_per_hour or 0.0)
        for r in SIZING_RATES
    ]
    turns = [
        f"{_short(a.product, run.products)} up to {r0} req/s, {_short(b.product, run.products)} from {r1}"
        for (r0, a), (r1, b) in zip(
            zip(SIZING_RATES, cheapest, strict=True),
            zip(SIZING_RATES[1:], cheapest[1:], strict=True),
            strict=False,
        )
        if a.product != b.product
    ]
    lines += [
        "",
        "  The cheaper product at these rates: "
        + ("; ".join(turns) if turns else _short(cheapest[0].product, run.products) + " at every one")
        + f". A move for cost also needs a saving of at least {MIN_SAVING:.0%} "
        "(`tailpilot.policy.gpu_choice.MIN_SAVING`).",
    ]
    return lines


def results_section(run: PageRun, ts: float) -> list[str]:
    """One start-up time's table, totals and moves, as the command prints them."""
    results = run.results[ts]
    return [
        f"## Results, Ts = {ts:g} s (as printed)",
        "",
        "```",
        # The terminal table pads its last column; a page keeps no trailing blanks.
        *(line.rstrip() for line in text_table(results, run.products).splitlines()),
        totals(results, run.products),
        *move_lines(results, run.products),
        "```",
    ]


def _saving_line(r: TraceResult, products: Sequence[Product]) -> str:
    best = r.best_single
    moves = ", ".join(
        f"{_short(m.left, products)}->{_short(m.to, products)} at {m.at_s:.0f} s ({m.reason})"
        for m in r.choice.moves
    )
    fixed = _short(best.policy.removeprefix(FIXED), products)
    return (
        f"{r.trace}: ${r.choice.dollars:.2f} against fixed {fixed} "
        f"${best.dollars:.2f} ({r.saving:+.1%}); {r.choice.pct_requests_in_slo:.2f}% of requests within the "
        f"SLO against {best.pct_requests_in_slo:.2f}%; {moves or 'no move'}"
    )


def findings_section(run: PageRun) -> list[str]:
    """Where the choice gains, costs the same, and loses, per start-up time (computed from the tables)."""
    lines = ["## What the choice gains, and where it does not (computed from the tables)", ""]
    for ts, results in run.results.items():
        gains = [r for r in results if r.saving > SAME_MONEY]
        same = [r for r in results if abs(r.saving) <= SAME_MONEY]
        losses = [r for r in results if r.saving < -SAME_MONEY]
        unmatched = [r.trace for r in results if not r.best_holds_as_well]
        lines += [
            f"### Ts = {ts:g} s",
            "",
            f"- Over all traces: {totals(results, run.products).removeprefix('all traces: ')}.",
            f"- The best single product held the SLO as well as the choice on "
            f"{len(results) - len(unmatched)} of {len(results)} traces"
            + (f"; not on {', '.join(unmatched)} (marked `*`)." if unmatched else "."),
            f"- **Gains** (saving above {SAME_MONEY:.1%}):" + (" none." if not gains else ""),
            *[f"  - {_saving_line(r, run.products)}" for r in gains],
            f"- **The same money** (within {SAME_MONEY:.1%}): "
            + (", ".join(r.trace for r in same) + "." if same else "none."),
            "- **Losses**:" + (" none." if not losses else ""),
            *[f"  - {_saving_line(r, run.products)}" for r in losses],
            "",
        ]
    return lines


def _what_runs(run: PageRun) -> list[str]:
    products = " and ".join(f"**fixed {p.short}**" for p in run.products)
    return [
        "## What runs",
        "",
        "For every trace, TailPilot at the operator's defaults (a spec with only the SLO and "
        f"`minReplicas: 1`, `maxReplicas: {run.setup.max_replicas}` set), on the same arrivals and the same "
        "service-time jitter seed:",
        "",
        "- **choice**: TailPilot with GPU product choice, as the operator's autoscaler runs it: each control "
        f"period (every {CONTROL_PERIOD_S:g} s, and each surge decision between them) is the operator's own "
        "`tailpilot.policy.period.run_period`, given one option per product (its profile, its price, one GPU "
        "per replica, no node limit). The service is placed first by `choose_product` with nothing serving, "
        f"at the rate of the first {CONTROL_PERIOD_S:g} s of an unscored warm-up: every run first serves "
        f"{run.setup.warmup_s:g} s of the same arrival process (`make bench`'s warm-up), as a running "
        "service would have, and what it learned there (the traffic's rises, the choice's memory, the "
        "product it moved to) carries into the hour scored.",
        f"- {products}: TailPilot on that product the whole run (what a user who picks the product by hand "
        "gets), with the same warm-up, placed on it by the same sizing at the same first rate.",
        "- **best single** (hindsight, not a run): of the fixed runs, the cheapest that holds the SLO as "
        "well as the choice run (its share of requests within the SLO at least the choice's less "
        f"{SLO_TOLERANCE_PP:g} percentage point); when none does, the fixed run with the most requests "
        "within the SLO, marked `*`. "
        '"vs best single" is the choice\'s saving against it: 1 - choice $ / best single $ (negative: the '
        "choice cost more).",
        "",
        "**A move**, as the operator makes it: the move is that period's decision (its replicas and batching "
        "are dropped); the new product's own fleet, choice.replicas, starts at the batching in force; the "
        "old product's ready replicas serve until every new replica is ready, then drain and go (the "
        "operator releases their ReplicaSet from the Deployment for this hand-over); requests go to every "
        "ready replica of either product meanwhile. While the new replicas start, the period holds them "
        "(`MovingGpuProduct`: the latency observed is the old product's). The policy's state restarts on the "
        "new product's profile. The simulator takes the hand-over as one step (all new replicas start "
        "together, all old ones go together).",
        "",
        "**Money** is every replica's seconds, starting and draining ones included, x GPUs per replica x the "
        "price per GPU-hour of its product.",
    ]


def _traces_section(run: PageRun) -> list[str]:
    reference = run.setup
    return [
        "## Traces",
        "",
        f"`make bench`'s generators, seeds and SLO ({reference.slo_ms:g} ms), with rates scaled to "
        f"{reference.ref_replicas} replica(s) of the reference product ({reference.capacity_rps:.1f} req/s "
        "within the SLO, peaks at 90% of it) instead of to four replicas of the default profile, so that the "
        "load crosses the rate where the cheaper product changes:",
        "",
        "```",
        *run.traces,
        "```",
    ]


def _caveats(run: PageRun) -> list[str]:
    items = [
        "**The profiles are synthetic**: a scaled variant and one derived from it by two divisors, which "
        "are assumptions, not measurements. The result hangs on the ratio of one replica's capacity "
        "within the SLO to the ratio of prices (both above): where the dear product's capacity ratio is "
        "below its price ratio it is never cheaper per request. Measured profiles of one engine on both "
        "products (`tailpilot profile`) would replace both.",
        "**Prices are illustrative** and one per product; spot, committed-use or per-node pricing is "
        "not modelled. Only GPU time is counted: no node overhead, and nothing for building and "
        "profiling an engine per product (the operator does that before it can choose).",
        "**Attainment on one-time events:** the choice sizes each product for the rises the traffic "
        "has shown (the learned headroom). An event rarer than what the warm-up taught (T5's step and "
        "T6's spike, once an hour) finds the service on the product cheapest without it, and the "
        "choice keeps fewer requests within the SLO than the dearer product all hour, until its move "
        "(each line above gives both shares: a saving there may come with fewer requests within the "
        "SLO).",
        "**Placement** is at the warm-up's first control period's rate. The operator places a new "
        "service at its observed rate (0 when it has none) with nothing learned: a new service meets "
        "its traffic's first bursts as the warm-up does here, unscored there only.",
        '**No node limits:** every product can hold any number of replicas, so the "no free GPU" path '
        "and capacity moves are not exercised by the traces (`tests/bench/test_gpu_products.py` and "
        "`tests/operator_cluster/test_gpu_products.py` exercise them).",
        f"One seed and {run.setup.duration_s:g} simulated seconds per trace; the best-single rule "
        "compares shares of requests within the SLO only, not windows or P99.",
    ]
    return ["## Caveats", "", *(f"- {item}" for item in items)]


def page(run: PageRun) -> str:
    """The whole page."""
    lines = [
        "# GPU product choice vs one product picked by hand",
        "",
        "<!-- Generated by `make bench-products` (bench/gpu_products.py, bench/gpu_products_page.py); "
        "edit the generator, not this page. -->",
        "",
        *provenance_lines(command=run.command, commit=run.commit, date=run.date, elapsed_s=run.elapsed_s),
        f"- Seed {run.setup.seed}; {run.setup.duration_s:g} s per trace; start-up times Ts: "
        f"{', '.join(f'{ts:g}' for ts in run.results)} s; SLO P99 <= {run.setup.slo_ms:g} ms; control period "
        f"{CONTROL_PERIOD_S:g} s.",
        "",
        "How each run works is in the module docstring of `bench/gpu_products.py`; the simulator is "
        "`make bench`'s (`bench/simulator.py`, [method.md](method.md)), extended so that a fleet can span "
        "two products while it moves.",
        "",
        *_what_runs(run),
        "",
        *products_section(run),
        "",
        *_traces_section(run),
        "",
    ]
    for ts in run.results:
        lines += [*results_section(run, ts), ""]
    lines += [LEGEND, ""]
    lines += findings_section(run)
    lines += _caveats(run)
    return "\n".join(lines) + "\n"
