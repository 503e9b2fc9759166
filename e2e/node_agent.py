"""The node agent: a kubelet stand-in whose pods really run, as local processes (test and demo harness).

It registers one Node (`local-0`, a CPU inference node), keeps its Lease and
Ready condition fresh, and for every pod bound to it:

- gives the pod its own address (10.65.x.y, host-scoped on `lo`: `host_addresses`) as pod IP, so
  ports never collide and Services list it as an endpoint (a wildcard 0.0.0.0 in a container's args
  and env becomes it), and every container
  KUBERNETES_SERVICE_HOST/PORT naming the API server's own address (no kube-proxy here);
- materializes volumes (emptyDir, ConfigMap, Secret, PVCs bound to local/hostPath PVs)
  under the pod's directory and maps each mountPath onto them (see `agent_pod`); images
  whose programs open absolute paths of their own (the operator's in-cluster token) run in
  a private mount namespace with the volumes bind-mounted there (`agent_mounts`);
- runs init containers in order, then the containers, mapping images to local
  executables through the image table (`agent_images`); an unmapped image waits
  with ErrImagePull/ImagePullBackOff;
- runs native sidecars (init containers with `restartPolicy: Always`): started in
  their place among the init containers (the next one waits until the sidecar is
  started), restarted whenever they exit, stopped in reverse order once the
  containers are done for good (Job pods complete; their phase ignores sidecars);
- runs startup, readiness and liveness probes for real (HTTP, TCP, exec);
- restarts ended containers per restartPolicy with exponential back-off
  (CrashLoopBackOff), reads termination messages from `terminationMessagePath`;
- on deletion sends SIGTERM, waits up to the grace period, SIGKILLs, then
  removes the pod from the API; writes the pod's status (phase, conditions,
  container states, restart counts, exit codes) whenever it changes.

Every container process runs under a shim (`agent_shim.py`) that records its
PID and exit in the pod's directory, so the agent's own restart adopts the
running processes instead of orphaning them, and processes of pods that
vanished meanwhile are stopped. Pods are listed every 0.5 s (no watch): a
harness on one machine, where simplicity beats the last 0.5 s of latency.

CPU limits are enforced as the kubelet does, by a CFS quota per container
(`agent_cgroups`), where the machine's cgroup filesystem lets the agent.

Not a kubelet: no memory limits, no user switching, no image pulls, no
`kubectl logs/exec` (logs are files under the pod's directory).

    python -P -m tailpilot_e2e.node_agent --kubeconfig K --state-dir D [--node local-0]

This module is the loop and the container lifecycle; its parts: `agent_node` (the Node
object), `agent_pod` (pure translation of a pod spec: paths, env, probes, status),
`agent_images` (the image table), `agent_volumes` (volumes on this machine),
`agent_process` and `agent_shim` (container processes that outlive the agent), `agent_mounts`
(volumes at their mountPaths in a container's own mount namespace).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import datetime
import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kubernetes import client
from kubernetes.client.rest import ApiException

from tailpilot_e2e import agent_images, host_addresses
from tailpilot_e2e.agent_cgroups import CpuCgroups, cfs_quota_us
from tailpilot_e2e.agent_node import LEASE_DURATION_S, NODE_IP, NODE_NAME, node_manifest, node_status
from tailpilot_e2e.agent_pod import (
    DEFAULT_TERMINATION_MESSAGE_PATH,
    FALLBACK_LOG_LIMIT,
    TERMINATION_MESSAGE_LIMIT,
    ContainerRecord,
    PodConfigError,
    Probe,
    Termination,
    bind_pod_ip,
    container_env,
    container_status,
    containers_finished,
    is_sidecar,
    kubernetes_service_env,
    local_argv,
    mount_link,
    mount_plan,
    parse_probe,
    pod_conditions,
    pod_phase,
    rewrite_paths,
    rfc3339,
    stop_waves,
    will_restart,
)
from tailpilot_e2e.agent_process import (
    MOUNT_HELPER,
    SHIM,
    Run,
    container_dir,
    kill_all,
    pod_runs,
    release_address,
    runs_of,
)
from tailpilot_e2e.agent_volumes import PodVolumes, link_mounts
from tailpilot_e2e.config import REPO_ROOT, Binaries
from tailpilot_e2e.host_addresses import REAL_POD_NETWORK

log = logging.getLogger("node-agent")

LIST_PERIOD_S = 0.5
HEARTBEAT_PERIOD_S = 10.0
MERGE_PATCH = "application/merge-patch+json"


# ---- per-container and per-pod runtime ---------------------------------------------------------------
@dataclass
class ProbeState:
    """Consecutive results of one probe and when it is next due."""

    probe: Probe
    due: float
    successes: int = 0
    failures: int = 0
    pending: concurrent.futures.Future[bool] | None = None


@dataclass
class ContainerRuntime:
    """A container of a pod: its spec, record, current run and probes."""

    spec: dict[str, Any]
    record: ContainerRecord
    init: bool
    dir: Path
    run: Run | None = None
    backoff_until: float = 0.0
    probes: dict[str, ProbeState] = field(default_factory=dict)
    killing_since: float | None = None
    kill_reason: str = ""
    restart_pending: bool = False

    @property
    def name(self) -> str:
        return str(self.spec["name"])

    @property
    def sidecar(self) -> bool:
        """A native sidecar: an init container that keeps running beside the containers."""
        return self.init and is_sidecar(self.spec)

    def alive(self) -> bool:
        """Whether its current run's process still runs."""
        return self.run is not None and self.run.ended() is None


