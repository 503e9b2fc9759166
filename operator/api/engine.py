"""Contracts between the engine Jobs (build, profile) and everything that reads their output.

The build Job (`tailpilot build`) reports a `BuildResult` as its container's
termination message; the profile Job (`tailpilot profile --request ...`, beside
the service's own Triton) measures the engine where it serves, caches the
`EngineProfile` in the engine store and reports a `ProfileResult` the same way.
The operator reads both from the API. The autoscaling policy and the benchmark
simulator read the same `EngineProfile`. Keeping these in one module is what
lets a KWOK stage play a build's or a profile's result on a simulated GPU node:
it only has to write a valid result.
"""

from __future__ import annotations

import hashlib
import json
from enum import StrEnum
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from tailpilot.api.backends import BackendName

#: Bumped whenever the builder's output for the same inputs changes; part of every key.
BUILDER_VERSION = "1"

#: Kubernetes truncates termination messages at 4096 bytes; results must fit.
TERMINATION_MESSAGE_LIMIT_BYTES = 4096

#: An engine key: a lower-case hex digest. The builder's are 32 characters
#: (`builders/engine_key.KEY_HEX_CHARS`); 12 (the prefix the accept annotation and messages name)
#: to 64 (a whole SHA-256) are accepted, so a builder that changes the length needs no new CRD. The
#: alphabet is the point: a key becomes a store path, a label value and an argument of the pods'
#: scripts, so it may hold no separator, dot, quote, space or shell character. Every model that
#: carries one (a Job's result, a profile request, the status) checks it where it is parsed.
ENGINE_KEY_PATTERN = r"^[0-9a-f]{12,64}$"
#: The same, or empty: a result or record that names no engine (a failed build, a candidate not built).
OPTIONAL_ENGINE_KEY_PATTERN = r"^([0-9a-f]{12,64})?$"


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)


class BatchProfilePoint(_Frozen):
    """Latency and throughput of the engine at one batch size, measured client-side."""

    batch_size: int = Field(ge=1, alias="batchSize")
    #: Concurrency used for the measurement (requests in flight from the client).
    concurrency: int = Field(default=1, ge=1)
    #: None where only the P99 is known (the profile summary on an InferenceService's status).
    p50_ms: float | None = Field(default=None, ge=0, alias="p50Ms")
    p95_ms: float | None = Field(default=None, ge=0, alias="p95Ms")
    p99_ms: float = Field(ge=0, alias="p99Ms")
    #: Inferences (items, not requests) per second.
    throughput_per_s: float = Field(ge=0, alias="throughputPerS")
    samples: int = Field(default=0, ge=0)


class ServedBatchPoint(_Frozen):
    """Single requests at one concurrency, merged into batches by Triton's dynamic batcher."""

    concurrency: int = Field(ge=1)
    #: Requests answered and batches executed while the clients kept the instance busy.
    requests: int = Field(ge=0)
    executions: int = Field(ge=0)
    #: Wall time of the run; at saturation, wall time per execution is what a batch of
    #: `requests / executions` single requests costs.
    wall_s: float = Field(ge=0, alias="wallS")

    @property
    def mean_batch(self) -> float:
        """Requests per executed batch."""
        return self.requests / self.executions if self.executions else 0.0

    @property
    def batch_ms(self) -> float:
        """Wall time per executed batch, ms."""
        return self.wall_s * 1000.0 / self.executions if self.executions else 0.0


class ServiceTimeModel(_Frozen):
    """Fitted per-batch execution time: t(b) = intercept_ms + per_item_ms * b, times (1 + jitter)."""

    intercept_ms: float = Field(ge=0, alias="interceptMs")
    per_item_ms: float = Field(ge=0, alias="perItemMs")
    #: Coefficient of variation of the execution time around the fit.
    jitter_cv: float = Field(default=0.0, ge=0, alias="jitterCv")
    #: The part of `per_item_ms` that each request brings, not each item (receiving, parsing and
    #: answering it): measured with single requests the dynamic batcher merges, and already
    #: included in `per_item_ms`, since served batches are made of requests of one item. 0 when
    #: the profile measured whole batches only.
    per_request_ms: float = Field(default=0.0, ge=0, alias="perRequestMs")

    def mean_ms(self, batch_size: float) -> float:
        """Mean execution time of one batch of `batch_size` items (a mean batch may be fractional)."""
        return self.intercept_ms + self.per_item_ms * batch_size


