"""A real local Triton Inference Server, started and stopped by PID (I/O module).

Used by the profiler, the builder's tests, the benchmark's validation and the
autoscaler's tests. It runs the `tritonserver` 2.51 binary that the PyPI
package `nvidia-pytriton` bundles, which has only the Python backend.

Facts about that binary this module works around (found on Debian 12 with Python 3.11):

- The wheel's `backends/python` lacks the stub, so a backend directory is built
  with symlinks to `libtriton_python.so`, `triton_python_backend_utils.py` and
  `python_backend_stubs/3.11/triton_python_backend_stub`. Symlinks (not
  copies) keep the stub's RPATH to `nvidia_pytriton.libs` working.
- The stub finds numpy/onnxruntime through the interpreter on PATH, so the
  running venv's `bin` goes first on PATH.
- When the stub fails to load, the server can stay un-ready forever, so start
  always waits for `/v2/health/ready` (and the metrics page, which opens after it) with a
  timeout and raises with the log tail.

Only 127.0.0.1 is bound. Ports are free ones picked by the OS unless given. That is also why its
admin APIs (model load/unload) are left open, unlike a serving pod's
(`tailpilot.manifests.triton_access`): only processes of the same host, or of the same pod where a
Job runs it, can reach it, and it lives for one measurement. Where a test needs them restricted, it
passes the flags in `extra_args`. The profile Job's Triton is not this one: it is the service's own
container, on the pod's address, and restricted like the serving pods.
"""

from __future__ import annotations

import importlib.util
import os
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

#: Python version of the backend stub; must match the interpreter whose packages the models import.
STUB_PYTHON = f"{sys.version_info.major}.{sys.version_info.minor}"


class TritonStartError(RuntimeError):
    """Triton did not become ready (exited or timed out); the message carries the log tail."""


@dataclass(frozen=True)
class TritonPorts:
    """HTTP, gRPC and metrics ports on 127.0.0.1."""

    http: int
    grpc: int
    metrics: int


def pytriton_home() -> Path:
    """Directory of the `tritonserver` tree bundled with nvidia-pytriton.

    Raises:
        TritonStartError: When nvidia-pytriton is not installed.
    """
    # find_spec locates the package without importing it (its import loads the whole client, ~1 s).
    spec = importlib.util.find_spec("pytriton")
    if spec is None or spec.origin is None:
        raise TritonStartError("nvidia-pytriton is not installed (pip install 'tailpilot[triton]')")
    return Path(spec.origin).parent / "tritonserver"


def local_backends() -> frozenset[str]:
    """Backends the local Triton can run ("python" with nvidia-pytriton; empty when it is missing)."""
    try:
        home = pytriton_home()
    except TritonStartError:
        return frozenset()
    stub = home / "python_backend_stubs" / STUB_PYTHON / "triton_python_backend_stub"
    return frozenset({"python"}) if stub.is_file() else frozenset()


def make_backend_dir(dest: Path, *, home: Path | None = None) -> Path:
    """Create `dest/python` with symlinks forming a complete Python backend; return `dest`."""
    home = home or pytriton_home()
    python_dir = dest / "python"
    python_dir.mkdir(parents=True, exist_ok=True)
    links = {
        "libtriton_python.so": home / "backends" / "python" / "libtriton_python.so",
        "triton_python_backend_utils.py": home / "backends" / "python" / "triton_python_backend_utils.py",
        "triton_python_backend_stub": home
        / "python_backend_stubs"
        / STUB_PYTHON
        / "triton_python_backend_stub",
    }
    for name, target in links.items():
        if not target.exists():
            raise TritonStartError(f"nvidia-pytriton is missing {target}")
        link = python_dir / name
        if link.is_symlink() or link.exists():
            link.unlink()
        link.symlink_to(target)
    return dest


def free_port() -> int:
    """Return a TCP port on 127.0.0.1 that was free a moment ago, below the ephemeral range.

    The OS's own pick (binding port 0) comes from the ephemeral range, which every outgoing
    connection draws from too: one took such a port before the operator bound it as its metrics
    port (fresh-clone CI run of 2026-11-30 02:40 UTC, "Address already in use"). Below that range
    only servers bind, so only another pick like this one can race it.
    """
    first_ephemeral = _first_ephemeral_port()
    for _ in range(200):
        port = secrets.randbelow(first_ephemeral - _LOWEST_PICKED_PORT) + _LOWEST_PICKED_PORT
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:  # all taken: let the OS pick
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


_LOWEST_PICKED_PORT = 10000


def _first_ephemeral_port() -> int:
    """The low end of Linux's ephemeral port range (32768 when it cannot be read)."""
    try:
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    return max(low, _LOWEST_PICKED_PORT + 1000)


def tritonserver_command(
    *,
    binary: Path,
    model_repository: Path,
    backend_directory: Path,
    ports: TritonPorts,
    explicit_models: Sequence[str] | None = None,
    extra_args: Sequence[str] = (),
) -> list[str]:
    """Build the `tritonserver` command line (pure).

    Args:
        binary: Path of the `tritonserver` executable.
        model_repository: Model repository directory.
        backend_directory: Directory holding `python/` (see `make_backend_dir`).
        ports: Ports to bind on 127.0.0.1.
        explicit_models: None for Triton's default mode (load everything in the repository);
            otherwise explicit model-control mode, loading these models at start.
        extra_args: Appended verbatim.
    """
    cmd = [
        str(binary),
        f"--model-repository={model_repository}",
        f"--backend-directory={backend_directory}",
        "--http-address=127.0.0.1",
        f"--http-port={ports.http}",
        "--grpc-address=127.0.0.1",
        f"--grpc-port={ports.grpc}",
        "--metrics-address=127.0.0.1",
        f"--metrics-port={ports.metrics}",
        # Per-model latency quantiles; the autoscaler's tests read them.
        "--metrics-config=summary_latencies=true",
        "--exit-timeout-secs=5",
    ]
    if explicit_models is not None:
        cmd.append("--model-control-mode=explicit")
        cmd += [f"--load-model={name}" for name in explicit_models]
    return cmd + list(extra_args)


