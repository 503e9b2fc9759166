"""The rotation check end to end: real Triton queues, real pods in a real API server, labels flipped.

Three pods of one service run on a simulated node (nothing executes there, and simulated pods
have no network), so a real Triton process on this machine stands in for each: the check's HTTP
client sends a request for a pod's IP to that pod's Triton. Everything else is the operator's own
path: the InferenceService and its profile from the API server, the pods and their labels, the
metrics pages, the rule, the label patches and the Events.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable
from pathlib import Path

import pytest
from kubernetes import client

from tailpilot.api import constants as c
from tailpilot.api.autoscaling import BatchingConfig
from tailpilot.builders.triton_server import TritonServer
from tailpilot.controllers.autoscale.fast_checks import FastChecker
from tailpilot.controllers.core.kubeapi import Kube
from tailpilot.controllers.core.metrics import OperatorMetrics
from tailpilot.controllers.signals.pod_signals import PodSignals
from tailpilot.manifests.meta import selector_labels
from tailpilot_e2e.wait import eventually
from tests.controllers import triton_fixtures

pytestmark = [pytest.mark.cluster, pytest.mark.triton, pytest.mark.slow]

NAME = triton_fixtures.MODEL  # the InferenceService is named after the model
BASE_MS = 50.0  # the echo model sleeps ~50 ms a request: one replica answers ~19 requests/s
PODS = ("echo-a", "echo-b", "echo-c")


def service(namespace: str) -> dict:
    return triton_fixtures.echo_service(
        namespace,
        slo={"p99LatencyMs": 100},
        autoscaling={"minReplicas": 3, "maxReplicas": 3, "backlogRotation": True},
    )


# The engine's profile as the build would record it: ~52 ms a request.
PROFILE = {
    "hardware": "cpu",
    "serviceTime": {"interceptMs": BASE_MS + 2, "perItemMs": 0.3, "jitterCv": 0.1},
    "points": [{"batchSize": 1, "p99Ms": 60.0, "throughputPerS": 19.0}],
}


def pod(name: str) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {**selector_labels(NAME), c.LABEL_ROTATION: c.ROTATION_IN}},
        "spec": {"nodeName": "cpu-0", "containers": [{"name": "triton", "image": "tritonserver"}]},
    }


def rotation_labels(core: client.CoreV1Api, namespace: str) -> dict[str, str]:
    return {
        p.metadata.name: p.metadata.labels.get(c.LABEL_ROTATION)
        for p in core.list_namespaced_pod(namespace).items
    }


async def check_until(
    checker: FastChecker, namespace: str, done: Callable[[frozenset[str]], bool], *, checks: int
) -> frozenset[str]:
    """Run the check once a second until `done` holds of its result, at most `checks` times."""
    held: frozenset[str] = frozenset()
    for _ in range(checks):
        held = (await checker.check(namespace, NAME)).held_out
        if done(held):
            return held
        await asyncio.sleep(1.0)  # the check's own period (3 s in the operator), shortened
    raise AssertionError(f"not reached in {checks} checks; last held: {sorted(held)}")


def test_a_backlogged_pod_leaves_the_service_while_fresh_ones_carry_the_load_then_returns(
    k8s, crds, namespace, tmp_path: Path
) -> None:
    core = client.CoreV1Api(k8s)
    objects = client.CustomObjectsApi(k8s)
    objects.create_namespaced_custom_object(
        "tailpilot.io", "v1alpha1", namespace, "inferenceservices", service(namespace)
    )
    objects.patch_namespaced_custom_object_status(
        "tailpilot.io", "v1alpha1", namespace, "inferenceservices", NAME, {"status": {"profile": PROFILE}}
    )
    for name in PODS:
        core.create_namespaced_pod(namespace, pod(name))
    ips = eventually(
        lambda: (
            (found := {p.metadata.name: p.status.pod_ip for p in core.list_namespaced_pod(namespace).items})
            and all(found.get(n) for n in PODS)
            and found
        ),
        timeout=60,
        description="the three pods Running with IPs on the simulated node",
    )
    repo = triton_fixtures.write_repository(
        tmp_path / "repo", batching=BatchingConfig(max_batch_size=1), base_ms=BASE_MS
    )
    with (
        TritonServer(repo, work_dir=tmp_path / "a") as busy,
        TritonServer(repo, work_dir=tmp_path / "b") as fresh_b,
        TritonServer(repo, work_dir=tmp_path / "c") as fresh_c,
    ):
        routes = {
            ips["echo-a"]: busy.ports.metrics,
            ips["echo-b"]: fresh_b.ports.metrics,
            ips["echo-c"]: fresh_c.ports.metrics,
        }
        metrics = OperatorMetrics()
        # Eight clients keep ~7 requests queued on pod a (~370 ms of waiting, the SLO is 100 ms);
        # b and c are idle and can carry a's ~19 requests/s at 50% of their capacity.
        load = triton_fixtures.BoundedLoad(
            [busy.http_url], workers=8, rate_per_worker=50, max_requests=1500, max_seconds=60
        )

        async def scenario() -> None:
            # Each pod's IP goes to the Triton standing in for that pod.
            signals = PodSignals(url_of=lambda ip: f"http://127.0.0.1:{routes[ip]}/metrics")
            checker = FastChecker(kube=Kube(k8s), signals=signals, metrics=metrics)
            try:
                with load:
                    held = await check_until(checker, namespace, lambda h: bool(h), checks=20)
                    assert held == {"echo-a"}
                    assert rotation_labels(core, namespace) == {
                        "echo-a": c.ROTATION_HELD,
                        "echo-b": c.ROTATION_IN,
                        "echo-c": c.ROTATION_IN,
                    }
                    text = metrics.render().decode()
                    assert re.search(
                        rf'tailpilot_replicas_held_out\{{namespace="{namespace}",service="{NAME}"\}} 1\.0',
                        text,
                    ), text
                # The load is over: a's queue drains and it goes back, the same checker still running.
                await check_until(checker, namespace, lambda h: not h, checks=20)
            finally:
                await checker.close()

        asyncio.run(scenario())
        assert set(rotation_labels(core, namespace).values()) == {c.ROTATION_IN}
    events = core.list_namespaced_event(namespace, field_selector=f"involvedObject.name={NAME}").items
    by_reason = {e.reason: e.message for e in events}
    assert "echo-a out of the Service" in by_reason[c.EVENT_REPLICAS_HELD_OUT], by_reason
    assert "echo-a back in the Service" in by_reason[c.EVENT_REPLICAS_RETURNED], by_reason
    assert not load.result.failures[:1], load.result.failures[:3]
