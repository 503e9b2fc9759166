"""CPU slots for measurements: a process tree confined to given cores, with a CFS quota, and its CPU time.

A measurement of a server against a client on one machine is only as good as their separation:
a client that takes CPU from the server it measures, or another job on the server's core, shows
up as latency the model under test never had. A `CpuSlot` is one cgroup (v1 `cpu` and `cpuacct`,
under `/sys/fs/cgroup/{cpu,cpuacct}/tailpilot-measure/<name>`) plus a CPU affinity; the process
started with `preexec=slot.join` and every child it forks run inside it. The quota, as the
kubelet sets one for a container's CPU limit, makes a slot's speed independent of its neighbours
on the same core when the quotas sum to at most that core.

`CoreTimes` reads the machine's per-core busy time (the root cgroup's `cpuacct.usage_percpu`), so a
run can show how much of its cores' time went to processes outside its slots.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

CGROUP_V1 = Path("/sys/fs/cgroup")
PARENT = "tailpilot-measure"
#: The kernel's smallest CFS period and quota.
MIN_PERIOD_US = 1_000
MIN_QUOTA_US = 1_000


def quota_us(millis: int | None, period_us: int) -> int:
    """The CFS quota of `millis` millicores per period (-1: no limit)."""
    if millis is None:
        return -1
    return max(MIN_QUOTA_US, millis * period_us // 1000)


@dataclass(frozen=True)
class CpuSlot:
    """A cgroup with a CFS quota and a set of cores, for one process tree."""

    name: str
    cpus: frozenset[int]
    #: Millicores (None: no quota, the cores in `cpus` are the only limit).
    millis: int | None = None
    #: The CFS period; the quota is `millis` per period.
    period_us: int = 100_000
    root: Path = CGROUP_V1

    def _dir(self, controller: str) -> Path:
        return self.root / controller / PARENT / self.name

    @classmethod
    def available(cls, root: Path = CGROUP_V1) -> bool:
        """Whether cgroup v1 `cpu` and `cpuacct` exist here and this process may create cgroups in them."""
        try:
            for controller in ("cpu", "cpuacct"):
                (root / controller / PARENT).mkdir(parents=True, exist_ok=True)
        except OSError:
            return False
        return (root / "cpu" / "cpu.cfs_quota_us").exists()  # a CFS-capable `cpu` hierarchy

    def create(self) -> CpuSlot:
        """Make the cgroups and set the quota; idempotent."""
        if self.period_us < MIN_PERIOD_US:
            raise ValueError(f"CFS period {self.period_us} us is below the kernel's {MIN_PERIOD_US} us")
        for controller in ("cpu", "cpuacct"):
            self._dir(controller).mkdir(parents=True, exist_ok=True)
        cpu = self._dir("cpu")
        (cpu / "cpu.cfs_quota_us").write_text("-1")  # a lower period than the quota is refused
        (cpu / "cpu.cfs_period_us").write_text(str(self.period_us))
        (cpu / "cpu.cfs_quota_us").write_text(str(quota_us(self.millis, self.period_us)))
        return self

    def join(self) -> None:
        """Move the calling process into the slot; meant as `preexec_fn` of the process to confine."""
        pid = str(os.getpid())
        for controller in ("cpu", "cpuacct"):
            (self._dir(controller) / "cgroup.procs").write_text(pid)
        os.sched_setaffinity(0, self.cpus)

    def leave(self, cpus: frozenset[int]) -> None:
        """Move the calling process back to the hierarchies' roots, on `cpus`, so the slot can go."""
        pid = str(os.getpid())
        for controller in ("cpu", "cpuacct"):
            (self.root / controller / "cgroup.procs").write_text(pid)
        os.sched_setaffinity(0, cpus)

    def cpu_seconds(self) -> float:
        """CPU time the slot's processes used so far (children included)."""
        return int((self._dir("cpuacct") / "cpuacct.usage").read_text()) / 1e9

    def throttling(self) -> tuple[int, float]:
        """(periods throttled, seconds throttled) so far: how often the quota held the slot back."""
        stat = parse_stat((self._dir("cpu") / "cpu.stat").read_text())
        return stat.get("nr_throttled", 0), stat.get("throttled_time", 0) / 1e9

    def remove(self) -> None:
        """Remove the cgroups once their processes are gone (a busy one is left in place)."""
        for controller in ("cpu", "cpuacct"):
            try:
                self._dir(controller).rmdir()
            except OSError as error:
                if error.errno not in (errno.ENOENT, errno.EBUSY, errno.ENOTEMPTY):
                    raise


def parse_stat(text: str) -> dict[str, int]:
    """`name value` lines (cpu.stat) as a dict (pure)."""
    out = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].lstrip("-").isdigit():
            out[parts[0]] = int(parts[1])
    return out


@dataclass(frozen=True)
class CoreTimes:
    """CPU seconds every task on the machine ran, per core: the root `cpuacct.usage_percpu`.

    The same accounting as a slot's `cpuacct.usage` (scheduler time, in ns), so busy time minus
    the slots' time is what processes outside the slots ran. `/proc/stat`'s tick-sampled times are
    not comparable with it: under a CFS quota they counted ~20% of a core more than any task ran.
    """

    busy_s: Mapping[int, float]

    @classmethod
    def parse(cls, usage_percpu: str) -> CoreTimes:
        """Parse `cpuacct.usage_percpu` (one count of ns per CPU, in CPU order) (pure)."""
        return cls({cpu: int(ns) / 1e9 for cpu, ns in enumerate(usage_percpu.split())})

    @classmethod
    def read(cls, root: Path = CGROUP_V1) -> CoreTimes:
        """The machine's cores now."""
        return cls.parse((root / "cpuacct" / "cpuacct.usage_percpu").read_text())

    def busy_since(self, earlier: CoreTimes, cores: Iterable[int]) -> float:
        """Busy seconds on `cores` between `earlier` and this reading."""
        return sum(self.busy_s[c] - earlier.busy_s[c] for c in cores)