class ReloadCost(_Frozen):
    """One live reload of the engine (Triton's load API with a config override), timed at capacity."""

    #: How long the load took.
    seconds: float = Field(ge=0)
    #: The share of its throughput the instance kept while the new one loaded (0-1).
    served_share: float = Field(ge=0, le=1, alias="servedShare")
    #: The worst latency of a request in flight during the reload, ms.
    worst_latency_ms: float = Field(ge=0, alias="worstLatencyMs")


class EngineProfile(_Frozen):
    """Content of `profile.json`: what one engine can do on the hardware it was profiled on."""

    engine_key: str = Field(alias="engineKey")
    backend: str
    precision: str
    #: "cpu" or a GPU product label value such as "NVIDIA-H100-80GB-HBM3".
    hardware: str
    max_batch_size: int = Field(ge=1, alias="maxBatchSize")
    points: list[BatchProfilePoint]
    #: Single requests the dynamic batcher merged, at several concurrencies: where the per-request
    #: part of the service time was measured (`ServiceTimeModel.per_request_ms`).
    served_batches: list[ServedBatchPoint] = Field(default_factory=list, alias="servedBatches")
    service_time: ServiceTimeModel = Field(alias="serviceTime")
    #: Triton's compute time per executed batch (no transport, no queue), fitted the same way; what
    #: the serving pods report as compute time. None for profiles that did not record it.
    compute_time: ServiceTimeModel | None = Field(default=None, alias="computeTime")
    #: The CPU limit (CFS quota) the profiling Triton ran under, in millicores, as the kernel
    #: enforced it; None without one. A CPU engine's times hold for serving pods with this limit.
    cpu_limit_millis: int | None = Field(default=None, ge=1, alias="cpuLimitMillis")
    #: What one live reload of the engine's configuration cost, timed at capacity; None when
    #: not timed (the policy then treats reloads as free).
    reload: ReloadCost | None = None
    #: How the numbers were obtained (tool, version, duration) or, for scaled
    #: variants that stand for GPU engines, that they are scaled and from what.
    method: str = ""

    def to_summary(self) -> ProfileSummary:
        """The compact form that goes into a ProfileResult and the InferenceService status."""
        return ProfileSummary(
            hardware=self.hardware,
            cpu_limit_millis=self.cpu_limit_millis,
            reload=self.reload,
            service_time=self.service_time,
            compute_time=self.compute_time,
            points=[
                ProfileSummaryPoint(
                    batch_size=p.batch_size,
                    p99_ms=round(p.p99_ms, 3),
                    throughput_per_s=round(p.throughput_per_s, 1),
                )
                for p in self.points
            ],
        )


class ProfileSummaryPoint(_Frozen):
    """One batch size of a profile summary."""

    batch_size: int = Field(ge=1, alias="batchSize")
    p99_ms: float = Field(ge=0, alias="p99Ms")
    throughput_per_s: float = Field(ge=0, alias="throughputPerS")


class ProfileSummary(_Frozen):
    """Small enough for a termination message and the object's status."""

    hardware: str
    cpu_limit_millis: int | None = Field(default=None, ge=1, alias="cpuLimitMillis")
    reload: ReloadCost | None = None
    service_time: ServiceTimeModel = Field(alias="serviceTime")
    compute_time: ServiceTimeModel | None = Field(default=None, alias="computeTime")
    points: list[ProfileSummaryPoint]


