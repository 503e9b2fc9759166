from __future__ import annotations

import socket
from pathlib import Path

import numpy as np
import pytest

from tailpilot.api.engine import ServedBatchPoint
from tailpilot.builders.perf_analyzer import parse_csv, perf_analyzer_command
from tailpilot.builders.profiler import (
    Measurement,
    compute_stats,
    fit_compute_time,
    fit_service_time,
    per_request_ms,
    summarize,
)
from tailpilot.builders.triton_server import TritonPorts, make_backend_dir, tritonserver_command


def synthetic(batch: int, mean: float, cv: float, n: int = 2000, seed: int = 0) -> Measurement:
    lat = np.random.default_rng(seed + batch).normal(mean, mean * cv, n)
    return Measurement(
        batch_size=batch,
        concurrency=1,
        latencies_ms=tuple(float(x) for x in lat),
        wall_s=float(lat.sum()) / 1000,
    )


def test_fit_recovers_intercept_slope_and_jitter() -> None:
    a, c = 1.5, 0.75
    model = fit_service_time([synthetic(b, a + c * b, 0.1) for b in (1, 2, 4, 8, 16)])
    assert model.intercept_ms == pytest.approx(a, abs=0.05)
    assert model.per_item_ms == pytest.approx(c, abs=0.01)
    assert model.jitter_cv == pytest.approx(0.1, abs=0.01)


def test_fit_clamps_negative_coefficients() -> None:
    falling = fit_service_time([synthetic(1, 5.0, 0.0), synthetic(16, 4.0, 0.0)])
    assert falling.per_item_ms == 0.0
    assert 4.0 < falling.intercept_ms < 5.0
    steep = fit_service_time([synthetic(1, 1.0, 0.0), synthetic(2, 3.0, 0.0)])
    assert steep.intercept_ms == 0.0
    # Relative least squares through the origin: minimise sum(((c*b - y) / y)^2).
    assert steep.per_item_ms == pytest.approx((1 * 1 / 1 + 2 * 3 / 9) / (1 / 1 + 4 / 9))
    single = fit_service_time([synthetic(4, 8.0, 0.0)])
    assert (single.intercept_ms, single.per_item_ms) == (0.0, pytest.approx(2.0))


def test_fit_weighs_relative_error_so_small_batches_are_not_drowned() -> None:
    # Exact line through b=1 and b=4; b=16 twice as slow as the line says.
    a, c = 2.0, 1.0
    points = [synthetic(1, a + c, 0.0), synthetic(4, a + 4 * c, 0.0), synthetic(16, 2 * (a + 16 * c), 0.0)]
    fit = fit_service_time(points)
    relative_error_b1 = abs(fit.mean_ms(1) - (a + c)) / (a + c)
    unweighted_slope, unweighted_intercept = np.polyfit([1, 4, 16], [a + c, a + 4 * c, 2 * (a + 16 * c)], 1)
    unweighted_error_b1 = abs(unweighted_intercept + unweighted_slope - (a + c)) / (a + c)
    assert relative_error_b1 < unweighted_error_b1


def test_compute_time_is_fitted_on_tritons_executions_per_batch_size() -> None:
    # Executed batch size -> (executions, total compute ms), as Triton's statistics give them.
    fit = fit_compute_time({1: (200, 200 * 3.0), 2: (10, 10 * 4.0), 4: (100, 100 * 6.0), 8: (0, 0.0)})
    assert fit is not None
    assert (fit.intercept_ms, fit.per_item_ms) == (pytest.approx(2.0), pytest.approx(1.0))
    assert fit_compute_time({}) is None and fit_compute_time({4: (0, 0.0)}) is None
    only_one_size = fit_compute_time({4: (50, 50 * 8.0)})
    assert only_one_size is not None and only_one_size.mean_ms(4) == pytest.approx(8.0)


def test_a_triton_that_does_not_answer_the_statistics_call_gives_no_compute_time() -> None:
    with socket.socket() as sock:  # a port nothing listens on: bound, never listening
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        assert compute_stats(f"127.0.0.1:{port}", "mlp") == {}
    assert fit_compute_time({}) is None


def test_summarize_counts_items_not_requests() -> None:
    m = Measurement(
        batch_size=4, concurrency=2, latencies_ms=tuple(float(x) for x in range(1, 101)), wall_s=2.0
    )
    point = summarize(m)
    assert point.throughput_per_s == pytest.approx(100 * 4 / 2.0)
    assert point.p50_ms == pytest.approx(50.5)
    assert point.p99_ms == pytest.approx(99.01)
    assert (point.samples, point.concurrency) == (100, 2)


