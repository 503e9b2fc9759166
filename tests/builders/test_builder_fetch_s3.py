"""s3:// models fetched from a real S3-compatible store: Versity S3 Gateway on 127.0.0.1.

The store checks SigV4 signatures with real keys, so a wrong secret key, an unknown access key, a
missing bucket or key are the store's own answers, not stand-ins. Credentials come from a Secret's
keys mounted as files (a directory written here as the kubelet writes it), from the AWS_* variables,
or from a container credentials endpoint (the pod-identity path), served locally.
"""

from __future__ import annotations

import hashlib
import http.server
import json
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from tailpilot.api.engine import BuildOutcome, BuildRequest, BuildResult, S3Access
from tailpilot.builders.build import BuildSettings, run_build
from tailpilot.builders.cli import build_main
from tailpilot.builders.errors import (
    MODEL_ACCESS_DENIED,
    MODEL_CHECKSUM_MISMATCH,
    MODEL_CREDENTIALS_MISSING,
    MODEL_NOT_FOUND,
    MODEL_TOO_LARGE,
    MODEL_UNREACHABLE,
    UNSUPPORTED_URI,
    BuildError,
)
from tailpilot.builders.fetch import FetchOptions, fetch
from tailpilot.builders.s3_source import parse_endpoint
from tailpilot.builders.store import EngineStore
from tailpilot.builders.triton_server import free_port
from tailpilot_e2e.object_store import LocalObjectStore

BUCKET = "models"
KEY = "team-a/model.onnx"
SECRET_NAME = "model-credentials"
#: Every variable the SDK's identity providers read: cleared so that the machine's own play no part.
AWS_VARIABLES = (
    "AWS_ACCESS_KEY_ID",
    "AWS_ACCESS_KEY",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SECRET_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_WEB_IDENTITY_TOKEN_FILE",
    "AWS_ROLE_ARN",
    "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
    "AWS_CONTAINER_CREDENTIALS_FULL_URI",
    "AWS_CONTAINER_AUTHORIZATION_TOKEN",
    "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE",
)


@pytest.fixture(autouse=True)
def no_aws_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in AWS_VARIABLES:
        monkeypatch.delenv(name, raising=False)


@pytest.fixture(scope="module")
def model_bytes(example_model: Path, object_store: LocalObjectStore) -> bytes:
    """The example model, stored as s3://models/team-a/model.onnx (the bucket made through the S3 API)."""
    data = example_model.read_bytes()
    object_store.create_bucket(BUCKET)
    object_store.put_object(BUCKET, KEY, data)
    return data


@pytest.fixture(scope="module")
def tls_model_bytes(example_model: Path, object_store_tls: LocalObjectStore) -> bytes:
    data = example_model.read_bytes()
    object_store_tls.create_bucket(BUCKET)
    object_store_tls.put_object(BUCKET, KEY, data)
    return data


def secret_dir(path: Path, **keys: str) -> Path:
    """A Secret's keys as the kubelet mounts them: one file per key (values end with a newline here,
    as `kubectl create secret generic --from-file` keeps it)."""
    path.mkdir(parents=True, exist_ok=True)
    for key, value in keys.items():
        (path / key).write_text(value + "\n")
    return path


def keys_of(store: LocalObjectStore, **overrides: str) -> dict[str, str]:
    return {"AWS_ACCESS_KEY_ID": store.access_key, "AWS_SECRET_ACCESS_KEY": store.secret_key, **overrides}


def options(
    store: LocalObjectStore,
    credentials: Path | None,
    *,
    secret: str | None = SECRET_NAME,
    addressing: Any = "path",
    **extra: Any,
) -> FetchOptions:
    access = S3Access(endpoint=store.endpoint, addressing_style=addressing)
    return FetchOptions(
        s3=access, credentials_dir=credentials, credentials_secret=secret, timeout_s=10, **extra
    )


def fetch_failure(uri: str, dest: Path, opts: FetchOptions, sha: str | None = None) -> BuildError:
    with pytest.raises(BuildError) as failure:
        fetch(uri, dest, expected_sha256=sha, options=opts)
    assert not dest.exists(), "a failed fetch leaves no file"
    return failure.value


@pytest.mark.parametrize("addressing", ["path", "auto"])
def test_secret_keys_fetch_the_object_with_its_bytes_and_sha256(
    object_store: LocalObjectStore, model_bytes: bytes, tmp_path: Path, addressing: str
) -> None:
    creds = secret_dir(tmp_path / "creds", **keys_of(object_store))
    digest = hashlib.sha256(model_bytes).hexdigest()
    got = fetch(
        f"s3://{BUCKET}/{KEY}",
        tmp_path / "out" / "model.onnx",
        expected_sha256=digest,
        options=options(object_store, creds, addressing=addressing),
    )
    assert (got.sha256, got.size) == (digest, len(model_bytes))
    assert got.path.read_bytes() == model_bytes


