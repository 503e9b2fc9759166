"""The local Kubernetes cluster: upstream control plane processes and a KWOK-simulated GPU fleet.

etcd, kube-apiserver, kube-controller-manager and kube-scheduler run as local
processes; KWOK plays the kubelets of the simulated nodes.

    python -m tailpilot_e2e.cluster up      # idempotent; reuses a running cluster
    python -m tailpilot_e2e.cluster down    # stops every process by PID, removes state
    python -m tailpilot_e2e.cluster status

The API server has real TLS, RBAC, and the ServiceAccount and PodSecurity
admission plugins. Everything binds to 127.0.0.1. State (certificates,
kubeconfigs, etcd data, PIDs, logs) lives in `.cluster/` at the repository root.
"""

from __future__ import annotations

import argparse
import copy
import fcntl
import json
import os
import shutil
import signal
import ssl
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tailpilot_e2e import fleet as fleet_mod
from tailpilot_e2e import pki
from tailpilot_e2e.agent_cgroups import CpuCgroups
from tailpilot_e2e.agent_node import NODE_NAME
from tailpilot_e2e.agent_process import kill_all
from tailpilot_e2e.config import E2E_DIR, Binaries, Ports, read_versions, state_dir
from tailpilot_e2e.host_addresses import KWOK_POD_NETWORK
from tailpilot_e2e.procs import ClusterError, Component, http_ok, log_tail, pid_runs, read_pid, start, stop

#: Start order; stopped in reverse.
COMPONENTS = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok")
#: The optional node agent (`real_node=True`), started last.
NODE_AGENT = "node-agent"
NODE_AGENT_MODULE = "tailpilot_e2e.node_agent"
STAGES_FILE = E2E_DIR / "kwok" / "stages.yaml"


@dataclass(frozen=True)
class ClusterPaths:
    """Files of one cluster's state directory."""

    root: Path

    @property
    def pki(self) -> Path:  # noqa: D102
        return self.root / "pki"

    @property
    def kubeconfig(self) -> Path:  # noqa: D102
        return self.root / "kubeconfig"

    def component_kubeconfig(self, identity: str) -> Path:  # noqa: D102
        return self.root / f"{identity}.kubeconfig"

    def log(self, component: str) -> Path:  # noqa: D102
        return self.root / "logs" / f"{component}.log"


def kubeconfig_yaml(*, server: str, ca: Path, cert: Path, key: Path, user: str) -> str:
    """A kubeconfig with absolute paths to the certificates (JSON is valid YAML)."""
    return json.dumps(
        {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {"name": "tailpilot-local", "cluster": {"server": server, "certificate-authority": str(ca)}}
            ],
            "users": [{"name": user, "user": {"client-certificate": str(cert), "client-key": str(key)}}],
            "contexts": [
                {"name": "tailpilot-local", "context": {"cluster": "tailpilot-local", "user": user}}
            ],
            "current-context": "tailpilot-local",
        },
        indent=2,
    )


