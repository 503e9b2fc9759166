"""A model host on https://127.0.0.1:PORT: a directory's files served over TLS by a private CA's certificate.

The serving certificate is the one the other test servers use (`pki.localhost_server_certificate`,
signed by the CA of the given PKI directory), so a client trusts it only through that CA (a build's
`--ca-bundle`, a spec's `caBundleConfigMapRef`); verification stays on everywhere. As a model host
may, the server refuses some path prefixes with the status `refusals` gives them (`/private/` 401,
`/gone/` 410...). It runs on a thread of the test process and stops with it.
"""

from __future__ import annotations

import functools
import http.server
import ssl
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tailpilot_e2e import pki


@dataclass(frozen=True)
class HttpsHost:
    """A running host: its base URL (no trailing slash), the directory it serves, its CA file."""

    base_url: str
    root: Path
    ca_file: Path

    def url(self, path: str) -> str:
        return f"{self.base_url}/{path.lstrip('/')}"


def _handler(root: Path, refusals: Mapping[str, int]) -> type[http.server.SimpleHTTPRequestHandler]:
    class Handler(http.server.SimpleHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
            for prefix, status in refusals.items():
                if self.path.startswith(prefix):
                    self.send_error(status)
                    return
            super().do_GET()

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - stdlib signature
            pass

    return functools.partial(Handler, directory=str(root))  # type: ignore[return-value]


@contextmanager
def https_host(root: Path, pki_dir: Path, refusals: Mapping[str, int] | None = None) -> Iterator[HttpsHost]:
    """Serve `root` over TLS, with a certificate signed by the CA of `pki_dir`, until the block ends."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(*pki.localhost_server_certificate(pki_dir, "https-host"))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _handler(root, refusals or {}))
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, name="https-host", daemon=True)
    thread.start()
    try:
        yield HttpsHost(f"https://127.0.0.1:{server.server_address[1]}", root, pki_dir / "ca.crt")
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)
