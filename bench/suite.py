"""The benchmark suite: every trace x start-up time x policy, in one seeded, parallel run.

Pure orchestration over the simulator; the entry point (`tailpilot.bench.run`) does the
printing and file writing.  Work is split in two phases, both spread over worker
processes: the oracle's per-window needs per trace, then one simulation per
(trace, Ts, policy).  Every random stream is seeded from (seed, trace), and every policy on
a trace sees the same arrivals and the same service-time jitter sequence, so the results
do not depend on the number of workers or on scheduling.
"""

from __future__ import annotations

import math
import multiprocessing
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from tailpilot.api.engine import BatchProfilePoint, EngineProfile, ServiceTimeModel
from tailpilot.api.v1alpha1 import SloSpec
from tailpilot.bench.baselines import (
    AUTOSCALERS,
    BASELINE_SETTINGS,
    LOAD_TEST_SHARES,
    TUNED_BASELINES,
    BaselineParams,
    LoadTest,
    Static,
    load_test_targets,
)
from tailpilot.bench.engine_profiles import batching_candidates, default_batching, replica_capacity
from tailpilot.bench.metrics import RunMetrics, Timeline, settle_time, summarize, timeline
from tailpilot.bench.oracle import ScheduledOracle, WindowNeed, window_needs
from tailpilot.bench.simulator import Controller, SimConfig, SimResult, Target, simulate
from tailpilot.bench.traces import (
    TRACE_NAMES,
    TraceSpec,
    build_trace,
    read_arrivals,
    step_onsets,
    warmup_arrivals,
)

STATIC_POLICIES = ("static-peak", "static-mean")
ORACLES = ("oracle-fluid", "oracle-realizable")
TAILPILOT = "tailpilot"
#: TailPilot given a profile whose service times are 30% too low (the engine is slower than
#: profiled): how much of its result depends on knowing the simulator's exact model.
TAILPILOT_OPTIMISTIC = "tailpilot-profile-0.7x"
OPTIMISTIC_FACTOR = 0.7
#: TailPilot given a profile whose service times are 40% too high (the engine is faster than
#: profiled): a pessimistic profile, which the policy pays for in replicas until it learns the speed.
TAILPILOT_PESSIMISTIC = "tailpilot-profile-1.4x"
PESSIMISTIC_FACTOR = 1.4
#: TailPilot given a profile with half the true per-item slope, its intercept raised so that t(1) is
#: right: large batches look cheaper than they are, and no single speed factor corrects it.
TAILPILOT_SLOPE = "tailpilot-profile-slope"
SLOPE_FACTOR = 0.5
#: The robustness policies (TailPilot handed a wrong profile; the simulator runs the true one), in
#: table order.
WRONG_PROFILE_POLICIES = (TAILPILOT_OPTIMISTIC, TAILPILOT_PESSIMISTIC, TAILPILOT_SLOPE)
#: The uniform ones: their profile's times are the truth's times this factor, so the learned
#: `service_scale` (observed over profiled compute time) has a true value, 1 / factor.
UNIFORM_FACTORS = {TAILPILOT_OPTIMISTIC: OPTIMISTIC_FACTOR, TAILPILOT_PESSIMISTIC: PESSIMISTIC_FACTOR}
#: TailPilot plus holding backlogged replicas out of the Service's rotation
#: (`tailpilot.policy.rotation`, the operator's spec.autoscaling.backlogRotation). Run only when
#: asked for (`--policies`): the field is off by default, so the default table shows the default.
TAILPILOT_ROTATION = "tailpilot-rotation"
#: TailPilot without the surge check between decisions (spec.autoscaling.surgeResponse: false; the
#: check is on by default): what the check is worth.
TAILPILOT_NO_SURGE = "tailpilot-no-surge"
EXPERIMENTAL_POLICIES = (TAILPILOT_ROTATION, TAILPILOT_NO_SURGE)
#: TailPilot at other attainment objectives (spec.slo.objectivePercent; `tailpilot` runs the
#: default, 99): the trade between cost and attainment a user chooses, as points of one curve.
OBJECTIVE_POLICIES = {
    "tailpilot-objective-95": 95.0,
    "tailpilot-objective-97": 97.0,
    "tailpilot-objective-99.5": 99.5,
    "tailpilot-objective-99.9": 99.9,
    "tailpilot-objective-99.99": 99.99,
}
#: The objective `tailpilot` runs at: the API's default of spec.slo.objectivePercent.
DEFAULT_OBJECTIVE_PERCENT = float(SloSpec.model_fields["objective_percent"].default)
#: Policies without a line in the timeline plots: the tables and the trade plots show them, and
#: more lines would hide the defaults (a second TailPilot line would hide the first).
UNPLOTTED_POLICIES = (*WRONG_PROFILE_POLICIES, *OBJECTIVE_POLICIES, *TUNED_BASELINES)
#: Policies whose run does not depend on Ts (they never start a replica).
TS_INDEPENDENT = (*STATIC_POLICIES, "oracle-fluid")
#: Policies that run without the unscored warm-up: a constant fleet and a schedule learn nothing
#: from history (the oracles follow the scored trace's own windows).
UNWARMED_POLICIES = (*STATIC_POLICIES, *ORACLES)


