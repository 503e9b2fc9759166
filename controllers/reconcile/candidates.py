"""Candidate engines: the GPU products a service lists, and `precision: auto`'s precisions.

A service with several candidates has one engine per candidate: each is built and profiled (the
same build and profile Jobs as any engine, through a copy of the service pinned to the candidate)
and the chosen one is served through the ordinary path: from this stage on, the pass's service is
what its pods run, one product and one precision.
"""

from __future__ import annotations

from typing import TypeVar

from tailpilot.api import constants as c
from tailpilot.api.autoscaling import Observation
from tailpilot.api.v1alpha1 import (
    EngineCandidateStatus,
    EngineStatus,
    GpuCandidateStatus,
    GpuChoiceStatus,
    InferenceService,
    Precision,
    PrecisionCandidateStatus,
    PrecisionChoiceStatus,
    ProfilingStatus,
    ServiceTimeStatus,
)
from tailpilot.controllers.core.conditions import ConditionUpdate, derive_ready
from tailpilot.controllers.core.events import EventRecord
from tailpilot.controllers.core.kubeapi import JOBS
from tailpilot.controllers.core.status import (
    batching_in_force,
    engine_status,
    served_result,
)
from tailpilot.controllers.gpu.gpu_inventory import GpuInventory
from tailpilot.controllers.gpu.gpu_products import (
    PHASE_BUILDING,
    PHASE_BUILT,
    PHASE_FAILED,
    PHASE_NO_CAPACITY,
    PHASE_PROFILED,
    PHASE_PROFILING,
    PHASE_SERVING,
    SETTLED,
    candidate_profile,
    choice_condition,
    choice_status,
    chooses_product,
    options_of,
    price_of,
    serving_product,
)
from tailpilot.controllers.reconcile.build_state import BuildPhase, assess_build
from tailpilot.controllers.reconcile.deps import PassDeps
from tailpilot.controllers.reconcile.engine_jobs import EngineJobs
from tailpilot.controllers.reconcile.pass_context import ReconcilePass, ReconcileResult
from tailpilot.controllers.reconcile.profiling import Profiling
from tailpilot.controllers.reconcile.status_writer import StatusWriter
from tailpilot.manifests import build_job as job_manifests
from tailpilot.manifests import placement
from tailpilot.manifests import profile_job as profile_manifests
from tailpilot.policy.from_spec import policy_config
from tailpilot.policy.gpu_choice import REASON_WAITING, MoveMemory, choose_product
from tailpilot.policy.precision_choice import REASON_WAITING as REASON_PRECISION_WAITING
from tailpilot.policy.precision_choice import PrecisionOption, choose_precision

#: A candidate engine's record: of a GPU product, or of a precision.
Candidate = TypeVar("Candidate", bound=EngineCandidateStatus)


