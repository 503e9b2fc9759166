"""CPU limits of the node agent's containers: the kubelet's quota arithmetic, and the kernel enforcing it."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tailpilot_e2e.agent_cgroups import CFS_PERIOD_US, CpuCgroups, cfs_quota_us
from tailpilot_e2e.agent_process import SHIM, Run
from tailpilot_e2e.wait import eventually


def writable_cgroups(tmp_path: Path) -> CpuCgroups:
    """The agent cgroups of a test under `tmp_path`; the test fails where they cannot be made."""
    cgroups = CpuCgroups.of(tmp_path)
    if not cgroups.available():
        pytest.fail("cgroup v1 cpu/cpuacct are not writable: the node agent cannot enforce CPU limits")
    return cgroups


def start_in(tmp_path: Path, procs: list[Path], *argv: str) -> tuple[Path, subprocess.Popen[bytes]]:
    """Start `argv` through the shim, as the agent starts containers, in the cgroups of `procs`.

    Its output goes to tmp_path/log; returns the shim's run directory and process.
    """
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    shim = subprocess.Popen(  # noqa: S603
        [
            sys.executable, "-I", "-S", str(SHIM), str(run_dir), str(tmp_path / "log"), str(tmp_path),
            *map(str, procs), "--", *argv,
        ]
    )  # fmt: skip
    return run_dir, shim


def test_the_quota_is_the_kubelets() -> None:
    assert cfs_quota_us("250m") == 25_000  # milliCPU * period / 1000 over the 100 ms period
    assert cfs_quota_us("2") == 2 * CFS_PERIOD_US
    assert cfs_quota_us("1m") == 1_000  # the kernel's minimum
    assert cfs_quota_us(None) is None
    assert cfs_quota_us("0") is None


def test_a_container_under_a_quota_uses_no_more_cpu_than_its_limit(tmp_path: Path) -> None:
    """Through the shim, as the agent starts containers: two busy children share a 200m limit."""
    cgroups = writable_cgroups(tmp_path)
    procs = cgroups.create("pod-uid", "main", cfs_quota_us("200m"))
    busy = f"{sys.executable} -c 'while True: pass'"
    run_dir, shim = start_in(tmp_path, procs, "sh", "-c", f"{busy} & {busy} & wait")
    try:
        eventually(
            lambda: (cgroups.cpu_seconds("pod-uid", "main") or 0) > 0.05,
            timeout=10,
            description="the busy children run in the container's cgroup",
        )
        before, started = cgroups.cpu_seconds("pod-uid", "main"), time.monotonic()
        time.sleep(2.0)  # the interval the CPU time is measured over, not a synchronization
        after, elapsed = cgroups.cpu_seconds("pod-uid", "main"), time.monotonic() - started
        assert before is not None and after is not None
        share = (after - before) / elapsed
        # Two busy processes would take both cores (2.0) unlimited; the quota holds them to 0.2.
        assert 0.1 < share < 0.3, share
        assert (cgroups.throttled_seconds("pod-uid", "main") or 0) > 0
    finally:
        Run(run_dir, shim).signal(signal.SIGKILL)
        shim.wait(timeout=10)

    def removed() -> bool:
        cgroups.remove()
        return cgroups.cpu_seconds("pod-uid", "main") is None

    eventually(removed, timeout=10, description="the container's cgroups go once its processes are gone")


def test_a_build_in_a_limited_container_reads_its_limit(tmp_path: Path) -> None:
    """What the engine's profile records as the CPU limit it was measured under, from the kernel."""
    cgroups = writable_cgroups(tmp_path)
    procs = cgroups.create("pod-uid", "build", cfs_quota_us("600m"))
    read_limit = "from tailpilot.builders.cpu_quota import current_cpu_limit_millis as m; print('limit', m())"
    run_dir, shim = start_in(tmp_path, procs, sys.executable, "-P", "-c", read_limit)
    try:
        assert shim.wait(timeout=60) == 0
    finally:
        Run(run_dir, shim).signal(signal.SIGKILL)
    assert "limit 600" in (tmp_path / "log").read_text()
    cgroups.remove()


def gone(pid: int) -> bool:
    """The process ended (reaped, or a zombie its new parent has not reaped yet)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def test_a_process_left_in_a_containers_cgroup_is_killed_with_the_pod(tmp_path: Path) -> None:
    """A child in its own session outlives the container's main process; the pod's end kills it."""
    cgroups = writable_cgroups(tmp_path)
    procs = cgroups.create("pod-uid", "main", None)
    pid_file = tmp_path / "orphan.pid"
    run_dir, shim = start_in(tmp_path, procs, "sh", "-c", f"setsid sleep 300 & echo $! > {pid_file}; exit 0")
    shim.wait(timeout=30)
    orphan = int(eventually(lambda: pid_file.exists() and pid_file.read_text().strip(), timeout=10))
    assert Path(f"/proc/{orphan}").exists()  # the main process is gone, its child is not
    assert cgroups.remove("pod-uid") == 0  # a cgroup holding a process stays
    # One call, as the agent makes it when the pod ends: killed, waited for, and the cgroups gone.
    assert cgroups.release("pod-uid") == 1
    assert gone(orphan)
    assert cgroups.cpu_seconds("pod-uid", "main") is None, "the emptied cgroups are removed at once"
