"""Reconcile one InferenceService: validate, build and profile the engine, roll out Triton, report status.

Level-based and idempotent: every pass reads the object and its children,
computes what should exist with the pure builders (`tailpilot.manifests`),
compares (`drift.plan`) and writes only what differs. Names are deterministic
(the build Job is named by the build request's key, the profile Job by the
profile request's), so a pass interrupted at any point (operator SIGKILLed) is
completed by the next one without duplicates.

An engine goes build Job -> profile Job -> served. The profile Job measures it
in the service's own Triton on a node of its hardware (`manifests.profile_job`);
a profile that fails (or cannot be scheduled before its deadline) lets the
engine serve without one, since the autoscaler learns the service time online.
The engine being served only changes when a new engine is built and its profile
step has ended, so a bad update never takes a serving service down. When only
where it serves changes (the Triton image, the GPU count), the served engine is
profiled again in the background and keeps its old profile until then.

Every pass first makes sure the service's admin-key Secret exists (`admin_key`): the profile Job's
Triton and the serving pods read their restricted APIs' key from it, so no pod is started before it,
and none at all while a Secret of its name belongs to someone else (`ChildNameTaken`).

The pass is a sequence of stages over one pass context (`reconcile.pass_context.ReconcilePass`),
each a module of `tailpilot.controllers.reconcile` with one job: admission, the candidate engines,
the engine (build, profile, regression gate, then the rollout strategy), the rollout of the
children, the last cold start's breakdown, the closing conditions, the status write and the Events.
"""

from __future__ import annotations

from tailpilot.controllers.core.clock import SYSTEM_CLOCK, Clock
from tailpilot.controllers.core.events import EventRecord
from tailpilot.controllers.core.kubeapi import ISVC
from tailpilot.controllers.core.seams import ReconcilerKube
from tailpilot.controllers.core.settings import OperatorSettings
from tailpilot.controllers.core.status import served_result
from tailpilot.controllers.gpu.gpu_inventory import GpuInventory
from tailpilot.controllers.reconcile.admission import Admission
from tailpilot.controllers.reconcile.build import EngineBuild
from tailpilot.controllers.reconcile.candidates import Candidates
from tailpilot.controllers.reconcile.children import Children
from tailpilot.controllers.reconcile.cold_start import ColdStartReport
from tailpilot.controllers.reconcile.conclusion import conclude, result_of
from tailpilot.controllers.reconcile.deps import PassDeps
from tailpilot.controllers.reconcile.engine_jobs import EngineJobs
from tailpilot.controllers.reconcile.pass_context import ReconcilePass, ReconcileResult
from tailpilot.controllers.reconcile.profiling import Profiling
from tailpilot.controllers.reconcile.regression_gate import release_stale_hold
from tailpilot.controllers.reconcile.rollout import Rollout
from tailpilot.controllers.reconcile.status_writer import StatusWriter
from tailpilot.controllers.reconcile.strategies import StrategyRegistry
from tailpilot.controllers.rollout.canary_rollout import drop_superseded_canary
from tailpilot.manifests import build_job as job_manifests

__all__ = [
    "EventRecord",
    "ReconcilePass",
    "ReconcileResult",
    "Reconciler",
]


class Reconciler:
    """All cluster I/O of one reconcile pass, by stage; decisions come from pure functions."""

    def __init__(
        self,
        kube: ReconcilerKube,
        settings: OperatorSettings,
        *,
        clock: Clock = SYSTEM_CLOCK,
        inventory: GpuInventory | None = None,
        strategies: StrategyRegistry | None = None,
    ):
        self.kube = kube
        self.settings = settings
        self.clock = clock
        #: GPU nodes and the pods on them, for services listing several products.
        self.inventory = inventory or GpuInventory(kube, clock=clock)
        #: The rollout strategies, by `spec.rollout.strategy` (the built-in ones unless given).
        self.strategies = strategies or StrategyRegistry()
        deps = PassDeps(kube=kube, settings=settings, clock=clock)
        jobs = EngineJobs(deps)
        self.writer = StatusWriter(deps)
        self.children = Children(deps)
        self.profiling = Profiling(deps, jobs)
        self.admission = Admission(deps, self.children, self.writer)
        self.candidates = Candidates(deps, jobs, self.profiling, self.inventory, self.writer)
        self.engine = EngineBuild(deps, jobs, self.profiling, self.strategies)
        self.rollout = Rollout(deps, self.children, self.strategies)
        self.cold_start = ColdStartReport(deps)

    def monitoring_crds(self) -> bool:
        """Whether the prometheus-operator CRDs are installed (checked once, then cached)."""
        return self.children.monitoring_crds()

    def reconcile(self, namespace: str, name: str) -> ReconcileResult:
        """One pass over one InferenceService: its stages in order."""
        body = self.kube.get(ISVC, namespace, name)
        if body is None or body["metadata"].get("deletionTimestamp"):
            return ReconcileResult(requeue_after=self.settings.resync_seconds)
        admitted = self.admission.admit(body)
        if isinstance(admitted, ReconcileResult):
            return admitted
        p = admitted
        waiting = self.candidates.choose(p)
        if waiting is not None:
            return waiting
        self.run_engine(p)
        self.rollout.run(p)
        self.cold_start.run(p)
        conclude(p)
        written = self.writer.write(p.body, p.status, p.updates(), p.generation)
        self.writer.post(p.body, p.events)
        return result_of(p, status_written=written)

    def run_engine(self, p: ReconcilePass) -> None:
        """The engine stage: the engine the spec asks for built, profiled, gated, then the strategy's."""
        request = job_manifests.make_build_request(isvc=p.isvc)
        p.status = drop_superseded_canary(p.status, request_key=request.request_key(), events=p.events)
        self.engine.run(p, request)
        p.served = served_result(p.status)
        release_stale_hold(p)
