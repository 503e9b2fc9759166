"""Invalid InferenceService specs, each breaking one rule, with a substring the rejection must contain.

A data table shared by the pure tests (pydantic models and a CRD-schema + CEL
simulation, tests/api/test_invalid_specs.py) and the cluster test, which
applies each spec to the real API server and checks `kubectl apply`'s error.
The substring is chosen to appear both in the API server's message (field path
or CEL message) and in the pydantic error rendered by `render_errors`.

Use: `from tests.api.invalid_specs import INVALID_SPECS, VALID_SPECS, make_object`.
"""

from __future__ import annotations

import copy
from typing import Any

#: A minimal valid CPU spec.
CPU_BASE: dict[str, Any] = {
    "model": {"uri": "pvc://models/resnet50.onnx"},
    "slo": {"p99LatencyMs": 50},
}

#: A valid GPU spec (TensorRT FP16 on H100).
GPU_BASE: dict[str, Any] = {
    "model": {
        "uri": "https://models.example.com/resnet50.onnx",
        "sha256": "0" * 64,
    },
    "engine": {
        "backend": "tensorrt",
        "precision": "fp16",
        "shapes": [{"input": "input", "min": [3, 224, 224], "opt": [3, 224, 224], "max": [3, 224, 224]}],
    },
    "runtime": {"device": "gpu", "gpu": {"product": "NVIDIA-H100-80GB-HBM3", "count": 1, "exclusive": True}},
    "batching": {"mode": "auto", "maxBatchSize": 32, "preferredBatchSizes": [8, 16]},
    "slo": {"p99LatencyMs": 50, "maxQueueDepth": 16},
    "autoscaling": {"minReplicas": 1, "maxReplicas": 8},
}


