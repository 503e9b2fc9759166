"""Triton's admin APIs restricted to the service's key, and the NetworkPolicy over its pods."""

from __future__ import annotations

import dataclasses
import json

import pytest

from tailpilot.api import constants as c
from tailpilot.manifests.children import ClusterCapabilities, plan_children
from tailpilot.manifests.deployment import triton_deployment
from tailpilot.manifests.meta import selector_labels
from tailpilot.manifests.network_policy import triton_network_policy
from tailpilot.manifests.profile_job import make_profile_request, profile_job
from tailpilot.manifests.settings import (
    ENV_NETWORK_POLICY,
    NetworkPolicySettings,
    network_policy_from_json,
    settings_from_env,
)
from tailpilot.manifests.triton_access import (
    ADMIN_KEY_ENV,
    ADMIN_KEY_HEADER,
    ANNOTATION_SECRET_UID,
    RESTRICTED_APIS,
    admin_key_secret,
    secret_key_value,
)

from .fixtures import SETTINGS, admin_key, build_result, make_isvc

SECRET_VALUE = "s3cr3t-value-never-in-a-spec"
PROMETHEUS = {
    "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}},
    "podSelector": {"matchLabels": {"app.kubernetes.io/name": "prometheus"}},
}
OPERATOR = {
    "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "tailpilot-system"}},
    "podSelector": {"matchLabels": {"app.kubernetes.io/name": "tailpilot"}},
}


def _deployment(uid: str = "secret-uid-1") -> dict:
    return triton_deployment(
        isvc=make_isvc("a").obj(),
        engine_key="k" * 40,
        rollout_hash="h",
        replicas=1,
        settings=SETTINGS,
        admin_key=admin_key("a", secret_uid=uid),
    )


def test_triton_restricts_the_admin_apis_to_the_key_from_the_secret() -> None:
    container = _deployment()["spec"]["template"]["spec"]["containers"][0]
    value = f"$({ADMIN_KEY_ENV})"
    apis = "model-repository,model-config,trace,logging,shared-memory"
    assert f"--http-restricted-api={apis}:{ADMIN_KEY_HEADER}={value}" in container["args"]
    assert f"--grpc-restricted-protocol={apis}:{ADMIN_KEY_HEADER}={value}" in container["args"]
    # What clients, probes and the fast loop use stays open.
    assert not {"inference", "metadata", "health", "statistics"} & set(RESTRICTED_APIS)
    (var,) = [e for e in container["env"] if e["name"] == ADMIN_KEY_ENV]
    assert var == {
        "name": ADMIN_KEY_ENV,
        "valueFrom": {"secretKeyRef": {"name": "a-triton-admin", "key": "admin-key"}},
    }


def test_the_key_is_never_in_a_pod_spec() -> None:
    isvc = make_isvc("a").obj()
    secret = admin_key_secret(isvc=isvc, key=SECRET_VALUE)
    assert secret_key_value(secret) == SECRET_VALUE
    assert secret["immutable"] is True and secret["metadata"]["name"] == "a-triton-admin"
    assert secret["metadata"]["ownerReferences"][0]["controller"] is True
    request = make_profile_request(
        isvc=isvc, engine_key="e" * 40, triton_backend="onnxruntime", settings=SETTINGS
    )
    job = profile_job(isvc=isvc, request=request, settings=SETTINGS, admin_key=admin_key("a"))
    for obj in (_deployment(), job):
        assert SECRET_VALUE not in json.dumps(obj)


def test_a_recreated_secret_rolls_the_pods_and_nothing_else_does() -> None:
    before, same, recreated = _deployment("uid-1"), _deployment("uid-1"), _deployment("uid-2")
    assert before == same
    template = before["spec"]["template"]
    assert template["metadata"]["annotations"][ANNOTATION_SECRET_UID] == "uid-1"
    assert recreated["spec"]["template"] != template  # a new pod template: the pods roll
    assert recreated["spec"]["selector"] == before["spec"]["selector"]


