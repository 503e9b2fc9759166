"""One control period of one service, whole (pure): learn, decide, choose the product, plan the acts.

Why one function: the operator's autoscaler (`tailpilot.controllers.autoscale.autoscaler`) and the benchmark's
TailPilot (`tailpilot.bench.tailpilot_policy`) must run the same period, or the benchmark measures a
policy that does not ship. Each caller only gathers the inputs (the operator from its pods,
Prometheus and the object's status; the simulator from its fleet) and executes the plan; the order
of the steps lives here alone:

1. the window's point is added to the online service-time fit (`tailpilot.policy.service_fit`), for
   the engine in force (a new engine starts a new fit);
2. the engine's measured profile, else the profile that fit stands for, sizes the decision (none:
   nothing to size with, no decision);
3. `decide` (with the surge's reading in the observation when a fast check called the period);
4. where the service lists several GPU products, `choose_product` at the demand the decision saw and
   the batching it chose; a move replaces the decision (the replicas and batching the old product
   needed no longer apply) and the policy's state restarts on the new product;
5. otherwise the plan: the batching first (a live reload), then the replicas;
6. with `min_replicas` 0, whether the last replica goes (`tailpilot.policy.idle`): `decide` sizes a
   service with traffic (at least one replica); the idle history and the error budget say when an
   idle one goes to zero, and a service at zero stays there until traffic wakes it; while a woken
   service has no ready replica, the requests the activator holds for it size the wake
   (`tailpilot.policy.wake`): the decision is raised to the replicas that drain them.

While a move's new replicas start (`ProductContext.moving`), the period holds them instead
(`_while_moving`): what the pods show then is the old product's.

What is carried to the next period is `PeriodMemory`: the policy's state, the fit's windows, the
product choice's memory. The caller keeps it per service and passes it back, as it did the state.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from tailpilot.api.autoscaling import BatchingConfig, Decision, Observation, ScalingAction
from tailpilot.api.engine import EngineProfile
from tailpilot.policy import error_budget, headroom, idle, wake
from tailpilot.policy.config import PolicyConfig, PolicyState, Reason
from tailpilot.policy.core import decide, replica_capacity_per_s
from tailpilot.policy.error_budget import Budget, BudgetLedger
from tailpilot.policy.gpu_choice import MoveMemory, ProductChoice, ProductOption, choose_product
from tailpilot.policy.headroom import RiseHistory
from tailpilot.policy.idle import IdleHistory, ZeroChoice
from tailpilot.policy.service_fit import (
    FitQuality,
    ServiceFit,
    ServiceSample,
    add_sample,
    fit_service_time,
    measures_capacity_unlike,
    sample_of,
)
from tailpilot.policy.surge import SurgeReading, with_surge
from tailpilot.policy.wake import HeldRequests


@dataclass(frozen=True)
class FitMemory:
    """The online service-time fit's windows, and the engine they measured (None: no window kept yet)."""

    engine_key: str | None = None
    samples: tuple[ServiceSample, ...] = ()


@dataclass(frozen=True)
class PeriodMemory:
    """What one period hands the next (the caller keeps it per service).

    Attributes:
        state: The policy's state; None when no decision was made yet (the caller then starts one
            from what the object's status kept, `tailpilot.controllers.core.status.restore_learned`).
        fit: The service-time fit's windows.
        fitted: The last Fitted fit of the engine, which a fit that is provisional again (its windows
            no longer span enough batch sizes) falls back to. An operator that restarts seeds it from
            what the object's status kept (`tailpilot.controllers.core.status.restored_fit`).
        moves: The product choice's memory.
        ledger: The error budget's met and missed time over the compliance period (the service's:
            kept across a move to another product).
        rises: The traffic's rises within the reaction time (the traffic's: kept across a move).
        idle: The traffic's idle stretches (the traffic's: kept across a move).
    """

    state: PolicyState | None = None
    fit: FitMemory = field(default_factory=FitMemory)
    fitted: ServiceFit | None = None
    moves: MoveMemory | None = None
    ledger: BudgetLedger = field(default_factory=BudgetLedger)
    rises: RiseHistory = field(default_factory=RiseHistory)
    idle: IdleHistory = field(default_factory=IdleHistory)


