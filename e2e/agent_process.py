"""The node agent's container processes, as its shim records them (survives the agent's restarts).

Each start of a container is a run directory: `child.json` (written by `agent_shim.py`
once the process runs: PIDs and start times) and `exit.json` (once it ended). A PID
counts only with its recorded start time, so a reused PID is never signalled.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tailpilot_e2e import host_addresses

SHIM = Path(__file__).resolve().parent / "agent_shim.py"
#: Run first, inside a container's own mount namespace, by images that need one (`agent_mounts`).
MOUNT_HELPER = Path(__file__).resolve().parent / "agent_mounts.py"


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        data: dict[str, Any] = json.loads(path.read_text())
        return data
    except (FileNotFoundError, json.JSONDecodeError):
        return None


def _start_ticks(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[1].split()
    return None if fields[0] == "Z" else int(fields[19])


@dataclass
class Run:
    """One start of a container: its directory holds child.json and, once it ended, exit.json."""

    dir: Path
    shim: subprocess.Popen[bytes] | None = None  # None when adopted from a previous agent

    def child(self) -> dict[str, Any] | None:
        return _read_json(self.dir / "child.json")

    def exit(self) -> dict[str, Any] | None:
        return _read_json(self.dir / "exit.json")

    def alive_pid(self) -> int | None:
        """The container process' PID if it still runs (and is the same process)."""
        child = self.child()
        if child is None:
            return None
        ticks = _start_ticks(int(child["pid"]))
        return int(child["pid"]) if ticks == child["startTicks"] else None

    def signal(self, sig: signal.Signals) -> None:
        pid = self.alive_pid()
        if pid is not None:
            try:
                os.killpg(pid, sig)
            except ProcessLookupError:
                pass

    def ended(self) -> dict[str, Any] | None:
        """exit.json once the process ended; a synthesized one if the shim died without writing it."""
        if self.shim is not None:
            self.shim.poll()  # reap the shim of a process we started
        result = self.exit()
        if result is not None:
            return result
        child = self.child()
        if self.shim is not None:
            shim_gone = self.shim.returncode is not None
        else:  # adopted: the shim is not our child; it is gone when its PID no longer names it
            shim_gone = child is None or _start_ticks(int(child.get("shimPid", -1))) != child.get(
                "shimStartTicks"
            )
        if child is not None and self.alive_pid() is None and shim_gone:
            result = _read_json(self.dir / "exit.json")  # the shim may have written it meanwhile
            return result or {
                "exitCode": 137,
                "signal": 9,
                "startedAt": child["startedAt"],
                "finishedAt": time.time(),
                "reason": "Unknown",
            }
        if child is None and shim_gone:
            return {
                "exitCode": 128,
                "signal": None,
                "startedAt": time.time(),
                "finishedAt": time.time(),
                "reason": "StartError",
            }
        return None


def container_dir(pod_dir: Path, name: str, *, init: bool) -> Path:
    """Where a container's runs live in its pod's directory."""
    return pod_dir / ("init" if init else "containers") / name


def container_dirs(pod_dir: Path) -> list[Path]:
    """Every container directory of a pod (init containers first)."""
    return [*pod_dir.glob("init/*"), *pod_dir.glob("containers/*")]


def runs_of(container: Path) -> list[Path]:
    """A container's run directories in start order (`run-0`, `run-1`, ...)."""
    return sorted(container.glob("run-*"), key=lambda p: int(p.name.split("-")[1]))


def pod_runs(pod_dir: Path) -> list[Run]:
    """Every run of every container of a pod."""
    return [Run(run) for container in container_dirs(pod_dir) for run in runs_of(container)]


def running_processes(state_dir: Path, pod_uid: str | None = None) -> dict[str, int]:
    """`<pod uid>/<container>` -> PID of each container process that runs now (all pods, or one)."""
    out = {}
    for pod_dir in state_dir.glob(f"pods/{pod_uid or '*'}"):
        for container in container_dirs(pod_dir):
            runs = runs_of(container)
            pid = Run(runs[-1]).alive_pid() if runs else None
            if pid is not None:
                out[f"{pod_dir.name}/{container.name}"] = pid
    return out


def release_address(pod_dir: Path) -> None:
    """Take the pod's address (its `ip` file) off this machine."""
    ip_file = pod_dir / "ip"
    if ip_file.exists():
        host_addresses.remove(ip_file.read_text().strip())


def kill_all(state_dir: Path, grace_s: float = 5.0) -> int:
    """Stop every container process recorded under the agent's state dir (after the agent stopped).

    The pods' addresses go with them (their records stay: a restarted agent adds them again).
    """
    runs = [run for pod_dir in state_dir.glob("pods/*") for run in pod_runs(pod_dir)]
    alive = [r for r in runs if r.alive_pid() is not None]
    for r in alive:
        r.signal(signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while any(r.alive_pid() is not None for r in alive) and time.monotonic() < deadline:
        time.sleep(0.1)  # bounded wait for processes to exit
    for r in alive:
        r.signal(signal.SIGKILL)
    for pod_dir in state_dir.glob("pods/*"):
        release_address(pod_dir)
    return len(alive)
