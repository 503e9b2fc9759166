"""A model host on https://127.0.0.1:PORT: a directory's files served over TLS, its certificate self-signed.

The certificate names IP 127.0.0.1 and is its own CA, so a client trusts it only through that file
(a build's `--ca-bundle`, a spec's `caBundleConfigMapRef`); verification stays on everywhere. As a
model host may, the server refuses some path prefixes with the status `refusals` gives them
(`/private/` 401, `/gone/` 410...). It runs on a thread of the test process and stops with it.
"""

from __future__ import annotations

import functools
import http.server
import ssl
import subprocess
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class HttpsHost:
    """A running host: its base URL (no trailing slash), the directory it serves, its CA file."""

    base_url: str
    root: Path
    ca_file: Path

    def url(self, path: str) -> str:
        return f"{self.base_url}/{path.lstrip('/')}"


def self_signed_certificate(directory: Path) -> tuple[Path, Path]:
    """(certificate, key) for 127.0.0.1, valid one day; the certificate is its own CA."""
    directory.mkdir(parents=True, exist_ok=True)
    cert, key = directory / "cert.pem", directory / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1",
         "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
        check=True,
        capture_output=True,
        timeout=60,
    )  # fmt: skip
    return cert, key


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
def https_host(
    root: Path, tls: tuple[Path, Path], refusals: Mapping[str, int] | None = None
) -> Iterator[HttpsHost]:
    """Serve `root` over TLS with `tls` (certificate, key) until the block ends."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(*tls)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _handler(root, refusals or {}))
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, name="https-host", daemon=True)
    thread.start()
    try:
        yield HttpsHost(f"https://127.0.0.1:{server.server_address[1]}", root, tls[0])
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)