def policy_names(*, with_tailpilot: bool) -> list[str]:
    """Table order."""
    names = [*STATIC_POLICIES, *AUTOSCALERS]
    if with_tailpilot:
        names += [TAILPILOT, *OBJECTIVE_POLICIES, *WRONG_PROFILE_POLICIES]
    return [*names, *TUNED_BASELINES, *ORACLES]


def tailpilot_available() -> bool:
    """Whether the operator's policy and observation code imports."""
    try:
        import tailpilot.bench.tailpilot_policy  # noqa: F401
    except ImportError:
        return False
    return True


@dataclass(frozen=True)
class Setup:
    """Everything that defines a benchmark run."""

    profile: EngineProfile
    slo_ms: float
    seed: int = 1
    duration_s: float = 3600.0
    ts_values: tuple[float, ...] = (5.0, 30.0, 90.0)
    traces: tuple[str, ...] = TRACE_NAMES
    #: Replicas whose capacity the traces are scaled to (peaks at 90% of it).
    ref_replicas: int = 4
    #: Upper replica bound of every policy (and of the oracle's search): a quota, not a target.
    max_replicas: int = 32
    #: An arrival file to run instead of the built-in traces (name "custom").
    trace_file: Path | None = None
    policies: tuple[str, ...] | None = None
    #: Unscored warm-up before each trace, as a share of its duration: every causal policy (the
    #: baselines and TailPilot) serves it first, so that what they learn from history (the learned
    #: speed, the headroom's rises, the baselines' windows) starts as a running service's would.
    #: None for an arrival file (it has no process to draw another realization from).
    warmup_fraction: float = 0.5

    @property
    def warmup_s(self) -> float:
        """Seconds of unscored warm-up before each trace (0 for an arrival file)."""
        return 0.0 if self.trace_file is not None else self.warmup_fraction * self.duration_s

    @property
    def capacity_rps(self) -> float:
        """Reference fleet capacity within the SLO."""
        return float(self.ref_replicas * replica_capacity(self.profile, self.slo_ms))


@dataclass(frozen=True)
class Row:
    """One line of results.csv (plus what the markdown table shows)."""

    trace: str
    ts_s: float
    policy: str
    metrics: RunMetrics
    oracle_ratio: float


@dataclass
class SuiteResult:
    """Rows, trace descriptions, and timelines for the plotted traces."""

    rows: list[Row]
    trace_params: dict[str, str]
    trace_requests: dict[str, int]
    baseline: BaselineParams
    timelines: dict[tuple[str, float, str], Timeline] = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


def trace_of(setup: Setup, name: str) -> TraceSpec:
    """The arrivals of trace `name` in this setup (the file's when the setup names one)."""
    if setup.trace_file is not None:
        arr = read_arrivals(setup.trace_file)
        return TraceSpec(name, arr[arr < setup.duration_s], f"file {setup.trace_file.name}, unscaled")
    return build_trace(name, capacity_rps=setup.capacity_rps, duration_s=setup.duration_s, seed=setup.seed)


def trace_seed(setup: Setup, name: str) -> int:
    """Seed of the service-time jitter (and the oracle's search) on trace `name`."""
    idx = TRACE_NAMES.index(name) if name in TRACE_NAMES else len(TRACE_NAMES)
    return setup.seed * 1000 + idx


def oracle_needs(task: tuple[Setup, str]) -> tuple[str, list[WindowNeed]]:
    """The oracle's per-window needs on one trace (a pool task: (setup, trace name))."""
    setup, name = task
    spec = trace_of(setup, name)
    needs = window_needs(
        spec.arrivals,
        duration_s=setup.duration_s,
        service=setup.profile.service_time,
        slo_ms=setup.slo_ms,
        candidates=batching_candidates(setup.profile, setup.slo_ms),
        max_replicas=setup.max_replicas,
        seed=trace_seed(setup, name),
    )
    return name, needs


