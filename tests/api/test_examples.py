"""The examples are valid against the models, the generated CRD (schema + CEL) and the semantic checks."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tailpilot import crdgen
from tailpilot.api import constants as c
from tailpilot.api.v1alpha1 import Device, InferenceService
from tailpilot.api.validation import check_spec
from tailpilot.builders.hf_source import parse_hf_uri

from .crd_sim import admit

ALL_EXAMPLES = sorted((crdgen.REPO_ROOT / "examples").glob("*.yaml"))
#: The InferenceService examples (the others: what a namespace needs before them).
EXAMPLES = [p for p in ALL_EXAMPLES if yaml.safe_load(p.read_text()).get("kind") == "InferenceService"]


def test_the_two_required_examples_exist() -> None:
    names = {p.name for p in EXAMPLES}
    assert {"gpu-tensorrt-h100.yaml", "cpu-onnxruntime.yaml"} <= names


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_example_is_valid(path: Path) -> None:
    (obj,) = list(yaml.safe_load_all(path.read_text()))
    isvc = InferenceService.model_validate(obj)
    assert admit(obj, crdgen.openapi_schema()) == []
    assert check_spec(isvc.spec, name=isvc.name) == []
    assert path.read_text().startswith("#"), "examples open with a comment saying what they show"


def test_gpu_example_is_tensorrt_fp16_on_h100() -> None:
    isvc = InferenceService.model_validate(
        yaml.safe_load((crdgen.REPO_ROOT / "examples/gpu-tensorrt-h100.yaml").read_text())
    )
    assert (isvc.spec.engine.backend, isvc.spec.engine.precision) == ("tensorrt", "fp16")
    assert isvc.spec.runtime.device is Device.GPU and isvc.spec.runtime.gpu is not None
    assert isvc.spec.runtime.gpu.product == "NVIDIA-H100-80GB-HBM3"


def test_every_example_is_an_inference_service_or_the_engine_store_claim() -> None:
    others = {p.name for p in ALL_EXAMPLES} - {p.name for p in EXAMPLES}
    assert others == {"engine-store.yaml"}
    claim = yaml.safe_load((crdgen.REPO_ROOT / "examples/engine-store.yaml").read_text())
    # The claim the operator's Jobs and pods mount by default, shared by nodes: ReadWriteMany.
    assert (claim["kind"], claim["metadata"]["name"]) == (
        "PersistentVolumeClaim",
        c.DEFAULT_ENGINE_STORE_CLAIM,
    )
    assert claim["spec"]["accessModes"] == ["ReadWriteMany"]


@pytest.mark.parametrize("path", ALL_EXAMPLES, ids=[p.name for p in ALL_EXAMPLES])
def test_examples_name_no_namespace_so_they_apply_to_the_users(path: Path) -> None:
    assert "namespace" not in yaml.safe_load(path.read_text())["metadata"]


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_examples_name_a_model_the_build_can_fetch_as_written(path: Path) -> None:
    """No placeholder host: a network source is a public one the build's fetchers parse and pin."""
    isvc = InferenceService.model_validate(yaml.safe_load(path.read_text()))
    uri = isvc.spec.model.uri
    assert "example.com" not in uri and "example.org" not in uri, uri
    if uri.startswith("hf://"):
        location = parse_hf_uri(uri)
        assert (location.repo_id, location.path) == ("onnxmodelzoo/resnet50-v2-7", "resnet50-v2-7.onnx")
        # The Model Zoo's published SHA-256 of that file fixes the bytes whatever `main` moves to.
        assert isvc.spec.model.sha256 == "79102261eb6e5fd7af5d27f41316293e388c5cb691e5d25bfb035c4f64fefe31"
    else:
        assert uri.startswith("pvc://"), uri
