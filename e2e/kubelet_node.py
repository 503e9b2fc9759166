"""A real Kubernetes node on this machine: the kubelet, kube-proxy, containerd, runc and the CNI bridge.

The real-pods tier's node, `local-0`, is played by the node agent, which runs pods as host processes
(docs/node-agent.md). This node runs Kubernetes' own node components beside it, on the same cluster:

- the kubelet, built from the pinned Kubernetes module with the control plane (`build-binaries.sh`);
- Debian's containerd and runc (`install-system-deps.sh`), containerd with its own root, state and
  socket under this node's state directory;
- Debian's CNI plugins: a bridge (`BRIDGE`) with host-local addresses from `POD_NETWORK`, so a pod's
  IP answers from the host;
- kube-proxy from the same module, in iptables mode: a Service's cluster IP reaches its ready pods
  on this node from the host.

It registers as `NODE`, tainted (`TAINT_KEY`) so that only pods that ask for it run there. There is
no registry: images are OCI archives imported into containerd (`oci_archive.py`), the sandbox image
too. What this machine needs, each found by a failure (docs/cluster.md): `failCgroupV1: false` (the
cgroups are v1), containerd's `restrict_oom_score_adj` (root here lacks CAP_SYS_RESOURCE), Debian's
plugin directory `/usr/lib/cni`.

    node = KubeletNode(cluster, kubelet=binaries.kubelet, kube_proxy=binaries.kube_proxy).start()
    node.import_image(write_archive(busybox_image(...), path))
    ... pods with `node.toleration()` and nodeName NODE ...
    node.stop()   # pods removed first, then the processes, mounts, bridge and cgroups left behind
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
from pathlib import Path
from typing import Any

import yaml

from tailpilot.builders.triton_server import free_port
from tailpilot_e2e.cluster import LocalCluster
from tailpilot_e2e.oci_archive import busybox_image, write_archive
from tailpilot_e2e.procs import ClusterError, Component, http_ok, start, stop
from tailpilot_e2e.wait import EventuallyTimeout, eventually

#: The node's name.
NODE = "kubelet-0"
#: The taint it registers with: pods must tolerate it to run there.
TAINT_KEY = "tailpilot.io/kubelet-node"
#: The CNI bridge on the host, and the pods' addresses (apart from the agent's 10.64/10.65 networks).
BRIDGE = "tp-cni0"
POD_NETWORK = "10.89.0.0/24"
#: Where Debian's containernetworking-plugins are.
CNI_BIN_DIR = Path("/usr/lib/cni")
#: containerd 1.6's default sandbox image, built here (no registry to pull it from).
SANDBOX_IMAGE = "registry.k8s.io/pause:3.6"
#: containerd's namespace for the kubelet's containers and images.
CRI_NAMESPACE = "k8s.io"
#: The cgroup the kubelet makes under each v1 controller for the pods (cgroupfs driver).
POD_CGROUP = "kubepods"
CGROUP_ROOT = Path("/sys/fs/cgroup")
#: Where containerd 1.6 keeps its shims' sockets and runc's state, whatever its configured state dir.
CONTAINERD_RUN_DIR = Path("/run/containerd")
#: The kernel settings the kubelet sets at start (its defaults for a node: overcommit, panic on an
#: oops, reboot 10 s after a panic, key quotas). A node owns its machine; this one shares it with the
#: tests and the node agent, so they are put back as they were when the node stops.
KUBELET_SYSCTLS = (
    "vm/overcommit_memory",
    "vm/panic_on_oom",
    "kernel/panic",
    "kernel/panic_on_oops",
    "kernel/keys/root_maxkeys",
    "kernel/keys/root_maxbytes",
)


class KubeletNode:
    """containerd, the kubelet and kube-proxy: processes with their files under `state`."""

    def __init__(
        self, cluster: LocalCluster, *, kubelet: Path, kube_proxy: Path, state: Path | None = None
    ) -> None:
        self.cluster = cluster
        self.kubelet = kubelet
        self.kube_proxy = kube_proxy
        self.state = state or cluster.paths.root / "kubelet-node"
        self.kubelet_port = 0
        self.healthz_port = 0
        self.proxy_healthz_port = 0
        self.proxy_metrics_port = 0
        #: The kernel settings as they were before the kubelet started (`KUBELET_SYSCTLS`).
        self.sysctls_before: dict[str, str] = {}

    @property
    def socket(self) -> Path:
        """Containerd's CRI socket."""
        return self.state / "containerd" / "containerd.sock"

    def toleration(self) -> dict[str, str]:
        """What a pod needs to run on this node (besides `nodeName` or a selector)."""
        return {"key": TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"}

    # ---- start --------------------------------------------------------------------------------------
    def start(self, *, timeout_s: float = 120.0) -> KubeletNode:
        """Containerd (with the sandbox image), then the kubelet, until the node is Ready."""
        for tool in ("containerd", "ctr", "runc"):
            if shutil.which(tool) is None:
                raise ClusterError(f"{tool} is not installed: run `make tools` (e2e/install-system-deps.sh)")
        if not (CNI_BIN_DIR / "bridge").exists():
            raise ClusterError(f"no CNI bridge plugin in {CNI_BIN_DIR}: run `make tools`")
        for binary in (self.kubelet, self.kube_proxy):
            if not binary.exists():
                raise ClusterError(f"no {binary.name} at {binary}: run `make tools` (e2e/build-binaries.sh)")
        self.state.mkdir(parents=True, exist_ok=True)
        start(self._containerd(), state=self.state)
        pause = busybox_image(SANDBOX_IMAGE, ["/bin/busybox", "sleep", "2147483647"])
        self.import_image(write_archive(pause, self.state / "images" / "pause.tar"))
        self.kubelet_port, self.healthz_port = free_port(), free_port()
        self.sysctls_before = read_sysctls(KUBELET_SYSCTLS)
        start(self._kubelet(), state=self.state)
        self._wait_ready(timeout_s)
        self.proxy_healthz_port, self.proxy_metrics_port = free_port(), free_port()
        start(self._kube_proxy(), state=self.state)
        return self

    def _containerd(self) -> Component:
        root = self.state / "containerd"
        cni_conf = self.state / "cni" / "net.d"
        cni_conf.mkdir(parents=True, exist_ok=True)
        (cni_conf / "10-tailpilot.conflist").write_text(json.dumps(self._cni_network(), indent=2))
        config = root / "config.toml"
        root.mkdir(parents=True, exist_ok=True)
        config.write_text(
            "\n".join(
                [
                    "version = 2",
                    f'root = "{root / "root"}"',
                    f'state = "{root / "state"}"',
                    "[grpc]",
                    f'  address = "{self.socket}"',
                    '[plugins."io.containerd.grpc.v1.cri"]',
                    f'  sandbox_image = "{SANDBOX_IMAGE}"',
                    # Root here lacks CAP_SYS_RESOURCE: the sandbox's oom_score_adj (-998) cannot be
                    # set below containerd's own, so it is clamped to it.
                    "  restrict_oom_score_adj = true",
                    '  stream_server_address = "127.0.0.1"',
                    '  stream_server_port = "0"',
                    '[plugins."io.containerd.grpc.v1.cri".cni]',
                    f'  bin_dir = "{CNI_BIN_DIR}"',
                    f'  conf_dir = "{cni_conf}"',
                    '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]',
                    '  runtime_type = "io.containerd.runc.v2"',
                    "",
                ]
            )
        )
        return Component(
            name="containerd",
            argv=["containerd", "--config", str(config)],
            ports=[],
            is_ready=self._containerd_answers,
            ready_timeout_s=30,
        )

    def _cni_network(self) -> dict[str, Any]:
        # No ipMasq and no portmap: the host reaches the pods over the bridge, and nothing is left
        # in iptables to clean up.
        return {
            "cniVersion": "1.0.0",
            "name": "tailpilot-kubelet",
            "plugins": [
                {
                    "type": "bridge",
                    "bridge": BRIDGE,
                    "isGateway": True,
                    "ipMasq": False,
                    "hairpinMode": True,
                    "ipam": {
                        "type": "host-local",
                        "ranges": [[{"subnet": POD_NETWORK}]],
                        "dataDir": str(self.state / "cni" / "ipam"),
                    },
                }
            ],
        }

    def _containerd_answers(self) -> bool:
        if not self.socket.exists():
            return False
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(1.0)
            return sock.connect_ex(str(self.socket)) == 0

    def _kubelet(self) -> Component:
        root = self.state / "kubelet"
        root.mkdir(parents=True, exist_ok=True)
        config = root / "config.yaml"
        config.write_text(yaml.safe_dump(self._kubelet_config(root)))
        return Component(
            name="kubelet",
            argv=[
                str(self.kubelet),
                f"--config={config}",
                f"--kubeconfig={self.cluster.paths.kubeconfig}",
                f"--root-dir={root}",
                f"--hostname-override={NODE}",
                "--node-ip=127.0.0.1",
            ],
            ports=[self.kubelet_port, self.healthz_port],
            is_ready=self._healthz,
            ready_timeout_s=60,
        )

    def _kubelet_config(self, root: Path) -> dict[str, Any]:
        return {
            "apiVersion": "kubelet.config.k8s.io/v1beta1",
            "kind": "KubeletConfiguration",
            # This machine mounts the v1 hierarchies; the kubelet of 1.35 refuses them unless told.
            "failCgroupV1": False,
            "cgroupDriver": "cgroupfs",
            "containerRuntimeEndpoint": f"unix://{self.socket}",
            "address": "127.0.0.1",
            "port": self.kubelet_port,
            "readOnlyPort": 0,
            "healthzBindAddress": "127.0.0.1",
            "healthzPort": self.healthz_port,
            "authentication": {
                "anonymous": {"enabled": False},
                "webhook": {"enabled": False},
                "x509": {"clientCAFile": str(self.cluster.paths.pki / "ca.crt")},
            },
            "authorization": {"mode": "AlwaysAllow"},
            "registerWithTaints": [{"key": TAINT_KEY, "effect": "NoSchedule"}],
            "failSwapOn": False,
            "podLogsDir": str(root / "pod-logs"),
            # The images are imported, not pulled: never garbage-collect them, and never evict for the
            # small disk of a test machine.
            "imageGCHighThresholdPercent": 100,
            "imageGCLowThresholdPercent": 99,
            "evictionHard": {"memory.available": "1Mi", "nodefs.available": "0%", "imagefs.available": "0%"},
            "resolvConf": "",
        }

    def _kube_proxy(self) -> Component:
        root = self.state / "kube-proxy"
        root.mkdir(parents=True, exist_ok=True)
        config = root / "config.yaml"
        config.write_text(yaml.safe_dump(self._kube_proxy_config()))
        return Component(
            name="kube-proxy",
            argv=[str(self.kube_proxy), f"--config={config}"],
            ports=[self.proxy_healthz_port, self.proxy_metrics_port],
            # Healthy once it has programmed the Services it read.
            is_ready=lambda: http_ok(f"http://127.0.0.1:{self.proxy_healthz_port}/healthz"),
            ready_timeout_s=60,
        )

    def _kube_proxy_config(self) -> dict[str, Any]:
        return {
            "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
            "kind": "KubeProxyConfiguration",
            "clientConnection": {"kubeconfig": str(self.cluster.paths.kubeconfig)},
            "hostnameOverride": NODE,
            "mode": "iptables",
            # Traffic to a Service from outside the pods' network is masqueraded on its way to them.
            "clusterCIDR": POD_NETWORK,
            "healthzBindAddress": f"127.0.0.1:{self.proxy_healthz_port}",
            "metricsBindAddress": f"127.0.0.1:{self.proxy_metrics_port}",
            # NodePorts on 127.0.0.1 would need route_localnet set on the host: left alone.
            "iptables": {"localhostNodePorts": False},
            "nodePortAddresses": ["primary"],
            # The host's conntrack limits and timeouts are left as they are (0: do not set).
            "conntrack": {
                "maxPerCore": 0,
                "min": 0,
                "tcpEstablishedTimeout": "0s",
                "tcpCloseWaitTimeout": "0s",
            },
        }

    def _healthz(self) -> bool:
        return http_ok(f"http://127.0.0.1:{self.healthz_port}/healthz")

    def _wait_ready(self, timeout_s: float) -> None:
        def ready() -> bool:
            got = self.cluster.kubectl(
                "get",
                "node",
                NODE,
                "-o",
                'jsonpath={.status.conditions[?(@.type=="Ready")].status}',
                check=False,
            )
            return got.stdout.strip() == "True"

        try:
            eventually(ready, timeout=timeout_s, interval=0.5, description=f"node {NODE} Ready")
        except EventuallyTimeout as exc:
            raise ClusterError(f"{exc}; log: {self.state / 'logs' / 'kubelet.log'}") from exc

    # ---- images -------------------------------------------------------------------------------------
    def import_image(self, archive: Path) -> None:
        """Import an OCI image archive into containerd's namespace for the kubelet."""
        self._ctr("images", "import", str(archive))

    def images(self) -> list[str]:
        """The image names containerd holds for the kubelet."""
        return self._ctr("images", "list", "-q").stdout.split()

    def _ctr(self, *args: str) -> subprocess.CompletedProcess[str]:
        result = self._ctr_quietly(*args)
        if result.returncode != 0:
            raise ClusterError(f"ctr {' '.join(args)}: {result.stderr.strip() or result.stdout.strip()}")
        return result

    def _ctr_quietly(self, *args: str) -> subprocess.CompletedProcess[str]:
        """`ctr` against this node's containerd, its failure returned rather than raised."""
        return subprocess.run(  # noqa: S603 - our own arguments
            ["ctr", "--address", str(self.socket), "--namespace", CRI_NAMESPACE, *args],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )

    # ---- stop ---------------------------------------------------------------------------------------
    def stop(self, *, pods_timeout_s: float = 60.0) -> None:
        """Remove the node's pods, stop the kubelet and containerd, and clean what they leave behind.

        The pods go first, through the kubelet, so that it stops their containers, has CNI release their
        addresses and unmounts their volumes. Whatever a failure left is removed after: the mounts
        under the state directory, the bridge, the pods' cgroups, the kubelet's iptables chains and
        kernel settings, the Node object.
        """
        self.cluster.kubectl(
            "delete",
            "pods",
            "--all-namespaces",
            f"--field-selector=spec.nodeName={NODE}",
            "--wait=true",
            f"--timeout={pods_timeout_s:.0f}s",
            check=False,
            timeout=pods_timeout_s + 30,
        )
        stop("kube-proxy", state=self.state, binary=str(self.kube_proxy))
        stop("kubelet", state=self.state, binary=str(self.kubelet))
        if self._containerd_answers():
            # Containers the kubelet could not stop (it failed, or its pods were not deleted in time).
            listed = self._ctr_quietly("tasks", "list", "-q")
            for task in listed.stdout.split() if listed.returncode == 0 else []:
                self._ctr_quietly("tasks", "kill", "-s", "SIGKILL", task)
        stop("containerd", state=self.state, binary="containerd")
        _unmount_under(self.state)
        subprocess.run(["ip", "link", "delete", BRIDGE], capture_output=True, timeout=30, check=False)  # noqa: S607
        _remove_cgroups(POD_CGROUP)
        _remove_kube_iptables()
        write_sysctls(self.sysctls_before)
        _remove_empty_dirs(CONTAINERD_RUN_DIR)
        self.cluster.kubectl("delete", "node", NODE, "--ignore-not-found", check=False)


def read_sysctls(names: tuple[str, ...]) -> dict[str, str]:
    """The current values of kernel settings (paths under /proc/sys); unreadable ones left out."""
    values = {}
    for name in names:
        try:
            values[name] = (Path("/proc/sys") / name).read_text().strip()
        except OSError:
            continue
    return values


def write_sysctls(values: dict[str, str]) -> None:
    """Set kernel settings (paths under /proc/sys) back; one that cannot be written is left as it is."""
    for name, value in values.items():
        try:
            (Path("/proc/sys") / name).write_text(value)
        except OSError:
            continue


def _unmount_under(root: Path) -> None:
    """Unmount everything mounted below `root`, deepest first (containers' rootfs, shm, volumes)."""
    prefix = str(root.resolve()) + os.sep
    mounts = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = line.split()[4].encode().decode("unicode_escape")
        if point.startswith(prefix):
            mounts.append(point)
    for point in sorted(mounts, key=len, reverse=True):
        subprocess.run(["umount", "-l", point], capture_output=True, timeout=30, check=False)  # noqa: S603,S607


def _remove_cgroups(name: str) -> None:
    """Remove the kubelet's (empty, once its pods are gone) cgroup trees under every v1 controller."""
    if not CGROUP_ROOT.is_dir():
        return
    for controller in CGROUP_ROOT.iterdir():
        _remove_empty_dirs(controller / name)


def _remove_kube_iptables() -> None:
    """Remove the chains and rules the kubelet and kube-proxy add to iptables (all named KUBE-).

    Why: the node's Services would stay routed to addresses that are gone, and the kubelet's
    KUBE-FIREWALL drops connections to 127.0.0.0/8 from other sources, which the node agent's pods'
    loopback addresses are. Nothing else here makes KUBE- chains.
    """
    for save, restore in (("iptables-save", "iptables-restore"), ("ip6tables-save", "ip6tables-restore")):
        if shutil.which(save) is None or shutil.which(restore) is None:
            continue
        saved = subprocess.run([save], capture_output=True, text=True, timeout=30, check=False)  # noqa: S603
        if saved.returncode != 0 or "KUBE-" not in saved.stdout:
            continue
        kept = "".join(line for line in saved.stdout.splitlines(keepends=True) if "KUBE-" not in line)
        subprocess.run([restore], input=kept, text=True, capture_output=True, timeout=30, check=False)  # noqa: S603


def _remove_empty_dirs(root: Path) -> None:
    """Remove `root` and the directories under it, deepest first, where they are empty."""
    if not root.is_dir():
        return
    for directory in sorted(
        (p for p in root.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True
    ):
        try:
            directory.rmdir()
        except OSError:
            continue
    try:
        root.rmdir()
    except OSError:
        return
