"""The CPU limit a build (and its profiling Triton) runs under, read from cgroup files."""

from __future__ import annotations

from pathlib import Path

from tailpilot.builders.cpu_quota import cpu_limit_millis

ROOT = Path("/sys/fs/cgroup")


def reader(files: dict[str, str]):  # type: ignore[no-untyped-def]
    return lambda path: files.get(str(path))


def v1(directory: str, quota: int, period: int = 100_000) -> dict[str, str]:
    """The two cgroup v1 files of one directory under the `cpu` controller's mount."""
    return {
        f"{directory}/cpu.cfs_period_us": str(period),
        f"{directory}/cpu.cfs_quota_us": str(quota),
    }


def test_v1_the_containers_quota_is_the_limit() -> None:
    mount = "/sys/fs/cgroup/cpu,cpuacct"
    files = {
        **v1(mount, -1),
        **v1(f"{mount}/kubepods/pod1", 110_000),
        **v1(f"{mount}/kubepods/pod1/c1", 60_000),
    }
    text = "11:memory:/kubepods/pod1/c1\n4:cpu,cpuacct:/kubepods/pod1/c1\n"
    assert cpu_limit_millis(text, reader(files), ROOT) == 600


def test_v1_a_tighter_parent_quota_wins() -> None:
    mount = "/sys/fs/cgroup/cpu"
    files = {**v1(mount, -1), **v1(f"{mount}/a", 25_000), **v1(f"{mount}/a/b", -1, period=50_000)}
    assert cpu_limit_millis("1:cpu:/a/b\n2:cpuacct:/a/b\n", reader(files), ROOT) == 250


def test_v1_in_a_container_whose_mount_is_its_own_cgroup() -> None:
    """/proc/self/cgroup shows the host's path; the mount's root is the container's cgroup."""
    files = {
        "/sys/fs/cgroup/cpu/cpu.cfs_period_us": "100000",
        "/sys/fs/cgroup/cpu/cpu.cfs_quota_us": "200000",
    }
    assert cpu_limit_millis("3:cpu:/kubepods/burstable/pod9/abc\n", reader(files), ROOT) == 2000


def test_v2_cpu_max() -> None:
    files = {
        "/sys/fs/cgroup/kubepods.slice/cpu.max": "max 100000\n",
        "/sys/fs/cgroup/kubepods.slice/pod.slice/cpu.max": "150000 100000\n",
        "/sys/fs/cgroup/kubepods.slice/pod.slice/c.scope/cpu.max": "50000 100000\n",
    }
    assert cpu_limit_millis("0::/kubepods.slice/pod.slice/c.scope\n", reader(files), ROOT) == 500


def test_no_quota_anywhere_is_no_limit() -> None:
    files = {"/sys/fs/cgroup/cpu/cpu.cfs_period_us": "100000", "/sys/fs/cgroup/cpu/cpu.cfs_quota_us": "-1"}
    assert cpu_limit_millis("1:cpu:/\n0::/\n", reader(files), ROOT) is None
    assert (
        cpu_limit_millis(
            "0::/user.slice\n", reader({"/sys/fs/cgroup/user.slice/cpu.max": "max 100000"}), ROOT
        )
        is None
    )
    assert cpu_limit_millis("", reader({}), ROOT) is None
