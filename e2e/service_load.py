"""Requests sent through a Service's endpoints, as kube-proxy would send them (the local cluster has none).

Each request reads the Service's EndpointSlices at the moment it is sent (every slice of the Service,
whoever wrote it: the EndpointSlice controller's pods, or the operator's slice to the activator while
the service is at zero), takes the ready addresses on the port named `http`, picks one at random (as
kube-proxy's iptables rules do) and posts a KServe v2 inference there, with the `Host` a client of
the Service's DNS name sends. What each request met is recorded: where it went, when, its status,
how long it took, and whether its answer was an inference.

The load is bounded in count and in time: `count` requests, one every `interval_s` (0: a burst, all
at once), each with its own timeout; `join` waits at most for the last one's timeout.
"""

from __future__ import annotations

import json
import random
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

import httpx
import numpy as np
from kubernetes import client

from tailpilot.builders import example_model
from tailpilot.manifests.activator_routing import LABEL_SERVICE_NAME, ready_addresses


@dataclass(frozen=True)
class Sent:
    """One request: where it went, when it was sent (monotonic s, and wall-clock s), and what came back."""

    index: int
    target: str
    sent_at: float
    sent_wall_s: float
    latency_s: float
    status: int | None
    error: str | None
    answered: bool
    #: The answer's `Retry-After` header (the activator's 503 for a hold bound reached sets it).
    retry_after: str | None = None

    @property
    def ok(self) -> bool:
        """Answered 200 with the model's output."""
        return self.status == 200 and self.answered


def service_targets(discovery: client.DiscoveryV1Api, namespace: str, service: str) -> list[str]:
    """`IP:port` of every ready endpoint of the Service's slices, on the port named `http`."""
    slices = discovery.list_namespaced_endpoint_slice(
        namespace, label_selector=f"{LABEL_SERVICE_NAME}={service}"
    ).items
    targets = []
    for endpoint_slice in slices:
        body = discovery.api_client.sanitize_for_serialization(endpoint_slice)
        ports = [p["port"] for p in body.get("ports") or [] if p.get("name") == "http"]
        targets += [f"{ip}:{port}" for ip in ready_addresses(body) for port in ports[:1]]
    return sorted(targets)


def inference_body() -> dict[str, object]:
    """One example input, as a KServe v2 request."""
    data = example_model.example_inputs(1)
    return {
        "inputs": [
            {
                "name": example_model.INPUT_NAME,
                "shape": list(data.shape),
                "datatype": "FP32",
                "data": data.flatten().tolist(),
            }
        ]
    }


class ServiceLoad:
    """`count` inferences, one every `interval_s`, through the Service's endpoints; `join` has them all."""

    def __init__(
        self,
        api: client.ApiClient,
        *,
        namespace: str,
        service: str,
        model: str,
        count: int,
        interval_s: float,
        timeout_s: float,
        seed: int = 7,
    ) -> None:
        """Send to `service` in `namespace`, model `model`; each request waits at most `timeout_s`."""
        assert 0 < count <= 200, "a bounded load"
        self._discovery = client.DiscoveryV1Api(api)
        self._namespace, self._service, self._model = namespace, service, model
        self._count, self._interval_s, self._timeout_s = count, interval_s, timeout_s
        self._random = random.Random(seed)
        self._pool = ThreadPoolExecutor(max_workers=count, thread_name_prefix="service-load")
        self._futures: list[Future[Sent]] = []
        self._pacer: threading.Thread | None = None
        self._stop = threading.Event()
        #: Where each request was sent, in order, as soon as it is sent (a test acts on the first).
        self.targets: list[str] = []

    def start(self) -> ServiceLoad:
        """Start sending (in a pacing thread); returns self."""
        self._pacer = threading.Thread(target=self._pace, name="service-load-pacer", daemon=True)
        self._pacer.start()
        return self

    def join(self) -> list[Sent]:
        """Every request's outcome, in the order sent (waits for the last, within its timeout)."""
        assert self._pacer is not None
        self._pacer.join(timeout=self._count * self._interval_s + self._timeout_s + 30)
        results = [f.result(timeout=self._timeout_s + 30) for f in self._futures]
        self._pool.shutdown(wait=False)
        return results

    def stop(self) -> None:
        """Send no more (those sent finish)."""
        self._stop.set()

    def _pace(self) -> None:
        started = time.monotonic()
        for index in range(self._count):
            # Pacing the load's shape (one request per interval), not waiting for an outcome.
            if self._stop.wait(max(0.0, started + index * self._interval_s - time.monotonic())):
                return
            targets = service_targets(self._discovery, self._namespace, self._service)
            target = self._random.choice(targets) if targets else ""
            self.targets.append(target)
            self._futures.append(self._pool.submit(self._send, index, target))

    def _send(self, index: int, target: str) -> Sent:
        if not target:  # no ready endpoint: what kube-proxy answers is a refused connection
            now = time.monotonic()
            return Sent(index, target, now, time.time(), 0.0, None, "no ready endpoint in the Service", False)
        host = f"{self._service}.{self._namespace}.svc.cluster.local"
        # The body is encoded and the client made before the clock starts: the time is the request's.
        body = json.dumps(inference_body()).encode()
        headers = {"Host": host, "Content-Type": "application/json"}
        with httpx.Client(timeout=self._timeout_s, trust_env=False) as http:
            sent_at, sent_wall_s = time.monotonic(), time.time()
            try:
                response = http.post(
                    f"http://{target}/v2/models/{self._model}/infer", content=body, headers=headers
                )
            except httpx.HTTPError as error:
                latency = time.monotonic() - sent_at
                return Sent(index, target, sent_at, sent_wall_s, latency, None, repr(error), False)
            latency = time.monotonic() - sent_at
        answered = False
        if response.status_code == 200:
            output = response.json()["outputs"][0]
            answered = np.asarray(output["data"]).size == int(np.prod(output["shape"])) > 0
        error = None if response.status_code == 200 else response.text[:300]
        retry_after = response.headers.get("Retry-After")
        return Sent(
            index, target, sent_at, sent_wall_s, latency, response.status_code, error, answered, retry_after
        )
