"""The examples are valid against the models, the generated CRD (schema + CEL) and the semantic checks."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tailpilot import crdgen
from tailpilot.api.v1alpha1 import Device, InferenceService
from tailpilot.api.validation import check_spec

from .crd_sim import admit

EXAMPLES = sorted((crdgen.REPO_ROOT / "examples").glob("*.yaml"))


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
