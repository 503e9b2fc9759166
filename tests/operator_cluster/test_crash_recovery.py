"""SIGKILL the operator at random points of its builds, rollouts and rebatches; restarts converge.

Ten seeds, each its own namespace and two services (exclusive GPUs: they must land on different
nodes), and three kills a seed, one in each phase:

1. build: the services are new; the operator creates Jobs and writes statuses when it dies;
2. rollout: builds and profiles are finished (played) while it runs; it dies amid the children's
   creation and the status writes;
3. rebatch: once a restarted operator has served both, their specs' batching changes (fixed mode,
   new preferred sizes and queue delay); it dies amid the ConfigMap and status writes.

Each kill lands at a time drawn from the seed: 0.1 to 2.5 s after the operator's liveness answers
(build, rollout), or after the batching change (rebatch). Three kills of ten seeds (30 kill points,
each phase ten times) keep the file under two minutes (6 to 30 s a seed); one seed with ten kills in
a row, which this replaced, hit the build phase most. After the last kill an operator runs to the
end and each seed must converge: every service Ready at its new batching (status and ConfigMap),
without a rebuild, with exactly one of each child and none orphaned
(`children.assert_converged_children`), and no two services on a node.
"""

from __future__ import annotations

import hashlib
import random
import time
from collections.abc import Callable

import pytest
from kubernetes import client

from tailpilot_e2e.operator_harness import OperatorProcess, condition, custom_object, play_engine_jobs
from tailpilot_e2e.wait import eventually

from .children import assert_converged_children
from .conftest import GPU_PROFILE, gpu_build_result

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

SERVICES = ("svc-a", "svc-b")
SEEDS = tuple(20261129 + n for n in range(10))
NEW_BATCHING = {"mode": "fixed", "preferredBatchSizes": [8, 32], "maxQueueDelayMicroseconds": 700}


def per_service_build(pod: client.V1Pod):  # type: ignore[no-untyped-def]
    """A distinct engine per service: a hex digest of its build Job's name, as engine keys are."""
    return gpu_build_result(hashlib.sha256(pod.metadata.labels["job-name"].encode()).hexdigest()[:32])


def rebatched(obj: dict) -> bool:
    batching = (obj.get("status") or {}).get("batching") or {}
    return bool(batching.get("preferredBatchSizes") == [8, 32])


def assert_converged(k8s: client.ApiClient, namespace: str) -> None:
    """One of each child, none orphaned, no rebuild; the new batching on the ConfigMaps; one node each."""
    core = client.CoreV1Api(k8s)
    assert_converged_children(k8s, namespace, list(SERVICES))  # one build and profile: no rebuild
    for name in SERVICES:
        config = core.read_namespaced_config_map(f"{name}-model-config", namespace).data["config.pbtxt"]
        assert "max_queue_delay_microseconds: 700" in config, config
    # exclusive: true -> no two services' Triton pods share a node.
    nodes: dict[str, str] = {}
    for pod in core.list_namespaced_pod(
        namespace, label_selector="app.kubernetes.io/component=inference-server"
    ).items:
        owner = pod.metadata.labels["tailpilot.io/inferenceservice"]
        assert nodes.setdefault(pod.spec.node_name, owner) == owner, (pod.spec.node_name, nodes)
    assert len(nodes) == len(SERVICES), nodes


@pytest.mark.parametrize("seed", SEEDS)
def test_sigkills_during_build_rollout_and_rebatch_converge_without_duplicates(
    seed, k8s, namespace, crds, engine_store, example
):
    core, objects = client.CoreV1Api(k8s), client.CustomObjectsApi(k8s)
    for name in SERVICES:
        objects.create_namespaced_custom_object(
            "tailpilot.io",
            "v1alpha1",
            namespace,
            "inferenceservices",
            example("gpu-tensorrt-h100.yaml", namespace=namespace, name=name),
        )
    chaos = random.Random(seed)  # seeded: the same kill points every run
    log_dir = crds.paths.root / "logs"
    played: set[str] = set()

    def play() -> None:
        play_engine_jobs(core, namespace, played, build=per_service_build, profile=GPU_PROFILE)

    def rebatch() -> None:
        for name in SERVICES:
            objects.patch_namespaced_custom_object(
                "tailpilot.io",
                "v1alpha1",
                namespace,
                "inferenceservices",
                name,
                {"spec": {"batching": NEW_BATCHING}},
            )

    def every_service(check: Callable[[dict], bool]) -> bool:
        return all(check(custom_object(k8s, namespace, n)) for n in SERVICES)

    def ready(obj: dict) -> bool:
        seen = (obj.get("status") or {}).get("observedGeneration") == obj["metadata"]["generation"]
        return seen and (condition(obj, "Ready") or {}).get("status") == "True"

    for phase in ("build", "rollout", "rebatch"):
        operator = OperatorProcess(crds, namespace=namespace, log_dir=log_dir).start()
        try:
            if phase == "rebatch":
                # A rebatch of running services: once this operator served them, the specs change.
                eventually(lambda: (play(), every_service(ready))[1], timeout=90, description="Ready")
                rebatch()
            deadline = time.monotonic() + chaos.uniform(0.1, 2.5)
            while time.monotonic() < deadline:
                if phase != "build":
                    play()  # builds and profiles finish while the operator runs
                time.sleep(0.05)  # pacing the chaos loop, not waiting for a condition
        finally:
            operator.kill()  # the chaos, and no operator left running when a wait fails

    with OperatorProcess(crds, namespace=namespace, log_dir=log_dir):
        eventually(
            lambda: (play(), every_service(lambda o: ready(o) and rebatched(o)))[1],
            timeout=120,
            description=f"seed {seed}: every service Ready at the new batching after the kills",
        )
        assert_converged(k8s, namespace)