@dataclass
class PodRuntime:
    """A pod bound to this node."""

    uid: str
    namespace: str
    name: str
    dir: Path
    ip: str
    started_at: float
    init: list[ContainerRuntime]
    main: list[ContainerRuntime]
    config_error: PodConfigError | None = None
    volumes_ready: bool = False
    init_failed: bool = False
    #: Set once every regular init container succeeded and every sidecar started; it stays set
    #: (a sidecar restarting later does not make the pod uninitialized), as in the kubelet.
    initialized: bool = False
    #: When its deletion was seen (preStop sleeps count from it).
    deleting_since: float | None = None
    deleting_deadline: float | None = None
    #: When the sidecars' stop, once the containers are done for good, must be over (SIGKILL then).
    finishing_deadline: float | None = None
    last_status: dict[str, Any] | None = None

    @property
    def root(self) -> Path:
        return self.dir / "root"

    def containers(self) -> list[ContainerRuntime]:
        return [*self.init, *self.main]

    def init_done(self) -> bool:
        return self.initialized or not self.init

    def sidecars(self) -> list[ContainerRuntime]:
        return [c for c in self.init if c.sidecar]


def _executable(path: Path) -> Path | None:
    """`path` where it is an executable here (a cached build), else None: its image cannot run."""
    return path if os.access(path, os.X_OK) else None


