"""Two operator processes elect one leader on a real Lease: only it acts, and the other takes over.

Each process labels the pods of the build Jobs it creates with its identity, so the API server
shows which process acted on a service. The election runs at the chart's defaults (15/10/2 s).
"""

from __future__ import annotations

import time

import pytest
from kubernetes import client

from tailpilot_e2e.failover import (
    actor_of,
    create_service,
    elected_operator,
    failover_round,
    lease_holder,
    observed_holder,
    the_leader,
)
from tailpilot_e2e.operator_harness import (
    condition,
    custom_object,
    play_build,
    play_profile,
    running_build_pod,
)
from tailpilot_e2e.wait import eventually

from .conftest import GPU_PROFILE, gpu_build_result

pytestmark = [pytest.mark.cluster, pytest.mark.slow]


def test_one_leader_acts_and_the_standby_takes_over_after_a_sigkill(
    k8s, crds, namespace, engine_store, tmp_path
):
    core = client.CoreV1Api(k8s)
    operators = {
        identity: elected_operator(crds, namespace=namespace, identity=identity, log_dir=tmp_path)
        for identity in ("op-a", "op-b")
    }
    try:
        for op in operators.values():
            op.start()  # both alive (/healthz), one of them leading
        leader = the_leader(list(operators.values()))
        leader_id = next(i for i, op in operators.items() if op is leader)
        standby_id = next(i for i in operators if i != leader_id)
        assert lease_holder(k8s, namespace) == (leader_id, 0)
        assert not operators[standby_id].ready()  # not Ready: no Service endpoint, no webhook traffic

        # Only the leader acts: the service's build Job is its, and the service converges.
        create_service(k8s, namespace, "svc-1")
        play_build(core, running_build_pod(core, namespace), result=gpu_build_result())
        play_profile(core, namespace, GPU_PROFILE)

        def ready() -> bool:
            cond = condition(custom_object(k8s, namespace, "svc-1"), "Ready")
            return bool(cond and cond["status"] == "True")

        eventually(ready, timeout=90, description="svc-1 Ready under the leader")
        assert actor_of(k8s, namespace, "svc-1") == leader_id
        assert "svc-1" not in operators[standby_id].log_file.read_text()

        # SIGKILL the leader (no hand-over): the standby takes the lease once it expired, and acts.
        result = failover_round(k8s, namespace, operators, service="svc-2", mode="kill")
        assert (result.stopped, result.took_over) == (leader_id, standby_id)
        assert lease_holder(k8s, namespace) == (standby_id, 1)
        # Not before the lease ran out on the standby's clock (15 s from the last renewal it saw,
        # at most one retry period before the kill), and not much later either.
        assert 15 - 2.5 <= result.seconds <= 15 + 2.5 + 20, result
        eventually(operators[standby_id].ready, timeout=30, description="the new leader Ready")

        # The killed process comes back as the standby: it reads the lease held and does not lead.
        back = operators[leader_id].start()
        eventually(lambda: observed_holder(back) == standby_id, timeout=30, description="lease read")
        assert not back.ready()
        assert lease_holder(k8s, namespace) == (standby_id, 1)
    finally:
        for op in operators.values():
            op.stop()


def test_a_clean_stop_hands_the_lease_over_at_once(k8s, crds, namespace, engine_store, tmp_path):
    operators = {
        identity: elected_operator(crds, namespace=namespace, identity=identity, log_dir=tmp_path)
        for identity in ("op-a", "op-b")
    }
    try:
        for op in operators.values():
            op.start()
        result = failover_round(k8s, namespace, operators, service="svc-1", mode="term")
        # Released on SIGTERM: the standby takes it at its next try, not after the lease duration.
        assert result.seconds < 10, result
        # Released (the count kept, as client-go does), then taken: one transition.
        assert lease_holder(k8s, namespace) == (result.took_over, 1)
    finally:
        for op in operators.values():
            op.stop()


def test_a_leader_that_finds_the_lease_taken_exits_at_once(k8s, crds, namespace, engine_store, tmp_path):
    op = elected_operator(crds, namespace=namespace, identity="op-a", log_dir=tmp_path).start()
    try:
        eventually(op.ready, timeout=60, description="op-a leading")
        lease = client.CoordinationV1Api(k8s).read_namespaced_lease("tailpilot-failover", namespace)
        lease.spec.holder_identity = "someone-else"  # as a standby would write it after expiry
        client.CoordinationV1Api(k8s).replace_namespaced_lease("tailpilot-failover", namespace, lease)
        taken = time.monotonic()
        assert op.process is not None
        process = op.process
        eventually(lambda: process.poll() is not None, timeout=15, description="op-a exits")
        assert process.returncode == 1
        # Its next renewal (every 2 s) sees another holder and exits, without waiting the deadline.
        assert time.monotonic() - taken < 2 + 3
        assert "leader election lost" in op.log_file.read_text()
    finally:
        op.stop()
