"""Engine benchmark: naive ONNX vs optimized vs INT8, served by a real Triton on this CPU.

    python -m tailpilot.builders.benchmark [--duration-s 3] [--batch-sizes 1,4,16] [--json out.json]

1. Writes the example model and calibration data, builds the engines with
   `run_build` (fp32 optimized, int8 static with calibration, int8 dynamic) and
   a naive entry (the unmodified model in the same Python-backend wrapper).
2. Serves them all from one local Triton (Python backend variant).
3. Profiles each at each batch size with the project's own client
   (concurrency 1): p99 and throughput; fits t(b) = a + c*b.
4. Independent measurement: perf_analyzer (3 time windows of duration/3) on the
   optimized and int8 engines, right after the profile's point; reports the
   profile's prediction error (throughput predicted by the fit as b / t(b); p99
   as measured by the profile). perf_analyzer runs twice per point: the
   difference between its two runs is the noise floor of the comparison.

Everything is bounded: one Triton, a fixed duration per point, a request cap.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from tailpilot.api.autoscaling import BatchingConfig
from tailpilot.api.engine import BuildOutcome, BuildRequest, ServiceTimeModel, TensorSpec
from tailpilot.builders.build import BuildSettings, run_build
from tailpilot.builders.example_model import write_calibration_data, write_example_model
from tailpilot.builders.model_info import load_and_verify, triton_specs
from tailpilot.builders.perf_analyzer import PerfResult, run_perf_analyzer
from tailpilot.builders.profiler import Measurement, fit_service_time, measure, summarize
from tailpilot.builders.repository import write_repository_entry
from tailpilot.builders.store import EngineStore
from tailpilot.builders.triton_server import TritonServer
from tailpilot.manifests.placement import ServingTarget
from tailpilot.manifests.triton_model_config import model_config_for

MAX_BATCH = 16


def _build_engines(work: Path, repo: Path) -> dict[str, float]:
    """Build the engines into a store, link them into `repo`; return build seconds per variant."""
    model = write_example_model(work / "model.onnx")
    calibration = write_calibration_data(work / "calibration.npz")
    store = work / "store"
    variants: dict[str, dict[str, Any]] = {
        "optimized": {"precision": "fp32"},
        "int8": {"precision": "int8", "calibration_uri": str(calibration)},
        "int8-dynamic": {"precision": "int8"},
    }
    seconds: dict[str, float] = {}
    for name, extra in variants.items():
        request = BuildRequest(
            model_uri=str(model),
            model_name=name,
            backend="onnxruntime",
            max_batch_size=MAX_BATCH,
            serving_variant="python",
            store=str(store),
            **extra,
        )
        result = run_build(request, BuildSettings(), progress=lambda _: None)
        if result.outcome != BuildOutcome.SUCCEEDED:
            raise SystemExit(f"build of {name} failed: {result.reason}: {result.message}")
        seconds[name] = EngineStore(store).read_manifest(result.engine_key).build_seconds
        (repo / name).symlink_to(Path(result.artifact) / "repository" / name)
    # The naive baseline: the unmodified model behind the same Python-backend wrapper.
    info = load_and_verify(model)
    naive_config = model_config_for(
        name="naive",
        triton_backend="python",
        inputs=triton_specs(info.inputs),
        outputs=triton_specs(info.outputs),
        batching=BatchingConfig(max_batch_size=MAX_BATCH),
        placement=ServingTarget(device="cpu"),
    )
    naive_copy = work / "naive.onnx"
    naive_copy.write_bytes(model.read_bytes())
    write_repository_entry(repository=repo, config=naive_config, engine_file=naive_copy)
    seconds["naive"] = 0.0
    return seconds


def run(batch_sizes: tuple[int, ...], duration_s: float, *, validate: tuple[str, ...]) -> dict[str, Any]:
    """Run the whole benchmark; return the figures as a JSON-able dict."""
    started, load_at_start = time.monotonic(), os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="tailpilot-bench-") as tmp:
        work = Path(tmp)
        repo = work / "repository"
        repo.mkdir()
        build_seconds = _build_engines(work, repo)
        order = ["naive", "optimized", "int8", "int8-dynamic"]
        specs = triton_specs(load_and_verify(work / "model.onnx").inputs)
        rows: list[dict[str, Any]] = []
        validation: list[dict[str, Any]] = []
        with TritonServer(repo, ready_timeout_s=180) as server:
            for name in order:
                engine_rows, engine_validation = _measure_engine(
                    server,
                    name,
                    specs,
                    batch_sizes=batch_sizes,
                    duration_s=duration_s,
                    validate=name in validate,
                    work=work,
                )
                rows.extend(engine_rows)
                validation.extend(engine_validation)
    return {
        "load_average_start": load_at_start,
        "load_average_end": os.getloadavg(),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "duration_s_per_point": duration_s,
        "batch_sizes": list(batch_sizes),
        "build_seconds": build_seconds,
        "rows": rows,
        "validation": validation,
        "total_seconds": time.monotonic() - started,
    }


def _measure_engine(
    server: TritonServer,
    name: str,
    specs: tuple[TensorSpec, ...],
    *,
    batch_sizes: tuple[int, ...],
    duration_s: float,
    validate: bool,
    work: Path,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Profile one engine at each batch size (with perf_analyzer too when `validate`): (rows, validation)."""
    rows: list[dict[str, Any]] = []
    measurements: list[Measurement] = []
    independent: list[tuple[PerfResult, ...]] = []
    for b in batch_sizes:
        m = measure(
            server.grpc_url,
            name,
            specs,
            batch_size=b,
            concurrency=1,
            duration_s=duration_s,
            max_requests=20000,
        )
        measurements.append(m)
        p = summarize(m)
        rows.append(
            {
                "engine": name,
                "batch": b,
                "p50_ms": p.p50_ms,
                "p99_ms": p.p99_ms,
                "throughput": p.throughput_per_s,
                "requests": p.samples,
            }
        )
        print(
            f"  {name:<13} b={b:<3} p99 {p.p99_ms:8.2f} ms  {p.throughput_per_s:8.1f} items/s",
            file=sys.stderr,
        )
        if validate:
            # Right after the profile's point, so that both see the same background load.
            # Twice: the second run measures how much perf_analyzer disagrees with itself
            # under the machine's background load (the noise floor of any comparison).
            independent.append(
                tuple(
                    run_perf_analyzer(
                        model=name,
                        grpc_url=server.grpc_url,
                        batch_size=b,
                        concurrency=1,
                        window_ms=max(500, round(duration_s * 1000 / 3)),
                        work=work,
                        timeout_s=120 + 10 * duration_s,
                    )
                    for _ in range(2)
                )
            )
    fit = fit_service_time(measurements)
    validation = [
        _validation_row(name, m, fit, pa, repeat)
        for m, (pa, repeat) in zip(measurements, independent, strict=False)
    ]
    return rows, validation