class TritonServer:
    """A local `tritonserver` process; use as a context manager.

    Example:
        with TritonServer(repo) as server:
            httpx.post(f"{server.http_url}/v2/models/model/infer", json=...)
    """

    def __init__(
        self,
        model_repository: Path | str,
        *,
        ports: TritonPorts | None = None,
        explicit_models: Sequence[str] | None = None,
        ready_timeout_s: float = 60.0,
        work_dir: Path | str | None = None,
        extra_args: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
        preexec: Callable[[], None] | None = None,
    ) -> None:
        """Prepare (but do not start) a server.

        Args:
            model_repository: Model repository directory.
            ports: Ports to use; free ones are picked when None.
            explicit_models: See `tritonserver_command`.
            ready_timeout_s: How long `start` waits for readiness before failing.
            work_dir: Where the backend directory and `triton.log` go (a temp dir when None).
            extra_args: Extra `tritonserver` arguments.
            env: Extra environment variables for the server (e.g. OMP_NUM_THREADS).
            preexec: Run in the child before `tritonserver` starts (e.g. joining a cgroup, setting
                the CPU affinity), so the server and every process it forks inherit it.
        """
        self.model_repository = Path(model_repository).resolve()
        self.ports = ports or TritonPorts(http=free_port(), grpc=free_port(), metrics=free_port())
        self.explicit_models = explicit_models
        self.ready_timeout_s = ready_timeout_s
        self.extra_args = tuple(extra_args)
        self.extra_env = dict(env or {})
        self.preexec = preexec
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        if work_dir is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="tailpilot-triton-")
            work_dir = self._tmp.name
        self.work_dir = Path(work_dir)
        self.log_path = self.work_dir / "triton.log"
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def http_url(self) -> str:
        """Base URL of the HTTP/REST endpoint."""
        return f"http://127.0.0.1:{self.ports.http}"

    @property
    def grpc_url(self) -> str:
        """host:port of the gRPC endpoint (tritonclient's form, no scheme)."""
        return f"127.0.0.1:{self.ports.grpc}"

    @property
    def metrics_url(self) -> str:
        """URL of the Prometheus metrics page."""
        return f"http://127.0.0.1:{self.ports.metrics}/metrics"

    @property
    def pid(self) -> int:
        """PID of the running server."""
        if self._proc is None:
            raise RuntimeError("Triton is not started")
        return self._proc.pid

    def start(self) -> TritonServer:
        """Start the server and wait until `/v2/health/ready` answers 200.

        Raises:
            TritonStartError: The server exited or was not ready within `ready_timeout_s`
                (it is stopped first; the message carries the log tail).
        """
        if self._proc is not None and self._proc.poll() is None:
            return self  # already running: `with TritonServer(...).start()` must not start a second server
        home = pytriton_home()
        backend_dir = make_backend_dir(self.work_dir / "backends", home=home)
        cmd = tritonserver_command(
            binary=home / "bin" / "tritonserver",
            model_repository=self.model_repository,
            backend_directory=backend_dir,
            ports=self.ports,
            explicit_models=self.explicit_models,
            extra_args=self.extra_args,
        )
        env = dict(os.environ)
        env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
        env.update(self.extra_env)
        with self.log_path.open("ab") as log:
            self._proc = subprocess.Popen(
                cmd, stdout=log, stderr=subprocess.STDOUT, env=env, preexec_fn=self.preexec
            )
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_ready(self) -> None:
        import httpx  # here, so that importing this module (e.g. for local_backends) stays cheap

        deadline = time.monotonic() + self.ready_timeout_s
        with httpx.Client(timeout=2.0) as client:
            while True:
                assert self._proc is not None
                code = self._proc.poll()
                if code is not None:
                    raise TritonStartError(f"tritonserver exited with code {code}:\n{self.log_tail()}")
                try:
                    # Triton opens its metrics port after its HTTP port: a caller that reads the
                    # page at once (the pod-signals reader) would otherwise find it closed.
                    if (
                        client.get(f"{self.http_url}/v2/health/ready").status_code == 200
                        and client.get(self.metrics_url).status_code == 200
                    ):
                        return
                except httpx.TransportError:
                    pass  # not listening yet
                if time.monotonic() > deadline:
                    raise TritonStartError(
                        f"tritonserver not ready after {self.ready_timeout_s:.0f} s:\n{self.log_tail()}"
                    )
                time.sleep(0.1)  # poll interval of a bounded wait, not a synchronization

    def log_tail(self, lines: int = 40) -> str:
        """Last lines of the server log."""
        try:
            text = self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])

    def stop(self, timeout_s: float = 10.0) -> None:
        """Stop the server by PID: SIGTERM, then SIGKILL after `timeout_s`. Idempotent."""
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=timeout_s)

    def close(self) -> None:
        """Stop the server and remove its temporary work directory (if it made one)."""
        self.stop()
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    def __enter__(self) -> TritonServer:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
