"""A tiny Python-backend model for real-Triton tests, and a bounded load generator.

The model copies its input to its output after sleeping a batch-size-dependent
time (t(b) = base_ms + 0.3 ms * b; base 2 ms by default), so dynamic batching
has something to batch. With
`REFUSE_ABOVE` set it refuses to initialize when max_batch_size exceeds it,
which makes a real Triton reject a reload (the old model keeps serving).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from tailpilot.api.autoscaling import BatchingConfig
from tailpilot.api.engine import TensorSpec
from tailpilot.manifests.placement import ServingTarget
from tailpilot.manifests.triton_model_config import (
    ModelConfig,
    model_config_for,
    to_load_override_json,
    to_pbtxt,
)

MODEL = "echo"

MODEL_PY = """
import json
import time

import numpy as np
import triton_python_backend_utils as pb_utils

REFUSE_ABOVE = {refuse_above}
BASE_S = {base_ms} / 1000.0


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        if REFUSE_ABOVE and config.get("max_batch_size", 0) > REFUSE_ABOVE:
            raise ValueError(f"max_batch_size above {{REFUSE_ABOVE}} is not supported by this engine")

    def execute(self, requests):
        inputs = [pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy() for r in requests]
        batch = sum(x.shape[0] for x in inputs)
        time.sleep(BASE_S + 0.0003 * batch)
        return [pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("OUTPUT0", x.astype(np.float32))])
                for x in inputs]
"""

INPUTS = (TensorSpec(name="INPUT0", data_type="TYPE_FP32", dims=(4,)),)
OUTPUTS = (TensorSpec(name="OUTPUT0", data_type="TYPE_FP32", dims=(4,)),)


def echo_model_config(batching: BatchingConfig) -> ModelConfig:
    """The echo model's config with this batching, as the operator renders it."""
    return model_config_for(
        name=MODEL,
        triton_backend="python",
        inputs=INPUTS,
        outputs=OUTPUTS,
        batching=batching,
        placement=ServingTarget(device="cpu"),
    )


def model_config_json(batching: BatchingConfig) -> str:
    """The load-override JSON of the echo model with this batching."""
    return to_load_override_json(echo_model_config(batching))


def model_warmup_requests(batching: BatchingConfig) -> int:
    """Requests Triton counts for the echo model's own warm-up on load (one per warm-up sample: measured)."""
    return sum(w.batch_size * w.count for w in echo_model_config(batching).model_warmup)


def echo_service(namespace: str, *, slo: dict, autoscaling: dict) -> dict:
    """An InferenceService named after the echo model, on CPU, single requests (fixed batching)."""
    return {
        "apiVersion": "tailpilot.io/v1alpha1",
        "kind": "InferenceService",
        "metadata": {"name": MODEL, "namespace": namespace},
        "spec": {
            "model": {"uri": "https://models.example.com/echo.onnx", "sha256": "0" * 64, "name": MODEL},
            "runtime": {"device": "cpu", "servingVariant": "python"},
            "batching": {"mode": "fixed", "maxBatchSize": 1, "maxQueueDelayMicroseconds": 0},
            "slo": slo,
            "autoscaling": autoscaling,
        },
    }


def write_repository(
    root: Path, *, batching: BatchingConfig, refuse_above: int = 0, base_ms: float = 2.0
) -> Path:
    """Write a model repository with the echo model; return its path."""
    model_dir = root / MODEL
    (model_dir / "1").mkdir(parents=True)
    (model_dir / "1" / "model.py").write_text(MODEL_PY.format(refuse_above=refuse_above, base_ms=base_ms))
    config = model_config_for(
        name=MODEL,
        triton_backend="python",
        inputs=INPUTS,
        outputs=OUTPUTS,
        batching=batching,
        placement=ServingTarget(device="cpu"),
    )
    (model_dir / "config.pbtxt").write_text(to_pbtxt(config))
    return root


INFER_BODY = {
    "inputs": [{"name": "INPUT0", "shape": [1, 4], "datatype": "FP32", "data": [1.0, 2.0, 3.0, 4.0]}]
}


@dataclass
class LoadResult:
    latencies_s: list[float] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    by_url: dict[str, list[float]] = field(default_factory=dict)

    @property
    def count(self) -> int:
        return len(self.latencies_s) + len(self.failures)

    def p99_s(self, url: str | None = None) -> float:
        ordered = sorted(self.latencies_s if url is None else self.by_url[url])
        return ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]


class BoundedLoad:
    """Closed-loop load: `workers` threads pacing at `rate_per_worker` req/s each, bounded in count and time.

    Pacing uses `Event.wait` on the stop event (a send schedule, not a synchronization).
    """

    def __init__(
        self, urls: list[str], *, workers: int, rate_per_worker: float, max_requests: int, max_seconds: float
    ) -> None:
        self.urls = urls
        self.workers = workers
        self.interval = 1.0 / rate_per_worker
        self.max_requests = max_requests
        self.max_seconds = max_seconds
        self.result = LoadResult()
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []

    def _worker(self, index: int) -> None:
        deadline = time.monotonic() + self.max_seconds
        with httpx.Client(timeout=10.0) as client:
            # Warm the client (lazy imports, connections) so its one-time cost is not counted as latency.
            for base in self.urls:
                client.get(f"{base}/v2/health/ready")
            next_at = time.monotonic()
            i = index
            while not self._stop.is_set() and time.monotonic() < deadline:
                with self._lock:
                    if self.result.count >= self.max_requests:
                        return
                base = self.urls[i % len(self.urls)]
                url = f"{base}/v2/models/{MODEL}/infer"
                i += 1
                start = time.monotonic()
                try:
                    r = client.post(url, json=INFER_BODY)
                    ok, why = r.status_code == 200, f"HTTP {r.status_code}: {r.text[:200]}"
                except httpx.HTTPError as exc:
                    ok, why = False, repr(exc)
                elapsed = time.monotonic() - start
                with self._lock:
                    if ok:
                        self.result.latencies_s.append(elapsed)
                        self.result.by_url.setdefault(base, []).append(elapsed)
                    else:
                        self.result.failures.append(why)
                next_at += self.interval
                # Pacing, not synchronization: the worker waits for its next send slot.
                self._stop.wait(max(0.0, next_at - time.monotonic()))

    def join(self, timeout_s: float) -> None:
        """Wait (bounded) for the workers to reach their own request or time bound."""
        deadline = time.monotonic() + timeout_s
        for t in self._threads:
            t.join(timeout=max(0.0, deadline - time.monotonic()))

    def __enter__(self) -> BoundedLoad:
        self._threads = [
            threading.Thread(target=self._worker, args=(i,), daemon=True) for i in range(self.workers)
        ]
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(timeout=15)
