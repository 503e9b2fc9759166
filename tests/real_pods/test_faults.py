"""A Triton pod killed during a live batching reload, on real pods: the service converges.

The CPU example is built by its real Job and served by two real Triton pods on local-0, batching in
fixed mode. The spec's batching is changed; the operator reloads it on the pods (the first pod,
verified, then the other). When the first reads the new batching back and the second still serves
the old, the second's Triton process is SIGKILLed: its reload fails, the first is rolled back, and
the change is retried. The node agent restarts the killed Triton in its pod, where it loads the
config its pod started with (the old batching); the operator finds that incarnation running another
batching and reloads the one in force. Meanwhile each pod gets a request every 20 ms: the surviving
pod answers every one.
"""

from __future__ import annotations

import base64
import os
import signal
import threading
import time
from collections import Counter
from pathlib import Path

import httpx
import pytest
from kubernetes import client

from tailpilot.controllers.autoscale.batching import batching_fields
from tailpilot.manifests.triton_access import ADMIN_KEY_HEADER, SECRET_KEY, admin_key_secret_name
from tailpilot_e2e.agent_process import running_processes
from tailpilot_e2e.cluster import LocalCluster
from tailpilot_e2e.operator_harness import OperatorProcess, condition, custom_object, free_port, install_crds
from tailpilot_e2e.real_pods import MODEL_NAME, cpu_example, infer, is_ready, prepare_storage, server_pods
from tailpilot_e2e.wait import eventually

pytestmark = pytest.mark.cluster
NAME = "mlp-cpu"
OLD = {"mode": "fixed", "maxBatchSize": 16, "preferredBatchSizes": [4, 8], "maxQueueDelayMicroseconds": 1000}
NEW = {"mode": "fixed", "maxBatchSize": 16, "preferredBatchSizes": [16], "maxQueueDelayMicroseconds": 2000}
OLD_FIELDS, NEW_FIELDS = ("16", ("4", "8"), "1000"), ("16", ("16",), "2000")


class Requests:
    """One request every 20 ms to each pod, in a thread per pod, until stopped (at most `limit_s`)."""

    def __init__(self, urls: list[str], limit_s: float) -> None:
        self.stop = threading.Event()
        self.answered: Counter[str] = Counter()
        self.failed: Counter[str] = Counter()
        self.threads = [threading.Thread(target=self._run, args=(u, limit_s), daemon=True) for u in urls]

    def _run(self, url: str, limit_s: float) -> None:
        deadline = time.monotonic() + limit_s
        while not self.stop.is_set() and time.monotonic() < deadline:
            try:
                infer(url, timeout_s=5)
                self.answered[url] += 1
            except (httpx.HTTPError, OSError):
                self.failed[url] += 1
            self.stop.wait(0.02)  # pacing the requests, not a synchronization

    def __enter__(self) -> Requests:
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(timeout=10)


def test_a_triton_killed_during_a_batching_reload_comes_back_at_the_batching_in_force(
    real_cluster: LocalCluster, real_api: client.ApiClient, real_namespace: str, tmp_path: Path
) -> None:
    core, ns = client.CoreV1Api(real_api), real_namespace
    prepare_storage(core, ns, tmp_path)
    install_crds(real_cluster)
    service = cpu_example(ns, name=NAME, batching=OLD, autoscaling={"minReplicas": 2, "maxReplicas": 2})
    args = ["--control-period-seconds", "3", "--prometheus-url", f"http://127.0.0.1:{free_port()}"]
    log_dir = real_cluster.paths.root / "logs"
    with OperatorProcess(real_cluster, namespace=ns, log_dir=log_dir, extra_args=args):
        client.CustomObjectsApi(real_api).create_namespaced_custom_object(
            "tailpilot.io", "v1alpha1", ns, "inferenceservices", service
        )

        def two_ready() -> list[client.V1Pod] | None:
            ready = [p for p in server_pods(core, ns, NAME) if is_ready(p)]
            done = (condition(custom_object(real_api, ns, NAME), "Ready") or {}).get("status") == "True"
            return ready if done and len(ready) == 2 else None

        pods = eventually(two_ready, timeout=420, description="Ready with two Triton pods (real build)")
        secret = core.read_namespaced_secret(admin_key_secret_name(NAME), ns)
        key = base64.b64decode(secret.data[SECRET_KEY]).decode()
        urls = {p.metadata.name: f"http://{p.status.pod_ip}:8000" for p in pods}

        def served(url: str) -> tuple[str, tuple[str, ...], str] | None:
            try:
                response = httpx.get(
                    f"{url}/v2/models/{MODEL_NAME}/config", headers={ADMIN_KEY_HEADER: key}, timeout=2
                )
            except httpx.HTTPError:
                return None
            return batching_fields(response.json()) if response.status_code == 200 else None

        assert {served(u) for u in urls.values()} == {OLD_FIELDS}

        with Requests(list(urls.values()), limit_s=300) as requests:
            client.CustomObjectsApi(real_api).patch_namespaced_custom_object(
                "tailpilot.io", "v1alpha1", ns, "inferenceservices", NAME, {"spec": {"batching": NEW}}
            )

            def first_reloaded() -> tuple[str, str] | None:
                seen = {name: served(url) for name, url in urls.items()}
                done = [n for n, fields in seen.items() if fields == NEW_FIELDS]
                waiting = [n for n, fields in seen.items() if fields == OLD_FIELDS]
                return (done[0], waiting[0]) if len(done) == 1 and len(waiting) == 1 else None

            survivor, victim = eventually(
                first_reloaded,
                timeout=30,
                interval=0.05,
                description="the first pod reloaded, the second not",
            )
            (victim_pod,) = [p for p in pods if p.metadata.name == victim]
            triton = running_processes(real_cluster.agent_state_dir, victim_pod.metadata.uid)
            os.kill(triton[f"{victim_pod.metadata.uid}/triton"], signal.SIGKILL)

            def converged() -> bool:
                restarted = core.read_namespaced_pod(victim, ns)
                back = restarted.status.container_statuses[0].restart_count >= 1 and is_ready(restarted)
                return back and all(served(u) == NEW_FIELDS for u in urls.values())

            eventually(converged, timeout=240, interval=0.5, description="both pods at the new batching")
        # The survivor answered every request sent to it during the fault.
        assert requests.failed[urls[survivor]] == 0 and requests.answered[urls[survivor]] > 0, requests.failed
        events = core.list_namespaced_event(ns, field_selector=f"involvedObject.name={NAME}").items
        restored = [e.message for e in events if e.reason == "BatchingRestored"]
        assert any(urls[victim] in m for m in restored), [(e.reason, e.message) for e in events]
        config = core.read_namespaced_config_map(f"{NAME}-model-config", ns).data["config.pbtxt"]
        assert "max_queue_delay_microseconds: 2000" in config, config
        assert len(server_pods(core, ns, NAME)) == 2
        assert {p.metadata.name for p in server_pods(core, ns, NAME)} == set(urls)  # the same pods
        print(f"survivor answered {requests.answered[urls[survivor]]}, killed pod failed {requests.failed}")
