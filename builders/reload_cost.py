"""What a live reload of the engine costs the requests it overlaps.

The autoscaler changes batching by reloading the model in place (Triton's load API with a config
override). Triton keeps serving the old instance while the new one loads, but the load shares the
pod's CPU: on the Python backend under a 600m limit, the new backend stub's start-up took 3.5 s
and stalled requests 2-4.5 s on this machine's real pods under load, longer than the SLO. A reload
is then not the cheap knob it is on a native backend, and the policy should know before it pulls it.

`measure_reload` times one reload of the engine's own configuration in the profiling Triton (in
explicit model-control mode, under the build Job's CPU limit) while `clients` clients send single
requests back to back, enough to keep the instance busy. It reports how long the load took and
what share of its throughput the instance kept meanwhile: under load, a reload lasting L seconds
that keeps a share r of a replica's capacity leaves a backlog that delays requests by about
(utilization - r) * L (`tailpilot.policy.model.reload_delay_ms`). The share is measured at
capacity because that is what the formula needs: with one client (until 2026-11-30) the instance
had CPU to spare and kept 86-94% of one client's throughput, while on real pods under load the
same reload stalled requests for 2 s and more (the demo of 19:20 UTC that day: max batch 4 -> 1
at 76 req/s on two replicas, predicted free, client P99 2.1 s). `served_share` and
`worst_latency_during` are the pure parts.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from tritonclient import grpc as grpcclient

from tailpilot.api.engine import TensorSpec
from tailpilot.builders.infer_requests import infer_inputs, make_inputs, send_timed

#: Requests answered before the reload starts (the baseline) and after it ends.
_MIN_REQUESTS_AROUND = 3


@dataclass(frozen=True)
class ReloadTiming:
    """One reload, timed while clients kept the instance busy."""

    #: How long Triton's load call took.
    load_s: float
    #: The share of its throughput before the reload the instance kept during it (0-1).
    served_share: float
    #: The worst latency of a request in flight during the reload (or started within the settle time after).
    stall_ms: float
    #: The median latency of the requests before the reload.
    baseline_ms: float


def served_share(
    requests: Sequence[tuple[float, float]], *, reload_from: float, reload_to: float, clients: int = 1
) -> float | None:
    """Throughput during the reload over the throughput before it, from back-to-back (start, end) requests.

    Each of `clients` clients sends its next request when the previous answers, so their
    throughput is `clients` over the mean latency: before the reload, over the requests that ended
    before it; during it, the busy time of the requests that overlap it is credited pro rata. None
    without requests before.
    """
    before = [end - start for start, end in requests if end <= reload_from]
    span = reload_to - reload_from
    if not before or span <= 0:
        return None
    baseline_rate = clients / float(np.mean(before))
    served = sum(
        (min(end, reload_to) - max(start, reload_from)) / (end - start)
        for start, end in requests
        if end > reload_from and start < reload_to and end > start
    )
    return min(1.0, served / span / baseline_rate)


def worst_latency_during(
    requests: Sequence[tuple[float, float]], *, reload_from: float, reload_to: float, settle_s: float
) -> float | None:
    """Worst latency (ms) of the (start, end) requests that overlap the reload or its settle time.

    A request counts if it ended after the reload began and started before `settle_s` after the
    reload ended: the first requests on a fresh instance are part of what a reload costs. None
    when no request overlaps.
    """
    overlapping = [
        end - start for start, end in requests if end > reload_from and start < reload_to + settle_s
    ]
    return max(overlapping) * 1000.0 if overlapping else None


def measure_reload(
    grpc_url: str,
    model_name: str,
    inputs: Sequence[TensorSpec],
    *,
    config_json: str,
    clients: int = 1,
    settle_s: float = 1.0,
    timeout_s: float = 120.0,
    clock: Callable[[], float] = time.perf_counter,
    headers: Mapping[str, str] | None = None,
) -> ReloadTiming:
    """Reload `model_name` with `config_json` while `clients` clients send single requests back to back.

    The Triton at `grpc_url` must run in explicit model-control mode. `headers` go with the load
    (the admin key's gRPC header where the server restricts its model-repository protocol).

    Raises:
        RuntimeError: when a request fails, or no request was answered around the reload.
        InferenceServerException: when Triton refuses the load.
    """
    data = make_inputs(inputs, 1)
    lock = threading.Lock()
    done: list[tuple[float, float]] = []
    errors: list[str] = []
    stop = threading.Event()
    deadline = clock() + timeout_s

    def worker() -> None:
        with grpcclient.InferenceServerClient(grpc_url) as client:
            while not stop.is_set() and clock() < deadline:
                timed = send_timed(
                    client, model_name, infer_inputs(inputs, data), clock=clock, lock=lock, errors=errors
                )
                if timed is None:
                    return
                with lock:
                    done.append(timed)

    def answered_since(t: float) -> int:
        with lock:
            return sum(1 for start, _ in done if start >= t)

    def wait_for(condition: Callable[[], bool]) -> None:
        while not condition() and not errors and clock() < deadline:
            time.sleep(0.01)  # polls the worker's progress; the wait is bounded by `deadline`

    threads = [threading.Thread(target=worker, daemon=True) for _ in range(clients)]
    began = clock()
    for thread in threads:
        thread.start()
    try:
        wait_for(lambda: answered_since(began) >= _MIN_REQUESTS_AROUND * clients)
        reload_from = clock()
        with grpcclient.InferenceServerClient(grpc_url) as client:
            client.load_model(model_name, config=config_json, headers=dict(headers) if headers else None)
        reload_to = clock()
        wait_for(
            lambda: clock() >= reload_to + settle_s and answered_since(reload_to) >= _MIN_REQUESTS_AROUND
        )
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=timeout_s)
    if errors:
        raise RuntimeError(f"a request failed during the reload: {errors[0]}")
    with lock:
        requests = list(done)
    stall = worst_latency_during(requests, reload_from=reload_from, reload_to=reload_to, settle_s=settle_s)
    share = served_share(requests, reload_from=reload_from, reload_to=reload_to, clients=clients)
    before = [end - start for start, end in requests if end <= reload_from]
    if stall is None or share is None:
        raise RuntimeError("no request was answered around the reload")
    return ReloadTiming(
        load_s=reload_to - reload_from,
        served_share=share,
        stall_ms=stall,
        baseline_ms=float(np.median(before)) * 1000.0,
    )
