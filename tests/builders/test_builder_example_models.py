"""The example model's weight-bound variant takes the example's tensors (the demo's load sends them).

What a batch costs it is measured where it serves, by the build's profile Job (`make demo` prints the
fit: a batch of four costs little more than one request there), not timed here.
"""

from __future__ import annotations

import numpy as np
import onnxruntime as ort

from tailpilot.builders import example_model as em


def session(model: object) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    return ort.InferenceSession(model.SerializeToString(), options)  # type: ignore[attr-defined]


def test_the_dense_variant_takes_the_examples_input_and_gives_its_logits() -> None:
    model = em.build_dense_model(hidden=64)
    (logits,) = session(model).run(None, {em.INPUT_NAME: em.example_inputs(3)})
    assert logits.shape == (3, em.NUM_CLASSES) and np.isfinite(logits).all()
    assert [i.name for i in model.graph.input] == [em.INPUT_NAME]
    assert [o.name for o in model.graph.output] == [em.OUTPUT_NAME]
    # Deterministic: the same seed writes the same bytes (engine keys are content hashes).
    assert model.SerializeToString() == em.build_dense_model(hidden=64).SerializeToString()
