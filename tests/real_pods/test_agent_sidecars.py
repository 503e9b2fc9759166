"""Native sidecars (init containers with restartPolicy Always) on the node agent, as real processes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from tailpilot_e2e.agent_process import Run, container_dir, running_processes, runs_of
from tailpilot_e2e.cluster import LocalCluster
from tailpilot_e2e.wait import eventually

pytestmark = pytest.mark.cluster

#: A mapped image whose other commands (sh, sleep, python3) come from this machine.
IMAGE = "ghcr.io/tailpilot/tailpilot-builder:0.1.0"
POD_IP_ENV = [{"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}]
ANSWER = "answer from the sidecar"


def container(name: str, command: list[str], **fields: Any) -> dict[str, Any]:
    return {"name": name, "image": IMAGE, "command": command, **fields}


def http_server(name: str, *, delay_s: float = 0, **fields: Any) -> dict[str, Any]:
    """A sidecar serving the `shared` volume over HTTP on the pod IP, port 8080 (named `http`)."""
    serve = "exec python3 -m http.server 8080 --bind $(POD_IP) --directory /shared"
    script = f"sleep {delay_s:g}; {serve}" if delay_s else serve
    return container(
        name,
        ["sh", "-c", script],
        restartPolicy="Always",
        env=POD_IP_ENV,
        ports=[{"name": "http", "containerPort": 8080}],
        volumeMounts=[{"name": "shared", "mountPath": "/shared"}],
        **fields,
    )


def pod_spec(init: list[dict[str, Any]], main: list[dict[str, Any]], **spec: Any) -> dict[str, Any]:
    return {
        "automountServiceAccountToken": False,
        "volumes": [{"name": "shared", "emptyDir": {}}],
        "initContainers": init,
        "containers": main,
        **spec,
    }


def status_of(statuses: list[client.V1ContainerStatus] | None, name: str) -> client.V1ContainerStatus:
    return next(s for s in statuses or [] if s.name == name)


def conditions(p: client.V1Pod) -> dict[str, str]:
    return {c.type: c.status for c in p.status.conditions or []}


def gone(core: client.CoreV1Api, ns: str, name: str) -> bool:
    try:
        core.read_namespaced_pod(name, ns)
    except ApiException as error:
        return error.status == 404
    return False


def is_gone(pid: int) -> bool:
    """The process no longer runs (absent, or a zombie waiting for its parent)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def test_a_job_with_a_sidecar_completes_and_the_sidecar_is_stopped(
    real_cluster: LocalCluster, real_api: client.ApiClient, real_namespace: str
) -> None:
    core, batch = client.CoreV1Api(real_api), client.BatchV1Api(real_api)
    ns = real_namespace
    # The profile Job's shape: a regular init container, a sidecar server with a startup probe,
    # then the container that asks the sidecar at $(POD_IP) and reports the answer. The server
    # starts listening a second after its process starts: a container started as soon as the
    # sidecar's process runs (not once its startup probe passed) would find nothing listening.
    fetch = (
        "import sys, urllib.request; "
        "answer = urllib.request.urlopen(sys.argv[1], timeout=5).read().decode(); "
        "open('/dev/termination-log', 'w').write(answer)"
    )
    probe = {"httpGet": {"path": "/answer.txt", "port": "http"}, "periodSeconds": 1}
    template = pod_spec(
        init=[
            container(
                "setup",
                ["sh", "-c", f"printf '{ANSWER}' > /shared/answer.txt"],
                volumeMounts=[{"name": "shared", "mountPath": "/shared"}],
            ),
            http_server(
                "server", delay_s=1, startupProbe={**probe, "failureThreshold": 30}, readinessProbe=probe
            ),
        ],
        main=[
            container(
                "main",
                ["python3", "-c", fetch, "http://$(POD_IP):8080/answer.txt"],
                env=POD_IP_ENV,
            )
        ],
        restartPolicy="Never",
        terminationGracePeriodSeconds=5,
    )
    batch.create_namespaced_job(
        ns,
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": "with-sidecar"},
            "spec": {"backoffLimit": 0, "template": {"spec": template}},
        },
    )

    def finished() -> client.V1Job | None:
        job = batch.read_namespaced_job("with-sidecar", ns)
        done = {c.type for c in job.status.conditions or [] if c.status == "True"}
        assert "Failed" not in done, job.status.conditions
        return job if "Complete" in done else None

    eventually(finished, timeout=60, description="the Job completes")
    (done,) = core.list_namespaced_pod(ns, label_selector="job-name=with-sidecar").items
    assert done.status.phase == "Succeeded"
    main = status_of(done.status.container_statuses, "main").state.terminated
    assert (main.exit_code, main.message) == (0, ANSWER)
    server = status_of(done.status.init_container_statuses, "server")
    # Stopped by the agent once the container had ended (SIGTERM: 143), never restarted.
    assert server.state.terminated is not None and server.state.terminated.exit_code == 143
    assert (server.restart_count, server.ready) == (0, False)
    runs = runs_of(
        container_dir(real_cluster.agent_state_dir / "pods" / done.metadata.uid, "server", init=True)
    )
    pids = [int((Run(r).child() or {})["pid"]) for r in runs]
    assert len(pids) == 1
    assert Run(runs[0]).alive_pid() is None and is_gone(pids[0])


