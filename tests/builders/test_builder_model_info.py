from __future__ import annotations

from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper

from tailpilot.api.engine import ShapeProfile
from tailpilot.builders.errors import INVALID_MODEL, SHAPE_PROFILE_MISMATCH, BuildError
from tailpilot.builders.model_info import (
    ModelInfo,
    TensorInfo,
    check_request_shapes,
    load_and_verify,
    triton_specs,
)


def test_example_model_is_verified_and_described(example_model: Path) -> None:
    info = load_and_verify(example_model)
    assert info.inputs == (TensorInfo("input", TensorProto.FLOAT, (None, 3, 64, 64)),)
    assert info.outputs == (TensorInfo("logits", TensorProto.FLOAT, (None, 10)),)
    specs = triton_specs(info.inputs)
    assert [(s.name, s.data_type, s.dims) for s in specs] == [("input", "TYPE_FP32", (3, 64, 64))]


def test_type_conflict_fails_shape_inference(tmp_path: Path) -> None:
    # Relu of a float tensor declared as an int64 output: the checker passes, strict inference must not.
    node = helper.make_node("Relu", ["x"], ["y"])
    graph = helper.make_graph(
        [node],
        "bad",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
        [helper.make_tensor_value_info("y", TensorProto.INT64, ["N", 4])],
    )
    path = tmp_path / "bad.onnx"
    onnx.save_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    with pytest.raises(BuildError) as err:
        load_and_verify(path)
    assert err.value.reason == INVALID_MODEL
    assert "bad.onnx" in err.value.message


IMAGE = ModelInfo(
    inputs=(TensorInfo("input", TensorProto.FLOAT, (None, 3, None, None)),),
    outputs=(TensorInfo("out", TensorProto.FLOAT, (None, 10)),),
    opset=17,
    ir_version=8,
)


def test_a_consistent_profile_passes() -> None:
    profile = ShapeProfile(input="input", min=(3, 32, 32), opt=(3, 224, 224), max=(3, 512, 512))
    check_request_shapes(IMAGE, shapes=[profile], max_batch_size=8, require_static_profile=True)


@pytest.mark.parametrize(
    ("profile", "max_batch", "expected"),
    [
        (ShapeProfile(input="image", min=(3, 1, 1), opt=(3, 1, 1), max=(3, 1, 1)), 8, "names input 'image'"),
        (ShapeProfile(input="input", min=(1, 32, 32), opt=(1, 32, 32), max=(1, 32, 32)), 8, "fixed at 3"),
        (ShapeProfile(input="input", min=(3, 32), opt=(3, 32), max=(3, 32)), 8, "has 2 dimensions"),
        (
            ShapeProfile(input="input", min=(3, 64, 64), opt=(3, 32, 32), max=(3, 64, 64)),
            8,
            "min <= opt <= max",
        ),
    ],
)
def test_contradicting_profiles_name_the_problem(
    profile: ShapeProfile, max_batch: int, expected: str
) -> None:
    with pytest.raises(BuildError) as err:
        check_request_shapes(IMAGE, shapes=[profile], max_batch_size=max_batch, require_static_profile=False)
    assert err.value.reason == SHAPE_PROFILE_MISMATCH
    assert expected in err.value.message


def test_dynamic_dims_need_a_profile_only_when_required() -> None:
    check_request_shapes(IMAGE, shapes=[], max_batch_size=8, require_static_profile=False)
    with pytest.raises(BuildError, match="dynamic dimensions \\[2, 3\\]"):
        check_request_shapes(IMAGE, shapes=[], max_batch_size=8, require_static_profile=True)


def test_fixed_batch_dimension_contradicts_a_max_batch_above_it() -> None:
    fixed = ModelInfo(
        inputs=(TensorInfo("x", TensorProto.FLOAT, (1, 4)),),
        outputs=(TensorInfo("y", TensorProto.FLOAT, (1, 4)),),
        opset=17,
        ir_version=8,
    )
    check_request_shapes(fixed, shapes=[], max_batch_size=1, require_static_profile=False)
    with pytest.raises(BuildError, match="fixed batch dimension 1, but maxBatchSize is 4"):
        check_request_shapes(fixed, shapes=[], max_batch_size=4, require_static_profile=False)
