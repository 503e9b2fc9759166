"""Scale to zero and back on the local cluster: an idle service goes to zero, its Service is routed to
the activator meanwhile, and the activator's wake brings a replica back and the routing with it.

The service's Deployment runs on simulated nodes; its (idle) Triton metrics come from one real Triton
process that a real Prometheus scrapes. The activator is stood in for by a Service with an
EndpointSlice of its own in the test's namespace (what `--activator-service` names): the operator only
reads its ready addresses; the activator's wake is its annotation, written here as it writes it.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from kubernetes import client

from tailpilot.api.autoscaling import BatchingConfig
from tailpilot.builders.triton_server import TritonServer
from tailpilot_e2e.monitoring import LocalPrometheus
from tailpilot_e2e.operator_harness import (
    OperatorProcess,
    custom_object,
    play_build,
    play_profile,
    running_build_pod,
)
from tailpilot_e2e.wait import eventually
from tests.controllers import triton_fixtures
from tests.operator_cluster.test_autoscaling import BASE_MS, ECHO_PROFILE, NAME, echo_result

pytestmark = [pytest.mark.cluster, pytest.mark.triton, pytest.mark.prometheus, pytest.mark.slow]

ACTIVATOR = "fake-activator"
ACTIVATOR_IP = "10.244.9.9"
#: The activator's pod that replaces the first while the service is at zero (a rollout, a drain).
ACTIVATOR_IP_AFTER = "10.244.9.10"


def fake_activator(k8s: client.ApiClient, namespace: str) -> None:
    """A Service and a ready EndpointSlice where the chart's activator would be."""
    client.CoreV1Api(k8s).create_namespaced_service(
        namespace,
        {
            "metadata": {"name": ACTIVATOR},
            "spec": {"ports": [{"name": "http", "port": 8000}, {"name": "grpc", "port": 8001}]},
        },
    )
    client.DiscoveryV1Api(k8s).create_namespaced_endpoint_slice(
        namespace,
        {
            "metadata": {
                "name": f"{ACTIVATOR}-1",
                "labels": {"kubernetes.io/service-name": ACTIVATOR},
            },
            "addressType": "IPv4",
            "endpoints": [{"addresses": [ACTIVATOR_IP], "conditions": {"ready": True}}],
            "ports": [{"name": "http", "port": 8000}, {"name": "grpc", "port": 8001}],
        },
    )


def activator_slice(k8s: client.ApiClient, namespace: str) -> Any:
    slices = client.DiscoveryV1Api(k8s).list_namespaced_endpoint_slice(
        namespace, label_selector=f"kubernetes.io/service-name={NAME}"
    )
    return next((s for s in slices.items if s.metadata.name == f"{NAME}-activator"), None)


def goes_to_zero_behind_the_activator(k8s: client.ApiClient, namespace: str) -> None:
    """No request for the idle window: the autoscaler goes to zero, the activator is routed in."""
    core, apps = client.CoreV1Api(k8s), client.AppsV1Api(k8s)

    def at_zero() -> dict[str, Any] | None:
        obj = custom_object(k8s, namespace, NAME)
        status = obj.get("status") or {}
        return obj if status.get("replicas") == 0 and status.get("scaledToZeroAt") else None

    obj = eventually(at_zero, timeout=120, interval=1, description="scaled to zero")
    assert obj["status"]["lastDecision"]["reason"] == "ScaledToZero"
    eventually(
        lambda: apps.read_namespaced_deployment(NAME, namespace).spec.replicas == 0,
        timeout=30,
        description="the Deployment at zero",
    )
    routed = eventually(
        lambda: activator_slice(k8s, namespace), timeout=30, description="the activator's slice"
    )
    assert [e.addresses for e in routed.endpoints] == [[ACTIVATOR_IP]]
    assert routed.metadata.labels["endpointslice.kubernetes.io/managed-by"] == "operator.tailpilot.io"
    events = core.list_namespaced_event(namespace, field_selector=f"involvedObject.name={NAME}").items
    assert any(e.reason == "ScaledToZero" for e in events), [e.reason for e in events]


