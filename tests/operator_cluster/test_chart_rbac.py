"""The Helm chart installs into the cluster, and its least-privilege RBAC is enough to run the operator.

With `watchNamespaces`, the same operator converges a service in the watched namespace while its
account can neither create a Job nor read a Secret in any other (the rules on namespaced objects
are bound there only), and elects itself on the chart's Lease.

The operator runs here as a process authenticated with a token of the chart's
ServiceAccount, so every API call it makes is authorized by the chart's
ClusterRole and Role alone (the admin kubeconfig is not used): among them the
start-up read of the webhook token Secret the chart generates, after which the
webhook answers only that token. The generated token is kept across
`helm upgrade`, and removed by `helm uninstall` unless `webhook.tokenSecret.keep`.
"""

from __future__ import annotations

import base64
import subprocess
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import httpx
import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from tailpilot.builders.triton_server import free_port
from tailpilot_e2e.config import tool
from tailpilot_e2e.kube import api_client, service_account_kubeconfig
from tailpilot_e2e.operator_harness import (
    OperatorProcess,
    condition,
    custom_object,
    play_build,
    play_profile,
    running_build_pod,
)
from tailpilot_e2e.pytest_plugin import fresh_namespace
from tailpilot_e2e.wait import eventually

from .conftest import GPU_PROFILE, gpu_build_result

pytestmark = [pytest.mark.cluster, pytest.mark.slow]


@dataclass(frozen=True)
class Release:
    """One installed release of the chart, and `helm` bound to its cluster and namespace."""

    name: str
    namespace: str
    helm: Callable[..., subprocess.CompletedProcess[str]]

    @property
    def account(self) -> str:
        return f"{self.name}-tailpilot"

    @property
    def token_secret(self) -> str:
        return f"{self.name}-tailpilot-webhook-token"


@pytest.fixture
def helm_release(crds, k8s, tmp_path) -> Iterator[Callable[..., Release]]:
    """Install the chart (`--set` pairs as arguments) in a fresh namespace; uninstall afterwards."""
    helm = tool("helm")
    assert helm, "helm is installed by `make helm` (e2e/install-helm.sh)"
    env = {"KUBECONFIG": str(crds.paths.kubeconfig), "HOME": str(tmp_path), "PATH": "/usr/bin:/bin"}
    installed: list[Release] = []

    def install(*sets: str) -> Release:
        name = f"tp-{uuid.uuid4().hex[:6]}"
        namespace = f"{name}-system"

        def run(*args: str) -> subprocess.CompletedProcess[str]:
            result = subprocess.run(
                [helm, *args, "-n", namespace],
                capture_output=True,
                text=True,
                env=env,
                timeout=120,
                check=False,
            )
            assert result.returncode == 0, result.stderr
            return result

        release = Release(name, namespace, run)
        installed.append(release)
        # CRDs are already installed by the session fixture (server-side apply), so the chart skips them.
        set_args = [arg for s in ("crds.enabled=false", *sets) for arg in ("--set", s)]
        run("install", name, "charts/tailpilot", "--create-namespace", *set_args, "--wait=false")
        return release

    yield install
    core = client.CoreV1Api(k8s)
    for release in installed:
        subprocess.run(
            [helm, "uninstall", release.name, "-n", release.namespace],
            capture_output=True,
            env=env,
            timeout=120,
            check=False,
        )
        core.delete_namespace(release.namespace)


def _token(k8s, release: Release) -> str:
    secret = client.CoreV1Api(k8s).read_namespaced_secret(release.token_secret, release.namespace)
    return base64.b64decode(secret.data["token"]).decode()


def _secret_gone(k8s, release: Release) -> bool:
    try:
        client.CoreV1Api(k8s).read_namespaced_secret(release.token_secret, release.namespace)
    except ApiException as exc:
        return exc.status == 404
    return False


def _account_may(k8s, release: Release, verb: str, *, namespace: str, name: str | None = None) -> bool:
    """Whether the chart's ServiceAccount may `verb` Secrets (a SubjectAccessReview)."""
    sa = f"system:serviceaccount:{release.namespace}:{release.account}"
    groups = ["system:serviceaccounts", f"system:serviceaccounts:{release.namespace}", "system:authenticated"]
    review = client.V1SubjectAccessReview(
        spec=client.V1SubjectAccessReviewSpec(
            user=sa,
            groups=groups,
            resource_attributes=client.V1ResourceAttributes(
                namespace=namespace, verb=verb, resource="secrets", name=name
            ),
        )
    )
    return bool(client.AuthorizationV1Api(k8s).create_subject_access_review(review).status.allowed)


