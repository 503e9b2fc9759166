"""The cheapest constant fleet: it meets both SLO goals, one replica fewer does not, priced like the table."""

from __future__ import annotations

import math

import pytest

from tailpilot.bench.engine_profiles import DEFAULT_PROFILE, load_profile
from tailpilot.bench.static_fleets import cheapest_fleet, text_table
from tailpilot.bench.suite import Setup, oracle_needs


def test_the_cheapest_fleet_meets_both_goals_and_one_fewer_does_not():
    setup = Setup(
        profile=load_profile(DEFAULT_PROFILE),
        slo_ms=880.0,
        duration_s=300.0,
        ts_values=(5.0, 30.0),
        traces=("T6-spike",),
        ref_replicas=2,
        max_replicas=8,
    )
    _, needs = oracle_needs((setup, "T6-spike"))
    fleet = cheapest_fleet(setup, "T6-spike", needs)
    assert fleet.cheapest is not None and fleet.cheapest.meets_goals
    assert fleet.one_fewer is not None and not fleet.one_fewer.meets_goals
    assert fleet.one_fewer.replicas == fleet.cheapest.replicas - 1
    # Held the whole run: replicas x duration, priced against the oracle at each Ts.
    assert fleet.cheapest.metrics.replica_seconds == pytest.approx(fleet.cheapest.replicas * 300.0)
    for ts in setup.ts_values:
        expected = fleet.cheapest.metrics.replica_seconds / fleet.oracle_replica_seconds[ts]
        assert fleet.ratio(ts) == pytest.approx(expected)
        assert math.isfinite(fleet.ratio(ts))
    table = text_table([fleet], setup.ts_values)
    assert f"{fleet.cheapest.replicas}: " in table and "T6-spike" in table
