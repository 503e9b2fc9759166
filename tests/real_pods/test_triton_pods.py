"""The CPU example on real pods: real build and profile Jobs, Triton processes, scaling, crash, delete."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
from kubernetes import client

from tailpilot.api.quantity import milli_cpu
from tailpilot.builders.example_model import NUM_CLASSES
from tailpilot_e2e.agent_process import running_processes
from tailpilot_e2e.cluster import LocalCluster
from tailpilot_e2e.operator_harness import OperatorProcess, condition, custom_object
from tailpilot_e2e.real_pods import (
    cpu_example,
    infer,
    is_ready,
    prepare_storage,
    ready_endpoints,
    server_pods,
)
from tailpilot_e2e.wait import eventually

pytestmark = pytest.mark.cluster
NAME = "mlp-cpu"


def triton_processes(cluster: LocalCluster, core: client.CoreV1Api, ns: str) -> dict[str, int]:
    """Pod name -> PID of its running tritonserver process."""
    out = {}
    for pod in server_pods(core, ns, NAME):
        pid = running_processes(cluster.agent_state_dir, pod.metadata.uid).get(f"{pod.metadata.uid}/triton")
        if pid is not None:
            out[pod.metadata.name] = pid
    return out


def patch_autoscaling(api: client.ApiClient, ns: str, **bounds: int) -> None:
    client.CustomObjectsApi(api).patch_namespaced_custom_object(
        "tailpilot.io", "v1alpha1", ns, "inferenceservices", NAME, {"spec": {"autoscaling": bounds}}
    )


def test_the_cpu_example_serves_from_real_triton_pods_and_scales_its_processes(
    real_cluster: LocalCluster,
    real_api: client.ApiClient,
    real_namespace: str,
    operator: OperatorProcess,
    tmp_path: Path,
) -> None:
    core = client.CoreV1Api(real_api)
    ns = real_namespace
    prepare_storage(core, ns, tmp_path)
    client.CustomObjectsApi(real_api).create_namespaced_custom_object(
        "tailpilot.io", "v1alpha1", ns, "inferenceservices", cpu_example(ns, name=NAME)
    )

    # The engine is built by the operator's build Job and profiled by its profile Job (the service's
    # Triton as a sidecar, the profiler beside it), both really run on local-0.
    ready = eventually(
        lambda: (
            (condition(obj := custom_object(real_api, ns, NAME), "Ready") or {}).get("status") == "True"
            and obj
        ),
        timeout=420,
        description="the service Ready after a real build and rollout",
    )
    job_pods = core.list_namespaced_pod(ns, label_selector="app.kubernetes.io/component=engine-build").items
    assert job_pods and all(p.spec.node_name == "local-0" for p in job_pods)
    assert any(p.status.phase == "Succeeded" for p in job_pods)
    assert ready["status"]["engine"]["key"] and ready["status"]["profile"]["points"]
    profile_pods = core.list_namespaced_pod(
        ns, label_selector="app.kubernetes.io/component=engine-profile"
    ).items
    assert profile_pods and all(p.spec.node_name == "local-0" for p in profile_pods)
    (profiled,) = [p for p in profile_pods if p.status.phase == "Succeeded"]
    # The profile on the status is the one that pod measured, under the serving pods' CPU limit.
    assert ready["status"]["profile"]["key"] == profiled.metadata.labels["tailpilot.io/profile-key"]
    assert ready["status"]["profiling"]["phase"] == "Succeeded"
    limit = cpu_example(ns, name=NAME)["spec"]["runtime"]["resources"]["limits"]["cpu"]
    assert ready["status"]["profile"]["cpuLimitMillis"] == milli_cpu(limit)
    sidecar = next(s for s in profiled.status.init_container_statuses if s.name == "triton")
    assert sidecar.state.terminated is not None  # stopped once the profiler was done

    # Its pods are real Triton processes answering through their own pod IPs.
    endpoints = ready_endpoints(core, ns, NAME)
    assert len(endpoints) == 1
    logits = infer(endpoints[0], batch=2)
    assert logits.shape == (2, NUM_CLASSES)
    assert len(triton_processes(real_cluster, core, ns)) == 1

    # Scaling up starts a second process on its own address.
    patch_autoscaling(real_api, ns, minReplicas=2)
    endpoints = eventually(
        lambda: (e := ready_endpoints(core, ns, NAME)) and len(e) == 2 and e,
        timeout=180,
        description="2 ready pods",
    )
    assert len(set(endpoints)) == 2
    assert all(infer(url).shape == (1, NUM_CLASSES) for url in endpoints)
    assert len(set(triton_processes(real_cluster, core, ns).values())) == 2

    # A crashed Triton is restarted in place; the pod's restart count rises and it serves again.
    victim = server_pods(core, ns, NAME)[0]
    os.kill(triton_processes(real_cluster, core, ns)[victim.metadata.name], signal.SIGKILL)
    restarted = eventually(
        lambda: (
            (p := core.read_namespaced_pod(victim.metadata.name, ns))
            and p.status.container_statuses[0].restart_count >= 1
            and is_ready(p)
            and p
        ),
        timeout=180,
        description="the killed Triton restarted and Ready",
    )
    assert restarted.status.container_statuses[0].last_state.terminated.exit_code == 137
    assert infer(f"http://{restarted.status.pod_ip}:8000").shape == (1, NUM_CLASSES)

    # Scaling down stops a process.
    patch_autoscaling(real_api, ns, minReplicas=1, maxReplicas=1)
    eventually(
        lambda: len(triton_processes(real_cluster, core, ns)) == 1 and len(server_pods(core, ns, NAME)) == 1,
        timeout=120,
        description="one Triton process left",
    )

    # Deleting the service stops every process of it.
    pod_uids = [p.metadata.uid for p in server_pods(core, ns, NAME)]
    client.CustomObjectsApi(real_api).delete_namespaced_custom_object(
        "tailpilot.io", "v1alpha1", ns, "inferenceservices", NAME
    )
    eventually(
        lambda: (
            not server_pods(core, ns, NAME)
            and not any(running_processes(real_cluster.agent_state_dir, uid) for uid in pod_uids)
        ),
        timeout=120,
        description="no pod and no process left",
    )