@dataclass(frozen=True)
class ServedEngine:
    """The engine in force, as far as a profile learned online needs it."""

    key: str
    backend: str
    max_batch_size: int


@dataclass(frozen=True)
class ProductContext:
    """The GPU products a service may move between (only for services that list several).

    `options` carry each product's own profile; the option of the product the pods serve on is given
    the profile the period decides with (its measured one, or the one learned online).
    """

    options: tuple[ProductOption, ...]
    #: The product the service is placed on (None: not placed yet).
    current: str | None
    #: The product the pods serve on now (the one whose option takes the period's profile).
    serving: str | None
    #: The choice's memory when this process has none yet (after a restart: the last move's time).
    memory: MoveMemory = field(default_factory=MoveMemory)
    #: A move to `current` is under way: its new replicas are not all ready, so the pods observed
    #: are mostly the old product's (the period holds, `_while_moving`).
    moving: bool = False


@dataclass(frozen=True)
class PeriodInput:
    """Everything one period reads.

    Attributes:
        config: The policy's knobs (`tailpilot.policy.from_spec.policy_config`).
        profile: The engine's measured profile; None: sized by the service time learned online.
        engine: The engine in force (the fit's key, and a learned profile's identity).
        observation: The window's signals, as observed (the surge's reading is applied here).
        surge: A fast check's reading when it called this period early.
        state: The policy's state with the replicas and batching in force.
        memory: What the previous period handed on.
        products: The GPU products to choose between; None: one product (or choice off).
        replicas: Replicas in force (what a move never goes below).
        batching: Batching in force.
        now_s: The caller's clock.
        alert_active: An SLO alert fires.
        held: Requests the activator holds for the service (read only while a woken service has
            no ready replica; None otherwise): the wake is sized from them (`tailpilot.policy.wake`).
    """

    config: PolicyConfig
    profile: EngineProfile | None
    engine: ServedEngine
    observation: Observation
    state: PolicyState
    memory: PeriodMemory
    replicas: int
    batching: BatchingConfig
    now_s: float
    surge: SurgeReading | None = None
    products: ProductContext | None = None
    alert_active: bool = False
    held: HeldRequests | None = None


@dataclass(frozen=True)
class ProductMove:
    """A move to another GPU product: the replicas started there, at that product's own size.

    The old product's replicas keep serving beside them until every new one is ready (the operator
    releases their ReplicaSet from the Deployment for the hand-over), so the new fleet need not
    match the old one's count: a product whose replica serves ten times more starts a tenth of them.
    """

    product: str
    replicas: int


@dataclass(frozen=True)
class PeriodPlan:
    """What the caller executes, and what it keeps.

    Attributes:
        observation: The observation decided on (with the surge's reading).
        fit: The service-time fit after this window (None: no window yet).
        decided: The policy's state right after `decide` (what the status reports), before a move
            restarts it (None without a decision).
        profile: The profile the decision was sized with (None: nothing to size with).
        decision: The decision (None without a profile).
        budget: What is left of the error budget after this period.
        headroom: The factor over the observed arrivals the decision sized the fleet for.
        choice: The product choice (None: one product, a dry run, or no rate).
        move: A move to another product; the decision's replicas and batching then do not apply.
        batching: The batching to reload first, when it changes (None: keep).
        replicas: The replicas to scale to next, when they change (None: keep).
        zero: With min_replicas 0, whether the service goes to (or stays at) zero, and why.
        memory: What the next period reads. When the batching reload fails, the caller replaces it
            with `after_refused_batching`.
    """

    observation: Observation
    fit: ServiceFit | None
    profile: EngineProfile | None
    decision: Decision | None
    memory: PeriodMemory
    budget: Budget
    headroom: float = 1.0
    decided: PolicyState | None = None
    choice: ProductChoice | None = None
    move: ProductMove | None = None
    batching: BatchingConfig | None = None
    replicas: int | None = None
    zero: ZeroChoice | None = None

    def after_refused_batching(self, batching: BatchingConfig) -> PeriodMemory:
        """The memory when the pods refused the new batching: the state keeps the one in force."""
        state = self.memory.state
        if state is None:
            return self.memory
        return replace(self.memory, state=state.with_actual(replicas=state.replicas, batching=batching))


