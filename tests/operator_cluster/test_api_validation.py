"""The real API server enforces the generated CRD: each invalid spec is refused by `kubectl apply`
with a message that names the field, and every valid spec is accepted (server-side dry run)."""

from __future__ import annotations

import json

import pytest

from tests.api.invalid_specs import INVALID_SPECS, VALID_SPECS, make_object

pytestmark = pytest.mark.cluster


def kubectl_apply(cluster, obj, *extra):
    return cluster.kubectl("apply", "-f", "-", *extra, stdin=json.dumps(obj), check=False, timeout=30)


def test_at_least_fifteen_distinct_rules_are_covered():
    assert len({message for _, _, message in INVALID_SPECS}) >= 15


@pytest.mark.parametrize(("case", "spec", "expected"), INVALID_SPECS, ids=[c[0] for c in INVALID_SPECS])
def test_invalid_spec_is_rejected_by_kubectl_apply(crds, namespace, case, spec, expected):
    result = kubectl_apply(crds, make_object(f"bad-{case}"[:46].rstrip("-"), spec, namespace))
    assert result.returncode != 0, f"{case} was accepted: {result.stdout}"
    assert "is invalid" in result.stderr and expected in result.stderr, result.stderr


@pytest.mark.parametrize(("case", "spec"), VALID_SPECS, ids=[c[0] for c in VALID_SPECS])
def test_valid_spec_is_accepted(crds, namespace, case, spec):
    result = kubectl_apply(crds, make_object(case, spec, namespace), "--dry-run=server")
    assert result.returncode == 0, result.stderr
