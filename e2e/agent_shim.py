"""The node agent's container shim: runs one container process and records how it ended.

Like containerd's shim, it outlives the agent: the agent can be killed and
restarted, find `child.json` (PID and start time of the container process)
and, once the process ends, `exit.json` (exit code, signal, finish time).
The container process gets its own session, so the agent signals it (and
its children, e.g. Triton's backend stubs) as one process group.

Standard library only, run as a script (`python -I -S agent_shim.py`) so it
starts fast and does not depend on the agent's environment.

    agent_shim.py RUN_DIR LOG_FILE CWD [CGROUP_PROCS...] -- ARGV...

Each CGROUP_PROCS (a cgroup's `cgroup.procs` file) is joined by the container process before it
runs its command, so the process and all its children count against that cgroup (CPU limits,
`agent_cgroups`).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path


def process_start_ticks(pid: int) -> int:
    """Start time of a process in clock ticks since boot (with the PID, identifies it despite reuse)."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat.rsplit(")", 1)[1].split()[19])


def _write_json(path: Path, data: dict[str, object]) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data))
    tmp.replace(path)


def main(argv: list[str]) -> int:
    """Start the container process, wait for it, write exit.json."""
    run_dir, log_file, cwd = Path(argv[0]), Path(argv[1]), argv[2]
    separator = argv.index("--")
    cgroups, command = argv[3:separator], argv[separator + 1 :]

    def join_cgroups() -> None:  # in the child, before exec: its children inherit the cgroups
        for procs in cgroups:
            Path(procs).write_text(str(os.getpid()))

    started = time.time()
    with log_file.open("ab") as log:
        try:
            child = subprocess.Popen(  # noqa: S603 - the pod's own command
                command,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=cwd,
                start_new_session=True,
                preexec_fn=join_cgroups if cgroups else None,  # noqa: PLW1509 - the shim has no threads
            )
        except (OSError, subprocess.SubprocessError) as error:
            log.write(f"node agent: cannot start {command[0]}: {error}\n".encode())
            _write_json(
                run_dir / "exit.json",
                {
                    "exitCode": 128,
                    "signal": None,
                    "startedAt": started,
                    "finishedAt": time.time(),
                    "reason": "StartError",
                },
            )
            return 0
    _write_json(
        run_dir / "child.json",
        {
            "pid": child.pid,
            "startTicks": process_start_ticks(child.pid),
            "startedAt": started,
            # An agent that adopts this run waits for exit.json while the shim still lives.
            "shimPid": os.getpid(),
            "shimStartTicks": process_start_ticks(os.getpid()),
        },
    )
    code = child.wait()
    signal_number = -code if code < 0 else None
    exit_code = 128 + signal_number if signal_number else code
    _write_json(
        run_dir / "exit.json",
        {"exitCode": exit_code, "signal": signal_number, "startedAt": started, "finishedAt": time.time()},
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