def learned_profile(fit: ServiceFit | None, *, engine: ServedEngine) -> EngineProfile | None:
    """The policy's view of an engine without a profile: the service time fitted online (None: no fit)."""
    if fit is None:
        return None
    return EngineProfile(
        engine_key=engine.key,
        backend=engine.backend,
        precision="",
        hardware="serving pods",
        max_batch_size=engine.max_batch_size,
        points=[],
        service_time=fit.model,
        # Compared with the pods' compute times by the policy's hardware-speed learning: the fit of
        # those same times keeps that learning at 1, where the fit already is the serving speed.
        compute_time=fit.compute_model,
        method=f"learned online from the serving pods' counters ({fit.quality.value}, {fit.samples} windows)",
    )


def run_period(period: PeriodInput) -> PeriodPlan:
    """One control period (module docstring): the plan to execute and the memory to keep."""
    observation = with_surge(period.observation, period.surge)
    if period.products is not None and period.products.moving:
        return _while_moving(period, observation)
    fit, learned = _learn(period, observation)
    learned, left, factor = _traffic(period, observation, learned)
    profile = period.profile or learned_profile(fit, engine=period.engine)
    if profile is None:
        # Nothing served yet to learn from: nothing to size replicas with. The state is not moved.
        return PeriodPlan(
            observation=observation, fit=fit, profile=None, decision=None, memory=learned, budget=left
        )
    decision, state = decide(
        # Zero is this function's call (step 6), not decide's: decide sizes for the traffic.
        config=replace(period.config, min_replicas=max(1, period.config.min_replicas)),
        profile=profile,
        observation=observation,
        state=period.state,
        now_s=period.now_s,
        alert_active=period.alert_active,
        surge=period.surge is not None,
        headroom=factor,
    )
    choice = None
    if period.products is not None and not decision.dry_run and observation.request_rate is not None:
        choice = _choose(period, observation, state, profile, headroom=factor)
        if choice.moved and choice.product is not None and choice.product != period.products.current:
            move = ProductMove(product=choice.product, replicas=choice.replicas or period.replicas)
            # What was learned (the P99 correction, the speed, the fit) belongs to the engine left.
            restarted = PolicyState.initial(replicas=move.replicas, batching=period.batching)
            return PeriodPlan(
                observation=observation,
                fit=fit,
                profile=profile,
                decision=decision,
                decided=state,
                choice=choice,
                move=move,
                memory=PeriodMemory(
                    state=restarted,
                    moves=choice.memory,
                    ledger=learned.ledger,
                    rises=learned.rises,
                    idle=learned.idle,
                ),
                budget=left,
                headroom=factor,
            )
    moves = choice.memory if choice is not None else period.memory.moves
    if period.held is not None and period.held.count > 0 and observation.ready_replicas == 0:
        decision, state = _wake_sized(period, period.held, decision, state, profile)
    zero = _zero(period, learned.idle, left) if period.config.min_replicas == 0 else None
    if zero is not None and zero.to_zero and _idle(period, observation):
        decision, state = _to_zero(decision, state, zero, now_replicas=period.replicas)
    acts = not decision.dry_run
    return PeriodPlan(
        observation=observation,
        fit=fit,
        profile=profile,
        decision=decision,
        decided=state,
        choice=choice,
        batching=decision.batching if acts and decision.batching != period.batching else None,
        replicas=decision.replicas if acts and decision.replicas != period.replicas else None,
        memory=replace(learned, state=state, moves=moves),
        budget=left,
        headroom=factor,
        zero=zero,
    )


