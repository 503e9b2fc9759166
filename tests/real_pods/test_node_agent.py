"""The node agent runs pods as real processes: env, volumes, probes, restarts, deletion, its own restart."""

from __future__ import annotations

import base64
import time
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from tailpilot_e2e.agent_cgroups import CpuCgroups
from tailpilot_e2e.agent_process import running_processes
from tailpilot_e2e.cluster import LocalCluster
from tailpilot_e2e.wait import eventually

pytestmark = pytest.mark.cluster

#: A mapped image whose other commands (sh, sleep, python3) come from this machine.
IMAGE = "ghcr.io/tailpilot/tailpilot-builder:0.1.0"


def pod(name: str, script: str, **spec: Any) -> dict[str, Any]:
    container = {"name": "main", "image": IMAGE, "command": ["sh", "-c", script]}
    container |= spec.pop("container", {})
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {"automountServiceAccountToken": False, "containers": [container], **spec},
    }


def read(core: client.CoreV1Api, ns: str, name: str) -> client.V1Pod:
    return core.read_namespaced_pod(name, ns)


def main_status(p: client.V1Pod) -> client.V1ContainerStatus | None:
    return (p.status.container_statuses or [None])[0]


def gone(core: client.CoreV1Api, ns: str, name: str) -> bool:
    try:
        core.read_namespaced_pod(name, ns)
    except ApiException as error:
        return error.status == 404
    return False


