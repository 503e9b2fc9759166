"""`kubectl scale inferenceservice/NAME` against the real operator process: applied within one control
period, with autoscaling on (a one-off nudge the autoscaler continues from) and off (the count).

The autoscaler runs every `CONTROL_PERIOD_S` against a Prometheus URL nothing listens on, so each
of its decisions is a MetricsMissing hold at the count in force: its metrics page shows the count
it started from (`tailpilot_target_replicas`) and how many decisions it made. A later decision of
the autoscaler is written the way the autoscaler writes one (status.replicas, status subresource).
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from kubernetes import client

from tailpilot.api import constants as c
from tailpilot_e2e.cluster import LocalCluster
from tailpilot_e2e.operator_harness import (
    OperatorProcess,
    condition,
    custom_object,
    free_port,
    play_build,
    play_profile,
    running_build_pod,
)
from tailpilot_e2e.wait import eventually

from .conftest import GPU_PROFILE, gpu_build_result

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

CONTROL_PERIOD_S = 10.0


class Operator:
    """The operator process with a short control period and its metrics page."""

    def __init__(self, cluster: LocalCluster, namespace: str, log_dir: Path) -> None:
        self.metrics_port = free_port()
        self.namespace = namespace
        self.process = OperatorProcess(
            cluster,
            namespace=namespace,
            log_dir=log_dir,
            extra_args=[
                "--control-period-seconds",
                str(CONTROL_PERIOD_S),
                "--prometheus-url",
                f"http://127.0.0.1:{free_port()}",  # nothing listens: every decision holds
                "--metrics-port",
                str(self.metrics_port),
                "--bind-address",
                "127.0.0.1",
            ],
        )

    def metric(self, name: str, service: str) -> float:
        """The sum of a metric's samples for one service (0 when it has none yet)."""
        text = httpx.get(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5).text
        labels = (
            rf'\{{[^}}]*namespace="{re.escape(self.namespace)}"[^}}]*service="{re.escape(service)}"[^}}]*\}}'
        )
        return sum(float(v) for v in re.findall(rf"^{name}{labels} ([0-9.e+-]+)$", text, re.M))

    def decisions(self, service: str) -> float:
        return self.metric("tailpilot_decisions_total", service)


def create_service(k8s: client.ApiClient, namespace: str, example: Any, autoscaling: dict[str, Any]) -> str:
    isvc = example("gpu-tensorrt-h100.yaml", namespace=namespace, name="scaled")
    isvc["spec"]["runtime"]["gpu"]["exclusive"] = False  # a few replicas on the simulated H100 nodes
    isvc["spec"]["autoscaling"] = {"minReplicas": 1, "maxReplicas": 5, **autoscaling}
    client.CustomObjectsApi(k8s).create_namespaced_custom_object(
        "tailpilot.io", "v1alpha1", namespace, "inferenceservices", isvc
    )
    core = client.CoreV1Api(k8s)
    play_build(core, running_build_pod(core, namespace), result=gpu_build_result())
    play_profile(core, namespace, GPU_PROFILE)
    return str(isvc["metadata"]["name"])


def at(k8s: client.ApiClient, namespace: str, name: str, replicas: int) -> dict[str, Any] | None:
    """The object when its Deployment and status.replicas are both at `replicas`, spec seen."""
    obj = custom_object(k8s, namespace, name)
    status = obj.get("status") or {}
    deployment = client.AppsV1Api(k8s).read_namespaced_deployment(name, namespace)
    seen = status.get("observedGeneration") == obj["metadata"]["generation"]
    if seen and deployment.spec.replicas == replicas and status.get("replicas") == replicas:
        return obj
    return None


def kubectl_scale(
    cluster: LocalCluster, k8s: client.ApiClient, namespace: str, name: str, replicas: int
) -> dict:
    """`kubectl scale`, then the object once the Deployment and the status are at the new count.

    Timed from the command's return: it must take effect within one control period.
    """
    cluster.kubectl("scale", f"inferenceservice/{name}", f"--replicas={replicas}", "-n", namespace)
    started = time.monotonic()
    obj = eventually(
        lambda: at(k8s, namespace, name, replicas),
        timeout=CONTROL_PERIOD_S,
        interval=0.1,
        description=f"kubectl scale --replicas={replicas} in force",
    )
    assert time.monotonic() - started <= CONTROL_PERIOD_S
    assert obj["spec"]["replicas"] == replicas
    assert obj["status"]["appliedSpecReplicas"] == replicas
    return obj