def test_tailpilot_build_with_s3_a_secret_and_the_credentials_dir_builds_from_the_store(
    object_store: LocalObjectStore,
    model_bytes: bytes,
    tmp_path: Path,
    make_request: Callable[..., BuildRequest],
    store: Path,
) -> None:
    """`tailpilot build` as the Job runs it: the request's s3 and credentialsSecret, and
    `--credentials-dir` where the Secret's keys are mounted; without the flag, the keys are missing."""
    creds = secret_dir(tmp_path / "creds", **keys_of(object_store))
    request = make_request(
        model_uri=f"s3://{BUCKET}/{KEY}",
        s3=S3Access(endpoint=object_store.endpoint, addressing_style="path"),
        credentials_secret=SECRET_NAME,
    )
    text, result_file = request.model_dump_json(by_alias=True), tmp_path / "result.json"

    assert build_main(["--request", text, "--result-file", str(result_file)]) == 1
    failed = BuildResult.model_validate_json(result_file.read_text())
    assert failed.reason == MODEL_CREDENTIALS_MISSING, failed.message
    assert "--credentials-dir" in failed.message

    argv = ["--request", text, "--result-file", str(result_file), "--credentials-dir", str(creds)]
    assert build_main(argv) == 0, result_file.read_text()
    result = BuildResult.model_validate_json(result_file.read_text())
    assert EngineStore(store).published_keys() == [result.engine_key]
    manifest = json.loads((store / "engines" / result.engine_key / "manifest.json").read_text())
    assert manifest["modelSha256"] == hashlib.sha256(model_bytes).hexdigest()


def test_calibration_data_is_fetched_from_the_same_store(
    object_store: LocalObjectStore,
    model_bytes: bytes,
    tmp_path: Path,
    make_request: Callable[..., BuildRequest],
) -> None:
    """The model comes from the store; the calibration URI, on the same store, is missing there: the
    store's own answer (not AWS's, not a credentials error) proves it was asked with the same options."""
    creds = secret_dir(tmp_path / "creds", **keys_of(object_store))
    request = make_request(
        model_uri=f"s3://{BUCKET}/{KEY}",
        precision="int8",
        calibration_uri=f"s3://{BUCKET}/team-a/no-such-calibration.npz",
        s3=S3Access(endpoint=object_store.endpoint, addressing_style="path"),
        credentials_secret=SECRET_NAME,
    )
    settings = BuildSettings(fetch=FetchOptions(credentials_dir=creds, timeout_s=10))
    result = run_build(request, settings, progress=lambda _: None)
    assert (result.outcome, result.reason) == (BuildOutcome.FAILED, MODEL_NOT_FOUND), result.message
    assert "calibration data s3://models/team-a/no-such-calibration.npz" in result.message
    assert "NoSuchKey" in result.message


@pytest.mark.parametrize(
    ("override", "code"),
    [
        ({"AWS_SECRET_ACCESS_KEY": "not-the-secret-key"}, "SignatureDoesNotMatch"),
        ({"AWS_ACCESS_KEY_ID": "AKNOSUCHUSER0000"}, "InvalidAccessKeyId"),
    ],
)
def test_refused_keys_are_access_denied_and_the_message_holds_no_secret(
    object_store: LocalObjectStore, model_bytes: bytes, tmp_path: Path, override: dict[str, str], code: str
) -> None:
    creds = secret_dir(tmp_path / "creds", **keys_of(object_store, **override))
    error = fetch_failure(f"s3://{BUCKET}/{KEY}", tmp_path / "m.onnx", options(object_store, creds))
    assert error.reason == MODEL_ACCESS_DENIED, error
    assert code in error.message
    assert f"s3://{BUCKET}/{KEY}" in error.message and object_store.endpoint in error.message
    assert object_store.secret_key not in error.message
    assert "not-the-secret-key" not in error.message


@pytest.mark.parametrize(
    ("uri", "code"),
    [
        (f"s3://{BUCKET}/team-a/missing.onnx", "NoSuchKey"),
        ("s3://no-such-bucket/model.onnx", "NoSuchBucket"),
    ],
)
def test_a_missing_key_or_bucket_is_model_not_found(
    object_store: LocalObjectStore, model_bytes: bytes, tmp_path: Path, uri: str, code: str
) -> None:
    creds = secret_dir(tmp_path / "creds", **keys_of(object_store))
    error = fetch_failure(uri, tmp_path / "m.onnx", options(object_store, creds))
    assert error.reason == MODEL_NOT_FOUND, error
    assert code in error.message and uri in error.message


