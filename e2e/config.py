"""Where the local cluster's pieces live: pinned versions, cached binaries, state dir, ports.

Versions come from `e2e/versions.env` (the one pinned-versions file). Binaries
are cached outside the repository, under `$TAILPILOT_CACHE` (default
`~/.cache/tailpilot`), keyed by version, so a warm start builds nothing and a
fresh clone on the same machine reuses them.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

E2E_DIR = Path(__file__).resolve().parent
REPO_ROOT = E2E_DIR.parent
VERSIONS_FILE = E2E_DIR / "versions.env"


def read_versions(path: Path = VERSIONS_FILE) -> dict[str, str]:
    """Parse the KEY=VALUE lines of versions.env (comments and blanks ignored)."""
    versions: dict[str, str] = {}
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, _, value = line.partition("=")
        versions[key.strip()] = value.strip()
    return versions


def cache_dir() -> Path:
    """Root of the build cache that survives across clones and sessions."""
    return Path(os.environ.get("TAILPILOT_CACHE", Path.home() / ".cache" / "tailpilot"))


@dataclass(frozen=True)
class Binaries:
    """Absolute paths of every executable the cluster runs."""

    etcd: Path
    kube_apiserver: Path
    kube_controller_manager: Path
    kube_scheduler: Path
    kubectl: Path
    #: The real node's kubelet and kube-proxy (`kubelet_node.py`).
    kubelet: Path
    kube_proxy: Path
    kwok: Path
    prometheus: Path
    promtool: Path
    #: The S3-compatible store the build's s3:// source is tested against (`object_store.py`).
    versitygw: Path
    #: The OCI registry the build's oci:// source is tested against (`oci_registry.py`).
    registry: Path
    #: prometheus-operator and the config reloader it runs beside each Prometheus
    #: (`prometheus_stack.py`).
    prometheus_operator: Path
    config_reloader: Path

    @classmethod
    def from_cache(cls, root: Path | None = None, versions: dict[str, str] | None = None) -> Binaries:
        """Binaries as `e2e/build-binaries.sh` lays them out in the cache."""
        v = versions or read_versions()
        bin_root = (root or cache_dir()) / "bin"
        k8s = bin_root / f"kubernetes-{v['KUBERNETES_VERSION']}"
        prometheus_operator = bin_root / f"prometheus-operator-{v['PROMETHEUS_OPERATOR_VERSION']}"
        return cls(
            etcd=bin_root / f"etcd-{v['ETCD_VERSION']}" / "etcd",
            kube_apiserver=k8s / "kube-apiserver",
            kube_controller_manager=k8s / "kube-controller-manager",
            kube_scheduler=k8s / "kube-scheduler",
            kubectl=k8s / "kubectl",
            kubelet=k8s / "kubelet",
            kube_proxy=k8s / "kube-proxy",
            kwok=bin_root / f"kwok-{v['KWOK_VERSION']}" / "kwok",
            prometheus=bin_root / f"prometheus-{v['PROMETHEUS_VERSION']}" / "prometheus",
            promtool=bin_root / f"prometheus-{v['PROMETHEUS_VERSION']}" / "promtool",
            versitygw=bin_root / f"versitygw-{v['VERSITYGW_VERSION']}" / "versitygw",
            registry=bin_root / f"distribution-{v['DISTRIBUTION_VERSION']}" / "registry",
            prometheus_operator=prometheus_operator / "operator",
            config_reloader=prometheus_operator / "prometheus-config-reloader",
        )

    def missing(self) -> list[Path]:
        """Binaries that are not there (or not executable)."""
        return [p for p in vars(self).values() if not os.access(p, os.X_OK)]


@dataclass(frozen=True)
class Ports:
    """Loopback ports of the cluster's components; fixed so a second `up` finds a running cluster."""

    etcd_client: int = 23790
    etcd_peer: int = 23800
    apiserver: int = 26443
    controller_manager: int = 26257
    scheduler: int = 26259
    kwok: int = 26247

    @classmethod
    def from_env(cls) -> Ports:
        """Shift every port by TAILPILOT_CLUSTER_PORT_OFFSET (to run two clusters side by side)."""
        return cls.shifted(int(os.environ.get("TAILPILOT_CLUSTER_PORT_OFFSET", "0")))

    @classmethod
    def shifted(cls, offset: int) -> Ports:
        """Every default port plus `offset`."""
        return cls(**{name: port + offset for name, port in vars(cls()).items()})


def state_dir() -> Path:
    """Per-checkout state: certificates, kubeconfigs, etcd data, PIDs and logs (git-ignored)."""
    return Path(os.environ.get("TAILPILOT_CLUSTER_DIR", REPO_ROOT / ".cluster"))


def tool(name: str) -> str | None:
    """Path of a command, looking first next to the running Python (the project's .venv/bin)."""
    import shutil
    import sys

    search = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    return shutil.which(name, path=search)
