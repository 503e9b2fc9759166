"""https model downloads against a real TLS server on 127.0.0.1 with a CA made for the test.

The client trusts the test CA through FetchOptions.ca_bundle (the CLI's
--ca-bundle / TAILPILOT_CA_BUNDLE); certificate verification stays on. Besides the files it serves,
the server refuses `/private/*` (401), `/forbidden/*` (403), says `/gone/*` is gone (410) and fails
`/broken/*` (500), as a model host may.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import quote, quote_plus

import pytest

from tailpilot.api.engine import BuildOutcome, BuildRequest
from tailpilot.builders.build import BuildSettings, run_build
from tailpilot.builders.errors import (
    MODEL_ACCESS_DENIED,
    MODEL_CHECKSUM_MISMATCH,
    MODEL_CHECKSUM_REQUIRED,
    MODEL_NOT_FOUND,
    MODEL_UNREACHABLE,
)
from tailpilot.builders.fetch import FetchOptions
from tailpilot.builders.store import EngineStore
from tailpilot_e2e.https_host import https_host as serve_over_tls

#: Path prefix -> the status the server answers with (everything else: the directory's files).
REFUSALS = {"/private/": 401, "/forbidden/": 403, "/gone/": 410, "/broken/": 500}


@pytest.fixture(scope="module")
def https_root(
    tmp_path_factory: pytest.TempPathFactory, example_model: Path
) -> Iterator[tuple[str, Path, Path]]:
    """An HTTPS server on 127.0.0.1 serving a directory holding the example model.

    Yields (base URL, dir, the file of the CA that signed its certificate).
    """
    root = tmp_path_factory.mktemp("www")
    (root / "model.onnx").write_bytes(example_model.read_bytes())
    with serve_over_tls(root, tmp_path_factory.mktemp("pki"), REFUSALS) as host:
        yield host.base_url, root, host.ca_file


def settings(ca: Path | None) -> BuildSettings:
    return BuildSettings(fetch=FetchOptions(ca_bundle=str(ca) if ca else None, timeout_s=10))


def test_https_model_with_trusted_ca_and_right_sha256_builds(
    https_root: tuple[str, Path, Path], make_request: Callable[..., BuildRequest]
) -> None:
    base, root, ca = https_root
    digest = hashlib.sha256((root / "model.onnx").read_bytes()).hexdigest()
    request = make_request(model_uri=f"{base}/model.onnx", model_sha256=digest)
    result = run_build(request, settings(ca), progress=lambda _: None)
    assert result.outcome == BuildOutcome.SUCCEEDED, result.message


@pytest.mark.parametrize(
    ("path", "sha", "trust", "reason", "phrase"),
    [
        ("model.onnx", "0" * 64, True, MODEL_CHECKSUM_MISMATCH, "expects " + "0" * 64),
        ("model.onnx", None, True, MODEL_CHECKSUM_REQUIRED, "sha256 is mandatory"),
        ("missing.onnx", "0" * 64, True, MODEL_NOT_FOUND, "HTTP 404"),
        ("gone/model.onnx", "0" * 64, True, MODEL_NOT_FOUND, "HTTP 410"),
        ("private/model.onnx", "0" * 64, True, MODEL_ACCESS_DENIED, "HTTP 401"),
        ("forbidden/model.onnx", "0" * 64, True, MODEL_ACCESS_DENIED, "HTTP 403"),
        ("broken/model.onnx", "0" * 64, True, MODEL_UNREACHABLE, "HTTP 500"),
        ("model.onnx", "0" * 64, False, MODEL_UNREACHABLE, "CERTIFICATE_VERIFY_FAILED"),
    ],
)
def test_https_failures_name_the_problem_and_publish_nothing(
    https_root: tuple[str, Path, Path],
    make_request: Callable[..., BuildRequest],
    store: Path,
    path: str,
    sha: str | None,
    trust: bool,
    reason: str,
    phrase: str,
) -> None:
    base, _, ca = https_root
    request = make_request(model_uri=f"{base}/{path}", model_sha256=sha)
    result = run_build(request, settings(ca if trust else None), progress=lambda _: None)
    assert (result.outcome, result.reason) == (BuildOutcome.FAILED, reason), result.message
    assert phrase in result.message
    assert EngineStore(store).published_keys() == []


#: What a presigned URL carries in its query: a signature and a session token (made-up values).
SIGNATURE = "f3a9c1d07b2e4d6a8c0e1f2a3b4c5d6e"
TOKEN = "IQoJb3JpZ2luX2VjE/session+token=="


@pytest.mark.parametrize(
    ("path", "trust", "reason"),
    [
        ("forbidden/model.onnx", True, MODEL_ACCESS_DENIED),
        ("missing.onnx", True, MODEL_NOT_FOUND),
        ("model.onnx", False, MODEL_UNREACHABLE),
    ],
)
def test_a_presigned_urls_signature_and_token_never_reach_the_report(
    https_root: tuple[str, Path, Path],
    make_request: Callable[..., BuildRequest],
    path: str,
    trust: bool,
    reason: str,
) -> None:
    base, _, ca = https_root
    query = f"X-Amz-Signature={SIGNATURE}&X-Amz-Security-Token={quote(TOKEN, safe='')}&X-Amz-Expires=900"
    request = make_request(model_uri=f"{base}/{path}?{query}", model_sha256="0" * 64)
    lines: list[str] = []
    result = run_build(request, settings(ca if trust else None), progress=lines.append)
    assert (result.outcome, result.reason) == (BuildOutcome.FAILED, reason), result.message
    # The report still says which URL failed, and how.
    assert f"{base}/{path}?REDACTED" in result.message, result.message
    for text in (result.message, *lines):
        for secret in (SIGNATURE, TOKEN, quote(TOKEN, safe=""), quote_plus(TOKEN)):
            assert secret not in text, text
