"""The InferenceService API (tailpilot.io/v1alpha1): the single source of the CRD.

These pydantic models are the API. `tailpilot crds` (tailpilot.crdgen) turns
them into the CRD's structural OpenAPI v3 schema: field descriptions become
`kubectl explain` text, defaults/enums/bounds become schema keywords, and the
cross-field rules below become CEL `x-kubernetes-validations`, so the API
server itself rejects an invalid object with a message that names the field.

Each cross-field rule exists twice, on purpose: as CEL (enforced by the API
server) and as a pydantic validator with the same message (enforced when the
operator, the tests or the examples parse a spec). Both read their message from
one `Rule` value; `tests/api/invalid_specs.py` holds the table of invalid specs
that both the pure tests and the cluster tests run.

Python names are snake_case; JSON names are camelCase (alias generator), e.g.
`spec.slo.p99_latency_ms` is `spec.slo.p99LatencyMs` on the object.

How `kubectl scale` interacts with autoscaling (the `scale` subresource maps
to `spec.replicas` / `status.replicas`):
- `autoscaling.enabled: false`: `spec.replicas` is the replica count, like a
  Deployment's; `kubectl scale` sets it.
- `autoscaling.enabled: true` (default): the autoscaler owns the replica count
  and only records it in `status.replicas`; a change of `spec.replicas` (e.g.
  `kubectl scale`) is a one-off manual nudge: the operator applies it at once
  and the autoscaler continues from there, subject to its stabilization windows.
  `status.appliedSpecReplicas` records the `spec.replicas` value last applied, so
  a value already applied never overrides the autoscaler's later decisions
  (after an operator restart either).
- In both cases `spec.replicas` must lie within [minReplicas, maxReplicas].
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Annotated, Any, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic.alias_generators import to_camel

from tailpilot.api import constants as c
from tailpilot.api.autoscaling import BatchingConfig
from tailpilot.api.backends import Backend as Backend  # re-exported: the spec names it from here
from tailpilot.api.engine import ENGINE_KEY_PATTERN, OPTIONAL_ENGINE_KEY_PATTERN, ProfileSummary

# --- Limits that keep CEL's estimated cost bounded and objects small -------------------------

MAX_NAME_LENGTH = 46
MAX_URI_LENGTH = 2048
#: spec.rollout.maxLatencyRegressionPercent when unset (see RolloutSpec).
DEFAULT_MAX_LATENCY_REGRESSION_PERCENT = 20.0
MAX_SHAPES = 16
MAX_DIMS = 8
MAX_PREFERRED_BATCH_SIZES = 16
MAX_BATCH_SIZE = 4096
MAX_TOLERATIONS = 32
MAX_CONDITIONS = 16
MAX_PROFILE_POINTS = 32
MAX_TENSORS = 64
#: spec.monitoring.clientLatencyP99Query's length at most (a PromQL expression).
MAX_PROMQL_LENGTH = 2048
#: Entries of status.observed.batchSizes at most (beyond it the largest sizes share the last entry).
MAX_OBSERVED_BATCH_SIZES = 32
#: status.learned.rises: bins of the learned rises and the levels they reached (the policy keeps fewer
#: once old ones decay away; the status codec keeps the heaviest this many).
MAX_RISE_BINS = 128
#: status.errorBudget.buckets: the compliance period's parts (`tailpilot.policy.error_budget.BUCKETS`,
#: plus the one the period's start cuts).
MAX_BUDGET_BUCKETS = 25
SHA256_PATTERN = r"^[a-f0-9]{64}$"
#: Schemes the builder's fetcher supports (tailpilot.builders.fetch); others are rejected at apply time.
MODEL_URI_PATTERN = r"^(https?://|s3://|pvc://|oci://|hf://)\S+$"
LABEL_VALUE_PATTERN = r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
NAME_PATTERN = r"^[a-z]([-a-z0-9]*[a-z0-9])?$"


@dataclass(frozen=True)
class Rule:
    """One cross-field rule: its CEL expression, the message both checks use, the field it names.

    Attributes:
        cel: the CEL expression, evaluated with `self` = the object the rule sits on.
        message: the error message; it names the field by its full JSON path.
        field_path: JSON path relative to the rule's object that the API server reports.
    """

    cel: str
    message: str
    field_path: str | None = None
    #: The rule also runs on create, where `oldSelf` is an empty optional (`oldSelf.hasValue()` is
    #: false); a rule that reads `oldSelf` without it runs on updates only.
    optional_old_self: bool = False

    def to_schema(self) -> dict[str, str | bool]:
        """Return the `x-kubernetes-validations` entry."""
        entry: dict[str, str | bool] = {"rule": self.cel, "message": self.message}
        if self.field_path:
            entry["fieldPath"] = self.field_path
        if self.optional_old_self:
            entry["optionalOldSelf"] = True
        return entry


def _validations(*rules: Rule) -> dict[str, Any]:
    return {"x-kubernetes-validations": [r.to_schema() for r in rules]}


class _Model(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True)


def _fail(rule: Rule) -> ValueError:
    return ValueError(rule.message)


# --- spec.model -------------------------------------------------------------------------------


class ModelFormat(StrEnum):
    """Serialization format of the source model."""

    ONNX = "onnx"


class TensorOverride(_Model):
    """One model input or output, overriding what is detected from the ONNX graph."""

    name: str = Field(min_length=1, max_length=128, description="Tensor name as in the ONNX graph.")
    data_type: str = Field(
        pattern=r"^TYPE_[A-Z0-9]+$",
        max_length=32,
        description="Triton data type, e.g. TYPE_FP32, TYPE_INT64.",
    )
    dims: list[int] = Field(
        max_length=MAX_DIMS,
        description="Dimensions without the batch dimension; -1 marks a dynamic dimension.",
    )


@dataclass(frozen=True)
class UriShape:
    """What a URI of one scheme must look like, as one CEL rule and the same check in Python.

    Attributes:
        scheme: The prefix the shape applies to (`pvc://`); other URIs pass.
        shape: A regular expression the whole URI must match (RE2 for CEL, `re` here: the
            expressions use only what both read alike).
        usage: What the message says after `<field>.uri `: the form and why.
        forbidden: A regular expression no part of the URI may match (a `..` segment), or None.
    """

    scheme: str
    shape: str
    usage: str
    forbidden: str | None = None

    def rule(self, field: str) -> Rule:
        """The CEL rule on the object whose `uri` this is; `field` names it in the message."""
        matches = f"self.uri.matches('{self.shape}')"
        if self.forbidden is not None:
            matches = f"({matches} && !self.uri.matches('{self.forbidden}'))"
        return Rule(
            cel=f"!self.uri.startsWith('{self.scheme}') || {matches}",
            message=f"{field}.uri {self.usage}",
            field_path=".uri",
        )

    def accepts(self, uri: str) -> bool:
        """The rule's verdict, in Python."""
        return not uri.startswith(self.scheme) or (
            re.match(self.shape, uri) is not None
            and (self.forbidden is None or re.search(self.forbidden, uri) is None)
        )


#: A `..` path segment: a path that could leave what it names.
_PARENT_SEGMENT = r"/[.][.](/|$)"

#: A pvc:// URI: a claim name (a DNS subdomain, as Kubernetes names claims), then a path with no
#: percent-escapes and no `..` segment, so it cannot leave the claim it names once mounted.
PVC_URI = UriShape(
    scheme="pvc://",
    shape=r"^pvc://[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?/[^%]+$",
    usage=(
        "pvc://CLAIM/PATH: CLAIM must be a PersistentVolumeClaim name (lower-case letters, "
        "digits, '-' and '.') and PATH a path inside it, without '..' segments or percent-escapes"
    ),
    forbidden=_PARENT_SEGMENT,
)
#: An oci:// URI: a registry host[:port], a repository (the distribution spec's path components),
#: an optional tag, and the manifest's digest, which pins the artifact (a tag can be moved).
OCI_URI = UriShape(
    scheme="oci://",
    shape=(
        r"^oci://[A-Za-z0-9.-]+(:[0-9]{1,5})?/[a-z0-9]+([._/-][a-z0-9]+)*"
        r"(:[A-Za-z0-9_][A-Za-z0-9._-]{0,127})?@sha256:[a-f0-9]{64}$"
    ),
    usage=(
        "oci://REGISTRY/REPOSITORY[:TAG]@sha256:DIGEST must name the artifact's manifest "
        "digest (a tag can be moved), e.g. oci://ghcr.io/acme/models/resnet@sha256:<64 hex digits>"
    ),
)
#: An hf:// URI: a Hub repository ORG/REPO, an optional revision (a branch, tag or commit; no '/'),
#: then a file's path in the repository, without '..' segments or percent-escapes.
HF_URI = UriShape(
    scheme="hf://",
    shape=(
        r"^hf://[A-Za-z0-9][-A-Za-z0-9_.]{0,95}/[A-Za-z0-9][-A-Za-z0-9_.]{0,95}"
        r"(@[A-Za-z0-9][-A-Za-z0-9_.]{0,127})?/[^%@]+$"
    ),
    usage=(
        "hf://ORG/REPO[@REVISION]/PATH names a file of a Hugging Face repository: "
        "REVISION a branch, tag or commit without '/', PATH without '..' segments or percent-escapes"
    ),
    forbidden=_PARENT_SEGMENT,
)
#: The shaped schemes, in the order their rules are checked.
URI_SHAPES = (PVC_URI, OCI_URI, HF_URI)

#: The shapes' rules on spec.model and on spec.engine.calibration, in URI_SHAPES' order.
MODEL_URI_RULES = tuple(s.rule("spec.model") for s in URI_SHAPES)
CALIBRATION_URI_RULES = tuple(s.rule("spec.engine.calibration") for s in URI_SHAPES)
RULE_MODEL_PVC_URI, RULE_MODEL_OCI_URI, RULE_MODEL_HF_URI = MODEL_URI_RULES
RULE_CALIBRATION_PVC_URI, RULE_CALIBRATION_OCI_URI, RULE_CALIBRATION_HF_URI = CALIBRATION_URI_RULES


def _check_uri_shapes(uri: str, rules: tuple[Rule, ...]) -> None:
    """Raise the first of `rules` (MODEL_URI_RULES or CALIBRATION_URI_RULES) whose shape refuses `uri`."""
    for shape, rule in zip(URI_SHAPES, rules, strict=True):
        if not shape.accepts(uri):
            raise _fail(rule)


#: A URL's bytes are only trusted by their checksum: over http:// nothing else vouches for them.
RULE_HTTPS_SHA256 = Rule(
    cel="!(self.uri.startsWith('https://') || self.uri.startsWith('http://')) || has(self.sha256)",
    message="spec.model.sha256 is required when spec.model.uri is an http:// or https:// URL",
    field_path=".sha256",
)


#: A Secret's name: a DNS subdomain, as Kubernetes names Secrets.
SECRET_NAME_PATTERN = r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$"
#: An S3 endpoint: scheme and host[:port], no path, query or credentials in it.
S3_ENDPOINT_PATTERN = r"^https?://[A-Za-z0-9.-]+(:[0-9]{1,5})?/?$"