def merge(base: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    """Return a deep copy of base with patch merged in (JSON merge patch: None deletes a key)."""
    out = copy.deepcopy(base)
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        elif isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def make_object(name: str, spec: dict[str, Any], namespace: str = "default") -> dict[str, Any]:
    """Wrap a spec into a full InferenceService object."""
    return {
        "apiVersion": "tailpilot.io/v1alpha1",
        "kind": "InferenceService",
        "metadata": {"name": name, "namespace": namespace},
        "spec": copy.deepcopy(spec),
    }


def _shape(min_: list[int], opt: list[int], max_: list[int], name: str = "input") -> dict[str, Any]:
    return {"engine": {"shapes": [{"input": name, "min": min_, "opt": opt, "max": max_}]}}


VALID_SPECS: list[tuple[str, dict[str, Any]]] = [
    ("cpu-minimal", CPU_BASE),
    # A claim name with dots, a nested path and a file whose name has two dots in it are inside the claim.
    ("pvc-nested-path", merge(CPU_BASE, {"model": {"uri": "pvc://team.models/v2/resnet..final.onnx"}})),
    ("gpu-tensorrt", GPU_BASE),
    # Plain http:// with a checksum: the bytes are checked, so no transport has to vouch for them.
    (
        "http-model-with-sha256",
        merge(CPU_BASE, {"model": {"uri": "http://models.internal/m.onnx", "sha256": "1" * 64}}),
    ),
    (
        "gpu-tensorrt-int8",
        merge(GPU_BASE, {"engine": {"precision": "int8", "calibration": {"uri": "s3://b/c.npz"}}}),
    ),
    # Any S3-compatible store, with its credentials in a Secret the build Job alone mounts.
    (
        "s3-compatible-store-with-credentials",
        merge(
            CPU_BASE,
            {
                "model": {
                    "uri": "s3://models/resnet50.onnx",
                    "s3": {"endpoint": "https://minio.storage.svc:9000", "region": "eu-west-1"},
                    "credentialsSecretRef": {"name": "model-store"},
                }
            },
        ),
    ),
    # OCI artifacts pinned by their manifest digest; a tag may stand beside it, a registry port too.
    (
        "oci-artifact-by-digest",
        merge(CPU_BASE, {"model": {"uri": f"oci://ghcr.io/acme/models/resnet@sha256:{'a' * 64}"}}),
    ),
    (
        "oci-tag-and-digest-on-a-registry-port",
        merge(
            CPU_BASE,
            {
                "model": {
                    "uri": f"oci://registry.local:5000/team/resnet_50:v1.2@sha256:{'b' * 64}",
                    "credentialsSecretRef": {"name": "registry-pull"},
                }
            },
        ),
    ),
    (
        "https-model-with-a-private-ca",
        merge(
            CPU_BASE,
            {
                "model": {
                    "uri": "https://models.corp.internal/m.onnx",
                    "sha256": "2" * 64,
                    "caBundleConfigMapRef": {"name": "corp-ca"},
                }
            },
        ),
    ),
    # A file of a Hugging Face repository, at a branch, a tag or a commit, from the Hub or a self-hosted one.
    ("hf-file-on-main", merge(CPU_BASE, {"model": {"uri": "hf://acme/resnet-50/onnx/model.onnx"}})),
    (
        "hf-pinned-commit-on-a-private-hub",
        merge(
            CPU_BASE,
            {
                "model": {
                    "uri": f"hf://acme/resnet_50.v2@{'d' * 40}/model.onnx",
                    "hf": {"endpoint": "https://hub.corp.internal"},
                    "credentialsSecretRef": {"name": "hf-token"},
                }
            },
        ),
    ),
    (
        "s3-path-style-without-secret",
        merge(CPU_BASE, {"model": {"uri": "s3://models/m.onnx", "s3": {"addressingStyle": "path"}}}),
    ),
    ("cpu-int8-no-calibration", merge(CPU_BASE, {"engine": {"precision": "int8"}})),
    (
        "cpu-fixed-batching",
        merge(CPU_BASE, {"batching": {"mode": "fixed", "maxBatchSize": 8, "preferredBatchSizes": [8]}}),
    ),
    (
        "replicas-in-bounds",
        merge(CPU_BASE, {"replicas": 3, "autoscaling": {"minReplicas": 2, "maxReplicas": 3}}),
    ),
    ("shape-ranges", merge(CPU_BASE, _shape([1, 16], [8, 128], [8, 512]))),
    ("cpu-auto-precision", merge(CPU_BASE, {"engine": {"precision": "auto"}})),
    (
        "gpu-products",
        merge(
            GPU_BASE,
            {
                "runtime": {
                    "gpu": {
                        "product": None,
                        "products": [
                            {"name": "NVIDIA-H100-80GB-HBM3", "pricePerHour": 4.0},
                            {"name": "NVIDIA-L4"},
                        ],
                    }
                }
            },
        ),
    ),
    (
        "cpu-client-latency-query",
        merge(
            CPU_BASE,
            {
                "monitoring": {
                    "clientLatencyP99Query": "histogram_quantile(0.99, sum by (le) (rate("
                    'nginx_ingress_controller_request_duration_seconds_bucket{ingress="resnet"}[1m]))) * 1000'
                }
            },
        ),
    ),
]

#: (name, spec, expected substring of the rejection). Names are unique; each breaks exactly one rule.
INVALID_SPECS: list[tuple[str, dict[str, Any], str]] = [
    (
        "min-replicas-above-max",
        merge(CPU_BASE, {"autoscaling": {"minReplicas": 5, "maxReplicas": 2}}),
        "spec.autoscaling.minReplicas must be less than or equal to spec.autoscaling.maxReplicas",
    ),
    (
        "preferred-batch-above-max",
        merge(CPU_BASE, {"batching": {"maxBatchSize": 8, "preferredBatchSizes": [4, 16]}}),
        "spec.batching.preferredBatchSizes must all be less than or equal to spec.batching.maxBatchSize",
    ),
    (
        "shape-min-above-opt",
        merge(CPU_BASE, _shape([3, 300], [3, 224], [3, 512])),
        "min <= opt <= max in every dimension",
    ),
    (
        "shape-opt-above-max",
        merge(CPU_BASE, _shape([3, 64], [3, 1024], [3, 512])),
        "min <= opt <= max in every dimension",
    ),
    (
        "shape-dimension-count-mismatch",
        merge(CPU_BASE, _shape([3, 64], [3, 128], [3, 256, 256])),
        "min, opt and max must have the same number of dimensions",
    ),
    (
        "tensorrt-on-cpu",
        merge(GPU_BASE, {"runtime": {"device": "cpu", "gpu": None}}),
        "spec.engine.backend tensorrt requires spec.runtime.device gpu",
    ),
    (
        "tensorrt-int8-without-calibration",
        merge(GPU_BASE, {"engine": {"precision": "int8"}}),
        "spec.engine.calibration is required when spec.engine.backend is tensorrt and precision is int8",
    ),
    (
        "pvc-model-path-leaving-its-claim",
        merge(CPU_BASE, {"model": {"uri": "pvc://models/../other-claim/m.onnx"}}),
        "spec.model.uri pvc://CLAIM/PATH",
    ),
    (
        "pvc-model-percent-encoded-traversal",
        merge(CPU_BASE, {"model": {"uri": "pvc://models/%2e%2e/other/m.onnx"}}),
        "spec.model.uri pvc://CLAIM/PATH",
    ),
    (
        "pvc-model-invalid-claim-name",
        merge(CPU_BASE, {"model": {"uri": "pvc://Models_A/m.onnx"}}),
        "spec.model.uri pvc://CLAIM/PATH",
    ),
    (
        "pvc-calibration-path-leaving-its-claim",
        merge(
            GPU_BASE,
            {"engine": {"precision": "int8", "calibration": {"uri": "pvc://data/sub/../../x/c.npz"}}},
        ),
        "spec.engine.calibration.uri pvc://CLAIM/PATH",
    ),
    (
        "https-model-without-sha256",
        merge(CPU_BASE, {"model": {"uri": "https://models.example.com/m.onnx"}}),
        "spec.model.sha256 is required when spec.model.uri is an http:// or https:// URL",
    ),
    (
        "http-model-without-sha256",
        merge(CPU_BASE, {"model": {"uri": "http://models.internal/m.onnx"}}),
        "spec.model.sha256 is required when spec.model.uri is an http:// or https:// URL",
    ),
    (
        "slo-zero",
        merge(CPU_BASE, {"slo": {"p99LatencyMs": 0}}),
        "spec.slo.p99LatencyMs must be greater than 0",
    ),
    (
        "slo-negative",
        merge(CPU_BASE, {"slo": {"p99LatencyMs": -5}}),
        "spec.slo.p99LatencyMs must be greater than 0",
    ),
    (
        "gpu-count-zero",
        merge(GPU_BASE, {"runtime": {"gpu": {"count": 0}}}),
        "spec.runtime.gpu.count must be at least 1 when spec.runtime.device is gpu",
    ),
    (
        "gpu-device-without-gpu-section",
        merge(GPU_BASE, {"runtime": {"gpu": None}}),
        "spec.runtime.gpu is required when spec.runtime.device is gpu",
    ),
    (
        "cpu-device-with-gpu-section",
        merge(CPU_BASE, {"runtime": {"device": "cpu", "gpu": {"product": "NVIDIA-L4"}}}),
        "spec.runtime.gpu must not be set when spec.runtime.device is cpu",
    ),
    (
        "replicas-above-max",
        merge(CPU_BASE, {"replicas": 9, "autoscaling": {"maxReplicas": 8}}),
        "spec.replicas must be within spec.autoscaling.minReplicas and spec.autoscaling.maxReplicas",
    ),
    ("unknown-backend", merge(CPU_BASE, {"engine": {"backend": "tensorflow"}}), "spec.engine.backend"),
    ("unknown-precision", merge(CPU_BASE, {"engine": {"precision": "fp8"}}), "spec.engine.precision"),
    (
        "unsupported-uri-scheme",
        merge(CPU_BASE, {"model": {"uri": "store://engines/m.onnx"}}),
        "spec.model.uri",
    ),
    ("malformed-sha256", merge(CPU_BASE, {"model": {"sha256": "ABC123"}}), "spec.model.sha256"),
    (
        "oci-tag-without-digest",
        merge(CPU_BASE, {"model": {"uri": "oci://ghcr.io/acme/models/resnet:v1"}}),
        "must name the artifact's manifest digest (a tag can be moved)",
    ),
    (
        "oci-short-digest",
        merge(CPU_BASE, {"model": {"uri": "oci://ghcr.io/acme/resnet@sha256:abc123"}}),
        "must name the artifact's manifest digest (a tag can be moved)",
    ),
    (
        "oci-upper-case-repository",
        merge(CPU_BASE, {"model": {"uri": f"oci://ghcr.io/Acme/resnet@sha256:{'c' * 64}"}}),
        "spec.model.uri oci://REGISTRY/REPOSITORY[:TAG]@sha256:DIGEST",
    ),
    (
        "hf-without-a-file",
        merge(CPU_BASE, {"model": {"uri": "hf://acme/resnet-50"}}),
        "hf://ORG/REPO[@REVISION]/PATH names a file of a Hugging Face repository",
    ),
    (
        "hf-parent-segment",
        merge(CPU_BASE, {"model": {"uri": "hf://acme/resnet-50/../other/model.onnx"}}),
        "hf://ORG/REPO[@REVISION]/PATH names a file of a Hugging Face repository",
    ),
    (
        "hf-options-on-an-s3-model",
        merge(CPU_BASE, {"model": {"uri": "s3://b/m.onnx", "hf": {"endpoint": "https://hub.corp"}}}),
        "spec.model.hf applies to hf:// models only: spec.model.uri must start with hf://",
    ),
    (
        "s3-options-on-a-pvc-model",
        merge(CPU_BASE, {"model": {"s3": {"endpoint": "https://minio.storage.svc:9000"}}}),
        "spec.model.s3 applies to s3:// models only: spec.model.uri must start with s3://",
    ),
    (
        "s3-endpoint-without-scheme",
        merge(CPU_BASE, {"model": {"uri": "s3://models/m.onnx", "s3": {"endpoint": "minio.storage:9000"}}}),
        "spec.model.s3.endpoint",
    ),
    (
        "s3-endpoint-with-a-path",
        merge(CPU_BASE, {"model": {"uri": "s3://b/m.onnx", "s3": {"endpoint": "https://s3.example.com/b"}}}),
        "spec.model.s3.endpoint",
    ),
    (
        "s3-unknown-addressing-style",
        merge(CPU_BASE, {"model": {"uri": "s3://b/m.onnx", "s3": {"addressingStyle": "dns"}}}),
        "spec.model.s3.addressingStyle",
    ),
    (
        "ca-bundle-key-with-a-slash",
        merge(CPU_BASE, {"model": {"caBundleConfigMapRef": {"name": "corp-ca", "key": "../ca.crt"}}}),
        "spec.model.caBundleConfigMapRef.key",
    ),
    (
        "credentials-secret-name-invalid",
        merge(CPU_BASE, {"model": {"credentialsSecretRef": {"name": "Model_Store"}}}),
        "spec.model.credentialsSecretRef.name",
    ),
    ("max-batch-zero", merge(CPU_BASE, {"batching": {"maxBatchSize": 0}}), "spec.batching.maxBatchSize"),
    (
        "negative-queue-delay",
        merge(CPU_BASE, {"batching": {"maxQueueDelayMicroseconds": -1}}),
        "spec.batching.maxQueueDelayMicroseconds",
    ),
    (
        "duplicate-preferred-batch-size",
        merge(CPU_BASE, {"batching": {"preferredBatchSizes": [8, 8]}}),
        "spec.batching.preferredBatchSizes",
    ),
    (
        "min-replicas-negative",
        merge(CPU_BASE, {"autoscaling": {"minReplicas": -1}}),
        "spec.autoscaling.minReplicas",
    ),
    (
        "idle-before-zero-too-short",
        merge(CPU_BASE, {"autoscaling": {"minReplicas": 0, "idleBeforeZeroSeconds": 10}}),
        "spec.autoscaling.idleBeforeZeroSeconds",
    ),
    ("missing-slo", merge(CPU_BASE, {"slo": None}), "spec.slo"),
    ("shape-dimension-zero", merge(CPU_BASE, _shape([0], [1], [1])), "spec.engine.shapes[0].min[0]"),
    (
        "gpu-without-product-or-products",
        merge(GPU_BASE, {"runtime": {"gpu": {"product": None}}}),
        "spec.runtime.gpu needs a product (one GPU product) or products",
    ),
    (
        "gpu-product-and-products",
        merge(GPU_BASE, {"runtime": {"gpu": {"products": [{"name": "NVIDIA-L4"}]}}}),
        "spec.runtime.gpu: set product or products, not both",
    ),
    (
        "gpu-products-duplicate",
        merge(
            GPU_BASE,
            {
                "runtime": {
                    "gpu": {"product": None, "products": [{"name": "NVIDIA-L4"}, {"name": "NVIDIA-L4"}]}
                }
            },
        ),
        "Duplicate value",
    ),
    (
        "gpu-product-price-zero",
        merge(
            GPU_BASE,
            {"runtime": {"gpu": {"product": None, "products": [{"name": "NVIDIA-L4", "pricePerHour": 0}]}}},
        ),
        "spec.runtime.gpu.products[0].pricePerHour",
    ),
    (
        "auto-precision-with-gpu-products",
        merge(
            GPU_BASE,
            {
                "engine": {"precision": "auto"},
                "runtime": {"gpu": {"product": None, "products": [{"name": "NVIDIA-L4"}]}},
            },
        ),
        "spec.engine.precision auto chooses among engines of one hardware",
    ),
    (
        "gpu-product-not-a-label-value",
        merge(GPU_BASE, {"runtime": {"gpu": {"product": "NVIDIA H100"}}}),
        "spec.runtime.gpu.product",
    ),
    (
        "duplicate-shape-input",
        merge(
            CPU_BASE,
            {
                "engine": {
                    "shapes": [
                        {"input": "x", "min": [1], "opt": [2], "max": [4]},
                        {"input": "x", "min": [1], "opt": [1], "max": [1]},
                    ]
                }
            },
        ),
        "spec.engine.shapes",
    ),
    ("unknown-device", merge(CPU_BASE, {"runtime": {"device": "tpu"}}), "spec.runtime.device"),
    (
        "client-latency-query-empty",
        merge(CPU_BASE, {"monitoring": {"clientLatencyP99Query": ""}}),
        "spec.monitoring.clientLatencyP99Query",
    ),
    (
        "client-latency-query-blank",
        merge(CPU_BASE, {"monitoring": {"clientLatencyP99Query": "   "}}),
        "spec.monitoring.clientLatencyP99Query",
    ),
    (
        "client-latency-query-too-long",
        merge(CPU_BASE, {"monitoring": {"clientLatencyP99Query": "sum(x) + " * 228 + "1"}}),
        "spec.monitoring.clientLatencyP99Query",
    ),
]