def test_tritonserver_command_binds_localhost_and_enables_summaries(tmp_path: Path) -> None:
    cmd = tritonserver_command(
        binary=Path("/t/tritonserver"),
        model_repository=Path("/repo"),
        backend_directory=Path("/b"),
        ports=TritonPorts(http=8000, grpc=8001, metrics=8002),
        explicit_models=["a", "b"],
    )
    assert cmd[0] == "/t/tritonserver"
    for flag in (
        "--http-address=127.0.0.1",
        "--grpc-address=127.0.0.1",
        "--metrics-address=127.0.0.1",
        "--http-port=8000",
        "--metrics-config=summary_latencies=true",
        "--model-control-mode=explicit",
        "--load-model=a",
        "--load-model=b",
    ):
        assert flag in cmd
    default_mode = tritonserver_command(
        binary=Path("/t"),
        model_repository=Path("/r"),
        backend_directory=Path("/b"),
        ports=TritonPorts(1, 2, 3),
    )
    assert not any(a.startswith("--model-control-mode") for a in default_mode)
    backends = make_backend_dir(tmp_path / "backends")
    links = sorted(p.name for p in (backends / "python").iterdir())
    assert links == ["libtriton_python.so", "triton_python_backend_stub", "triton_python_backend_utils.py"]
    assert all(
        (backends / "python" / name).is_symlink() and (backends / "python" / name).exists() for name in links
    )


def test_perf_analyzer_command_and_csv() -> None:
    cmd = perf_analyzer_command(
        binary="pa",
        model="m",
        grpc_url="127.0.0.1:9",
        batch_size=4,
        concurrency=2,
        window_ms=1000,
        csv_path=Path("/o.csv"),
    )
    assert cmd == ["pa", "-m", "m", "-u", "127.0.0.1:9", "-i", "grpc", "-b", "4", "--concurrency-range", "2",
                   "--measurement-interval", "1000", "-s", "1000", "-r", "6",
                   "--percentile=99", "-f", "/o.csv"]  # fmt: skip
    text = (
        "Concurrency,Inferences/Second,Client Send,Network+Server Send/Recv,Server Queue,"
        "Server Compute Input,Server Compute Infer,Server Compute Output,Client Recv,"
        "p50 latency,p90 latency,p95 latency,p99 latency\n"
        "2,265.019,40,1647,185,93,10273,790,5,7348,15563,21292,151337\n"
    )
    result = parse_csv(text, batch_size=4)
    assert (result.concurrency, result.throughput_per_s) == (2, 265.019)
    assert (result.p50_ms, result.p95_ms, result.p99_ms) == (7.348, 21.292, 151.337)


def served(concurrency: int, mean_batch: float, batch_ms: float, executions: int = 1000) -> ServedBatchPoint:
    return ServedBatchPoint(
        concurrency=concurrency,
        requests=round(mean_batch * executions),
        executions=executions,
        wall_s=batch_ms * executions / 1000.0,
    )


def test_per_request_time_is_the_excess_of_merged_single_requests_over_whole_batches() -> None:
    # Whole batches: t(b) = 0.5 + 1.25*b. Served batches of b single requests cost 0.2 ms more per request.
    whole = [synthetic(b, 0.5 + 1.25 * b, 0.0) for b in (1, 4, 16)]
    merged = [served(k, b, 0.5 + (1.25 + 0.2) * b) for k, b in ((4, 2.0), (8, 4.0), (16, 8.0))]
    model = fit_service_time(whole, merged)
    assert model.per_request_ms == pytest.approx(0.2, abs=1e-3)
    assert model.per_item_ms == pytest.approx(1.45, abs=1e-3)  # served batches are what the fleet runs
    assert model.intercept_ms == pytest.approx(0.5, abs=1e-3)
    # Without served points the model is the whole-batch fit, with no per-request part.
    alone = fit_service_time(whole)
    assert (alone.per_request_ms, alone.per_item_ms) == (0.0, pytest.approx(1.25, abs=1e-3))


def test_per_request_time_is_never_negative_and_ignores_runs_without_executions() -> None:
    cheaper = [served(8, 4.0, 0.5 + 1.0 * 4)]  # merged requests cheaper than whole batches: noise
    assert per_request_ms(cheaper, intercept_ms=0.5, per_item_ms=1.25) == 0.0
    empty = [ServedBatchPoint(concurrency=4, requests=0, executions=0, wall_s=3.0)]
    assert per_request_ms(empty, intercept_ms=0.5, per_item_ms=1.25) == 0.0
    assert per_request_ms([], intercept_ms=0.5, per_item_ms=1.25) == 0.0


def test_served_batch_point_reads_mean_batch_and_time_per_batch() -> None:
    point = ServedBatchPoint(concurrency=16, requests=8000, executions=1000, wall_s=12.0)
    assert (point.mean_batch, point.batch_ms) == (8.0, 12.0)
    assert ServedBatchPoint.model_validate_json(point.model_dump_json(by_alias=True)) == point
