"""Fluent InferenceService fixtures for the manifest tests: `make_isvc("a").gpu().max_batch(8).obj()`."""

from __future__ import annotations

import copy
from typing import Any

from tailpilot.api.engine import BuildOutcome, BuildResult, TensorSpec
from tailpilot.api.v1alpha1 import InferenceService
from tailpilot.manifests.settings import ManifestSettings
from tailpilot.manifests.triton_access import AdminKeyRef, admin_key_ref

SETTINGS = ManifestSettings(builder_image="registry.example.com/tailpilot-builder:0.1.0")
H100 = "NVIDIA-H100-80GB-HBM3"


class IsvcBuilder:
    """Builds an InferenceService value step by step; every step returns self."""

    def __init__(self, name: str, namespace: str) -> None:
        self._obj: dict[str, Any] = {
            "apiVersion": "tailpilot.io/v1alpha1",
            "kind": "InferenceService",
            "metadata": {"name": name, "namespace": namespace, "uid": f"uid-{name}", "generation": 1},
            "spec": {"model": {"uri": "pvc://models/resnet50.onnx"}, "slo": {"p99LatencyMs": 50}},
        }

    def _section(self, key: str) -> dict[str, Any]:
        section: dict[str, Any] = self._obj["spec"].setdefault(key, {})
        return section

    def gpu(self, product: str = H100, count: int = 1, exclusive: bool = False) -> IsvcBuilder:
        self._section("runtime").update(
            {"device": "gpu", "gpu": {"product": product, "count": count, "exclusive": exclusive}}
        )
        return self

    def tensorrt(self, precision: str = "fp16") -> IsvcBuilder:
        self._section("engine").update({"backend": "tensorrt", "precision": precision})
        return self

    def precision(self, precision: str) -> IsvcBuilder:
        self._section("engine")["precision"] = precision
        return self

    def max_batch(self, size: int) -> IsvcBuilder:
        self._section("batching")["maxBatchSize"] = size
        return self

    def preferred(self, *sizes: int) -> IsvcBuilder:
        self._section("batching")["preferredBatchSizes"] = list(sizes)
        return self

    def queue_delay(self, us: int) -> IsvcBuilder:
        self._section("batching")["maxQueueDelayMicroseconds"] = us
        return self

    def slo(self, p99_ms: float, max_queue_depth: int | None = None) -> IsvcBuilder:
        self._obj["spec"]["slo"] = {"p99LatencyMs": p99_ms}
        if max_queue_depth is not None:
            self._obj["spec"]["slo"]["maxQueueDepth"] = max_queue_depth
        return self

    def objective(self, percent: float) -> IsvcBuilder:
        self._obj["spec"]["slo"]["objectivePercent"] = percent
        return self

    def runtime(self, **fields: Any) -> IsvcBuilder:
        self._section("runtime").update(fields)
        return self

    def autoscaling(self, **fields: Any) -> IsvcBuilder:
        self._section("autoscaling").update(fields)
        return self

    def monitoring(self, **fields: Any) -> IsvcBuilder:
        self._section("monitoring").update(fields)
        return self

    def model(self, **fields: Any) -> IsvcBuilder:
        self._section("model").update(fields)
        return self

    def obj(self) -> InferenceService:
        return InferenceService.model_validate(copy.deepcopy(self._obj))


def make_isvc(name: str = "resnet", namespace: str = "ml") -> IsvcBuilder:
    return IsvcBuilder(name, namespace)


def build_result(engine_key: str = "e" * 40, backend: str = "onnxruntime") -> BuildResult:
    return BuildResult(
        outcome=BuildOutcome.SUCCEEDED,
        engine_key=engine_key,
        artifact=f"pvc://tailpilot-engines/engines/{engine_key}",
        triton_backend=backend,
        inputs=(TensorSpec(name="input", data_type="TYPE_FP32", dims=(3, 224, 224)),),
        outputs=(TensorSpec(name="logits", data_type="TYPE_FP32", dims=(1000,)),),
    )


def assert_restricted(pod_spec: dict[str, Any]) -> None:
    """Check the PodSecurity `restricted` profile's rules (Kubernetes docs, 'Restricted' table)."""
    psc = pod_spec.get("securityContext", {})
    assert pod_spec.get("hostNetwork") is not True and pod_spec.get("hostPID") is not True
    for vol in pod_spec.get("volumes", []):
        allowed = {
            "configMap",
            "emptyDir",
            "persistentVolumeClaim",
            "secret",
            "projected",
            "downwardAPI",
            "csi",
        }
        assert set(vol) - {"name"} <= allowed, vol
    for ctr in pod_spec.get("initContainers", []) + pod_spec["containers"]:
        sc = ctr.get("securityContext", {})
        assert sc.get("allowPrivilegeEscalation") is False, ctr["name"]
        assert sc.get("capabilities", {}).get("drop") == ["ALL"], ctr["name"]
        assert not sc.get("capabilities", {}).get("add"), ctr["name"]
        assert sc.get("runAsNonRoot", psc.get("runAsNonRoot")) is True, ctr["name"]
        # Above 10000: no host account (root, the first regular user 1000) shares the container's UID.
        assert sc.get("runAsUser", psc.get("runAsUser", 0)) >= 10000, ctr["name"]
        assert sc.get("runAsGroup", psc.get("runAsGroup", 0)) >= 10000, ctr["name"]
        seccomp = sc.get("seccompProfile", psc.get("seccompProfile", {}))
        assert seccomp.get("type") in {"RuntimeDefault", "Localhost"}, ctr["name"]
        assert sc.get("privileged") is not True, ctr["name"]
        assert sc.get("readOnlyRootFilesystem") is True, ctr["name"]  # stricter than `restricted`


def assert_mounts_resolve(pod_spec: dict[str, Any]) -> None:
    names = {v["name"] for v in pod_spec["volumes"]}
    for ctr in pod_spec.get("initContainers", []) + pod_spec["containers"]:
        for mount in ctr.get("volumeMounts", []):
            assert mount["name"] in names, (ctr["name"], mount)


def admin_key(isvc_name: str = "resnet", secret_uid: str = "secret-uid-1") -> AdminKeyRef:
    """The reference to a service's admin-key Secret, as the controller passes it once the Secret exists."""
    return admin_key_ref(isvc_name, secret_uid=secret_uid)