class LocalCluster:
    """Brings the cluster up and down; all waits are bounded."""

    def __init__(
        self,
        *,
        paths: ClusterPaths | None = None,
        ports: Ports | None = None,
        binaries: Binaries | None = None,
        fleet: tuple[fleet_mod.NodePool, ...] = fleet_mod.DEFAULT_FLEET,
        audit_log: bool = False,
        real_node: bool = False,
    ):
        """Describe the cluster; `up` starts it.

        Args:
            paths: State directory layout (`.cluster/` or TAILPILOT_CLUSTER_DIR).
            ports: Component ports (shifted by TAILPILOT_CLUSTER_PORT_OFFSET).
            binaries: Cached upstream binaries.
            fleet: The KWOK-simulated nodes.
            audit_log: Log every API request's metadata (write-rate benchmarks).
            real_node: Also run the node agent, whose node `local-0` runs pods as local processes.
        """
        self.audit_log = audit_log
        self.real_node = real_node
        self.paths = paths or ClusterPaths(state_dir())
        self.ports = ports or Ports.from_env()
        self.binaries = binaries or Binaries.from_cache()
        self.fleet = fleet
        self.server = f"https://127.0.0.1:{self.ports.apiserver}"

    # ---- health ---------------------------------------------------------------------------------------
    def _ssl_context(self) -> ssl.SSLContext:
        ctx = ssl.create_default_context(cafile=str(self.paths.pki / "ca.crt"))
        ctx.load_cert_chain(str(self.paths.pki / "admin.crt"), str(self.paths.pki / "admin.key"))
        return ctx

    def _https_ok(self, url: str, *, client_cert: bool = True) -> bool:
        ctx = self._ssl_context() if client_cert else ssl._create_unverified_context()  # noqa: S323
        try:
            with urllib.request.urlopen(url, context=ctx, timeout=2) as response:  # noqa: S310
                return bool(response.status == 200)
        except (OSError, ValueError):
            return False

    def apiserver_ready(self) -> bool:
        """True when kube-apiserver answers /readyz with 200."""
        return (self.paths.pki / "admin.crt").exists() and self._https_ok(f"{self.server}/readyz")

    def component_names(self) -> tuple[str, ...]:
        """The components this cluster runs, in start order."""
        return (*COMPONENTS, NODE_AGENT) if self.real_node else COMPONENTS

    @property
    def agent_state_dir(self) -> Path:
        """Where the node agent keeps its pods' directories (volumes, logs, process records)."""
        return self.paths.root / "node-agent"

    def running(self) -> bool:
        """True when every component's PID is alive and the API server is ready."""
        for name in self.component_names():
            pid = read_pid(self.paths.root / f"{name}.pid")
            if pid is None or not pid_runs(pid):
                return False
        return self.apiserver_ready()

    # ---- components -----------------------------------------------------------------------------------
    def _components(self) -> list[Component]:
        p, b, pk = self.ports, self.binaries, self.paths.pki
        etcd_data = self.paths.root / "etcd-data"
        kcm_kc = self.paths.component_kubeconfig("controller-manager")
        sched_kc = self.paths.component_kubeconfig("scheduler")
        components = [
            Component(
                "etcd",
                [
                    str(b.etcd),
                    "--name=tailpilot",
                    f"--data-dir={etcd_data}",
                    f"--listen-client-urls=http://127.0.0.1:{p.etcd_client}",
                    f"--advertise-client-urls=http://127.0.0.1:{p.etcd_client}",
                    f"--listen-peer-urls=http://127.0.0.1:{p.etcd_peer}",
                    f"--initial-advertise-peer-urls=http://127.0.0.1:{p.etcd_peer}",
                    f"--initial-cluster=tailpilot=http://127.0.0.1:{p.etcd_peer}",
                    "--listen-metrics-urls=",
                    "--log-level=warn",
                    "--quota-backend-bytes=4294967296",
                    # The cluster is disposable: trade durability for speed on a small disk.
                    "--unsafe-no-fsync=true",
                ],
                [p.etcd_client, p.etcd_peer],
                lambda: http_ok(f"http://127.0.0.1:{p.etcd_client}/health"),
                ready_timeout_s=30,
            ),
            Component(
                "kube-apiserver",
                [
                    str(b.kube_apiserver),
                    f"--etcd-servers=http://127.0.0.1:{p.etcd_client}",
                    "--bind-address=127.0.0.1",
                    "--advertise-address=127.0.0.1",
                    f"--secure-port={p.apiserver}",
                    f"--tls-cert-file={pk / 'apiserver.crt'}",
                    f"--tls-private-key-file={pk / 'apiserver.key'}",
                    f"--client-ca-file={pk / 'ca.crt'}",
                    f"--service-account-key-file={pk / 'sa.pub'}",
                    f"--service-account-signing-key-file={pk / 'sa.key'}",
                    "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
                    f"--service-cluster-ip-range={pki.SERVICE_CIDR}",
                    "--authorization-mode=Node,RBAC",
                    # OwnerReferencesPermissionEnforcement as production API servers enable it: an
                    # owner reference with blockOwnerDeletion needs update on the owner's finalizers,
                    # which the chart must grant the operator (tests/operator_cluster/test_chart_rbac.py).
                    "--enable-admission-plugins=NodeRestriction,ServiceAccount,PodSecurity,"
                    "OwnerReferencesPermissionEnforcement",
                    "--allow-privileged=true",
                    "--profiling=false",
                    "--event-ttl=1h",
                    "--v=1",
                    *self._audit_flags(),
                ],
                [p.apiserver],
                self.apiserver_ready,
                ready_timeout_s=90,
            ),
            Component(
                "kube-controller-manager",
                [
                    str(b.kube_controller_manager),
                    f"--kubeconfig={kcm_kc}",
                    f"--authentication-kubeconfig={kcm_kc}",
                    f"--authorization-kubeconfig={kcm_kc}",
                    "--bind-address=127.0.0.1",
                    f"--secure-port={p.controller_manager}",
                    f"--service-account-private-key-file={pk / 'sa.key'}",
                    f"--root-ca-file={pk / 'ca.crt'}",
                    f"--cluster-signing-cert-file={pk / 'ca.crt'}",
                    f"--cluster-signing-key-file={pk / 'ca.key'}",
                    "--use-service-account-credentials=true",
                    "--leader-elect=false",
                    f"--service-cluster-ip-range={pki.SERVICE_CIDR}",
                    # Fast enough garbage collection and Job/Deployment sync for tests.
                    "--concurrent-deployment-syncs=10",
                    "--concurrent-job-syncs=10",
                    "--concurrent-gc-syncs=40",
                    "--profiling=false",
                    "--v=1",
                ],
                [p.controller_manager],
                lambda: self._https_ok(
                    f"https://127.0.0.1:{p.controller_manager}/healthz", client_cert=False
                ),
            ),
            Component(
                "kube-scheduler",
                [
                    str(b.kube_scheduler),
                    f"--kubeconfig={sched_kc}",
                    f"--authentication-kubeconfig={sched_kc}",
                    f"--authorization-kubeconfig={sched_kc}",
                    "--bind-address=127.0.0.1",
                    f"--secure-port={p.scheduler}",
                    "--leader-elect=false",
                    "--profiling=false",
                    "--v=1",
                ],
                [p.scheduler],
                lambda: self._https_ok(f"https://127.0.0.1:{p.scheduler}/healthz", client_cert=False),
            ),
            Component(
                "kwok",
                [
                    str(b.kwok),
                    f"--kubeconfig={self.paths.component_kubeconfig('kwok')}",
                    f"--config={STAGES_FILE}",
                    "--manage-all-nodes=false",
                    f"--manage-nodes-with-annotation-selector={fleet_mod.KWOK_NODE_ANNOTATION}=fake",
                    "--node-lease-duration-seconds=40",
                    # Pod IPs of a private, unrouted range (Kubernetes refuses loopback endpoints in a
                    # Service); nothing listens there unless a test puts the address on `lo`
                    # (`host_addresses`). The node IP is loopback: nothing off this machine reaches it.
                    f"--cidr={KWOK_POD_NETWORK}",
                    "--node-ip=127.63.0.1",
                    f"--server-address=127.0.0.1:{p.kwok}",
                ],
                [p.kwok],
                lambda: http_ok(f"http://127.0.0.1:{p.kwok}/healthz"),
                ready_timeout_s=30,
            ),
        ]
        if self.real_node:
            components.append(self._node_agent())
        return components

    def _node_agent(self) -> Component:
        ready_file = self.agent_state_dir / "ready"
        ready_file.unlink(missing_ok=True)
        return Component(
            NODE_AGENT,
            [
                sys.executable,
                "-P",
                "-m",
                NODE_AGENT_MODULE,
                f"--kubeconfig={self.paths.kubeconfig}",
                f"--state-dir={self.agent_state_dir}",
            ],
            [],
            ready_file.exists,
            ready_timeout_s=60,
        )

    def _audit_flags(self) -> list[str]:
        """Log every request's metadata (who, verb, resource) when auditing is on (write-rate benchmarks)."""
        if not self.audit_log:
            return []
        policy = self.paths.root / "audit-policy.yaml"
        policy.write_text(
            json.dumps(
                {
                    "apiVersion": "audit.k8s.io/v1",
                    "kind": "Policy",
                    "omitStages": ["RequestReceived"],
                    "rules": [{"level": "Metadata"}],
                }
            )
        )
        return [
            f"--audit-policy-file={policy}",
            f"--audit-log-path={self.paths.root / 'logs' / 'audit.log'}",
            "--audit-log-maxsize=512",
        ]

    def _write_kubeconfigs(self) -> None:
        pk = self.paths.pki
        self.paths.kubeconfig.write_text(
            kubeconfig_yaml(
                server=self.server,
                ca=pk / "ca.crt",
                cert=pk / "admin.crt",
                key=pk / "admin.key",
                user="tailpilot-admin",
            )
        )
        for identity in pki.CLIENTS:
            self.paths.component_kubeconfig(identity.file_stem).write_text(
                kubeconfig_yaml(
                    server=self.server,
                    ca=pk / "ca.crt",
                    cert=pk / f"{identity.file_stem}.crt",
                    key=pk / f"{identity.file_stem}.key",
                    user=identity.user,
                )
            )
        self.paths.kubeconfig.chmod(0o600)

    # ---- kubectl --------------------------------------------------------------------------------------
    def kubectl(
        self, *args: str, stdin: str | None = None, check: bool = True, timeout: float = 60
    ) -> subprocess.CompletedProcess[str]:
        """Run the built kubectl against this cluster as the admin user."""
        result = subprocess.run(  # noqa: S603
            [str(self.binaries.kubectl), f"--kubeconfig={self.paths.kubeconfig}", *args],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if check and result.returncode != 0:
            raise ClusterError(f"kubectl {' '.join(args)} failed: {result.stderr.strip()}")
        return result

    def ensure_nodes(self) -> None:
        """Create the simulated fleet (idempotent: server-side apply)."""
        items = fleet_mod.fleet_manifests(self.fleet)
        doc = json.dumps({"apiVersion": "v1", "kind": "List", "items": items})
        self.kubectl(
            "apply",
            "--server-side",
            "--force-conflicts",
            "--field-manager=tailpilot-e2e",
            "-f",
            "-",
            stdin=doc,
            timeout=120,
        )
        # Server-side apply of a Node ignores status on update; KWOK initializes it from the
        # create. Capacity must still be right when the fleet is re-applied, so patch it.
        for item in items:
            self.kubectl(
                "patch",
                "node",
                item["metadata"]["name"],
                "--subresource=status",
                "--type=merge",
                "-p",
                json.dumps({"status": item["status"]}),
                timeout=60,
            )

    def wait_nodes_ready(self, timeout_s: float = 60) -> None:
        """Wait (bounded) until every fleet node reports Ready."""
        expected = {item["metadata"]["name"] for item in fleet_mod.fleet_manifests(self.fleet)}
        if self.real_node:
            expected.add(NODE_NAME)
        deadline = time.monotonic() + timeout_s
        not_ready: set[str] = set(expected)
        while time.monotonic() < deadline:
            out = self.kubectl("get", "nodes", "-o", "json", check=False)
            if out.returncode == 0:
                ready = {
                    n["metadata"]["name"]
                    for n in json.loads(out.stdout)["items"]
                    if any(
                        c["type"] == "Ready" and c["status"] == "True"
                        for c in n["status"].get("conditions", [])
                    )
                }
                not_ready = expected - ready
                if not not_ready:
                    return
            time.sleep(0.3)
        raise ClusterError(
            f"kwok: nodes not Ready after {timeout_s:.0f}s: {sorted(not_ready)}; "
            f"log: {self.paths.log('kwok')}\n"
            f"{log_tail(self.paths.log('kwok'))}"
        )

    # ---- lifecycle ------------------------------------------------------------------------------------
    @contextmanager
    def _lock(self, timeout_s: float = 600) -> Iterator[None]:
        self.paths.root.mkdir(parents=True, exist_ok=True)
        with (self.paths.root / "lock").open("w") as handle:
            deadline = time.monotonic() + timeout_s
            while True:
                try:
                    fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() > deadline:
                        raise ClusterError(
                            "another `cluster up/down` holds .cluster/lock for too long"
                        ) from None
                    time.sleep(0.5)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    def up(self) -> bool:
        """Start the cluster, or reuse the running one. Returns True when it started it."""
        with self._lock():
            if self.running():
                self.ensure_nodes()
                self.wait_nodes_ready()
                return False
            missing = self.binaries.missing()
            if missing:
                raise ClusterError(
                    "missing cluster binaries (run `make binaries` or e2e/build-binaries.sh): "
                    + ", ".join(str(m) for m in missing)
                )
            if shutil.which("openssl") is None:
                raise ClusterError("openssl: not found on PATH (apt-get install openssl)")
            self._stop_all()  # leftovers of a half-started cluster
            pki.ensure_pki(self.paths.pki)
            self._write_kubeconfigs()
            try:
                for component in self._components():
                    start(component, state=self.paths.root)
                self.ensure_nodes()
                self.wait_nodes_ready()
            except BaseException:
                self._stop_all()
                raise
            return True

    def kill_node_agent(self) -> int:
        """SIGKILL the node agent alone; its pods' processes keep running (containers outlive a kubelet)."""
        pid = read_pid(self.paths.root / f"{NODE_AGENT}.pid")
        if pid is None or not pid_runs(pid, NODE_AGENT_MODULE):
            raise ClusterError("the node agent is not running")
        os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while pid_runs(pid) and time.monotonic() < deadline:
            time.sleep(0.05)  # bounded wait for the kernel to reap it
        stop(NODE_AGENT, state=self.paths.root)  # reaps our child and removes the PID file
        return pid

    def start_node_agent(self) -> int:
        """Start the node agent (again); it adopts the processes of its pods."""
        return start(self._node_agent(), state=self.paths.root)

    def restart_apiserver(self) -> int:
        """Stop kube-apiserver by its PID and start it again with the same flags; return its new PID.

        For fault tests: every client's connections and watches break while it is down, and etcd
        keeps the state, as on a control plane upgrade or a crashed API server.
        """
        with self._lock():
            stop("kube-apiserver", state=self.paths.root, binary=str(self.binaries.kube_apiserver))
            # The control plane's components alone: describing the node agent's resets its ready file.
            control_plane = copy.copy(self)
            control_plane.real_node = False
            (apiserver,) = [x for x in control_plane._components() if x.name == "kube-apiserver"]
            return start(apiserver, state=self.paths.root)

    def _stop_all(self) -> list[str]:
        binaries = {
            "etcd": str(self.binaries.etcd),
            "kube-apiserver": str(self.binaries.kube_apiserver),
            "kube-controller-manager": str(self.binaries.kube_controller_manager),
            "kube-scheduler": str(self.binaries.kube_scheduler),
            "kwok": str(self.binaries.kwok),
            NODE_AGENT: NODE_AGENT_MODULE,
        }
        # The agent first, then the processes of its pods (they outlive it by design), then the rest.
        stopped = [NODE_AGENT] if stop(NODE_AGENT, state=self.paths.root, binary=NODE_AGENT_MODULE) else []
        if kill_all(self.agent_state_dir):
            stopped.append("pod processes")
        CpuCgroups.of(self.agent_state_dir).remove()
        return stopped + [
            name for name in reversed(COMPONENTS) if stop(name, state=self.paths.root, binary=binaries[name])
        ]

    def down(self) -> list[str]:
        """Stop every component by PID and remove the state directory."""
        with self._lock():
            stopped = self._stop_all()
        shutil.rmtree(self.paths.root, ignore_errors=True)
        return stopped


#: Port offset and state directory of the real-pods cluster, so it runs beside the default one.
REAL_NODE_PORT_OFFSET = 300


def real_node_cluster(state: Path | None = None, *, port_offset: int = REAL_NODE_PORT_OFFSET) -> LocalCluster:
    """A cluster whose CPU node is the node agent's `local-0` (pods run as processes), plus two GPU nodes."""
    return LocalCluster(
        paths=ClusterPaths(state or state_dir().with_name(state_dir().name + "-real")),
        ports=Ports.shifted(port_offset),
        fleet=fleet_mod.REAL_NODE_FLEET,
        real_node=True,
    )


def main(argv: list[str] | None = None) -> int:
    """CLI: up | down | status."""
    parser = argparse.ArgumentParser(prog="python -m tailpilot_e2e.cluster")
    parser.add_argument("command", choices=["up", "down", "status"])
    parser.add_argument(
        "--real-node",
        action="store_true",
        help="the real-pods cluster: node agent on local-0, state in .cluster-real/, ports +300 "
        "(down without it stops both clusters)",
    )
    args = parser.parse_args(argv)
    cluster = real_node_cluster() if args.real_node else LocalCluster()
    try:
        if args.command == "up":
            started_at = time.monotonic()
            started = cluster.up()
            took = time.monotonic() - started_at
            versions = read_versions()
            print(
                ("started" if started else "reused running")
                + f" local cluster (Kubernetes {versions['KUBERNETES_VERSION']}, "
                f"etcd {versions['ETCD_VERSION']}, "
                f"KWOK {versions['KWOK_VERSION']}) in {took:.1f}s"
            )
            print(f"  export KUBECONFIG={cluster.paths.kubeconfig}")
            print(f"  {cluster.binaries.kubectl} get nodes -L nvidia.com/gpu.product")
            print(f"  logs: {cluster.paths.root / 'logs'}/")
        elif args.command == "down":
            # Without --real-node: whichever local cluster runs, both if both do (a test or demo
            # interrupted before its own teardown leaves the real-pods one up).
            for each in [cluster] if args.real_node else [cluster, real_node_cluster()]:
                stopped = each.down()
                what = ", ".join(stopped) if stopped else "nothing was running"
                print(f"{each.paths.root.name}: stopped {what}; state removed")
        else:
            print("running" if cluster.running() else "not running")
            return 0 if cluster.running() else 1
    except ClusterError as error:
        print(f"cluster {args.command}: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