class ShapeProfile(_Frozen):
    """Min/opt/max of one input's non-batch dimensions (the batch dimension follows the batching bounds)."""

    input: str
    min: tuple[int, ...]
    opt: tuple[int, ...]
    max: tuple[int, ...]


class AccuracyTolerance(_Frozen):
    """How far an engine's outputs may stray from the FP32 reference model's before it is refused."""

    #: Largest |engine - reference| over every output value, relative to the largest |reference|.
    max_relative_error: float = Field(default=0.1, ge=0, alias="maxRelativeError")
    #: Share of inputs whose arg-max over the last axis agrees (outputs with more than one class).
    min_top1_agreement: float = Field(default=0.9, ge=0, le=1, alias="minTop1Agreement")


class AccuracyReport(_Frozen):
    """An engine's outputs against the FP32 reference model on the same inputs (measured by the build)."""

    #: False when the engine could not be run here (e.g. a TensorRT plan, or an input type the
    #: build cannot generate); `note` says why and nothing is judged.
    checked: bool = True
    note: str = ""
    samples: int = Field(default=0, ge=0)
    #: "calibration" (the request's calibration inputs) or "generated" (seeded normal inputs).
    inputs: Literal["calibration", "generated", ""] = ""
    max_relative_error: float = Field(default=0.0, ge=0, alias="maxRelativeError")
    mean_absolute_error: float = Field(default=0.0, ge=0, alias="meanAbsoluteError")
    #: None where no output has more than one class.
    top1_agreement: float | None = Field(default=None, ge=0, le=1, alias="top1Agreement")

    def violations(self, tolerance: AccuracyTolerance) -> list[str]:
        """What is outside `tolerance`, in words (empty: within, or not checked)."""
        if not self.checked:
            return []
        out = []
        if self.max_relative_error > tolerance.max_relative_error:
            out.append(f"max relative error {self.max_relative_error:.4f} > {tolerance.max_relative_error:g}")
        if self.top1_agreement is not None and self.top1_agreement < tolerance.min_top1_agreement:
            out.append(f"top-1 agreement {self.top1_agreement:.1%} < {tolerance.min_top1_agreement:.0%}")
        return out


#: Where the build Job mounts the Secret `spec.model.credentialsSecretRef` names (read-only, optional:
#: a missing Secret leaves the directory empty and the build says so). Its keys are files there.
MODEL_CREDENTIALS_MOUNT = "/var/run/secrets/tailpilot/model-credentials"
#: Where the build Job mounts the ConfigMap `spec.model.caBundleConfigMapRef` names (optional too).
MODEL_CA_MOUNT = "/var/run/tailpilot/model-ca"


class S3Access(_Frozen):
    """How the build reaches an s3:// model: the endpoint of any S3-compatible store, its region.

    Credentials are not here (this document is on the Job's command line): they are the keys
    `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY` (and `AWS_SESSION_TOKEN`) of the Secret the
    request names, else the pod's own identity (web identity token, instance metadata).
    """

    #: `https://host[:port]` or `http://host[:port]`; None: AWS S3 (`s3.<region>.amazonaws.com`).
    endpoint: str | None = None
    region: str | None = None
    #: "path": `endpoint/bucket/key` (most stores other than AWS); "virtual": `bucket.endpoint/key`;
    #: "auto": virtual for AWS endpoints, path for any other.
    addressing_style: Literal["auto", "path", "virtual"] = Field(default="auto", alias="addressingStyle")


class ConfigMapKey(_Frozen):
    """One key of a ConfigMap in the service's namespace."""

    name: str
    key: str


