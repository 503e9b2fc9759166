"""Real ONNX Runtime engines from the example model, served in a real Triton (Python backend variant).

Tolerances against the unoptimized model run by ONNX Runtime in the test process
(documented in docs/builders.md):

- fp32 optimized: rtol 1e-4, atol 1e-5 (fusions only reorder float arithmetic);
- int8 (static with calibration, and dynamic): max absolute error <= 10% of the
  largest absolute reference output (measured: ~2-4% on the example model).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnxruntime as ort
import psutil
import pytest
from tritonclient import grpc as grpcclient

from tailpilot.api.engine import BuildOutcome, BuildRequest, EngineProfile, ProfileRequest
from tailpilot.builders import benchmark
from tailpilot.builders.build import BuildSettings, run_build
from tailpilot.builders.example_model import INPUT_NAME, OUTPUT_NAME, example_inputs
from tailpilot.builders.profile_job import run_profile
from tailpilot.builders.store import EngineStore
from tailpilot.builders.triton_server import TritonServer, TritonStartError

pytestmark = [pytest.mark.triton, pytest.mark.slow]


def infer(server: TritonServer, model: str, batch: np.ndarray) -> np.ndarray:
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        tensor = grpcclient.InferInput(INPUT_NAME, list(batch.shape), "FP32")
        tensor.set_data_from_numpy(batch)
        result = client.infer(model, [tensor]).as_numpy(OUTPUT_NAME)
    assert result is not None
    return result


def test_optimized_and_int8_engines_serve_matching_outputs(
    make_request: Callable[..., BuildRequest], example_model: Path, calibration: Path, tmp_path: Path
) -> None:
    requests = {
        "fp32": make_request(model_name="fp32"),
        "int8": make_request(model_name="int8", precision="int8", calibration_uri=str(calibration)),
        "int8dyn": make_request(model_name="int8dyn", precision="int8"),
    }
    repo = tmp_path / "repository"
    repo.mkdir()
    for name, request in requests.items():
        result = run_build(request, BuildSettings(), progress=lambda _: None)
        assert result.outcome == BuildOutcome.SUCCEEDED, result.message
        (repo / name).symlink_to(Path(result.artifact) / "repository" / name)

    batch = example_inputs(4, seed=123)
    reference = ort.InferenceSession(str(example_model), providers=["CPUExecutionProvider"]).run(
        None, {INPUT_NAME: batch}
    )[0]
    with TritonServer(repo, ready_timeout_s=120) as server:
        outputs = {name: infer(server, name, batch) for name in requests}
        # One request of 1 and one of 3 concatenated by the model must give the same rows.
        split = np.concatenate([infer(server, "fp32", batch[:1]), infer(server, "fp32", batch[1:])])
    np.testing.assert_allclose(outputs["fp32"], reference, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(split, reference, rtol=1e-4, atol=1e-5)
    bound = 0.1 * float(np.abs(reference).max())
    for name in ("int8", "int8dyn"):
        assert outputs[name].shape == reference.shape
        assert float(np.abs(outputs[name] - reference).max()) <= bound, name
        # Quantized, so not bit-identical: the test would pass vacuously if it served the fp32 model.
        assert not np.allclose(outputs[name], reference, rtol=1e-4, atol=1e-5), name


def test_the_profile_job_measures_the_engine_in_a_running_triton_and_caches_it(
    make_request: Callable[..., BuildRequest], store: Path
) -> None:
    """What the profile Job's container does beside its Triton sidecar, against a real Triton."""
    result = run_build(make_request(), BuildSettings(), progress=lambda _: None)
    assert result.outcome == BuildOutcome.SUCCEEDED, result.message
    request = ProfileRequest(
        engine_key=result.engine_key,
        model_name="model",
        triton_backend=result.triton_backend,
        max_batch_size=16,
        cpu_limit_millis=700,
        triton_image="nvcr.io/nvidia/tritonserver:24.10-py3",
        batch_sizes=(1, 4),
        duration_s=0.7,
        store=str(store),
    )
    lines: list[str] = []
    # The sidecar: the engine's own repository (its config as built), explicit model control.
    with TritonServer(Path(result.artifact) / "repository", explicit_models=["model"]) as server:
        measured = run_profile(request, triton_url=server.grpc_url, progress=lines.append)
        again = run_profile(request, triton_url=server.grpc_url, progress=lines.append)
    assert measured.outcome == BuildOutcome.SUCCEEDED, measured.message
    assert (measured.profile_key, measured.cache_hit) == (request.profile_key(), False)
    profile = EngineProfile.model_validate_json(
        EngineStore(store).profile_path(result.engine_key, request.profile_key()).read_text()
    )
    assert measured.profile == profile.to_summary()
    assert [p.batch_size for p in profile.points] == [1, 4]
    for point in profile.points:
        assert point.samples > 0
        assert point.p50_ms is not None and point.p95_ms is not None
        assert 0 < point.p50_ms <= point.p95_ms <= point.p99_ms
        assert point.throughput_per_s > 0
    assert profile.service_time.mean_ms(4) > profile.service_time.mean_ms(1) > 0
    # Triton's own compute time, read from its statistics: part of what the client waited for.
    assert profile.compute_time is not None
    assert 0 < profile.compute_time.mean_ms(1) < profile.service_time.mean_ms(1)
    assert (profile.engine_key, profile.hardware, profile.max_batch_size) == (result.engine_key, "cpu", 16)
    # The limit of the Triton container it measured (the request's), and the server's own version.
    assert profile.cpu_limit_millis == 700
    assert "Triton 2.51" in profile.method and request.triton_image in profile.method
    # One live reload of the engine's configuration, timed: Triton reloads the Python backend's
    # stub (a second or more, measured 1.9-3.6 s), and the old instance keeps serving meanwhile.
    assert profile.reload is not None
    assert profile.reload.seconds > 0.2 and 0 < profile.reload.served_share <= 1
    assert profile.reload.worst_latency_ms > 0
    assert any(line.startswith("reload: ") for line in lines)
    assert any(line.startswith("batch 4:") for line in lines)
    # The same key again is answered from the store, without measuring.
    assert (again.outcome, again.cache_hit, again.profile) == (BuildOutcome.SUCCEEDED, True, measured.profile)
    # Another Triton image is another measurement.
    other = request.model_copy(update={"triton_image": "nvcr.io/nvidia/tritonserver:25.01-py3"})
    assert other.profile_key() != request.profile_key()


