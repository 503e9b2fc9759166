"""`make bench`'s pages rerun beside the IO-bound tiers, for the test that compares them.

The published-pages drift test reruns the whole policy benchmark (about 550 s of two cores'
work). Run in line it adds those minutes to `make test`; the local-cluster tiers before the
real-pods one mostly wait on the API server, so one core sits idle for most of them. This plugin
starts the same commands `make bench` runs (`tailpilot.bench.run`, `tailpilot.bench.gpu_products`,
`tailpilot.bench.scale_to_zero`), at the lowest CPU priority, when collection ends, and moves the
tests marked `background_bench` to just before the first real-pods test: by then the run is
usually done, and the timing-sensitive real-pods tests never share the CPU with it.

The run is the one `make bench` does, at its defaults; the tests wait for it (bounded by their own
timeout) and read its output directory through `background_bench_out`. The process group is
stopped at the session's end if it still runs. A selection without a marked test starts nothing.
"""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest

MARKER = "background_bench"
#: Tests under this folder measure latency on real processes; the background run must be over first.
TIMING_SENSITIVE_PREFIX = "tests/real_pods/"
LOG_TAIL_CHARS = 4000
#: Where in the output folder the GPU product page is written.
GPU_PRODUCTS_PAGE = "gpu-products.md"
#: Where in the output folder the scale-to-zero page is written.
SCALE_TO_ZERO_PAGE = "scale-to-zero.md"


@dataclass
class BenchRun:
    """The background benchmark: its process group, where it writes, and its log."""

    process: subprocess.Popen[bytes]
    out: Path
    log: Path

    def wait(self, timeout_s: float) -> Path:
        """Its output folder once it has exited 0; fails the test with its log's tail otherwise."""
        try:
            code = self.process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the background benchmark ran past {timeout_s:g} s; log: {self.log}")
        if code != 0:
            tail = self.log.read_text(errors="replace")[-LOG_TAIL_CHARS:]
            pytest.fail(f"the background benchmark exited {code}:\n{tail}")
        return self.out

    def stop(self) -> None:
        """Stop its whole process group (the benchmark forks workers), then remove its files."""
        if self.process.poll() is None:
            for sig, wait_s in ((signal.SIGTERM, 10.0), (signal.SIGKILL, 10.0)):
                try:
                    os.killpg(self.process.pid, sig)
                except ProcessLookupError:
                    break
                try:
                    self.process.wait(timeout=wait_s)
                    break
                except subprocess.TimeoutExpired:
                    continue
        shutil.rmtree(self.out.parent, ignore_errors=True)


_RUN_KEY = pytest.StashKey[BenchRun]()


def bench_commands(out: Path) -> list[str]:
    """`make bench`'s commands, at the lowest CPU priority, writing into `out`."""
    python = shlex.quote(sys.executable)
    script = (
        f"{python} -P -m tailpilot.bench.run --out {shlex.quote(str(out))}"
        f" && {python} -P -m tailpilot.bench.gpu_products --out {shlex.quote(str(out / GPU_PRODUCTS_PAGE))}"
        f" && {python} -P -m tailpilot.bench.scale_to_zero --out {shlex.quote(str(out / SCALE_TO_ZERO_PAGE))}"
    )
    return ["nice", "-n", "19", "bash", "-c", script]


def start(out_root: Path) -> BenchRun:
    """Start the run in its own process group; its output goes under `out_root`."""
    out = out_root / "bench"
    out.mkdir()
    log = out_root / "bench.log"
    with log.open("wb") as fh:
        process = subprocess.Popen(
            bench_commands(out),
            stdout=fh,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    return BenchRun(process=process, out=out, log=log)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        f"{MARKER}: reads `make bench`'s pages from the run started in the background at collection's end",
    )


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Move the marked tests to just before the first timing-sensitive one, in their own order."""
    marked = [item for item in items if item.get_closest_marker(MARKER) is not None]
    if not marked:
        return
    rest = [item for item in items if item.get_closest_marker(MARKER) is None]
    root = Path(str(config.rootpath))
    at = next(
        (
            i
            for i, item in enumerate(rest)
            if Path(str(item.path)).relative_to(root).as_posix().startswith(TIMING_SENSITIVE_PREFIX)
        ),
        len(rest),
    )
    items[:] = [*rest[:at], *marked, *rest[at:]]


def pytest_collection_finish(session: pytest.Session) -> None:
    if session.config.option.collectonly:
        return
    if any(item.get_closest_marker(MARKER) is not None for item in session.items):
        session.config.stash[_RUN_KEY] = start(Path(tempfile.mkdtemp(prefix="tailpilot-bench-")))


def pytest_sessionfinish(session: pytest.Session) -> None:
    run = session.config.stash.get(_RUN_KEY, None)
    if run is not None:
        run.stop()


@pytest.fixture(scope="session")
def background_bench_run(request: pytest.FixtureRequest) -> BenchRun:
    """The benchmark started at collection's end (a test using it must carry the marker)."""
    run = request.config.stash.get(_RUN_KEY, None)
    if run is None:
        raise pytest.UsageError(f"{request.node.nodeid} reads the background benchmark: mark it {MARKER}")
    return run