class S3Source(_Model):
    """Where an s3:// model's object store is: any S3-compatible endpoint, its region, its addressing."""

    endpoint: str | None = Field(
        default=None,
        max_length=256,
        pattern=S3_ENDPOINT_PATTERN,
        description=(
            "The store's endpoint, https://host[:port] (or http:// inside a trusted network), e.g. "
            "https://minio.storage.svc:9000. Unset: AWS S3 in the region."
        ),
    )
    region: str | None = Field(
        default=None,
        max_length=32,
        pattern=r"^[a-z0-9][a-z0-9-]*$",
        description="The bucket's region (AWS: e.g. eu-west-1). Unset: the endpoint's default (us-east-1).",
    )
    addressing_style: Literal["auto", "path", "virtual"] = Field(
        default="auto",
        description=(
            "path: endpoint/bucket/key (most S3-compatible stores); virtual: bucket.endpoint/key; "
            "auto: virtual for AWS endpoints, path for any other."
        ),
    )


class SecretReference(_Model):
    """A Secret in the service's namespace."""

    name: str = Field(max_length=253, pattern=SECRET_NAME_PATTERN, description="The Secret's name.")


class ConfigMapKeyReference(_Model):
    """One key of a ConfigMap in the service's namespace."""

    name: str = Field(max_length=253, pattern=SECRET_NAME_PATTERN, description="The ConfigMap's name.")
    key: str = Field(
        default="ca.crt",
        max_length=253,
        pattern=r"^[-._A-Za-z0-9]+$",
        description="The key holding the PEM bundle.",
    )


class HuggingFaceSource(_Model):
    """Which Hugging Face Hub serves an hf:// model: huggingface.co, or a self-hosted Hub or mirror."""

    endpoint: str | None = Field(
        default=None,
        max_length=256,
        pattern=S3_ENDPOINT_PATTERN,
        description="The Hub's endpoint, https://host[:port]. Unset: https://huggingface.co.",
    )


RULE_HF_OPTIONS_NEED_HF_URI = Rule(
    cel="!has(self.hf) || self.uri.startsWith('hf://')",
    message="spec.model.hf applies to hf:// models only: spec.model.uri must start with hf://",
    field_path=".hf",
)

RULE_S3_OPTIONS_NEED_S3_URI = Rule(
    cel="!has(self.s3) || self.uri.startsWith('s3://')",
    message="spec.model.s3 applies to s3:// models only: spec.model.uri must start with s3://",
    field_path=".s3",
)


class ModelSpec(_Model):
    """Where the ONNX model comes from."""

    model_config = ConfigDict(
        json_schema_extra=_validations(
            RULE_HTTPS_SHA256,
            RULE_MODEL_PVC_URI,
            RULE_MODEL_OCI_URI,
            RULE_MODEL_HF_URI,
            RULE_S3_OPTIONS_NEED_S3_URI,
            RULE_HF_OPTIONS_NEED_HF_URI,
        )
    )

    uri: str = Field(
        max_length=MAX_URI_LENGTH,
        pattern=MODEL_URI_PATTERN,
        description=(
            "Location of the model: https://host/path or http://host/path (both require sha256: "
            "the build refuses bytes that differ), s3://bucket/key (any S3-compatible store: see s3), "
            "oci://registry/repository[:tag]@sha256:digest (an OCI artifact, e.g. pushed with oras, or a "
            "modelcar image with the model under /models; the digest pins it), "
            "hf://org/repo[@revision]/path (a file of a Hugging Face repository; see hf), or "
            "pvc://claim/path (a PersistentVolumeClaim in this namespace, mounted read-only in the build)."
        ),
    )
    s3: S3Source | None = Field(
        default=None,
        description="The object store of an s3:// model (and of s3:// calibration data). Unset: AWS S3.",
    )
    hf: HuggingFaceSource | None = Field(
        default=None, description="The Hub of an hf:// model (and of hf:// calibration data)."
    )
    ca_bundle_config_map_ref: ConfigMapKeyReference | None = Field(
        default=None,
        description=(
            "A ConfigMap in this namespace whose key (default ca.crt) holds the PEM certificates of a "
            "private CA the build trusts for this source (https URLs, an https S3 endpoint, an OCI "
            "registry), e.g. the bundle trust-manager distributes. Unset: the image's public CAs only."
        ),
    )
    service_account_name: str | None = Field(
        default=None,
        max_length=253,
        pattern=SECRET_NAME_PATTERN,
        description=(
            "The ServiceAccount the build Job runs as, for a source that trusts the pod's own identity "
            "instead of a Secret: e.g. one annotated for IRSA (eks.amazonaws.com/role-arn) or GKE Workload "
            "Identity, whose webhook gives the pod its token. The Kubernetes API token is still not "
            "mounted. Unset: the namespace's default ServiceAccount."
        ),
    )
    credentials_secret_ref: SecretReference | None = Field(
        default=None,
        description=(
            "A Secret in this namespace with the source's credentials; only the build Job reads it "
            "(mounted read-only), never the operator, and no status shows it. For s3: the keys "
            "AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and optionally AWS_SESSION_TOKEN (unset: the "
            "build pod's own identity, web identity token or instance metadata). For oci: a registry "
            "Secret (type kubernetes.io/dockerconfigjson, key .dockerconfigjson; unset: anonymous). "
            "For hf: the key HF_TOKEN (unset: public repositories only)."
        ),
    )
    sha256: str | None = Field(
        default=None,
        pattern=SHA256_PATTERN,
        description="Lower-case hex SHA-256 of the model file; the build fails if the bytes differ.",
    )
    format: ModelFormat = Field(default=ModelFormat.ONNX, description="Format of the model file.")
    name: str | None = Field(
        default=None,
        max_length=63,
        pattern=r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$",
        description="Model name served by Triton (the URL path clients call). Defaults to the object's name.",
    )
    inputs: list[TensorOverride] = Field(
        default_factory=list,
        json_schema_extra={"default": []},
        max_length=MAX_TENSORS,
        description="Input overrides; by default the inputs are read from the ONNX graph.",
    )
    outputs: list[TensorOverride] = Field(
        default_factory=list,
        json_schema_extra={"default": []},
        max_length=MAX_TENSORS,
        description="Output overrides; by default the outputs are read from the ONNX graph.",
    )

    @model_validator(mode="after")
    def _https_needs_sha256(self) -> Self:
        if self.uri.startswith(("https://", "http://")) and self.sha256 is None:
            raise _fail(RULE_HTTPS_SHA256)
        _check_uri_shapes(self.uri, MODEL_URI_RULES)
        if self.s3 is not None and not self.uri.startswith("s3://"):
            raise _fail(RULE_S3_OPTIONS_NEED_S3_URI)
        if self.hf is not None and not self.uri.startswith("hf://"):
            raise _fail(RULE_HF_OPTIONS_NEED_HF_URI)
        return self


# --- spec.engine ------------------------------------------------------------------------------


class Precision(StrEnum):
    """Numeric precision of the engine."""

    FP32 = "fp32"
    FP16 = "fp16"
    INT8 = "int8"
    #: Build every precision the target supports, keep those within the accuracy tolerance, serve the
    #: one needing the fewest replicas (status.precision).
    AUTO = "auto"


class CalibrationSpec(_Model):
    """INT8 calibration data: a .npz of representative inputs keyed by input name."""

    model_config = ConfigDict(
        json_schema_extra=_validations(
            RULE_CALIBRATION_PVC_URI, RULE_CALIBRATION_OCI_URI, RULE_CALIBRATION_HF_URI
        )
    )

    uri: str = Field(
        max_length=MAX_URI_LENGTH,
        pattern=MODEL_URI_PATTERN,
        description="Location of the calibration data (same schemes as spec.model.uri).",
    )
    sha256: str | None = Field(
        default=None, pattern=SHA256_PATTERN, description="Lower-case hex SHA-256 of the calibration file."
    )

    @model_validator(mode="after")
    def _uri_shapes(self) -> Self:
        _check_uri_shapes(self.uri, CALIBRATION_URI_RULES)
        return self


_Dims = Annotated[list[Annotated[int, Field(ge=1)]], Field(min_length=1, max_length=MAX_DIMS)]

RULE_SHAPE_LENGTHS = Rule(
    cel="size(self.min) == size(self.opt) && size(self.opt) == size(self.max)",
    message="spec.engine.shapes[].min, opt and max must have the same number of dimensions",
    field_path=".opt",
)
RULE_SHAPE_ORDER = Rule(
    cel=(
        "size(self.min) != size(self.opt) || size(self.opt) != size(self.max) || "
        f"[{', '.join(str(i) for i in range(MAX_DIMS))}].all(i, i >= size(self.min) || "
        "(self.min[i] <= self.opt[i] && self.opt[i] <= self.max[i]))"
    ),
    message="spec.engine.shapes[] must satisfy min <= opt <= max in every dimension",
    field_path=".opt",
)


class ShapeSpec(_Model):
    """Dynamic-shape profile of one input (non-batch dimensions; the batch dimension follows batching)."""

    model_config = ConfigDict(json_schema_extra=_validations(RULE_SHAPE_LENGTHS, RULE_SHAPE_ORDER))

    input: str = Field(min_length=1, max_length=128, description="Input name as in the ONNX graph.")
    min: _Dims = Field(description="Smallest accepted size of each non-batch dimension.")
    opt: _Dims = Field(description="Size the engine is optimized for, per non-batch dimension.")
    max: _Dims = Field(description="Largest accepted size of each non-batch dimension.")

    @model_validator(mode="after")
    def _ordered(self) -> Self:
        if not len(self.min) == len(self.opt) == len(self.max):
            raise _fail(RULE_SHAPE_LENGTHS)
        if any(not lo <= mid <= hi for lo, mid, hi in zip(self.min, self.opt, self.max, strict=True)):
            raise _fail(RULE_SHAPE_ORDER)
        return self


RULE_INT8_CALIBRATION = Rule(
    cel="!(self.backend == 'tensorrt' && self.precision == 'int8') || has(self.calibration)",
    message="spec.engine.calibration is required when spec.engine.backend is tensorrt and precision is int8",
    field_path=".calibration",
)


class AccuracyToleranceSpec(_Model):
    """The accuracy guard: how far an engine's outputs may stray from the FP32 model's."""

    max_relative_error: float = Field(
        default=0.1,
        ge=0,
        le=1000,
        description=(
            "Largest |engine - reference| over every output value, relative to the largest |reference| "
            "value, on the calibration inputs (or 64 seeded normal inputs the build generates from the "
            "model's signature). The example model's INT8 engine measured 0.03."
        ),
    )
    min_top1_agreement: float = Field(
        default=0.9,
        ge=0,
        le=1,
        description=(
            "For outputs with more than one class on their last axis: the share of inputs whose "
            "arg-max agrees with the FP32 model's (0 turns the check off, e.g. for regression "
            "outputs). The example model's INT8 engine measured 0.94 on its calibration inputs."
        ),
    )


