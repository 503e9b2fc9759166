"""One control period, whole (`tailpilot.policy.period.run_period`): what it plans and what it hands on."""

from __future__ import annotations

from dataclasses import replace

from policy_fakes import fitted_service, make_profile

from tailpilot.api.autoscaling import BatchingConfig, Observation
from tailpilot.policy import PolicyConfig, PolicyState
from tailpilot.policy.gpu_choice import ProductOption
from tailpilot.policy.period import (
    FitMemory,
    PeriodInput,
    PeriodMemory,
    PeriodPlan,
    ProductContext,
    ServedEngine,
    run_period,
)
from tailpilot.policy.service_fit import FitQuality, ServiceFit, ServiceSample, WindowKind
from tailpilot.policy.wake import HeldRequests

BATCHING = BatchingConfig(max_batch_size=8)
ENGINE = ServedEngine(key="0123456789abcdef", backend="onnxruntime", max_batch_size=8)
CONFIG = PolicyConfig(p99_target_ms=50.0, min_replicas=1, max_replicas=20)


def period(observation: Observation, **changes: object) -> PeriodInput:
    base = PeriodInput(
        config=CONFIG,
        profile=make_profile(),
        engine=ENGINE,
        observation=observation,
        state=PolicyState.initial(replicas=2, batching=BATCHING),
        memory=PeriodMemory(),
        replicas=2,
        batching=BATCHING,
        now_s=100.0,
    )
    return replace(base, **changes)  # type: ignore[arg-type]


def busy(rate: float) -> Observation:
    return Observation(
        at_s=100.0, request_rate=rate, p99_ms=30.0, service_time_ms=5.0, mean_batch_size=1.0, ready_replicas=2
    )


def test_without_a_profile_or_a_window_there_is_no_decision_and_the_state_is_not_moved():
    idle = Observation(at_s=100.0, request_rate=0.0, p99_ms=None, ready_replicas=2)
    plan = run_period(period(idle, profile=None))
    assert (plan.decision, plan.profile, plan.replicas, plan.batching) == (None, None, None, None)
    assert plan.memory.state is None  # the caller keeps restoring it from the status


def test_a_service_without_a_profile_is_sized_by_the_fit_of_its_own_windows():
    plan = run_period(period(busy(400.0), profile=None))
    assert plan.fit is not None and plan.profile is not None and plan.decision is not None
    assert plan.profile.service_time == plan.fit.model
    assert plan.memory.fit.engine_key == ENGINE.key and len(plan.memory.fit.samples) == 1


def test_batching_comes_before_replicas_and_a_refused_reload_leaves_the_batching_in_force():
    plan = run_period(period(busy(3000.0)))
    assert plan.decision is not None and plan.replicas is not None and plan.replicas > 2
    assert plan.memory.state is not None and plan.memory.state.replicas == plan.replicas
    assert plan.batching is not None and plan.batching != BATCHING
    assert plan.memory.state.batching == plan.batching
    refused = plan.after_refused_batching(BATCHING)
    assert refused.state is not None and refused.state.batching == BATCHING
    assert refused.state.replicas == plan.replicas


def test_a_provisional_fit_falls_back_to_the_last_fitted_one_of_the_same_engine_only():
    fitted = fitted_service(intercept_ms=3.0, per_item_ms=0.4, samples=12, batch_range=(1.0, 8.0))
    kept = PeriodMemory(fit=FitMemory(engine_key=ENGINE.key), fitted=fitted)
    assert run_period(period(busy(100.0), memory=kept)).fit == fitted
    other = replace(kept, fit=FitMemory(engine_key="fedcba9876543210", samples=()))
    plan = run_period(period(busy(100.0), memory=other))
    assert plan.fit is not None and plan.fit.quality is FitQuality.PROVISIONAL
    assert plan.memory.fitted is None


