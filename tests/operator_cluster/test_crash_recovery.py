"""SIGKILL the operator at random points of its reconciles; restarts converge without duplicates."""

from __future__ import annotations

import random
import time

import pytest
from kubernetes import client

from tailpilot_e2e.operator_harness import OperatorProcess, condition, custom_object, play_engine_jobs
from tailpilot_e2e.wait import eventually

from .conftest import GPU_PROFILE, gpu_build_result

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

SERVICES = ("svc-a", "svc-b", "svc-c")


def per_service_build(pod: client.V1Pod):  # type: ignore[no-untyped-def]
    """A distinct engine per service (its build Job's name)."""
    return gpu_build_result(f"{pod.metadata.labels['job-name']:0<32}"[:32])


def test_ten_sigkills_leave_one_job_and_one_deployment_per_service(
    k8s, namespace, crds, engine_store, example
):
    core, apps, batch = client.CoreV1Api(k8s), client.AppsV1Api(k8s), client.BatchV1Api(k8s)
    objects = client.CustomObjectsApi(k8s)
    for name in SERVICES:
        objects.create_namespaced_custom_object(
            "tailpilot.io",
            "v1alpha1",
            namespace,
            "inferenceservices",
            example("gpu-tensorrt-h100.yaml", namespace=namespace, name=name),
        )
    chaos = random.Random(20261129)  # seeded: the same kill points every run
    log_dir = crds.paths.root / "logs"
    played: set[str] = set()
    for round_ in range(10):
        operator = OperatorProcess(crds, namespace=namespace, log_dir=log_dir).start()
        # Kill somewhere inside the next reconciles: job creation, status writes, rollout.
        deadline = time.monotonic() + chaos.uniform(0.1, 2.5)
        while time.monotonic() < deadline:
            if round_ >= 4:  # from round 5 on, builds and profiles finish while the operator is being killed
                play_engine_jobs(core, namespace, played, build=per_service_build, profile=GPU_PROFILE)
            time.sleep(0.05)  # pacing the chaos loop, not waiting for a condition
        operator.kill()

    with OperatorProcess(crds, namespace=namespace, log_dir=log_dir):

        def all_ready():
            play_engine_jobs(core, namespace, played, build=per_service_build, profile=GPU_PROFILE)
            return all(
                (condition(custom_object(k8s, namespace, n), "Ready") or {}).get("status") == "True"
                for n in SERVICES
            )

        eventually(all_ready, timeout=120, description="all services Ready after the chaos")
        for name in SERVICES:
            selector = f"tailpilot.io/inferenceservice={name}"
            jobs = batch.list_namespaced_job(namespace, label_selector=selector).items
            components = sorted(j.metadata.labels["app.kubernetes.io/component"] for j in jobs)
            assert components == ["engine-build", "engine-profile"], [j.metadata.name for j in jobs]
            assert len(apps.list_namespaced_deployment(namespace, label_selector=selector).items) == 1
        # exclusive: true -> no two services' Triton pods share a node.
        nodes: dict[str, str] = {}
        for pod in core.list_namespaced_pod(
            namespace, label_selector="app.kubernetes.io/component=inference-server"
        ).items:
            owner = pod.metadata.labels["tailpilot.io/inferenceservice"]
            assert nodes.setdefault(pod.spec.node_name, owner) == owner, (pod.spec.node_name, nodes)
        assert len(nodes) == len(SERVICES), nodes
