r"""The open-loop load generator in a process of its own, following a changing set of replicas.

Run in the test's (or the demo's) own event loop, the client's queueing competes with
everything else that loop does and shows up as latency; as a separate process it has an
event loop (and a core, when there is one) to itself.  The CLI::

    python -P -m tailpilot.bench.loadgen_process --targets-file targets.json --model m \
        --payload-file body.bin --header Content-Type:application/json \
        --arrivals-file arrivals.npy --max-requests 5000 --max-duration-s 60 \
        --out results.json [--progress-file progress.jsonl]

replays the arrival times (seconds from the start; `.npy`, or text with one per line)
with `tailpilot.bench.loadgen.run_load` against the base URLs listed in the targets file
(a JSON list of "http://ip:port"), re-read at most every 0.5 s so pods that appear or go
away are followed; requests go round robin over the current list, and with an empty list
a request counts as the error `no_endpoint`.  The payload file is the exact HTTP body,
sent with the `--header`s (default `Content-Type: application/json`).  Every second a
`Progress` line (JSON) is appended to the progress file; at the end the `LoadResult`
(per-request scheduled/sent time, latency, status, target) is written to `--out` as
JSON, and the process exits 0.  It is bounded by `--max-requests` and
`--max-duration-s` (plus the per-request timeout for the last replies).

`LoadProcess` drives it from Python: `start()`, `set_targets()` (atomic file replace),
`progress()`, `wait()` -> `LoadResult`, `stop()`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from tailpilot.bench.loadgen import LoadResult, Payload, Progress, run_load

#: How often the targets file is re-read at most.
TARGETS_REFRESH_S = 0.5


class TargetsFile:
    """The base URLs in a JSON file, re-read at most every `refresh_s`; callable, for `run_load`.

    A missing or unreadable file keeps the last list read (empty at first): writers replace
    it atomically, so a half-written file is not expected, and a hiccup must not drop all
    replicas.
    """

    def __init__(self, path: Path, *, refresh_s: float = TARGETS_REFRESH_S) -> None:
        self.path = path
        self.refresh_s = refresh_s
        self._urls: list[str] = []
        self._read_at = -float("inf")

    def __call__(self) -> list[str]:
        now = time.monotonic()
        if now - self._read_at >= self.refresh_s:
            self._read_at = now
            try:
                doc = json.loads(self.path.read_text())
            except (OSError, ValueError):
                return self._urls
            if isinstance(doc, list) and all(isinstance(u, str) for u in doc):
                self._urls = list(doc)
        return self._urls


def write_targets(path: Path, urls: Sequence[str]) -> None:
    """Write the targets file atomically (the reader never sees a partial list)."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(list(urls)))
    tmp.replace(path)


def read_arrivals_file(path: Path) -> npt.NDArray[np.float64]:
    """Seconds from the start, as written: `.npy`, or text with one number per line (`#` comments)."""
    if path.suffix == ".npy":
        return np.asarray(np.load(path), dtype=np.float64).ravel()
    return np.loadtxt(path, dtype=np.float64, comments="#", ndmin=1)


