"""Simulated Job pods complete, fail, or finish with a chosen termination message."""

from __future__ import annotations

import json

import pytest
from kubernetes import client

from tailpilot_e2e.wait import eventually

pytestmark = pytest.mark.cluster


def job(
    name: str, *, annotations: dict[str, str] | None = None, labels: dict[str, str] | None = None
) -> client.V1Job:
    return client.V1Job(
        metadata=client.V1ObjectMeta(name=name),
        spec=client.V1JobSpec(
            backoff_limit=0,
            template=client.V1PodTemplateSpec(
                metadata=client.V1ObjectMeta(annotations=annotations, labels=labels),
                spec=client.V1PodSpec(
                    restart_policy="Never",
                    node_selector={"tailpilot.io/node-pool": "cpu"},
                    containers=[client.V1Container(name="build", image="registry.example/builder:test")],
                ),
            ),
        ),
    )


def job_condition(batch: client.BatchV1Api, namespace: str, name: str, kind: str) -> bool:
    status = batch.read_namespaced_job_status(name, namespace).status
    return any(c.type == kind and c.status == "True" for c in (status.conditions or []))


def test_job_completes(k8s, namespace):
    batch = client.BatchV1Api(k8s)
    batch.create_namespaced_job(namespace, job("ok"))
    eventually(
        lambda: job_condition(batch, namespace, "ok", "Complete"), timeout=60, description="Job Complete"
    )
    assert batch.read_namespaced_job_status("ok", namespace).status.succeeded == 1


def test_job_made_to_fail_ends_failed(k8s, namespace):
    batch, core = client.BatchV1Api(k8s), client.CoreV1Api(k8s)
    batch.create_namespaced_job(namespace, job("bad", annotations={"kwok.tailpilot.io/exit-code": "3"}))
    eventually(lambda: job_condition(batch, namespace, "bad", "Failed"), timeout=60, description="Job Failed")
    (pod,) = core.list_namespaced_pod(namespace, label_selector="job-name=bad").items
    assert pod.status.phase == "Failed"
    assert pod.status.container_statuses[0].state.terminated.exit_code == 3


def test_job_pod_carries_a_chosen_termination_message(k8s, namespace):
    batch, core = client.BatchV1Api(k8s), client.CoreV1Api(k8s)
    message = json.dumps({"outcome": "Succeeded", "engineKey": "abc123", "artifact": "pvc://engines/abc123"})
    batch.create_namespaced_job(
        namespace,
        job(
            "msg",
            annotations={
                "kwok.tailpilot.io/exit-code": "0",
                "kwok.tailpilot.io/termination-message": message,
            },
        ),
    )
    eventually(
        lambda: job_condition(batch, namespace, "msg", "Complete"), timeout=60, description="Job Complete"
    )
    (pod,) = core.list_namespaced_pod(namespace, label_selector="job-name=msg").items
    assert json.loads(pod.status.container_statuses[0].state.terminated.message) == json.loads(message)


def test_awaiting_job_pod_finishes_when_a_result_is_played(k8s, namespace):
    """A pod labelled await-result runs until a test annotates it: how build results are played later."""
    batch, core = client.BatchV1Api(k8s), client.CoreV1Api(k8s)
    batch.create_namespaced_job(namespace, job("wait", labels={"kwok.tailpilot.io/await-result": "true"}))

    def running_pod():
        found = core.list_namespaced_pod(namespace, label_selector="job-name=wait").items
        return found[0] if found and found[0].status.phase == "Running" else None

    pod = eventually(running_pod, timeout=60, description="awaiting pod Running")
    assert not job_condition(batch, namespace, "wait", "Complete")
    core.patch_namespaced_pod(
        pod.metadata.name,
        namespace,
        {
            "metadata": {
                "annotations": {
                    "kwok.tailpilot.io/exit-code": "1",
                    "kwok.tailpilot.io/termination-message": "engine build failed",
                }
            }
        },
    )
    eventually(
        lambda: job_condition(batch, namespace, "wait", "Failed"), timeout=60, description="Job Failed"
    )
    pod = core.read_namespaced_pod(pod.metadata.name, namespace)
    assert pod.status.container_statuses[0].state.terminated.message == "engine build failed"
