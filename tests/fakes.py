"""Fakes shared by the tests of several tiers."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class FakeClock:
    """A `tailpilot.controllers.clock.Clock` that moves only when a test moves it (seconds)."""

    now: float = 0.0

    def time(self) -> float:
        return self.now

    def monotonic(self) -> float:
        return self.now

    def advance(self, seconds: float) -> float:
        self.now += seconds
        return self.now


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