def test_the_profile_job_reports_an_engine_missing_from_the_store(store: Path) -> None:
    request = ProfileRequest(
        engine_key="0" * 32,
        model_name="model",
        triton_backend="python",
        max_batch_size=4,
        triton_image="nvcr.io/nvidia/tritonserver:24.10-py3",
        store=str(store),
    )
    result = run_profile(request, triton_url="127.0.0.1:1", progress=lambda _: None)
    assert (result.outcome, result.reason) == (BuildOutcome.FAILED, "EngineNotFound")
    assert "0" * 32 in result.message and result.profile is None


def test_a_model_that_fails_to_load_raises_with_the_log_tail(tmp_path: Path) -> None:
    model_dir = tmp_path / "repo" / "broken"
    (model_dir / "1").mkdir(parents=True)
    (model_dir / "config.pbtxt").write_text('backend: "python"\nmax_batch_size: 1\n')
    (model_dir / "1" / "model.py").write_text(
        "class TritonPythonModel:\n"
        "    def initialize(self, args):\n"
        "        raise RuntimeError('broken on purpose 4711')\n"
    )
    server = TritonServer(tmp_path / "repo", ready_timeout_s=60)
    with pytest.raises(TritonStartError, match="broken on purpose 4711"):
        server.start()
    server.close()


def test_explicit_mode_and_stop_by_pid(make_request: Callable[..., BuildRequest]) -> None:
    result = run_build(make_request(), BuildSettings(), progress=lambda _: None)
    repo = Path(result.artifact) / "repository"
    with TritonServer(repo, explicit_models=["model"], env={"OMP_NUM_THREADS": "1"}) as server:
        pid = server.pid
        assert psutil.Process(pid).is_running()
        assert infer(server, "model", example_inputs(2)).shape == (2, 10)
        assert server.metrics_url.startswith("http://127.0.0.1:")
    assert not psutil.pid_exists(pid)


def test_benchmark_runs_end_to_end_briefly() -> None:
    result = benchmark.run((1, 2), 0.3, validate=("optimized",))
    assert {(r["engine"], r["batch"]) for r in result["rows"]} == {
        (e, b) for e in ("naive", "optimized", "int8", "int8-dynamic") for b in (1, 2)
    }
    assert all(r["requests"] > 0 and r["throughput"] > 0 for r in result["rows"])
    assert [v["batch"] for v in result["validation"]] == [1, 2]
    assert all(v["perf_throughput"] > 0 and v["perf_p99_ms"] > 0 for v in result["validation"])
    table = benchmark.render_table(result)
    assert table.count("\n| int8 |") == 2
