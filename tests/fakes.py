"""Fakes shared by the tests of several tiers."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tailpilot.controllers.core.kubeapi import Resource


@dataclass
class FakeClock:
    """A `tailpilot.controllers.core.clock.Clock` that moves only when a test moves it (seconds)."""

    now: float = 0.0

    def time(self) -> float:
        return self.now

    def monotonic(self) -> float:
        return self.now

    def advance(self, seconds: float) -> float:
        self.now += seconds
        return self.now


class UnexpectedKube:
    """A cluster client whose every call fails the test: each call of `tailpilot.controllers.core.seams`.

    A double subclasses it and answers the calls its test expects, so that it fits the consumer's
    Protocol whole while a call nobody expected fails by name. Alone, it stands in where the code
    under test must not reach the API server at all.
    """

    def get(self, resource: Resource, namespace: str, name: str, /) -> dict[str, Any] | None:
        raise AssertionError(f"unexpected get of {resource.kind} {name}")

    def list(
        self,
        resource: Resource,
        namespace: str | None,
        /,
        *,
        label_selector: str = "",
        field_selector: str = "",
    ) -> list[dict[str, Any]]:
        raise AssertionError(f"unexpected list of {resource.kind}")

    def create(self, body: dict[str, Any], /) -> dict[str, Any] | None:
        raise AssertionError(f"unexpected create of {body.get('kind')}")

    def dry_run_create(self, body: dict[str, Any], /) -> dict[str, Any]:
        raise AssertionError(f"unexpected dry-run create of {body.get('kind')}")

    def apply(self, body: dict[str, Any], /) -> dict[str, Any]:
        raise AssertionError(f"unexpected apply of {body.get('kind')}")

    def delete(self, resource: Resource, namespace: str, name: str, /, *, uid: str | None = None) -> bool:
        raise AssertionError(f"unexpected delete of {resource.kind} {name}")

    def patch_status(self, body: dict[str, Any], patch: dict[str, Any], /) -> object:
        raise AssertionError("unexpected status patch")

    def merge_patch(self, resource: Resource, namespace: str, name: str, patch: dict[str, Any], /) -> object:
        raise AssertionError(f"unexpected patch of {resource.kind} {name}")

    def post_event(
        self, involved: dict[str, Any], /, *, type_: str, reason: str, message: str, now: str
    ) -> None:
        raise AssertionError(f"unexpected {reason} Event")

    def has_resource(self, group: str, version: str, plural: str, /) -> bool:
        raise AssertionError(f"unexpected discovery of {group}/{version} {plural}")


class PageServer:
    """A local HTTP server (127.0.0.1, its own port) answering GETs from a dict the test changes.

    `pages` maps a path to (content type, body); `hits` counts the GETs per path. Stopped by
    `close()` (or as a context manager).
    """

    def __init__(self) -> None:
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        self.pages: dict[str, tuple[str, str]] = {}
        self.hits: dict[str, int] = {}
        self.queries: list[str] = []
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:  # noqa: N802 - the http.server API
                path, _, query = self.path.partition("?")
                owner.hits[path] = owner.hits.get(path, 0) + 1
                owner.queries.append(query)
                kind, body = owner.pages.get(path, ("text/plain", ""))
                data = body.encode()
                self.send_response(200 if path in owner.pages else 404)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: object) -> None:
                pass

        class Server(ThreadingHTTPServer):
            request_queue_size = 128  # a read opens one connection per pod at once
            daemon_threads = True

        self._server = Server(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> PageServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
