"""Request tensors and timed gRPC requests for a Triton under load (I/O module).

Shared by the profiler's closed-loop load (`profiler.measure`) and the timed
live reload (`reload_cost.measure_reload`): random inputs for the engine's
tensors, the gRPC request tensors holding them, and one request timed on the
client.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
from tritonclient import grpc as grpcclient

from tailpilot.api.engine import TensorSpec
from tailpilot.builders.errors import PROFILE_FAILED, BuildError

_NUMPY_TYPES = {
    "TYPE_FP32": np.float32,
    "TYPE_FP16": np.float16,
    "TYPE_FP64": np.float64,
    "TYPE_INT8": np.int8,
    "TYPE_INT16": np.int16,
    "TYPE_INT32": np.int32,
    "TYPE_INT64": np.int64,
    "TYPE_UINT8": np.uint8,
    "TYPE_BOOL": np.bool_,
}
_WIRE_TYPES = {
    "TYPE_FP32": "FP32",
    "TYPE_FP16": "FP16",
    "TYPE_FP64": "FP64",
    "TYPE_INT8": "INT8",
    "TYPE_INT16": "INT16",
    "TYPE_INT32": "INT32",
    "TYPE_INT64": "INT64",
    "TYPE_UINT8": "UINT8",
    "TYPE_BOOL": "BOOL",
}


def make_inputs(
    specs: Sequence[TensorSpec], batch_size: int, *, seed: int = 0
) -> dict[str, npt.NDArray[Any]]:
    """Random inputs of the given batch size (dynamic dims as 1)."""
    rng = np.random.default_rng(seed)
    out = {}
    for spec in specs:
        dtype = _NUMPY_TYPES.get(spec.data_type)
        if dtype is None:
            raise BuildError(
                PROFILE_FAILED, f"input {spec.name!r} of type {spec.data_type} cannot be generated"
            )
        shape = (batch_size, *(d if d > 0 else 1 for d in spec.dims))
        out[spec.name] = rng.uniform(0.0, 1.0, size=shape).astype(dtype)
    return out


def infer_inputs(
    specs: Sequence[TensorSpec], data: Mapping[str, npt.NDArray[Any]]
) -> list[grpcclient.InferInput]:
    """The request tensors (gRPC) holding `data` from `make_inputs`; a request needs fresh ones."""
    made = []
    for spec in specs:
        tensor = grpcclient.InferInput(spec.name, list(data[spec.name].shape), _WIRE_TYPES[spec.data_type])
        tensor.set_data_from_numpy(data[spec.name])
        made.append(tensor)
    return made


def send_timed(
    client: grpcclient.InferenceServerClient,
    model_name: str,
    tensors: list[grpcclient.InferInput],
    *,
    clock: Callable[[], float],
    lock: threading.Lock,
    errors: list[str],
) -> tuple[float, float] | None:
    """(sent, answered) times of one request; None, with the error appended under `lock`, if it failed."""
    start = clock()
    try:
        client.infer(model_name, tensors)
    except Exception as exc:  # tritonclient raises InferenceServerException and grpc errors
        with lock:
            errors.append(str(exc))
        return None
    return start, clock()