def test_a_pod_runs_with_its_ip_env_volumes_and_termination_message(
    real_cluster: LocalCluster, real_api: client.ApiClient, real_namespace: str, tmp_path: Path
) -> None:
    core = client.CoreV1Api(real_api)
    ns = real_namespace
    core.create_namespaced_config_map(
        ns, client.V1ConfigMap(metadata=client.V1ObjectMeta(name="cfg"), data={"greeting": "hello"})
    )
    core.create_namespaced_secret(
        ns,
        client.V1Secret(
            metadata=client.V1ObjectMeta(name="sec"), data={"token": base64.b64encode(b"s3cret").decode()}
        ),
    )
    store = tmp_path / "pv"
    pv_name = f"data-{ns}"[:63]
    core.create_persistent_volume(
        client.V1PersistentVolume(
            metadata=client.V1ObjectMeta(name=pv_name),
            spec=client.V1PersistentVolumeSpec(
                capacity={"storage": "1Gi"},
                access_modes=["ReadWriteOnce"],
                storage_class_name="",
                persistent_volume_reclaim_policy="Retain",
                local=client.V1LocalVolumeSource(path=str(store)),
                node_affinity=client.V1VolumeNodeAffinity(
                    required=client.V1NodeSelector(
                        node_selector_terms=[
                            client.V1NodeSelectorTerm(
                                match_expressions=[
                                    client.V1NodeSelectorRequirement(
                                        key="kubernetes.io/hostname", operator="In", values=["local-0"]
                                    )
                                ]
                            )
                        ]
                    )
                ),
                claim_ref=client.V1ObjectReference(namespace=ns, name="data"),
            ),
        )
    )
    core.create_namespaced_persistent_volume_claim(
        ns,
        client.V1PersistentVolumeClaim(
            metadata=client.V1ObjectMeta(name="data"),
            spec=client.V1PersistentVolumeClaimSpec(
                access_modes=["ReadWriteOnce"],
                storage_class_name="",
                volume_name=pv_name,
                resources=client.V1VolumeResourceRequirements(requests={"storage": "1Gi"}),
            ),
        ),
    )
    script = (
        'echo "$MY_IP $GREETING $(cat /etc/cfg/greeting) $(cat /etc/sec/token)" > /data/out.txt; '
        "printf 'all done' > /dev/termination-log"
    )
    manifest = pod(
        "runs",
        script,
        restartPolicy="Never",
        volumes=[
            {"name": "cfg", "configMap": {"name": "cfg"}},
            {"name": "sec", "secret": {"secretName": "sec"}},
            {"name": "data", "persistentVolumeClaim": {"claimName": "data"}},
        ],
        container={
            "env": [
                {"name": "MY_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                {"name": "GREETING", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "greeting"}}},
            ],
            "volumeMounts": [
                {"name": "cfg", "mountPath": "/etc/cfg"},
                {"name": "sec", "mountPath": "/etc/sec"},
                {"name": "data", "mountPath": "/data"},
            ],
        },
    )
    try:
        core.create_namespaced_pod(ns, manifest)
        done = eventually(
            lambda: (p := read(core, ns, "runs")).status.phase == "Succeeded" and p,
            timeout=60,
            description="the pod ran to completion",
        )
        ip = done.status.pod_ip
        assert ip.startswith("10.65."), ip
        assert (store / "out.txt").read_text().split() == [ip, "hello", "hello", "s3cret"]
        terminated = main_status(done).state.terminated
        assert (terminated.exit_code, terminated.reason, terminated.message) == (0, "Completed", "all done")
    finally:
        core.delete_persistent_volume(pv_name)


def test_a_crashing_container_is_restarted_with_back_off_and_counted(
    real_api: client.ApiClient, real_namespace: str
) -> None:
    core = client.CoreV1Api(real_api)
    ns = real_namespace
    core.create_namespaced_pod(
        ns,
        pod(
            "crash", "echo boom >&2; exit 3", container={"terminationMessagePolicy": "FallbackToLogsOnError"}
        ),
    )

    def crash_looping() -> client.V1ContainerStatus | None:
        status = main_status(read(core, ns, "crash"))
        return status if status and status.restart_count >= 2 and status.state.waiting else None

    status = eventually(crash_looping, timeout=60, description="two restarts, then back-off")
    assert status.state.waiting.reason == "CrashLoopBackOff"
    assert status.last_state.terminated.exit_code == 3
    assert status.last_state.terminated.message.strip() == "boom"
    assert read(core, ns, "crash").status.phase == "Running"


def test_an_unmapped_image_waits_like_err_image_pull_and_the_agent_keeps_serving(
    real_cluster: LocalCluster, real_api: client.ApiClient, real_namespace: str
) -> None:
    core = client.CoreV1Api(real_api)
    ns = real_namespace
    bad = pod("unmapped", "sleep 100", container={"image": "docker.io/library/busybox:1.36"})
    core.create_namespaced_pod(ns, bad)
    core.create_namespaced_pod(ns, pod("fine", "exec sleep 100"))
    waiting = eventually(
        lambda: (
            (s := main_status(read(core, ns, "unmapped")))
            and s.state.waiting
            and s.state.waiting.reason in ("ErrImagePull", "ImagePullBackOff")
            and s.state.waiting
        ),
        timeout=30,
        description="the unmapped image waits",
    )
    assert "busybox" in waiting.message and "image table" in waiting.message
    eventually(
        lambda: read(core, ns, "fine").status.phase == "Running",
        timeout=30,
        description="the agent still runs pods",
    )
    assert read(core, ns, "unmapped").status.phase == "Pending"


def test_probes_run_for_real(real_api: client.ApiClient, real_namespace: str) -> None:
    core = client.CoreV1Api(real_api)
    ns = real_namespace
    server = "exec python3 -m http.server 8080 --bind $MY_IP"
    env = [{"name": "MY_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}]
    ready_probe = {"httpGet": {"path": "/", "port": "web"}, "periodSeconds": 1}
    core.create_namespaced_pod(
        ns,
        pod(
            "served",
            server,
            container={
                "env": env,
                "ports": [{"name": "web", "containerPort": 8080}],
                "readinessProbe": ready_probe,
            },
        ),
    )
    dead_probe = {"tcpSocket": {"port": 9}, "periodSeconds": 1, "failureThreshold": 2}
    core.create_namespaced_pod(
        ns,
        pod(
            "unhealthy",
            "exec sleep 100",
            terminationGracePeriodSeconds=1,
            container={"livenessProbe": dead_probe},
        ),
    )
    served = eventually(
        lambda: (p := read(core, ns, "served")) and main_status(p) and main_status(p).ready and p,
        timeout=30,
        description="ready by a real HTTP probe",
    )
    assert {c.type: c.status for c in served.status.conditions}["Ready"] == "True"
    eventually(
        lambda: (s := main_status(read(core, ns, "unhealthy"))) and s.restart_count >= 1,
        timeout=30,
        description="a failing liveness probe restarts the container",
    )


def test_deletion_honours_the_grace_period_then_stops_the_process(
    real_cluster: LocalCluster, real_api: client.ApiClient, real_namespace: str
) -> None:
    core = client.CoreV1Api(real_api)
    ns = real_namespace
    # Ignores SIGTERM: only the SIGKILL after the grace period ends it.
    core.create_namespaced_pod(
        ns, pod("stubborn", "trap '' TERM; while true; do sleep 0.2; done", terminationGracePeriodSeconds=3)
    )
    running = eventually(
        lambda: (p := read(core, ns, "stubborn")).status.phase == "Running" and p,
        timeout=30,
        description="running",
    )
    pid = eventually(
        lambda: running_processes(real_cluster.agent_state_dir, running.metadata.uid).get(
            f"{running.metadata.uid}/main"
        ),
        timeout=10,
        description="the container process",
    )
    core.delete_namespaced_pod("stubborn", ns)
    still_there = read(core, ns, "stubborn")  # terminating, process alive: the grace period runs
    assert still_there.metadata.deletion_timestamp is not None
    assert Path(f"/proc/{pid}").exists()
    eventually(lambda: gone(core, ns, "stubborn"), timeout=20, description="deleted after the grace period")
    assert not Path(f"/proc/{pid}").exists() or _is_zombie(pid)


def test_a_containers_cpu_limit_is_enforced_and_its_cgroup_goes_with_the_pod(
    real_cluster: LocalCluster, real_api: client.ApiClient, real_namespace: str
) -> None:
    core = client.CoreV1Api(real_api)
    ns = real_namespace
    busy = "python3 -c 'while True: pass'"
    core.create_namespaced_pod(
        ns,
        pod(
            "busy",
            f"{busy} & {busy} & wait",
            container={"resources": {"limits": {"cpu": "200m"}}},
            terminationGracePeriodSeconds=1,
        ),
    )
    uid = eventually(
        lambda: (p := read(core, ns, "busy")).status.phase == "Running" and p.metadata.uid,
        timeout=30,
        description="running",
    )
    cgroups = CpuCgroups.of(real_cluster.agent_state_dir)
    eventually(
        lambda: (cgroups.cpu_seconds(uid, "main") or 0) > 0.05, timeout=10, description="CPU time counted"
    )
    before, started = cgroups.cpu_seconds(uid, "main"), time.monotonic()
    time.sleep(2.0)  # the interval the CPU time is measured over, not a synchronization
    after, elapsed = cgroups.cpu_seconds(uid, "main"), time.monotonic() - started
    assert before is not None and after is not None
    # Unlimited, the two busy processes would take both cores; the limit holds them to 0.2.
    assert 0.1 < (after - before) / elapsed < 0.3
    core.delete_namespaced_pod("busy", ns)
    eventually(lambda: gone(core, ns, "busy"), timeout=20, description="deleted")
    eventually(
        lambda: cgroups.cpu_seconds(uid, "main") is None, timeout=10, description="its cgroups removed"
    )


def _is_zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def test_the_agents_restart_adopts_running_processes_and_stops_orphans(
    real_cluster: LocalCluster, real_api: client.ApiClient, real_namespace: str
) -> None:
    core = client.CoreV1Api(real_api)
    ns = real_namespace
    for name in ("keeps", "goes"):
        core.create_namespaced_pod(ns, pod(name, "exec sleep 300"))
    pods = {
        name: eventually(
            lambda n=name: (p := read(core, ns, n)).status.phase == "Running" and p,
            timeout=30,
            description=f"{name} running",
        )
        for name in ("keeps", "goes")
    }
    pids = {
        name: eventually(
            lambda p=p: running_processes(real_cluster.agent_state_dir, p.metadata.uid).get(
                f"{p.metadata.uid}/main"
            ),
            timeout=10,
            description=f"{name}'s process",
        )
        for name, p in pods.items()
    }
    real_cluster.kill_node_agent()
    # While the agent is down: processes keep running; one pod is force-deleted behind its back.
    core.delete_namespaced_pod("goes", ns, grace_period_seconds=0)
    assert all(Path(f"/proc/{pid}").exists() for pid in pids.values())
    real_cluster.start_node_agent()

    eventually(
        lambda: _is_zombie(pids["goes"]) or not Path(f"/proc/{pids['goes']}").exists(),
        timeout=20,
        description="the orphan stopped",
    )
    keeps = read(core, ns, "keeps")
    assert main_status(keeps).restart_count == 0
    assert (
        running_processes(real_cluster.agent_state_dir, keeps.metadata.uid)[f"{keeps.metadata.uid}/main"]
        == pids["keeps"]
    )
    core.delete_namespaced_pod("keeps", ns, grace_period_seconds=1)
    eventually(lambda: gone(core, ns, "keeps"), timeout=20, description="the adopted pod deleted")
    assert _is_zombie(pids["keeps"]) or not Path(f"/proc/{pids['keeps']}").exists()