class BuildRequest(_Frozen):
    """Everything the build Job needs, passed as one JSON document (`tailpilot build --request ...`).

    The operator derives it from the InferenceService spec; `request_key()`
    names the build Job, so re-runs and operator restarts never duplicate it.
    The engine key proper (content-addressed: model bytes, library versions)
    is computed by the builder once it has the model.
    """

    model_uri: str = Field(alias="modelUri")
    model_sha256: str | None = Field(default=None, alias="modelSha256")
    model_name: str = Field(default="model", alias="modelName")
    #: A `Backend` value (operator/api/backends.py) for every request the operator makes; the build
    #: Job builds the ones its registry holds (`tailpilot.builders.backends.registry`).
    backend: BackendName
    precision: Literal["fp32", "fp16", "int8"]
    calibration_uri: str | None = Field(default=None, alias="calibrationUri")
    calibration_sha256: str | None = Field(default=None, alias="calibrationSha256")
    shapes: tuple[ShapeProfile, ...] = ()
    max_batch_size: int = Field(ge=1, alias="maxBatchSize")
    #: "cpu" or the GPU product label value the engine is built for and pinned to.
    target: str = "cpu"
    #: "native": Triton's onnxruntime/tensorrt backend (production images);
    #: "python": the same optimized ONNX Runtime model wrapped in a Python-backend model
    #: (the Triton that runs on machines without those backends).
    serving_variant: Literal["native", "python"] = Field(default="native", alias="servingVariant")
    #: The serving container's CPU limit in millicores (CPU targets only): the build Job runs under
    #: it, so that building an engine for small pods does not take the whole node.
    cpu_limit_millis: int | None = Field(default=None, ge=1, alias="cpuLimitMillis")
    #: Engine store root (a mounted PVC path in the Job, a directory locally).
    store: str = "/engines"
    #: The accuracy guard: the engine is refused when its outputs stray further from the FP32
    #: reference's; None judges nothing (the measurement is still reported). Not in the engine key.
    accuracy_tolerance: AccuracyTolerance | None = Field(default=None, alias="accuracyTolerance")
    #: The s3:// model's (and calibration's) store; None: AWS S3 with the SDK's defaults.
    s3: S3Access | None = None
    #: The Secret holding the source's credentials, mounted at `MODEL_CREDENTIALS_MOUNT`; None: the
    #: pod's own identity. Named here so that naming another Secret makes a new build.
    credentials_secret: str | None = Field(default=None, alias="credentialsSecret")
    #: The ServiceAccount the build Job runs as (a cloud identity for the source); None: the default.
    service_account: str | None = Field(default=None, alias="serviceAccount")
    #: The Hub of an hf:// model (`https://host[:port]`); None: https://huggingface.co.
    hf_endpoint: str | None = Field(default=None, alias="hfEndpoint")
    #: The ConfigMap and key of a private CA bundle the fetch trusts, mounted at `MODEL_CA_MOUNT`.
    ca_bundle: ConfigMapKey | None = Field(default=None, alias="caBundle")

    def request_key(self) -> str:
        """Stable hash of the request (not of the model bytes); 20 hex chars, DNS-label safe."""
        document = self.model_dump(mode="json", exclude={"store"})
        for optional in (
            "cpu_limit_millis",
            "accuracy_tolerance",
            "s3",
            "credentials_secret",
            "ca_bundle",
            "hf_endpoint",
            "service_account",
        ):
            if document[optional] is None:
                # Requests without it keep the keys they had before the field existed: an
                # upgraded operator finds their build Jobs and engines instead of building again.
                del document[optional]
        return _document_key(document)


def _document_key(document: dict[str, object]) -> str:
    """20 hex chars of the sha256 of a request's canonical JSON, builder version included (names a Job)."""
    canonical = json.dumps({"v": BUILDER_VERSION, **document}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:20]


class TensorSpec(_Frozen):
    """One model input or output as Triton declares it (dims exclude the batch dimension; -1 = dynamic)."""

    name: str
    data_type: str = Field(alias="dataType")  # Triton's name, e.g. "TYPE_FP32"
    dims: tuple[int, ...]


class StoreGcReport(_Frozen):
    """The engine store's garbage collection in one build (the engines' keys are in the build's log)."""

    removed: int = Field(default=0, ge=0)
    freed_bytes: int = Field(default=0, ge=0, alias="freedBytes")
    #: Bytes of engines left in the store.
    kept_bytes: int = Field(default=0, ge=0, alias="keptBytes")


