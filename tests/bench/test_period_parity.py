"""One period: the operator's autoscaler and the benchmark's TailPilot run the same control period.

A simulated service (T5's load step, surge decisions and scale-ups included) is run with the
benchmark's TailPilot, recording each period's observation, surge reading and plan. The same stream
is then given to the operator's `Autoscaler.step` for an InferenceService whose status serves the
same engine profile: its observation I/O returns the recorded observation (that the two observe the
same is `test_observation_parity`'s), its status writes go to a fake API server that keeps the object,
and its batching reloads succeed. Every period, both must hand `run_period` the same input and get
the same plan: the state carried between periods, the replicas and batching in force, the fit's
windows, the decision.
"""

from __future__ import annotations

import asyncio
import copy
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from tailpilot.api import constants as c
from tailpilot.api.autoscaling import Observation
from tailpilot.api.engine import BuildOutcome, BuildResult
from tailpilot.api.v1alpha1 import InferenceService, InferenceServiceStatus, ProfileStatus
from tailpilot.bench.engine_profiles import DEFAULT_PROFILE, load_profile
from tailpilot.bench.simulator import FleetView, simulate
from tailpilot.bench.suite import Setup, baseline_params, make_controller, oracle_needs, sim_config, trace_of
from tailpilot.bench.tailpilot_policy import CONTROL_PERIOD_S, TailPilot
from tailpilot.controllers.autoscale import autoscaler as autoscaler_module
from tailpilot.controllers.autoscale.autoscaler import Autoscaler
from tailpilot.controllers.core.metrics import OperatorMetrics
from tailpilot.controllers.core.status import (
    batching_status,
    encode_status,
    engine_profile,
    engine_status,
)
from tailpilot.policy.period import PeriodInput, PeriodPlan, run_period
from tailpilot.policy.surge import SurgeReading
from tests.fakes import FakeClock

NAMESPACE, NAME = "shop", "resnet"
ENGINE_KEY = "0123456789abcdef"


@dataclass(frozen=True)
class Period:
    at_s: float
    observation: Observation
    surge: SurgeReading | None
    period: PeriodInput
    plan: PeriodPlan


class RecordingTailPilot(TailPilot):
    """The benchmark's TailPilot, keeping each period's input and plan."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.periods: list[Period] = []
        self._pending: tuple[PeriodInput, Observation, SurgeReading | None] | None = None

    def period_input(
        self, view: FleetView, observation: Observation, *, surge: SurgeReading | None
    ) -> PeriodInput:
        period = super().period_input(view, observation, surge=surge)
        self._pending = (period, observation, surge)
        return period

    def execute(self, view: FleetView, plan: PeriodPlan) -> Any:
        assert self._pending is not None
        period, observation, surge = self._pending
        self.periods.append(Period(view.now_s, observation, surge, period, plan))
        return super().execute(view, plan)


class FakeKube:
    """The API server as far as one service's control period talks to it: the object, its pods, Events."""

    def __init__(self, body: dict[str, Any]) -> None:
        self.body = body

    def get(self, resource: Any, namespace: str, name: str) -> dict[str, Any]:
        return copy.deepcopy(self.body)

    def list(self, resource: Any, namespace: str, **_: Any) -> list[dict[str, Any]]:
        return []  # no pod: nothing to keep at the batching in force

    def patch_status(self, body: dict[str, Any], patch: dict[str, Any]) -> None:
        self.body["status"] = _merged(self.body.get("status") or {}, patch)

    def post_event(self, *_: Any, **__: Any) -> None:
        pass


