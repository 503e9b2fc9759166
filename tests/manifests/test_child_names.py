"""Children's names: two services' children cannot collide, and every name is valid for its kind.

Every child the manifests build for a service is listed here (the rollout's children with every
option on, a canary's, the build and profile Jobs) and checked against the reserved suffixes the
CRD refuses at creation (`constants.RESERVED_NAME_SUFFIXES`, `RULE_NAME_SUFFIX`): a new child
whose name is not `<name>`, a Job's, or `<name>` and a suffix ending with a reserved one fails here
before it can collide.
"""

from __future__ import annotations

import re
from typing import Any

from tailpilot import crdgen
from tailpilot.api import constants as c
from tailpilot.api.v1alpha1 import MAX_NAME_LENGTH, RULE_NAME_SUFFIX
from tailpilot.manifests.activator_routing import ActivatorEndpoints, ActivatorRouting
from tailpilot.manifests.build_job import build_job, make_build_request
from tailpilot.manifests.children import CanaryPlan, ClusterCapabilities, plan_children
from tailpilot.manifests.network_policy import engine_jobs_network_policy
from tailpilot.manifests.profile_job import make_profile_request, profile_job
from tailpilot.manifests.triton_access import admin_key_secret
from tests.api.crd_sim import admit
from tests.api.invalid_specs import CPU_BASE, make_object

from .fixtures import SETTINGS, admin_key, build_result, make_isvc

OPENAPI = crdgen.openapi_schema()
#: A Job's name: `<service>-build-` and 10 hex, or `<service>-profile-` and 8 hex.
JOB_SUFFIX = re.compile(r"-(build-[0-9a-f]{10}|profile-[0-9a-f]{8})$")
#: Kinds whose name must be a DNS-1035 label (Services), or is copied into a label value by
#: Kubernetes (a Job's `job-name` label on its pods): 63 characters at most.
LABEL_SIZED_KINDS = {"Service", "Job", "EndpointSlice"}


def children_of(name: str) -> list[dict[str, Any]]:
    """Every object the operator may create for a service named `name`."""
    isvc = make_isvc(name).autoscaling(backlogRotation=True).obj()
    plan = plan_children(
        isvc=isvc,
        result=build_result(),
        batching=isvc.spec.batching.to_config(),
        replicas=2,
        settings=SETTINGS,
        capabilities=ClusterCapabilities(service_monitors=True, prometheus_rules=True),
        admin_key=admin_key(name),
        canary=CanaryPlan(result=build_result("f" * 40), replicas=1),
        routing=ActivatorRouting(
            scale_to_zero=True, route_to=ActivatorEndpoints(addresses=("10.0.0.9",), ports={"http": 8000})
        ),
    )
    build = build_job(isvc=isvc, request=make_build_request(isvc=isvc), settings=SETTINGS)
    request = make_profile_request(
        isvc=isvc, engine_key="e" * 40, triton_backend="onnxruntime", settings=SETTINGS
    )
    profile = profile_job(isvc=isvc, request=request, settings=SETTINGS, admin_key=admin_key(name))
    secret = admin_key_secret(isvc=isvc, key="k")
    jobs_policy = engine_jobs_network_policy(isvc=isvc)
    return [*plan.wanted, *plan.turned_off, *plan.canary_over, build, profile, secret, jobs_policy]


def _names(objs: list[dict[str, Any]]) -> set[tuple[str, str]]:
    return {(o["kind"], o["metadata"]["name"]) for o in objs}


def test_every_child_is_named_the_service_or_the_service_and_a_reserved_suffix() -> None:
    children = children_of("a")
    kinds = {o["kind"] for o in children}
    assert {"Deployment", "Service", "ConfigMap", "PodDisruptionBudget", "Job"} <= kinds
    for child in children:
        name = child["metadata"]["name"]
        assert name.startswith("a"), name
        suffix = name[1:]
        reserved = suffix.endswith(c.RESERVED_NAME_SUFFIXES)  # `-canary-model-config` ends with one
        assert suffix == "" or reserved or JOB_SUFFIX.fullmatch(suffix), (
            f"{child['kind']}/{name}: a child suffix the CRD does not reserve"
        )


def test_a_service_named_after_another_services_child_is_refused() -> None:
    for kind, name in sorted(_names(children_of("a"))):
        if name == "a" or kind == "Job":
            continue
        errors = admit(make_object(name, CPU_BASE), OPENAPI)
        assert any(RULE_NAME_SUFFIX.message in e for e in errors), f"{kind}/{name} was admitted as a service"


def test_admissible_services_never_share_a_child_of_one_kind() -> None:
    # Names built from another service's children, Jobs included: each one the CRD admits has no
    # child of the same kind and name as service `a`'s (a Job's fixed-length suffix names its service).
    first = _names(children_of("a"))
    candidates = {name for _, name in first} | {f"{name}-x" for _, name in first} | {"a-build", "a-profile"}
    admitted = [n for n in sorted(candidates) if n != "a" and not admit(make_object(n, CPU_BASE), OPENAPI)]
    assert any(JOB_SUFFIX.search(n) for n in admitted)  # the Jobs' names themselves are admissible
    for name in admitted:
        assert not first & _names(children_of(name)), name


def test_the_longest_name_gives_every_child_a_valid_name() -> None:
    name = "a" * MAX_NAME_LENGTH
    for child in children_of(name):
        kind, child_name = child["kind"], child["metadata"]["name"]
        limit = 63 if kind in LABEL_SIZED_KINDS else 253
        assert len(child_name) <= limit, f"{kind}/{child_name}: {len(child_name)} > {limit}"
        assert re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", child_name), child_name
        for key, value in child["metadata"].get("labels", {}).items():
            assert len(value) <= 63, f"{kind}/{child_name} label {key}={value}"
