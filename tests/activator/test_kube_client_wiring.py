"""The Kubernetes adapters through the real `kubernetes` client, against a fake API server on 127.0.0.1.

What the client sends (paths, label selectors, watch parameters, the patch's content type and
body) is checked here without a cluster: an aiohttp server answers the few requests the
activator makes, as the API server would. The API server's own semantics (the EndpointSlice
controller, resourceVersions expiring) are the local-cluster tier's.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from typing import Any

from aiohttp import web
from kubernetes import client

from tailpilot.activator.backends import Endpoint
from tailpilot.activator.kube_backends import MANAGED_SELECTOR, SLICE_SELECTOR, KubeBackends
from tailpilot.activator.waking import ANNOTATION_WAKE_REQUESTED_AT, KubeWaker
from tests.activator.harness import SERVICE, eventually
from tests.activator.test_kube_backends import endpoint, endpoint_slice, service


class FakeApiServer:
    """Lists, watches (a stream kept open until told to send) and the wake patch."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, str, dict[str, str]]] = []
        self.patches: list[tuple[str, str, Any]] = []
        self.lists: dict[str, list[dict[str, Any]]] = {"services": [], "endpointslices": []}
        self.events: dict[str, asyncio.Queue[dict[str, Any]]] = {
            "services": asyncio.Queue(),
            "endpointslices": asyncio.Queue(),
        }

    def application(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/api/v1/services", self._collection("services"))
        app.router.add_get("/apis/discovery.k8s.io/v1/endpointslices", self._collection("endpointslices"))
        app.router.add_patch(
            "/apis/tailpilot.io/v1alpha1/namespaces/{namespace}/inferenceservices/{name}", self._patch
        )
        return app

    def _collection(self, kind: str) -> Any:
        async def handle(request: web.Request) -> web.StreamResponse:
            self.requests.append((kind, request.method, dict(request.query)))
            if request.query.get("watch") != "true":
                page = {"metadata": {"resourceVersion": "10"}, "items": self.lists[kind]}
                return web.json_response(page)
            response = web.StreamResponse()
            await response.prepare(request)
            while True:  # until the client goes away or the server stops
                event = await self.events[kind].get()
                await response.write((json.dumps(event) + "\n").encode())

        return handle

    async def _patch(self, request: web.Request) -> web.Response:
        self.patches.append((request.path, request.headers["Content-Type"], await request.json()))
        return web.json_response({"apiVersion": "tailpilot.io/v1alpha1", "kind": "InferenceService"})


@asynccontextmanager
async def api_server() -> AsyncIterator[tuple[FakeApiServer, client.ApiClient]]:
    fake = FakeApiServer()
    runner = web.AppRunner(fake.application(), access_log=None, shutdown_timeout=0.5)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    configuration = client.Configuration(host=f"http://127.0.0.1:{runner.addresses[0][1]}")
    api_client = client.ApiClient(configuration)
    try:
        yield fake, api_client
    finally:
        await runner.cleanup()
        await asyncio.to_thread(api_client.close)


def test_the_kube_waker_sends_a_merge_patch_of_the_annotation() -> None:
    async def scenario() -> None:
        async with api_server() as (fake, api_client):
            moment = datetime(2026, 3, 1, 8, 30, tzinfo=UTC)
            await KubeWaker(client.CustomObjectsApi(api_client), now=lambda: moment).wake(SERVICE)
            assert fake.patches == [
                (
                    "/apis/tailpilot.io/v1alpha1/namespaces/shop/inferenceservices/resnet",
                    "application/merge-patch+json",
                    {"metadata": {"annotations": {ANNOTATION_WAKE_REQUESTED_AT: "2026-03-01T08:30:00Z"}}},
                )
            ]

    asyncio.run(scenario())


def test_the_kube_backends_list_and_watch_every_namespace_by_label() -> None:
    async def scenario() -> None:
        async with api_server() as (fake, api_client):
            fake.lists["services"] = [service("resnet", ips=["10.96.0.7"])]
            fake.lists["endpointslices"] = [endpoint_slice("resnet-pods-x")]
            backends = KubeBackends.of(api_client, asyncio.get_running_loop())
            backends.start()
            try:
                await eventually(lambda: backends.table.synced)
                assert backends.table.knows(SERVICE) and backends.table.ready(SERVICE) == ()
                ready = endpoint_slice("resnet-pods-x", endpoint("10.0.0.1"))
                ready["metadata"]["resourceVersion"] = "11"
                await fake.events["endpointslices"].put({"type": "MODIFIED", "object": ready})
                replica = Endpoint(address="10.0.0.1", http_port=8000, grpc_port=8001)
                await eventually(lambda: backends.table.ready(SERVICE) == (replica,))
            finally:
                await asyncio.to_thread(backends.stop, join_timeout_s=2.0)
            queries = {(kind, query.get("watch")): query for kind, _, query in fake.requests}
            assert queries[("services", None)]["labelSelector"] == MANAGED_SELECTOR
            assert queries[("endpointslices", None)]["labelSelector"] == SLICE_SELECTOR
            watch = queries[("endpointslices", "true")]
            assert (watch["labelSelector"], watch["resourceVersion"], watch["allowWatchBookmarks"]) == (
                SLICE_SELECTOR,
                "10",
                "true",
            )

    asyncio.run(scenario())
