"""The operator's REST client against a real HTTP server: repeats turned-away calls, pages lists.

The server is a scripted stand-in for the API server on 127.0.0.1 (each request is answered by the
next scripted answer, and recorded), so the client's real urllib3 path is what runs.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tailpilot.controllers.core.kubeapi import MAX_RETRY_WAIT_S, PODS, Kube, api_client, retry_wait_s

Answer = tuple[int, dict[str, str], dict[str, Any]]


class Scripted:
    """Answers in order; what each request asked for."""

    def __init__(self, answers: list[Answer]) -> None:
        self.answers = list(answers)
        self.seen: list[tuple[str, dict[str, list[str]]]] = []


@pytest.fixture
def server() -> Iterator[tuple[Scripted, Kube, list[float]]]:
    script = Scripted([])

    class Handler(BaseHTTPRequestHandler):
        def _answer(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            self.rfile.read(length)
            url = urlparse(self.path)
            script.seen.append((f"{self.command} {url.path}", parse_qs(url.query)))
            status, headers, body = script.answers.pop(0) if script.answers else (500, {}, {"left": 0})
            data = json.dumps(body).encode()
            self.send_response(status)
            for key, value in {**headers, "Content-Type": "application/json"}.items():
                self.send_header(key, value)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _answer

        def log_message(self, *_: Any) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    api = api_client(client.Configuration(host=f"http://127.0.0.1:{httpd.server_address[1]}"))
    waits: list[float] = []
    try:
        yield script, Kube(api, sleep=waits.append, page_size=2), waits
    finally:
        httpd.shutdown()
        thread.join(timeout=5)
        httpd.server_close()
        api.close()  # type: ignore[no-untyped-call]


def pod(name: str) -> dict[str, Any]:
    return {"metadata": {"name": name}}


def test_a_429_is_repeated_after_its_retry_after_and_the_answer_returned(server):
    script, kube, waits = server
    script.answers = [(429, {"Retry-After": "2"}, {}), (200, {}, pod("p"))]
    assert kube.get(PODS, "default", "p") == pod("p")
    assert waits == [2.0] and len(script.seen) == 2


def test_a_write_refused_for_load_is_repeated_but_a_write_that_failed_is_not(server):
    script, kube, waits = server
    script.answers = [(429, {}, {}), (200, {}, pod("p"))]
    kube.merge_patch(PODS, "default", "p", {"metadata": {"labels": {"a": "b"}}})
    assert waits == [1.0]
    script.answers = [(503, {"Retry-After": "1"}, {}), (200, {}, pod("p"))]
    with pytest.raises(ApiException) as raised:
        kube.merge_patch(PODS, "default", "p", {"metadata": {"labels": {"a": "b"}}})
    assert raised.value.status == 503 and waits == [1.0] and len(script.seen) == 3


def test_an_api_server_that_keeps_refusing_fails_the_call_after_bounded_attempts_and_waits(server):
    script, kube, waits = server
    script.answers = [(503, {"Retry-After": "3600"}, {})] * 5
    with pytest.raises(ApiException) as raised:
        kube.get(PODS, "default", "p")
    assert raised.value.status == 503
    assert len(script.seen) == 3 and waits == [MAX_RETRY_WAIT_S, MAX_RETRY_WAIT_S]


def test_a_list_is_read_page_by_page_and_restarted_once_when_its_token_expires(server):
    script, kube, _ = server
    script.answers = [
        (200, {}, {"items": [pod("a"), pod("b")], "metadata": {"continue": "t1"}}),
        (410, {}, {"reason": "Expired"}),
        (200, {}, {"items": [pod("a"), pod("b")], "metadata": {"continue": "t2"}}),
        (200, {}, {"items": [pod("c")], "metadata": {}}),
    ]
    names = [p["metadata"]["name"] for p in kube.list(PODS, None, field_selector="spec.nodeName=n")]
    assert names == ["a", "b", "c"]
    assert [q.get("continue") for _, q in script.seen] == [None, ["t1"], None, ["t2"]]
    assert all(q["limit"] == ["2"] and q["fieldSelector"] == ["spec.nodeName=n"] for _, q in script.seen)


def test_a_first_page_refused_as_gone_is_not_restarted_for_ever(server):
    script, kube, _ = server
    script.answers = [(410, {}, {})] * 3
    with pytest.raises(ApiException):
        kube.list(PODS, "default")
    assert len(script.seen) == 1


@pytest.mark.parametrize(
    ("method", "status", "header", "wait"),
    [
        ("GET", 429, "0", 0.0),
        ("POST", 429, None, 1.0),
        ("GET", 500, "nan", 1.0),
        ("GET", 504, "Wed, 21 Oct 2015 07:28:00 GMT", 1.0),
        ("GET", 404, "1", None),
        ("PATCH", 500, "1", None),
        ("GET", 429, "-5", 0.0),
    ],
)
def test_retry_wait(method: str, status: int, header: str | None, wait: float | None) -> None:
    assert retry_wait_s(method, status, header) == wait


def test_the_lease_is_read_and_written_in_one_attempt_and_a_changed_one_is_a_conflict(server):
    from tailpilot.controllers.process.leader_election import Conflict, LeaseLock, LeaseRecord

    script, kube, waits = server
    lock = LeaseLock(kube, "ops", "tp")
    script.answers = [(404, {}, {}), (503, {"Retry-After": "1"}, {})]
    assert lock.read(timeout_s=2.0) is None
    with pytest.raises(ApiException) as raised:  # the election retries on its own clock, not the client
        lock.read(timeout_s=2.0)
    assert raised.value.status == 503 and waits == []
    spec = {"holderIdentity": "a", "leaseDurationSeconds": 15}
    stored = {"metadata": {"resourceVersion": "7"}, "spec": spec}
    record = LeaseRecord("a", 15, None, None, 0, resource_version="6")
    script.answers = [(201, {}, stored), (200, {}, stored), (409, {}, {})]
    assert lock.write(record, create=True, timeout_s=2.0).resource_version == "7"
    assert lock.write(record, create=False, timeout_s=2.0).holder == "a"
    with pytest.raises(Conflict):
        lock.write(record, create=False, timeout_s=2.0)
    assert [seen for seen, _ in script.seen] == [
        "GET /apis/coordination.k8s.io/v1/namespaces/ops/leases/tp",
        "GET /apis/coordination.k8s.io/v1/namespaces/ops/leases/tp",
        "POST /apis/coordination.k8s.io/v1/namespaces/ops/leases",
        "PUT /apis/coordination.k8s.io/v1/namespaces/ops/leases/tp",
        "PUT /apis/coordination.k8s.io/v1/namespaces/ops/leases/tp",
    ]
