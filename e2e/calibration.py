"""What one replica of the SLO-loop service serves at its CPU limit, measured on its pod's cgroup.

The SLO-loop runs (`make test-slo-loop`, `make demo`) size their load step from it: past one
replica's capacity, so the loop must answer, and well within two replicas'. The build's profile
is no good for that: what a request costs varies with how busy the machine is (profiles of 37-62 ms
a request in the runs, pods learned at x0.55-x1.7 of them), and a step sized from the profile was
too small for one replica on a quiet machine (CI run of 2026-11-30 06:22 UTC: 13 req/s at a P99 of
190 ms) or too big for two on a busy one (04:46 UTC, with no CPU limits).

A replica's CPU time is its Triton container's `cpuacct.usage` (the node agent's cgroups), so
it counts the HTTP front end, the backend stub and ONNX Runtime, and nothing else on the machine.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from kubernetes import client

from tailpilot.api.v1alpha1 import InferenceService
from tailpilot.bench import traces
from tailpilot.bench.loadgen import binary_infer_body
from tailpilot.bench.loadgen_process import LoadProcess
from tailpilot.builders import example_model
from tailpilot.controllers.core.status import decode_status, engine_profile
from tailpilot.manifests.build_job import serving_cpu_limit_millis
from tailpilot.manifests.deployment import CONTAINER_NAME
from tailpilot_e2e.agent_cgroups import CpuCgroups
from tailpilot_e2e.real_pods import MODEL_NAME, is_ready, ready_endpoints, server_pods

#: One request of the example model, in Triton's binary tensor format.
PAYLOAD = binary_infer_body(inputs=[(example_model.INPUT_NAME, example_model.example_inputs(1))])


def example_load(
    work_dir: Path, arrivals_s: np.ndarray, *, duration_s: float, targets: list[str]
) -> LoadProcess:
    """Open-loop single requests to the example model, every arrival once, within `duration_s`."""
    return LoadProcess(
        work_dir=work_dir,
        model=MODEL_NAME,
        payload=PAYLOAD,
        arrivals_s=arrivals_s,
        max_requests=int(arrivals_s.size),
        max_duration_s=float(duration_s),
        targets=targets,
        timeout_s=10.0,
    )


#: Light enough for one replica (well under its limit, whatever the machine), long enough for
#: 60-100 requests.
CALIBRATION_S = 20.0
#: The calibration's load, as a share of one replica's capacity by the build's profile (which the
#: pods have served at x0.55-x1.7 of).
CALIBRATION_LOAD = 0.3
#: How long the replica's idle CPU time (scrapes, health checks) is measured first.
IDLE_S = 5.0


@dataclass(frozen=True)
class Calibration:
    """What one replica's requests cost in CPU time, and what its limit buys."""

    cpu_per_request_s: float
    idle_cpu_share: float
    requests: int
    limit_cores: float

    @property
    def capacity_per_s(self) -> float:
        """Requests per second one replica serves at its CPU limit."""
        return self.limit_cores / self.cpu_per_request_s

    def __str__(self) -> str:
        return (
            f"{self.cpu_per_request_s * 1000:.1f} ms of CPU a request ({self.requests} requests, idle "
            f"{self.idle_cpu_share:.1%} of a core): {self.capacity_per_s:.1f} req/s a replica at "
            f"{self.limit_cores:g} cores"
        )


def limit_cores(isvc: InferenceService) -> float:
    """The service's Triton CPU limit, in cores."""
    milli = serving_cpu_limit_millis(isvc)
    if milli is None:
        raise ValueError("the SLO-loop service needs a CPU limit to calibrate against")
    return milli / 1000


def calibration_rate(isvc: InferenceService, status: dict[str, Any], limit: float) -> float:
    """CALIBRATION_LOAD of one replica's capacity at `limit` cores, by the build's profile.

    A profile measured under a CPU limit (the build Job runs under the serving pods') already
    holds for it; one measured without is scaled as if its requests each took a whole core.
    """
    profile = engine_profile(decode_status(status), max_batch_size=isvc.spec.batching.max_batch_size)
    if profile is None:
        raise RuntimeError("the service has no profile yet")
    per_request_s = (profile.service_time.intercept_ms + profile.service_time.per_item_ms) / 1000
    cores = 1.0 if profile.cpu_limit_millis is not None else limit
    return CALIBRATION_LOAD * cores / per_request_s


def calibrate(
    core: client.CoreV1Api,
    cgroups: CpuCgroups,
    obj: dict[str, Any],
    work_dir: Path,
    *,
    rate_per_s: float | None = None,
) -> Calibration:
    """The one replica's CPU time per request, under a light load of single requests.

    `obj` is the InferenceService as read back: its profile sizes the light load, unless
    `rate_per_s` does (a service built without a profile).
    """
    namespace, name = obj["metadata"]["namespace"], obj["metadata"]["name"]
    isvc = InferenceService.model_validate(obj)
    limit = limit_cores(isvc)
    if rate_per_s is None:
        rate_per_s = calibration_rate(isvc, obj["status"], limit)
    (pod,) = [p for p in server_pods(core, namespace, name) if is_ready(p)]
    uid = pod.metadata.uid

    def cpu_s() -> float:
        used = cgroups.cpu_seconds(uid, CONTAINER_NAME)
        if used is None:
            raise RuntimeError("the replica runs in no cgroup: the node agent enforces no CPU limit here")
        return used

    idle_from, idle_started = cpu_s(), time.monotonic()
    time.sleep(IDLE_S)  # the interval the idle CPU time is measured over, not a synchronization
    idle_share = (cpu_s() - idle_from) / (time.monotonic() - idle_started)

    arrivals = traces.piecewise_poisson(steps=[(CALIBRATION_S, rate_per_s)], rng=np.random.default_rng(4))
    load = example_load(
        work_dir, arrivals, duration_s=CALIBRATION_S, targets=ready_endpoints(core, namespace, name)
    )
    with load:
        before, started = cpu_s(), time.monotonic()
        result = load.wait(timeout=CALIBRATION_S + 30)
        used, elapsed = cpu_s() - before, time.monotonic() - started
    if result.ok < 0.95 * arrivals.size:
        raise RuntimeError(
            f"calibration: {result.ok} of {arrivals.size} requests answered: {dict(result.errors)}"
        )
    return Calibration(
        cpu_per_request_s=max(used - idle_share * elapsed, 1e-6) / result.ok,
        idle_cpu_share=idle_share,
        requests=result.ok,
        limit_cores=limit,
    )