def _validation_row(
    name: str, m: Measurement, fit: ServiceTimeModel, pa: PerfResult, repeat: PerfResult
) -> dict[str, Any]:
    """The profile's fit and point against perf_analyzer's two runs at one batch size."""
    p = summarize(m)
    predicted_thr = m.batch_size * 1000.0 / fit.mean_ms(m.batch_size)
    return {
        "engine": name,
        "batch": m.batch_size,
        "fit": {
            "interceptMs": fit.intercept_ms,
            "perItemMs": fit.per_item_ms,
            "jitterCv": fit.jitter_cv,
        },
        "predicted_throughput": predicted_thr,
        "profile_throughput": p.throughput_per_s,
        "perf_throughput": pa.throughput_per_s,
        "throughput_error": (predicted_thr - pa.throughput_per_s) / pa.throughput_per_s,
        "profile_p99_ms": p.p99_ms,
        "perf_p99_ms": pa.p99_ms,
        "p99_error": (p.p99_ms - pa.p99_ms) / pa.p99_ms,
        "repeat_throughput_diff": (repeat.throughput_per_s - pa.throughput_per_s) / pa.throughput_per_s,
        "repeat_p99_diff": (repeat.p99_ms - pa.p99_ms) / pa.p99_ms,
    }


def render_table(result: dict[str, Any]) -> str:
    """Format the figures as two Markdown tables."""
    lines = [
        "| engine | build s | batch | p50 ms | p99 ms | items/s |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for r in result["rows"]:
        lines.append(
            f"| {r['engine']} | {result['build_seconds'][r['engine']]:.2f} | {r['batch']} | "
            f"{r['p50_ms']:.2f} | {r['p99_ms']:.2f} | {r['throughput']:.1f} |"
        )
    if result["validation"]:
        lines += [
            "",
            "| engine | batch | predicted items/s | perf_analyzer items/s | error | profile p99 ms | "
            "perf_analyzer p99 ms | error | perf_analyzer repeat: items/s, p99 |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for v in result["validation"]:
            lines.append(
                f"| {v['engine']} | {v['batch']} | {v['predicted_throughput']:.1f} | "
                f"{v['perf_throughput']:.1f} | {100 * v['throughput_error']:+.1f}% | "
                f"{v['profile_p99_ms']:.2f} | {v['perf_p99_ms']:.2f} | "
                f"{100 * v['p99_error']:+.1f}% | "
                f"{100 * v['repeat_throughput_diff']:+.1f}%, {100 * v['repeat_p99_diff']:+.1f}% |"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print the tables (figures also as JSON with --json)."""
    parser = argparse.ArgumentParser(
        prog="python -m tailpilot.builders.benchmark", description=__doc__.split("\n")[0]
    )
    parser.add_argument(
        "--duration-s", type=float, default=2.5, help="seconds per (engine, batch size) point"
    )
    parser.add_argument("--batch-sizes", default="1,4,16")
    parser.add_argument("--validate", default="optimized,int8", help="engines re-measured with perf_analyzer")
    parser.add_argument("--json", type=Path, help="write the figures here")
    args = parser.parse_args(argv)
    sizes = tuple(int(x) for x in args.batch_sizes.split(","))
    result = run(sizes, args.duration_s, validate=tuple(v for v in args.validate.split(",") if v))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    print(render_table(result))
    print(
        f"\n{result['date']}, {result['total_seconds']:.0f} s in total, load average "
        f"{result['load_average_start'][0]:.1f} -> {result['load_average_end'][0]:.1f} "
        f"on {os.cpu_count()} CPUs"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
