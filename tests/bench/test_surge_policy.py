"""The surge check (on by default) answers a load step sooner, and stays put on steady load."""

from __future__ import annotations

import pytest

from tailpilot.bench.engine_profiles import DEFAULT_PROFILE, load_profile
from tailpilot.bench.simulator import simulate
from tailpilot.bench.suite import (
    TAILPILOT,
    TAILPILOT_NO_SURGE,
    Setup,
    baseline_params,
    make_controller,
    oracle_needs,
    sim_config,
    trace_of,
)


def first_scale_up_after(setup: Setup, trace: str, policy: str, *, after_s: float) -> tuple[float, object]:
    _, needs = oracle_needs((setup, trace))
    ctl = make_controller(
        setup, policy=policy, ts=5.0, needs=needs, params=baseline_params(setup, needs[0].replicas)
    )
    res = simulate(
        arrivals_s=trace_of(setup, trace).arrivals,
        config=sim_config(setup, trace, startup_s=5.0),
        controller=ctl,
    )
    ups = [t for t, old, new in res.actions if new > old and t >= after_s]
    return (ups[0] if ups else float("inf")), ctl


@pytest.mark.slow
def test_a_step_is_answered_before_the_next_control_period():
    # 633 s of T5: the step (x4) comes at 211 s, just after the decision at 210 s.
    setup = Setup(profile=load_profile(DEFAULT_PROFILE), slo_ms=880.0, duration_s=633.0, max_replicas=12)
    plain, _ = first_scale_up_after(setup, "T5-step", TAILPILOT_NO_SURGE, after_s=211.0)
    surged, ctl = first_scale_up_after(setup, "T5-step", TAILPILOT, after_s=211.0)
    assert ctl.surge_decisions >= 1
    # Without the check the policy waits for its next period (225 s); two 2 s reads over capacity
    # come sooner.
    assert plain >= 225.0
    assert surged <= 211.0 + 9.0


@pytest.mark.slow
def test_no_surge_decision_on_steady_poisson_load():
    setup = Setup(profile=load_profile(DEFAULT_PROFILE), slo_ms=880.0, duration_s=600.0, max_replicas=12)
    _, ctl = first_scale_up_after(setup, "T1-poisson", TAILPILOT, after_s=0.0)
    assert ctl.surge_decisions == 0
