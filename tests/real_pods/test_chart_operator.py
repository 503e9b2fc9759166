"""The Helm chart's operator Deployment on local-0, as users run it: in-cluster, as its ServiceAccount.

`helm install` renders the operator's Deployment; the node agent runs its pod from the project's
own `tailpilot` console script (the operator image's entry point, `agent_images`), in a mount
namespace of its own in which the ServiceAccount token is where the Kubernetes client's in-cluster
configuration reads it, with KUBERNETES_SERVICE_HOST/PORT naming the API server. No kubeconfig
reaches it: what it does, it does as the chart's ServiceAccount, with the chart's RBAC. It then
serves the CPU example (as the SLO-loop runs configure it) to Ready, a real build on local-0 and
real Triton pods, and answers a load past one replica's capacity with a second replica, reading
the P99 from kube-prometheus-stack's Prometheus (the chart's `prometheus.url`), which a real
prometheus-operator configures from the ServiceMonitor the operator labels with the chart's
`prometheus.monitoringLabels` (`tailpilot_e2e.prometheus_stack`).

Values specific to this machine (`values`): the pod has no network namespace here, so its servers
bind its pod IP instead of 0.0.0.0 (the chart's `extraEnv`: the operator's own bind-address setting).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
import yaml
from kubernetes import client

from tailpilot.bench import traces
from tailpilot.builders.example_model import NUM_CLASSES
from tailpilot_e2e.agent_cgroups import CpuCgroups
from tailpilot_e2e.agent_process import running_processes
from tailpilot_e2e.calibration import calibrate, example_load
from tailpilot_e2e.cluster import LocalCluster
from tailpilot_e2e.config import REPO_ROOT, tool
from tailpilot_e2e.operator_harness import custom_object, install_crds
from tailpilot_e2e.prometheus_stack import PrometheusStack
from tailpilot_e2e.real_pods import (
    SINGLE_REQUESTS,
    SLO_LOOP_MODEL_WIDTH,
    infer,
    prepare_storage,
    ready_endpoints,
    serve_and_wait_ready,
    slo_loop_service,
)
from tailpilot_e2e.wait import eventually

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

CHART = REPO_ROOT / "charts" / "tailpilot"
NAME = "mlp-cpu"
TOKEN_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
#: The load over what one replica serves at its CPU limit (`tailpilot_e2e.calibration`): past it,
#: so that one replica's queue grows and the P99 leaves the SLO; two replicas serve it.
LOAD_OVER_ONE_REPLICA = 1.3
#: The load runs this long at most; the second replica must be Ready within it.
LOAD_S = 150.0


def values(
    *, watch: str, prometheus_url: str, monitoring_labels: dict[str, str], control_period_s: float
) -> dict[str, Any]:
    """The chart's values for this cluster: the operator image, Prometheus, one watched namespace."""
    return {
        "image": {"repository": "ghcr.io/tailpilot/tailpilot-operator"},
        "watchNamespaces": [watch],
        # kube-prometheus-stack's Prometheus, and the label it selects monitoring objects by.
        "prometheus": {"url": prometheus_url, "monitoringLabels": monitoring_labels},
        "engineStore": {"claimName": "tailpilot-engines"},
        # A real pod's 0.0.0.0 is its own network namespace; here it would be the machine's. The
        # agent turns the chart's liveness URL (http://0.0.0.0:8080) into the pod IP; the metrics
        # and webhook servers bind the operator's default 0.0.0.0, which no env names: the pod IP.
        "extraEnv": [
            {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
            {"name": "TAILPILOT_BIND_ADDRESS", "value": "$(POD_IP)"},
            # The SLO-loop runs' control period (the operator's default is 15 s), for a short test.
            {"name": "TAILPILOT_CONTROL_PERIOD_SECONDS", "value": f"{control_period_s:g}"},
        ],
    }


@contextlib.contextmanager
def installed_chart(cluster: LocalCluster, work_dir: Path, chart_values: dict[str, Any]) -> Iterator[str]:
    """`helm install` the chart into a fresh `<release>-system` namespace, uninstalled afterwards."""
    helm = tool("helm")
    assert helm, "helm is installed by `make helm` (e2e/install-helm.sh)"
    release = f"tp-{uuid.uuid4().hex[:6]}"
    values_file = work_dir / "values.yaml"
    values_file.write_text(yaml.safe_dump(chart_values))
    env = {"KUBECONFIG": str(cluster.paths.kubeconfig), "HOME": str(work_dir), "PATH": "/usr/bin:/bin"}

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [helm, *args, "-n", f"{release}-system"],
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
            check=False,
        )

    # The CRDs are applied by the test (server-side), as on a cluster where they are managed apart.
    result = run("install", release, str(CHART), "--create-namespace", "-f", str(values_file), "--wait=false")
    assert result.returncode == 0, result.stderr
    try:
        yield release
    finally:
        run("uninstall", release, "--wait=false")
        cluster.kubectl("delete", "namespace", f"{release}-system", "--wait=false", check=False)


def operator_pod(core: client.CoreV1Api, namespace: str) -> client.V1Pod | None:
    """The chart's operator pod, once Ready by its probes."""
    pods = core.list_namespaced_pod(namespace, label_selector="app.kubernetes.io/component=operator").items
    for pod in pods:
        conditions = {c.type: c.status for c in pod.status.conditions or []}
        if conditions.get("Ready") == "True" and pod.metadata.deletion_timestamp is None:
            return pod
    return None