def test_a_checksum_mismatch_keeps_no_file(
    object_store: LocalObjectStore, model_bytes: bytes, tmp_path: Path
) -> None:
    creds = secret_dir(tmp_path / "creds", **keys_of(object_store))
    error = fetch_failure(
        f"s3://{BUCKET}/{KEY}", tmp_path / "m.onnx", options(object_store, creds), sha="0" * 64
    )
    assert error.reason == MODEL_CHECKSUM_MISMATCH
    assert hashlib.sha256(model_bytes).hexdigest() in error.message


def test_an_object_past_the_size_bound_is_refused_and_removed(
    object_store: LocalObjectStore, model_bytes: bytes, tmp_path: Path
) -> None:
    creds = secret_dir(tmp_path / "creds", **keys_of(object_store))
    bound = len(model_bytes) - 1
    error = fetch_failure(
        f"s3://{BUCKET}/{KEY}", tmp_path / "m.onnx", options(object_store, creds, max_bytes=bound)
    )
    assert error.reason == MODEL_TOO_LARGE
    assert str(bound) in error.message


def closed_endpoint() -> str:
    """An http endpoint where nothing listens: any request sent there fails as unreachable."""
    return f"http://127.0.0.1:{free_port()}"


@pytest.mark.parametrize(
    ("files", "missing"),
    [
        ({}, ["AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"]),
        ({"AWS_ACCESS_KEY_ID": "AK1"}, ["AWS_SECRET_ACCESS_KEY"]),
        ({"AWS_ACCESS_KEY_ID": "AK1", "AWS_SECRET_ACCESS_KEY": ""}, ["AWS_SECRET_ACCESS_KEY"]),
    ],
)
def test_a_named_secret_without_its_keys_is_credentials_missing_before_any_request(
    tmp_path: Path, files: dict[str, str], missing: list[str]
) -> None:
    """The endpoint is a closed port: had a request been sent, the reason would be ModelUnreachable."""
    creds = tmp_path / "creds"
    creds.mkdir()
    for key, value in files.items():
        (creds / key).write_text(value)
    opts = FetchOptions(
        s3=S3Access(endpoint=closed_endpoint()),
        credentials_dir=creds,
        credentials_secret=SECRET_NAME,
        timeout_s=5,
    )
    error = fetch_failure("s3://models/m.onnx", tmp_path / "m.onnx", opts)
    assert error.reason == MODEL_CREDENTIALS_MISSING, error
    assert repr(SECRET_NAME) in error.message and "namespace" in error.message
    named = error.message.split("lacks the key(s) ", 1)[1].split(" (", 1)[0]
    assert named.split(", ") == missing


def test_a_named_secret_with_no_directory_mounted_is_credentials_missing(tmp_path: Path) -> None:
    opts = FetchOptions(
        s3=S3Access(endpoint=closed_endpoint()),
        credentials_dir=tmp_path / "not-mounted",
        credentials_secret=SECRET_NAME,
        timeout_s=5,
    )
    error = fetch_failure("s3://models/m.onnx", tmp_path / "m.onnx", opts)
    assert error.reason == MODEL_CREDENTIALS_MISSING
    assert f"nothing is mounted at {tmp_path / 'not-mounted'}" in error.message


def test_without_a_secret_the_aws_variables_are_the_credentials(
    object_store: LocalObjectStore, model_bytes: bytes, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", object_store.access_key)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", object_store.secret_key)
    got = fetch(
        f"s3://{BUCKET}/{KEY}",
        tmp_path / "m.onnx",
        expected_sha256=hashlib.sha256(model_bytes).hexdigest(),
        options=options(object_store, None, secret=None),
    )
    assert got.path.read_bytes() == model_bytes
    # And the variables are what was used: with a wrong secret key in them, the store refuses.
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-the-secret-key")
    error = fetch_failure(
        f"s3://{BUCKET}/{KEY}", tmp_path / "m2.onnx", options(object_store, None, secret=None)
    )
    assert error.reason == MODEL_ACCESS_DENIED


