"""Profile an engine in a real Triton: client-side latency and throughput per batch size.

`profile_served` measures the engine a running Triton serves: the profile Job's
sidecar, which is the service's own Triton on a node of its hardware
(`profile_job.run_profile`), or a local Triton that `profile_engine` starts on
the engine's model repository (`triton_server.TritonServer`, for a developer's
`tailpilot profile --engine DIR`). It runs a bounded closed-loop load (the
project's own client over gRPC: `concurrency` workers, each sending one request
of `batch_size` items after the previous answer) for `duration_s` per batch
size, after a few warm-up requests. Latencies are measured on the client
(request sent -> response decoded), so they include what a caller sees.

The fit is pure (`fit_service_time`): least squares of the mean latency per
batch size at concurrency 1 against the batch size gives t(b) = a + c*b, and
the jitter is the pooled coefficient of variation around the per-batch means.
Triton's own compute time per executed batch size, read from its statistics
after the runs, is fitted the same way (`fit_compute_time`): the serving pods
report that time, and the autoscaler compares the two to learn how fast the
hardware serving now runs the engine.

The profile also records the CPU limit Triton ran under, and, after the batch
sizes, what one live reload of the engine's configuration cost (`reload_cost`):
Triton runs in explicit model-control mode for it, as on the serving pods.
"""

from __future__ import annotations

import math
import shutil
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from tritonclient import grpc as grpcclient
from tritonclient.utils import InferenceServerException

from tailpilot.api.engine import (
    BatchProfilePoint,
    EngineProfile,
    ReloadCost,
    ServedBatchPoint,
    ServiceTimeModel,
    TensorSpec,
)
from tailpilot.builders.cpu_quota import current_cpu_limit_millis
from tailpilot.builders.errors import PROFILE_FAILED, BuildError
from tailpilot.builders.infer_requests import infer_inputs, make_inputs, send_timed
from tailpilot.builders.reload_cost import measure_reload
from tailpilot.builders.store import MANIFEST, REPOSITORY, EngineManifest
from tailpilot.builders.triton_server import TritonServer, TritonStartError
from tailpilot.manifests.triton_access import GRPC_ADMIN_KEY_HEADER
from tailpilot.manifests.triton_model_config import from_pbtxt, to_load_override_json


@dataclass(frozen=True)
class ProfileOptions:
    """How long and how hard to measure."""

    batch_sizes: tuple[int, ...] = (1, 4, 16)
    duration_s: float = 3.0
    concurrency: int = 1
    #: Concurrencies of single requests the dynamic batcher merges (`measure_served_batches`): where
    #: the per-request part of the service time is measured. Capped at twice the max batch size.
    served_concurrencies: tuple[int, ...] = (4, 16)
    warmup_requests: int = 5
    #: Upper bound on requests per batch size, whatever the duration.
    max_requests: int = 20000
    ready_timeout_s: float = 60.0
    #: Extra environment for the Triton process.
    server_env: Mapping[str, str] = field(default_factory=dict)
    #: Time one live reload of the engine's configuration under light load (`reload_cost`).
    reload: bool = True


@dataclass(frozen=True)
class Measurement:
    """Raw client-side latencies of one load run."""

    batch_size: int
    concurrency: int
    latencies_ms: tuple[float, ...]
    wall_s: float