def _merged(live: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    """A JSON merge patch (RFC 7386) applied."""
    out = dict(live)
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        elif isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merged(out[key], value)
        else:
            out[key] = value
    return out


def serving_object(bench: TailPilot) -> tuple[dict[str, Any], InferenceService]:
    """The service the benchmark simulates, as an object whose status serves its profile."""
    isvc = InferenceService.model_validate(
        {
            "apiVersion": f"{c.GROUP}/{c.VERSION}",
            "kind": "InferenceService",
            "metadata": {"name": NAME, "namespace": NAMESPACE, "generation": 1},
            "spec": bench._spec.model_dump(by_alias=True, exclude_none=True, mode="json"),
        }
    )
    profile = bench._profile
    result = BuildResult(
        outcome=BuildOutcome.SUCCEEDED,
        engine_key=ENGINE_KEY,
        artifact="pvc://tailpilot-engines/e",
        triton_backend=profile.backend,
        inputs=(),
        outputs=(),
    )
    initial = bench.initial()
    status = InferenceServiceStatus(
        engine=engine_status(result, request_key="r", built_at=None),
        profile=ProfileStatus.from_summary(profile.to_summary(), key="p"),
        replicas=initial.replicas,
        batching=batching_status(initial.batching),
        conditions=[],
    )
    body = isvc.model_dump(by_alias=True, exclude_none=True, mode="json")
    body["status"] = encode_status(status)
    body["status"]["conditions"] = [
        {
            "type": c.CONDITION_ROLLOUT_READY,
            "status": "True",
            "reason": "Ready",
            "message": "",
            "lastTransitionTime": "2026-12-04T00:00:00Z",
            "observedGeneration": 1,
        }
    ]
    return body, isvc


@pytest.mark.slow
def test_the_operator_and_the_benchmark_run_the_same_period_on_one_stream(monkeypatch: pytest.MonkeyPatch):
    setup = Setup(profile=load_profile(DEFAULT_PROFILE), slo_ms=880.0, duration_s=633.0, max_replicas=12)
    _, needs = oracle_needs((setup, "T5-step"))
    made = make_controller(
        setup, policy="tailpilot", ts=30.0, needs=needs, params=baseline_params(setup, needs[0].replicas)
    )
    assert isinstance(made, TailPilot)
    probe_body, probe = serving_object(made)
    # Both run the profile as the status carries it (the summary keeps its fitted times).
    status_profile = engine_profile(
        autoscaler_module.decode_status(probe_body["status"]),
        max_batch_size=probe.spec.batching.max_batch_size,
    )
    assert status_profile is not None
    bench = RecordingTailPilot(profile=status_profile, spec=made._spec, initial=made.initial())
    result = simulate(
        arrivals_s=trace_of(setup, "T5-step").arrivals,
        config=sim_config(setup, "T5-step", startup_s=30.0),
        controller=bench,
    )
    assert any(new > old for _, old, new in result.actions), "the step must make the fleet grow"
    assert not bench.errors
    assert any(p.surge is not None for p in bench.periods), "a surge must call a period early"
    assert any(p.plan.batching is not None for p in bench.periods), "the batching must move"

    body, _ = serving_object(bench)
    kube = FakeKube(body)
    clock = FakeClock()
    ran: list[tuple[PeriodInput, PeriodPlan]] = []

    def recording_run_period(period: PeriodInput) -> PeriodPlan:
        plan = run_period(period)
        ran.append((period, plan))
        return plan

    monkeypatch.setattr(autoscaler_module, "run_period", recording_run_period)
    stream = iter(bench.periods)
    current: list[Period] = []

    async def observe(*_: Any, **__: Any) -> Observation:
        return current[-1].observation

    async def rebatch(*_: Any, **__: Any) -> bool:
        return True

    async def drive() -> None:
        async with httpx.AsyncClient() as http:
            operator = Autoscaler(
                kube=kube,
                http=http,
                metrics=OperatorMetrics(),
                default_prometheus_url="http://prometheus.invalid",
                control_period_s=CONTROL_PERIOD_S,
                clock=clock,
            )
            monkeypatch.setattr(operator, "_observe", observe)
            monkeypatch.setattr(operator, "_rebatch", rebatch)
            for period in stream:
                current.append(period)
                clock.now = period.at_s
                await operator.step(NAMESPACE, NAME, alert_active=False, surge=period.surge)

    asyncio.run(drive())
    assert len(ran) == len(bench.periods) >= 600 // CONTROL_PERIOD_S
    for (operator_input, operator_plan), bench_period in zip(ran, bench.periods, strict=True):
        assert operator_input == bench_period.period, f"t={bench_period.at_s:.0f} s"
        assert operator_plan == bench_period.plan, f"t={bench_period.at_s:.0f} s"