def test_operator_runs_with_only_the_charts_rbac(
    helm_release, local_cluster, k8s, namespace, engine_store, example, tmp_path
):
    release = helm_release()  # default values: the webhook on, its token generated
    release_ns, account = release.namespace, release.account
    # The chart's Role lets the operator read its token Secret, and only that one.
    assert _account_may(k8s, release, "get", namespace=release_ns, name=release.token_secret)
    rbac = client.RbacAuthorizationV1Api(k8s)
    assert _role_secrets(rbac, release) == [release.token_secret]
    # Other Secrets only by name, where the ClusterRole is bound (each service's admin key, which it
    # creates and reads): never listed or watched, never updated or deleted.
    for verb in ("list", "watch"):
        assert not _account_may(k8s, release, verb, namespace=release_ns)
        assert not _account_may(k8s, release, verb, namespace=namespace)
    for verb in ("update", "patch", "delete"):
        assert not _account_may(k8s, release, verb, namespace=namespace, name="any")
    role = rbac.read_cluster_role(account)
    assert all("*" not in rule.verbs and "*" not in (rule.resources or []) for rule in role.rules), role.rules
    kubeconfig = service_account_kubeconfig(
        k8s,
        server=local_cluster.server,
        ca_file=local_cluster.paths.pki / "ca.crt",
        namespace=release_ns,
        account=account,
        path=tmp_path / "sa.kubeconfig",
    )

    core = client.CoreV1Api(k8s)
    webhook_port = free_port()
    # As the chart's Deployment runs it: the token read at start-up from the generated Secret.
    webhook_args = [
        "--webhook-port",
        str(webhook_port),
        "--webhook-token-secret",
        f"{release_ns}/{release.token_secret}/token",
        "--bind-address",
        "127.0.0.1",
    ]
    with OperatorProcess(
        local_cluster, namespace=namespace, log_dir=tmp_path, kubeconfig=kubeconfig, extra_args=webhook_args
    ) as operator:
        url = f"http://127.0.0.1:{webhook_port}/alerts"
        empty_group = {"version": "4", "status": "firing", "alerts": []}
        unauthenticated = eventually(
            lambda: httpx.post(url, json=empty_group, timeout=2), timeout=30, description="webhook serving"
        )
        assert unauthenticated.status_code == 401
        wrong = httpx.post(url, json=empty_group, headers={"Authorization": "Bearer wrong"}, timeout=2)
        assert wrong.status_code == 401
        bearer = {"Authorization": f"Bearer {_token(k8s, release)}"}
        assert httpx.post(url, json=empty_group, headers=bearer, timeout=2).status_code == 200

        isvc = example("gpu-tensorrt-h100.yaml", namespace=namespace)
        client.CustomObjectsApi(k8s).create_namespaced_custom_object(
            "tailpilot.io", "v1alpha1", namespace, "inferenceservices", isvc
        )
        play_build(core, running_build_pod(core, namespace), result=gpu_build_result())
        play_profile(core, namespace, GPU_PROFILE)

        def ready():
            cond = condition(custom_object(k8s, namespace, isvc["metadata"]["name"]), "Ready")
            return cond and cond["status"] == "True"

        eventually(ready, timeout=90, description="Ready with the chart's RBAC")
        log = operator.log_file.read_text()
    assert "Forbidden" not in log and " 403" not in log, log[-3000:]


def test_generated_token_is_kept_on_upgrade_and_removed_on_uninstall(helm_release, k8s):
    release = helm_release()
    token = _token(k8s, release)
    assert len(token) == 48
    secret = client.CoreV1Api(k8s).read_namespaced_secret(release.token_secret, release.namespace)
    assert "helm.sh/resource-policy" not in (secret.metadata.annotations or {})
    # An upgrade that changes the Deployment keeps the token Alertmanager was given.
    release.helm("upgrade", release.name, "charts/tailpilot", "--reuse-values", "--set", "logLevel=debug")
    assert _token(k8s, release) == token
    release.helm("uninstall", release.name)
    eventually(lambda: _secret_gone(k8s, release), timeout=30, description="token Secret deleted")


def test_kept_token_survives_uninstall_and_is_reused(helm_release, k8s):
    release = helm_release("webhook.tokenSecret.keep=true")
    token = _token(k8s, release)
    release.helm("uninstall", release.name)
    assert _token(k8s, release) == token  # `helm.sh/resource-policy: keep`
    release.helm(
        "install", release.name, "charts/tailpilot", "--set", "crds.enabled=false", "--set",
        "webhook.tokenSecret.keep=true", "--wait=false",
    )  # fmt: skip
    assert _token(k8s, release) == token


def test_a_users_secret_is_used_and_none_generated(helm_release, k8s):
    release = helm_release("webhook.tokenSecret.name=am-token")
    assert _secret_gone(k8s, release)
    assert _account_may(k8s, release, "get", namespace=release.namespace, name="am-token")
    assert _role_secrets(client.RbacAuthorizationV1Api(k8s), release) == ["am-token"]


def _role_secrets(rbac: client.RbacAuthorizationV1Api, release: Release) -> list[str]:
    """The Secrets the chart's Role in the release namespace names."""
    role = rbac.read_namespaced_role(release.account, release.namespace)
    return [name for rule in role.rules if "secrets" in rule.resources for name in rule.resource_names or []]


