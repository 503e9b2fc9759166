"""Operator failover on the local cluster: two elected operator processes, the leader killed.

    python -m tailpilot_e2e.failover [--kills 3] [--mode kill|term]

What one round measures: the leader is stopped (SIGKILL, as a crashed process or a lost node; or
SIGTERM, as a rolling update or a drain) and at that moment a new InferenceService is created;
the figure is the time until the standby, now leader, has created that service's build Job (its
first write for it: the standby acting, not only holding the lease). The killed process is
started again as the new standby before the next round, so every round starts from one leader
and one standby. Each process labels its build Jobs' pods with its identity
(`--build-pod-label tailpilot.io/test-operator=ID`), so the API server shows who acted.

The election runs at the chart's defaults (lease 15 s, renew deadline 10 s, retry 2 s). Rounds
are bounded (at most 10, each at most 90 s).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client

from tailpilot_e2e.cluster import LocalCluster
from tailpilot_e2e.config import REPO_ROOT
from tailpilot_e2e.kube import api_client, temporary_namespace
from tailpilot_e2e.operator_harness import OperatorProcess, create_engine_store, install_crds
from tailpilot_e2e.wait import eventually

#: The label each test operator puts on the pods of the Jobs it creates: who acted.
ACTOR_LABEL = "tailpilot.io/test-operator"
LEASE = "tailpilot-failover"
EXAMPLE = REPO_ROOT / "examples" / "gpu-tensorrt-h100.yaml"


def elected_operator(
    cluster: LocalCluster,
    *,
    namespace: str,
    identity: str,
    log_dir: Path,
    kubeconfig: Path | None = None,
    lease: str = LEASE,
) -> OperatorProcess:
    """An operator process (not started) electing its leader on `namespace/lease` as `identity`."""
    return OperatorProcess(
        cluster,
        namespace=namespace,
        log_dir=log_dir / identity,
        kubeconfig=kubeconfig,
        extra_args=[
            "--leader-election",
            "--leader-election-namespace",
            namespace,
            "--leader-election-lease",
            lease,
            "--leader-election-identity",
            identity,
            "--build-pod-label",
            f"{ACTOR_LABEL}={identity}",
        ],
    )


def lease_holder(api: client.ApiClient, namespace: str, lease: str = LEASE) -> tuple[str, int]:
    """(holderIdentity, leaseTransitions) of the Lease as the API server has it."""
    spec = client.CoordinationV1Api(api).read_namespaced_lease(lease, namespace).spec
    return spec.holder_identity or "", spec.lease_transitions or 0


def observed_holder(operator: OperatorProcess) -> str:
    """The holder an elected operator last read (its `/healthz` body; "" before its first read)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{operator.port}/healthz", timeout=1) as response:  # noqa: S310
        return str(response.read().decode())


def actor_of(api: client.ApiClient, namespace: str, service: str) -> str | None:
    """The identity of the operator that created `service`'s build Job (None while there is none)."""
    jobs = client.BatchV1Api(api).list_namespaced_job(
        namespace,
        label_selector=f"tailpilot.io/inferenceservice={service},app.kubernetes.io/component=engine-build",
    )
    actors = {(job.spec.template.metadata.labels or {}).get(ACTOR_LABEL) for job in jobs.items}
    assert len(actors) <= 1, f"two operators created {service}'s build Jobs: {actors}"
    return actors.pop() if actors else None


def create_service(api: client.ApiClient, namespace: str, name: str) -> None:
    """The GPU example as `name` (its build Job is the operator's first write for it)."""
    obj: dict[str, Any] = yaml.safe_load(EXAMPLE.read_text())
    obj["metadata"] = {"name": name, "namespace": namespace}
    client.CustomObjectsApi(api).create_namespaced_custom_object(
        "tailpilot.io", "v1alpha1", namespace, "inferenceservices", obj
    )


def the_leader(operators: Sequence[OperatorProcess], *, timeout: float = 60) -> OperatorProcess:
    """The one process that is Ready (leads), once exactly one is."""

    def one() -> OperatorProcess | None:
        ready = [op for op in operators if op.ready()]
        return ready[0] if len(ready) == 1 else None

    leader: OperatorProcess = eventually(one, timeout=timeout, description="exactly one operator leading")
    return leader


@dataclass(frozen=True)
class Failover:
    """One round: who led, who took over, and the seconds from the stop to the new leader's write."""

    stopped: str
    took_over: str
    seconds: float


def failover_round(
    api: client.ApiClient,
    namespace: str,
    operators: dict[str, OperatorProcess],
    *,
    service: str,
    mode: str = "kill",
    timeout: float = 90,
) -> Failover:
    """Stop the leader, create `service` at once, and time until another operator created its build Job."""
    leader = the_leader(list(operators.values()))
    stopped = next(identity for identity, op in operators.items() if op is leader)
    started = time.monotonic()
    if mode == "kill":
        leader.kill()
    else:
        leader.stop()  # SIGTERM: kopf stops its handlers, the lease is released
    create_service(api, namespace, service)
    actor = eventually(
        lambda: actor_of(api, namespace, service), timeout=timeout, description=f"{service}'s build Job"
    )
    seconds = time.monotonic() - started
    assert actor != stopped, f"{service} was acted on by the stopped operator {stopped}"
    return Failover(stopped=stopped, took_over=actor, seconds=seconds)


@contextmanager
def _bench_namespace(api: client.ApiClient) -> Iterator[str]:
    with temporary_namespace(client.CoreV1Api(api), f"failover-bench-{int(time.time())}") as name:
        yield name


def main(argv: Sequence[str] | None = None) -> int:
    """Measure failover `--kills` times and print each round and the summary."""
    parser = argparse.ArgumentParser(prog="tailpilot_e2e.failover", description=__doc__.split("\n\n")[0])
    parser.add_argument("--kills", type=int, default=3, help="rounds (1-10)")
    parser.add_argument(
        "--mode", choices=("kill", "term"), default="kill", help="SIGKILL or SIGTERM the leader"
    )
    args = parser.parse_args(argv)
    if not 1 <= args.kills <= 10:
        parser.error("--kills is 1 to 10")
    cluster = LocalCluster()
    started_here = cluster.up()
    api = api_client(cluster.paths.kubeconfig)
    results: list[Failover] = []
    try:
        install_crds(cluster)
        with _bench_namespace(api) as namespace, ExitStack() as stack:
            log_dir = cluster.paths.root / "logs" / namespace
            create_engine_store(client.CoreV1Api(api), namespace, host_path=log_dir / "engines")
            operators = {
                identity: elected_operator(cluster, namespace=namespace, identity=identity, log_dir=log_dir)
                for identity in ("op-a", "op-b")
            }
            for op in operators.values():
                stack.callback(op.stop)
                op.start()
            for round_ in range(args.kills):
                result = failover_round(api, namespace, operators, service=f"svc-{round_}", mode=args.mode)
                results.append(result)
                print(
                    f"round {round_ + 1}: {args.mode} {result.stopped} -> {result.took_over} "
                    f"acted after {result.seconds:.1f} s",
                    flush=True,
                )
                operators[result.stopped].start()  # back as the standby
    finally:
        api.close()
        if started_here:
            cluster.down()
    figures = [r.seconds for r in results]
    print(
        f"\nfailover ({args.mode}, lease 15 s / renew 10 s / retry 2 s), {len(figures)} rounds: "
        f"median {statistics.median(figures):.1f} s, min {min(figures):.1f} s, max {max(figures):.1f} s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
