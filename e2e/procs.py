"""Start, watch and stop the cluster's component processes, by PID.

Each component runs in its own session (process group) with its output in a
log file under the state dir, and its PID in `<name>.pid`. Stopping sends
SIGTERM to the group, waits, then SIGKILL; a PID is only signalled if its
command line still names the binary we started (PIDs get reused).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

#: Components started by this Python process, by PID: kept referenced so they are not reported as
#: leaked while they run on purpose after `start()` returns, and reaped when `stop()` ends them.
_CHILDREN: dict[int, subprocess.Popen[bytes]] = {}


class ClusterError(RuntimeError):
    """A component could not be started; the message names it and its log file."""


@dataclass(frozen=True)
class Component:
    """One process of the cluster and how to tell it is ready."""

    name: str
    argv: Sequence[str]
    ports: Sequence[int]
    is_ready: Callable[[], bool]
    ready_timeout_s: float = 60.0
    env: dict[str, str] | None = None


def port_in_use(port: int, host: str = "127.0.0.1") -> bool:
    """True when something already listens on (or holds) host:port."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return True
    return False


def http_ok(url: str, *, timeout_s: float = 2.0) -> bool:
    """True when `url` answers 200 (another status, or no answer: False): a health check."""
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:  # noqa: S310 - our own loopback URLs
            return bool(response.status == 200)
    except OSError:
        return False


def log_tail(path: Path, lines: int = 15) -> str:
    """Last lines of a log file, for error messages."""
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except FileNotFoundError:
        return "(no log written)"


def read_pid(pid_file: Path) -> int | None:
    """The PID recorded for a component, if the file exists and parses."""
    try:
        return int(pid_file.read_text().strip())
    except (FileNotFoundError, ValueError):
        return None


def pid_runs(pid: int, binary: str | None = None) -> bool:
    """True when `pid` is alive (and, if given, still runs `binary`)."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return False
    if stat.rsplit(")", 1)[-1].split()[0] == "Z":  # a zombie is not running
        return False
    return binary is None or binary.encode() in cmdline


def start(component: Component, *, state: Path) -> int:
    """Start a component and wait until it is ready; raise ClusterError naming it otherwise."""
    log_file = state / "logs" / f"{component.name}.log"
    log_file.parent.mkdir(parents=True, exist_ok=True)
    for port in component.ports:
        if port_in_use(port):
            raise ClusterError(
                f"{component.name}: port 127.0.0.1:{port} is already in use by another process; "
                f"stop it or set TAILPILOT_CLUSTER_PORT_OFFSET (log: {log_file})"
            )
    with log_file.open("ab") as log:
        process = subprocess.Popen(  # noqa: S603 - argv built from our own config
            list(component.argv),
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            env={**os.environ, **(component.env or {})},
        )
    _CHILDREN[process.pid] = process
    (state / f"{component.name}.pid").write_text(f"{process.pid}\n")
    deadline = time.monotonic() + component.ready_timeout_s
    while True:
        code = process.poll()
        if code is not None:
            _CHILDREN.pop(process.pid, None)
            raise ClusterError(
                f"{component.name} exited with code {code} before becoming ready; log: {log_file}\n"
                f"{log_tail(log_file)}"
            )
        if _safe_ready(component.is_ready):
            return process.pid
        if time.monotonic() > deadline:
            raise ClusterError(
                f"{component.name} did not become ready within {component.ready_timeout_s:.0f}s; "
                f"log: {log_file}\n{log_tail(log_file)}"
            )
        time.sleep(0.2)  # polling a health endpoint between bounded retries, not a synchronization sleep


def _safe_ready(check: Callable[[], bool]) -> bool:
    try:
        return check()
    except OSError:
        return False


def stop(name: str, *, state: Path, binary: str | None = None, grace_s: float = 10.0) -> bool:
    """Stop a component by its PID file; True if a process was stopped."""
    pid_file = state / f"{name}.pid"
    pid = read_pid(pid_file)
    stopped = False
    if pid is not None and pid_runs(pid, binary):
        _signal_group(pid, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        while pid_runs(pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        if pid_runs(pid):
            _signal_group(pid, signal.SIGKILL)
            deadline = time.monotonic() + 5
            while pid_runs(pid) and time.monotonic() < deadline:
                time.sleep(0.05)
        stopped = True
    if pid is not None and pid in _CHILDREN:
        _CHILDREN.pop(pid).wait(timeout=5)  # reap our own child
    pid_file.unlink(missing_ok=True)
    return stopped


def _signal_group(pid: int, sig: signal.Signals) -> None:
    try:
        os.killpg(pid, sig)
    except ProcessLookupError:
        return
    except PermissionError:
        os.kill(pid, sig)