def percentile(values: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile (q in 0..100) of a non-empty sequence."""
    return float(np.percentile(np.asarray(values, dtype=np.float64), q))


def summarize(m: Measurement) -> BatchProfilePoint:
    """Quantiles and throughput (items per second) of one measurement (pure)."""
    lat = m.latencies_ms
    return BatchProfilePoint(
        batch_size=m.batch_size,
        concurrency=m.concurrency,
        p50_ms=percentile(lat, 50),
        p95_ms=percentile(lat, 95),
        p99_ms=percentile(lat, 99),
        throughput_per_s=len(lat) * m.batch_size / m.wall_s,
        samples=len(lat),
    )


def fit_service_time(
    measurements: Sequence[Measurement], served: Sequence[ServedBatchPoint] = ()
) -> ServiceTimeModel:
    """Fit t(b) = a + c*b to the mean latency per batch size, with the pooled CV as jitter (pure).

    The least squares are on *relative* residuals ((fit - mean) / mean): what the fit is used
    for (throughput b / t(b), queueing predictions) cares about relative error, and plain
    residuals would let the slowest batch size dominate. With one batch size only, the
    intercept is 0 and the slope is mean/b. Negative coefficients (noise on a flat curve)
    are clamped to 0 and the other refitted.

    `measurements` send whole batches (one request of b items). A served batch is made of b
    requests of one item each, and every request costs something of its own (receiving, parsing,
    answering); `served` (single requests the batcher merged) measures it: the per-request time r
    is the least-squares slope, through the origin, of each served batch's excess over a + c*b
    against its size b. The model's per-item time is then c + r, the cost of one more request
    in a served batch, and `per_request_ms` records r.
    """
    if not measurements:
        raise ValueError("no measurements to fit")
    means = [float(np.mean(m.latencies_ms)) for m in measurements]
    cvs = [
        float(np.std(m.latencies_ms)) / mean for m, mean in zip(measurements, means, strict=True) if mean > 0
    ]
    jitter = math.sqrt(sum(cv * cv for cv in cvs) / len(cvs)) if cvs else 0.0
    intercept, slope = _fit_line([float(m.batch_size) for m in measurements], means)
    per_request = per_request_ms(served, intercept_ms=intercept, per_item_ms=slope)
    return ServiceTimeModel(
        intercept_ms=intercept, per_item_ms=slope + per_request, jitter_cv=jitter, per_request_ms=per_request
    )


def per_request_ms(served: Sequence[ServedBatchPoint], *, intercept_ms: float, per_item_ms: float) -> float:
    """The time each request adds to a served batch beyond its item's (pure; 0 without data, never < 0)."""
    points = [
        (p.mean_batch, p.batch_ms - (intercept_ms + per_item_ms * p.mean_batch))
        for p in served
        if p.executions
    ]
    weight = sum(b * b for b, _ in points)
    if not weight:
        return 0.0
    return max(0.0, sum(b * excess for b, excess in points) / weight)


def fit_compute_time(executions: Mapping[int, tuple[int, float]]) -> ServiceTimeModel | None:
    """Fit t(b) = a + c*b to Triton's own compute time per executed batch size (pure).

    `executions` maps an executed batch size to (executions, total compute ms), as Triton's
    statistics report them. This is what the serving pods' `nv_inference_compute_infer_duration_us`
    measures, so the autoscaler compares like with like when it learns how fast the serving
    hardware runs the engine. None without a single execution.
    """
    seen = {b: total / n for b, (n, total) in executions.items() if n > 0 and total > 0}
    if not seen:
        return None
    intercept, slope = _fit_line([float(b) for b in seen], list(seen.values()))
    return ServiceTimeModel(intercept_ms=intercept, per_item_ms=slope)


def _fit_line(sizes: Sequence[float], means: Sequence[float]) -> tuple[float, float]:
    """(intercept, slope) of means against sizes, least squares on relative residuals, clamped >= 0."""
    b = np.asarray(sizes, dtype=np.float64)
    y = np.asarray(means, dtype=np.float64)
    if len(set(b.tolist())) < 2:
        return 0.0, float(np.mean(y / b))
    w = 1.0 / np.maximum(y, 1e-9)
    slope, intercept = (float(x) for x in np.polyfit(b, y, 1, w=w))
    if slope < 0:
        # Flat: the weighted mean of a constant under relative weights.
        return float(np.sum(w * w * y) / np.sum(w * w)), 0.0
    if intercept < 0:
        return 0.0, float(np.sum(w * w * b * y) / np.sum(w * w * b * b))
    return intercept, slope


def compute_stats(grpc_url: str, model_name: str) -> dict[int, tuple[int, float]]:
    """Triton's executions and total compute ms per executed batch size of `model_name` so far.

    Empty when Triton does not answer: the compute time is optional in a profile, the latencies
    measured are not, so a statistics call that fails must not fail the build.
    """
    try:
        with grpcclient.InferenceServerClient(grpc_url) as client:
            stats = client.get_inference_statistics(model_name, as_json=True)
    except InferenceServerException:
        return {}
    out: dict[int, tuple[int, float]] = {}
    for model in stats.get("model_stats", []):
        for batch in model.get("batch_stats", []):
            infer = batch.get("compute_infer", {})
            size, count, ns = int(batch["batch_size"]), int(infer.get("count", 0)), int(infer.get("ns", 0))
            n, total = out.get(size, (0, 0.0))
            out[size] = (n + count, total + ns / 1e6)
    return out


def measure(
    grpc_url: str,
    model_name: str,
    inputs: Sequence[TensorSpec],
    *,
    batch_size: int,
    concurrency: int,
    duration_s: float,
    max_requests: int,
    warmup_requests: int = 5,
    clock: Callable[[], float] = time.perf_counter,
) -> Measurement:
    """Closed-loop load for `duration_s` (or `max_requests`), `concurrency` workers; client-side latencies.

    Raises:
        BuildError: ProfileFailed when a request fails.
    """
    data = make_inputs(inputs, batch_size)
    lock = threading.Lock()
    latencies: list[float] = []
    errors: list[str] = []

    def request_inputs() -> list[grpcclient.InferInput]:
        return infer_inputs(inputs, data)

    with grpcclient.InferenceServerClient(grpc_url) as client:
        for _ in range(warmup_requests):
            client.infer(model_name, request_inputs())
    deadline = clock() + duration_s

    def worker() -> None:
        with grpcclient.InferenceServerClient(grpc_url) as client:
            while clock() < deadline:
                with lock:
                    if len(latencies) >= max_requests or errors:
                        return
                timed = send_timed(
                    client, model_name, request_inputs(), clock=clock, lock=lock, errors=errors
                )
                if timed is None:
                    return
                with lock:
                    latencies.append((timed[1] - timed[0]) * 1000.0)

    started = clock()
    threads = [threading.Thread(target=worker, daemon=True) for _ in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=duration_s + 60.0)
    wall = clock() - started
    if errors:
        raise BuildError(
            PROFILE_FAILED, f"inference failed while profiling batch size {batch_size}: {errors[0]}"
        )
    if not latencies:
        raise BuildError(PROFILE_FAILED, f"no request completed while profiling batch size {batch_size}")
    return Measurement(
        batch_size=batch_size, concurrency=concurrency, latencies_ms=tuple(latencies), wall_s=wall
    )


def executions(grpc_url: str, model_name: str) -> int:
    """Batches of `model_name` Triton has executed so far, from its statistics."""
    with grpcclient.InferenceServerClient(grpc_url) as client:
        stats = client.get_inference_statistics(model_name, as_json=True)
    return sum(int(m.get("execution_count", 0)) for m in stats.get("model_stats", []))


def measure_served_batches(
    grpc_url: str,
    model_name: str,
    inputs: Sequence[TensorSpec],
    *,
    concurrencies: Sequence[int],
    duration_s: float,
    max_requests: int,
    warmup_requests: int = 5,
) -> list[ServedBatchPoint]:
    """Single requests from `k` closed-loop clients for each k: Triton's batcher merges them.

    With k clients always waiting on an answer the instance never idles, so the run's wall time
    per executed batch is what a batch of (requests / executions) single requests costs.

    Raises:
        BuildError: ProfileFailed when a request fails.
    """
    out = []
    for k in concurrencies:
        executions0 = executions(grpc_url, model_name)
        m = measure(
            grpc_url,
            model_name,
            inputs,
            batch_size=1,
            concurrency=k,
            duration_s=duration_s,
            max_requests=max_requests,
            warmup_requests=warmup_requests,
        )
        executions1 = executions(grpc_url, model_name)
        out.append(
            ServedBatchPoint(
                concurrency=k,
                requests=len(m.latencies_ms),
                # The warm-up requests ran before the clock, one at a time: not part of the run.
                executions=max(0, executions1 - executions0 - warmup_requests),
                wall_s=m.wall_s,
            )
        )
    return out


#: Clients kept busy during the timed reload: enough to fill the batches the engine forms.
_RELOAD_CLIENTS_MIN, _RELOAD_CLIENTS_MAX = 2, 16


def reload_clients(max_batch_size: int) -> int:
    """Clients that keep an instance of this max batch size busy: two full batches in flight."""
    return max(_RELOAD_CLIENTS_MIN, min(_RELOAD_CLIENTS_MAX, 2 * max(1, max_batch_size)))


def _reload_cost(
    grpc_url: str,
    engine_dir: Path,
    manifest: EngineManifest,
    progress: Callable[[str], None],
    admin_key: str | None,
) -> ReloadCost | None:
    """One live reload of the engine's own configuration, timed; None (and a warning) when it cannot be.

    Optional in a profile like the compute time: the policy then treats reloads as free. `admin_key`:
    sent with the load where the Triton restricts its model-repository protocol (a service's pods do).
    """
    try:
        config = from_pbtxt((engine_dir / REPOSITORY / manifest.model_name / "config.pbtxt").read_text())
        timing = measure_reload(
            grpc_url,
            manifest.model_name,
            manifest.inputs,
            config_json=to_load_override_json(config),
            clients=reload_clients(config.max_batch_size),
            headers={GRPC_ADMIN_KEY_HEADER: admin_key} if admin_key else None,
        )
    except (RuntimeError, InferenceServerException, OSError, ValueError) as exc:
        progress(f"warning: the reload could not be timed ({exc}); the profile has no reload cost")
        return None
    progress(
        f"reload: {timing.load_s:.2f} s, {timing.served_share:.0%} of the throughput kept meanwhile; "
        f"worst request {timing.stall_ms:.0f} ms ({timing.baseline_ms:.0f} ms before)"
    )
    return ReloadCost(
        seconds=round(timing.load_s, 3),
        served_share=round(timing.served_share, 3),
        worst_latency_ms=round(timing.stall_ms, 1),
    )


def server_version(grpc_url: str) -> str:
    """Triton's version as the server reports it ("" when it does not answer)."""
    try:
        with grpcclient.InferenceServerClient(grpc_url) as client:
            return str(client.get_server_metadata(as_json=True).get("version", ""))
    except InferenceServerException:
        return ""


def wait_until_model_ready(
    grpc_url: str, model_name: str, *, timeout_s: float, clock: Callable[[], float] = time.monotonic
) -> None:
    """Poll Triton until `model_name` is ready (a served engine may take minutes to load).

    Raises:
        BuildError: ProfileFailed when it is not ready within `timeout_s`.
    """
    deadline = clock() + timeout_s
    last = "no answer yet"
    with grpcclient.InferenceServerClient(grpc_url) as client:
        while True:
            try:
                if client.is_model_ready(model_name):
                    return
                last = "the model is not ready"
            except InferenceServerException as exc:
                last = str(exc)
            if clock() >= deadline:
                raise BuildError(
                    PROFILE_FAILED,
                    f"Triton at {grpc_url} did not get model {model_name} ready "
                    f"within {timeout_s:.0f} s: {last}",
                )
            time.sleep(0.5)  # polling an external server, not synchronizing with our own code


def profile_served(
    grpc_url: str,
    manifest: EngineManifest,
    engine_dir: Path,
    options: ProfileOptions,
    *,
    hardware: str,
    cpu_limit_millis: int | None,
    max_batch_size: int,
    where: str,
    progress: Callable[[str], None] = lambda _: None,
    admin_key: str | None = None,
) -> EngineProfile:
    """Measure the engine that the Triton at `grpc_url` serves: each batch size, then one reload.

    Args:
        grpc_url: The Triton serving `manifest.model_name` in explicit model-control mode.
        manifest: The engine's manifest (model name, inputs).
        engine_dir: The engine's directory (its config.pbtxt is what the reload loads again).
        options: Batch sizes, durations, concurrency.
        hardware: "cpu" or the GPU product the Triton runs on.
        cpu_limit_millis: The CPU limit Triton runs under (None without one).
        max_batch_size: The engine's max batch size (larger batch sizes are skipped).
        where: Which Triton this is, for the profile's method line.
        progress: Receives progress lines.
        admin_key: The key of the Triton's restricted APIs (the reload is one), or None.

    Raises:
        BuildError: ProfileFailed when inference fails.
    """
    measurements = _measure_batch_sizes(grpc_url, manifest, options, max_batch_size, progress)
    served = _measure_served(grpc_url, manifest, options, max_batch_size, progress)
    compute = fit_compute_time(compute_stats(grpc_url, manifest.model_name))
    reload = _reload_cost(grpc_url, engine_dir, manifest, progress, admin_key) if options.reload else None
    version = server_version(grpc_url)
    return EngineProfile(
        engine_key=manifest.engine_key,
        backend=manifest.triton_backend,
        precision=str(manifest.request.get("precision", "")),
        hardware=hardware,
        cpu_limit_millis=cpu_limit_millis,
        reload=reload,
        max_batch_size=max_batch_size,
        points=[summarize(m) for m in measurements],
        service_time=fit_service_time(
            [m for m in measurements if m.concurrency == 1] or measurements, served
        ),
        served_batches=served,
        compute_time=compute,
        method=_method(options, served, version=version, where=where),
    )


def _measure_batch_sizes(
    grpc_url: str,
    manifest: EngineManifest,
    options: ProfileOptions,
    max_batch_size: int,
    progress: Callable[[str], None],
) -> list[Measurement]:
    """One closed-loop run per batch size of `options` the engine takes (batch 1 when none)."""
    sizes = tuple(b for b in options.batch_sizes if 1 <= b <= max_batch_size) or (1,)
    measurements = []
    for b in sizes:
        m = measure(
            grpc_url,
            manifest.model_name,
            manifest.inputs,
            batch_size=b,
            concurrency=options.concurrency,
            duration_s=options.duration_s,
            max_requests=options.max_requests,
            warmup_requests=options.warmup_requests,
        )
        point = summarize(m)
        progress(
            f"batch {b}: {point.samples} requests, p50 {point.p50_ms:.2f} ms, "
            f"p99 {point.p99_ms:.2f} ms, {point.throughput_per_s:.0f} items/s"
        )
        measurements.append(m)
    return measurements


def _measure_served(
    grpc_url: str,
    manifest: EngineManifest,
    options: ProfileOptions,
    max_batch_size: int,
    progress: Callable[[str], None],
) -> list[ServedBatchPoint]:
    """The batches Triton forms of single requests at each served concurrency (none without batching)."""
    served = (
        measure_served_batches(
            grpc_url,
            manifest.model_name,
            manifest.inputs,
            concurrencies=[k for k in options.served_concurrencies if 2 <= k <= 2 * max_batch_size],
            duration_s=options.duration_s,
            max_requests=options.max_requests,
            warmup_requests=options.warmup_requests,
        )
        if max_batch_size > 1
        else []
    )
    for merged in served:
        progress(
            f"concurrency {merged.concurrency} (single requests): {merged.mean_batch:.2f} per batch, "
            f"{merged.batch_ms:.2f} ms per batch"
        )
    return served


def _method(options: ProfileOptions, served: list[ServedBatchPoint], *, version: str, where: str) -> str:
    """The profile's method line: the client, what it ran, and which Triton (`where`)."""
    return (
        f"tailpilot closed-loop gRPC client, concurrency {options.concurrency}, "
        f"{options.duration_s:g} s per batch size"
        + (
            f", single requests at concurrency {', '.join(str(p.concurrency) for p in served)}"
            if served
            else ""
        )
        + f", Triton {version or '(version unknown)'} ({where})"
    )


def profile_engine(
    engine_dir: Path, options: ProfileOptions, *, progress: Callable[[str], None] = lambda _: None
) -> EngineProfile:
    """Serve the engine in a local Triton and measure it (a developer's `tailpilot profile --engine`).

    The profile Job measures in the service's own Triton instead (`profile_job.run_profile`).

    Raises:
        BuildError: ProfileFailed when Triton does not start or inference fails.
    """
    manifest = EngineManifest.model_validate_json((engine_dir / MANIFEST).read_text())
    max_batch = int(manifest.request.get("maxBatchSize", 1))
    cpu_limit = current_cpu_limit_millis()  # Triton, our child, runs in the same cgroup
    try:
        with TritonServer(
            engine_dir / REPOSITORY,
            ready_timeout_s=options.ready_timeout_s,
            env=options.server_env,
            # Explicit model control, as on the serving pods: the reload needs it. Unlike theirs,
            # its admin APIs are open: it listens on 127.0.0.1 only, reachable from this host (or
            # pod) alone, and lives as long as this measurement.
            explicit_models=[manifest.model_name],
        ) as server:
            return profile_served(
                server.grpc_url,
                manifest,
                engine_dir,
                options,
                hardware=str(manifest.request.get("target", "cpu")),
                cpu_limit_millis=cpu_limit,
                max_batch_size=max_batch,
                where="a local tritonserver (nvidia-pytriton)",
                progress=progress,
            )
    except TritonStartError as exc:
        raise BuildError(PROFILE_FAILED, f"Triton did not start on the engine: {exc}") from exc
    finally:
        # The Python backend's stub writes model.py's bytecode (it ignores PYTHONDONTWRITEBYTECODE);
        # it is not part of the engine, whose files the manifest lists.
        for cache in list((engine_dir / REPOSITORY).rglob("__pycache__")):
            shutil.rmtree(cache, ignore_errors=True)