def baseline_params(setup: Setup, initial_replicas: int) -> BaselineParams:
    """Model-derived knobs of the baselines (one load test per share of a replica in `LOAD_TEST_SHARES`)."""
    batching = default_batching(setup.profile, setup.slo_ms)
    capacity = replica_capacity(setup.profile, setup.slo_ms)
    tests = []
    for share in LOAD_TEST_SHARES:
        queued, inflight = load_test_targets(
            service=setup.profile.service_time, batching=batching, rate=share * capacity, seed=setup.seed
        )
        tests.append(LoadTest(share, max(1.0, round(queued, 2)), max(1.0, round(inflight, 2))))
    return BaselineParams(
        slo_ms=setup.slo_ms,
        batching=batching,
        initial_replicas=initial_replicas,
        min_replicas=1,
        max_replicas=setup.max_replicas,
        profile_max_batch=setup.profile.max_batch_size,
        load_tests=tuple(tests),
    )


def warm_start_replicas(needs: Sequence[WindowNeed], *, ts: float) -> int:
    """The fleet every policy finds ready at t = 0: the realizable oracle's own first fleet.

    The realizable oracle asks for each window's replicas `ts` ahead, so at t = 0 it holds what
    the first `ts` seconds need, ready at once, as if it had run before the trace began. Every
    other policy starts from that same fleet: a trace is a stretch of a service that was already
    running, and a cold start that only the causal policies pay for (3 replicas against the
    oracle's 7 on T3 at Ts = 90 s, all of TailPilot's misses there) measures the start, not the
    policy.
    """
    return ScheduledOracle(needs, lead_s=ts).replicas_at(0.0)


def scaled_point(point: BatchProfilePoint, factor: float) -> BatchProfilePoint:
    """One profile point with its latencies multiplied by `factor` and its throughput divided by it."""
    return point.model_copy(
        update={
            "p50_ms": None if point.p50_ms is None else point.p50_ms * factor,
            "p95_ms": None if point.p95_ms is None else point.p95_ms * factor,
            "p99_ms": point.p99_ms * factor,
            "throughput_per_s": point.throughput_per_s / factor,
        }
    )


def scale_profile(profile: EngineProfile, factor: float) -> EngineProfile:
    """The same profile with every time multiplied by `factor` (throughputs divided by it).

    Every time term of the fits is scaled (each field in ms, whatever terms the model has), and the
    compute-time fit, when the profile has one, too: the policy learns its speed against it, and a
    profile whose two fits disagree would not be wrong by `factor`.
    """

    def scaled(model: ServiceTimeModel) -> ServiceTimeModel:
        times = {
            name: value * factor
            for name, value in model
            if name.endswith("_ms") and isinstance(value, int | float) and not isinstance(value, bool)
        }
        return model.model_copy(update=times)

    return _relined(profile, scaled, note=f"times x{factor:g}", point_factor=lambda _b: factor)


def slope_profile(profile: EngineProfile, slope_factor: float) -> EngineProfile:
    """The profile with its per-item slope times `slope_factor` and the intercept moved to keep t(1).

    t'(b) = (a + c * (1 - slope_factor)) + c * slope_factor * b for t(b) = a + c * b: the same time
    for one request, and (for slope_factor < 1) batches that look cheaper the larger they are. Each
    point's times are multiplied by t'(b) / t(b) of the service-time fit (throughputs divided by
    it), so the points stay on the new line as they were on the old; the compute-time fit, when
    there is one, is changed the same way.
    """

    def sloped(model: ServiceTimeModel) -> ServiceTimeModel:
        return model.model_copy(
            update={
                "intercept_ms": model.intercept_ms + model.per_item_ms * (1.0 - slope_factor),
                "per_item_ms": model.per_item_ms * slope_factor,
                # The per-request part of the slope (within per_item_ms) goes with it.
                "per_request_ms": model.per_request_ms * slope_factor,
            }
        )

    old, new = profile.service_time, sloped(profile.service_time)

    def ratio(b: float) -> float:
        was = old.mean_ms(b)
        return new.mean_ms(b) / was if was > 0 else 1.0

    return _relined(profile, sloped, note=f"per-item slope x{slope_factor:g}, t(1) kept", point_factor=ratio)