def test_a_sidecar_restarts_under_restart_policy_never_and_its_readiness_gates_the_pods(
    real_cluster: LocalCluster, real_api: client.ApiClient, real_namespace: str
) -> None:
    core = client.CoreV1Api(real_api)
    ns = real_namespace
    # A sidecar that exits after two seconds: restarted (its own Always), the pod's Never aside.
    core.create_namespaced_pod(
        ns,
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "flaky"},
            "spec": pod_spec(
                init=[container("flaky", ["sh", "-c", "sleep 2; exit 3"], restartPolicy="Always")],
                main=[container("main", ["sh", "-c", "exec sleep 300"])],
                restartPolicy="Never",
                terminationGracePeriodSeconds=1,
            ),
        },
    )
    # A sidecar ready only once /shared/ready exists (the test writes it into the volume).
    core.create_namespaced_pod(
        ns,
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "gated"},
            "spec": pod_spec(
                init=[
                    http_server(
                        "server",
                        readinessProbe={"httpGet": {"path": "/ready", "port": "http"}, "periodSeconds": 1},
                    )
                ],
                main=[container("main", ["sh", "-c", "exec sleep 300"])],
                restartPolicy="Never",
                terminationGracePeriodSeconds=1,
            ),
        },
    )

    def restarted() -> client.V1Pod | None:
        p = core.read_namespaced_pod("flaky", ns)
        return p if status_of(p.status.init_container_statuses, "flaky").restart_count >= 2 else None

    flaky = eventually(restarted, timeout=45, description="the sidecar restarted twice")
    assert flaky.status.phase == "Running"
    main = status_of(flaky.status.container_statuses, "main")
    assert main.restart_count == 0 and main.state.running is not None
    assert status_of(flaky.status.init_container_statuses, "flaky").last_state.terminated.exit_code == 3

    def main_ready() -> client.V1Pod | None:
        p = core.read_namespaced_pod("gated", ns)
        return (
            p
            if p.status.container_statuses and status_of(p.status.container_statuses, "main").ready
            else None
        )

    gated = eventually(main_ready, timeout=30, description="the container ready")
    server = status_of(gated.status.init_container_statuses, "server")
    assert server.started and server.state.running is not None and not server.ready
    assert (conditions(gated)["Initialized"], conditions(gated)["Ready"]) == ("True", "False")
    volume = real_cluster.agent_state_dir / "pods" / gated.metadata.uid / "volumes" / "shared"
    (volume / "ready").write_text("ok")
    eventually(
        lambda: conditions(core.read_namespaced_pod("gated", ns))["Ready"] == "True",
        timeout=20,
        description="Ready once the sidecar is",
    )


def test_the_agents_restart_adopts_a_sidecar_and_deletion_stops_it(
    real_cluster: LocalCluster, real_api: client.ApiClient, real_namespace: str
) -> None:
    core = client.CoreV1Api(real_api)
    ns = real_namespace
    core.create_namespaced_pod(
        ns,
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "pair"},
            "spec": pod_spec(
                init=[container("side", ["sh", "-c", "exec sleep 300"], restartPolicy="Always")],
                main=[container("main", ["sh", "-c", "exec sleep 300"])],
                terminationGracePeriodSeconds=2,
            ),
        },
    )
    # Adoption must carry what the old agent reported, so the pod is first seen Ready (not merely
    # Running: the status that says Running can precede the one that says Ready).
    uid = eventually(
        lambda: (
            (p := core.read_namespaced_pod("pair", ns)).status.phase == "Running"
            and conditions(p).get("Ready") == "True"
            and p.metadata.uid
        ),
        timeout=30,
        description="running and Ready",
    )
    pids = eventually(
        lambda: (
            (found := running_processes(real_cluster.agent_state_dir, uid)).keys()
            == {f"{uid}/side", f"{uid}/main"}
            and found
        ),
        timeout=10,
        description="both processes",
    )
    agent_log = real_cluster.paths.log("node-agent")
    logged_before = agent_log.stat().st_size
    real_cluster.kill_node_agent()
    real_cluster.start_node_agent()
    # The new agent says which processes it adopted, and it adopted exactly the running ones.
    expected = {f"adopted {ns}/pair container {key.split('/')[1]} (pid {pid})" for key, pid in pids.items()}
    eventually(
        lambda: all(
            line in agent_log.read_bytes()[logged_before:].decode(errors="replace") for line in expected
        ),
        timeout=30,
        description="both containers adopted",
    )
    pair = core.read_namespaced_pod("pair", ns)
    assert running_processes(real_cluster.agent_state_dir, uid) == pids
    side = status_of(pair.status.init_container_statuses, "side")
    main = status_of(pair.status.container_statuses, "main")
    assert (side.restart_count, side.started, side.ready, main.restart_count) == (0, True, True, 0)
    assert conditions(pair)["Ready"] == "True"
    core.delete_namespaced_pod("pair", ns)
    eventually(lambda: gone(core, ns, "pair"), timeout=20, description="deleted")
    assert all(is_gone(pid) for pid in pids.values())