class EngineSpec(_Model):
    """How the model is compiled into an engine (part of the engine key: a change rebuilds)."""

    model_config = ConfigDict(json_schema_extra=_validations(RULE_INT8_CALIBRATION))

    backend: Backend = Field(
        default=Backend.ONNXRUNTIME,
        description="tensorrt (GPU only) builds a TensorRT plan; onnxruntime serves an optimized ONNX model.",
    )
    precision: Precision = Field(
        default=Precision.FP32,
        description=(
            "Numeric precision of the engine: fp32, fp16, int8, or auto: build every precision the "
            "target supports (onnxruntime on CPU: fp32 and int8; onnxruntime on a GPU: fp32 and fp16; "
            "tensorrt: fp16, and int8 with calibration data), drop those outside accuracyTolerance, "
            "and serve the one that needs the fewest replicas for the SLO at the observed rate (the "
            "most capacity per replica at no load); status.precision has every candidate's figures."
        ),
    )
    calibration: CalibrationSpec | None = Field(
        default=None, description="INT8 calibration data; required for tensorrt with precision int8."
    )
    profile: bool = Field(
        default=True,
        description=(
            "Profile each new engine where it serves before it serves: a profile Job runs the service's "
            "own Triton container on a node of its hardware with a profiler beside it (latency and "
            "throughput per batch size, one timed live reload), which seeds the autoscaler and gates "
            "the rollout (spec.rollout). Without a profile the autoscaler learns the service time "
            "online from the serving pods' own Triton counters (status.learned.serviceTime), cautiously "
            "until the batch sizes seen are enough to fit it. Not part of the engine key: a change "
            "applies to the next engine."
        ),
    )
    accuracy_tolerance: AccuracyToleranceSpec = Field(
        default_factory=AccuracyToleranceSpec,
        json_schema_extra={"default": AccuracyToleranceSpec().model_dump(by_alias=True, mode="json")},
        description=(
            "The accuracy guard. The build runs the new ONNX Runtime engine and the FP32 model on the "
            "same inputs; an engine outside this tolerance is refused (EngineReady False, reason "
            "AccuracyOutOfTolerance, with the figures) and never served. status.engine.accuracy "
            "shows what was measured. TensorRT plans are not measured (the build has no TensorRT runtime "
            "to run them): their report says so and they are not judged."
        ),
    )
    shapes: list[ShapeSpec] = Field(
        default_factory=list,
        max_length=MAX_SHAPES,
        description="Dynamic-shape profiles, one per input with dynamic non-batch dimensions.",
        json_schema_extra={
            "default": [],
            "x-kubernetes-list-type": "map",
            "x-kubernetes-list-map-keys": ["input"],
        },
    )

    @model_validator(mode="after")
    def _checks(self) -> Self:
        if self.backend is Backend.TENSORRT and self.precision is Precision.INT8 and self.calibration is None:
            raise _fail(RULE_INT8_CALIBRATION)
        names = [s.input for s in self.shapes]
        if len(names) != len(set(names)):
            raise ValueError("spec.engine.shapes[].input must be unique (Duplicate value)")
        return self


# --- spec.runtime -----------------------------------------------------------------------------


class Device(StrEnum):
    """Where the engine runs."""

    GPU = "gpu"
    CPU = "cpu"


class ServingVariant(StrEnum):
    """Which Triton backend serves the engine."""

    NATIVE = "native"
    PYTHON = "python"


RULE_GPU_COUNT = Rule(
    cel="self.count >= 1",
    message="spec.runtime.gpu.count must be at least 1 when spec.runtime.device is gpu",
    field_path=".count",
)


MAX_GPU_PRODUCTS = 8

RULE_GPU_PRODUCT_SET = Rule(
    cel="has(self.product) || has(self.products)",
    message="spec.runtime.gpu needs a product (one GPU product) or products (the products it may run on)",
)
RULE_GPU_PRODUCT_ONE_WAY = Rule(
    cel="!(has(self.product) && has(self.products))",
    message="spec.runtime.gpu: set product or products, not both",
)


class GpuProductOption(_Model):
    """A GPU product a service may run on, and what one of its GPUs costs."""

    name: str = Field(
        min_length=1,
        max_length=63,
        pattern=LABEL_VALUE_PATTERN,
        description=f"GPU product as the node label {c.GPU_PRODUCT_LABEL} spells it, e.g. NVIDIA-L4.",
    )
    price_per_hour: float | None = Field(
        default=None,
        gt=0,
        le=1000,
        description=(
            "Price of one GPU of this product per hour, in any currency used consistently; overrides the "
            "operator's price table (the chart's gpuPrices). A product without a price from either is "
            "not chosen."
        ),
    )


class GpuSpec(_Model):
    """The GPUs of one replica."""

    model_config = ConfigDict(
        json_schema_extra=_validations(RULE_GPU_COUNT, RULE_GPU_PRODUCT_SET, RULE_GPU_PRODUCT_ONE_WAY)
    )

    product: str | None = Field(
        default=None,
        min_length=1,
        max_length=63,
        pattern=LABEL_VALUE_PATTERN,
        description=(
            f"GPU product as the node label {c.GPU_PRODUCT_LABEL} spells it, e.g. NVIDIA-H100-80GB-HBM3. "
            "Pods and the build and profile Jobs are pinned to it; a TensorRT engine only runs on the "
            "product it was built for. Set this or products."
        ),
    )
    products: list[GpuProductOption] | None = Field(
        default=None,
        min_length=1,
        max_length=MAX_GPU_PRODUCTS,
        description=(
            "The GPU products the service may run on: an engine is built and profiled for each, and the "
            "autoscaler serves on the one that holds the SLO at the observed load for the lowest price "
            "(replicas x count x price per hour), moving when another stays cheaper long enough to pay "
            "for the move (status.gpu says which and why). Set this or product."
        ),
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]},
    )
    count: int = Field(
        default=1, ge=0, le=16, description=f"Whole GPUs per replica ({c.GPU_RESOURCE} limit)."
    )
    exclusive: bool = Field(
        default=False,
        description="When true, a replica never shares a node with pods of another InferenceService.",
    )

    @model_validator(mode="after")
    def _count(self) -> Self:
        if self.count < 1:
            raise _fail(RULE_GPU_COUNT)
        if self.product is None and self.products is None:
            raise _fail(RULE_GPU_PRODUCT_SET)
        if self.product is not None and self.products is not None:
            raise _fail(RULE_GPU_PRODUCT_ONE_WAY)
        if self.products is not None and len({p.name for p in self.products}) != len(self.products):
            raise ValueError("spec.runtime.gpu.products[].name must be unique (Duplicate value)")
        return self

    def allowed_products(self) -> tuple[str, ...]:
        """Every product the service may run on, in the spec's order."""
        if self.products is not None:
            return tuple(p.name for p in self.products)
        return (self.product,) if self.product else ()

    @property
    def chooses_product(self) -> bool:
        """Whether the operator chooses among several products (products is set)."""
        return self.products is not None

    def on(self, product: str) -> GpuSpec:
        """The same GPUs pinned to one product (what the manifests of that product's pods use)."""
        return self.model_copy(update={"product": product, "products": None})


RULE_GPU_REQUIRED = Rule(
    cel="self.device != 'gpu' || has(self.gpu)",
    message="spec.runtime.gpu is required when spec.runtime.device is gpu",
    field_path=".gpu",
)
RULE_GPU_FORBIDDEN = Rule(
    cel="self.device != 'cpu' || !has(self.gpu)",
    message="spec.runtime.gpu must not be set when spec.runtime.device is cpu",
    field_path=".gpu",
)


class RuntimeSpec(_Model):
    """Where and how the Triton replicas run."""

    model_config = ConfigDict(json_schema_extra=_validations(RULE_GPU_REQUIRED, RULE_GPU_FORBIDDEN))

    device: Device = Field(default=Device.CPU, description="gpu or cpu.")
    gpu: GpuSpec | None = Field(default=None, description="GPU placement; required when device is gpu.")
    image: str | None = Field(
        default=None,
        max_length=512,
        description="Triton image; defaults to the operator's configured image (Triton 2.51).",
    )
    serving_variant: ServingVariant = Field(
        default=ServingVariant.NATIVE,
        description=(
            "native: Triton's own onnxruntime/tensorrt backend; python: the optimized ONNX model wrapped "
            "in a "
            "Python-backend model (for Triton builds without those backends)."
        ),
    )
    resources: dict[str, Any] | None = Field(
        default=None,
        description=(
            "Kubernetes ResourceRequirements of the Triton container (requests/limits). The GPU limit is "
            "set from gpu.count and cannot be overridden here."
        ),
        json_schema_extra={"x-kubernetes-preserve-unknown-fields": True},
    )
    node_selector: dict[str, str] = Field(
        default_factory=dict,
        json_schema_extra={"default": {}},
        description="Extra node labels the replicas require, merged with the GPU product selector.",
    )
    tolerations: list[dict[str, Any]] = Field(
        default_factory=list,
        json_schema_extra={"default": []},
        max_length=MAX_TOLERATIONS,
        description="Extra Kubernetes tolerations, added to the GPU taint toleration.",
    )
    affinity: dict[str, Any] | None = Field(
        default=None,
        description="Kubernetes Affinity, merged with the exclusive-placement anti-affinity.",
        json_schema_extra={"x-kubernetes-preserve-unknown-fields": True},
    )

    @model_validator(mode="after")
    def _gpu(self) -> Self:
        if self.device is Device.GPU and self.gpu is None:
            raise _fail(RULE_GPU_REQUIRED)
        if self.device is Device.CPU and self.gpu is not None:
            raise _fail(RULE_GPU_FORBIDDEN)
        return self


# --- spec.batching ----------------------------------------------------------------------------


class BatchingMode(StrEnum):
    """Who decides the dynamic-batching settings."""

    AUTO = "auto"
    FIXED = "fixed"


RULE_PREFERRED_LE_MAX = Rule(
    cel="!has(self.preferredBatchSizes) || self.preferredBatchSizes.all(s, s <= self.maxBatchSize)",
    message="spec.batching.preferredBatchSizes must all be less than or equal to spec.batching.maxBatchSize",
    field_path=".preferredBatchSizes",
)


class BatchingSpec(_Model):
    """Triton dynamic batching: fixed values, or bounds the operator tunes within (auto)."""

    model_config = ConfigDict(json_schema_extra=_validations(RULE_PREFERRED_LE_MAX))

    mode: BatchingMode = Field(
        default=BatchingMode.AUTO,
        description=(
            "auto: the operator tunes batch size and queue delay live within these bounds to hold the SLO; "
            "fixed: exactly these values."
        ),
    )
    max_batch_size: int = Field(
        default=32,
        ge=1,
        le=MAX_BATCH_SIZE,
        description="Largest batch Triton forms (the engine's batch dimension maximum; a change rebuilds).",
    )
    preferred_batch_sizes: list[Annotated[int, Field(ge=1, le=MAX_BATCH_SIZE)]] = Field(
        default_factory=list,
        max_length=MAX_PREFERRED_BATCH_SIZES,
        description="Batch sizes Triton prefers to form; each at most maxBatchSize.",
        json_schema_extra={"default": [], "x-kubernetes-list-type": "set"},
    )
    max_queue_delay_microseconds: int = Field(
        default=2000,
        ge=0,
        le=10_000_000,
        description="Longest wait for a batch to fill, microseconds (an upper bound in auto mode).",
    )
    instances_per_replica: int = Field(
        default=1, ge=1, le=16, description="Model instances (execution streams) per replica."
    )

    @model_validator(mode="after")
    def _preferred(self) -> Self:
        if any(s > self.max_batch_size for s in self.preferred_batch_sizes):
            raise _fail(RULE_PREFERRED_LE_MAX)
        if len(set(self.preferred_batch_sizes)) != len(self.preferred_batch_sizes):
            raise ValueError("spec.batching.preferredBatchSizes must not repeat a value (Duplicate value)")
        return self

    def to_config(self) -> BatchingConfig:
        """Return the batching this spec asks for, as the policy and config renderer take it."""
        return BatchingConfig(
            max_batch_size=self.max_batch_size,
            preferred_batch_sizes=tuple(sorted(self.preferred_batch_sizes)),
            max_queue_delay_us=self.max_queue_delay_microseconds,
            instances_per_replica=self.instances_per_replica,
        )