def process_environ(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return dict(item.decode().split("=", 1) for item in raw if b"=" in item)


def test_the_charts_operator_runs_as_its_service_account_and_serves_the_cpu_example(
    real_cluster: LocalCluster, real_api: client.ApiClient, real_namespace: str, tmp_path: Path
) -> None:
    core = client.CoreV1Api(real_api)
    ns = real_namespace
    install_crds(real_cluster)
    prepare_storage(core, ns, tmp_path / "pvc", model_width=SLO_LOOP_MODEL_WIDTH)
    with contextlib.ExitStack() as stack:
        # kube-prometheus-stack's prometheus-operator and Prometheus (its monitoring CRDs with them).
        prometheus = PrometheusStack(real_cluster, ns, tmp_path / "prometheus", scrape_interval_s=2)
        stack.callback(prometheus.stop)
        prometheus.start()
        chart_values = values(
            watch=ns, prometheus_url=prometheus.url, monitoring_labels=prometheus.labels, control_period_s=4
        )
        release = stack.enter_context(installed_chart(real_cluster, tmp_path, chart_values))
        release_ns, account = f"{release}-system", f"{release}-tailpilot"

        pod = eventually(
            lambda: operator_pod(core, release_ns), timeout=120, description="the operator pod Ready"
        )
        assert (pod.spec.node_name, pod.spec.service_account_name) == ("local-0", account)
        uid = pod.metadata.uid
        pid = running_processes(real_cluster.agent_state_dir, uid)[f"{uid}/operator"]
        # The project's console script as the image's entry point, with the chart's args.
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")
        assert cmdline[1:4] == [
            str(REPO_ROOT / ".venv" / "bin" / "tailpilot"),
            "operator",
            f"--namespace={ns}",
        ]
        # Its own mount namespace, with the token volume at the absolute in-cluster path.
        assert os.readlink(f"/proc/{pid}/ns/mnt") != os.readlink("/proc/self/ns/mnt")
        mount_points = [line.split()[4] for line in Path(f"/proc/{pid}/mountinfo").read_text().splitlines()]
        assert TOKEN_DIR in mount_points or TOKEN_DIR.removeprefix("/var") in mount_points
        # Its environment names the API server (as the agent injects it) and no kubeconfig.
        environ = process_environ(pid)
        assert environ["KUBERNETES_SERVICE_HOST"] == "127.0.0.1"
        assert real_cluster.server.endswith(f":{environ['KUBERNETES_SERVICE_PORT']}")
        assert "KUBECONFIG" not in environ
        # There, the in-cluster configuration the operator tries first (controllers/process/main.py) loads and
        # is the chart's ServiceAccount.
        assert in_cluster_user(pid, environ) == f"system:serviceaccount:{release_ns}:{account}"
        # Its metrics server listens on its pod IP (the chart's metrics port).
        metrics = httpx.get(f"http://{pod.status.pod_ip}:9090/metrics", timeout=5, trust_env=False)
        assert metrics.status_code == 200 and "tailpilot_" in metrics.text

        # The operator, as the chart runs it, builds and rolls out the CPU example...
        service = slo_loop_service(
            ns, name=NAME, max_replicas=2, stabilization_s=20, batching=SINGLE_REQUESTS
        )
        serve_and_wait_ready(real_api, service, timeout_s=420)
        endpoints = ready_endpoints(core, ns, NAME)
        assert len(endpoints) == 1, "the service starts at one replica, so that a scale-up shows"
        assert infer(endpoints[0]).shape == (1, NUM_CLASSES)
        # ...and answers a load one replica cannot serve with a second one.
        calibration = calibrate(
            core,
            CpuCgroups.of(real_cluster.agent_state_dir),
            custom_object(real_api, ns, NAME),
            tmp_path / "cal",
        )
        rate = LOAD_OVER_ONE_REPLICA * calibration.capacity_per_s
        arrivals = traces.piecewise_poisson(steps=[(LOAD_S, rate)], rng=np.random.default_rng(7))
        with example_load(tmp_path / "load", arrivals, duration_s=LOAD_S, targets=endpoints) as load:

            def scaled_up() -> bool:
                ready = ready_endpoints(core, ns, NAME)
                load.set_targets(ready)  # the Service's endpoints, as kube-proxy would follow them
                return len(ready) == 2

            eventually(
                scaled_up, timeout=LOAD_S, interval=1.0, description=f"a second replica at {rate:.1f} req/s"
            )
        # The operator's decision, through the chart's RBAC: two replicas in force, the Deployment at two.
        status = custom_object(real_api, ns, NAME)["status"]
        assert status["replicas"] == 2, status.get("lastDecision")
        assert client.AppsV1Api(real_api).read_namespaced_deployment(NAME, ns).spec.replicas == 2
        # The pod checked above (the chart runs two: either may be listed first) was neither replaced
        # nor restarted meanwhile.
        again = core.read_namespaced_pod(pod.metadata.name, release_ns)
        assert again.metadata.uid == uid and again.metadata.deletion_timestamp is None
        assert again.status.container_statuses[0].restart_count == 0


#: Run in the operator's mount namespace with its environment: who the in-cluster configuration is.
IN_CLUSTER_WHOAMI = """
from kubernetes import client, config
configuration = client.Configuration()
config.load_incluster_config(client_configuration=configuration)
with client.ApiClient(configuration) as api:
    review = client.AuthenticationV1Api(api).create_self_subject_review(client.V1SelfSubjectReview())
print(review.status.user_info.username)
"""


def in_cluster_user(pid: int, environ: dict[str, str]) -> str:
    """The user the Kubernetes client's in-cluster configuration authenticates as, where `pid` runs."""
    nsenter = tool("nsenter")
    assert nsenter, "nsenter (util-linux) is needed to look into the operator's mount namespace"
    result = subprocess.run(  # noqa: S603
        [nsenter, f"--mount=/proc/{pid}/ns/mnt", "--", sys.executable, "-P", "-c", IN_CLUSTER_WHOAMI],
        capture_output=True,
        text=True,
        env=environ,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()
