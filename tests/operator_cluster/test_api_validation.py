"""The real API server enforces the generated CRD: each invalid spec is refused by `kubectl apply`
with a message that names the field, and every valid spec is accepted (server-side dry run); a name
ending with a child's suffix is refused at creation, and an object created before that rule stays
writable; a status the operator cut to the schema is accepted where the uncut one is refused."""

from __future__ import annotations

import json

import pytest
import yaml

from tailpilot.api.constants import RESERVED_NAME_SUFFIXES
from tailpilot.api.v1alpha1 import RULE_NAME_SUFFIX
from tailpilot.controllers.core.status import CUT_MARKER, encode_status, status_patch
from tailpilot_e2e.operator_harness import CRD_FILE, install_crds
from tests.api.invalid_specs import INVALID_SPECS, VALID_SPECS, make_object
from tests.controllers.test_ctrl_status_limits import overflowing_status

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


@pytest.mark.parametrize("suffix", RESERVED_NAME_SUFFIXES)
def test_a_name_ending_with_a_child_suffix_is_refused(crds, namespace, suffix):
    result = kubectl_apply(crds, make_object(f"svc{suffix}", VALID_SPECS[0][1], namespace))
    assert result.returncode != 0, f"svc{suffix} was accepted: {result.stdout}"
    assert "is invalid" in result.stderr and RULE_NAME_SUFFIX.message in result.stderr, result.stderr


def test_an_object_created_before_the_suffix_rule_stays_writable(crds, namespace, tmp_path):
    # The upgrade: an object named like a child, created under a CRD without the rule, is then
    # updated under the new CRD, its spec by a user and its status as the operator writes it.
    crd = yaml.safe_load(CRD_FILE.read_text())
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    schema["x-kubernetes-validations"] = [
        r for r in schema["x-kubernetes-validations"] if r["rule"] != RULE_NAME_SUFFIX.cel
    ]
    old_crd = tmp_path / "crd-before.yaml"
    old_crd.write_text(yaml.safe_dump(crd))
    try:
        install_crds(crds, [old_crd])
        created = kubectl_apply(crds, make_object("legacy-metrics", VALID_SPECS[0][1], namespace))
        assert created.returncode == 0, created.stderr
    finally:
        install_crds(crds)
    name = ["-n", namespace, "inferenceservices.tailpilot.io/legacy-metrics", "--type=merge"]
    spec = crds.kubectl("patch", *name, "-p", '{"spec":{"slo":{"p99LatencyMs":80}}}', check=False)
    assert spec.returncode == 0, spec.stderr
    status = crds.kubectl(
        "patch", *name, "--subresource=status", "-p", '{"status":{"observedGeneration":2}}', check=False
    )
    assert status.returncode == 0, status.stderr
    # A new one under the same rule is still refused.
    again = kubectl_apply(crds, make_object("other-metrics", VALID_SPECS[0][1], namespace))
    assert again.returncode != 0 and RULE_NAME_SUFFIX.message in again.stderr, again.stderr


def test_the_api_server_accepts_a_fitted_status_and_refuses_the_same_status_unfitted(crds, namespace):
    # A status the way the reconciler makes one after a build failed with a very long message.
    created = kubectl_apply(crds, make_object("status-limits", VALID_SPECS[0][1], namespace))
    assert created.returncode == 0, created.stderr
    status = overflowing_status()
    name = ["-n", namespace, "inferenceservices.tailpilot.io/status-limits", "--subresource=status"]
    raw = crds.kubectl(
        "patch", *name, "--type=merge", "-p", json.dumps({"status": encode_status(status)}), check=False
    )
    assert raw.returncode != 0 and "status.build.message" in raw.stderr, raw.stderr
    fitted = crds.kubectl(
        "patch", *name, "--type=merge", "-p", json.dumps({"status": status_patch(None, status)}), check=False
    )
    assert fitted.returncode == 0, fitted.stderr
    obj = crds.kubectl("get", "-n", namespace, "inferenceservices.tailpilot.io/status-limits", "-o", "json")
    stored = json.loads(obj.stdout)["status"]["build"]["message"]
    assert len(stored) == 4096 and stored.endswith(CUT_MARKER)
