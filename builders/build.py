"""One engine build, from a BuildRequest to a published engine and a BuildResult.

Steps: check the request (fail fast, before any download) -> the store's garbage collection
(`store.py`: killed builds' staging; unused engines when the operator passes the keys in use) ->
answer from the index when the model bytes are pinned -> fetch + hash -> verify the ONNX model and
the request's shapes -> engine key -> answer from the store when present -> build into a staging
directory -> the engine's outputs against the FP32 reference (`accuracy.py`) -> config.pbtxt ->
manifest -> publish atomically -> record the index -> the accuracy guard (an engine outside the
request's tolerance is published, with its figures, but refused: a repeat is a cache hit judged
again, so a looser tolerance needs no rebuild). Measuring the engine is not the build's job:
the profile Job does it in the service's own Triton (`profile_job.py`).

What differs between engine backends (which requests they refuse, the engine file, its accuracy
measurement, Triton's backend, extra library versions) is asked of the request's backend
(`backends/registry.py`); every other step is the same for all of them.

Failures raise `BuildError` (reason + message) inside; `run_build` turns them
into a failed `BuildResult`. Nothing is published on failure: the staging
directory is removed, and `engines/<key>` only ever appears by rename.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path

from tailpilot.api.engine import (
    BUILDER_VERSION,
    AccuracyReport,
    BuildOutcome,
    BuildRequest,
    BuildResult,
    StoreGcReport,
    TensorSpec,
)
from tailpilot.builders.backends import registry
from tailpilot.builders.backends.base import EngineBackend, EngineJob
from tailpilot.builders.engine_key import EngineKeyInputs, engine_key, index_is_trusted, index_key
from tailpilot.builders.errors import ACCURACY_OUT_OF_TOLERANCE, ENGINE_STORE_FULL, BuildError
from tailpilot.builders.fetch import Fetched, fetch

# Re-exported: the CLI, the benchmarks and the tests configure a build from here.
from tailpilot.builders.settings import BuildSettings as BuildSettings
from tailpilot.builders.settings import StoreGcPolicy as StoreGcPolicy
from tailpilot.builders.store import (
    MANIFEST,
    REPOSITORY,
    EngineManifest,
    EngineStore,
    is_out_of_space,
    out_of_space_message,
    write_atomic,
)
from tailpilot.builders.uri_redaction import redacted

#: Writes one progress line (to stderr in the Job, so it lands in the Job's log).
Progress = Callable[[str], None]

_PYTHON_MODEL_FILE = Path(__file__).with_name("triton_python_model.py")


def triton_backend_for(request: BuildRequest) -> str:
    """Return the Triton backend that serves the engine ("python" for the python variant)."""
    if request.serving_variant == "python":
        return "python"
    return registry.lookup(request.backend).triton_backend


def check_request(request: BuildRequest, settings: BuildSettings) -> None:
    """Reject impossible requests before anything is downloaded.

    Raises:
        BuildError: InvalidBuildRequest (no such backend here), or the backend's refusal:
            UnsupportedServingVariant, UnsupportedTarget, UnsupportedPrecision, CalibrationRequired
            or TensorRTUnavailable.
    """
    registry.lookup(request.backend).check(request, settings)


def library_versions(request: BuildRequest, settings: BuildSettings) -> dict[str, str]:
    """Versions of everything that produces the engine (part of the engine key)."""
    # Read from package metadata: importing onnxruntime just for its version costs ~1 s on a cache hit.
    versions = {name: metadata.version(name) for name in ("onnx", "onnxruntime", "numpy")}
    if request.serving_variant == "python":
        versions["pythonModel"] = hashlib.sha256(_PYTHON_MODEL_FILE.read_bytes()).hexdigest()[:16]
    versions.update(registry.lookup(request.backend).library_versions(settings))
    return versions


def run_build(request: BuildRequest, settings: BuildSettings, *, progress: Progress) -> BuildResult:
    """Build (or find) the engine; never raises BuildError (it becomes a failed result).

    Args:
        request: What to build.
        settings: The build environment.
        progress: Receives progress lines.
    """
    # What the build reports (its log, its failure message: EngineReady and an Event) shows the
    # request's URLs without the credentials a presigned URL or a user:password carries.
    uris = (request.model_uri, request.calibration_uri)

    def reported(line: str) -> None:
        progress(redacted(line, uris))

    try:
        return build_engine(request, settings, progress=reported)
    except BuildError as err:
        message = redacted(err.message, uris)
        reported(f"build failed: {err.reason}: {message}")
        return BuildResult(outcome=BuildOutcome.FAILED, reason=err.reason, message=message)


def build_engine(request: BuildRequest, settings: BuildSettings, *, progress: Progress) -> BuildResult:
    """Build (or find) the engine; see the module docstring for the steps.

    A full store (or scratch space) while writing is `EngineStoreFull`: the staging directory is
    removed as on any failure, so nothing half-written is published, and the operator backs the
    build off (the engine serving, if any, keeps serving).

    Raises:
        BuildError: On any failure the user can act on.
    """
    check_request(request, settings)
    store = EngineStore(request.store)
    try:
        gc = _collect(store, settings, progress)
        result = _build_engine(request, settings, store, progress=progress)
    except OSError as exc:
        if not is_out_of_space(exc):
            raise
        raise BuildError(ENGINE_STORE_FULL, out_of_space_message(store.root, exc)) from exc
    return result.model_copy(update={"store_gc": gc})


def _collect(store: EngineStore, settings: BuildSettings, progress: Progress) -> StoreGcReport | None:
    """Collect killed builds' staging, then (when the operator asked) unused engines; log both."""
    abandoned = store.collect_staging()
    if abandoned:
        progress(f"removed the staging of {len(abandoned)} killed build(s): {', '.join(abandoned)}")
    if settings.gc is None:
        return None
    collection = store.collect(
        keep=settings.gc.keep, retention_s=settings.gc.retention_s, budget_bytes=settings.gc.budget_bytes
    )
    progress(collection.describe())
    return StoreGcReport(
        removed=len(collection.removed), freed_bytes=collection.freed_bytes, kept_bytes=collection.kept_bytes
    )


