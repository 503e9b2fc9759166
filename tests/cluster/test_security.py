"""RBAC and PodSecurity admission are enforced by the real API server."""

from __future__ import annotations

import json

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tailpilot_e2e.kube import token_client
from tailpilot_e2e.wait import eventually

pytestmark = pytest.mark.cluster


def test_rbac_is_enforced(local_cluster, k8s, namespace):
    core, rbac = client.CoreV1Api(k8s), client.RbacAuthorizationV1Api(k8s)
    core.create_namespaced_service_account(
        namespace, client.V1ServiceAccount(metadata=client.V1ObjectMeta(name="reader"))
    )
    token = core.create_namespaced_service_account_token(
        "reader", namespace, client.AuthenticationV1TokenRequest(spec=client.V1TokenRequestSpec(audiences=[]))
    ).status.token
    sa_api = token_client(
        server=local_cluster.server, ca_file=local_cluster.paths.pki / "ca.crt", token=token
    )
    sa_core = client.CoreV1Api(sa_api)

    with pytest.raises(ApiException) as denied:
        sa_core.list_namespaced_pod(namespace)
    assert denied.value.status == 403
    assert f"system:serviceaccount:{namespace}:reader" in denied.value.body

    rbac.create_namespaced_role(
        namespace,
        client.V1Role(
            metadata=client.V1ObjectMeta(name="pod-reader"),
            rules=[client.V1PolicyRule(api_groups=[""], resources=["pods"], verbs=["list"])],
        ),
    )
    rbac.create_namespaced_role_binding(
        namespace,
        client.V1RoleBinding(
            metadata=client.V1ObjectMeta(name="pod-reader"),
            role_ref=client.V1RoleRef(api_group="rbac.authorization.k8s.io", kind="Role", name="pod-reader"),
            subjects=[client.RbacV1Subject(kind="ServiceAccount", name="reader", namespace=namespace)],
        ),
    )
    eventually(
        lambda: sa_core.list_namespaced_pod(namespace) is not None, timeout=30, description="list allowed"
    )
    with pytest.raises(ApiException) as still_denied:  # only what the Role grants
        sa_core.list_namespaced_secret(namespace)
    assert still_denied.value.status == 403
    sa_api.close()


def test_pod_security_restricted_rejects_privileged_pod(k8s, namespace):
    core = client.CoreV1Api(k8s)
    core.patch_namespace(
        namespace, {"metadata": {"labels": {"pod-security.kubernetes.io/enforce": "restricted"}}}
    )
    privileged = client.V1Pod(
        metadata=client.V1ObjectMeta(name="privileged"),
        spec=client.V1PodSpec(
            containers=[
                client.V1Container(
                    name="main",
                    image="registry.example/x:1",
                    security_context=client.V1SecurityContext(privileged=True),
                )
            ]
        ),
    )
    with pytest.raises(ApiException) as rejected:
        core.create_namespaced_pod(namespace, privileged)
    assert rejected.value.status == 403
    message = json.loads(rejected.value.body)["message"]
    assert 'violates PodSecurity "restricted:latest"' in message, message
    assert 'privileged (container "main" must not set securityContext.privileged=true)' in message, message
