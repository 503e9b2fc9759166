from __future__ import annotations

from typing import Any

import pytest

from tailpilot.api.engine import BuildRequest, ShapeProfile
from tailpilot.builders.engine_key import EngineKeyInputs, engine_key, index_is_trusted, index_key

BASE = BuildRequest(
    modelUri="https://example.com/m.onnx",
    modelSha256="a" * 64,
    backend="onnxruntime",
    precision="fp32",
    maxBatchSize=8,
)
VERSIONS = {"onnx": "1.22.0", "onnxruntime": "1.32.0"}


def key(request: BuildRequest = BASE, **overrides: Any) -> str:
    fields: dict[str, Any] = {
        "model_sha256": "m" * 64,
        "calibration_sha256": None,
        "request": request,
        "library_versions": VERSIONS,
    }
    fields.update(overrides)
    return engine_key(EngineKeyInputs(**fields))


def test_same_inputs_same_key() -> None:
    assert key() == key(BASE.model_copy())
    assert len(key()) == 32


def test_store_location_and_profile_flag_do_not_change_the_key() -> None:
    assert key(BASE.model_copy(update={"store": "/elsewhere", "profile": False})) == key()


@pytest.mark.parametrize(
    "request_change",
    [
        {"backend": "tensorrt"},
        {"precision": "int8"},
        {"max_batch_size": 16},
        {"target": "NVIDIA-A10"},
        {"serving_variant": "python"},
        {"model_name": "other"},
        {"shapes": (ShapeProfile(input="input", min=(3,), opt=(3,), max=(3,)),)},
        {"cpu_limit_millis": 600},  # the profile stored with the engine holds for its CPU limit
    ],
)
def test_any_request_change_gives_a_new_key(request_change: dict[str, Any]) -> None:
    assert key(BASE.model_copy(update=request_change)) != key()


@pytest.mark.parametrize(
    "other",
    [
        {"model_sha256": "n" * 64},
        {"calibration_sha256": "c" * 64},
        {"library_versions": {**VERSIONS, "onnxruntime": "1.33.0"}},
        {"builder_version": "2"},
    ],
)
def test_any_content_or_version_change_gives_a_new_key(other: dict[str, Any]) -> None:
    assert key(**other) != key()


def test_keys_without_a_cpu_limit_are_the_ones_earlier_builders_computed() -> None:
    """An upgraded operator finds the build Jobs and engines of requests that name no CPU limit."""
    assert BASE.request_key() == "a84e3c4cf4931e315d85"
    assert key() == "252b07be2a79e58ca0005caec1a03a6d"


def test_index_key_follows_request_and_versions() -> None:
    assert index_key(BASE, VERSIONS) == index_key(BASE.model_copy(), dict(VERSIONS))
    assert index_key(BASE, {**VERSIONS, "onnx": "1.23"}) != index_key(BASE, VERSIONS)
    assert index_key(BASE.model_copy(update={"precision": "int8"}), VERSIONS) != index_key(BASE, VERSIONS)


def test_index_is_trusted_only_when_all_bytes_are_pinned() -> None:
    assert index_is_trusted(BASE)
    assert not index_is_trusted(BASE.model_copy(update={"model_sha256": None}))
    assert not index_is_trusted(BASE.model_copy(update={"calibration_uri": "/c.npz"}))
    assert index_is_trusted(
        BASE.model_copy(update={"calibration_uri": "/c.npz", "calibration_sha256": "c" * 64})
    )
