"""What a download may not do: grow past the size bound, or follow a redirect where it should not."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tailpilot.builders.errors import MODEL_TOO_LARGE, MODEL_UNREACHABLE, QUOTED_CHARS, BuildError, quoted
from tailpilot.builders.fetch import FetchOptions, fetch
from tailpilot.builders.redirects import redirect_refusal

BODY = b"x" * 5000


class _Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
        if self.path.startswith("/to-ftp"):
            self.send_response(302)
            self.send_header("Location", "ftp://127.0.0.1/model.onnx")
            self.end_headers()
            return
        if self.path.startswith("/loop"):
            self.send_response(302)
            self.send_header("Location", "/loop")
            self.end_headers()
            return
        if self.path.startswith("/moved"):
            self.send_response(301)
            self.send_header("Location", "/model.onnx")
            self.end_headers()
            return
        self.send_response(200)
        self.send_header("Content-Length", str(len(BODY)))
        self.end_headers()
        self.wfile.write(BODY)

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - stdlib signature
        pass


@pytest.fixture(scope="module")
def base_url() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_a_redirect_inside_the_same_host_is_followed(base_url: str, tmp_path: Path) -> None:
    import hashlib

    got = fetch(
        f"{base_url}/moved",
        tmp_path / "m",
        expected_sha256=hashlib.sha256(BODY).hexdigest(),
        options=FetchOptions(),
    )
    assert got.size == len(BODY)


def test_a_file_past_the_bound_is_refused_and_nothing_is_left(base_url: str, tmp_path: Path) -> None:
    with pytest.raises(BuildError) as raised:
        fetch(
            f"{base_url}/model.onnx",
            tmp_path / "m",
            expected_sha256="0" * 64,
            options=FetchOptions(max_bytes=4096),
        )
    assert raised.value.reason == MODEL_TOO_LARGE
    assert not (tmp_path / "m").exists()


@pytest.mark.parametrize(
    ("path", "why"), [("/to-ftp", "redirect to ftp scheme"), ("/loop", "more than 5 redirects")]
)
def test_redirects_out_of_http_or_without_end_are_refused(
    base_url: str, tmp_path: Path, path: str, why: str
) -> None:
    with pytest.raises(BuildError, match=why) as raised:
        fetch(f"{base_url}{path}", tmp_path / "m", expected_sha256="0" * 64, options=FetchOptions())
    assert raised.value.reason == MODEL_UNREACHABLE


def test_which_redirects_are_refused() -> None:
    dns = {"models.example.com": ["93.184.216.34"], "cdn.example.net": ["151.101.1.69"],
           "evil.example.com": ["10.96.0.1"], "models.svc": ["10.0.0.12"]}  # fmt: skip

    def resolve(host: str) -> list[str]:
        return dns[host]

    def why(origin: str, target: str) -> str | None:
        return redirect_refusal(origin, target, resolve=resolve)

    assert why("https://models.example.com/m", "https://cdn.example.net/m") is None
    assert "https to http" in str(why("https://models.example.com/m", "http://cdn.example.net/m"))
    # A public host may not send the build to the cluster, the node or a metadata endpoint.
    assert "internal address" in str(why("https://models.example.com/m", "https://evil.example.com/m"))
    assert "internal address" in str(why("http://models.example.com/m", "http://169.254.169.254/latest"))
    assert "internal address" in str(why("https://models.example.com/m", "https://127.0.0.1/m"))
    # A model served inside the cluster may redirect inside it.
    assert why("http://models.svc/m", "http://10.0.0.13/m") is None


def test_a_servers_words_reach_a_message_printable_and_bounded() -> None:
    """What a source answers (an S3 error's text, a registry's codes, a Hub's headers) is the server's."""
    assert quoted("NoSuchKey") == "NoSuchKey"
    assert quoted("line\nbreak\x1b[31m\ttab") == "line?break?[31m?tab"
    long = quoted("x" * 10_000)
    assert long == "x" * QUOTED_CHARS + " [...]"
    assert quoted("y" * 12, limit=12) == "y" * 12 and quoted("y" * 13, limit=12) == "y" * 12 + " [...]"
