"""The admin-key Secret and the NetworkPolicy of a service, on the real API server with the real operator.

The local cluster has no network plugin that enforces NetworkPolicies (KWOK nodes, and the node agent
runs pods as host processes): what is tested here is that the API server accepts the objects the
operator builds, that they are owned, and that the pods read the key from the Secret. That Triton
refuses keyless admin calls is tested against a real Triton (tests/controllers/test_ctrl_triton_live.py).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tailpilot.api import constants as c
from tailpilot.manifests.network_policy import engine_jobs_network_policy_name
from tailpilot.manifests.settings import ENV_NETWORK_POLICY
from tailpilot.manifests.triton_access import (
    ADMIN_KEY_ENV,
    ANNOTATION_SECRET_UID,
    SECRET_KEY,
    admin_key_secret_name,
)
from tailpilot_e2e.cluster import LocalCluster
from tailpilot_e2e.operator_harness import (
    OperatorProcess,
    condition,
    custom_object,
    dump,
    events_once,
    play_build,
    play_profile,
    running_build_pod,
    running_profile_pod,
)
from tailpilot_e2e.wait import eventually

from .conftest import GPU_PROFILE, gpu_build_result

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

PROMETHEUS = {
    "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}},
    "podSelector": {"matchLabels": {"app.kubernetes.io/name": "prometheus"}},
}
OPERATOR = {
    "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "tailpilot-system"}},
    "podSelector": {"matchLabels": {"app.kubernetes.io/name": "tailpilot"}},
}


@pytest.fixture
def operator_with_policies(
    crds: LocalCluster, namespace: str, engine_store: str, monkeypatch: pytest.MonkeyPatch
) -> Iterator[OperatorProcess]:
    """The operator as the chart configures it: NetworkPolicies on, with Prometheus and its own pods."""
    monkeypatch.setenv(ENV_NETWORK_POLICY, json.dumps({"prometheus": [PROMETHEUS], "operator": [OPERATOR]}))
    with OperatorProcess(crds, namespace=namespace, log_dir=crds.paths.root / "logs") as process:
        yield process


def _create(k8s: client.ApiClient, example: Any, namespace: str, name: str) -> dict[str, Any]:
    isvc = example("gpu-tensorrt-h100.yaml", namespace=namespace, name=name)
    created: dict[str, Any] = client.CustomObjectsApi(k8s).create_namespaced_custom_object(
        "tailpilot.io", "v1alpha1", namespace, "inferenceservices", isvc
    )
    return created


def _serve(k8s: client.ApiClient, namespace: str) -> None:
    core = client.CoreV1Api(k8s)
    play_build(core, running_build_pod(core, namespace), result=gpu_build_result())
    play_profile(core, namespace, GPU_PROFILE)


def _secret(core: client.CoreV1Api, namespace: str, name: str) -> client.V1Secret | None:
    try:
        return core.read_namespaced_secret(name, namespace)
    except ApiException as error:
        if error.status == 404:
            return None
        raise


def _key_env(container: client.V1Container) -> client.V1EnvVar:
    (var,) = [e for e in container.env or [] if e.name == ADMIN_KEY_ENV]
    return var


def _nudge(k8s: client.ApiClient, namespace: str, name: str, value: str) -> None:
    """Any change of the service wakes its pass (the admin-key Secret itself is not watched)."""
    client.CustomObjectsApi(k8s).patch_namespaced_custom_object(
        "tailpilot.io",
        "v1alpha1",
        namespace,
        "inferenceservices",
        name,
        {"metadata": {"labels": {"nudge": value}}},
    )


def test_a_service_gets_its_admin_key_secret_and_network_policy_owned(
    k8s, namespace, operator_with_policies, example
):
    core, apps = client.CoreV1Api(k8s), client.AppsV1Api(k8s)
    networking = client.NetworkingV1Api(k8s)
    isvc = _create(k8s, example, namespace, "guarded")
    uid = isvc["metadata"]["uid"]

    # The Secret comes first: before the build, so before any pod that reads it.
    secret = eventually(
        lambda: _secret(core, namespace, admin_key_secret_name("guarded")),
        timeout=30,
        description="admin-key Secret",
    )
    assert secret.immutable is True
    (owner,) = secret.metadata.owner_references
    assert (owner.uid, owner.controller, owner.kind) == (uid, True, "InferenceService")
    key = base64.b64decode(secret.data[SECRET_KEY]).decode()
    assert len(key) >= 40

    build_pod = running_build_pod(core, namespace)
    # The Jobs' own policy was made in the pass before the build Job's: it guards the pod from its start.
    jobs_policy = _policy(networking, namespace, engine_jobs_network_policy_name("guarded"))
    assert jobs_policy is not None, "the build pod runs without its NetworkPolicy"
    (owner,) = jobs_policy.metadata.owner_references
    assert (owner.uid, owner.controller) == (uid, True)
    assert jobs_policy.spec.policy_types == ["Ingress"]  # a build keeps its egress to fetch the model
    assert _selects(jobs_policy.spec.pod_selector, build_pod.metadata.labels)
    play_build(core, build_pod, result=gpu_build_result())
    profile_pod = running_profile_pod(core, namespace)
    assert _selects(jobs_policy.spec.pod_selector, profile_pod.metadata.labels)
    (only_profile_pods,) = jobs_policy.spec.ingress
    assert [p.port for p in only_profile_pods.ports] == [8000, 8001, 8002]
    (peer,) = only_profile_pods._from
    assert _selects(peer.pod_selector, profile_pod.metadata.labels)
    assert not _selects(peer.pod_selector, build_pod.metadata.labels)
    sidecar, profiler = profile_pod.spec.init_containers[-1], profile_pod.spec.containers[0]
    for container in (sidecar, profiler):
        ref = _key_env(container).value_from.secret_key_ref
        assert (ref.name, ref.key, ref.optional) == (admin_key_secret_name("guarded"), SECRET_KEY, None)
    play_profile(core, namespace, GPU_PROFILE)

    deployment = eventually(
        lambda: _deployment(apps, namespace, "guarded"), timeout=90, description="Deployment"
    )
    template = deployment.spec.template
    assert not _selects(jobs_policy.spec.pod_selector, template.metadata.labels)  # serving pods: their own
    (triton,) = template.spec.containers
    assert _key_env(triton).value_from.secret_key_ref.name == admin_key_secret_name("guarded")
    assert "--http-restricted-api=model-repository,model-config,trace,logging,shared-memory:" in " ".join(
        triton.args
    )
    assert f"$({ADMIN_KEY_ENV})" in " ".join(triton.args)
    assert template.metadata.annotations[ANNOTATION_SECRET_UID] == secret.metadata.uid
    assert key not in json.dumps(client.ApiClient().sanitize_for_serialization(deployment))

    policy = eventually(
        lambda: _policy(networking, namespace, "guarded"), timeout=60, description="NetworkPolicy accepted"
    )
    (owner,) = policy.metadata.owner_references
    assert (owner.uid, owner.controller) == (uid, True)
    assert policy.spec.pod_selector.match_labels == {
        c.LABEL_NAME: c.APP_NAME_TRITON,
        c.LABEL_ISVC: "guarded",
        c.LABEL_COMPONENT: c.COMPONENT_SERVER,
    }
    assert policy.spec.policy_types == ["Ingress", "Egress"] and not policy.spec.egress
    clients, operator, prometheus = policy.spec.ingress
    assert clients._from is None and [p.port for p in clients.ports] == [8000, 8001]
    assert [p.port for p in operator.ports] == [8000, 8002]
    assert operator._from[0].pod_selector.match_labels == OPERATOR["podSelector"]["matchLabels"]
    assert [p.port for p in prometheus.ports] == [8002]
    assert (
        prometheus._from[0].namespace_selector.match_labels == PROMETHEUS["namespaceSelector"]["matchLabels"]
    )

    # A hand edit of the policy is put back (the operator watches NetworkPolicies).
    networking.patch_namespaced_network_policy(
        "guarded", namespace, {"spec": {"ingress": [{"ports": [{"port": 8002}]}]}}
    )
    eventually(
        lambda: len(_policy(networking, namespace, "guarded").spec.ingress) == 3,
        timeout=30,
        description="NetworkPolicy drift corrected",
    )

    # Someone deletes the Secret: the next pass makes a new key, and the pods roll onto it.
    core.delete_namespaced_secret(admin_key_secret_name("guarded"), namespace)
    _nudge(k8s, namespace, "guarded", "1")
    renewed = eventually(
        lambda: (
            (s := _secret(core, namespace, admin_key_secret_name("guarded"))) is not None
            and s.metadata.uid != secret.metadata.uid
            and s
        ),
        timeout=30,
        description="admin-key Secret recreated",
    )
    assert base64.b64decode(renewed.data[SECRET_KEY]).decode() != key

    def rolled() -> bool:
        annotations = apps.read_namespaced_deployment("guarded", namespace).spec.template.metadata.annotations
        return bool(annotations[ANNOTATION_SECRET_UID] == renewed.metadata.uid)

    eventually(rolled, timeout=30, description="pod template names the new Secret")


def test_a_foreign_secret_or_network_policy_with_the_childs_name_is_not_taken(
    k8s, namespace, operator_with_policies, example
):
    core, batch = client.CoreV1Api(k8s), client.BatchV1Api(k8s)
    networking = client.NetworkingV1Api(k8s)
    secret_name = admin_key_secret_name("taken")
    foreign_secret = client.V1Secret(
        metadata=client.V1ObjectMeta(name=secret_name, namespace=namespace),
        string_data={SECRET_KEY: "a-key-someone-else-chose"},
    )
    core.create_namespaced_secret(namespace, foreign_secret)
    # The team's own Secret named after the application is not the service's child's name.
    core.create_namespaced_secret(
        namespace,
        client.V1Secret(
            metadata=client.V1ObjectMeta(name="taken", namespace=namespace), string_data={"k": "v"}
        ),
    )
    foreign_policy = {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": "taken", "namespace": namespace},
        "spec": {"podSelector": {}, "policyTypes": ["Ingress"]},
    }
    networking.create_namespaced_network_policy(namespace, foreign_policy)
    jobs_policy_name = engine_jobs_network_policy_name("taken")
    foreign_jobs_policy = {**foreign_policy, "metadata": {"name": jobs_policy_name, "namespace": namespace}}
    networking.create_namespaced_network_policy(namespace, foreign_jobs_policy)
    _create(k8s, example, namespace, "taken")

    def stopped() -> dict[str, Any] | None:
        obj = custom_object(k8s, namespace, "taken")
        cond = condition(obj, "Ready")
        return obj if cond and cond["reason"] == c.REASON_CHILD_NAME_TAKEN else None

    obj = eventually(stopped, timeout=30, description="Ready=False ChildNameTaken (the Secret)")
    assert (
        f"Secret {secret_name} exists and is not controlled by this InferenceService"
        in condition(obj, "Ready")["message"]
    )
    # No pod is started on a key someone else chose: not even the build Job exists yet.
    assert batch.list_namespaced_job(namespace).items == [], dump(obj.get("status"))
    secret = core.read_namespaced_secret(secret_name, namespace)
    assert not secret.metadata.owner_references
    assert base64.b64decode(secret.data[SECRET_KEY]).decode() == "a-key-someone-else-chose"
    events = events_once(core, namespace, lambda es: any(e.reason == c.REASON_CHILD_NAME_TAKEN for e in es))
    assert [e.reason for e in events].count(c.REASON_CHILD_NAME_TAKEN) == 1

    # Removed by its owner, the name is the service's: it makes its own Secret and goes on.
    core.delete_namespaced_secret(secret_name, namespace)
    _nudge(k8s, namespace, "taken", "1")
    owned = eventually(
        lambda: (
            (s := _secret(core, namespace, secret_name)) is not None and s.metadata.owner_references and s
        ),
        timeout=30,
        description="the service's own Secret",
    )
    assert base64.b64decode(owned.data[SECRET_KEY]).decode() != "a-key-someone-else-chose"
    team_secret = core.read_namespaced_secret("taken", namespace)
    assert not team_secret.metadata.owner_references and set(team_secret.data) == {"k"}

    # Next, the Jobs' policy's name is taken: still no Job, said on Ready; the foreign object is kept.
    def jobs_policy_taken() -> dict[str, Any] | None:
        obj = custom_object(k8s, namespace, "taken")
        cond = condition(obj, "Ready")
        return obj if cond and f"NetworkPolicy {jobs_policy_name}" in cond["message"] else None

    obj = eventually(
        jobs_policy_taken, timeout=30, description="Ready=False ChildNameTaken (the Jobs' policy)"
    )
    assert condition(obj, "Ready")["reason"] == c.REASON_CHILD_NAME_TAKEN
    assert batch.list_namespaced_job(namespace).items == [], dump(obj.get("status"))
    assert not networking.read_namespaced_network_policy(
        jobs_policy_name, namespace
    ).metadata.owner_references
    networking.delete_namespaced_network_policy(jobs_policy_name, namespace)
    _nudge(k8s, namespace, "taken", "2")
    _serve(k8s, namespace)
    own_jobs_policy = _policy(networking, namespace, jobs_policy_name)
    assert own_jobs_policy is not None and own_jobs_policy.metadata.owner_references

    def policy_taken() -> dict[str, Any] | None:
        obj = custom_object(k8s, namespace, "taken")
        cond = condition(obj, "RolloutReady")
        taken = cond and cond["reason"] == c.REASON_CHILD_NAME_TAKEN and "NetworkPolicy" in cond["message"]
        return cond if taken else None

    cond = eventually(policy_taken, timeout=90, description="RolloutReady=False ChildNameTaken (the policy)")
    assert "NetworkPolicy taken exists and is not controlled by this InferenceService" in cond["message"]
    policy = networking.read_namespaced_network_policy("taken", namespace)
    assert not policy.metadata.owner_references
    assert policy.spec.pod_selector.match_labels is None and policy.spec.ingress is None  # left as it was


def _deployment(apps: client.AppsV1Api, namespace: str, name: str) -> client.V1Deployment | None:
    try:
        return apps.read_namespaced_deployment(name, namespace)
    except ApiException as error:
        if error.status == 404:
            return None
        raise


def _policy(api: client.NetworkingV1Api, namespace: str, name: str) -> client.V1NetworkPolicy | None:
    try:
        return api.read_namespaced_network_policy(name, namespace)
    except ApiException as error:
        if error.status == 404:
            return None
        raise


def _selects(selector: client.V1LabelSelector, labels: dict[str, str] | None) -> bool:
    """Whether a selector (matchLabels and `In` expressions, all the operator writes) selects `labels`."""
    labels = labels or {}
    if any(labels.get(k) != v for k, v in (selector.match_labels or {}).items()):
        return False
    for expression in selector.match_expressions or []:
        assert expression.operator == "In", expression
        if labels.get(expression.key) not in expression.values:
            return False
    return True
