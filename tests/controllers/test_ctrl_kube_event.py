"""Kube.post_event builds the Event with the client's typed models; the JSON sent is the old dict's.

Two differences in spelling, none in meaning: the typed model renders the timestamps as
"...+00:00" where the old dict passed `iso_time`'s "...Z" through (the same instant; the API
server parses both as RFC 3339 and stores "Z"), and it leaves out an absent uid where the old dict
sent "uid": null.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

import pytest
from kubernetes import client

from tailpilot.controllers.core.kubeapi import PODS, Kube

NOW = "2025-03-01T12:00:00Z"
INVOLVED = {
    "apiVersion": "tailpilot.io/v1alpha1",
    "kind": "InferenceService",
    "metadata": {"name": "resnet", "namespace": "ml", "uid": "0b7c9e2a-1111-2222-3333-444455556666"},
}


def old_event(involved: dict[str, Any], *, type_: str, reason: str, message: str, now: str) -> dict[str, Any]:
    """The body post_event built by hand before it used the typed models (verbatim)."""
    meta = involved["metadata"]
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"generateName": f"{meta['name']}.", "namespace": meta["namespace"]},
        "involvedObject": {
            "apiVersion": involved["apiVersion"],
            "kind": involved["kind"],
            "name": meta["name"],
            "namespace": meta["namespace"],
            "uid": meta.get("uid"),
        },
        "type": type_,
        "reason": reason,
        "message": message[:1024],
        "source": {"component": "tailpilot-operator"},
        "reportingComponent": "tailpilot.io/operator",
        "reportingInstance": "tailpilot-operator",
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
    }


class _Sent:
    status, reason = 201, "Created"

    def read(self) -> bytes:
        return b"{}"


def posted(involved: dict[str, Any], **event: Any) -> tuple[str, str, dict[str, Any]]:
    """What post_event hands to the REST layer: method, URL and the body as it goes on the wire."""
    api = client.ApiClient(client.Configuration(host="https://kube.test"))
    calls: list[tuple[str, str, Any]] = []

    def call_api(method: str, url: str, header_params: Any = None, body: Any = None, **_: Any) -> _Sent:
        calls.append((method, url, body))
        return _Sent()

    api.call_api = call_api  # type: ignore[method-assign,assignment]
    try:
        Kube(api).post_event(involved, **event)
    finally:
        api.close()  # type: ignore[no-untyped-call]
    [(method, url, body)] = calls
    return method, url, json.loads(json.dumps(body))


def same_instants(body: dict[str, Any], old: dict[str, Any]) -> dict[str, Any]:
    """`body` with its timestamps in the old spelling, once checked to be the same instants."""
    body = dict(body)
    for key in ("firstTimestamp", "lastTimestamp"):
        assert datetime.fromisoformat(body[key]) == datetime.fromisoformat(old[key])
        body[key] = old[key]
    return body


def test_the_event_json_is_what_the_hand_built_dict_was():
    event = {"type_": "Warning", "reason": "BatchingRefused", "message": "x" * 2000, "now": NOW}
    method, url, body = posted(INVOLVED, **event)
    assert (method, url) == ("POST", "https://kube.test/api/v1/namespaces/ml/events")
    old = old_event(INVOLVED, **event)
    assert set(body) == set(old) and set(body["involvedObject"]) == set(old["involvedObject"])
    assert same_instants(body, old) == old
    assert len(body["message"]) == 1024
    assert body["firstTimestamp"] == body["lastTimestamp"] == "2025-03-01T12:00:00+00:00"


def test_an_object_without_uid_leaves_the_field_out_instead_of_null():
    # The serializer drops unset fields, the old dict sent "uid": null; the API server decodes both
    # as no uid.
    involved = {**INVOLVED, "metadata": {"name": "resnet", "namespace": "ml"}}
    event = {"type_": "Normal", "reason": "Ready", "message": "serving", "now": NOW}
    _, _, body = posted(involved, **event)
    old = old_event(involved, **event)
    assert old["involvedObject"].pop("uid") is None
    assert same_instants(body, old) == old


def test_an_api_server_that_stops_answering_fails_the_call_within_its_timeout_not_never():
    """A connection accepted and never answered (a stuck API server) ends the call, so the worker is freed."""
    import socket
    import threading
    import time

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
                held.append(conn)  # read nothing, answer nothing
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    api = client.ApiClient(client.Configuration(host=f"http://127.0.0.1:{listener.getsockname()[1]}"))
    api.configuration.retries = 0  # type: ignore[attr-defined]
    started = time.monotonic()
    try:
        with pytest.raises(Exception, match="(?i)timed? ?out"):
            Kube(api, read_timeout_s=0.5).get(PODS, "default", "p")
        assert time.monotonic() - started < 10
    finally:
        stop.set()
        thread.join(timeout=5)
        for conn in held:
            conn.close()
        listener.close()
        api.close()  # type: ignore[no-untyped-call]
