"""Triton Python-backend model that serves an ONNX model with ONNX Runtime (copied as `model.py`).

This file is not imported by TailPilot: the builder copies it into a model
repository's version directory next to `model.onnx`, for the "python" serving
variant (Triton builds without the ONNX Runtime backend, such as the one in
nvidia-pytriton). Model parameters (all optional, string values):

- `onnx_model_file`: file name in the version directory (default `model.onnx`);
- `intra_op_threads`: ONNX Runtime intra-op threads per instance (default 1, so that
  instances, not threads, are the unit of CPU parallelism, as with the native backend's instance groups).

Requests of one dynamic batch are concatenated into one ONNX Runtime run when
their non-batch shapes agree, which is what makes batching pay off.
"""

from __future__ import annotations

import json
import os
from typing import Any

import numpy as np
import onnxruntime as ort
import triton_python_backend_utils as pb_utils  # type: ignore[import-not-found,unused-ignore]


class TritonPythonModel:
    """The Python backend's model interface."""

    def initialize(self, args: dict[str, str]) -> None:
        """Load the ONNX model for this instance."""
        config = json.loads(args["model_config"])
        params = {k: v.get("string_value", "") for k, v in config.get("parameters", {}).items()}
        path = os.path.join(
            args["model_repository"], args["model_version"], params.get("onnx_model_file") or "model.onnx"
        )
        options = ort.SessionOptions()
        options.intra_op_num_threads = int(params.get("intra_op_threads") or 1)
        options.inter_op_num_threads = 1
        self.session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
        self.input_names = [t["name"] for t in config["input"]]
        self.output_names = [t["name"] for t in config["output"]]

    def execute(self, requests: list[Any]) -> list[Any]:
        """Run one dynamic batch of requests."""
        try:
            feeds = [
                {n: pb_utils.get_input_tensor_by_name(r, n).as_numpy() for n in self.input_names}
                for r in requests
            ]
            if len(feeds) > 1 and all(_same_inner_shapes(feeds[0], f) for f in feeds[1:]):
                merged = {n: np.concatenate([f[n] for f in feeds]) for n in self.input_names}
                results = self.session.run(self.output_names, merged)
                sizes = [len(f[self.input_names[0]]) for f in feeds]
                bounds = np.cumsum([0, *sizes])
                per_request = [[r[bounds[i] : bounds[i + 1]] for r in results] for i in range(len(feeds))]
            else:
                per_request = [self.session.run(self.output_names, f) for f in feeds]
            return [
                pb_utils.InferenceResponse(
                    output_tensors=[
                        pb_utils.Tensor(n, np.ascontiguousarray(a))
                        for n, a in zip(self.output_names, outs, strict=True)
                    ]
                )
                for outs in per_request
            ]
        except Exception as exc:  # report to the client instead of crashing the stub
            return [pb_utils.InferenceResponse(error=pb_utils.TritonError(str(exc))) for _ in requests]


def _same_inner_shapes(a: dict[str, Any], b: dict[str, Any]) -> bool:
    return all(a[n].shape[1:] == b[n].shape[1:] for n in a)