def _build_engine(
    request: BuildRequest, settings: BuildSettings, store: EngineStore, *, progress: Progress
) -> BuildResult:
    """Answer from the index or the store, else build through the request's backend and publish."""
    started = time.monotonic()
    backend = registry.lookup(request.backend)
    versions = library_versions(request, settings)
    idx = index_key(request, versions)
    if index_is_trusted(request):
        cached = store.lookup_index(idx)
        if cached and _intact(store, cached, progress):
            progress(f"engine {cached} found in the store by request; nothing to build")
            return _finish_cached(store, cached, request, model=None)
    with store.staging() as staging:
        work, engine_dir = staging / "work", staging / "engine"
        work.mkdir()
        engine_dir.mkdir()
        job = _fetch_and_verify(request, settings, backend, work=work, store=store, progress=progress)
        key = engine_key(
            EngineKeyInputs(
                model_sha256=job.model.sha256,
                calibration_sha256=job.calibration.sha256 if job.calibration else None,
                request=request,
                library_versions=versions,
            )
        )
        if store.lookup(key) and _intact(store, key, progress):
            progress(f"engine {key} already in the store; nothing to build")
            store.record_index(idx, key)
            return _finish_cached(store, key, request, model=job.model)
        progress(f"building engine {key}: {request.backend} {request.precision} for {request.target}")
        built = _build_into(
            job,
            backend,
            key=key,
            versions=versions,
            engine_dir=engine_dir,
            started=started,
            progress=progress,
        )
        final = store.publish(engine_dir, key)
    store.touch(key)
    store.record_index(idx, key)
    progress(f"engine {key} published at {final}")
    _judge_accuracy(request, built.accuracy)
    return BuildResult(
        outcome=BuildOutcome.SUCCEEDED,
        engine_key=key,
        artifact=str(final),
        triton_backend=built.manifest.triton_backend,
        inputs=built.inputs,
        outputs=built.outputs,
        cache_hit=False,
        accuracy=built.accuracy,
        model_sha256=job.model.sha256,
        model_revision=job.model.revision or "",
    )