class BuildOutcome(StrEnum):
    """Whether a build produced an engine."""

    SUCCEEDED = "Succeeded"
    FAILED = "Failed"


class BuildResult(_Frozen):
    """What the build container writes to its termination message (JSON, camelCase keys).

    On failure, `reason` is a CamelCase constant (e.g. `ModelChecksumMismatch`)
    and `message` a sentence a user can act on; the operator copies both onto
    the EngineReady condition. Unknown keys are ignored: a builder image of
    another version may report more (builders before the profile Job reported a
    `profile` here), and its engine is still good.
    """

    model_config = ConfigDict(frozen=True, extra="ignore", populate_by_name=True)

    outcome: BuildOutcome
    #: Empty only on a failure: a success names its engine (`_names_its_engine`).
    engine_key: str = Field(default="", alias="engineKey", pattern=OPTIONAL_ENGINE_KEY_PATTERN)
    #: Where the published engine lives, e.g. "pvc://tailpilot-engines/<key>" or a store path.
    artifact: str = ""
    reason: str = ""
    message: str = ""
    #: Triton backend the engine is served with ("onnxruntime", "tensorrt" or "python").
    triton_backend: str = Field(default="", alias="tritonBackend")
    inputs: tuple[TensorSpec, ...] = ()
    outputs: tuple[TensorSpec, ...] = ()
    #: True when the engine was already in the store and nothing was rebuilt.
    cache_hit: bool = Field(default=False, alias="cacheHit")
    #: The engine's outputs against the FP32 reference (None for engines built before the guard).
    accuracy: AccuracyReport | None = None
    #: What the store's garbage collection removed before this build (None: it did not run).
    store_gc: StoreGcReport | None = Field(default=None, alias="storeGc")
    #: The sha256 of the model bytes the engine was built from (empty on a failure).
    model_sha256: str = Field(default="", alias="modelSha256", pattern=r"^([0-9a-f]{64})?$")
    #: What pinned those bytes at the source: a Hugging Face commit, an OCI manifest digest; empty
    #: for other sources, and for an engine found by its request without fetching the model.
    model_revision: str = Field(default="", alias="modelRevision", max_length=80)

    @model_validator(mode="after")
    def _names_its_engine(self) -> BuildResult:
        # A success without a key would reach status.engine, whose key is required: refused here,
        # where the result is parsed, so it reads as an unreadable result and not a failed pass.
        if self.outcome is BuildOutcome.SUCCEEDED and not self.engine_key:
            raise ValueError("a succeeded build names its engine (engineKey)")
        return self

    def to_termination_message(self) -> str:
        """Serialize within the kubelet's termination-message limit, always as whole JSON.

        The kubelet cuts a longer message at the limit, mid-string, and the operator could read
        nothing of it. A long `message` is cut first (its end marked); a result still too long (an
        engine with very many or very long tensor names) becomes a failed one saying so
        (`BuildResultTooLarge`): the engine is in the store, but the operator cannot learn its
        tensors from this result.
        """
        text = self.model_dump_json(by_alias=True, exclude_none=True)
        over = len(text.encode()) - TERMINATION_MESSAGE_LIMIT_BYTES
        if over <= 0:
            return text
        if self.message:
            # JSON escapes can make a character cost up to 6 bytes; cut generously, then check.
            keep = max(0, len(self.message) - over - len(_CUT_MARKER) - 16)
            shorter = self.model_copy(update={"message": self.message[:keep] + _CUT_MARKER})
            text = shorter.model_dump_json(by_alias=True, exclude_none=True)
            if len(text.encode()) <= TERMINATION_MESSAGE_LIMIT_BYTES:
                return text
        too_large = BuildResult(
            outcome=BuildOutcome.FAILED,
            engine_key=self.engine_key,
            reason="BuildResultTooLarge",
            message=(
                f"the build's result ({len(self.inputs)} inputs, {len(self.outputs)} outputs) does not fit "
                f"the {TERMINATION_MESSAGE_LIMIT_BYTES}-byte termination message the operator reads; "
                f"engine {self.engine_key[:12]} is in the store but cannot be served: a model with fewer "
                "or shorter-named inputs and outputs is needed"
            ),
        )
        return _within_limit(too_large.model_dump_json(by_alias=True, exclude_none=True))


