"""apply_batching's rollout, verification and rollback logic against scripted Triton pods.

Each scripted pod is an HTTP server on 127.0.0.1 (aiohttp), so the calls go
through tritonclient's real HTTP client; the script itself maps an
`httpx.Request` to an `httpx.Response` (or raises `httpx.ConnectError` for a
pod that is down: the server drops the connection). The real Triton behaviour
(live reload under load, refusal of an invalid config) is tested in
test_ctrl_triton_live.py.
"""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from aiohttp import web

from tailpilot.controllers.autoscale.batching import BatchingReason, apply_batching, verify_config

MODEL = "m"


def config(max_batch: int, delay: int = 0) -> dict[str, Any]:
    return {
        "name": MODEL,
        "backend": "python",
        "max_batch_size": max_batch,
        "input": [{"name": "IN", "data_type": "TYPE_FP32", "dims": ["4"]}],
        "dynamic_batching": {"max_queue_delay_microseconds": str(delay)},
        "instance_group": [{"kind": "KIND_CPU", "count": 1}],
    }


@dataclass
class Pod:
    config: dict[str, Any]
    mode: str = "ok"  # ok | refuse | ignore (answers 200, keeps the old config) | down | silent
    loads: list[dict[str, Any]] = field(default_factory=list)

    def read_back(self) -> dict[str, Any]:
        # What Triton adds on read-back: instance names, defaults.
        out = json.loads(json.dumps(self.config))
        for i, group in enumerate(out.get("instance_group", [])):
            group.setdefault("name", f"{MODEL}_{i}")
            group.setdefault("gpus", [])
        out.setdefault("version_policy", {"latest": {"num_versions": 1}})
        return out


class Fleet:
    def __init__(self, pods: dict[str, Pod]) -> None:
        self.pods = pods

    def __call__(self, request: httpx.Request) -> httpx.Response:
        pod = self.pods[f"http://{request.url.host}:{request.url.port}"]
        if pod.mode == "down":
            raise httpx.ConnectError("refused", request=request)
        if pod.mode == "silent":
            raise httpx.ReadTimeout("never answers", request=request)
        if request.method == "GET" and request.url.path == f"/v2/models/{MODEL}/config":
            return httpx.Response(200, json=pod.read_back())
        if request.method == "POST" and request.url.path == f"/v2/repository/models/{MODEL}/load":
            new = json.loads(json.loads(request.content)["parameters"]["config"])
            pod.loads.append(new)
            if pod.mode == "refuse":
                return httpx.Response(
                    500, json={"error": "load failed for model 'm': invalid max_batch_size"}
                )
            if pod.mode != "ignore":
                pod.config = new
            return httpx.Response(200)
        return httpx.Response(404, json={"error": "not found"})


_LISTENING: list[socket.socket] = []  # one per pod URL, for the whole module


@pytest.fixture(autouse=True, scope="module")
def _close_listening_sockets() -> Iterator[None]:
    yield
    while _LISTENING:
        _LISTENING.pop().close()


def urls(n: int) -> list[str]:
    while len(_LISTENING) < n:
        sock = socket.create_server(("127.0.0.1", 0))
        _LISTENING.append(sock)
    return [f"http://127.0.0.1:{sock.getsockname()[1]}" for sock in _LISTENING[:n]]


async def _serve(fleet: Fleet, request: web.Request, done: asyncio.Event) -> web.StreamResponse:
    """The pod's scripted answer, from the server's side of tritonclient's request."""
    assert request.transport is not None
    port = request.transport.get_extra_info("sockname")[1]
    scripted = httpx.Request(
        request.method, f"http://127.0.0.1:{port}{request.path_qs}", content=await request.read()
    )
    try:
        answer = fleet(scripted)
    except httpx.ConnectError:
        request.transport.abort()  # the pod is down: tritonclient sees the connection drop
        return web.Response(status=503)
    except httpx.ReadTimeout:
        await done.wait()  # a silent pod: no answer until apply_batching has returned
        return web.Response(status=503)
    return web.Response(status=answer.status_code, body=answer.content, content_type="application/json")


def apply(fleet: Fleet, pod_urls: list[str], new: dict[str, Any] | str, **options: Any) -> Any:
    async def main() -> Any:
        done = asyncio.Event()

        async def handle(request: web.Request) -> web.StreamResponse:
            return await _serve(fleet, request, done)

        app = web.Application()
        app.router.add_route("*", "/{path:.*}", handle)
        runner = web.AppRunner(app, handle_signals=False, access_log=None)
        await runner.setup()
        try:
            ports = {int(u.rsplit(":", 1)[1]) for u in pod_urls}
            for sock in _LISTENING:
                if sock.getsockname()[1] in ports:
                    await web.SockSite(runner, sock.dup()).start()  # the site closes its copy
            text = new if isinstance(new, str) else json.dumps(new)
            return await apply_batching(pod_urls=pod_urls, model_name=MODEL, config_json=text, **options)
        finally:
            done.set()
            await runner.cleanup()

    return asyncio.run(main())