def _fetch_and_verify(
    request: BuildRequest,
    settings: BuildSettings,
    backend: EngineBackend,
    *,
    work: Path,
    store: EngineStore,
    progress: Progress,
) -> EngineJob:
    """Fetch the model (and calibration data) into `work`, verify it and the request's shapes: the job."""
    # The heavy modules (onnx, onnxruntime, tritonclient) load only past the index check,
    # so that a repeated request answers in well under a second.
    from tailpilot.builders.model_info import check_request_shapes, load_and_verify

    # The request's source: its s3 store and credentials Secret (the directory the Secret's keys are
    # mounted at is the environment's); calibration data comes from the same source.
    options = replace(
        settings.fetch,
        s3=request.s3,
        hf_endpoint=request.hf_endpoint,
        credentials_secret=request.credentials_secret,
    )
    progress(f"fetching model {request.model_uri}")
    model = fetch(
        request.model_uri,
        work / "source.onnx",
        expected_sha256=request.model_sha256,
        options=options,
    )
    at = f" at {model.revision}" if model.revision else ""
    progress(f"model: {model.size} bytes, sha256 {model.sha256}{at}")
    calibration = None
    if request.calibration_uri:
        calibration = fetch(
            request.calibration_uri,
            work / "calibration.bin",
            expected_sha256=request.calibration_sha256,
            options=options,
            what="calibration data",
            suffixes=(".npz",),
        )
    info = load_and_verify(model.path, label=request.model_uri)
    progress(f"model verified: inputs {_describe(info.inputs)}, outputs {_describe(info.outputs)}")
    check_request_shapes(
        info,
        shapes=request.shapes,
        max_batch_size=request.max_batch_size,
        require_static_profile=backend.needs_static_profile,
    )
    return EngineJob(
        request=request,
        settings=settings,
        info=info,
        model=model,
        calibration=calibration,
        work=work,
        store_root=store.root,
    )


@dataclass(frozen=True)
class _Built:
    """An engine written into its staging directory, with its config.pbtxt and manifest."""

    manifest: EngineManifest
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    accuracy: AccuracyReport


def _build_into(
    job: EngineJob,
    backend: EngineBackend,
    *,
    key: str,
    versions: dict[str, str],
    engine_dir: Path,
    started: float,
    progress: Progress,
) -> _Built:
    """Build the engine, measure its accuracy, write its repository entry and manifest in `engine_dir`."""
    # Past the index check, as in `_fetch_and_verify` (tritonclient is heavy to import).
    from tailpilot.api.autoscaling import BatchingConfig
    from tailpilot.builders.model_info import triton_specs
    from tailpilot.builders.repository import write_repository_entry
    from tailpilot.manifests.placement import ServingTarget
    from tailpilot.manifests.triton_model_config import model_config_for

    request = job.request
    built = backend.build(job)
    engine_file, method = built.file, built.method
    accuracy = backend.measure_accuracy(job, engine_file)
    progress(f"accuracy: {_describe_accuracy(accuracy)}")
    inputs, outputs = triton_specs(job.info.inputs), triton_specs(job.info.outputs)
    config = model_config_for(
        name=request.model_name,
        triton_backend=triton_backend_for(request),
        inputs=inputs,
        outputs=outputs,
        batching=BatchingConfig(max_batch_size=request.max_batch_size),
        placement=ServingTarget.from_build_target(request.target),
    )
    model_dir = write_repository_entry(
        repository=engine_dir / REPOSITORY, config=config, engine_file=engine_file
    )
    build_seconds = time.monotonic() - started
    manifest = EngineManifest(
        engine_key=key,
        builder_version=BUILDER_VERSION,
        created_at=datetime.now(UTC).isoformat(timespec="seconds"),
        build_seconds=round(build_seconds, 3),
        request=request.model_dump(mode="json", by_alias=True),
        model_sha256=job.model.sha256,
        calibration_sha256=job.calibration.sha256 if job.calibration else None,
        library_versions=versions,
        triton_backend=triton_backend_for(request),
        model_name=request.model_name,
        inputs=inputs,
        outputs=outputs,
        files=_file_hashes(engine_dir),
        method=method,
        built_on=job.settings.gpu_name or "cpu",
        accuracy=accuracy,
    )
    write_atomic(engine_dir / MANIFEST, manifest.model_dump_json(by_alias=True, indent=2) + "\n")
    progress(f"engine built in {build_seconds:.2f} s ({method}): {model_dir.name}")
    return _Built(manifest=manifest, inputs=inputs, outputs=outputs, accuracy=accuracy)


