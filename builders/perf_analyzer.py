"""Run Triton's perf_analyzer (from `tritonclient[all]==2.51.0`) as an independent measurement.

The binary needs Debian's `libb64-0d` and `libcudart.so.12` (PyPI
`nvidia-cuda-runtime-cu12`) on LD_LIBRARY_PATH, even without a GPU. On a
shared, noisy CPU its stabilization (p99 and throughput within 10% over 3
windows) often never converges, so the runs here set `-s 1000`: perf_analyzer
still measures 3 time windows and reports them, but does not fail on their
spread. (`--request-count` avoids stabilization too, but its throughput is
computed over whole seconds: +-25-50% steps on a 3 s run.)
"""

from __future__ import annotations

import csv
import importlib.util
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class PerfResult:
    """One perf_analyzer run (client side): items per second and latency quantiles in ms."""

    batch_size: int
    concurrency: int
    throughput_per_s: float
    p50_ms: float
    p95_ms: float
    p99_ms: float


def find_perf_analyzer() -> str | None:
    """perf_analyzer next to the running interpreter (the venv), else on PATH."""
    candidate = Path(sys.executable).parent / "perf_analyzer"
    return str(candidate) if candidate.is_file() else shutil.which("perf_analyzer")


def cuda_runtime_lib_dir() -> str | None:
    """Directory of libcudart.so.12 from the nvidia-cuda-runtime-cu12 wheel, if installed."""
    spec = importlib.util.find_spec("nvidia.cuda_runtime")
    if spec is None or not spec.submodule_search_locations:
        return None
    lib = Path(next(iter(spec.submodule_search_locations))) / "lib"
    return str(lib) if lib.is_dir() else None


def perf_analyzer_command(
    *,
    binary: str,
    model: str,
    grpc_url: str,
    batch_size: int,
    concurrency: int,
    window_ms: int,
    csv_path: Path,
) -> list[str]:
    """Build the command line (pure)."""
    return [
        binary,
        "-m",
        model,
        "-u",
        grpc_url,
        "-i",
        "grpc",
        "-b",
        str(batch_size),
        "--concurrency-range",
        str(concurrency),
        "--measurement-interval",
        str(window_ms),
        "-s",
        "1000",
        "-r",
        "6",
        "--percentile=99",
        "-f",
        str(csv_path),
    ]


def parse_csv(text: str, *, batch_size: int) -> PerfResult:
    """Parse perf_analyzer's `-f` CSV (latencies in microseconds)."""
    row = next(csv.DictReader(text.splitlines()))
    return PerfResult(
        batch_size=batch_size,
        concurrency=int(row["Concurrency"]),
        throughput_per_s=float(row["Inferences/Second"]),
        p50_ms=float(row["p50 latency"]) / 1000.0,
        p95_ms=float(row["p95 latency"]) / 1000.0,
        p99_ms=float(row["p99 latency"]) / 1000.0,
    )


def run_perf_analyzer(
    *,
    model: str,
    grpc_url: str,
    batch_size: int,
    concurrency: int,
    window_ms: int,
    work: Path,
    timeout_s: float,
) -> PerfResult:
    """Run one measurement and return its result.

    Raises:
        RuntimeError: When perf_analyzer is missing or fails (with its output tail).
    """
    binary = find_perf_analyzer()
    if binary is None:
        raise RuntimeError("perf_analyzer not found (pip install 'tritonclient[all]==2.51.0')")
    env = dict(os.environ)
    lib = cuda_runtime_lib_dir()
    if lib:
        env["LD_LIBRARY_PATH"] = os.pathsep.join(p for p in (lib, env.get("LD_LIBRARY_PATH", "")) if p)
    csv_path = work / f"perf-{model}-b{batch_size}-c{concurrency}.csv"
    cmd = perf_analyzer_command(
        binary=binary,
        model=model,
        grpc_url=grpc_url,
        batch_size=batch_size,
        concurrency=concurrency,
        window_ms=window_ms,
        csv_path=csv_path,
    )
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout_s)
    if proc.returncode != 0 or not csv_path.is_file():
        raise RuntimeError(f"perf_analyzer failed ({proc.returncode}): {(proc.stdout + proc.stderr)[-1500:]}")
    return parse_csv(csv_path.read_text(), batch_size=batch_size)