class Candidates:
    """Pins the pass's service to the GPU product and the precision chosen among its candidates."""

    def __init__(
        self,
        deps: PassDeps,
        jobs: EngineJobs,
        profiling: Profiling,
        inventory: GpuInventory,
        writer: StatusWriter,
    ) -> None:
        self.deps = deps
        self.jobs = jobs
        self.profiling = profiling
        self.inventory = inventory
        self.writer = writer

    def choose(self, p: ReconcilePass) -> ReconcileResult | None:
        """Pin `p.isvc` to the chosen product and precision; GpuProductChosen onto `p.conditions`.

        Returns, while a choice waits for its candidates, the pass's result (the children left as
        they are); None when the pass goes on.
        """
        if chooses_product(p.isvc):
            placed = self._gpu_candidates(p)
            p.conditions += [u for u in (choice_condition(p.status.gpu),) if u is not None]
            if placed is None:
                message = p.status.gpu.message if p.status.gpu else ""
                return self._choosing(p, c.REASON_CHOOSING_GPU_PRODUCT, message)
            # From here on the service is what its pods run: one product.
            p.isvc = p.isvc.on_product(placed)
        elif p.status.gpu is not None:
            # The spec names one product again: the choice and its condition no longer apply.
            conditions = [x for x in p.status.conditions if x.type != c.CONDITION_GPU_PRODUCT_CHOSEN]
            p.status = p.status.model_copy(update={"gpu": None, "conditions": conditions})
        if p.isvc.spec.engine.precision is Precision.AUTO:
            precision = self._precision_candidates(p)
            if precision is None:
                message = p.status.precision.message if p.status.precision else ""
                return self._choosing(p, c.REASON_CHOOSING_PRECISION, message)
            p.isvc = p.isvc.with_precision(precision)
        elif p.status.precision is not None:
            p.status = p.status.model_copy(update={"precision": None})
        return None

    def _choosing(self, p: ReconcilePass, reason: str, message: str) -> ReconcileResult:
        """Candidates still being built or profiled: say what is awaited.

        The children are left as they are, so an engine chosen earlier keeps serving until the new
        choice is made.
        """
        engine = ConditionUpdate(c.CONDITION_ENGINE_READY, c.STATUS_FALSE, reason, message)
        rollout = ConditionUpdate(
            c.CONDITION_ROLLOUT_READY,
            c.STATUS_FALSE,
            c.REASON_WAITING_FOR_ENGINE,
            "waiting for the choice among the candidate engines",
        )
        serving = served_result(p.status) is not None
        updates = [
            engine,
            rollout,
            *p.conditions,
            derive_ready(engine=engine, rollout=rollout, serving_engine=serving),
        ]
        written = self.writer.write(p.body, p.status, updates, p.generation)
        self.writer.post(p.body, p.events)
        return ReconcileResult(requeue_after=10.0, status_written=written)

    # ---- GPU products ---------------------------------------------------------------------------------
    def _gpu_candidates(self, p: ReconcilePass) -> str | None:
        """Build and profile each allowed product's engine; place the service once all are known.

        Sets `status.gpu`; returns the product serving (None: not placed yet). Engines are built
        for every product up front, in parallel: a move then only waits for pods, and a TensorRT
        plan runs only on the product it was built for. A product none of whose nodes has a free
        GPU gets nothing built (NoCapacity) until one has.
        """
        isvc, status = p.isvc, p.status
        gpu = isvc.spec.runtime.gpu
        if gpu is None:  # chooses_product checked it
            raise ValueError("a GPU product choice without spec.runtime.gpu")
        previous = status.gpu
        earlier = {x.product: x for x in (previous.candidates if previous else [])}
        placed = serving_product(isvc, status)
        tolerations = placement.tolerations(gpu=True, user=isvc.spec.runtime.tolerations)
        candidates: list[GpuCandidateStatus] = []
        for product in gpu.allowed_products():
            available = self.inventory.replicas_available(
                product=product,
                gpus_per_replica=gpu.count,
                tolerations=tolerations,
                service=(isvc.namespace, isvc.name),
            )
            if product == placed:
                candidate = self._serving_candidate(product, p, earlier.get(product))
            else:
                candidate = self._candidate(
                    p,
                    isvc.on_product(product),
                    earlier.get(product),
                    GpuCandidateStatus(product=product),
                    available,
                )
            price = price_of(isvc, product, self.deps.settings.gpu_prices)
            candidates.append(
                candidate.model_copy(update={"price_per_hour": price, "replicas_available": available})
            )
        if placed is not None:
            kept = (previous or GpuChoiceStatus()).model_copy(update={"candidates": candidates})
            p.status = status.model_copy(update={"gpu": kept})
            return placed
        if not all(x.phase in SETTLED for x in candidates):
            pending = ", ".join(
                f"{x.product} {x.phase.lower()}" for x in candidates if x.phase not in SETTLED
            )
            waiting = (previous or GpuChoiceStatus()).model_copy(
                update={
                    "product": None,
                    "reason": REASON_WAITING,
                    "message": f"placed once every product's engine is profiled ({pending})",
                    "candidates": candidates,
                }
            )
            p.status = status.model_copy(update={"gpu": waiting})
            return None
        return self._place(p, candidates)

    def _place(self, p: ReconcilePass, candidates: list[GpuCandidateStatus]) -> str | None:
        """Every product's engine is known: choose where the service runs (None: nowhere yet)."""
        isvc, status = p.isvc, p.status
        previous = status.gpu
        config = policy_config(isvc.spec, control_period_s=self.deps.settings.control_period_seconds)
        now_s = self.deps.clock.time()
        choice = choose_product(
            options_of(isvc, candidates),
            current=None,
            config=config,
            observation=Observation(
                at_s=now_s,
                request_rate=(status.observed.request_rate if status.observed else None) or 0.0,
                p99_ms=None,
            ),
            batching=batching_in_force(isvc, status),
            startup_s=config.replica_startup_s,
            now_s=now_s,
            memory=MoveMemory(),
        )
        chosen = choice_status(previous, choice, candidates, now=self.deps.now())
        if choice.product is not None:
            p.events.append(
                EventRecord("Normal", choice.reason, f"placed on {choice.product}: {choice.message}")
            )
        elif previous is None or previous.reason != choice.reason:
            p.events.append(EventRecord("Warning", choice.reason, choice.message))
        p.status = status.model_copy(update={"gpu": chosen})
        return choice.product

    @staticmethod
    def _serving_candidate(
        product: str, p: ReconcilePass, earlier: GpuCandidateStatus | None
    ) -> GpuCandidateStatus:
        """The product serving, from the engine and profile it serves with (once they are its own)."""
        base = earlier or GpuCandidateStatus(product=product)
        engine, profile = p.status.engine, p.status.profile
        if engine is None or profile is None or profile.hardware != product:
            return base.model_copy(update={"phase": PHASE_SERVING})
        return base.model_copy(
            update={
                "phase": PHASE_SERVING,
                "message": "",
                "engine_key": engine.key,
                "request_key": engine.request_key,
                "profile_key": profile.key,
                "service_time": profile.service_time,
                "max_batch_size": max((x.batch_size for x in profile.points), default=None),
            }
        )

    # ---- precisions -----------------------------------------------------------------------------------
    def _precision_candidates(self, p: ReconcilePass) -> Precision | None:
        """`precision: auto`: build and profile every candidate precision, then choose one (once).

        The precision chosen stays while its build request is the spec's; a spec change builds
        every candidate again and chooses again once all are settled, the old engine serving
        meanwhile. Sets `status.precision`; returns the precision to serve (None: not chosen yet, or
        none can serve).
        """
        isvc, previous = p.isvc, p.status.precision
        earlier = {x.precision: x for x in (previous.candidates if previous else [])}
        chosen = previous.precision if previous else None
        candidates: list[PrecisionCandidateStatus] = []
        serving: Precision | None = None
        precisions = [x.value for x in isvc.spec.candidate_precisions()]
        for index, precision in enumerate(isvc.spec.candidate_precisions()):
            later = precisions[index + 1 :]
            pinned = isvc.with_precision(precision)
            request_key = job_manifests.make_build_request(isvc=pinned).request_key()
            known = earlier.get(precision.value)
            if precision.value == chosen and known is not None and known.request_key == request_key:
                serving = precision
                candidates.append(known.model_copy(update={"phase": PHASE_SERVING}))
                continue
            fresh = PrecisionCandidateStatus(precision=precision.value)
            busy = next(
                (
                    other.precision
                    for other in (*candidates, *(earlier[q] for q in later if q in earlier))
                    if other.precision != precision.value and other.phase in (PHASE_BUILDING, PHASE_PROFILING)
                ),
                None,
            )
            candidate = self._candidate(p, pinned, known, fresh, None, wait_for=busy)
            if candidate.phase == PHASE_SERVING:
                candidate = candidate.model_copy(update={"phase": PHASE_PROFILED})
            candidates.append(candidate)
        base = previous or PrecisionChoiceStatus()
        if serving is not None:
            p.status = p.status.model_copy(
                update={"precision": base.model_copy(update={"candidates": candidates})}
            )
            return serving
        return self._choose_precision(p, base, candidates)

    def _choose_precision(
        self, p: ReconcilePass, base: PrecisionChoiceStatus, candidates: list[PrecisionCandidateStatus]
    ) -> Precision | None:
        """Every candidate precision is settled (or still waited for): the policy's choice, once."""
        isvc, status = p.isvc, p.status
        config = policy_config(isvc.spec, control_period_s=self.deps.settings.control_period_seconds)
        max_batch = isvc.spec.batching.max_batch_size
        choice = choose_precision(
            tuple(
                PrecisionOption(
                    precision=x.precision,
                    profile=candidate_profile(x, name=x.precision, max_batch_size=max_batch),
                    unusable=x.message or x.phase if x.phase in (PHASE_FAILED, PHASE_NO_CAPACITY) else "",
                )
                for x in candidates
            ),
            config=config,
            rate_per_s=(status.observed.request_rate if status.observed else None) or 0.0,
            batching=batching_in_force(isvc, status),
        )
        figures = {f.precision: f for f in choice.figures}
        candidates = [
            x.model_copy(
                update={
                    "replicas_needed": figures[x.precision].replicas,
                    "capacity_per_replica_per_s": figures[x.precision].capacity_per_replica_per_s,
                    "phase": PHASE_SERVING if x.precision == choice.precision else x.phase,
                }
            )
            for x in candidates
        ]
        decided = base.model_copy(
            update={
                "precision": choice.precision,
                "reason": choice.reason,
                "message": choice.message[:4096],
                "candidates": candidates,
            }
        )
        if choice.precision is not None:
            p.events.append(EventRecord("Normal", choice.reason, f"serving precision {choice.message}"))
        elif choice.reason not in (base.reason, REASON_PRECISION_WAITING):
            p.events.append(EventRecord("Warning", choice.reason, choice.message))
        p.status = status.model_copy(update={"precision": decided})
        return Precision(choice.precision) if choice.precision else None

    # ---- one candidate --------------------------------------------------------------------------------
    def _candidate(
        self,
        p: ReconcilePass,
        isvc: InferenceService,
        earlier: Candidate | None,
        fresh: Candidate,
        available: int | None,
        wait_for: str | None = None,
    ) -> Candidate:
        """Build, then profile, a candidate engine not serving (`isvc` pinned to its product or precision).

        `fresh` is the candidate's record before anything is known; `available` the replicas its
        product's nodes can hold (None: not known, or not a GPU product candidate). `wait_for`: another
        candidate is being built or profiled on the same hardware; this one's profile Job is not
        started until it is done (two measurements on one node's CPU would skew each other).
        """
        request = job_manifests.make_build_request(isvc=isvc)
        request_key = request.request_key()
        product = request.target
        base = (
            earlier
            if earlier is not None and earlier.request_key == request_key
            else fresh.model_copy(update={"request_key": request_key})
        )
        if base.phase == PHASE_SERVING:  # it served until a move away: its profile still holds
            base = base.model_copy(update={"phase": PHASE_PROFILED if base.service_time else ""})
        if base.phase in (PHASE_PROFILED, PHASE_FAILED):
            return base
        job_name = job_manifests.build_job_name(isvc_name=isvc.name, request_key=request_key)
        engine_job = self.jobs.read(isvc, job_name)
        if engine_job.not_owned:
            message = engine_job.taken("build result")
            if base.message != message:  # told once
                p.events.append(EventRecord("Warning", c.REASON_CHILD_NAME_TAKEN, message))
            return base.model_copy(update={"phase": PHASE_BUILDING, "message": message})
        if engine_job.job is None and available == 0:
            return base.model_copy(
                update={"phase": PHASE_NO_CAPACITY, "message": f"no node of {product} has a free GPU"}
            )
        state = assess_build(engine_job.job, engine_job.pods)
        if state.phase is BuildPhase.ABSENT:
            p.events.extend(self.jobs.create_build_job(isvc, request, 1))
            return base.model_copy(update={"phase": PHASE_BUILDING, "message": f"build Job {job_name}"})
        if state.phase is BuildPhase.RUNNING:
            detail = state.waiting or state.message or "running"
            return base.model_copy(
                update={"phase": PHASE_BUILDING, "message": f"build Job {job_name}: {detail}"}
            )
        if state.phase is not BuildPhase.SUCCEEDED or state.result is None:
            return base.model_copy(
                update={"phase": PHASE_FAILED, "message": f"build failed: {state.message or state.reason}"}
            )
        built = engine_status(state.result, request_key=request_key, built_at=None)
        if isinstance(base, PrecisionCandidateStatus):
            base = base.model_copy(update={"accuracy": built.accuracy})
        if not isvc.spec.engine.profile:
            return base.model_copy(
                update={
                    "phase": PHASE_FAILED,
                    "engine_key": built.key,
                    "message": "spec.engine.profile is false: nothing to compare the products with",
                }
            )
        return self._profile_candidate(p, isvc, base, built, wait_for)

    def _profile_candidate(
        self,
        p: ReconcilePass,
        isvc: InferenceService,
        base: Candidate,
        built: EngineStatus,
        wait_for: str | None,
    ) -> Candidate:
        """The profile half of `_candidate`: run (or wait to run) the built engine's profile Job."""
        profile_request = self.jobs.profile_request(isvc, built)
        profile_key = profile_request.profile_key()
        base = base.model_copy(update={"engine_key": built.key, "profile_key": profile_key})
        if wait_for is not None:
            job_name = profile_manifests.profile_job_name(isvc_name=isvc.name, profile_key=profile_key)
            if self.deps.kube.get(JOBS, isvc.namespace, job_name) is None:
                # Profiles that would share a node run one at a time: each measures alone.
                return base.model_copy(update={"phase": PHASE_BUILT, "message": f"profiled after {wait_for}"})
        earlier_step = ProfilingStatus(
            profile_key=profile_key,
            engine_key=built.key,
            phase="Running" if base.phase == PHASE_PROFILING else "",
        )
        # The candidate's record keeps no profile step of its own: an Event the step found new is
        # new only when the record's message changes.
        step = self.profiling.step(isvc, earlier_step, profile_request)
        profiling, summary = step.profiling, step.summary
        if not step.done:
            said = f": {profiling.message}" if profiling.message else ""
            message = f"profile Job {profiling.job_name}{said}"
            if profiling.reason != c.REASON_CHILD_NAME_TAKEN or base.message != message:
                p.events.extend(step.events)
            return base.model_copy(update={"phase": PHASE_PROFILING, "message": message})
        p.events.extend(step.events)
        if summary is None:
            return base.model_copy(
                update={
                    "phase": PHASE_FAILED,
                    "message": f"profile failed: {profiling.reason}: {profiling.message}",
                }
            )
        return base.model_copy(
            update={
                "phase": PHASE_PROFILED,
                "message": "",
                "service_time": ServiceTimeStatus.model_validate(
                    summary.service_time.model_dump(by_alias=True)
                ),
                "max_batch_size": max((x.batch_size for x in summary.points), default=None),
            }
        )