# --- spec.slo ---------------------------------------------------------------------------------

RULE_SLO_POSITIVE = Rule(
    cel="self.p99LatencyMs > 0.0",
    message="spec.slo.p99LatencyMs must be greater than 0",
    field_path=".p99LatencyMs",
)


class SloSpec(_Model):
    """The latency objective the operator holds."""

    model_config = ConfigDict(json_schema_extra=_validations(RULE_SLO_POSITIVE))

    p99_latency_ms: float = Field(
        le=600_000,
        description="Target 99th-percentile request latency in milliseconds, measured at the server.",
    )
    max_queue_depth: int | None = Field(
        default=None, ge=1, le=1_000_000, description="Optional bound on pending requests per replica."
    )
    evaluation_window_seconds: int = Field(
        default=60, ge=10, le=3600, description="Window over which P99 and queue depth are evaluated."
    )
    objective_percent: float = Field(
        default=99.0,
        ge=50.0,
        le=99.99,
        description=(
            "Attainment objective: the share of time (evaluation windows) whose P99 must meet "
            "p99LatencyMs over the compliance period; 100 minus it is the error budget. The "
            "autoscaler keeps a share of p99LatencyMs free that grows with the objective (15% at 99, "
            "25% at 99.9, 8% at 95) and holds the headroom over the observed load that this "
            "objective and the budget left call for (lean while the budget is healthy, more while it "
            "burns); the generated burn-rate alerts use this budget. Higher costs more replicas; under "
            "99 the headroom starts as lean as at 99, and the larger budget lets more misses pass "
            "before it grows."
        ),
    )
    compliance_period_hours: int = Field(
        default=168,
        ge=1,
        le=2160,
        description=(
            "Rolling period the error budget is counted over (hours; default one week). "
            "status.errorBudget shows what is left of it."
        ),
    )

    @model_validator(mode="after")
    def _positive(self) -> Self:
        if not self.p99_latency_ms > 0:
            raise _fail(RULE_SLO_POSITIVE)
        return self


# --- spec.autoscaling -------------------------------------------------------------------------

RULE_MIN_LE_MAX = Rule(
    cel="self.minReplicas <= self.maxReplicas",
    message="spec.autoscaling.minReplicas must be less than or equal to spec.autoscaling.maxReplicas",
    field_path=".minReplicas",
)


class AutoscalingSpec(_Model):
    """Replica bounds and the autoscaler's pace."""

    model_config = ConfigDict(json_schema_extra=_validations(RULE_MIN_LE_MAX))

    enabled: bool = Field(
        default=True,
        description="When false, spec.replicas is the replica count and batching is not tuned.",
    )
    min_replicas: int = Field(
        default=1,
        ge=0,
        le=1000,
        description=(
            "Fewest replicas. 0 lets an idle service scale to zero: while it has no ready replica its "
            "Service routes to the activator, which holds the requests (KServe v2 HTTP and gRPC), wakes "
            "the service and forwards them once a replica is ready. When the last replica goes is "
            "learned from the service's idle stretches and priced by the objective's error budget "
            "(at least idleBeforeZeroSeconds). Needs the chart's activator; without one the service "
            "keeps one replica."
        ),
    )
    max_replicas: int = Field(default=4, ge=1, le=1000, description="Most replicas.")
    dry_run: bool = Field(
        default=False,
        description="Decide and report (status.lastDecision, Events) but change nothing.",
    )
    scale_down_stabilization_seconds: int = Field(
        default=300, ge=0, le=3600, description="A scale-down happens only if wanted for this long."
    )
    scale_up_stabilization_seconds: int = Field(
        default=0,
        ge=0,
        le=3600,
        description=(
            "A scale-up happens only if wanted for this long: it goes to the lowest replica count "
            "recommended over this window (like the HPA's scale-up stabilization), even while an SLO "
            "alert fires. 0 scales up as soon as the load asks. The window is kept in the operator's "
            "memory: after an operator restart it starts empty."
        ),
    )
    max_scale_up_step: int = Field(
        default=4, ge=1, le=100, description="Most replicas added by one decision."
    )
    idle_before_zero_seconds: int = Field(
        default=60,
        ge=30,
        le=86400,
        description=(
            "With minReplicas 0: the least time without a request before the last replica goes. The "
            "operator waits longer when the service's idle stretches and the error budget say a cold "
            "start would cost more than the replica saves."
        ),
    )
    backlog_rotation: bool = Field(
        default=False,
        description=(
            "Take a replica whose queue alone would break the SLO out of the Service's endpoints "
            "(label tailpilot.io/rotation=held) while fresh replicas carry the load, as after a "
            "load step, and put it back once its queue is short. It helps clients that the "
            "Service balances per request or per new connection; a client on one long-lived "
            "connection keeps its pod. Enabling it rolls the pods once to add the label and adds a "
            "headless <name>-metrics Service that keeps held pods scraped (deleted when turned off)."
        ),
    )
    surge_response: bool = Field(
        default=True,
        description=(
            "Decide at once, between control periods, when the arrivals of the last 5 s (from the "
            "pods' Triton metrics, read every 2 s) exceed what the replicas asked for can serve, in "
            "two reads running, instead of waiting for the period's end: a load step is answered up "
            "to a period sooner. It never fires on steady load. Needs the operator to reach the pods' "
            "metrics port, as batching reloads do."
        ),
    )
    absorb_bursts: bool = Field(
        default=True,
        description=(
            "Hold the replicas that absorb the bursts of arrivals seen within the scale-down "
            "stabilization window (bursts beyond Poisson noise, in 2 s bins of the pods' counters); "
            "false sizes the fleet for the evaluation window's rate only."
        ),
    )

    @model_validator(mode="after")
    def _bounds(self) -> Self:
        if self.min_replicas > self.max_replicas:
            raise _fail(RULE_MIN_LE_MAX)
        return self

    # --- spec.monitoring --------------------------------------------------------------------------

    def surge_checks(self) -> bool:
        """Whether the surge check runs: surgeResponse asks for it, and only an enabled autoscaler decides."""
        return self.enabled and self.surge_response

    def fast_checks(self) -> bool:
        """Whether the operator reads the pods' metrics between decisions (rotation or surge checks)."""
        return self.backlog_rotation or self.surge_checks()


def _section_default(model: type[_Model]) -> dict[str, Any]:
    """CRD default of a section whose fields all have defaults: the fully defaulted section.

    Not `{}`: the API server validates a CRD's default values (CEL included) without applying
    the nested defaults first, so rules reading e.g. `self.device` would fail on `{}`.
    """
    return {"default": model().model_dump(by_alias=True, exclude_none=True, mode="json")}


class RolloutStrategy(StrEnum):
    """How a new engine that passed the regression gate replaces the one serving."""

    #: A rolling update of the serving pods, one new pod at a time.
    ROLLING = "rolling"
    #: First a share of the traffic on the new engine's own replicas, compared with the stable ones.
    CANARY = "canary"


class CanarySpec(_Model):
    """The canary analysis of spec.rollout.strategy canary."""

    traffic_percent: int = Field(
        default=20,
        ge=1,
        le=50,
        description=(
            "Share of the traffic the new engine serves while it is analysed. The Service spreads "
            "requests over its ready pods, so the share is made by replica counts: "
            "max(1, round(stable replicas x p / (100 - p))) canary replicas beside the stable ones "
            "(one canary beside one stable replica serves half). status.canary has the share observed."
        ),
    )
    analysis_seconds: int = Field(
        default=120,
        ge=60,
        le=3600,
        description=(
            "How long the canary serves, from when its replicas are ready, before its P99 is compared "
            "with the stable replicas'. The P99s are Triton's latency summaries at the end of the window, "
            "which cover its last minute: past a minute, the canary's first requests (a new pod's "
            "warm-up) are out of them, and both sides are judged on the same recent traffic."
        ),
    )
    min_requests: int = Field(
        default=200,
        ge=10,
        le=10_000_000,
        description=(
            "Requests each side must have answered before it is judged (a P99 needs a hundred or so). "
            "Below it the analysis goes on past analysisSeconds; the accept annotation promotes at once."
        ),
    )
    max_error_rate_percent: float = Field(
        default=1.0,
        ge=0,
        le=100,
        description=(
            "Percentage points by which the canary's failed-request share may exceed the stable "
            "replicas'. Judged as soon as minRequests are in: a canary failing more is rolled back "
            "without waiting for the end of the analysis."
        ),
    )


class RolloutSpec(_Model):
    """How a new engine replaces the one serving."""

    strategy: RolloutStrategy = Field(
        default=RolloutStrategy.ROLLING,
        description=(
            "rolling: a new engine that passed the regression gate replaces the serving one with a "
            "rolling update. canary: it first serves a share of the traffic on its own replicas (a "
            "second Deployment, NAME-canary); the operator compares their observed P99 and error rate "
            "with the stable replicas' (spec.rollout.canary) and promotes it (rolling update of the "
            "stable replicas) or rolls it back (the canary removed, RolloutBlocked=True with the figures)."
        ),
    )
    canary: CanarySpec = Field(
        default_factory=CanarySpec,
        json_schema_extra=_section_default(CanarySpec),
        description="The canary analysis, for strategy canary.",
    )

    max_latency_regression_percent: float = Field(
        default=DEFAULT_MAX_LATENCY_REGRESSION_PERCENT,
        ge=0,
        le=1000,
        description=(
            "Regression gate. When a new engine is profiled for a service that is serving, its profile "
            "is compared with the serving engine's at the service's operating point (observed request "
            "rate, replicas and batching in force): predicted P99 and capacity per replica. If either is "
            "worse by more than this percentage, the new engine is held (condition RolloutBlocked, "
            "reason LatencyRegression, with both figures) and the old one keeps serving, until the "
            "annotation tailpilot.io/accept-engine names the new engine key (or its first 12 characters). "
            "The default sits above the run-to-run spread of profiles of one engine."
        ),
    )


class MonitoringSpec(_Model):
    """Where metrics come from and which monitoring objects the operator creates."""

    prometheus_url: str | None = Field(
        default=None,
        max_length=MAX_URI_LENGTH,
        pattern=r"^https?://\S+$",
        description=(
            "Prometheus to query; defaults to the operator's configured Prometheus. Only a Prometheus "
            "the platform allows (the operator's --allowed-prometheus-url, the chart's "
            "prometheus.allowedUrls) is queried: any other URL is never contacted, and ScalingActive "
            "is False with reason PrometheusUrlNotAllowed."
        ),
    )
    service_monitor: bool = Field(
        default=True,
        description=(
            "Create a ServiceMonitor (when the prometheus-operator CRDs exist); false deletes the "
            "one the operator created."
        ),
    )
    prometheus_rule: bool = Field(
        default=True,
        description=(
            "Create a PrometheusRule with SLO burn-rate alerts (if prometheus-operator CRDs exist); "
            "false deletes the one the operator created."
        ),
    )
    scrape_interval_seconds: int = Field(
        default=15, ge=1, le=300, description="Scrape interval of Triton's metrics."
    )
    client_latency_p99_query: str | None = Field(
        default=None,
        min_length=1,
        max_length=MAX_PROMQL_LENGTH,
        pattern=r"\S",
        description=(
            "A PromQL expression giving the P99 latency the service's clients see, in milliseconds "
            "(an ingress, a gateway or the clients' own histogram), evaluated by the autoscaler each "
            "control period as an instant query against the service's Prometheus. Shown as "
            "status.observed.clientP99Ms and, less the server's P99, outsideServerP99Ms (network, "
            "ingress, serialization); not used to decide. It must return one series or a scalar. "
            "Evaluated only where the platform turns tenants' queries on (the operator's "
            "--client-latency-queries, the chart's prometheus.clientLatencyQueries; off by default, "
            "since PromQL on a shared Prometheus reads every tenant's series); otherwise the "
            "LatencyBreakdown message says it was not evaluated. "
            "Example: histogram_quantile(0.99, sum by (le) (rate("
            'nginx_ingress_controller_request_duration_seconds_bucket{ingress="resnet"}[1m]))) * 1000'
        ),
    )


