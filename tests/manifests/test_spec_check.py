"""The judged Deployment, and a refusal of it in the service's terms (pure)."""

from __future__ import annotations

from tailpilot.manifests.spec_check import (
    MAX_REFUSAL_CHARS,
    SPEC_CHECK_SUFFIX,
    refusal_in_spec_terms,
    spec_check_deployment,
)

from .fixtures import SETTINGS, admin_key, make_isvc


def test_the_judged_deployment_is_the_services_own_under_a_generated_name() -> None:
    isvc = make_isvc("a").runtime(affinity={"nodeAffinity": {}}).obj()
    judged = spec_check_deployment(isvc=isvc, settings=SETTINGS, admin_key=admin_key("a"))
    assert "name" not in judged["metadata"] and judged["metadata"]["generateName"] == "a" + SPEC_CHECK_SUFFIX
    assert judged["spec"]["template"]["spec"]["affinity"] == {"nodeAffinity": {}}


def test_a_refusal_names_the_services_fields_not_the_deployments() -> None:
    message = (
        'Deployment.apps "a-spec-check-x2f9q" is invalid: [spec.template.spec.affinity.nodeAffinity.'
        "requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0].operator: "
        'Unsupported value: "Sometimes", spec.template.spec.containers[0].resources.requests[cpu]: Invalid]'
    )
    said = refusal_in_spec_terms(message)
    assert said.startswith("the API server refuses the serving pods' template: [spec.runtime.affinity.")
    assert "spec.runtime.resources.requests[cpu]" in said and "spec.template" not in said
    assert "a-spec-check" not in said
    assert len(refusal_in_spec_terms("x" * 10_000)) == MAX_REFUSAL_CHARS