class NodeAgent:
    """Runs the pods bound to one node; `run_forever` until SIGTERM/SIGINT."""

    def __init__(
        self,
        api: client.ApiClient,
        *,
        state_dir: Path,
        node: str = NODE_NAME,
        cpu: str = "8",
        memory: str = "16Gi",
        backoff_base_s: float = 1.0,
        backoff_max_s: float = 20.0,
        image_table: Mapping[str, agent_images.ImageEntry] | None = None,
    ):
        self.api = api
        self.core = client.CoreV1Api(api)
        self.volumes = PodVolumes(api)
        self.state_dir = state_dir
        self.node = node
        self.cpu, self.memory = cpu, memory
        self.backoff_base_s, self.backoff_max_s = backoff_base_s, backoff_max_s
        self.table = dict(image_table) if image_table is not None else self._default_table()
        self.pods: dict[str, PodRuntime] = {}
        self.probe_pool = concurrent.futures.ThreadPoolExecutor(max_workers=8, thread_name_prefix="probe")
        self.stopping = False
        self.deleted: set[str] = set()  # pods whose deletion we completed (a finalizer may keep them listed)
        self._next_heartbeat = 0.0
        self._refresh_volumes = False
        self._no_proxy = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        # What the kubelet gives every container to find the API server (no kube-proxy here).
        self.service_env = kubernetes_service_env(api.configuration.host)
        self._mount_namespaces: bool | None = None  # whether `unshare -m` works here (checked once)
        self.cgroups: CpuCgroups | None = CpuCgroups.of(state_dir)
        if not self.cgroups.available():
            log.warning("cgroups (v1 cpu, cpuacct) are not writable here: CPU limits are not enforced")
            self.cgroups = None

    def _default_table(self) -> dict[str, agent_images.ImageEntry]:
        from tailpilot.builders.triton_server import TritonStartError, make_backend_dir, pytriton_home

        binaries = Binaries.from_cache()
        monitoring = {
            "prometheus_operator_binary": _executable(binaries.prometheus_operator),
            "prometheus_binary": _executable(binaries.prometheus),
            "config_reloader_binary": _executable(binaries.config_reloader),
        }
        venv_bin = Path(sys.executable).parent
        try:
            home = pytriton_home()
            backend_dir = make_backend_dir(self.state_dir / "triton-backends", home=home)
        except TritonStartError as error:  # no nvidia-pytriton: Triton pods wait with ErrImagePull
            log.warning("Triton is not available here: %s", error)
            table = agent_images.default_table(
                venv_bin=venv_bin,
                triton_binary=Path("/nonexistent"),
                backend_dir=Path("/nonexistent"),
                **monitoring,
            )
            table.pop(agent_images.TRITON_REPOSITORY)
            return table
        return agent_images.default_table(
            venv_bin=venv_bin,
            triton_binary=home / "bin" / "tritonserver",
            backend_dir=backend_dir,
            **monitoring,
        )

    # ---- node ----------------------------------------------------------------------------------------
    def heartbeat(self) -> None:
        """Register the node (once), then refresh its status and Lease."""
        now = time.time()
        try:
            self.core.read_node(self.node)
        except ApiException as error:
            if error.status != 404:
                raise
            self.core.create_node(node_manifest(self.node, cpu=self.cpu, memory=self.memory))
        self.core.patch_node_status(
            self.node,
            {"status": node_status(cpu=self.cpu, memory=self.memory, now=now)},
            _content_type=MERGE_PATCH,
        )
        leases = client.CoordinationV1Api(self.api)
        # The client turns the body into a model and renewTime into a datetime; the API wants exactly
        # six fractional digits (MicroTime), which isoformat() omits when the microseconds are 0.
        renew = datetime.datetime.fromtimestamp(now, datetime.UTC).replace(
            microsecond=max(1, int(now * 1e6) % 1_000_000)
        )
        spec = client.V1LeaseSpec(
            holder_identity=self.node, lease_duration_seconds=LEASE_DURATION_S, renew_time=renew
        )
        try:
            leases.patch_namespaced_lease(
                self.node, "kube-node-lease", {"spec": spec}, _content_type=MERGE_PATCH
            )
        except ApiException as error:
            if error.status != 404:
                raise
            leases.create_namespaced_lease(
                "kube-node-lease",
                client.V1Lease(
                    metadata=client.V1ObjectMeta(name=self.node, namespace="kube-node-lease"), spec=spec
                ),
            )
        (self.state_dir / "ready").write_text(rfc3339(now))

    # ---- API reads -----------------------------------------------------------------------------------
    def _bound_pods(self) -> dict[str, dict[str, Any]]:
        pods = self.core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={self.node}")
        out = {}
        for pod in pods.items:
            data: dict[str, Any] = self.api.sanitize_for_serialization(pod)
            out[data["metadata"]["uid"]] = data
        return out

    # ---- pod setup -----------------------------------------------------------------------------------
    def _pod_dir(self, uid: str) -> Path:
        return self.state_dir / "pods" / uid

    def _allocate_ip(self, pod_dir: Path) -> str:
        ip_file = pod_dir / "ip"
        if ip_file.exists():  # adopted after the agent's restart: its address stays (added again if not)
            ip = ip_file.read_text().strip()
            host_addresses.add(ip)
            return ip
        # Every allocated address is in its pod's `ip` file (written here), the one record of it.
        used = {f.read_text().strip() for f in self.state_dir.glob("pods/*/ip")}
        for host in REAL_POD_NETWORK.hosts():
            ip = str(host)
            if ip.endswith((".0", ".1", ".255")) or ip in used:
                continue
            host_addresses.add(ip)
            ip_file.write_text(ip)
            return ip
        raise RuntimeError("no pod IP left")

    def _new_runtime(self, pod: dict[str, Any]) -> PodRuntime:
        uid = pod["metadata"]["uid"]
        pod_dir = self._pod_dir(uid)
        pod_dir.mkdir(parents=True, exist_ok=True)
        (pod_dir / "pod.json").write_text(
            json.dumps({"namespace": pod["metadata"]["namespace"], "name": pod["metadata"]["name"]})
        )
        created = pod_dir / "started-at"
        if not created.exists():
            created.write_text(str(time.time()))

        def containers(kind: str, init: bool) -> list[ContainerRuntime]:
            out = []
            for spec in pod["spec"].get(kind) or []:
                cdir = container_dir(pod_dir, spec["name"], init=init)
                cdir.mkdir(parents=True, exist_ok=True)
                out.append(
                    ContainerRuntime(
                        spec=spec,
                        record=ContainerRecord(name=spec["name"], image=spec.get("image", "")),
                        init=init,
                        dir=cdir,
                    )
                )
            return out

        runtime = PodRuntime(
            uid=uid,
            namespace=pod["metadata"]["namespace"],
            name=pod["metadata"]["name"],
            dir=pod_dir,
            ip=self._allocate_ip(pod_dir),
            started_at=float(created.read_text()),
            init=containers("initContainers", True),
            main=containers("containers", False),
        )
        self._adopt(runtime, pod)
        return runtime

    def _adopt(self, runtime: PodRuntime, pod: dict[str, Any]) -> None:
        """Rebuild records from the pod's directory: restart counts, last exits, running processes."""
        status = pod.get("status") or {}
        previous = {
            s["name"]: s
            for s in [*(status.get("initContainerStatuses") or []), *(status.get("containerStatuses") or [])]
        }
        restart_policy = pod["spec"].get("restartPolicy", "Always")
        now = time.monotonic()
        # The containers ran, so the init containers (sidecars included) had done their part.
        runtime.initialized = any(runs_of(c.dir) for c in runtime.main)
        for c in runtime.containers():
            runs = runs_of(c.dir)
            if not runs:
                continue
            c.record.restart_count = len(runs) - 1
            if len(runs) > 1:
                ended = Run(runs[-2]).exit()
                if ended:
                    c.record.last_terminated = self._termination(c, ended, runtime, read_message=False)
            c.run = Run(runs[-1])
            last = c.run.exit()
            if last is not None:
                policy = self._policy(c, restart_policy)
                self._ended(runtime, c, self._termination(c, last, runtime), policy, now)
            elif c.run.alive_pid() is not None:
                child = c.run.child() or {}
                c.record.running_since = float(child.get("startedAt", time.time()))
                c.record.started = bool(previous.get(c.name, {}).get("started", True))
                c.record.ready = bool(previous.get(c.name, {}).get("ready", False))
                log.info(
                    "adopted %s/%s container %s (pid %s)",
                    runtime.namespace,
                    runtime.name,
                    c.name,
                    child.get("pid"),
                )
                self._arm_probes(c, now)

    # ---- container lifecycle -------------------------------------------------------------------------
    @staticmethod
    def _policy(c: ContainerRuntime, restart_policy: str) -> str:
        """The restart policy a container follows: a sidecar's own Always; init containers never Always."""
        if c.sidecar:
            return "Always"
        if c.init:
            return "Never" if restart_policy == "Never" else "OnFailure"
        return restart_policy

    def _backoff(self, restart_count: int) -> float:
        return min(self.backoff_max_s, self.backoff_base_s * 2 ** max(0, restart_count - 1))

    def _termination(
        self, c: ContainerRuntime, ended: Mapping[str, Any], runtime: PodRuntime, *, read_message: bool = True
    ) -> Termination:
        code = int(ended["exitCode"])
        message = ""
        if read_message:
            path = mount_link(
                runtime.root, c.spec.get("terminationMessagePath") or DEFAULT_TERMINATION_MESSAGE_PATH
            )
            try:
                message = path.read_bytes()[:TERMINATION_MESSAGE_LIMIT].decode(errors="replace")
            except OSError:
                message = ""
            if (
                not message
                and code != 0
                and c.spec.get("terminationMessagePolicy") == "FallbackToLogsOnError"
            ):
                log_file = c.dir / f"{c.record.restart_count}.log"
                try:
                    message = log_file.read_bytes()[-FALLBACK_LOG_LIMIT:].decode(errors="replace")
                except OSError:
                    message = ""
        reason = str(ended.get("reason") or ("Completed" if code == 0 else "Error"))
        return Termination(
            exit_code=code,
            reason=reason,
            message=message,
            started_at=float(ended["startedAt"]),
            finished_at=float(ended["finishedAt"]),
            signal=ended.get("signal"),
        )

    def _start(self, runtime: PodRuntime, pod: dict[str, Any], c: ContainerRuntime) -> None:
        spec = c.spec
        mounts = [m["mountPath"] for m in spec.get("volumeMounts") or []]
        files = [spec.get("terminationMessagePath") or DEFAULT_TERMINATION_MESSAGE_PATH]

        def rewrite(text: str) -> str:
            return bind_pod_ip(
                rewrite_paths(text, root=runtime.root, mount_paths=mounts, files=files), runtime.ip
            )

        try:
            env = container_env(
                pod, spec, pod_ip=runtime.ip, host_ip=NODE_IP, lookup=self.volumes.lookup(runtime.namespace)
            )
            argv, image_env = local_argv(self.table, spec, env, pod_ip=runtime.ip, root=runtime.root)
        except agent_images.UnmappedImageError as error:
            pulled_once = c.record.waiting_reason in ("ErrImagePull", "ImagePullBackOff")
            c.record.waiting_reason = "ImagePullBackOff" if pulled_once else "ErrImagePull"
            c.record.waiting_message = str(error)
            c.backoff_until = time.monotonic() + self._backoff(2)
            return
        except PodConfigError as error:
            c.record.waiting_reason, c.record.waiting_message = error.reason, str(error)
            c.backoff_until = time.monotonic() + self._backoff(1)
            return
        entry = self.table.get(agent_images.image_repository(spec.get("image", "")))
        if entry is not None and entry.mount_namespace and not self._can_unshare():
            c.record.waiting_reason = "CreateContainerError"
            c.record.waiting_message = (
                f"image {spec.get('image')!r} runs in a mount namespace of its own, and "
                "`unshare -m --propagation private` does not work here (it needs root)"
            )
            c.backoff_until = time.monotonic() + self._backoff(2)
            return
        message_file = mount_link(runtime.root, files[0])
        message_file.write_bytes(b"")
        full_env = {
            "HOSTNAME": runtime.name,
            "LANG": "C.UTF-8",
            **self.service_env,
            **image_env,
            **{k: rewrite(v) for k, v in env.items()},
        }
        working_dir = spec.get("workingDir")
        cwd = rewrite(working_dir) if working_dir else str(runtime.root)
        Path(cwd).mkdir(parents=True, exist_ok=True)
        index = len(runs_of(c.dir))
        run_dir = c.dir / f"run-{index}"
        run_dir.mkdir()
        log_file = c.dir / f"{index}.log"
        if entry is not None and entry.mount_namespace:
            argv = self._in_mount_namespace(runtime, spec, argv, run_dir)
        cgroup_procs = self._cgroups_of(runtime, c)
        shim = subprocess.Popen(  # noqa: S603 - the pod's command, under our shim
            [
                sys.executable,
                "-I",
                "-S",
                str(SHIM),
                str(run_dir),
                str(log_file),
                cwd,
                *cgroup_procs,
                "--",
                *argv,
            ],
            env=full_env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        c.restart_pending = False
        c.record.restart_count = index
        c.run = Run(run_dir, shim)
        c.record.terminated = None
        c.record.running_since = time.time()
        c.record.ready = False
        c.record.started = False
        c.record.waiting_reason, c.record.waiting_message = "", ""
        c.killing_since = None
        self._arm_probes(c, time.monotonic())
        log.info("started %s/%s %s: %s", runtime.namespace, runtime.name, c.name, " ".join(argv)[:300])
        self._event(runtime, "Started", f"Started container {c.name}")

    def _can_unshare(self) -> bool:
        if self._mount_namespaces is None:
            unshare = shutil.which("unshare")
            self._mount_namespaces = bool(unshare) and (
                subprocess.run(  # noqa: S603
                    [str(unshare), "-m", "--propagation", "private", "true"], capture_output=True, check=False
                ).returncode
                == 0
            )
            if not self._mount_namespaces:
                log.warning("private mount namespaces (unshare -m) are not available here")
        return self._mount_namespaces

    def _in_mount_namespace(
        self, runtime: PodRuntime, spec: Mapping[str, Any], argv: list[str], run_dir: Path
    ) -> list[str]:
        """`argv` run in a private mount namespace with the pod's volumes at their mountPaths."""
        plan = {
            "scratch": str(run_dir / "mounts"),
            # What the container needs from this machine: never hidden by a mount (a /tmp emptyDir).
            "keep": [str(runtime.dir), argv[0], sys.executable, sys.prefix, str(REPO_ROOT)],
            "mounts": mount_plan(runtime.root, spec),
        }
        plan_file = run_dir / "mounts.json"
        plan_file.write_text(json.dumps(plan))
        unshare = shutil.which("unshare") or "unshare"
        helper = [sys.executable, "-I", "-S", str(MOUNT_HELPER), str(plan_file), "--"]
        return [unshare, "-m", "--propagation", "private", *helper, *argv]

    def _cgroups_of(self, runtime: PodRuntime, c: ContainerRuntime) -> list[str]:
        """The container's cgroups, its CPU limit as their quota; none where cgroups are not writable."""
        if self.cgroups is None:
            return []
        limit = ((c.spec.get("resources") or {}).get("limits") or {}).get("cpu")
        try:
            quota = cfs_quota_us(limit)
        except ValueError:
            log.warning(
                "%s/%s %s: CPU limit %r not understood: not enforced",
                runtime.namespace,
                runtime.name,
                c.name,
                limit,
            )
            quota = None
        try:
            return [str(p) for p in self.cgroups.create(runtime.uid, c.name, quota)]
        except OSError as error:  # the container still runs, as on a node whose cgroups failed it
            log.warning(
                "%s/%s %s: no cgroup (%s): CPU limit not enforced",
                runtime.namespace,
                runtime.name,
                c.name,
                error,
            )
            return []

    def _arm_probes(self, c: ContainerRuntime, now: float) -> None:
        ports = c.spec.get("ports") or []
        c.probes = {}
        if c.init and not c.sidecar:
            return
        for kind in ("startupProbe", "readinessProbe", "livenessProbe"):
            try:
                probe = parse_probe(c.spec.get(kind), ports)
            except PodConfigError:
                probe = None
            if probe is not None:
                c.probes[kind] = ProbeState(probe=probe, due=now + probe.initial_delay_s)

    def _kill(self, runtime: PodRuntime, c: ContainerRuntime, reason: str) -> None:
        if c.run is None or c.killing_since is not None:
            return
        c.killing_since = time.monotonic()
        c.kill_reason = reason
        c.run.signal(signal.SIGTERM)
        self._event(runtime, "Killing", f"Stopping container {c.name}: {reason}")

    # ---- probes --------------------------------------------------------------------------------------
    def _probe_once(self, probe: Probe, ip: str, root: Path) -> bool:
        host = probe.host or ip
        try:
            if probe.kind == "httpGet":
                url = f"http://{host}:{probe.port}{probe.path}"
                with self._no_proxy.open(url, timeout=probe.timeout_s) as response:
                    return 200 <= int(response.status) < 400
            if probe.kind == "tcpSocket":
                with socket.create_connection((host, probe.port), timeout=probe.timeout_s):
                    return True
            result = subprocess.run(
                list(probe.command), cwd=root, capture_output=True, timeout=probe.timeout_s, check=False
            )  # noqa: S603
            return result.returncode == 0
        except (OSError, subprocess.TimeoutExpired, ValueError):
            return False

    def _probe(self, runtime: PodRuntime, c: ContainerRuntime) -> None:
        now = time.monotonic()
        if c.record.running_since is None or c.killing_since is not None:
            return
        startup = c.probes.get("startupProbe")
        if startup is None:
            c.record.started = True
        for kind, state in c.probes.items():
            if kind != "startupProbe" and not c.record.started:
                continue
            if kind == "startupProbe" and c.record.started:
                continue
            if state.pending is not None:
                if not state.pending.done():
                    continue
                ok = state.pending.result()
                state.pending = None
                state.successes, state.failures = (state.successes + 1, 0) if ok else (0, state.failures + 1)
                self._apply_probe(runtime, c, kind, state)
            if now >= state.due and state.pending is None and c.killing_since is None:
                state.due = now + state.probe.period_s
                state.pending = self.probe_pool.submit(
                    self._probe_once, state.probe, runtime.ip, runtime.root
                )
        if "readinessProbe" not in c.probes:
            c.record.ready = c.record.started

    def _apply_probe(self, runtime: PodRuntime, c: ContainerRuntime, kind: str, state: ProbeState) -> None:
        probe = state.probe
        if kind == "startupProbe":
            if state.successes >= 1:
                c.record.started = True
            elif state.failures >= probe.failure_threshold:
                self._event(
                    runtime, "Unhealthy", f"Startup probe failed {state.failures} times", warning=True
                )
                self._kill(runtime, c, "startup probe failed")
        elif kind == "readinessProbe":
            if state.successes >= probe.success_threshold:
                c.record.ready = True
            elif state.failures >= probe.failure_threshold:
                c.record.ready = False
        elif state.failures >= probe.failure_threshold:
            self._event(runtime, "Unhealthy", f"Liveness probe failed {state.failures} times", warning=True)
            self._kill(runtime, c, "liveness probe failed")

    # ---- sync ----------------------------------------------------------------------------------------
    def _grace_s(self, pod: dict[str, Any]) -> float:
        meta = pod["metadata"]
        grace = meta.get("deletionGracePeriodSeconds")
        if grace is None:
            grace = pod["spec"].get("terminationGracePeriodSeconds", 30)
        return float(grace)

    def _sync_container(
        self, runtime: PodRuntime, pod: dict[str, Any], c: ContainerRuntime, restart_policy: str
    ) -> None:
        now = time.monotonic()
        if c.run is not None and c.record.running_since is not None:
            ended = c.run.ended()
            if ended is None:
                if c.killing_since is not None and now - c.killing_since > self._grace_s(pod):
                    c.run.signal(signal.SIGKILL)
                else:
                    self._probe(runtime, c)
                return
            self._ended(runtime, c, self._termination(c, ended, runtime), restart_policy, now)
        if c.run is not None and not c.restart_pending:
            return  # ended for good
        if now < c.backoff_until:
            if c.restart_pending:
                c.record.waiting_reason = "CrashLoopBackOff"
                c.record.waiting_message = (
                    f"back-off {self._backoff(c.record.restart_count + 1):.0f}s restarting failed "
                    f"container={c.name} pod={runtime.name}"
                )
            return
        self._start(runtime, pod, c)

    def _ended(
        self,
        runtime: PodRuntime,
        c: ContainerRuntime,
        termination: Termination,
        restart_policy: str,
        now: float,
    ) -> None:
        """Record an exit; schedule the restart (CrashLoopBackOff semantics) when the policy wants one."""
        c.record.running_since = None
        c.record.ready = False
        c.killing_since = None
        regular_init_done = c.init and not c.sidecar and termination.exit_code == 0
        if will_restart(restart_policy, termination) and not regular_init_done:
            c.record.last_terminated = termination
            c.record.terminated = None
            c.restart_pending = True
            c.backoff_until = now + self._backoff(c.record.restart_count + 1)
            if termination.exit_code != 0:
                self._event(
                    runtime,
                    "BackOff",
                    f"Back-off restarting failed container {c.name} (exit code {termination.exit_code})",
                    warning=True,
                )
        else:
            c.record.terminated = termination
            c.restart_pending = False
        log.info("%s/%s %s exited with %s", runtime.namespace, runtime.name, c.name, termination.exit_code)

    def _sync_pod(self, pod: dict[str, Any]) -> None:
        uid = pod["metadata"]["uid"]
        runtime = self.pods.get(uid)
        if runtime is None:
            fresh = not self._pod_dir(uid).exists()
            if fresh and pod["metadata"].get("deletionTimestamp"):
                # Deleted before we ran anything, or already stopped (a finalizer keeps it): nothing to run.
                if uid not in self.deleted:
                    self._delete_from_api(pod)
                    self.deleted.add(uid)
                return
            if fresh and (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
                return
            runtime = self.pods[uid] = self._new_runtime(pod)
        if pod["metadata"].get("deletionTimestamp"):
            self._terminate(runtime, pod)
            return
        if runtime.config_error is not None or not runtime.volumes_ready or self._refresh_volumes:
            self._prepare_volumes(runtime, pod)
        if runtime.config_error is None:
            self._sync_containers(runtime, pod)
        self._write_status(runtime, pod)

    def _prepare_volumes(self, runtime: PodRuntime, pod: dict[str, Any]) -> None:
        """Materialize (or refresh) the volumes and mount links; a failure leaves the pod waiting."""
        try:
            volume_dirs = self.volumes.materialize(pod, pod_dir=runtime.dir, pod_ip=runtime.ip)
            for c in runtime.containers():
                link_mounts(runtime.root, c.spec, volume_dirs)
            runtime.config_error = None
            runtime.volumes_ready = True
        except PodConfigError as error:
            runtime.config_error = error
            for c in runtime.containers():
                if c.run is None:
                    c.record.waiting_reason, c.record.waiting_message = error.reason, str(error)

    def _sync_containers(self, runtime: PodRuntime, pod: dict[str, Any]) -> None:
        """Init containers in order (a sidecar only has to start); then every container; then the end.

        A sidecar is kept running (restarted whenever it exits) from its start until the
        containers are done for good; the init container after it, or the containers, start
        once it is started (its startupProbe succeeded, or its process runs when it has none).
        """
        restart_policy = pod["spec"].get("restartPolicy", "Always")
        if self._finished(runtime):
            self._finish(runtime, pod)
            return
        for c in runtime.init:
            if c.sidecar:
                self._sync_container(runtime, pod, c, "Always")
                if not runtime.initialized and not (c.record.started and c.record.running_since is not None):
                    return
                continue
            done = c.record.terminated is not None and c.record.terminated.exit_code == 0
            if runtime.initialized or done:
                continue
            if c.record.terminated is not None and restart_policy == "Never":
                runtime.init_failed = True
                self._finish(runtime, pod)
                return
            self._sync_container(runtime, pod, c, self._policy(c, restart_policy))
            return
        runtime.initialized = True
        for c in runtime.main:
            self._sync_container(runtime, pod, c, restart_policy)
        if self._finished(runtime):
            self._finish(runtime, pod)

    @staticmethod
    def _finished(runtime: PodRuntime) -> bool:
        return containers_finished(init_failed=runtime.init_failed, records=[c.record for c in runtime.main])

    def _finish(self, runtime: PodRuntime, pod: dict[str, Any]) -> None:
        """The containers are done for good: stop the sidecars, last declared first, within the grace."""
        if runtime.finishing_deadline is None:
            grace = float(pod["spec"].get("terminationGracePeriodSeconds", 30))
            runtime.finishing_deadline = time.monotonic() + grace
        for c in runtime.sidecars():
            if c.run is None:
                continue
            if c.restart_pending:  # waiting for its restart: it will not run again
                c.restart_pending = False
                c.record.terminated = c.record.last_terminated
                c.record.waiting_reason, c.record.waiting_message = "", ""
            elif c.record.running_since is not None:
                self._sync_container(runtime, pod, c, "Never")  # records its exit, never restarts it
        self._stop_in_order(runtime, runtime.finishing_deadline, reason="the pod's containers completed")

    def _stop_in_order(self, runtime: PodRuntime, deadline: float, *, reason: str | None) -> bool:
        """Stop what runs, wave after wave (`stop_waves`), SIGKILL at `deadline`; True once nothing runs.

        Each wave gets SIGTERM once the waves before it have ended: the regular containers
        first, then each sidecar in reverse order. With `reason`, each SIGTERM is a Killing event.
        """
        containers = {c.name: c for c in runtime.containers()}
        alive = {name for name, c in containers.items() if c.alive()}
        for wave in stop_waves([c.spec for c in runtime.init], [c.spec for c in runtime.main]):
            running = [containers[name] for name in wave if name in alive]
            for c in running:
                if reason is not None:
                    self._kill(runtime, c, reason)
                elif c.killing_since is None and c.run is not None and self._pre_stop_done(runtime, c):
                    c.killing_since = time.monotonic()
                    c.run.signal(signal.SIGTERM)
            if running:
                break
        if alive and time.monotonic() > deadline:
            for name in alive:
                run = containers[name].run
                if run is not None:
                    run.signal(signal.SIGKILL)
        return not alive

    @staticmethod
    def _pre_stop_done(runtime: PodRuntime, c: ContainerRuntime) -> bool:
        """Whether a deleted pod's container has had its preStop hook (only `sleep` is run here).

        The kubelet runs the hook when the pod's deletion starts and sends SIGTERM once it
        returns, within the grace period (which the SIGKILL deadline still bounds).
        """
        hook = ((c.spec.get("lifecycle") or {}).get("preStop") or {}).get("sleep") or {}
        started = runtime.deleting_since
        return started is None or time.monotonic() >= started + float(hook.get("seconds", 0))

    def _terminate(self, runtime: PodRuntime, pod: dict[str, Any]) -> None:
        """The pod is being deleted: stop its containers (sidecars last), then remove it from the API."""
        if runtime.deleting_deadline is None:
            runtime.deleting_since = time.monotonic()
            runtime.deleting_deadline = runtime.deleting_since + self._grace_s(pod)
        if not self._stop_in_order(runtime, runtime.deleting_deadline, reason=None):
            return
        self._delete_from_api(pod)
        self.deleted.add(runtime.uid)
        self._forget(runtime)

    def _delete_from_api(self, pod: dict[str, Any]) -> None:
        meta = pod["metadata"]
        try:
            self.core.delete_namespaced_pod(
                meta["name"],
                meta["namespace"],
                body=client.V1DeleteOptions(
                    grace_period_seconds=0, preconditions=client.V1Preconditions(uid=meta["uid"])
                ),
            )
        except ApiException as error:
            if error.status not in (404, 409):
                raise

    def _forget(self, runtime: PodRuntime) -> None:
        self.pods.pop(runtime.uid, None)
        host_addresses.remove(runtime.ip)
        shutil.rmtree(runtime.dir, ignore_errors=True)
        if self.cgroups is not None:
            self.cgroups.release(runtime.uid)

    def _stop_vanished(self, runtime: PodRuntime) -> None:
        """The pod is gone from the API (force-deleted, or deleted while the agent was down)."""
        for c in runtime.containers():
            if c.run is not None:
                c.run.signal(signal.SIGKILL)
        if all(c.run is None or c.run.ended() is not None for c in runtime.containers()):
            log.info("pod %s/%s is gone: its processes are stopped", runtime.namespace, runtime.name)
            self._forget(runtime)

    def _write_status(self, runtime: PodRuntime, pod: dict[str, Any]) -> None:
        restart_policy = pod["spec"].get("restartPolicy", "Always")
        init_done = runtime.init_done()
        sidecars = [c.record for c in runtime.sidecars()]
        phase = pod_phase(
            restart_policy=restart_policy,
            init_failed=runtime.init_failed,
            init_done=init_done,
            records=[c.record for c in runtime.main],
            sidecars=sidecars,
        )
        existing = (pod.get("status") or {}).get("conditions") or []
        status: dict[str, Any] = {
            "phase": phase,
            "hostIP": NODE_IP,
            "hostIPs": [{"ip": NODE_IP}],
            "podIP": runtime.ip,
            "podIPs": [{"ip": runtime.ip}],
            "startTime": rfc3339(runtime.started_at),
            "conditions": pod_conditions(
                existing=existing,
                init_done=init_done,
                records=[c.record for c in runtime.main],
                now=time.time(),
                sidecars=sidecars,
            ),
            "containerStatuses": [container_status(c.record, pod_uid=runtime.uid) for c in runtime.main],
        }
        if runtime.init:
            status["initContainerStatuses"] = [
                container_status(c.record, pod_uid=runtime.uid) for c in runtime.init
            ]
        comparable = {k: v for k, v in status.items() if k != "conditions"} | {
            "conditions": [
                {k: v for k, v in c.items() if k != "lastTransitionTime"} for c in status["conditions"]
            ]
        }
        if comparable == runtime.last_status:
            return
        try:
            self.core.patch_namespaced_pod_status(
                runtime.name, runtime.namespace, {"status": status}, _content_type=MERGE_PATCH
            )
            runtime.last_status = comparable
        except ApiException as error:
            if error.status != 404:
                raise

    def _event(self, runtime: PodRuntime, reason: str, message: str, *, warning: bool = False) -> None:
        now = rfc3339(time.time())
        try:
            self.core.create_namespaced_event(
                runtime.namespace,
                {
                    "metadata": {"generateName": f"{runtime.name}.", "namespace": runtime.namespace},
                    "involvedObject": {
                        "kind": "Pod",
                        "namespace": runtime.namespace,
                        "name": runtime.name,
                        "uid": runtime.uid,
                        "apiVersion": "v1",
                    },
                    "reason": reason,
                    "message": message,
                    "type": "Warning" if warning else "Normal",
                    "source": {"component": "tailpilot-node-agent", "host": self.node},
                    "firstTimestamp": now,
                    "lastTimestamp": now,
                    "count": 1,
                },
            )
        except ApiException as error:
            log.warning(
                "event %s for %s/%s not recorded: %s", reason, runtime.namespace, runtime.name, error.reason
            )

    # ---- loop ----------------------------------------------------------------------------------------
    def sync_once(self) -> None:
        """One pass: heartbeat when due, then every bound pod, then pods that vanished."""
        if time.monotonic() >= self._next_heartbeat:
            self.heartbeat()
            self._next_heartbeat = time.monotonic() + HEARTBEAT_PERIOD_S
            self._refresh_volumes = (
                True  # ConfigMap and Secret volumes follow their objects, as the kubelet's do
            )
        bound = self._bound_pods()
        for pod in bound.values():
            try:
                self._sync_pod(pod)
            except ApiException as error:
                log.warning(
                    "pod %s/%s: %s %s",
                    pod["metadata"]["namespace"],
                    pod["metadata"]["name"],
                    error.status,
                    error.reason,
                )
        for uid in [u for u in self.pods if u not in bound]:
            self._stop_vanished(self.pods[uid])
        self.deleted &= set(bound)
        self._refresh_volumes = False

    def adopt_leftovers(self) -> None:
        """At start: stop processes of pods that no longer exist; the rest are adopted on first sync."""
        bound = self._bound_pods()
        for pod_dir in self.state_dir.glob("pods/*"):
            if pod_dir.name not in bound:
                alive = [r for r in pod_runs(pod_dir) if r.alive_pid() is not None]
                for r in alive:
                    r.signal(signal.SIGKILL)
                log.info("stopped %d process(es) of vanished pod %s", len(alive), pod_dir.name)
                release_address(pod_dir)
                shutil.rmtree(pod_dir, ignore_errors=True)
                if self.cgroups is not None:
                    self.cgroups.release(pod_dir.name)

    def run_forever(self) -> None:
        """Sync every LIST_PERIOD_S until SIGTERM/SIGINT; container processes keep running after it."""

        def stop(signum: int, frame: object) -> None:
            self.stopping = True

        signal.signal(signal.SIGTERM, stop)
        signal.signal(signal.SIGINT, stop)
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self.heartbeat()
        self._next_heartbeat = time.monotonic() + HEARTBEAT_PERIOD_S
        self.adopt_leftovers()
        while not self.stopping:
            started = time.monotonic()
            try:
                self.sync_once()
            except (ApiException, OSError) as error:  # the API server restarting: try again next period
                log.warning("sync failed: %s", error)
            time.sleep(max(0.05, LIST_PERIOD_S - (time.monotonic() - started)))  # the list period
        self.probe_pool.shutdown(wait=False, cancel_futures=True)


def main(argv: list[str] | None = None) -> int:
    """CLI: run the agent, or `--kill-all` the processes recorded in the state dir."""
    from tailpilot_e2e.kube import api_client

    parser = argparse.ArgumentParser(prog="python -P -m tailpilot_e2e.node_agent")
    parser.add_argument("--kubeconfig", type=Path, required=True)
    parser.add_argument("--state-dir", type=Path, required=True)
    parser.add_argument("--node", default=NODE_NAME)
    parser.add_argument(
        "--cpu", default="8", help="advertised CPU capacity (containers' limits are enforced)"
    )
    parser.add_argument("--memory", default="16Gi", help="advertised memory capacity (not enforced)")
    parser.add_argument("--backoff-base-seconds", type=float, default=1.0)
    parser.add_argument("--backoff-max-seconds", type=float, default=20.0)
    parser.add_argument(
        "--kill-all", action="store_true", help="stop every recorded container process and exit"
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    if args.kill_all:
        print(f"stopped {kill_all(args.state_dir)} container process(es)")
        cgroups = CpuCgroups.of(args.state_dir)
        cgroups.release()
        return 0
    agent = NodeAgent(
        api_client(args.kubeconfig),
        state_dir=args.state_dir,
        node=args.node,
        cpu=args.cpu,
        memory=args.memory,
        backoff_base_s=args.backoff_base_seconds,
        backoff_max_s=args.backoff_max_seconds,
    )
    agent.run_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