# --- spec -------------------------------------------------------------------------------------

RULE_TENSORRT_GPU = Rule(
    cel=(
        "!has(self.engine) || self.engine.backend != 'tensorrt' || "
        "(has(self.runtime) && self.runtime.device == 'gpu')"
    ),
    message="spec.engine.backend tensorrt requires spec.runtime.device gpu",
    field_path=".engine.backend",
)
RULE_AUTO_PRECISION_ONE_PRODUCT = Rule(
    cel="self.engine.precision != 'auto' || !has(self.runtime.gpu) || !has(self.runtime.gpu.products)",
    message=(
        "spec.engine.precision auto chooses among engines of one hardware: use it with "
        "spec.runtime.gpu.product (one product), or set a precision for spec.runtime.gpu.products"
    ),
    field_path=".engine.precision",
)
RULE_REPLICAS_IN_BOUNDS = Rule(
    cel=(
        "!has(self.replicas) || !has(self.autoscaling) || "
        "(self.replicas >= self.autoscaling.minReplicas && self.replicas <= self.autoscaling.maxReplicas)"
    ),
    message="spec.replicas must be within spec.autoscaling.minReplicas and spec.autoscaling.maxReplicas",
    field_path=".replicas",
)


class InferenceServiceSpec(_Model):
    """Desired state of an InferenceService."""

    model_config = ConfigDict(
        json_schema_extra=_validations(
            RULE_TENSORRT_GPU, RULE_REPLICAS_IN_BOUNDS, RULE_AUTO_PRECISION_ONE_PRODUCT
        )
    )

    model: ModelSpec = Field(description="The ONNX model to serve.")
    engine: EngineSpec = Field(
        default_factory=EngineSpec,
        json_schema_extra=_section_default(EngineSpec),
        description="How the model becomes an engine.",
    )
    runtime: RuntimeSpec = Field(
        default_factory=RuntimeSpec,
        json_schema_extra=_section_default(RuntimeSpec),
        description="Where and how replicas run.",
    )
    batching: BatchingSpec = Field(
        default_factory=BatchingSpec,
        json_schema_extra=_section_default(BatchingSpec),
        description="Triton dynamic batching.",
    )
    slo: SloSpec = Field(description="The latency objective.")
    autoscaling: AutoscalingSpec = Field(
        default_factory=AutoscalingSpec,
        json_schema_extra=_section_default(AutoscalingSpec),
        description="Replica bounds and pace.",
    )
    monitoring: MonitoringSpec = Field(
        default_factory=MonitoringSpec,
        json_schema_extra=_section_default(MonitoringSpec),
        description="Metrics and alerts.",
    )
    rollout: RolloutSpec = Field(
        default_factory=RolloutSpec,
        json_schema_extra=_section_default(RolloutSpec),
        description="How a new engine replaces the serving one (the regression gate, the canary).",
    )
    replicas: int | None = Field(
        default=None,
        ge=1,
        le=1000,
        description=(
            "Replica count for the scale subresource (kubectl scale). With autoscaling disabled it is the "
            "replica count (minReplicas when unset). With autoscaling enabled a value the operator has not "
            "applied yet (status.appliedSpecReplicas differs) is a one-off manual nudge: applied at once "
            "and the autoscaler's starting point, which it then changes as the load asks, subject to its "
            "stabilization windows; a value already applied is not applied again, so it never overrides "
            "a later decision, and scaling to the value spec.replicas already holds changes nothing. "
            "Turning autoscaling off sizes the service to it. Must be within [minReplicas, maxReplicas]."
        ),
    )

    @model_validator(mode="after")
    def _cross(self) -> Self:
        if self.engine.backend is Backend.TENSORRT and self.runtime.device is not Device.GPU:
            raise _fail(RULE_TENSORRT_GPU)
        a = self.autoscaling
        if self.replicas is not None and not a.min_replicas <= self.replicas <= a.max_replicas:
            raise _fail(RULE_REPLICAS_IN_BOUNDS)
        gpu = self.runtime.gpu
        if self.engine.precision is Precision.AUTO and gpu is not None and gpu.products is not None:
            raise _fail(RULE_AUTO_PRECISION_ONE_PRODUCT)
        return self

    def candidate_precisions(self) -> tuple[Precision, ...]:
        """The precisions `precision: auto` builds for this backend and device, most accurate first."""
        if self.engine.backend is Backend.TENSORRT:
            return (Precision.FP16, Precision.INT8) if self.engine.calibration else (Precision.FP16,)
        if self.runtime.device is Device.GPU:
            return (Precision.FP32, Precision.FP16)
        return (Precision.FP32, Precision.INT8)

    def model_name(self, isvc_name: str) -> str:
        """Return the name Triton serves the model under."""
        return self.model.name or isvc_name


# --- status -----------------------------------------------------------------------------------


class Condition(_Model):
    """One aspect of the object's state (Kubernetes metav1.Condition)."""

    type: str = Field(
        max_length=64, pattern=r"^[A-Za-z][A-Za-z0-9]*$", description="Condition type, e.g. Ready."
    )
    status: Literal["True", "False", "Unknown"] = Field(description="True, False or Unknown.")
    reason: str = Field(
        max_length=128, pattern=r"^[A-Za-z][A-Za-z0-9]*$", description="CamelCase reason for the status."
    )
    message: str = Field(default="", max_length=4096, description="Human-readable detail.")
    last_transition_time: datetime = Field(description="When status last changed.")
    observed_generation: int | None = Field(
        default=None, ge=0, description="metadata.generation the condition was computed from."
    )


class AccuracyStatus(_Model):
    """An engine's outputs against the FP32 model's on the same inputs (mirrors api.engine.AccuracyReport)."""

    checked: bool = Field(default=True, description="False when the engine could not be run by the build.")
    note: str = Field(default="", max_length=512, description="Why it was not checked.")
    samples: int = Field(default=0, ge=0, description="Inputs compared.")
    inputs: str = Field(default="", max_length=16, description="calibration or generated.")
    max_relative_error: float = Field(
        default=0.0, ge=0, description="Largest error over the largest |output|."
    )
    mean_absolute_error: float = Field(default=0.0, ge=0, description="Mean absolute error.")
    top1_agreement: float | None = Field(
        default=None, ge=0, le=1, description="Share of inputs whose arg-max agrees (classifier outputs)."
    )


class EngineStatus(_Model):
    """The engine being served."""

    key: str = Field(
        max_length=128,
        pattern=ENGINE_KEY_PATTERN,
        description="Content-addressed engine key (a lower-case hex digest).",
    )
    request_key: str = Field(
        default="", max_length=64, description="Key of the build request (names the build Job)."
    )
    artifact: str = Field(default="", max_length=MAX_URI_LENGTH, description="Where the engine is stored.")
    built_at: datetime | None = Field(default=None, description="When the build Job finished.")
    triton_backend: str = Field(default="", max_length=32, description="Triton backend serving the engine.")
    cache_hit: bool = Field(default=False, description="True when the engine came from the store unchanged.")
    model_sha256: str = Field(
        default="",
        pattern=r"^([0-9a-f]{64})?$",
        description="SHA-256 of the model bytes the engine was built from.",
    )
    model_revision: str = Field(
        default="",
        max_length=80,
        description=(
            "What pinned those bytes at their source: the Hugging Face commit a branch or tag resolved "
            "to, or the OCI manifest digest. Empty for other sources, and when the engine was found "
            "by its request (a pinned sha256) without fetching the model."
        ),
    )
    inputs: list[TensorOverride] = Field(
        default_factory=list, max_length=MAX_TENSORS, description="Model inputs as the build detected them."
    )
    outputs: list[TensorOverride] = Field(
        default_factory=list, max_length=MAX_TENSORS, description="Model outputs as the build detected them."
    )
    accuracy: AccuracyStatus | None = Field(
        default=None, description="The engine's outputs against the FP32 model, as its build measured them."
    )


class BuildStatus(_Model):
    """The engine build for the current spec (while it differs from the engine being served)."""

    request_key: str = Field(max_length=64, description="Key of the build request; names the build Job.")
    job_name: str = Field(default="", max_length=63, description="Name of the build Job.")
    attempt: int = Field(
        default=1, ge=1, description="Attempt number; a failed build is retried with back-off."
    )
    failed_pods: int = Field(default=0, ge=0, description="Failed build pods of the current attempt's Job.")
    phase: str = Field(default="", max_length=32, description="Running, Succeeded, Failed or Retrying.")
    reason: str = Field(default="", max_length=128, description="CamelCase reason of the last failure.")
    message: str = Field(default="", max_length=4096, description="Message of the last failure.")


class ProfilingStatus(_Model):
    """The profile Job measuring an engine where it serves (the service's Triton image and hardware)."""

    profile_key: str = Field(
        max_length=64, description="Key of the profile request (engine, image, hardware); names the Job."
    )
    engine_key: str = Field(
        max_length=128, pattern=ENGINE_KEY_PATTERN, description="The engine being profiled."
    )
    job_name: str = Field(default="", max_length=63, description="Name of the profile Job.")
    phase: str = Field(
        default="",
        max_length=32,
        description=(
            "Running, Succeeded or Failed. A new engine serves once its profile Job ends; when it "
            "failed, it serves without a profile and the autoscaler learns its service time online."
        ),
    )
    reason: str = Field(default="", max_length=128, description="CamelCase reason of a failure.")
    message: str = Field(default="", max_length=4096, description="Message of a failure.")


class EngineComparisonStatus(_Model):
    """The regression gate's last comparison: a new engine against the serving one."""

    serving_engine_key: str = Field(
        max_length=128, pattern=ENGINE_KEY_PATTERN, description="The engine serving when it was compared."
    )
    candidate_engine_key: str = Field(
        max_length=128, pattern=ENGINE_KEY_PATTERN, description="The new engine."
    )
    rate_per_s: float = Field(ge=0, description="Operating point: the observed request rate (0: no traffic).")
    replicas: int = Field(ge=1, description="Operating point: the replicas in force.")
    serving_p99_ms: float | None = Field(
        default=None, ge=0, description="Serving engine's predicted P99 there, ms (absent: cannot keep up)."
    )
    candidate_p99_ms: float | None = Field(
        default=None, ge=0, description="New engine's predicted P99 there, ms (absent: cannot keep up)."
    )
    serving_capacity_per_s: float = Field(ge=0, description="Serving engine's capacity per replica, req/s.")
    candidate_capacity_per_s: float = Field(ge=0, description="New engine's capacity per replica, req/s.")
    regression_percent: float | None = Field(
        default=None,
        description="The worse of the P99 rise and the capacity fall, percent (absent: unbounded).",
    )
    verdict: Literal["Promoted", "Blocked", "Accepted"] = Field(
        description="Promoted (within spec.rollout.maxLatencyRegressionPercent), Blocked, or Accepted by "
        "the tailpilot.io/accept-engine annotation."
    )


