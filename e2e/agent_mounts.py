"""The node agent's mount helper: a container's volumes at their mountPaths, in a mount namespace of its own.

Most containers do without it: the agent rewrites the absolute paths of their command,
args and env into the pod's directory (`agent_pod.rewrite_paths`). A program that opens
an absolute path of its own, like the operator reading its ServiceAccount token at
/var/run/secrets/kubernetes.io/serviceaccount/token (the Kubernetes client's in-cluster
configuration), needs the volume really there. For images whose table entry asks for
it (`ImageEntry.mount_namespace`), the agent starts the container as

    unshare -m --propagation private PYTHON -I -S agent_mounts.py PLAN -- ARGV...

and this script, inside the new (private) mount namespace, bind-mounts each volume's
directory onto its mountPath (read-only where the mount says so), then execs ARGV, so the
container process keeps this PID and nothing of it is visible outside the namespace.

A mountPath that does not exist on this machine is made without touching the host: the
nearest directory above it that exists gets a writable overlay (its upper layer in the
pod's directory), in which the missing directories are created. Never `/` itself (an
overlay of the root would hide /proc, /dev and every other mount): a missing mountPath right
under it (Prometheus' `/prometheus`) is left out, with a line in the container's log; the
agent's path rewriting still points the container's command, args and env into the pod's
directory, so only a path the program opens of its own would miss it. A mountPath that would
hide what the container needs from this machine (its executable, the interpreter, the
pod's directory: a checkout under /tmp and a /tmp emptyDir) is left out, with a line in
the container's log: the agent's path rewriting still points its command and env there.

Standard library only, run as a script (like `agent_shim.py`).

    PLAN: {"scratch": DIR, "keep": [PATH, ...],
           "mounts": [{"source": DIR, "target": MOUNT_PATH, "readOnly": BOOL}, ...]}
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any


class MountError(RuntimeError):
    """A mount could not be made; the message says which and why."""


def _mount(*args: str) -> None:
    result = subprocess.run(["mount", *args], capture_output=True, text=True, check=False)  # noqa: S603, S607
    if result.returncode != 0:
        raise MountError(f"mount {' '.join(args)}: {result.stderr.strip()}")


def _covers(outer: str, inner: str) -> bool:
    return inner == outer or inner.startswith(outer.rstrip("/") + "/")


def _existing_ancestor(path: str) -> str:
    current = os.path.dirname(path.rstrip("/")) or "/"
    while not os.path.isdir(current):
        current = os.path.dirname(current) or "/"
    return os.path.realpath(current)


class RootOnlyError(MountError):
    """Only `/` exists above a missing mountPath, and `/` is never overlaid."""


def make_room(target: str, scratch: Path, overlays: list[str]) -> None:
    """Create the missing directory `target` inside an overlay of the nearest directory that exists."""
    if os.path.isdir(target):
        return
    above = _existing_ancestor(target)
    if not any(_covers(o, above) for o in overlays):
        if above == "/":
            raise RootOnlyError(f"cannot make {target}: only / exists above it, and / is never overlaid")
        layer = scratch / f"overlay-{len(overlays)}"
        (layer / "upper").mkdir(parents=True, exist_ok=True)
        (layer / "work").mkdir(parents=True, exist_ok=True)
        _mount(
            "-t",
            "overlay",
            "overlay",
            "-o",
            f"lowerdir={above},upperdir={layer / 'upper'},workdir={layer / 'work'}",
            above,
        )
        overlays.append(above)
    os.makedirs(target, exist_ok=True)


def apply(plan: dict[str, Any], log: list[str]) -> None:
    """Make every mount of the plan, parents first (the agent orders them)."""
    scratch = Path(str(plan["scratch"]))
    keep = [os.path.realpath(str(k)) for k in plan.get("keep") or []]
    overlays: list[str] = []
    for mount in plan["mounts"]:
        target, source = str(mount["target"]), str(mount["source"])
        try:
            if not os.path.exists(target):
                if os.path.isfile(source):  # a file (subPath) is mounted onto a file
                    make_room(os.path.dirname(target), scratch, overlays)
                    Path(target).touch()
                else:
                    make_room(target, scratch, overlays)
        except RootOnlyError as error:
            log.append(f"node agent: {target} not mounted: {error}")
            continue
        real = os.path.realpath(target)
        hidden = [k for k in keep if _covers(real, k)]
        if hidden:
            log.append(
                f"node agent: {target} not mounted: it would hide {hidden[0]}, which the container needs"
            )
            continue
        _mount("--bind", source, target)
        if mount.get("readOnly"):
            _mount("-o", "remount,bind,ro", target)


def main(argv: list[str]) -> int:
    """Mount the plan's volumes, then exec the container's command."""
    separator = argv.index("--")
    plan = json.loads(Path(argv[0]).read_text())
    command = argv[separator + 1 :]
    log: list[str] = []
    try:
        apply(plan, log)
    except (MountError, OSError) as error:
        print(f"node agent: cannot mount the pod's volumes: {error}", file=sys.stderr, flush=True)
        return 128
    for line in log:
        print(line, file=sys.stderr, flush=True)
    os.execvp(command[0], command)  # noqa: S606 - the container's own command


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