def _parse_headers(items: Sequence[str]) -> dict[str, str]:
    headers = {}
    for item in items:
        name, sep, value = item.partition(":")
        if not sep or not name.strip():
            raise SystemExit(f"--header must be NAME:VALUE, got {item!r}")
        headers[name.strip()] = value.strip()
    return headers or {"Content-Type": "application/json"}


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI (see the module doc)."""
    parser = argparse.ArgumentParser(
        prog="python -P -m tailpilot.bench.loadgen_process",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--targets-file", type=Path, required=True)
    parser.add_argument("--model", required=True)
    parser.add_argument("--payload-file", type=Path, required=True)
    parser.add_argument("--header", action="append", default=[], help="NAME:VALUE, repeatable")
    parser.add_argument("--arrivals-file", type=Path, required=True)
    parser.add_argument("--max-requests", type=int, required=True)
    parser.add_argument("--max-duration-s", type=float, required=True)
    parser.add_argument("--max-in-flight", type=int, default=512)
    parser.add_argument("--timeout-s", type=float, default=30.0)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--progress-file", type=Path)
    args = parser.parse_args(argv)

    payload = Payload(args.payload_file.read_bytes(), _parse_headers(args.header))
    arrivals = read_arrivals_file(args.arrivals_file)
    progress_out = args.progress_file.open("a", buffering=1) if args.progress_file else None

    def on_progress(progress: Progress) -> None:
        if progress_out is not None:
            progress_out.write(json.dumps(progress.to_json()) + "\n")

    try:
        result = asyncio.run(
            run_load(
                url=TargetsFile(args.targets_file),
                model=args.model,
                payload=payload,
                arrivals_s=arrivals,
                max_requests=args.max_requests,
                max_duration_s=args.max_duration_s,
                max_in_flight=args.max_in_flight,
                timeout_s=args.timeout_s,
                on_progress=on_progress,
            )
        )
    finally:
        if progress_out is not None:
            progress_out.close()
    tmp = args.out.with_name(f".{args.out.name}.tmp")
    tmp.write_text(json.dumps(result.to_json()))
    tmp.replace(args.out)
    return 0


class LoadProcess:
    """The CLI as a child process, with its files in `work_dir`; a context manager."""

    def __init__(
        self,
        *,
        work_dir: Path,
        model: str,
        payload: Payload,
        arrivals_s: npt.NDArray[np.float64] | Sequence[float],
        max_requests: int,
        max_duration_s: float,
        targets: Sequence[str] = (),
        max_in_flight: int = 512,
        timeout_s: float = 30.0,
        preexec: Callable[[], None] | None = None,
    ) -> None:
        """`preexec` runs in the child before the generator starts (a cgroup to join, a CPU affinity)."""
        self.work_dir = work_dir
        self.model = model
        self.payload = payload
        self.arrivals_s = np.asarray(arrivals_s, dtype=np.float64)
        self.max_requests = max_requests
        self.max_duration_s = max_duration_s
        self.max_in_flight = max_in_flight
        self.timeout_s = timeout_s
        self._initial_targets = list(targets)
        self.preexec = preexec
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def targets_file(self) -> Path:  # noqa: D102
        return self.work_dir / "targets.json"

    @property
    def progress_file(self) -> Path:  # noqa: D102
        return self.work_dir / "progress.jsonl"

    @property
    def out_file(self) -> Path:  # noqa: D102
        return self.work_dir / "results.json"

    @property
    def log_file(self) -> Path:  # noqa: D102
        return self.work_dir / "loadgen.log"

    def argv(self) -> list[str]:
        """The command line `start` runs."""
        return [
            sys.executable,
            "-P",
            "-m",
            __name__,
            "--targets-file",
            str(self.targets_file),
            "--model",
            self.model,
            "--payload-file",
            str(self.work_dir / "payload.bin"),
            *(arg for name, value in self.payload.headers.items() for arg in ("--header", f"{name}:{value}")),
            "--arrivals-file",
            str(self.work_dir / "arrivals.npy"),
            "--max-requests",
            str(self.max_requests),
            "--max-duration-s",
            str(self.max_duration_s),
            "--max-in-flight",
            str(self.max_in_flight),
            "--timeout-s",
            str(self.timeout_s),
            "--out",
            str(self.out_file),
            "--progress-file",
            str(self.progress_file),
        ]

    def start(self) -> LoadProcess:
        """Write the inputs and spawn the process; the schedule's clock starts in the child."""
        self.work_dir.mkdir(parents=True, exist_ok=True)
        for stale in (self.out_file, self.progress_file):
            stale.unlink(missing_ok=True)
        (self.work_dir / "payload.bin").write_bytes(self.payload.body)
        np.save(self.work_dir / "arrivals.npy", self.arrivals_s)
        write_targets(self.targets_file, self._initial_targets)
        with self.log_file.open("ab") as log:
            self.process = subprocess.Popen(  # noqa: S603 - our own interpreter and module
                self.argv(),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                preexec_fn=self.preexec,
            )
        return self

    def set_targets(self, urls: Sequence[str]) -> None:
        """Replace the base URLs the process sends to (picked up within 0.5 s)."""
        write_targets(self.targets_file, urls)

    def progress(self) -> list[Progress]:
        """The progress lines written so far (a line still being written is skipped)."""
        try:
            lines = self.progress_file.read_text().splitlines()
        except FileNotFoundError:
            return []
        out = []
        for line in lines:
            try:
                out.append(Progress.from_json(json.loads(line)))
            except (ValueError, TypeError, KeyError):
                continue
        return out

    def wait(self, timeout: float) -> LoadResult:
        """Wait (bounded) for the process to end; its results.

        Raises:
            subprocess.TimeoutExpired: When it is still running after `timeout` s (it is left running).
            RuntimeError: When it failed or wrote no results.
        """
        if self.process is None:
            raise RuntimeError("LoadProcess.wait() before start()")
        code = self.process.wait(timeout=timeout)
        if code != 0 or not self.out_file.exists():
            tail = self.log_file.read_text(errors="replace")[-2000:]
            raise RuntimeError(f"load generator exited with {code}; log {self.log_file}:\n{tail}")
        doc: dict[str, Any] = json.loads(self.out_file.read_text())
        return LoadResult.from_json(doc)

    def stop(self) -> None:
        """Kill the process by PID if it still runs (SIGTERM, then SIGKILL after 5 s)."""
        if self.process is None or self.process.poll() is not None:
            return
        os.kill(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            os.kill(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=5)

    def __enter__(self) -> LoadProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


if __name__ == "__main__":
    raise SystemExit(main())