def test_the_profile_jobs_triton_and_profiler_read_the_same_key() -> None:
    isvc = make_isvc("a").obj()
    request = make_profile_request(
        isvc=isvc, engine_key="e" * 40, triton_backend="onnxruntime", settings=SETTINGS
    )
    pod = profile_job(isvc=isvc, request=request, settings=SETTINGS, admin_key=admin_key("a"))["spec"][
        "template"
    ]["spec"]
    sidecar, profiler = pod["initContainers"][1], pod["containers"][0]
    # The sidecar listens on the pod's address: restricted like a serving pod.
    assert any(a.startswith("--http-restricted-api=") for a in sidecar["args"])
    for container in (sidecar, profiler):
        (var,) = [e for e in container["env"] if e["name"] == ADMIN_KEY_ENV]
        assert var["valueFrom"]["secretKeyRef"]["name"] == "a-triton-admin"


def test_the_network_policy_opens_inference_to_all_metrics_to_prometheus_and_nothing_else() -> None:
    isvc = make_isvc("a").obj()
    policy = triton_network_policy(
        isvc=isvc, settings=NetworkPolicySettings(prometheus=(PROMETHEUS,), operator=(OPERATOR,))
    )
    assert policy["metadata"]["name"] == "a"
    assert policy["metadata"]["ownerReferences"][0]["uid"] == isvc.metadata["uid"]
    spec = policy["spec"]
    assert spec["podSelector"] == {"matchLabels": selector_labels("a")}
    assert spec["policyTypes"] == ["Ingress", "Egress"] and "egress" not in spec  # no egress at all
    clients, operator, prometheus = spec["ingress"]
    assert "from" not in clients  # every source: clients are unknown to the operator
    assert [p["port"] for p in clients["ports"]] == [c.TRITON_HTTP_PORT, c.TRITON_GRPC_PORT]
    assert operator == {
        "from": [OPERATOR],
        "ports": [
            {"protocol": "TCP", "port": c.TRITON_HTTP_PORT},
            {"protocol": "TCP", "port": c.TRITON_METRICS_PORT},
        ],
    }
    assert prometheus == {"from": [PROMETHEUS], "ports": [{"protocol": "TCP", "port": c.TRITON_METRICS_PORT}]}


def test_unconfigured_peers_close_their_port_instead_of_opening_it() -> None:
    # An empty `from` would admit every source: a rule without peers is left out.
    clients = {"podSelector": {"matchLabels": {"role": "frontend"}}}
    spec = triton_network_policy(
        isvc=make_isvc("a").obj(), settings=NetworkPolicySettings(clients=(clients,))
    )["spec"]
    assert spec["ingress"] == [
        {
            "ports": [
                {"protocol": "TCP", "port": c.TRITON_HTTP_PORT},
                {"protocol": "TCP", "port": c.TRITON_GRPC_PORT},
            ],
            "from": [clients],
        }
    ]
    for rule in spec["ingress"]:
        assert rule.get("from", None) != []


def test_the_policy_is_a_child_when_configured_and_turned_off_otherwise() -> None:
    def plan(settings):  # type: ignore[no-untyped-def]
        isvc = make_isvc("a").obj()
        return plan_children(
            isvc=isvc,
            result=build_result(),
            batching=isvc.spec.batching.to_config(),
            replicas=1,
            settings=settings,
            capabilities=ClusterCapabilities(),
            admin_key=admin_key("a"),
        )

    on = plan(dataclasses.replace(SETTINGS, network_policy=NetworkPolicySettings(prometheus=(PROMETHEUS,))))
    assert [o["kind"] for o in on.wanted] == [
        "ConfigMap",
        "Deployment",
        "Service",
        "PodDisruptionBudget",
        "NetworkPolicy",
    ]
    off = plan(SETTINGS)
    assert "NetworkPolicy" not in [o["kind"] for o in off.wanted]
    assert "NetworkPolicy" in [o["kind"] for o in off.turned_off]  # one this service owns is deleted


def test_network_policy_settings_from_the_operators_environment() -> None:
    env = {
        "TAILPILOT_BUILDER_IMAGE": "b:1",
        ENV_NETWORK_POLICY: json.dumps({"clients": [], "prometheus": [PROMETHEUS], "operator": [OPERATOR]}),
    }
    assert settings_from_env(env).network_policy == NetworkPolicySettings(
        prometheus=(PROMETHEUS,), operator=(OPERATOR,)
    )
    assert settings_from_env({"TAILPILOT_BUILDER_IMAGE": "b:1"}).network_policy is None
    for bad in ("[]", '{"client": []}', '{"prometheus": [{}]}', '{"operator": {"podSelector": {}}}', "{"):
        with pytest.raises(ValueError, match=ENV_NETWORK_POLICY):
            network_policy_from_json(bad)
