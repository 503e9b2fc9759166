from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tailpilot.bench.cpu_slots import CoreTimes, CpuSlot, parse_stat, quota_us


def test_quota_is_millicores_per_period_with_the_kernels_floor() -> None:
    assert quota_us(500, 10_000) == 5_000
    assert quota_us(1, 10_000) == 1_000  # below 1 ms of quota the kernel refuses
    assert quota_us(None, 10_000) == -1


def test_core_times_are_the_root_cgroups_cpu_time_per_core() -> None:
    times = CoreTimes.parse("1500000000 2250000000 \n")
    assert times.busy_s == {0: 1.5, 1: 2.25}
    later = CoreTimes({0: 2.0, 1: 2.5})
    assert later.busy_since(times, [1]) == pytest.approx(0.25)
    assert later.busy_since(times, [0, 1]) == pytest.approx(0.75)


def test_cpu_stat_parsing() -> None:
    assert parse_stat("nr_periods 10\nnr_throttled 3\nthrottled_time 4500000\nbogus\n") == {
        "nr_periods": 10,
        "nr_throttled": 3,
        "throttled_time": 4500000,
    }


def _fake_root(tmp_path: Path) -> Path:
    for controller in ("cpu", "cpuacct"):
        (tmp_path / controller).mkdir()
    (tmp_path / "cpu" / "cpu.cfs_quota_us").write_text("-1")
    return tmp_path


def test_slot_writes_period_then_quota_and_reads_usage_and_throttling(tmp_path: Path) -> None:
    root = _fake_root(tmp_path)
    assert CpuSlot.available(root)
    slot = CpuSlot("server-0", frozenset({1}), millis=500, period_us=10_000, root=root).create()
    cpu = root / "cpu" / "tailpilot-measure" / "server-0"
    assert (cpu / "cpu.cfs_period_us").read_text() == "10000"
    assert (cpu / "cpu.cfs_quota_us").read_text() == "5000"
    (root / "cpuacct" / "tailpilot-measure" / "server-0" / "cpuacct.usage").write_text("2500000000\n")
    (cpu / "cpu.stat").write_text("nr_periods 100\nnr_throttled 7\nthrottled_time 35000000\n")
    assert slot.cpu_seconds() == 2.5
    assert slot.throttling() == (7, 0.035)
    with pytest.raises(ValueError, match="period"):
        CpuSlot("x", frozenset({0}), 500, period_us=500, root=root).create()


@pytest.mark.skipif(not CpuSlot.available(), reason="needs a writable cgroup v1 cpu hierarchy")
def test_a_process_started_in_a_slot_runs_on_its_core_and_is_counted(tmp_path: Path) -> None:
    core = max(os.sched_getaffinity(0))
    slot = CpuSlot(f"test-{os.getpid()}", frozenset({core})).create()
    try:
        before = slot.cpu_seconds()
        out = subprocess.run(
            [sys.executable, "-c", "import os; sum(range(3**13)); print(sorted(os.sched_getaffinity(0)))"],
            preexec_fn=slot.join,
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
        )
        assert out.stdout.strip() == str([core])
        assert slot.cpu_seconds() > before
    finally:
        slot.remove()
