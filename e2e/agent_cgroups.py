"""CPU limits of the node agent's containers, enforced as the kubelet does: a CFS quota per container.

The kubelet turns `resources.limits.cpu` into a cgroup's `cpu.cfs_quota_us` over a 100 ms period
(`milliCPU * period / 1000`, at least 1 ms); the container's processes, its children included, can
use no more CPU time than that per period. Here the cgroups live under
`/sys/fs/cgroup/cpu/tailpilot-agent/<agent>/<pod uid>/<container>`, with a twin under
`cpuacct` whose `cpuacct.usage` counts the container's CPU time, as cAdvisor reads it.

Why it matters on one machine: without limits, a service's replicas share the machine's cores
with the control plane, Prometheus and the load generator, and a replica's capacity is whatever
the rest leaves it. With limits, a replica serves what its limit buys, as on a real node.

Where the cgroup filesystem (v1) is not writable, the agent runs containers without limits and
says so once (`CpuCgroups.available`).
"""

from __future__ import annotations

import errno
import hashlib
import logging
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path

from tailpilot.api.quantity import milli_cpu

log = logging.getLogger(__name__)

#: The kubelet's CFS period (`--cpu-cfs-quota-period`, default 100 ms).
CFS_PERIOD_US = 100_000
#: The kernel's (and the kubelet's) smallest quota.
MIN_QUOTA_US = 1_000
CGROUP_V1 = Path("/sys/fs/cgroup")
#: How long `release` waits for killed processes to leave their cgroups before removing them.
RELEASE_WAIT_S = 2.0


def cfs_quota_us(limit: str | int | float | None, period_us: int = CFS_PERIOD_US) -> int | None:
    """The CFS quota for a CPU limit, as the kubelet computes it; None (unlimited) without one."""
    milli = milli_cpu(limit)
    if milli is None or milli <= 0:
        return None
    return max(MIN_QUOTA_US, milli * period_us // 1000)


def agent_key(state_dir: Path) -> str:
    """A short name for one node agent's cgroups: several clusters may run on one machine."""
    return hashlib.sha1(str(state_dir.resolve()).encode()).hexdigest()[:12]


@dataclass(frozen=True)
class CpuCgroups:
    """One node agent's container cgroups in the `cpu` and `cpuacct` hierarchies."""

    key: str
    root: Path = CGROUP_V1

    @classmethod
    def of(cls, state_dir: Path, root: Path = CGROUP_V1) -> CpuCgroups:
        """The cgroups of the agent whose state lives in `state_dir`."""
        return cls(agent_key(state_dir), root)

    def _dir(self, controller: str, *parts: str) -> Path:
        return self.root / controller / "tailpilot-agent" / self.key / Path(*parts)

    def available(self) -> bool:
        """Whether both hierarchies exist and this process may create cgroups in them."""
        try:
            for controller in ("cpu", "cpuacct"):
                self._dir(controller).mkdir(parents=True, exist_ok=True)
        except OSError:
            return False
        return (self._dir("cpu").parent.parent / "cpu.cfs_quota_us").exists()

    def create(self, pod_uid: str, container: str, quota_us: int | None) -> list[Path]:
        """The container's cgroups, the quota set (-1: none); the `cgroup.procs` files to join."""
        procs = []
        for controller in ("cpu", "cpuacct"):
            path = self._dir(controller, pod_uid, container)
            path.mkdir(parents=True, exist_ok=True)
            procs.append(path / "cgroup.procs")
        self._dir("cpu", pod_uid, container, "cpu.cfs_period_us").write_text(str(CFS_PERIOD_US))
        self._dir("cpu", pod_uid, container, "cpu.cfs_quota_us").write_text(str(quota_us or -1))
        return procs

    def cpu_seconds(self, pod_uid: str, container: str) -> float | None:
        """CPU time the container's processes used (children included); None if it has no cgroup."""
        try:
            return int(self._dir("cpuacct", pod_uid, container, "cpuacct.usage").read_text()) / 1e9
        except (OSError, ValueError):
            return None

    def throttled_seconds(self, pod_uid: str, container: str) -> float | None:
        """How long the quota held the container back (`cpu.stat` throttled_time)."""
        try:
            stat = self._dir("cpu", pod_uid, container, "cpu.stat").read_text()
        except OSError:
            return None
        fields = dict(line.split() for line in stat.splitlines() if line.strip())
        return int(fields.get("throttled_time", 0)) / 1e9

    def kill_remaining(self, pod_uid: str | None = None) -> int:
        """SIGKILL every process left in one pod's container cgroups (or all); how many were.

        A container runtime stops a container's whole cgroup, not only its main process: a child
        that outlived it (a Triton backend stub whose server was killed, in its own session where
        the process-group signal does not reach) goes with the pod here too, as on a real node.
        """
        base = self._dir("cpu", pod_uid) if pod_uid else self._dir("cpu")
        if not base.is_dir():
            return 0
        killed = 0
        for procs in base.rglob("cgroup.procs"):
            try:
                pids = [int(pid) for pid in procs.read_text().split()]
            except (OSError, ValueError):
                continue
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                    killed += 1
                except ProcessLookupError:
                    pass
        return killed

    def release(self, pod_uid: str | None = None, *, wait_s: float = RELEASE_WAIT_S) -> int:
        """Kill what is left in one pod's cgroups (or all), then remove them; how many were killed.

        A killed process leaves its cgroup when the kernel has torn it down, a moment after the
        signal; removing at once would find the cgroup busy and leave an empty directory behind.
        So the removal waits (bounded) until no process is left.
        """
        killed = self.kill_remaining(pod_uid)
        deadline = time.monotonic() + wait_s
        while killed and self._has_processes(pod_uid) and time.monotonic() < deadline:
            time.sleep(0.02)
        self.remove(pod_uid)
        return killed

    def _has_processes(self, pod_uid: str | None) -> bool:
        base = self._dir("cpu", pod_uid) if pod_uid else self._dir("cpu")
        for procs in base.rglob("cgroup.procs") if base.is_dir() else ():
            try:
                if procs.read_text().strip():
                    return True
            except OSError:
                continue
        return False

    def remove(self, pod_uid: str | None = None) -> int:
        """Remove the empty cgroups of one pod (or all); those still holding processes stay."""
        removed = 0
        for controller in ("cpu", "cpuacct"):
            base = self._dir(controller, pod_uid) if pod_uid else self._dir(controller)
            if not base.is_dir():
                continue
            # Deepest first: a cgroup directory is removed with rmdir once its children are.
            for path in sorted((p for p in base.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)):
                removed += _rmdir(path)
            removed += _rmdir(base)
        return removed


def _rmdir(path: Path) -> int:
    try:
        path.rmdir()
    except OSError as error:
        if error.errno not in (errno.EBUSY, errno.ENOENT, errno.ENOTEMPTY):
            log.warning("cannot remove cgroup %s: %s", path, error)
        return 0
    return 1
