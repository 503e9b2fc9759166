"""The example model the project makes itself: a small convolutional network in ONNX.

Built directly with `onnx.helper` (no torch, no download) with fixed-seed
random weights, so every machine writes byte-identical files and engine keys
are reproducible. Shape: `input` float32 [N, 3, 64, 64] -> `logits` float32
[N, 10], batch dimension `N` dynamic.

Four 3x3 convolutions, each followed by BatchNormalization and ReLU (about
37 M multiply-adds per image): a few milliseconds per image on one CPU core,
enough that batching (better arithmetic intensity) and INT8 (QLinearConv)
change latency and throughput measurably. The unfused BatchNormalization
nodes are deliberate: they are what ONNX Runtime's offline graph
optimization folds into the convolutions, so "naive" and "optimized" differ.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import numpy.typing as npt
import onnx
from onnx import TensorProto, helper, numpy_helper

INPUT_NAME = "input"
OUTPUT_NAME = "logits"
INPUT_SHAPE = (3, 64, 64)
NUM_CLASSES = 10
#: (out_channels, stride) of each convolution.
CONV_LAYERS = ((32, 1), (64, 2), (64, 2), (128, 2))
OPSET = 17
DEFAULT_SEED = 20261129
#: Units of the dense variant's one wide layer that the demo serves and the simulator is validated
#: on (`build_dense_model`): bound on its weights (200 MB), so a batch of four costs little more
#: than one request and batching is the cheap knob, as on a GPU; ~14 ms of one core per batch, so
#: one replica at a fraction of a core serves a few tens of single requests a second, rates the
#: machine's two cores carry beside the client.
DENSE_HIDDEN = 4096


def build_example_model(seed: int = DEFAULT_SEED, *, width: int = 1) -> onnx.ModelProto:
    """Build the example network with deterministic random weights.

    Args:
        seed: Weight seed.
        width: Multiplier of every convolution's channels (1: the example; 2 or 3: a heavier
            model, about width^2 times the compute, for a CPU-bound replica at lower request rates).
    """
    rng = np.random.RandomState(seed)
    initializers: list[TensorProto] = []
    nodes: list[onnx.NodeProto] = []

    def const(name: str, value: npt.NDArray[np.float64]) -> str:
        initializers.append(numpy_helper.from_array(value.astype(np.float32), name))
        return name

    current, channels = INPUT_NAME, INPUT_SHAPE[0]
    for i, (base_ch, stride) in enumerate(CONV_LAYERS):
        out_ch = base_ch * width
        # He initialisation keeps activations in a sane range through the ReLUs.
        weight = rng.normal(0.0, np.sqrt(2.0 / (channels * 9)), size=(out_ch, channels, 3, 3))
        nodes.append(
            helper.make_node(
                "Conv",
                [
                    current,
                    const(f"conv{i}.weight", weight),
                    const(f"conv{i}.bias", rng.normal(0, 0.05, out_ch)),
                ],
                [f"conv{i}"],
                kernel_shape=[3, 3],
                strides=[stride, stride],
                pads=[1, 1, 1, 1],
            )
        )
        nodes.append(
            helper.make_node(
                "BatchNormalization",
                [
                    f"conv{i}",
                    const(f"bn{i}.scale", rng.uniform(0.8, 1.2, out_ch)),
                    const(f"bn{i}.bias", rng.normal(0, 0.05, out_ch)),
                    const(f"bn{i}.mean", rng.normal(0, 0.05, out_ch)),
                    const(f"bn{i}.var", rng.uniform(0.8, 1.2, out_ch)),
                ],
                [f"bn{i}"],
                epsilon=1e-5,
            )
        )
        nodes.append(helper.make_node("Relu", [f"bn{i}"], [f"relu{i}"]))
        current, channels = f"relu{i}", out_ch
    nodes.append(helper.make_node("GlobalAveragePool", [current], ["pool"]))
    nodes.append(helper.make_node("Flatten", ["pool"], ["flat"], axis=1))
    fc_weight = rng.normal(0.0, np.sqrt(1.0 / channels), size=(NUM_CLASSES, channels))
    nodes.append(
        helper.make_node(
            "Gemm",
            ["flat", const("fc.weight", fc_weight), const("fc.bias", rng.normal(0, 0.05, NUM_CLASSES))],
            [OUTPUT_NAME],
            transB=1,
        )
    )
    return _model("tailpilot_example_cnn", nodes, initializers)


def _model(name: str, nodes: list[onnx.NodeProto], initializers: list[TensorProto]) -> onnx.ModelProto:
    """The checked model of `nodes`, from the example's input to its logits."""
    graph = helper.make_graph(
        nodes,
        name,
        [helper.make_tensor_value_info(INPUT_NAME, TensorProto.FLOAT, ["N", *INPUT_SHAPE])],
        [helper.make_tensor_value_info(OUTPUT_NAME, TensorProto.FLOAT, ["N", NUM_CLASSES])],
        initializers,
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="tailpilot-example"
    )
    # IR 8 is what onnxruntime 1.18+ accepts; pinning it keeps the bytes stable across onnx releases.
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    return model