#: Ends a message cut to fit the termination message.
_CUT_MARKER = " [...cut]"


def _within_limit(text: str) -> str:
    """Cut a message to the termination-message limit, on a character boundary."""
    return text.encode()[:TERMINATION_MESSAGE_LIMIT_BYTES].decode(errors="ignore")


#: Batch sizes a profile measures by default (those above the engine's max batch size are skipped).
DEFAULT_PROFILE_BATCH_SIZES = (1, 4, 16)


class ProfileRequest(_Frozen):
    """One engine to profile where it serves (`tailpilot profile --request ...` in the profile Job).

    Everything that changes what the measurement says is in `profile_key()`: the engine, the
    Triton image serving it, the hardware (GPU product and count, or the CPU limit) and the
    measurement plan. Two services with the same key share one cached profile in the store.
    """

    engine_key: str = Field(alias="engineKey", pattern=ENGINE_KEY_PATTERN)
    model_name: str = Field(alias="modelName")
    #: Triton backend serving the engine ("onnxruntime", "tensorrt" or "python").
    triton_backend: str = Field(alias="tritonBackend")
    precision: str = ""
    max_batch_size: int = Field(ge=1, alias="maxBatchSize")
    #: "cpu" or the GPU product label value the engine serves on.
    hardware: str = "cpu"
    gpu_count: int = Field(default=0, ge=0, alias="gpuCount")
    #: The Triton container's CPU limit in millicores (the profile holds for it); None without one.
    cpu_limit_millis: int | None = Field(default=None, ge=1, alias="cpuLimitMillis")
    #: The Triton image the service serves with (the profile Job runs the same one).
    triton_image: str = Field(alias="tritonImage")
    batch_sizes: tuple[int, ...] = Field(default=DEFAULT_PROFILE_BATCH_SIZES, alias="batchSizes")
    duration_s: float = Field(default=3.0, gt=0, alias="durationS")
    concurrency: int = Field(default=1, ge=1)
    #: Engine store root as mounted in the profile Job.
    store: str = "/engines"

    def profile_key(self) -> str:
        """Stable hash of what the measurement depends on; 20 hex chars, DNS-label safe."""
        return _document_key(self.model_dump(mode="json", exclude={"store"}))


class ProfileResult(_Frozen):
    """What the profile container writes to its termination message (JSON, camelCase keys).

    On failure, `reason` is a CamelCase constant (e.g. `ProfileFailed`) and `message` says
    why; the operator then serves the engine without a profile (the autoscaler learns its
    service time online) and reports both.
    """

    model_config = ConfigDict(frozen=True, extra="ignore", populate_by_name=True)

    outcome: BuildOutcome
    profile_key: str = Field(default="", alias="profileKey")
    profile: ProfileSummary | None = None
    reason: str = ""
    message: str = ""
    #: True when the profile came from the store (measured before for the same key).
    cache_hit: bool = Field(default=False, alias="cacheHit")

    def to_termination_message(self) -> str:
        """Serialize within the termination-message limit, shedding profile points if needed."""
        result = self
        text = result.model_dump_json(by_alias=True, exclude_none=True)
        while len(text.encode()) > TERMINATION_MESSAGE_LIMIT_BYTES and result.profile:
            if not result.profile.points:
                break
            # Keep the fitted model (what the autoscaler reads); drop the largest batch sizes' points.
            profile = result.profile.model_copy(update={"points": result.profile.points[:-1]})
            result = result.model_copy(update={"profile": profile})
            text = result.model_dump_json(by_alias=True, exclude_none=True)
        return _within_limit(text)
