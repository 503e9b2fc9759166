"""The Helm chart installs into the cluster, and its least-privilege RBAC is enough to run the operator.

The operator runs here as a process authenticated with a token of the chart's
ServiceAccount, so every API call it makes is authorized by the chart's
ClusterRole and Role alone (the admin kubeconfig is not used).
"""

from __future__ import annotations

import subprocess
import uuid

import pytest
from kubernetes import client

from tailpilot_e2e.config import tool
from tailpilot_e2e.kube import service_account_kubeconfig
from tailpilot_e2e.operator_harness import (
    OperatorProcess,
    condition,
    custom_object,
    play_build,
    running_build_pod,
)
from tailpilot_e2e.wait import eventually

from .conftest import gpu_build_result

pytestmark = [pytest.mark.cluster, pytest.mark.slow]


@pytest.fixture
def helm_release(crds, k8s, tmp_path):
    helm = tool("helm")
    assert helm, "helm is installed by `make helm` (e2e/install-helm.sh)"
    release = f"tp-{uuid.uuid4().hex[:6]}"
    namespace = f"{release}-system"
    env = {"KUBECONFIG": str(crds.paths.kubeconfig), "HOME": str(tmp_path), "PATH": "/usr/bin:/bin"}
    # CRDs are already installed by the session fixture (server-side apply), so the chart skips them.
    cmd = [
        helm,
        "install",
        release,
        "charts/tailpilot",
        "-n",
        namespace,
        "--create-namespace",
        "--set",
        "crds.enabled=false",
        "--wait=false",
    ]
    result = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    yield release, namespace
    subprocess.run(
        [helm, "uninstall", release, "-n", namespace], capture_output=True, env=env, timeout=120, check=False
    )
    client.CoreV1Api(k8s).delete_namespace(namespace)


def test_operator_runs_with_only_the_charts_rbac(
    helm_release, local_cluster, k8s, namespace, engine_store, example, tmp_path
):
    release, release_ns = helm_release
    account = f"{release}-tailpilot"
    rbac = client.RbacAuthorizationV1Api(k8s)
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
    with OperatorProcess(
        local_cluster, namespace=namespace, log_dir=tmp_path, kubeconfig=kubeconfig
    ) as operator:
        isvc = example("gpu-tensorrt-h100.yaml", namespace=namespace)
        client.CustomObjectsApi(k8s).create_namespaced_custom_object(
            "tailpilot.io", "v1alpha1", namespace, "inferenceservices", isvc
        )
        play_build(core, running_build_pod(core, namespace), result=gpu_build_result())

        def ready():
            cond = condition(custom_object(k8s, namespace, isvc["metadata"]["name"]), "Ready")
            return cond and cond["status"] == "True"

        eventually(ready, timeout=90, description="Ready with the chart's RBAC")
        log = operator.log_file.read_text()
    assert "Forbidden" not in log and " 403" not in log, log[-3000:]