def patch_spec(k8s: client.ApiClient, namespace: str, name: str, spec: dict[str, Any]) -> None:
    client.CustomObjectsApi(k8s).patch_namespaced_custom_object(
        "tailpilot.io", "v1alpha1", namespace, "inferenceservices", name, {"spec": spec}
    )


def write_autoscaler_replicas(k8s: client.ApiClient, namespace: str, name: str, replicas: int) -> None:
    """A decision of the autoscaler, written as it writes one: status.replicas, status subresource."""
    client.CustomObjectsApi(k8s).patch_namespaced_custom_object_status(
        "tailpilot.io", "v1alpha1", namespace, "inferenceservices", name, {"status": {"replicas": replicas}}
    )


def scaling_active(k8s: client.ApiClient, namespace: str, name: str) -> bool:
    cond = condition(custom_object(k8s, namespace, name), "ScalingActive")
    return bool(cond and cond["status"] == "True")


def test_kubectl_scale_nudges_the_autoscaler_which_continues_from_there(
    k8s, crds, namespace, engine_store, example
):
    log_dir = crds.paths.root / "logs"
    operator = Operator(crds, namespace, log_dir)
    with operator.process:
        name = create_service(k8s, namespace, example, {})
        eventually(lambda: at(k8s, namespace, name, 1), timeout=90, description="Ready at 1 replica")
        eventually(
            lambda: scaling_active(k8s, namespace, name),
            timeout=3 * CONTROL_PERIOD_S,
            description="the autoscaler deciding",
        )

        obj = kubectl_scale(crds, k8s, namespace, name, 3)
        assert obj["spec"]["autoscaling"]["enabled"] is True
        # The autoscaler's next decisions start from 3 (and hold there: no metrics), never undo it.
        before = operator.decisions(name)
        eventually(
            lambda: operator.decisions(name) >= before + 2,
            timeout=3 * CONTROL_PERIOD_S,
            description="two more decisions",
        )
        assert operator.metric("tailpilot_target_replicas", name) == 3
        assert at(k8s, namespace, name, 3)

        # The autoscaler later decides 2: the stale spec.replicas (3) does not override it.
        write_autoscaler_replicas(k8s, namespace, name, 2)
        obj = eventually(
            lambda: at(k8s, namespace, name, 2),
            timeout=CONTROL_PERIOD_S,
            description="the autoscaler's 2 in force",
        )
        assert (obj["spec"]["replicas"], obj["status"]["appliedSpecReplicas"]) == (3, 3)

    # A restarted operator reads the same: still the autoscaler's 2, not spec.replicas.
    restarted = Operator(crds, namespace, log_dir)
    with restarted.process:
        eventually(
            lambda: restarted.decisions(name) >= 2,
            timeout=4 * CONTROL_PERIOD_S,
            description="decisions of the restarted operator",
        )
        assert restarted.metric("tailpilot_target_replicas", name) == 2
        assert at(k8s, namespace, name, 2)
        # A new nudge is applied again.
        kubectl_scale(crds, k8s, namespace, name, 4)


def test_kubectl_scale_sets_the_count_with_autoscaling_off_and_across_toggles(
    k8s, crds, namespace, engine_store, example
):
    operator = Operator(crds, namespace, crds.paths.root / "logs")
    with operator.process:
        name = create_service(k8s, namespace, example, {"enabled": False})
        eventually(lambda: at(k8s, namespace, name, 1), timeout=90, description="Ready at minReplicas")

        kubectl_scale(crds, k8s, namespace, name, 3)

        # Autoscaling on: it starts from the count applied while off.
        patch_spec(k8s, namespace, name, {"autoscaling": {"enabled": True}})
        eventually(
            lambda: scaling_active(k8s, namespace, name),
            timeout=3 * CONTROL_PERIOD_S,
            description="the autoscaler deciding",
        )
        assert operator.metric("tailpilot_target_replicas", name) == 3
        assert at(k8s, namespace, name, 3)

        kubectl_scale(crds, k8s, namespace, name, 2)

        # Off again: spec.replicas (2) is the count.
        patch_spec(k8s, namespace, name, {"autoscaling": {"enabled": False}})
        obj = eventually(
            lambda: at(k8s, namespace, name, 2),
            timeout=CONTROL_PERIOD_S,
            description="the count kept when autoscaling is turned off",
        )
        assert (condition(obj, "ScalingActive") or {}).get("reason") == c.REASON_AUTOSCALING_DISABLED
        kubectl_scale(crds, k8s, namespace, name, 5)
