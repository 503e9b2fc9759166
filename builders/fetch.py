"""Fetch a model (or calibration data) into the build's work directory, hashing it on the way (I/O module).

Supported URIs:

- `https://...` (and `http://`): streamed with httpx; a sha256 is mandatory, so
  a tampered or replaced file never becomes an engine. A private CA bundle is
  given with `FetchOptions.ca_bundle` (CLI: `--ca-bundle` or env `TAILPILOT_CA_BUNDLE`);
  verification is never disabled.
- `s3://bucket/key`: with boto3 when it is installed (credentials from boto3's usual chain).
- `pvc://claim/path`: `<pvc_root>/claim/path`, the claim mounted at `pvc_root` in the Job.
- `file:///abs/path` or a plain path.

The sha256 is optional except for http(s); when given it is always checked.
"""

from __future__ import annotations

import hashlib
import shutil
import ssl
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any
from urllib.parse import unquote, urlparse

from tailpilot.builders.errors import (
    MODEL_CHECKSUM_MISMATCH,
    MODEL_CHECKSUM_REQUIRED,
    MODEL_UNREACHABLE,
    UNSUPPORTED_URI,
    BuildError,
)

_CHUNK = 1 << 20


@dataclass(frozen=True)
class FetchOptions:
    """Where PVC claims are mounted, which CA bundle to trust, how long to wait."""

    pvc_root: Path = Path("/mnt/pvc")
    ca_bundle: str | None = None
    timeout_s: float = 30.0


@dataclass(frozen=True)
class Fetched:
    """A fetched file and the sha256 of its bytes."""

    path: Path
    sha256: str
    size: int


def fetch(
    uri: str, dest: Path, *, expected_sha256: str | None, options: FetchOptions, what: str = "model"
) -> Fetched:
    """Copy `uri` to `dest`, hashing it; verify the sha256 when one is expected.

    Raises:
        BuildError: ModelChecksumRequired, ModelUnreachable, ModelChecksumMismatch or UnsupportedModelUri.
    """
    parsed = urlparse(uri)
    expected = expected_sha256.lower().removeprefix("sha256:") if expected_sha256 else None
    dest.parent.mkdir(parents=True, exist_ok=True)
    if parsed.scheme in {"http", "https"}:
        if not expected:
            raise BuildError(MODEL_CHECKSUM_REQUIRED, f"{what} URI {uri} is http(s): a sha256 is mandatory")
        digest, size = _fetch_http(uri, dest, options, what)
    elif parsed.scheme == "s3":
        digest, size = _fetch_s3(parsed.netloc, parsed.path.lstrip("/"), dest, what)
    elif parsed.scheme == "pvc":
        digest, size = _copy_local(
            options.pvc_root / parsed.netloc / unquote(parsed.path).lstrip("/"), dest, what
        )
    elif parsed.scheme == "file":
        digest, size = _copy_local(Path(unquote(parsed.path)), dest, what)
    elif parsed.scheme == "":
        digest, size = _copy_local(Path(uri), dest, what)
    else:
        raise BuildError(UNSUPPORTED_URI, f"{what} URI scheme {parsed.scheme!r} of {uri} is not supported")
    if expected and digest != expected:
        dest.unlink(missing_ok=True)
        raise BuildError(
            MODEL_CHECKSUM_MISMATCH, f"{what} {uri} has sha256 {digest}, but the request expects {expected}"
        )
    return Fetched(path=dest, sha256=digest, size=size)


def _write_hashed(chunks: Iterator[bytes], out: IO[bytes]) -> tuple[str, int]:
    h, size = hashlib.sha256(), 0
    for chunk in chunks:
        h.update(chunk)
        out.write(chunk)
        size += len(chunk)
    return h.hexdigest(), size


def _fetch_http(uri: str, dest: Path, options: FetchOptions, what: str) -> tuple[str, int]:
    import httpx  # here, not at the top: a cache hit must not pay for its import

    verify: ssl.SSLContext | bool = (
        ssl.create_default_context(cafile=options.ca_bundle) if options.ca_bundle else True
    )
    try:
        with (
            httpx.Client(verify=verify, timeout=options.timeout_s, follow_redirects=True) as client,
            client.stream("GET", uri) as response,
        ):
            if response.status_code != 200:
                raise BuildError(MODEL_UNREACHABLE, f"{what} {uri} answered HTTP {response.status_code}")
            with dest.open("wb") as out:
                return _write_hashed(response.iter_bytes(_CHUNK), out)
    except httpx.HTTPError as exc:
        dest.unlink(missing_ok=True)
        raise BuildError(
            MODEL_UNREACHABLE, f"cannot download {what} {uri}: {type(exc).__name__}: {exc}"
        ) from exc


def _fetch_s3(bucket: str, key: str, dest: Path, what: str) -> tuple[str, int]:
    try:
        import boto3  # type: ignore[import-not-found,unused-ignore]
    except ImportError as exc:
        raise BuildError(
            UNSUPPORTED_URI, f"{what} URI s3://{bucket}/{key} needs boto3, which is not installed"
        ) from exc
    client: Any = boto3.client("s3")
    try:
        body = client.get_object(Bucket=bucket, Key=key)["Body"]
        with dest.open("wb") as out:
            return _write_hashed(iter(lambda: bytes(body.read(_CHUNK)), b""), out)
    except Exception as exc:  # botocore raises many unrelated types; all mean "not reachable"
        dest.unlink(missing_ok=True)
        raise BuildError(MODEL_UNREACHABLE, f"cannot download {what} s3://{bucket}/{key}: {exc}") from exc


def _copy_local(src: Path, dest: Path, what: str) -> tuple[str, int]:
    if not src.is_file():
        raise BuildError(MODEL_UNREACHABLE, f"{what} file {src} does not exist or is not a regular file")
    with src.open("rb") as inp, dest.open("wb") as out:
        result = _write_hashed(iter(lambda: inp.read(_CHUNK), b""), out)
    shutil.copystat(src, dest)
    return result