def _may(
    k8s, release: Release, verb: str, resource: str, *, group: str = "", namespace: str | None = None
) -> bool:
    """Whether the chart's ServiceAccount may `verb` `resource` (in `namespace`, or cluster-wide)."""
    sa = f"system:serviceaccount:{release.namespace}:{release.account}"
    groups = ["system:serviceaccounts", f"system:serviceaccounts:{release.namespace}", "system:authenticated"]
    review = client.V1SubjectAccessReview(
        spec=client.V1SubjectAccessReviewSpec(
            user=sa,
            groups=groups,
            resource_attributes=client.V1ResourceAttributes(
                namespace=namespace, verb=verb, group=group, resource=resource
            ),
        )
    )
    return bool(client.AuthorizationV1Api(k8s).create_subject_access_review(review).status.allowed)


@pytest.fixture
def other_namespace(request, k8s) -> Iterator[str]:
    """A second namespace the operator is not told to watch."""
    with fresh_namespace(request, k8s) as name:
        yield name


def test_watched_namespaces_scope_the_rbac_and_the_operator_still_converges(
    helm_release, local_cluster, k8s, namespace, other_namespace, engine_store, example, tmp_path
):
    release = helm_release(f"watchNamespaces={{{namespace}}}")
    # In the watched namespace: what the operator does there.
    for verb, resource, group in (("create", "jobs", "batch"), ("patch", "deployments", "apps")):
        assert _may(k8s, release, verb, resource, group=group, namespace=namespace), (verb, resource)
    # Anywhere else: no Job (so no Secret mounted by one), no Secret, no child, no service written.
    for verb, resource, group in (
        ("create", "jobs", "batch"),
        ("get", "secrets", ""),
        ("list", "secrets", ""),
        ("create", "deployments", "apps"),
        ("patch", "pods", ""),
        ("patch", "inferenceservices", "tailpilot.io"),
    ):
        elsewhere = _may(k8s, release, verb, resource, group=group, namespace=other_namespace)
        assert not elsewhere, (verb, resource)
        assert not _may(k8s, release, verb, resource, group=group), (verb, resource, "cluster-wide")
    # Cluster-wide it keeps reads of what no namespace holds, and listing pods (free GPUs per node).
    assert _may(k8s, release, "list", "nodes") and _may(k8s, release, "list", "pods")
    assert _may(k8s, release, "watch", "namespaces") and not _may(k8s, release, "get", "pods")
    kubeconfig = service_account_kubeconfig(
        k8s,
        server=local_cluster.server,
        ca_file=local_cluster.paths.pki / "ca.crt",
        namespace=release.namespace,
        account=release.account,
        path=tmp_path / "sa.kubeconfig",
    )
    # A refused write as the account itself, not only a review: a Job in the other namespace.
    as_account = api_client(kubeconfig)
    job = client.V1Job(
        metadata=client.V1ObjectMeta(name="reads-secrets"),
        spec=client.V1JobSpec(
            template=client.V1PodTemplateSpec(
                spec=client.V1PodSpec(
                    restart_policy="Never", containers=[client.V1Container(name="c", image="busybox")]
                )
            )
        ),
    )
    try:
        with pytest.raises(ApiException) as refused:
            client.BatchV1Api(as_account).create_namespaced_job(other_namespace, job)
        assert refused.value.status == 403
        with pytest.raises(ApiException) as refused:
            client.CoreV1Api(as_account).read_namespaced_secret("any", other_namespace)
        assert refused.value.status == 403
    finally:
        as_account.close()

    # The operator under exactly those rights, electing itself on the chart's Lease.
    election = [
        "--leader-election",
        "--leader-election-namespace",
        release.namespace,
        "--leader-election-lease",
        release.account,  # the chart names the Lease after the release's full name
        "--leader-election-identity",
        "op-scoped",
    ]
    core = client.CoreV1Api(k8s)
    with OperatorProcess(
        local_cluster, namespace=namespace, log_dir=tmp_path, kubeconfig=kubeconfig, extra_args=election
    ) as operator:
        eventually(operator.ready, timeout=60, description="leading with the chart's Lease Role")
        isvc = example("gpu-tensorrt-h100.yaml", namespace=namespace)
        client.CustomObjectsApi(k8s).create_namespaced_custom_object(
            "tailpilot.io", "v1alpha1", namespace, "inferenceservices", isvc
        )
        play_build(core, running_build_pod(core, namespace), result=gpu_build_result())
        play_profile(core, namespace, GPU_PROFILE)

        def ready():
            cond = condition(custom_object(k8s, namespace, isvc["metadata"]["name"]), "Ready")
            return cond and cond["status"] == "True"

        eventually(ready, timeout=90, description="Ready with RBAC scoped to its namespace")
        log = operator.log_file.read_text()
    assert "Forbidden" not in log and " 403" not in log, log[-3000:]
    holder = client.CoordinationV1Api(k8s).read_namespaced_lease(release.account, release.namespace)
    assert holder.spec.holder_identity in ("op-scoped", "")  # held, or released on the clean stop