class CanaryTrackStatus(_Model):
    """What one side of a canary (the new engine's replicas, or the stable ones) served in the analysis."""

    pods: int = Field(ge=0, description="Pods with metrics in the window.")
    requests: int = Field(ge=0, description="Requests answered or failed in the window.")
    failures: int = Field(ge=0, description="Failed requests in the window.")
    p99_ms: float | None = Field(default=None, ge=0, description="Observed P99 (Triton's summaries), ms.")
    error_rate_percent: float | None = Field(
        default=None, ge=0, le=100, description="Failed requests, percent of requests."
    )


class CanaryStatus(_Model):
    """A new engine serving a share of the traffic on its own replicas (spec.rollout.strategy canary)."""

    engine: EngineStatus = Field(description="The new engine the canary serves.")
    phase: Literal["Starting", "Analysing", "Promoting", "Promoted", "RolledBack"] = Field(
        description=(
            "Starting (canary replicas starting), Analysing (serving a share of the traffic, being "
            "compared), Promoting (it held up: the stable replicas roll to it, the canary serving until "
            "they have), Promoted (done; the canary removed), RolledBack (the canary removed; the "
            "engine is held, RolloutBlocked=True)."
        )
    )
    reason: str = Field(default="", max_length=128, description="CamelCase reason of the verdict.")
    message: str = Field(default="", max_length=4096, description="The evidence, in words.")
    replicas: int = Field(ge=1, description="Canary replicas.")
    started_at: datetime | None = Field(default=None, description="When the canary Deployment was created.")
    analysis_started_at: datetime | None = Field(
        default=None, description="When every canary replica was ready: the analysis window starts."
    )
    finished_at: datetime | None = Field(default=None, description="When the verdict was reached.")
    traffic_percent: float | None = Field(
        default=None, ge=0, le=100, description="Share of the requests the canary answered in the window."
    )
    stable: CanaryTrackStatus | None = Field(default=None, description="The stable replicas in the window.")
    candidate: CanaryTrackStatus | None = Field(
        default=None, description="The canary replicas (the new engine) in the window."
    )


class ServiceTimeStatus(_Model):
    """Fitted per-batch execution time: interceptMs + perItemMs * batch size."""

    intercept_ms: float = Field(ge=0, description="Fixed cost of one batch, ms.")
    per_item_ms: float = Field(ge=0, description="Cost of each item in a batch, ms.")
    jitter_cv: float = Field(default=0.0, ge=0, description="Coefficient of variation around the fit.")
    per_request_ms: float = Field(
        default=0.0,
        ge=0,
        description=(
            "The part of perItemMs each request brings rather than each item (receiving, parsing, "
            "answering it), measured with single requests the dynamic batcher merged; 0 when only "
            "whole batches were measured."
        ),
    )


class ProfilePointStatus(_Model):
    """Latency and throughput of the engine at one batch size."""

    batch_size: int = Field(ge=1, description="Batch size.")
    p99_ms: float = Field(ge=0, description="99th-percentile latency at this batch size, ms.")
    throughput_per_s: float = Field(ge=0, description="Inferences per second at this batch size.")


class ReloadStatus(_Model):
    """One live reload of the engine, timed when it was profiled."""

    seconds: float = Field(ge=0, description="How long the load took, s.")
    served_share: float = Field(
        ge=0, le=1, description="Share of its throughput the instance kept while the new one loaded (0-1)."
    )
    worst_latency_ms: float = Field(ge=0, description="Worst latency of a request in flight during it, ms.")


class ProfileStatus(_Model):
    """Summary of the engine's measured profile (mirrors tailpilot.api.engine.ProfileSummary)."""

    key: str = Field(
        default="",
        max_length=64,
        description=(
            "Key of the profile request it answers (engine, Triton image, hardware); empty for a "
            "profile measured by an operator version before the profile Job."
        ),
    )
    hardware: str = Field(max_length=128, description="cpu or the GPU product the engine was profiled on.")
    cpu_limit_millis: int | None = Field(
        default=None,
        ge=1,
        description=(
            "The CPU limit, in millicores, of the Triton container that served the engine while it "
            "was profiled: the profile Job runs the serving pods' Triton container, limit included, "
            "so its times hold for one serving pod. Absent without a limit."
        ),
    )
    reload: ReloadStatus | None = Field(
        default=None,
        description=(
            "What one live reload of the engine's configuration cost in the profiling Triton, with "
            "enough clients to keep it busy. Under load, a reload lasting `seconds` that keeps "
            "`servedShare` of a replica's throughput delays requests by about (utilization - "
            "servedShare) x seconds; the autoscaler changes batching under load only when that fits "
            "within the SLO margin, or when no replica count within bounds meets the SLO with the "
            "batching in force. Absent when not timed."
        ),
    )
    service_time: ServiceTimeStatus = Field(description="Fitted service time per batch.")
    compute_time: ServiceTimeStatus | None = Field(
        default=None,
        description=(
            "Triton's own compute time per executed batch, fitted the same way (no transport, no queue); "
            "the autoscaler compares the serving pods' compute time with it."
        ),
    )
    points: list[ProfilePointStatus] = Field(
        default_factory=list, max_length=MAX_PROFILE_POINTS, description="One entry per profiled batch size."
    )

    @classmethod
    def from_summary(cls, summary: ProfileSummary, *, key: str = "") -> ProfileStatus:
        """Convert a profile result's summary (answering the profile request `key`)."""
        return cls.model_validate({"key": key, **summary.model_dump(by_alias=True)})


class BatchingStatus(_Model):
    """Dynamic-batching settings in force."""

    max_batch_size: int = Field(ge=1, description="Largest batch.")
    preferred_batch_sizes: list[int] = Field(
        default_factory=list, max_length=MAX_PREFERRED_BATCH_SIZES, description="Preferred batch sizes."
    )
    max_queue_delay_microseconds: int = Field(ge=0, description="Queue delay bound, microseconds.")
    instances_per_replica: int = Field(default=1, ge=1, description="Model instances per replica.")

    @classmethod
    def from_config(cls, cfg: BatchingConfig) -> BatchingStatus:
        """Convert the policy's batching value."""
        return cls(
            max_batch_size=cfg.max_batch_size,
            preferred_batch_sizes=list(cfg.preferred_batch_sizes),
            max_queue_delay_microseconds=cfg.max_queue_delay_us,
            instances_per_replica=cfg.instances_per_replica,
        )

    def to_config(self) -> BatchingConfig:
        """Convert back to the policy's batching value."""
        return BatchingConfig(
            max_batch_size=self.max_batch_size,
            preferred_batch_sizes=tuple(self.preferred_batch_sizes),
            max_queue_delay_us=self.max_queue_delay_microseconds,
            instances_per_replica=self.instances_per_replica,
        )


class BatchSizeStatus(_Model):
    """Executions at one batch size over the evaluation window, summed across the service's pods."""

    size: int = Field(ge=1, description="The executed batch size (inferences in one execution of the model).")
    max_size: int | None = Field(
        default=None,
        ge=1,
        description=(
            "Only on the last entry of a list that reached its bound (32 entries): this entry holds "
            "every size from size to maxSize, merged."
        ),
    )
    executions: int = Field(ge=0, description="Executions of the model at this batch size over the window.")
    request_share: float = Field(
        ge=0,
        le=1,
        description=(
            "Share of the window's requests that ran in batches of this size (0-1): size x executions "
            "over the sum of size x executions (a request of several items counts each)."
        ),
    )
    compute_ms: float | None = Field(
        default=None,
        ge=0,
        description=(
            "Mean compute time of one execution at this size over the window (Triton's compute infer), "
            "ms: the engine's time per batch size as the serving pods run it."
        ),
    )


class ObservedStatus(_Model):
    """Service-level traffic measured over the SLO evaluation window."""

    p99_ms: float | None = Field(default=None, ge=0, description="Observed service-level P99 latency, ms.")
    queue_depth: float | None = Field(default=None, ge=0, description="Pending requests per replica.")
    request_rate: float | None = Field(default=None, ge=0, description="Requests per second.")
    queue_time_ms: float | None = Field(
        default=None, ge=0, description="Mean time a request waited in Triton's queue over the window, ms."
    )
    server_time_ms: float | None = Field(
        default=None,
        ge=0,
        description=(
            "Mean time a request spent in Triton outside its queue (its batch's compute plus the "
            "backend's input/output handling) over the window, ms."
        ),
    )
    compute_time_ms: float | None = Field(
        default=None,
        ge=0,
        description=(
            "Of which Triton's compute infer: the model's execution of the batch the request ran in, "
            "per request, ms."
        ),
    )
    compute_input_time_ms: float | None = Field(
        default=None,
        ge=0,
        description=(
            "Of the server time, Triton's compute input: preparing the request's input tensors for the "
            "model (copies into its batch, to the GPU on a GPU), per request, ms. Large beside "
            "computeTimeMs: the inputs cost more to move than to compute."
        ),
    )
    compute_output_time_ms: float | None = Field(
        default=None,
        ge=0,
        description=(
            "Of the server time, Triton's compute output: taking the request's output tensors from its "
            "batch's results (copies, from the GPU on a GPU), per request, ms. What serverTimeMs holds "
            "beyond the three compute parts is Triton's own handling of the request."
        ),
    )
    queue_time_p99_ms: float | None = Field(
        default=None,
        ge=0,
        description=(
            "P99 of the time a request waited in Triton's queue, ms: each pod's "
            "nv_inference_queue_summary_us as Prometheus last scraped it (Triton's summaries cover "
            "about the last minute), merged across pods by request rate as p99Ms is. Absent without "
            "traffic in that minute."
        ),
    )
    compute_time_p99_ms: float | None = Field(
        default=None,
        ge=0,
        description=(
            "P99 of a request's compute infer time (the model's execution of its batch), ms: from "
            "each pod's nv_inference_compute_infer_summary_us, merged as queueTimeP99Ms is. Absent "
            "without traffic in the summaries' last minute."
        ),
    )
    mean_batch_size: float | None = Field(default=None, ge=0, description="Mean executed batch size.")
    client_p99_ms: float | None = Field(
        default=None,
        ge=0,
        description=(
            "The P99 latency the clients see, ms: spec.monitoring.clientLatencyP99Query at the "
            "observation's time. Absent without the query, or when it failed (the LatencyBreakdown "
            "condition's message says why)."
        ),
    )
    outside_server_p99_ms: float | None = Field(
        default=None,
        ge=0,
        description=(
            "clientP99Ms less p99Ms (Triton's own P99), floored at 0, ms: what the clients see beyond "
            "the server's tail (network, ingress, serialization, the client's own queue). Absent "
            "when either is."
        ),
    )
    batch_sizes: list[BatchSizeStatus] | None = Field(
        default=None,
        max_length=MAX_OBSERVED_BATCH_SIZES,
        description=(
            "The executed batch sizes over the window, ascending: per size, the model's executions and "
            "the share of requests that ran at it, summed across pods from Triton's statistics "
            "extension (GET /v2/models/<model>/stats, batch_stats; read from each pod every 10 s). At "
            "most 32 entries: beyond, the largest sizes are merged into the last (which has maxSize). "
            "Absent when the rates came from Prometheus (no per-size figure there) or no pod's "
            "statistics were read twice in the window."
        ),
    )
    time_dominated_by: Literal["Queue", "Server"] | None = Field(
        default=None,
        description=(
            "Where a request's time in Triton mostly went over the window: Queue (waiting: more replicas "
            "or larger batches help) or Server (being served: a faster engine helps; more replicas do "
            "not lower it). Absent without traffic."
        ),
    )
    rates_from: Literal["Pods", "Prometheus"] | None = Field(
        default=None,
        description=(
            "Where the request rate, queues and arrivals came from: Pods (each Ready Triton pod's "
            "metrics page, read every 2 s) or Prometheus (no pod could be read; rates at the scrape "
            "interval). The P99s (the request's, the queue's, compute infer's) always come from "
            "Prometheus."
        ),
    )
    at: datetime | None = Field(default=None, description="When the observation was taken.")


