"""A build killed between writing its engine and publishing it: nothing half-built is ever served.

The real `tailpilot build` runs as its own process. The test traces its main thread with ptrace
(a debugger's view of its system calls, nothing in the build's code) and SIGKILLs it at the
entry of the `rename` that would publish the engine, once the engine's files and manifest are
written into the staging directory: the worst moment to die, everything written, nothing
published. Then the store holds no engine, the next build of the same content publishes exactly
one, and the killed build's staging directory is collected once it is stale (its age set by
moving its mtimes back, as six hours would).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import platform
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tailpilot.api.engine import BuildOutcome, BuildRequest, BuildResult
from tailpilot.builders.store import MANIFEST, STALE_STAGING_S, EngineStore

pytestmark = pytest.mark.skipif(
    platform.machine() != "x86_64" or not sys.platform.startswith("linux"),
    reason="the ptrace seam reads x86-64 Linux registers",
)

PTRACE_SYSCALL, PTRACE_GETREGS, PTRACE_SETOPTIONS = 24, 12, 0x4200
PTRACE_SEIZE, PTRACE_INTERRUPT = 0x4206, 0x4207
PTRACE_O_TRACESYSGOOD = 1
#: x86-64 numbers of rename(2), renameat(2) and renameat2(2): `EngineStore.publish` is one of them.
RENAMES = {82, 264, 316}
#: orig_rax's index in x86-64's `struct user_regs_struct` (27 unsigned longs).
ORIG_RAX = 15


class _Tracer:
    """The few ptrace calls needed to stop one thread at each system call."""

    def __init__(self, pid: int) -> None:
        self.libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
        self.libc.ptrace.restype = ctypes.c_long
        self.libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p]
        self.pid = pid

    def _call(self, request: int, data: int | ctypes.c_void_p | None = None) -> None:
        arg = data if isinstance(data, ctypes.c_void_p) else ctypes.c_void_p(data or 0)
        if self.libc.ptrace(request, self.pid, None, arg) == -1:
            errno = ctypes.get_errno()
            raise OSError(errno, f"ptrace({request:#x}) of {self.pid}: {os.strerror(errno)}")

    def seize(self) -> None:
        """Attach to the main thread (its other threads run on untraced) and stop it."""
        self._call(PTRACE_SEIZE, PTRACE_O_TRACESYSGOOD)
        self._call(PTRACE_INTERRUPT)
        os.waitpid(self.pid, 0)

    def next_syscall(self) -> int | None:
        """Resume to the next system call stop; its number, or None when the process ended."""
        pending = 0
        while True:
            self._call(PTRACE_SYSCALL, pending)
            _, status = os.waitpid(self.pid, 0)
            if os.WIFEXITED(status) or os.WIFSIGNALED(status):
                return None
            sig = os.WSTOPSIG(status)
            if sig == signal.SIGTRAP | 0x80:  # a system call stop (entry or exit)
                regs = (ctypes.c_ulong * 27)()
                self._call(PTRACE_GETREGS, ctypes.cast(regs, ctypes.c_void_p))
                return int(regs[ORIG_RAX])
            # A signal for the build (or the seize's interrupt): pass real signals on.
            pending = 0 if sig == signal.SIGTRAP else sig


def staged_manifests(store: Path) -> list[Path]:
    return sorted((store / "tmp").glob(f"build-*/engine/{MANIFEST}"))


def kill_at_publish(build: subprocess.Popen[bytes], store: Path) -> None:
    """Trace the build from its "building engine" line on; SIGKILL it as it enters the publish rename."""
    assert build.stderr is not None
    for raw in build.stderr:  # bounded: the build ends, and its stderr with it
        if b"building engine" in raw:
            break
    else:
        raise AssertionError(f"the build never started building (exit {build.wait(timeout=60)})")
    tracer = _Tracer(build.pid)
    tracer.seize()
    # Its stderr is not read while it is traced: the pipe's 64 KiB hold far more than the few
    # progress lines a build writes past this point.
    while (number := tracer.next_syscall()) is not None:
        if number in RENAMES and staged_manifests(store):
            # The manifest is written last before publishing: this rename is the publish's.
            os.kill(build.pid, signal.SIGKILL)  # reaped by `build.wait`
            return
    raise AssertionError("the build ended without publishing")


def test_a_build_killed_between_write_and_publish_leaves_nothing_served_and_the_next_build_publishes(
    make_request: Callable[[], BuildRequest], store: Path, tmp_path: Path
) -> None:
    request_file = tmp_path / "request.json"
    request_file.write_text(make_request().model_dump_json(by_alias=True))
    argv = [str(Path(sys.executable).parent / "tailpilot"), "build", "--request", str(request_file)]
    with subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE) as killed:  # noqa: S603
        try:
            kill_at_publish(killed, store)
        finally:
            if killed.poll() is None:
                killed.kill()
    assert killed.returncode == -signal.SIGKILL
    engines = EngineStore(store)
    # Everything was written, nothing published: the store has no engine, its index nothing.
    (left,) = staged_manifests(store)
    assert (left.parent / "repository").is_dir()
    assert engines.published_keys() == []
    assert not engines.index.exists() or not list(engines.index.iterdir())

    # The next build of the same content publishes exactly one engine; the killed build's staging,
    # still fresh (a build could be writing it), stays.
    result_file = tmp_path / "result.json"
    second = subprocess.run(  # noqa: S603
        [*argv, "--result-file", str(result_file)], capture_output=True, timeout=300, check=False
    )
    assert second.returncode == 0, second.stderr.decode()[-2000:]
    result = BuildResult.model_validate_json(result_file.read_text())
    assert result.outcome == BuildOutcome.SUCCEEDED and not result.cache_hit
    assert engines.published_keys() == [result.engine_key]
    assert engines.damage(result.engine_key) is None
    staging = left.parents[1]
    assert staging.exists() and [p.name for p in engines.tmp.iterdir()] == [staging.name]

    # Six hours later the killed build's staging is collected by the next build, which finds the engine.
    stale = time.time() - STALE_STAGING_S - 60
    for path in (staging, *staging.iterdir()):
        os.utime(path, (stale, stale))
    third = subprocess.run(  # noqa: S603
        [*argv, "--result-file", str(result_file)], capture_output=True, timeout=300, check=False
    )
    assert third.returncode == 0, third.stderr.decode()[-2000:]
    assert f"removed the staging of 1 killed build(s): {staging.name}" in third.stderr.decode()
    assert BuildResult.model_validate_json(result_file.read_text()).engine_key == result.engine_key
    assert list(engines.tmp.iterdir()) == []
    assert engines.published_keys() == [result.engine_key]
