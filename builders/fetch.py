"""Fetch a model (or calibration data) into the build's work directory, hashing it on the way (I/O module).

Supported URIs:

- `https://...` (and `http://`): streamed with httpx; a sha256 is mandatory, so
  a tampered or replaced file never becomes an engine. A private CA bundle is
  given with `FetchOptions.ca_bundle` (CLI: `--ca-bundle` or env `TAILPILOT_CA_BUNDLE`);
  verification is never disabled. HTTP 401/403 is ModelAccessDenied, 404/410 ModelNotFound.
- `s3://bucket/key`: from any S3-compatible store (`FetchOptions.s3`: endpoint, region,
  addressing), with the credentials Secret's keys mounted in `FetchOptions.credentials_dir`, or
  the pod's own identity (`s3_source.py`, MinIO's Python SDK). The CA bundle is trusted there too.
- `oci://registry/repository[:tag]@sha256:digest`: an OCI artifact or a modelcar image, pinned
  by its manifest digest, pulled with the registry Secret's `.dockerconfigjson` (`oci_source.py`).
- `hf://org/repo[@revision]/path`: a file of a Hugging Face repository (`FetchOptions.hf_endpoint`:
  the Hub or a self-hosted one), the revision resolved to a commit and the bytes fetched at it,
  with the Secret's `HF_TOKEN` (`hf_source.py`).
- `pvc://claim/path`: `<pvc_root>/claim/path`, the claim mounted at `pvc_root` in the Job.
- `file:///abs/path` or a plain path.

The sha256 is optional except for http(s); when given it is always checked. Every source
writes through `hashed_write.write_hashed` (the size bound, the hash, a full volume).
"""

from __future__ import annotations

import importlib.util
import shutil
import ssl
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urljoin, urlparse

from tailpilot.api.engine import S3Access
from tailpilot.builders.errors import (
    MODEL_ACCESS_DENIED,
    MODEL_CA_BUNDLE_MISSING,
    MODEL_CHECKSUM_MISMATCH,
    MODEL_CHECKSUM_REQUIRED,
    MODEL_NOT_FOUND,
    MODEL_UNREACHABLE,
    UNSUPPORTED_URI,
    BuildError,
)
from tailpilot.builders.hashed_write import CHUNK, write_hashed

# Re-exported: the size bound is the fetch's (docs, errors.py and the tests name it here).
from tailpilot.builders.hashed_write import MAX_FETCH_BYTES as MAX_FETCH_BYTES
from tailpilot.builders.redirects import MAX_REDIRECTS, redirect_refusal

#: Sources reached over the network, where a private CA bundle may be asked for.
_NETWORK_SCHEMES = frozenset({"http", "https", "s3", "oci", "hf"})
#: HTTP answers that say more than "unreachable": the credentials were refused, or nothing is there.
_HTTP_REASONS = {
    401: MODEL_ACCESS_DENIED,
    403: MODEL_ACCESS_DENIED,
    404: MODEL_NOT_FOUND,
    410: MODEL_NOT_FOUND,
}


@dataclass(frozen=True)
class FetchOptions:
    """Where PVC claims are mounted, which CA bundle to trust, how long to wait, which store and keys."""

    pvc_root: Path = Path("/mnt/pvc")
    ca_bundle: str | None = None
    timeout_s: float = 30.0
    max_bytes: int = MAX_FETCH_BYTES
    #: The store of s3:// URIs (endpoint, region, addressing); None: AWS S3.
    s3: S3Access | None = None
    #: Where the credentials Secret's keys are mounted as files (CLI: `--credentials-dir`).
    credentials_dir: Path | None = None
    #: The Hub of hf:// URIs (`https://host[:port]`); None: https://huggingface.co.
    hf_endpoint: str | None = None
    #: The Secret the request names (for messages, and to say its keys are required); None: the
    #: pod's own identity.
    credentials_secret: str | None = None


@dataclass(frozen=True)
class Fetched:
    """A fetched file, the sha256 of its bytes, and the source's revision they came from."""

    path: Path
    sha256: str
    size: int
    #: What pins the bytes at the source, where it has one: a Hugging Face commit, an OCI manifest
    #: digest. None for the other sources.
    revision: str | None = None