class DecisionStatus(_Model):
    """The autoscaler's last decision."""

    action: str = Field(max_length=64, description="ScaleUp, ScaleDown, Rebatch, Hold, None, ...")
    reason: str = Field(max_length=128, description="CamelCase reason.")
    message: str = Field(default="", max_length=4096, description="Why, in words.")
    time: datetime = Field(description="When it was decided.")
    replicas: int | None = Field(default=None, ge=0, description="Target replicas of the decision.")
    dry_run: bool = Field(default=False, description="True when the decision was only reported.")


#: Decisions kept on status.decisions.
MAX_DECISION_HISTORY = 10


class DecisionRecordStatus(_Model):
    """One decision that changed something: what was in force before and after, and the figures behind it."""

    time: datetime = Field(description="When it was decided.")
    action: str = Field(max_length=64, description="ScaleUp, ScaleDown, Rebatch, ... or MoveGpuProduct.")
    reason: str = Field(max_length=128, description="CamelCase reason.")
    replicas_before: int = Field(ge=0, description="Replicas in force before it.")
    replicas_after: int = Field(ge=0, description="Replicas it asked for.")
    max_batch_size_before: int = Field(ge=1, description="Max batch size in force before it.")
    max_batch_size_after: int = Field(ge=1, description="Max batch size it asked for.")
    request_rate: float | None = Field(default=None, ge=0, description="Observed request rate, req/s.")
    observed_p99_ms: float | None = Field(default=None, ge=0, description="Observed P99 then, ms.")
    predicted_p99_ms: float | None = Field(
        default=None, ge=0, description="P99 the policy predicted for what it asked for, ms."
    )
    gpu_product: str | None = Field(
        default=None, max_length=63, description="For a move, the GPU product it moved to."
    )


class LearnedStatus(_Model):
    """What the autoscaler learned from this service's metrics; a restarted operator starts from it."""

    model_correction_light_load: float | None = Field(
        default=None, ge=0, description="Observed / predicted P99 factor the model applies at light load."
    )
    model_correction_heavy_load: float | None = Field(
        default=None, ge=0, description="The same factor at heavy load (blended in between by utilization)."
    )
    replica_startup_seconds: float | None = Field(
        default=None,
        ge=0,
        description=(
            "Seconds from a scale-up to every new replica serving, timed on this service's scale-ups; "
            "sizes the backlog new replicas will find. Unset until one is timed."
        ),
    )
    service_time: ServiceTimeStatus | None = Field(
        default=None,
        description=(
            "Service time per batch fitted online from the serving pods' Triton counters (compute time "
            "per request against the batch sizes executed, one point per evaluation window). The "
            "autoscaler uses it when the engine has no profile; with one, a disagreement beyond 25% is "
            "reported on the ProfileAccurate condition."
        ),
    )
    service_time_fit: Literal["Provisional", "Fitted"] | None = Field(
        default=None,
        description=(
            "Fitted once enough windows span enough batch sizes to separate the per-batch and per-item "
            "costs (an engine of batch 1 needs no spread); Provisional before: every item is charged the "
            "same, which credits batching with no gain."
        ),
    )
    service_time_windows: int | None = Field(
        default=None, ge=0, description="Evaluation windows behind serviceTime."
    )
    service_time_from: Literal["Saturated", "Steady", "Mixed"] | None = Field(
        default=None,
        description=(
            "The kind of windows behind serviceTime, most telling first: Saturated (a backlog at every "
            "replica: what a replica serves flat out), Steady (no backlog: a lower bound of a request's "
            "time, lower still on a CPU limit at light load), Mixed (pods starting or a partial backlog). "
            "A Provisional fit of saturated windows replaces a Fitted one of other windows."
        ),
    )
    service_time_scale: float | None = Field(
        default=None,
        gt=0,
        description=(
            "Observed compute time per batch over the engine profile's: above 1 the serving hardware runs "
            "the engine slower than when it was profiled (e.g. replicas sharing CPU cores). Multiplies the "
            "profile's service time once it is more than 10% away from 1."
        ),
    )
    service_time_slope_scale: float | None = Field(
        default=None,
        gt=0,
        description=(
            "Observed per-item slope of the compute time over the engine profile's, at the speed of "
            "serviceTimeScale: above 1 each item of a batch costs more than profiled. Learned where the "
            "executed batch sizes spread; moves the profile's slope once more than 10% away from 1."
        ),
    )
    headroom: float | None = Field(
        default=None,
        ge=1,
        description=(
            "The factor over the observed arrival rate the last decision sized the fleet for: how far "
            "this service's load rose within its reaction time (the decision's period plus the replicas' "
            "start-up), at the quantile spec.slo.objectivePercent and the error budget left call for. "
            "1: no rise beyond Poisson noise seen from rates like the one now."
        ),
    )
    rises: list[str] | None = Field(
        default=None,
        max_length=MAX_RISE_BINS,
        description=(
            "The rises behind headroom, kept so that a restarted operator does not forget them: "
            "'r|p:band:bin:weight' per bin of rises (r) and of the rates they reached (p)."
        ),
    )
    idle: IdleHistoryStatus | None = Field(
        default=None,
        description=(
            "The traffic's idle stretches, kept so that a restarted operator does not forget them: with "
            "minReplicas 0, how often the service is woken sets how long it stays idle before zero."
        ),
    )


#: status.learned.idle.stretches: the idle history's length (`tailpilot.policy.idle.MAX_STRETCHES`).
MAX_IDLE_STRETCHES = 64


class IdleStretchStatus(_Model):
    """One finished idle stretch: when it began and how long no request came."""

    start: datetime = Field(description="When the stretch began (to the second).")
    seconds: float = Field(ge=0, description="How long it lasted, s.")


class IdleHistoryStatus(_Model):
    """The traffic's idle stretches the scale-to-zero choice prices its cold starts from."""

    idle_since: datetime | None = Field(
        default=None, description="When the idle stretch in progress began; absent while requests come."
    )
    observed_since: datetime | None = Field(
        default=None, description="Since when the history covers the traffic (its oldest stretch at most)."
    )
    stretches: list[IdleStretchStatus] = Field(
        default_factory=list,
        max_length=MAX_IDLE_STRETCHES,
        description="Finished idle stretches, oldest first (the last 64).",
    )


class BudgetBucketStatus(_Model):
    """Met and missed seconds of one part of the compliance period."""

    start: float = Field(description="Start of the bucket, seconds since the epoch.")
    met_seconds: float = Field(ge=0, description="Seconds whose P99 met the target.")
    missed_seconds: float = Field(ge=0, description="Seconds whose P99 missed it.")


class ErrorBudgetStatus(_Model):
    """What is left of the attainment objective's error budget (spec.slo.objectivePercent)."""

    objective_percent: float = Field(description="The share of time whose P99 must meet the target.")
    compliance_period_hours: int = Field(ge=1, description="The rolling period the budget is counted over.")
    measured_seconds: float = Field(ge=0, description="Seconds of the period measured so far.")
    missed_seconds: float = Field(ge=0, description="Of them, the seconds whose P99 missed the target.")
    remaining_percent: float = Field(
        description=(
            "Share of the period's budget left: 100 untouched, 0 spent, below 0 overspent. The "
            "autoscaler holds more headroom as it falls."
        )
    )
    buckets: list[BudgetBucketStatus] = Field(
        default_factory=list,
        max_length=MAX_BUDGET_BUCKETS,
        description="The period's met and missed time in parts, oldest first (read by a restarted operator).",
    )


class EngineCandidateStatus(_Model):
    """One engine a service could serve (of one GPU product, or one precision): built, profiled, sized."""

    phase: str = Field(
        default="",
        max_length=32,
        description=(
            "Building, Built (its profile waits for another candidate's on the same hardware), Profiling, "
            "Profiled, Serving, Failed, or NoCapacity (a GPU product no node of which has a free GPU, so "
            "nothing is built there yet)."
        ),
    )
    message: str = Field(default="", max_length=1024, description="Why, when not Profiled or Serving.")
    engine_key: str = Field(
        default="", max_length=128, pattern=OPTIONAL_ENGINE_KEY_PATTERN, description="The candidate's engine."
    )
    request_key: str = Field(default="", max_length=64, description="The candidate's build request.")
    profile_key: str = Field(default="", max_length=64, description="The candidate's profile request.")
    max_batch_size: int | None = Field(default=None, ge=1, description="The engine's largest profiled batch.")
    service_time: ServiceTimeStatus | None = Field(
        default=None, description="The profile's fitted service time per batch."
    )
    capacity_per_replica_per_s: float | None = Field(
        default=None, ge=0, description="Highest rate one replica serves within the SLO, req/s."
    )
    replicas_needed: int | None = Field(
        default=None, ge=0, description="Fewest replicas holding the SLO at the observed rate."
    )


class GpuCandidateStatus(EngineCandidateStatus):
    """One GPU product a service may run on: its engine, its profile, and what it would cost now."""

    product: str = Field(max_length=63, description="The GPU product.")
    price_per_hour: float | None = Field(
        default=None, ge=0, description="Price of one of its GPUs per hour (absent: no price known)."
    )
    replicas_available: int | None = Field(
        default=None, ge=0, description="Replicas the product's nodes can hold for this service now."
    )
    cost_per_hour: float | None = Field(
        default=None, ge=0, description="replicasNeeded x GPUs per replica x price (absent: cannot hold)."
    )


class PrecisionCandidateStatus(EngineCandidateStatus):
    """One precision `precision: auto` built: its accuracy against the FP32 model and its capacity."""

    precision: str = Field(max_length=8, description="fp32, fp16 or int8.")
    accuracy: AccuracyStatus | None = Field(
        default=None, description="The engine's outputs against the FP32 model's, as its build measured them."
    )


class PrecisionChoiceStatus(_Model):
    """Which precision `spec.engine.precision: auto` serves, and why."""

    precision: str | None = Field(
        default=None, max_length=8, description="The precision serving (absent: not chosen yet)."
    )
    reason: str = Field(default="", max_length=64, description="CamelCase reason of the choice.")
    message: str = Field(default="", max_length=4096, description="The figures behind it.")
    candidates: list[PrecisionCandidateStatus] = Field(
        default_factory=list, max_length=4, description="Every precision built for the target."
    )


