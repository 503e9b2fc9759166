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
import ipaddress
import shutil
import socket
import ssl
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any
from urllib.parse import unquote, urljoin, urlparse

from tailpilot.builders.errors import (
    ENGINE_STORE_FULL,
    MODEL_CHECKSUM_MISMATCH,
    MODEL_CHECKSUM_REQUIRED,
    MODEL_TOO_LARGE,
    MODEL_UNREACHABLE,
    UNSUPPORTED_URI,
    BuildError,
)
from tailpilot.builders.store import is_out_of_space, out_of_space_message

_CHUNK = 1 << 20
#: Largest file a build fetches: an ONNX model is one protobuf, which cannot exceed 2 GiB; twice that
#: leaves room for calibration data, and bounds what a wrong or hostile URI can make the pod write.
MAX_FETCH_BYTES = 4 << 30
#: Redirects followed before a download is refused.
MAX_REDIRECTS = 5


@dataclass(frozen=True)
class FetchOptions:
    """Where PVC claims are mounted, which CA bundle to trust, how long to wait."""

    pvc_root: Path = Path("/mnt/pvc")
    ca_bundle: str | None = None
    timeout_s: float = 30.0
    max_bytes: int = MAX_FETCH_BYTES


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
            _inside_claim(options.pvc_root, parsed.netloc, parsed.path, uri), dest, what
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


def _inside_claim(pvc_root: Path, claim: str, path: str, uri: str) -> Path:
    """The file a pvc:// URI names, refused unless it lies inside its claim's mount.

    The API server refuses such URIs already (`..` segments, percent-escapes, claim names); this is
    the build's own check, for a spec admitted before that rule or a request made by hand. Symlinks
    are resolved too: a link inside the claim may not point out of it.
    """
    claim_root = (pvc_root / claim).resolve()
    target = (claim_root / path.lstrip("/")).resolve()
    if "%" in path or not claim or target == claim_root or claim_root not in target.parents:
        raise BuildError(UNSUPPORTED_URI, f"{uri}: the path must lie inside the claim {claim!r}")
    return target


def _write_hashed(
    chunks: Iterator[bytes], out: IO[bytes], *, max_bytes: int = MAX_FETCH_BYTES, what: str = "model"
) -> tuple[str, int]:
    h, size = hashlib.sha256(), 0
    for chunk in chunks:
        size += len(chunk)
        if size > max_bytes:
            raise BuildError(MODEL_TOO_LARGE, f"{what} is larger than {max_bytes} bytes: refused")
        h.update(chunk)
        try:
            out.write(chunk)
        except OSError as exc:
            # Said here, where it happens: the s3 path takes every other error as "unreachable".
            if is_out_of_space(exc):
                raise BuildError(ENGINE_STORE_FULL, out_of_space_message(Path(out.name).parent, exc)) from exc
            raise
    return h.hexdigest(), size


def _internal(host: str, resolve: Callable[[str], list[str]]) -> bool:
    """Whether `host` is, or resolves to, a loopback, link-local or private address."""
    try:
        addresses = [host] if _is_ip(host) else resolve(host)
    except OSError:
        return False  # unresolvable: the request fails on its own
    return any(
        (ip := ipaddress.ip_address(a.split("%")[0])).is_loopback or ip.is_link_local or ip.is_private
        for a in addresses
    )


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def _resolve(host: str) -> list[str]:
    return [str(info[4][0]) for info in socket.getaddrinfo(host, None)]


def redirect_refusal(
    origin: str, target: str, *, resolve: Callable[[str], list[str]] = _resolve
) -> str | None:
    """Why a download may not follow a redirect from `origin` to `target` (None: it may).

    A redirect may not downgrade https to http (the bytes are hashed, but the request and its
    headers would travel in the clear), nor lead from a public host to an internal address (the
    cluster's services, the node, a cloud metadata endpoint): the build pod's network position is
    not the model host's to use. A model served from inside the cluster may redirect inside it.
    """
    was, goes = urlparse(origin), urlparse(target)
    if goes.scheme not in {"http", "https"}:
        return f"a redirect to {goes.scheme or 'no'} scheme"
    if was.scheme == "https" and goes.scheme != "https":
        return "a redirect from https to http"
    if _internal(goes.hostname or "", resolve) and not _internal(was.hostname or "", resolve):
        return f"a redirect from a public host to the internal address of {goes.hostname}"
    return None


def _fetch_http(uri: str, dest: Path, options: FetchOptions, what: str) -> tuple[str, int]:
    import httpx  # here, not at the top: a cache hit must not pay for its import

    verify: ssl.SSLContext | bool = (
        ssl.create_default_context(cafile=options.ca_bundle) if options.ca_bundle else True
    )
    try:
        with httpx.Client(verify=verify, timeout=options.timeout_s, follow_redirects=False) as client:
            url = uri
            for _ in range(MAX_REDIRECTS + 1):
                with client.stream("GET", url) as response:
                    if response.is_redirect:
                        target = urljoin(url, response.headers.get("location", ""))
                        refusal = redirect_refusal(url, target)
                        if refusal:
                            raise BuildError(MODEL_UNREACHABLE, f"{what} {uri}: {refusal} ({target}) refused")
                        url = target
                        continue
                    if response.status_code != 200:
                        raise BuildError(
                            MODEL_UNREACHABLE, f"{what} {uri} answered HTTP {response.status_code}"
                        )
                    with dest.open("wb") as out:
                        return _write_hashed(
                            response.iter_bytes(_CHUNK),
                            out,
                            max_bytes=options.max_bytes,
                            what=f"{what} {uri}",
                        )
            raise BuildError(MODEL_UNREACHABLE, f"{what} {uri}: more than {MAX_REDIRECTS} redirects")
    except BuildError:
        dest.unlink(missing_ok=True)
        raise
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
            return _write_hashed(
                iter(lambda: bytes(body.read(_CHUNK)), b""), out, what=f"{what} s3://{bucket}/{key}"
            )
    except BuildError:
        dest.unlink(missing_ok=True)
        raise
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