def test_applies_to_every_pod_and_verifies():
    pods = {u: Pod(config(4)) for u in urls(3)}
    result = apply(Fleet(pods), urls(3), config(16, 500))
    assert result.ok and result.reason == BatchingReason.APPLIED
    assert set(result.applied) == set(urls(3)) and result.applied[0] == urls(3)[0]  # canary first
    assert all(p.config["max_batch_size"] == 16 for p in pods.values())


def test_refused_canary_leaves_every_other_pod_untouched():
    pods = {u: Pod(config(4)) for u in urls(3)}
    pods[urls(3)[0]].mode = "refuse"
    result = apply(Fleet(pods), urls(3), config(16))
    assert not result.ok and result.reason == BatchingReason.REFUSED
    assert result.applied == () and result.rolled_back == ()
    assert [f.pod_url for f in result.failed] == [urls(3)[0]]
    assert "invalid max_batch_size" in result.failed[0].message
    assert all(not pods[u].loads for u in urls(3)[1:])


def test_a_later_refusal_rolls_back_the_changed_pods():
    pods = {u: Pod(config(4, 100)) for u in urls(4)}
    pods[urls(4)[2]].mode = "refuse"
    result = apply(Fleet(pods), urls(4), config(16))
    assert not result.ok and result.reason == BatchingReason.REFUSED
    assert set(result.rolled_back) == {urls(4)[0], urls(4)[1], urls(4)[3]}
    # Every pod serves the old config again; the restore sent what was read before the change.
    assert all(p.config["max_batch_size"] == 4 for p in pods.values())
    assert pods[urls(4)[0]].loads[-1]["dynamic_batching"]["max_queue_delay_microseconds"] == "100"
    assert "rolled back 3 of 3" in result.message


def test_a_pod_that_does_not_take_the_config_fails_verification_and_is_restored():
    pods = {u: Pod(config(4)) for u in urls(2)}
    pods[urls(2)[1]].mode = "ignore"
    result = apply(Fleet(pods), urls(2), config(8))
    assert not result.ok and result.reason == BatchingReason.VERIFY_FAILED
    assert "batching reads back" in result.failed[0].message
    assert set(result.rolled_back) == set(urls(2))
    assert pods[urls(2)[0]].config["max_batch_size"] == 4


def test_an_unreadable_pod_aborts_before_any_change():
    pods = {u: Pod(config(4)) for u in urls(3)}
    pods[urls(3)[1]].mode = "down"
    result = apply(Fleet(pods), urls(3), config(8))
    assert not result.ok and result.reason == BatchingReason.UNREACHABLE
    assert "nothing changed" in result.message
    assert all(not p.loads for p in pods.values())


def test_a_failed_restore_is_reported():
    pods = {u: Pod(config(4)) for u in urls(2)}
    pods[urls(2)[1]].mode = "ignore"

    class BreaksAfterChange(Fleet):
        def __call__(self, request: httpx.Request) -> httpx.Response:
            pod = self.pods[f"http://{request.url.host}:{request.url.port}"]
            if pod.loads and request.method == "POST" and pod.mode == "ok":
                return httpx.Response(500, json={"error": "disk full"})
            return super().__call__(request)

    result = apply(BreaksAfterChange(pods), urls(2), config(8))
    assert result.reason == BatchingReason.ROLLBACK_FAILED
    assert any(f.reason == BatchingReason.ROLLBACK_FAILED and "disk full" in f.message for f in result.failed)


def test_the_servers_error_text_reaches_the_message_even_when_it_is_not_json():
    pods = {u: Pod(config(4)) for u in urls(1)}

    class PlainText(Fleet):
        def __call__(self, request: httpx.Request) -> httpx.Response:
            if request.method == "POST":
                return httpx.Response(500, text="model repository is read-only")
            return super().__call__(request)

    result = apply(PlainText(pods), urls(1), config(8))
    assert result.reason == BatchingReason.REFUSED
    assert result.failed[0].message == "HTTP 500: model repository is read-only"


def test_a_pod_that_does_not_answer_in_time_is_unreachable():
    pods = {u: Pod(config(4)) for u in urls(2)}
    pods[urls(2)[1]].mode = "silent"
    result = apply(Fleet(pods), urls(2), config(8), timeout_s=0.5)
    assert result.reason == BatchingReason.UNREACHABLE and "nothing changed" in result.message
    assert [f.pod_url for f in result.failed] == [urls(2)[1]]
    assert "Timeout" in result.failed[0].message
    assert all(not p.loads for p in pods.values())


@pytest.mark.parametrize("bad", ["{not json", "[1, 2]"])
def test_invalid_config_json_is_refused_locally(bad: str):
    result = apply(Fleet({}), urls(1), bad)
    assert (result.ok, result.reason) == (False, BatchingReason.INVALID_CONFIG)


def test_no_pods():
    assert apply(Fleet({}), [], config(8)).reason == BatchingReason.NO_PODS


def test_verify_config_normalizes_protobuf_json():
    want = config(8, 0)
    have = {
        **config(8),
        "dynamic_batching": {"max_queue_delay_microseconds": "0", "preferred_batch_size": []},
    }
    assert verify_config(want, have) == ""
    assert "batching" in verify_config(config(8, 100), config(8, 0))
    assert "instance_group" in verify_config(
        {**want, "instance_group": [{"kind": "KIND_CPU", "count": 2}]}, want
    )