def follows_the_activators_pods(k8s: client.ApiClient, namespace: str) -> None:
    """The activator's pod replaced while the service is at zero: the Service's copy follows.

    Nothing of the service changes, so only the operator's watch of the activator's slices makes a
    pass rewrite the copy (without it, clients would be sent to a pod that is draining).
    """
    client.DiscoveryV1Api(k8s).patch_namespaced_endpoint_slice(
        f"{ACTIVATOR}-1",
        namespace,
        {"endpoints": [{"addresses": [ACTIVATOR_IP_AFTER], "conditions": {"ready": True}}]},
    )

    def follows() -> bool:
        routed = activator_slice(k8s, namespace)
        return routed is not None and [e.addresses for e in routed.endpoints] == [[ACTIVATOR_IP_AFTER]]

    eventually(follows, timeout=15, interval=0.5, description="the copy follows the activator's new pod")


def wakes_and_routes_back_to_the_pods(k8s: client.ApiClient, namespace: str) -> None:
    """The activator's wake: one replica at once, and once it is ready the pods serve again."""
    core, apps = client.CoreV1Api(k8s), client.AppsV1Api(k8s)
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    client.CustomObjectsApi(k8s).patch_namespaced_custom_object(
        "tailpilot.io",
        "v1alpha1",
        namespace,
        "inferenceservices",
        NAME,
        {"metadata": {"annotations": {"tailpilot.io/wake-requested-at": now}}},
    )
    eventually(
        lambda: (apps.read_namespaced_deployment(NAME, namespace).status.ready_replicas or 0) >= 1,
        timeout=60,
        description="a replica ready after the wake",
    )
    eventually(
        lambda: activator_slice(k8s, namespace) is None,
        timeout=30,
        description="the activator's slice gone once a replica is ready",
    )
    woken = custom_object(k8s, namespace, NAME)["status"]
    assert woken["replicas"] >= 1 and not woken.get("scaledToZeroAt"), woken
    events = core.list_namespaced_event(namespace, field_selector=f"involvedObject.name={NAME}").items
    assert any(e.reason == "Woken" for e in events), [e.reason for e in events]


def test_an_idle_service_goes_to_zero_behind_the_activator_and_a_wake_brings_it_back(
    k8s, crds, namespace, engine_store, tmp_path
):
    core = client.CoreV1Api(k8s)
    repo = triton_fixtures.write_repository(
        tmp_path / "repo", batching=BatchingConfig(max_batch_size=1), base_ms=BASE_MS
    )
    fake_activator(k8s, namespace)
    with TritonServer(repo, work_dir=tmp_path / "triton") as triton:
        prometheus = LocalPrometheus(tmp_path / "prometheus").start()
        try:
            prometheus.set_targets(
                [
                    (
                        triton.metrics_url.split("//")[1].split("/")[0],
                        {"namespace": namespace, "inferenceservice": NAME, "pod": f"{NAME}-local-0"},
                    )
                ]
            )
            args = [
                "--prometheus-url",
                prometheus.url,
                "--control-period-seconds",
                "3",
                "--activator-service",
                f"{namespace}/{ACTIVATOR}",
            ]
            with OperatorProcess(crds, namespace=namespace, log_dir=tmp_path, extra_args=args):
                spec = triton_fixtures.echo_service(
                    namespace,
                    slo={"p99LatencyMs": 100, "evaluationWindowSeconds": 10},
                    autoscaling={"minReplicas": 0, "maxReplicas": 2, "idleBeforeZeroSeconds": 30},
                )
                client.CustomObjectsApi(k8s).create_namespaced_custom_object(
                    "tailpilot.io", "v1alpha1", namespace, "inferenceservices", spec
                )
                play_build(core, running_build_pod(core, namespace), result=echo_result())
                play_profile(core, namespace, ECHO_PROFILE)
                # The private Service the activator forwards to exists from the start.
                pods = eventually(
                    lambda: next(
                        (
                            s
                            for s in core.list_namespaced_service(namespace).items
                            if s.metadata.name == f"{NAME}-pods"
                        ),
                        None,
                    ),
                    timeout=60,
                    description="the <name>-pods Service",
                )
                assert pods.spec.cluster_ip == "None"

                goes_to_zero_behind_the_activator(k8s, namespace)
                follows_the_activators_pods(k8s, namespace)
                wakes_and_routes_back_to_the_pods(k8s, namespace)
        finally:
            prometheus.stop()
