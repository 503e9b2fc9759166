"""The CPU limit this process runs under, read from its cgroup's CFS quota.

The profile records it: a profile measured under a 600m quota says what a serving pod with a 600m
limit can do, one measured without a quota says what the whole machine could (and is far off for
a limited pod on a large node). What is recorded is what the kernel enforced, not what was asked:
a `tailpilot build` run by hand, or a runtime that does not enforce limits, records no limit.

cgroup v1 (`cpu.cfs_quota_us` / `cpu.cfs_period_us`, -1 for none) and v2 (`cpu.max`, "max" for
none) are both read. The effective limit is the tightest quota on the way from the process's
cgroup to the root: the kubelet sets one on the container and one on the pod. Inside a container
the cgroup path in /proc/self/cgroup may be the host's while the mount shows the container's own
cgroup as its root, so a path that is not under the mount falls back to the mount's root.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path, PurePosixPath

#: Reads one cgroup file; None when it does not exist or cannot be read.
Reader = Callable[[Path], str | None]

CGROUP_ROOT = Path("/sys/fs/cgroup")


def _read_file(path: Path) -> str | None:
    try:
        return path.read_text()
    except OSError:
        return None


def _v1_millis(directory: Path, read: Reader) -> int | None:
    quota, period = read(directory / "cpu.cfs_quota_us"), read(directory / "cpu.cfs_period_us")
    if quota is None or period is None or int(quota) <= 0 or int(period) <= 0:
        return None
    return int(quota) * 1000 // int(period)


def _v2_millis(directory: Path, read: Reader) -> int | None:
    text = read(directory / "cpu.max")
    if text is None:
        return None
    quota, _, period = text.strip().partition(" ")
    if quota == "max" or not period:
        return None
    return int(quota) * 1000 // int(period)


def _ancestors(mount: Path, cgroup_path: str, read: Reader, control_file: str) -> Iterator[Path]:
    """The process's cgroup directory under `mount` and each parent up to the mount's root."""
    relative = PurePosixPath(cgroup_path).relative_to("/")
    leaf = mount / relative
    if read(leaf / control_file) is None:
        leaf = mount  # the host's path in a container whose mount is its own cgroup
    yield leaf
    yield from (p for p in leaf.parents if p.is_relative_to(mount))


def cpu_limit_millis(
    proc_self_cgroup: str, read: Reader = _read_file, root: Path = CGROUP_ROOT
) -> int | None:
    """The tightest CFS quota over the process's cgroup and its ancestors, in millicores; None if none.

    `proc_self_cgroup` is the text of /proc/self/cgroup ("4:cpu,cpuacct:/kubepods/..." lines on v1,
    "0::/..." on v2).
    """
    limits: list[int] = []
    for line in proc_self_cgroup.splitlines():
        _, controllers, path = line.split(":", 2)
        if controllers == "":
            mount, file, millis = root, "cpu.max", _v2_millis
        elif "cpu" in controllers.split(","):
            mount = next(
                (
                    root / name
                    for name in (controllers, "cpu", "cpu,cpuacct")
                    if read(root / name / "cpu.cfs_period_us")
                ),
                root / "cpu",
            )
            file, millis = "cpu.cfs_period_us", _v1_millis
        else:
            continue
        limits.extend(m for d in _ancestors(mount, path, read, file) if (m := millis(d, read)) is not None)
    return min(limits) if limits else None


def current_cpu_limit_millis() -> int | None:
    """The CPU limit of this process (and the Triton it starts), None where none is enforced or readable."""
    text = _read_file(Path("/proc/self/cgroup"))
    try:
        return cpu_limit_millis(text) if text else None
    except ValueError:
        return None  # a cgroup file in a format this reader does not know: report no limit