def _while_moving(period: PeriodInput, observation: Observation) -> PeriodPlan:
    """A move's new replicas are starting: hold them, learn only what belongs to the traffic.

    What the pods show now is the old product's: its latency and queue, often why the service
    moves. Sized on the new product's state, they would add replicas of the new product for a
    backlog only the old pods can drain (a Service moves no queued request), and a miss would
    count against the new product in the choice's memory (`make bench-products`' flash crowd at
    Ts = 90 s before this hold: 1 H100 started, 19 asked for while the L4s drained).
    So the replicas the choice sized at the demand hold until every new one is ready, no product
    move is considered, and the engine's fit takes no window. The error budget (the service's)
    and the rises and idle time (the traffic's) are recorded as in any period.
    """
    learned, left, factor = _traffic(period, observation, period.memory)
    products = period.products
    assert products is not None
    decision = Decision(
        at_s=period.now_s,
        action=ScalingAction.HOLD,
        replicas=period.replicas,
        batching=period.batching,
        reason=Reason.MOVING_GPU_PRODUCT,
        message=(
            f"moving to {products.current}: {period.replicas} replica(s) start there; the old product's "
            "pods serve until they are ready, and their latency and queue do not size the new product"
        ),
    )
    return PeriodPlan(
        observation=observation,
        fit=None,
        profile=period.profile,
        decision=decision,
        decided=period.state,
        memory=replace(learned, state=period.state),
        budget=left,
        headroom=factor,
    )


def _traffic(
    period: PeriodInput, observation: Observation, memory: PeriodMemory
) -> tuple[PeriodMemory, Budget, float]:
    """What every period records, a move's too: the budget's ledger, the rises, the idle time."""
    learned, left, factor = _headroom(period, observation, memory)
    quiet = idle.record(
        learned.idle,
        now_s=period.now_s,
        idle=_idle(period, observation),
        quiet_s=period.config.control_period_s,
    )
    return replace(learned, idle=quiet), left, factor


def _idle(period: PeriodInput, observation: Observation) -> bool:
    """No arrivals over the last control period (at zero, no pods to read: idle until a wake).

    A service woken from zero since the last period is not idle: the wake was a request, whatever
    the observation (its replica may not serve yet, or its held requests not be counted yet).
    """
    before = period.memory.state
    if before is not None and before.replicas == 0 and period.replicas > 0:
        return False
    recent = observation.recent_request_rate
    if recent is None:
        recent = observation.request_rate
    if period.replicas == 0:
        return recent is None or recent <= 0
    return recent is not None and recent <= 0


def _zero(period: PeriodInput, history: IdleHistory, left: Budget) -> ZeroChoice:
    """Whether the last replica goes: the idle history priced by the error budget left."""
    config, startup = period.config, _startup_s(period)
    return idle.zero_choice(
        history,
        now_s=period.now_s,
        idle_window_s=config.scale_to_zero_idle_s,
        # A wake's held requests wait out the start-up; the windows they fall in miss the target.
        miss_per_wake_s=startup + config.control_period_s,
        startup_s=startup,
        objective=config.objective,
        budget_remaining=left.remaining,
    )


def _startup_s(period: PeriodInput) -> float:
    """The replicas' start-up: learned from the service's own scale-ups, else the configured one."""
    learned = period.state.learned.replica_startup_s
    return learned if learned is not None else period.config.replica_startup_s


def _wake_sized(
    period: PeriodInput, held: HeldRequests, decision: Decision, state: PolicyState, profile: EngineProfile
) -> tuple[Decision, PolicyState]:
    """The decision raised to the replicas the held requests need (`tailpilot.policy.wake`), if more."""
    config = period.config
    size = wake.wake_size(
        held,
        now_s=period.now_s,
        startup_s=_startup_s(period),
        control_period_s=config.control_period_s,
        capacity_per_s=replica_capacity_per_s(profile, state),
        replicas_now=period.replicas,
        max_replicas=config.max_replicas,
        max_step=config.max_scale_up_step,
    )
    if decision.dry_run or size.replicas <= decision.replicas:
        return decision, state
    sized = decision.model_copy(
        update={
            "replicas": size.replicas,
            "action": ScalingAction.SCALE_UP,
            "reason": "WakeSized",
            "message": size.message,
        }
    )
    return sized, state.with_actual(replicas=size.replicas, batching=state.batching)