def test_saturated_windows_too_few_to_be_fitted_still_replace_a_fit_of_steady_ones():
    # Calibrated at light load on a CPU limit: steady windows read 12 ms a request, Fitted. Then
    # the replica ran flat out and served one every 19 ms, in too few windows to be Fitted alone.
    light = ServiceSample(request_batch=1.0, time_ms=12.0, weight=5.0, kind=WindowKind.STEADY)
    flat_out = ServiceSample(request_batch=1.0, time_ms=19.0, weight=52.0, kind=WindowKind.SATURATED)
    engine = replace(ENGINE, max_batch_size=1)
    single = BatchingConfig(max_batch_size=1)
    state = PolicyState.initial(replicas=2, batching=single)

    def planned(samples: tuple[ServiceSample, ...], fitted: ServiceFit | None) -> PeriodPlan:
        return run_period(
            period(
                Observation(at_s=100.0, request_rate=0.0, p99_ms=None, ready_replicas=2),
                profile=None,
                engine=engine,
                state=state,
                batching=single,
                memory=PeriodMemory(fit=FitMemory(engine_key=ENGINE.key, samples=samples), fitted=fitted),
            )
        )

    steady = planned((light,) * 4, None)
    assert steady.fit is not None and steady.fit.quality is FitQuality.FITTED
    assert steady.fit.windows is WindowKind.STEADY and steady.fit.model.mean_ms(1) == 12.0
    both = planned((light,) * 4 + (flat_out,), steady.memory.fitted)
    assert both.fit is not None and both.fit.windows is WindowKind.SATURATED
    assert both.fit.quality is FitQuality.PROVISIONAL and both.fit.model.mean_ms(1) == 19.0
    # The Fitted fit is remembered still, for when the saturated windows age out.
    assert both.memory.fitted == steady.fit
    # Steady windows too few to be Fitted do not replace a fit of saturated ones.
    of_saturated = fitted_service(per_item_ms=19.0, windows=WindowKind.SATURATED)
    assert planned((light,), of_saturated).fit == of_saturated


def two_products(current: str, *, moving: bool = False) -> ProductContext:
    cheap, dear = make_profile(), make_profile(intercept_ms=2.0, per_item_ms=0.25)
    options = (ProductOption("L4", 0.8, 1, cheap), ProductOption("H100", 4.0, 1, dear))
    return ProductContext(options=options, current=current, serving=current, moving=moving)


def test_a_move_to_another_product_replaces_the_decision_and_restarts_the_state_there():
    products = two_products("A100-no-longer-listed")
    plan = run_period(period(busy(100.0), products=products, replicas=5))
    assert plan.choice is not None and plan.move is not None and plan.choice.replicas is not None
    assert plan.move.product == "L4"
    # The new product's own fleet starts, fewer than serve now where it needs fewer (the old pods
    # serve beside it until it is ready: the operator's hand-over).
    assert plan.move.replicas == plan.choice.replicas < 5
    assert (plan.replicas, plan.batching) == (None, None)
    assert plan.memory.state == PolicyState.initial(replicas=plan.move.replicas, batching=BATCHING)
    assert plan.memory.fit == FitMemory() and plan.memory.moves == plan.choice.memory


def test_while_a_moves_new_replicas_start_they_hold_and_the_old_pods_latency_sizes_nothing():
    moving = two_products("H100", moving=True)
    # The old product's pods, overloaded (often why the service moves): far past the SLO, a queue.
    overloaded = busy(400.0).model_copy(update={"p99_ms": 4000.0, "queue_depth_per_replica": 900.0})
    held = run_period(period(overloaded, products=moving, replicas=1))
    assert held.decision is not None and held.decision.reason == "MovingGpuProduct"
    assert (held.decision.replicas, held.replicas, held.batching) == (1, None, None)
    assert (held.choice, held.move, held.fit) == (None, None, None)
    assert held.memory.state == period(overloaded).state and held.memory.fit == FitMemory()
    # The window is the service's: it is on the error budget's ledger all the same.
    assert held.memory.ledger != PeriodMemory().ledger
    # Once the move is over, the same window is decided on as usual (it asks for replicas).
    after = run_period(period(overloaded, products=replace(moving, moving=False), replicas=1))
    assert after.decision is not None and after.decision.reason != "MovingGpuProduct"
    assert after.replicas is not None and after.replicas > 1


# --- Scale to zero (step 6) ----------------------------------------------------------------------------
ZERO = replace(CONFIG, min_replicas=0, scale_to_zero_idle_s=60.0)


def quiet(at_s: float) -> Observation:
    return Observation(at_s=at_s, request_rate=0.0, recent_request_rate=0.0, p99_ms=None, ready_replicas=1)


def run_quiet(config: PolicyConfig, *, until_s: float, replicas: int = 1) -> list:
    """Periods of no traffic every 15 s from 100 s, the plan of each executed."""
    memory, plans, now = PeriodMemory(), [], 100.0
    while now <= until_s:
        state = (memory.state or PolicyState.initial(replicas=replicas, batching=BATCHING)).with_actual(
            replicas=replicas, batching=BATCHING
        )
        plan = run_period(
            period(quiet(now), config=config, state=state, memory=memory, replicas=replicas, now_s=now)
        )
        plans.append(plan)
        memory = plan.memory
        replicas = plan.replicas if plan.replicas is not None else replicas
        now += 15.0
    return plans