class GpuChoiceStatus(_Model):
    """Which GPU product serves (spec.runtime.gpu.products) and why."""

    product: str | None = Field(
        default=None, max_length=63, description="The product serving (or chosen to serve next)."
    )
    reason: str = Field(default="", max_length=64, description="CamelCase reason of the last choice.")
    message: str = Field(default="", max_length=4096, description="The figures behind it.")
    moved_at: datetime | None = Field(
        default=None, description="When the service last moved (or was placed)."
    )
    moving_to: str | None = Field(
        default=None,
        max_length=63,
        description=(
            "During a move, the product the pods move to: the new product's own fleet starts all at once "
            "(status.replicas, maxSurge 100%) while every old pod serves beside it (their ReplicaSet is "
            "released from the Deployment); the old pods go, and this is cleared, once every new one is "
            "Ready."
        ),
    )
    replicas_after_move: int | None = Field(
        default=None,
        ge=0,
        description=(
            "Only in a status an earlier operator version wrote mid-move (it kept the old replica count "
            "for the move): the replicas to shrink to once every pod runs on the new product. Moves now "
            "start at the new product's own size and leave it empty."
        ),
    )
    candidates: list[GpuCandidateStatus] = Field(
        default_factory=list, max_length=MAX_GPU_PRODUCTS, description="Every allowed product."
    )


#: status.coldStart.parts: the nine parts of `tailpilot.policy.cold_start.PARTS` (fewer when merged).
MAX_COLD_START_PARTS = 9


class ColdStartPartStatus(_Model):
    """One part of a cold start and how long it took."""

    name: str = Field(
        max_length=256,
        description=(
            "wakeRequest, podCreation, scheduling, podStartAndImagePull, engineFetch, containerStart, "
            "serverStartAndModelLoad, endpointPropagation or firstInference; parts joined with '+' when "
            "the time between them was not known (e.g. wakeRequest+podCreation)."
        ),
    )
    seconds: float = Field(ge=0, description="How long it took, s (to the millisecond).")


class ColdStartStatus(_Model):
    """The last cold start from zero replicas: what the first client waited, and where that time went."""

    held_at: datetime = Field(description="When the activator held the cold start's first request.")
    answered_at: datetime = Field(
        description="When that request's answer, forwarded to the replica that came up, was complete."
    )
    total_seconds: float = Field(
        ge=0, description="answeredAt - heldAt, s: what the first client waited (the parts add up to it)."
    )
    parts: list[ColdStartPartStatus] = Field(
        default_factory=list,
        max_length=MAX_COLD_START_PARTS,
        description=(
            "The total in consecutive parts, in order. Boundaries at the pod's Kubernetes timestamps "
            "(created, PodScheduled, the engine fetch's and Triton's container starts, Initialized, "
            "Ready) are to the second, so the parts beside them are exact to about a second; the "
            "activator's (held, woken, a ready replica seen, answered) are to the millisecond."
        ),
    )
    pod: str = Field(
        default="",
        max_length=253,
        description="The serving pod that turned Ready first after heldAt, whose timestamps the parts read.",
    )


class InferenceServiceStatus(_Model):
    """Observed state of an InferenceService, written only by the operator."""

    observed_generation: int | None = Field(
        default=None, ge=0, description="Last metadata.generation acted on."
    )
    conditions: list[Condition] = Field(
        default_factory=list,
        max_length=MAX_CONDITIONS,
        description=(
            "Ready, EngineReady, RolloutReady, SLOMet, ScalingActive, Degraded, ProfileAccurate, "
            "RolloutBlocked."
        ),
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]},
    )
    engine: EngineStatus | None = Field(default=None, description="The engine being served.")
    build: BuildStatus | None = Field(default=None, description="The latest engine build for this spec.")
    profiling: ProfilingStatus | None = Field(
        default=None, description="The latest profile Job (an engine measured where it serves)."
    )
    profile: ProfileStatus | None = Field(default=None, description="The engine's profile summary.")
    engine_comparison: EngineComparisonStatus | None = Field(
        default=None,
        description="The regression gate's last comparison of a new engine with the serving one.",
    )
    canary: CanaryStatus | None = Field(
        default=None,
        description="The last canary analysis of a new engine (spec.rollout.strategy canary).",
    )
    replicas: int | None = Field(default=None, ge=0, description="Current replica count (scale subresource).")
    applied_spec_replicas: int | None = Field(
        default=None,
        ge=0,
        description=(
            "The spec.replicas value the operator last applied (0: spec.replicas was unset). A "
            "spec.replicas that differs from it is a manual scale not yet applied; with autoscaling "
            "enabled, one equal to it leaves status.replicas to the autoscaler. Absent until the first "
            "rollout, or when written by an operator older than the field: then the spec.replicas of "
            "that time counts as applied."
        ),
    )
    ready_replicas: int | None = Field(default=None, ge=0, description="Ready replicas.")
    scaled_to_zero_at: datetime | None = Field(
        default=None,
        description=(
            "When the autoscaler took the service to zero replicas (minReplicas 0); cleared when a "
            "request at zero wakes it (the activator's tailpilot.io/wake-requested-at annotation, "
            "newer than this). Its Service routes to the activator meanwhile."
        ),
    )
    cold_start: ColdStartStatus | None = Field(
        default=None,
        description=(
            "The last cold start from zero replicas, broken down (from the activator's "
            "tailpilot.io/cold-start annotation and the first serving pod's timestamps)."
        ),
    )
    selector: str | None = Field(
        default=None, max_length=1024, description="Label selector of the replicas (scale subresource)."
    )
    batching: BatchingStatus | None = Field(default=None, description="Dynamic batching in force.")
    observed: ObservedStatus | None = Field(default=None, description="Measured traffic.")
    predicted_p99_ms: float | None = Field(
        default=None, ge=0, description="P99 the policy predicts for the current replicas and batching, ms."
    )
    error_budget: ErrorBudgetStatus | None = Field(
        default=None, description="What is left of the attainment objective's error budget."
    )
    last_decision: DecisionStatus | None = Field(default=None, description="Last autoscaling decision.")
    decisions: list[DecisionRecordStatus] = Field(
        default_factory=list,
        max_length=MAX_DECISION_HISTORY,
        description=(
            f"The last {MAX_DECISION_HISTORY} decisions that changed replicas, batching or the GPU product, "
            "oldest first: before and after, the observed rate and P99, the predicted P99, the reason."
        ),
    )
    gpu: GpuChoiceStatus | None = Field(
        default=None, description="The GPU product choice, for a service that lists several products."
    )
    precision: PrecisionChoiceStatus | None = Field(
        default=None, description="The precision choice, for spec.engine.precision auto."
    )
    learned: LearnedStatus | None = Field(
        default=None, description="What the autoscaler learned from metrics."
    )


# --- the object -------------------------------------------------------------------------------

# Only the length is checked in CEL: a regex over metadata.name would push the rule's estimated cost
# over the API server's limit. The DNS-1035 form (a Service needs it) is checked by api/validation.py.
RULE_NAME = Rule(
    cel=f"size(self.metadata.name) <= {MAX_NAME_LENGTH}",
    message=f"metadata.name must be at most {MAX_NAME_LENGTH} characters (child objects append suffixes)",
)

# A service named like another's child (`a-metrics`, `a-canary`...) would want that child's name for
# its own Deployment or Service: refused at creation, so two services' children never collide (the
# operator's ChildNameTaken stays the guard against objects it did not create). `oldSelf.hasValue()`
# is what keeps an upgrade safe: a root rule re-runs on every update of the object (status included,
# since the root changed), so without it an object created before the rule could no longer be
# updated, not even by the operator's status writes; names never change, so checking creation is
# enough. The pydantic model does not repeat the rule, for the same reason: the operator keeps serving
# an object the API server admitted before the rule existed. `endsWith`, not a regex: the cost.
RULE_NAME_SUFFIX = Rule(
    cel="oldSelf.hasValue() || !("
    + " || ".join(f"self.metadata.name.endsWith('{s}')" for s in c.RESERVED_NAME_SUFFIXES)
    + ")",
    message=(
        "metadata.name must not end with "
        + ", ".join(f"'{s}'" for s in c.RESERVED_NAME_SUFFIXES)
        + ": the operator names the children of a service that way (service 'a' has a Service "
        "'a-metrics'), so such a name could collide with another service's children; choose another name"
    ),
    optional_old_self=True,
)


class InferenceService(_Model):
    """Serve an ONNX model on NVIDIA Triton within a P99 latency SLO, at the lowest cost."""

    model_config = ConfigDict(json_schema_extra=_validations(RULE_NAME, RULE_NAME_SUFFIX))

    api_version: Literal["tailpilot.io/v1alpha1"] = Field(
        default="tailpilot.io/v1alpha1", description="APIVersion of the object."
    )
    kind: Literal["InferenceService"] = Field(default=c.KIND, description="Kind of the object.")
    metadata: dict[str, Any] = Field(description="Standard object metadata.")
    spec: InferenceServiceSpec = Field(description="Desired state.")
    status: InferenceServiceStatus | None = Field(default=None, description="Observed state.")

    @field_validator("metadata")
    @classmethod
    def _name(cls, metadata: dict[str, Any]) -> dict[str, Any]:
        name = metadata.get("name")
        if isinstance(name, str) and len(name) > MAX_NAME_LENGTH:
            raise _fail(RULE_NAME)
        return metadata

    @property
    def name(self) -> str:
        """metadata.name."""
        return str(self.metadata["name"])

    @property
    def namespace(self) -> str:
        """metadata.namespace ("default" when absent, as kubectl does)."""
        return str(self.metadata.get("namespace") or "default")

    def with_precision(self, precision: Precision) -> InferenceService:
        """This service with one precision (what `precision: auto` builds and serves per candidate)."""
        engine = self.spec.engine.model_copy(update={"precision": precision})
        return self.model_copy(update={"spec": self.spec.model_copy(update={"engine": engine})})

    def on_product(self, product: str) -> InferenceService:
        """This service pinned to one GPU product (spec.runtime.gpu.product), for services that list several.

        Every manifest, build and profile request reads the one product of the spec; a service that
        may run on several is built, profiled and served per product through this copy.
        """
        gpu = self.spec.runtime.gpu
        if gpu is None:
            return self
        runtime = self.spec.runtime.model_copy(update={"gpu": gpu.on(product)})
        return self.model_copy(update={"spec": self.spec.model_copy(update={"runtime": runtime})})


#: Every cross-field rule, for documentation and tests.
ALL_RULES: tuple[Rule, ...] = (
    RULE_NAME,
    RULE_NAME_SUFFIX,
    RULE_HTTPS_SHA256,
    RULE_MODEL_OCI_URI,
    RULE_MODEL_HF_URI,
    RULE_S3_OPTIONS_NEED_S3_URI,
    RULE_HF_OPTIONS_NEED_HF_URI,
    RULE_SHAPE_LENGTHS,
    RULE_SHAPE_ORDER,
    RULE_INT8_CALIBRATION,
    RULE_GPU_COUNT,
    RULE_GPU_PRODUCT_SET,
    RULE_GPU_PRODUCT_ONE_WAY,
    RULE_GPU_REQUIRED,
    RULE_GPU_FORBIDDEN,
    RULE_PREFERRED_LE_MAX,
    RULE_SLO_POSITIVE,
    RULE_MIN_LE_MAX,
    RULE_TENSORRT_GPU,
    RULE_REPLICAS_IN_BOUNDS,
    RULE_AUTO_PRECISION_ONE_PRODUCT,
)