def _to_zero(
    decision: Decision, state: PolicyState, zero: ZeroChoice, *, now_replicas: int
) -> tuple[Decision, PolicyState]:
    """The decision and state at zero replicas (the batching is kept for the wake)."""
    action = ScalingAction.NONE if now_replicas == 0 else ScalingAction.SCALE_DOWN
    zeroed = decision.model_copy(
        update={"replicas": 0, "action": action, "reason": "ScaledToZero", "message": zero.reason}
    )
    return zeroed, state.with_actual(replicas=0, batching=state.batching)


def _learn(period: PeriodInput, observation: Observation) -> tuple[ServiceFit | None, PeriodMemory]:
    """The window added to the engine's fit, and the fit.

    While the fit is provisional, the last Fitted one stands in, unless the provisional one comes from
    saturated windows and the Fitted one does not (`measures_capacity_unlike`).
    """
    batching = period.state.batching
    sample = sample_of(
        observation,
        max_batch_size=batching.max_batch_size,
        instances=batching.instances_per_replica,
        replicas=period.state.replicas,
    )
    memory = period.memory
    same_engine = memory.fit.engine_key in (None, period.engine.key)
    windows = FitMemory(
        engine_key=period.engine.key, samples=add_sample(memory.fit.samples if same_engine else (), sample)
    )
    fitted = fit_service_time(windows.samples, max_batch_size=batching.max_batch_size)
    kept = memory.fitted if same_engine else None
    if fitted is not None and fitted.quality is FitQuality.FITTED:
        kept = fitted
    learned = replace(memory, fit=windows, fitted=kept)
    if fitted is None:
        return kept, learned
    if (
        fitted.quality is FitQuality.PROVISIONAL
        and kept is not None
        and not measures_capacity_unlike(fitted, kept)
    ):
        return kept, learned
    return fitted, learned


def _headroom(
    period: PeriodInput, observation: Observation, memory: PeriodMemory
) -> tuple[PeriodMemory, Budget, float]:
    """The period's time on the budget's ledger, its rise on the history, and the headroom they ask for.

    The reaction time is the decision's period plus the replicas' start-up (learned from the
    service's own scale-ups, else the configured one); a queue absorbs rises shorter than the target.
    """
    config, state = period.config, period.state
    met = None
    if observation.p99_ms is not None and (observation.request_rate or 0.0) > 0:
        met = observation.p99_ms <= config.p99_target_ms
    ledger = error_budget.record(
        memory.ledger,
        now_s=period.now_s,
        met=met,
        compliance_period_s=config.compliance_period_s,
        control_period_s=config.control_period_s,
    )
    startup = state.learned.replica_startup_s
    reaction_s = (startup if startup is not None else config.replica_startup_s) + config.control_period_s
    value = headroom.rise(
        observation.arrival_counts,
        bin_s=observation.arrival_bin_s or 0.0,
        horizon_s=reaction_s,
        absorbed_s=config.p99_target_ms / 1000.0,
    )
    rises = headroom.learn(memory.rises, value, now_s=period.now_s)
    left = error_budget.budget(
        ledger, objective=config.objective, compliance_period_s=config.compliance_period_s
    )
    factor = headroom.headroom(
        rises,
        rate_per_s=max(observation.request_rate or 0.0, observation.recent_request_rate or 0.0),
        objective=config.objective,
        budget_remaining=left.remaining,
    )
    return replace(memory, ledger=ledger, rises=rises), left, factor


def _choose(
    period: PeriodInput,
    observation: Observation,
    state: PolicyState,
    profile: EngineProfile,
    *,
    headroom: float,
) -> ProductChoice:
    """`choose_product` at the decision's demand and batching, with the serving product's profile."""
    products = period.products
    assert products is not None
    options = tuple(
        replace(o, profile=profile) if o.product == products.serving else o for o in products.options
    )
    learned_startup = state.learned.replica_startup_s
    return choose_product(
        options,
        current=products.current,
        config=period.config,
        observation=observation,
        batching=state.batching,
        startup_s=learned_startup if learned_startup is not None else period.config.replica_startup_s,
        now_s=period.now_s,
        memory=period.memory.moves or products.memory,
        headroom=headroom,
    )