def _intact(store: EngineStore, key: str, progress: Progress) -> bool:
    """Whether the stored engine matches its manifest; a damaged one is discarded (and so rebuilt)."""
    damage = store.damage(key)
    if damage is None:
        return True
    progress(f"engine {key} in the store is damaged ({damage}): discarded, building it again")
    store.discard(key)
    return False


def _finish_cached(
    store: EngineStore, key: str, request: BuildRequest, *, model: Fetched | None
) -> BuildResult:
    """The stored engine's result; `model`: the bytes fetched for it (None: found by the request alone)."""
    # A hit is a use: the engine is about to serve a service whose status does not name it yet.
    store.touch(key)
    engine_dir = store.engine_dir(key)
    manifest = store.read_manifest(key)
    _judge_accuracy(request, manifest.accuracy)
    return BuildResult(
        outcome=BuildOutcome.SUCCEEDED,
        engine_key=key,
        artifact=str(engine_dir),
        triton_backend=manifest.triton_backend,
        inputs=manifest.inputs,
        outputs=manifest.outputs,
        cache_hit=True,
        accuracy=manifest.accuracy,
        # The manifest's model hash: the same bytes, whichever source they came from this time.
        model_sha256=manifest.model_sha256,
        model_revision=(model.revision or "") if model is not None else "",
    )


def _judge_accuracy(request: BuildRequest, accuracy: AccuracyReport | None) -> None:
    """Refuse an engine outside the request's tolerance (engines built before the guard pass).

    Raises:
        BuildError: AccuracyOutOfTolerance with the figures and the tolerance.
    """
    tolerance = request.accuracy_tolerance
    if tolerance is None or accuracy is None:
        return
    violations = accuracy.violations(tolerance)
    if violations:
        raise BuildError(
            ACCURACY_OUT_OF_TOLERANCE,
            f"the {request.precision} engine's outputs stray from the FP32 model's on {accuracy.samples} "
            f"{accuracy.inputs} inputs: {'; '.join(violations)} (spec.engine.accuracyTolerance). "
            "It is not served; loosen the tolerance, give calibration data closer to real inputs, "
            "or use another precision",
        )


def _describe_accuracy(accuracy: AccuracyReport) -> str:
    if not accuracy.checked:
        return f"not measured ({accuracy.note})"
    top1 = "" if accuracy.top1_agreement is None else f", top-1 agreement {accuracy.top1_agreement:.1%}"
    return (
        f"against the FP32 model on {accuracy.samples} {accuracy.inputs} inputs: max relative error "
        f"{accuracy.max_relative_error:.4f}, mean absolute error {accuracy.mean_absolute_error:.2e}{top1}"
    )


def _file_hashes(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def _describe(tensors: tuple[object, ...]) -> str:
    parts = []
    for t in tensors:
        dims = getattr(t, "dims", ())
        parts.append(f"{getattr(t, 'name', '?')}[{'x'.join('?' if d is None else str(d) for d in dims)}]")
    return ", ".join(parts)
