"""The watches' store: the fast loop's service and pods without a request per period, and its fallbacks."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from tailpilot.api import constants as c
from tailpilot.controllers.core.watched import RELIST_S, WatchedObjects
from tailpilot.manifests.meta import selector_labels
from tests.fakes import FakeClock


def pod(name: str, service: str = "echo", *, ready: bool = True, **extra_labels: str) -> dict[str, Any]:
    labels = {**selector_labels(service), **extra_labels}
    conditions = [{"type": "Ready", "status": "True" if ready else "False"}]
    return {
        "metadata": {"name": name, "namespace": "ns", "labels": labels},
        "status": {"podIP": "10.0.0.1", "conditions": conditions},
    }


class CountingKube:
    """GETs and LISTs answered from dicts, counted; a LIST can be held until released."""

    def __init__(self, services: dict[str, dict[str, Any]], pods: list[dict[str, Any]]):
        self.services, self.pod_list = services, pods
        self.gets = self.lists = 0
        self.list_started = threading.Event()
        self.release_list = threading.Event()
        self.release_list.set()

    def get(self, resource: Any, namespace: str, name: str) -> dict[str, Any] | None:
        self.gets += 1
        return self.services.get(name)

    def list(self, resource: Any, namespace: str, *, label_selector: str) -> list[dict[str, Any]]:
        self.lists += 1
        wanted = dict(part.split("=", 1) for part in label_selector.split(","))
        answer = [
            p for p in self.pod_list if all(p["metadata"]["labels"].get(k) == v for k, v in wanted.items())
        ]
        self.list_started.set()
        assert self.release_list.wait(5), "the test never released the LIST"
        return answer


def service_body(name: str, generation: int = 1) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "ns", "generation": generation}, "spec": {}}


def names(pods: list[dict[str, Any]]) -> set[str]:
    return {p["metadata"]["name"] for p in pods}


def test_watch_events_answer_without_requests_once_a_service_is_listed():
    kube = CountingKube({"echo": service_body("echo")}, [pod("echo-a"), pod("other-a", "other")])
    store = WatchedObjects(kube=kube, clock=FakeClock())

    async def run() -> None:
        # Unknown service: one GET, then its watch events keep it current.
        assert (await store.service("ns", "echo"))["metadata"]["generation"] == 1
        store.on_service_event("MODIFIED", service_body("echo", generation=2))
        assert (await store.service("ns", "echo"))["metadata"]["generation"] == 2
        # Pods: one LIST of the service's selector, then events (another service's pods stay out).
        assert names(await store.pods("ns", "echo")) == {"echo-a"}
        store.on_pod_event("ADDED", pod("echo-b"))
        store.on_pod_event("ADDED", pod("other-b", "other"))
        assert names(await store.pods("ns", "echo")) == {"echo-a", "echo-b"}
        store.on_pod_event("DELETED", pod("echo-a"))
        assert names(await store.pods("ns", "echo")) == {"echo-b"}
        # A build pod of the service carries its label but not the Triton selector: never a replica.
        store.on_pod_event("ADDED", pod("echo-build", **{c.LABEL_COMPONENT: "engine-build"}))
        assert names(await store.pods("ns", "echo")) == {"echo-b"}

    asyncio.run(run())
    assert (kube.gets, kube.lists, store.requests) == (1, 1, 2)


def test_pods_are_listed_again_after_the_relist_period_and_a_deleted_service_is_forgotten():
    kube = CountingKube({"echo": service_body("echo")}, [pod("echo-a")])
    clock = FakeClock()
    store = WatchedObjects(kube=kube, clock=clock)

    async def run() -> None:
        await store.pods("ns", "echo")
        # A pod deleted while the watch was down sends no DELETED: the store still has it ...
        kube.pod_list = []
        clock.now += RELIST_S - 1
        assert names(await store.pods("ns", "echo")) == {"echo-a"}
        # ... until the relist period has passed.
        clock.now += 1
        assert names(await store.pods("ns", "echo")) == set()
        store.on_service_event(None, service_body("echo"))
        store.on_service_event("DELETED", service_body("echo"))
        kube.services = {}
        assert await store.service("ns", "echo") is None

    asyncio.run(run())
    assert kube.lists == 2 and kube.gets == 1


def test_a_pod_event_delivered_during_the_list_is_applied_after_it():
    kube = CountingKube({}, [pod("echo-a", ready=False)])
    kube.release_list.clear()
    store = WatchedObjects(kube=kube, clock=FakeClock())

    async def run() -> list[dict[str, Any]]:
        listing = asyncio.create_task(store.pods("ns", "echo"))
        assert await asyncio.to_thread(kube.list_started.wait, 5)
        # The pod became Ready after the API server answered the LIST, before the answer arrived.
        store.on_pod_event("MODIFIED", pod("echo-a", ready=True))
        # A second reader meanwhile gets what the store has, and sends no second LIST.
        assert await store.pods("ns", "echo") == []
        kube.release_list.set()
        return await listing

    pods = asyncio.run(run())
    assert [p["status"]["conditions"][0]["status"] for p in pods] == ["True"]
    assert kube.lists == 1


def test_pod_urls_bracket_ipv6_addresses():
    from tailpilot.controllers.core.kubeapi import pod_url
    from tailpilot.controllers.signals.pod_signals import pod_metrics_url

    assert pod_url("10.1.2.3", 8000) == "http://10.1.2.3:8000"
    assert pod_url("fd00:10:244::5", 8000) == "http://[fd00:10:244::5]:8000"
    assert pod_metrics_url("fd00::7") == "http://[fd00::7]:8002/metrics"