@pytest.fixture
def credentials_endpoint(object_store: LocalObjectStore) -> Iterator[tuple[str, list[str]]]:
    """A container credentials endpoint (AWS_CONTAINER_CREDENTIALS_FULL_URI, as EKS Pod Identity and
    ECS give a pod) that hands out the store's keys; yields its URL and the paths it was asked for."""
    asked: list[str] = []
    expiration = (datetime.now(UTC) + timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    body = json.dumps(
        {
            "AccessKeyId": object_store.access_key,
            "SecretAccessKey": object_store.secret_key,
            "Token": "",
            "Expiration": expiration,
        }
    ).encode()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
            asked.append(self.path)
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - stdlib signature
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v2/credentials", asked
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def test_without_a_secret_or_variables_the_pod_identity_endpoint_gives_the_credentials(
    object_store: LocalObjectStore,
    model_bytes: bytes,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    credentials_endpoint: tuple[str, list[str]],
) -> None:
    url, asked = credentials_endpoint
    monkeypatch.setenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", url)
    got = fetch(
        f"s3://{BUCKET}/{KEY}",
        tmp_path / "m.onnx",
        expected_sha256=hashlib.sha256(model_bytes).hexdigest(),
        options=options(object_store, None, secret=None),
    )
    assert got.path.read_bytes() == model_bytes
    assert asked == ["/v2/credentials"]


def test_without_any_identity_the_build_says_credentials_are_missing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No Secret, no variables, and the pod's credentials endpoint does not answer."""
    monkeypatch.setenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", f"{closed_endpoint()}/v2/credentials")
    opts = FetchOptions(s3=S3Access(endpoint=closed_endpoint()), timeout_s=5)
    started = time.monotonic()
    error = fetch_failure("s3://models/m.onnx", tmp_path / "m.onnx", opts)
    assert error.reason == MODEL_CREDENTIALS_MISSING, error
    assert "no credentials Secret is named" in error.message
    assert time.monotonic() - started < 10


def test_https_endpoint_is_trusted_through_the_ca_bundle_only(
    object_store_tls: LocalObjectStore, tls_model_bytes: bytes, tmp_path: Path
) -> None:
    creds = secret_dir(tmp_path / "creds", **keys_of(object_store_tls))
    assert object_store_tls.endpoint.startswith("https://")
    digest = hashlib.sha256(tls_model_bytes).hexdigest()
    trusted = options(object_store_tls, creds, ca_bundle=str(object_store_tls.ca_file))
    got = fetch(f"s3://{BUCKET}/{KEY}", tmp_path / "m.onnx", expected_sha256=digest, options=trusted)
    assert got.path.read_bytes() == tls_model_bytes

    error = fetch_failure(f"s3://{BUCKET}/{KEY}", tmp_path / "m2.onnx", options(object_store_tls, creds))
    assert error.reason == MODEL_UNREACHABLE
    assert "CERTIFICATE_VERIFY_FAILED" in error.message
    assert object_store_tls.endpoint in error.message


def test_a_dead_endpoint_fails_unreachable_within_the_timeout(tmp_path: Path) -> None:
    creds = secret_dir(tmp_path / "creds", AWS_ACCESS_KEY_ID="AK1", AWS_SECRET_ACCESS_KEY="SK1")
    endpoint = closed_endpoint()
    opts = FetchOptions(
        s3=S3Access(endpoint=endpoint, region="us-east-1"),
        credentials_dir=creds,
        credentials_secret=SECRET_NAME,
        timeout_s=5,
    )
    started = time.monotonic()
    error = fetch_failure("s3://models/m.onnx", tmp_path / "m.onnx", opts)
    assert error.reason == MODEL_UNREACHABLE
    assert endpoint in error.message
    assert time.monotonic() - started < 5


@pytest.mark.parametrize(
    ("access", "netloc", "secure", "virtual"),
    [
        (None, "s3.amazonaws.com", True, True),
        (S3Access(region="eu-west-1"), "s3.amazonaws.com", True, True),
        (S3Access(endpoint="https://s3.eu-west-1.amazonaws.com"), "s3.eu-west-1.amazonaws.com", True, True),
        (S3Access(endpoint="http://127.0.0.1:9000"), "127.0.0.1:9000", False, False),
        (S3Access(endpoint="https://minio.storage.svc:9000/"), "minio.storage.svc:9000", True, False),
        (
            S3Access(endpoint="https://minio.storage.svc", addressing_style="virtual"),
            "minio.storage.svc",
            True,
            True,
        ),
        (
            S3Access(endpoint="https://s3.amazonaws.com", addressing_style="path"),
            "s3.amazonaws.com",
            True,
            False,
        ),
    ],
)
def test_endpoint_scheme_host_and_addressing(
    access: S3Access | None, netloc: str, secure: bool, virtual: bool
) -> None:
    endpoint = parse_endpoint(access)
    assert (endpoint.netloc, endpoint.secure, endpoint.virtual_style) == (netloc, secure, virtual)


@pytest.mark.parametrize(
    "endpoint",
    [
        "ftp://store.example:21",
        "https://store.example/prefix",
        "store.example:9000",
        "https://user:pw@store.example",
    ],
)
def test_an_endpoint_that_is_not_scheme_host_port_is_refused(endpoint: str, tmp_path: Path) -> None:
    opts = FetchOptions(s3=S3Access(endpoint=endpoint), timeout_s=5)
    error = fetch_failure("s3://models/m.onnx", tmp_path / "m.onnx", opts)
    assert error.reason == UNSUPPORTED_URI
    assert "pw@" not in error.message, "an endpoint's credentials are never repeated"