def _relined(
    profile: EngineProfile,
    line: Callable[[ServiceTimeModel], ServiceTimeModel],
    *,
    note: str,
    point_factor: Callable[[float], float],
) -> EngineProfile:
    """`profile` with `line` applied to its fits and each measurement's times scaled by point_factor(batch).

    The served batches (single requests the batcher merged) are scaled at their mean batch.
    """
    compute = profile.compute_time
    served = [
        s.model_copy(update={"wall_s": s.wall_s * point_factor(s.mean_batch)}) for s in profile.served_batches
    ]
    return profile.model_copy(
        update={
            "service_time": line(profile.service_time),
            "compute_time": None if compute is None else line(compute),
            "points": [scaled_point(p, point_factor(p.batch_size)) for p in profile.points],
            "served_batches": served,
            "method": f"{profile.method} [{note} for a robustness run]",
        }
    )


def wrong_profile(policy: str, profile: EngineProfile) -> EngineProfile:
    """The profile a robustness policy (`WRONG_PROFILE_POLICIES`) hands TailPilot, from the true one."""
    if policy == TAILPILOT_SLOPE:
        return slope_profile(profile, SLOPE_FACTOR)
    return scale_profile(profile, UNIFORM_FACTORS[policy])


def make_controller(
    setup: Setup, *, policy: str, ts: float, needs: Sequence[WindowNeed], params: BaselineParams
) -> Controller:
    """The controller for one policy."""
    if policy == "static-peak":
        peak = max(range(len(needs)), key=lambda k: needs[k].replicas)
        return Static(replicas=needs[peak].replicas, batching=needs[peak].batching)
    if policy == "static-mean":
        mean = math.ceil(float(np.mean([n.replicas for n in needs])))
        return Static(replicas=mean, batching=params.batching)
    if policy == "oracle-fluid":
        return ScheduledOracle(needs, lead_s=0.0)
    if policy == "oracle-realizable":
        return ScheduledOracle(needs, lead_s=ts)
    if policy in (TAILPILOT, *OBJECTIVE_POLICIES, *WRONG_PROFILE_POLICIES, *EXPERIMENTAL_POLICIES):
        from tailpilot.bench.tailpilot_policy import RotatingTailPilot, TailPilot, default_spec

        opt = {"backlogRotation": True} if policy == TAILPILOT_ROTATION else {}
        if policy == TAILPILOT_NO_SURGE:
            opt = {"surgeResponse": False}
        spec = default_spec(
            p99_target_ms=setup.slo_ms,
            max_replicas=setup.max_replicas,
            objective_percent=OBJECTIVE_POLICIES.get(policy),
            **opt,
        )
        profile = wrong_profile(policy, setup.profile) if policy in WRONG_PROFILE_POLICIES else setup.profile
        adapter = RotatingTailPilot if policy == TAILPILOT_ROTATION else TailPilot
        return adapter(profile=profile, spec=spec, initial=Target(params.initial_replicas, params.batching))
    return BASELINE_SETTINGS[policy].make(params)


def sim_config(setup: Setup, name: str, *, startup_s: float) -> SimConfig:
    """The fleet every policy runs on for trace `name`."""
    return SimConfig(
        service=setup.profile.service_time,
        duration_s=setup.duration_s,
        startup_s=startup_s,
        seed=trace_seed(setup, name),
        max_replicas=setup.max_replicas,
    )


def run_controller(
    setup: Setup, name: str, controller: Controller, *, startup_s: float, warmup: bool = False
) -> tuple[SimResult, RunMetrics]:
    """One controller on trace `name`, on the fleet every policy runs on, scored like the table.

    `warmup`: the controller serves `setup.warmup_s` seconds of the same process first, unscored.
    """
    arrivals, config = trace_of(setup, name).arrivals, sim_config(setup, name, startup_s=startup_s)
    lead = setup.warmup_s if warmup else 0.0
    if lead > 0:
        history = warmup_arrivals(
            name, capacity_rps=setup.capacity_rps, duration_s=setup.duration_s, warmup_s=lead, seed=setup.seed
        )
        arrivals = np.concatenate([history, arrivals + lead])
        config = replace(config, duration_s=lead + setup.duration_s, score_from_s=lead)
    res = simulate(arrivals_s=arrivals, config=config, controller=controller)
    return res, summarize(res, slo_ms=setup.slo_ms, step_onsets_s=step_onsets(name, setup.duration_s))