def build_dense_model(seed: int = DEFAULT_SEED, *, hidden: int) -> onnx.ModelProto:
    """A weight-bound variant with the example's input and output: one wide fully connected layer.

    `input` [N, 3, 64, 64] is flattened into a Gemm of `hidden` units, then ReLU and a Gemm to the
    10 logits. Its time goes into reading the first layer's weights (12288 x `hidden` floats: 200 MB
    at 4096), which a batch reads once for all its items, as large language and recommendation
    models are bound on their weights at small batches. So a batch of 4 costs little more than one
    item (measured with ONNX Runtime on one core here: 2048 units, 7.1 ms for one image, 7.8 ms for
    four), where the convolutional example costs about 4x: on this model batching is the cheap knob.
    """
    rng = np.random.RandomState(seed)
    flat = int(np.prod(INPUT_SHAPE))
    initializers = [
        numpy_helper.from_array(
            rng.normal(0.0, np.sqrt(2.0 / flat), size=(hidden, flat)).astype(np.float32), "fc1.weight"
        ),
        numpy_helper.from_array(rng.normal(0, 0.05, hidden).astype(np.float32), "fc1.bias"),
        numpy_helper.from_array(
            rng.normal(0.0, np.sqrt(1.0 / hidden), size=(NUM_CLASSES, hidden)).astype(np.float32),
            "fc2.weight",
        ),
        numpy_helper.from_array(rng.normal(0, 0.05, NUM_CLASSES).astype(np.float32), "fc2.bias"),
    ]
    nodes = [
        helper.make_node("Flatten", [INPUT_NAME], ["flat"], axis=1),
        helper.make_node("Gemm", ["flat", "fc1.weight", "fc1.bias"], ["fc1"], transB=1),
        helper.make_node("Relu", ["fc1"], ["relu"]),
        helper.make_node("Gemm", ["relu", "fc2.weight", "fc2.bias"], [OUTPUT_NAME], transB=1),
    ]
    return _model("tailpilot_example_dense", nodes, initializers)


def write_example_model(
    path: Path | str, seed: int = DEFAULT_SEED, *, width: int = 1, dense_hidden: int | None = None
) -> Path:
    """Write the example model (channels x `width`), or its dense variant with `dense_hidden` units."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    model = (
        build_example_model(seed, width=width)
        if dense_hidden is None
        else build_dense_model(seed, hidden=dense_hidden)
    )
    onnx.save_model(model, str(path))
    return path


def example_inputs(batch_size: int, seed: int = 0) -> npt.NDArray[np.float32]:
    """Deterministic random inputs for the example model, shape [batch_size, 3, 64, 64]."""
    return np.random.RandomState(seed).uniform(0.0, 1.0, size=(batch_size, *INPUT_SHAPE)).astype(np.float32)


def write_calibration_data(path: Path | str, *, samples: int = 32, seed: int = 1) -> Path:
    """Write calibration inputs as `.npz` (one array per input name, first axis = samples)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as f:
        np.savez(f, **{INPUT_NAME: example_inputs(samples, seed)})
    return path