def fetch(
    uri: str,
    dest: Path,
    *,
    expected_sha256: str | None,
    options: FetchOptions,
    what: str = "model",
    suffixes: tuple[str, ...] = (".onnx",),
) -> Fetched:
    """Copy `uri` to `dest`, hashing it; verify the sha256 when one is expected.

    `suffixes`: how the file is named where a source holds several (an OCI image's files): the
    model is the `.onnx` one, calibration data the `.npz` one.

    Raises:
        BuildError: ModelChecksumRequired, ModelUnreachable, ModelAccessDenied, ModelNotFound,
            ModelCredentialsMissing, ModelCABundleMissing, ModelChecksumMismatch, ModelTooLarge,
            EngineStoreFull or UnsupportedModelUri.
    """
    parsed = urlparse(uri)
    expected = expected_sha256.lower().removeprefix("sha256:") if expected_sha256 else None
    dest.parent.mkdir(parents=True, exist_ok=True)
    if parsed.scheme in _NETWORK_SCHEMES and options.ca_bundle and not Path(options.ca_bundle).is_file():
        # A missing ConfigMap leaves its optional mount empty: said as such, not as a TLS failure.
        raise BuildError(
            MODEL_CA_BUNDLE_MISSING,
            f"the CA bundle {options.ca_bundle} for {what} {uri} is not mounted: the ConfigMap "
            "spec.model.caBundleConfigMapRef names must exist in the service's namespace with that key",
        )
    revision: str | None = None
    if parsed.scheme in {"http", "https"}:
        if not expected:
            raise BuildError(MODEL_CHECKSUM_REQUIRED, f"{what} URI {uri} is http(s): a sha256 is mandatory")
        digest, size = _fetch_http(uri, dest, options, what)
    elif parsed.scheme == "s3":
        digest, size = _fetch_s3(parsed.netloc, parsed.path.lstrip("/"), dest, options, what)
    elif parsed.scheme == "oci":
        digest, size = _fetch_oci(uri, dest, options, what, suffixes)
        revision = uri.rpartition("@")[2]  # the manifest digest the API requires, checked by the pull
    elif parsed.scheme == "hf":
        digest, size, revision = _fetch_hf(uri, dest, options, what)
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
    return Fetched(path=dest, sha256=digest, size=size, revision=revision)


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
                            _HTTP_REASONS.get(response.status_code, MODEL_UNREACHABLE),
                            f"{what} {uri} answered HTTP {response.status_code}",
                        )
                    with dest.open("wb") as out:
                        return write_hashed(
                            response.iter_bytes(CHUNK),
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


def _fetch_s3(bucket: str, key: str, dest: Path, options: FetchOptions, what: str) -> tuple[str, int]:
    if importlib.util.find_spec("minio") is None:
        raise BuildError(
            UNSUPPORTED_URI,
            f"{what} URI s3://{bucket}/{key} needs the minio package (the `sources` extra), "
            "which is not installed",
        )
    # Here, not at the top: only an s3:// source pays for the SDK's import.
    from tailpilot.builders.s3_source import fetch_s3

    return fetch_s3(
        bucket,
        key,
        dest,
        access=options.s3,
        credentials_dir=options.credentials_dir,
        credentials_secret=options.credentials_secret,
        ca_bundle=options.ca_bundle,
        timeout_s=options.timeout_s,
        max_bytes=options.max_bytes,
        what=what,
    )


def _fetch_oci(
    uri: str, dest: Path, options: FetchOptions, what: str, suffixes: tuple[str, ...]
) -> tuple[str, int]:
    from tailpilot.builders.oci_source import fetch_oci  # here: only an oci:// source pays for it

    return fetch_oci(
        uri,
        dest,
        credentials_dir=options.credentials_dir,
        credentials_secret=options.credentials_secret,
        ca_bundle=options.ca_bundle,
        timeout_s=options.timeout_s,
        max_bytes=options.max_bytes,
        what=what,
        suffixes=suffixes,
    )


def _fetch_hf(uri: str, dest: Path, options: FetchOptions, what: str) -> tuple[str, int, str]:
    from tailpilot.builders.hf_source import fetch_hf  # here: only an hf:// source pays for it

    fetched = fetch_hf(
        uri,
        dest,
        endpoint=options.hf_endpoint,
        credentials_dir=options.credentials_dir,
        credentials_secret=options.credentials_secret,
        ca_bundle=options.ca_bundle,
        timeout_s=options.timeout_s,
        max_bytes=options.max_bytes,
        what=what,
    )
    return fetched.sha256, fetched.size, fetched.commit


def _copy_local(src: Path, dest: Path, what: str) -> tuple[str, int]:
    if not src.is_file():
        raise BuildError(MODEL_UNREACHABLE, f"{what} file {src} does not exist or is not a regular file")
    with src.open("rb") as inp, dest.open("wb") as out:
        result = write_hashed(iter(lambda: inp.read(CHUNK), b""), out)
    shutil.copystat(src, dest)
    return result