def with_learned_scale(
    metrics: RunMetrics,
    scales: Sequence[tuple[float, float]] | None,
    *,
    duration_s: float,
    slopes: Sequence[tuple[float, float]] | None = None,
) -> RunMetrics:
    """A TailPilot run's metrics with when its learned speed settled (inf: never) and its final values.

    The speed is the learned `service_scale` and, where recorded, `slope_scale`: settled when both have.
    """
    if not scales:
        return metrics
    settle_times = [settle_time(series, duration_s=duration_s) for series in (scales, slopes) if series]
    settled = None if any(t is None for t in settle_times) else max(t for t in settle_times if t is not None)
    return replace(
        metrics,
        settle_s=math.inf if settled is None else settled,
        final_scale=float(scales[-1][1]),
        final_slope=float(slopes[-1][1]) if slopes else None,
    )


def _run(
    task: tuple[Setup, str, float, str, list[WindowNeed], BaselineParams, bool],
) -> tuple[str, float, str, RunMetrics, Timeline | None, list[str]]:
    setup, name, ts, policy, needs, params, want_timeline = task
    ctl = make_controller(setup, policy=policy, ts=ts, needs=needs, params=params)
    startup = 0.0 if policy == "oracle-fluid" else ts
    warmup = policy not in UNWARMED_POLICIES
    res, metrics = run_controller(setup, name, ctl, startup_s=startup, warmup=warmup)
    # The learned speed's series runs on the controller's clock, from the warm-up's start.
    metrics = with_learned_scale(
        metrics,
        getattr(ctl, "service_scales", None),
        duration_s=setup.duration_s + (setup.warmup_s if warmup else 0.0),
        slopes=getattr(ctl, "slope_scales", None),
    )
    errors: list[str] = list(getattr(ctl, "errors", []))
    notes = (
        [
            f"{policy} on {name}, Ts={ts:g} s: {len(errors)} decisions raised (previous target kept); "
            f"first: {errors[0][:600]}"
        ]
        if errors
        else []
    )
    return name, ts, policy, metrics, timeline(res) if want_timeline else None, notes


def run_suite(
    setup: Setup, *, jobs: int = 2, plot_traces: Sequence[str] = (), plot_ts: float = 30.0
) -> SuiteResult:
    """Run everything; deterministic for a given `setup` whatever `jobs` is."""
    names = list(setup.traces) if setup.trace_file is None else ["custom"]
    with_tp = tailpilot_available()
    policies = [
        p for p in policy_names(with_tailpilot=with_tp) if setup.policies is None or p in setup.policies
    ]
    if with_tp and setup.policies is not None:
        policies += [p for p in EXPERIMENTAL_POLICIES if p in setup.policies]
    skipped = [] if with_tp else [f"{TAILPILOT}: tailpilot.policy not importable"]
    ctx = multiprocessing.get_context("fork")
    with ctx.Pool(max(1, jobs)) as pool:
        needs = dict(pool.map(oracle_needs, [(setup, n) for n in names], chunksize=1))
        params = {n: baseline_params(setup, needs[n][0].replicas) for n in names}
        tasks = []
        for n in names:
            for policy in policies:
                for ts in setup.ts_values[:1] if policy in TS_INDEPENDENT else setup.ts_values:
                    plot = (
                        n in plot_traces
                        and (ts == plot_ts or policy in TS_INDEPENDENT)
                        and policy not in UNPLOTTED_POLICIES
                    )
                    warm = replace(params[n], initial_replicas=warm_start_replicas(needs[n], ts=ts))
                    tasks.append((setup, n, ts, policy, needs[n], warm, plot))
        # Longest first keeps both workers busy to the end.
        outs = pool.map(_run, tasks, chunksize=1)
    by_key = {(n, ts, p): m for n, ts, p, m, _, _ in outs}
    result = SuiteResult(
        rows=[], trace_params={}, trace_requests={}, baseline=params[names[0]], skipped=skipped
    )
    for n, _ts, p, _, tl, notes in outs:
        result.errors.extend(notes)
        if tl is not None:
            result.timelines[(n, plot_ts, p)] = tl
    for n in names:
        spec = trace_of(setup, n)
        result.trace_params[n] = spec.params
        result.trace_requests[n] = int(spec.arrivals.size)
        for ts in setup.ts_values:
            oracle = by_key.get((n, ts, "oracle-realizable"))
            for p in policies:
                m = by_key[(n, setup.ts_values[0] if p in TS_INDEPENDENT else ts, p)]
                ratio = (
                    m.replica_seconds / oracle.replica_seconds
                    if oracle and oracle.replica_seconds
                    else math.nan
                )
                result.rows.append(Row(trace=n, ts_s=ts, policy=p, metrics=m, oracle_ratio=ratio))
    return result