def test_an_idle_service_goes_to_zero_after_the_idle_window_and_stays_there():
    plans = run_quiet(ZERO, until_s=400.0)
    first = next(i for i, p in enumerate(plans) if p.replicas == 0)
    went = plans[first]
    assert went.decision is not None and went.decision.reason == "ScaledToZero"
    assert went.zero is not None and went.zero.to_zero and went.zero.idle_s >= 60.0
    assert all(p.zero is not None and not p.zero.to_zero for p in plans[:first])
    # The quiet began one period before the first idle period: 60 s of quiet is reached at 145 s.
    assert went.observation.at_s == 145.0
    later = plans[first + 1 :]
    assert later and all(p.replicas is None and p.decision.replicas == 0 for p in later)
    assert all(p.memory.state is not None and p.memory.state.replicas == 0 for p in later)


def test_min_replicas_one_never_goes_to_zero():
    plans = run_quiet(CONFIG, until_s=1000.0)
    assert all(p.zero is None for p in plans)
    assert all((p.replicas if p.replicas is not None else 1) >= 1 for p in plans)


def test_traffic_at_zero_is_sized_by_decide_and_ends_the_idle_stretch():
    plans = run_quiet(ZERO, until_s=400.0)
    memory = plans[-1].memory
    assert memory.idle.idle_since_s is not None
    # The activator's wake gave one replica; the next period sees its traffic.
    state = memory.state.with_actual(replicas=1, batching=BATCHING)
    plan = run_period(period(busy(400.0), config=ZERO, state=state, memory=memory, replicas=1, now_s=415.0))
    assert plan.decision is not None and plan.decision.replicas >= 1
    assert plan.decision.reason != "ScaledToZero"
    assert plan.zero is not None and not plan.zero.to_zero
    assert plan.memory.idle.idle_since_s is None and len(plan.memory.idle.stretches) == 1


def test_a_wake_ends_the_idle_stretch_even_before_its_traffic_is_seen():
    plans = run_quiet(ZERO, until_s=400.0)
    memory = plans[-1].memory
    # Woken (one replica), but the window still reads no arrivals: not back to zero at once.
    state = memory.state.with_actual(replicas=1, batching=BATCHING)
    plan = run_period(period(quiet(415.0), config=ZERO, state=state, memory=memory, replicas=1, now_s=415.0))
    assert plan.replicas is None and plan.zero is not None and not plan.zero.to_zero
    assert plan.memory.idle.idle_since_s is None and len(plan.memory.idle.stretches) == 1


def test_a_woken_service_with_no_ready_replica_is_sized_from_the_requests_held_for_it():
    plans = run_quiet(ZERO, until_s=400.0)
    memory = plans[-1].memory
    state = memory.state.with_actual(replicas=1, batching=BATCHING)
    waking = quiet(430.0).model_copy(update={"ready_replicas": 0})

    def woken(held: HeldRequests | None, **changes: object) -> PeriodPlan:
        base = period(waking, config=ZERO, state=state, memory=memory, replicas=1, now_s=430.0, held=held)
        return run_period(replace(base, **changes))  # type: ignore[arg-type]

    # 1000/s over the 30 s since the wake (one replica's capacity): 30 s of it queued when they serve.
    plan = woken(HeldRequests(count=30000, since_s=400.0))
    assert plan.decision is not None and plan.decision.reason == "WakeSized"
    assert plan.replicas == 3  # (30000 / 15 + 1000) / 1000 per replica
    assert plan.memory.state is not None and plan.memory.state.replicas == plan.replicas
    assert "30000 requests held" in plan.decision.message
    # Nothing held, or a replica already ready: decide's plan, unchanged.
    assert woken(None).replicas is None and woken(HeldRequests(0, 400.0)).replicas is None
    ready = woken(
        HeldRequests(count=30000, since_s=400.0), observation=waking.model_copy(update={"ready_replicas": 1})
    )
    assert ready.decision is not None and ready.decision.reason != "WakeSized"
    # The bounds hold.
    capped = woken(HeldRequests(count=30000, since_s=400.0), config=replace(ZERO, max_replicas=2))
    assert capped.replicas == 2
