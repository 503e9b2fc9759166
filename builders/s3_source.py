"""Fetch one `s3://bucket/key` object from any S3-compatible store, hashing it on the way (I/O module).

The client is MinIO's Python SDK (`minio`, the `sources` extra), not boto3: botocore pins
python-dateutil < 3, which the kubernetes client the project needs (>= 3) excludes.

- Endpoint (`S3Access.endpoint`): `https://host[:port]` (TLS, verified: `ca_bundle` replaces the
  default trust store for a private CA) or `http://host[:port]`; None is AWS S3. The region is
  passed through (None: the SDK asks the store for the bucket's location).
- Addressing: "path" (`endpoint/bucket/key`), "virtual" (`bucket.endpoint/key`), or "auto":
  virtual for AWS endpoints, path for any other.
- Credentials: when the request names a Secret, its keys `AWS_ACCESS_KEY_ID`,
  `AWS_SECRET_ACCESS_KEY` (and optional `AWS_SESSION_TOKEN`), mounted as files in the credentials
  directory; a missing directory or key is `ModelCredentialsMissing`. Without a Secret: the pod's
  own identity, through the SDK's providers (the `AWS_*` variables, then IAM: a web identity token
  file, the container credentials endpoint, the instance metadata).
- Failures: the store refusing the credentials is `ModelAccessDenied`; no such bucket or key is
  `ModelNotFound`; any other answer, a connection or TLS failure is `ModelUnreachable`. Messages
  name the s3:// URI and the endpoint, never a credential. Retries are few, so a dead endpoint
  fails within about the timeout.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import certifi
import urllib3
from minio import Minio
from minio.credentials.providers import (
    ChainedProvider,
    EnvAWSProvider,
    IamAwsProvider,
    Provider,
    StaticProvider,
)
from minio.error import MinioException, S3Error

from tailpilot.api.engine import S3Access
from tailpilot.builders.endpoint import checked_endpoint
from tailpilot.builders.errors import (
    MODEL_ACCESS_DENIED,
    MODEL_CREDENTIALS_MISSING,
    MODEL_NOT_FOUND,
    MODEL_TOO_LARGE,
    MODEL_UNREACHABLE,
    UNSUPPORTED_URI,
    BuildError,
    quoted,
)
from tailpilot.builders.hashed_write import CHUNK, MAX_FETCH_BYTES, write_hashed

#: The credentials Secret's keys (files in the credentials directory).
ACCESS_KEY_ID = "AWS_ACCESS_KEY_ID"
SECRET_ACCESS_KEY = "AWS_SECRET_ACCESS_KEY"
SESSION_TOKEN = "AWS_SESSION_TOKEN"
#: The endpoint when the request names none.
AWS_ENDPOINT = "https://s3.amazonaws.com"
#: S3 error codes that say the credentials were refused, or may not read the object.
ACCESS_DENIED_CODES = frozenset(
    {"AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "ExpiredToken", "InvalidToken"}
)
#: S3 error codes that say the store holds no such object.
NOT_FOUND_CODES = frozenset({"NoSuchKey", "NoSuchBucket"})
#: Retries of one request (connection failures and 5xx answers), so that a dead endpoint fails
#: within about the timeout: each connection attempt gets a share of it.
_RETRIES = 2


@dataclass(frozen=True)
class Endpoint:
    """Where the store is: `host[:port]` as the SDK takes it, TLS or not, and how to address buckets."""

    netloc: str
    secure: bool
    virtual_style: bool
    #: As the request gave it (or AWS S3's), for messages.
    url: str


def parse_endpoint(access: S3Access | None) -> Endpoint:
    """The store's endpoint (pure).

    Raises:
        BuildError: UnsupportedModelUri for an endpoint that is not `http(s)://host[:port]`.
    """
    url = (access.endpoint if access else None) or AWS_ENDPOINT
    parts = checked_endpoint(url, what="s3 endpoint", allow_path=False)
    style = access.addressing_style if access else "auto"
    virtual = style == "virtual" or (style == "auto" and _is_aws_host(parts.hostname or ""))
    return Endpoint(netloc=parts.netloc, secure=parts.scheme == "https", virtual_style=virtual, url=url)


def _is_aws_host(host: str) -> bool:
    host = host.lower().rstrip(".")
    return host.endswith((".amazonaws.com", ".amazonaws.com.cn"))


def read_secret_keys(credentials_dir: Path | None, secret: str) -> tuple[str, str, str | None]:
    """The access key, secret key and session token the named Secret's mounted files hold.

    Each file's value loses one trailing newline (`kubectl create secret --from-file` keeps it).

    Raises:
        BuildError: ModelCredentialsMissing naming the Secret and the keys it lacks.
    """
    values: dict[str, str] = {}
    for key in (ACCESS_KEY_ID, SECRET_ACCESS_KEY, SESSION_TOKEN):
        path = credentials_dir / key if credentials_dir else None
        if path is not None and path.is_file():
            value = path.read_text().removesuffix("\n").removesuffix("\r")
            if value:
                values[key] = value
    missing = [key for key in (ACCESS_KEY_ID, SECRET_ACCESS_KEY) if key not in values]
    if missing:
        if credentials_dir is None:
            where = "the build was given no credentials directory (--credentials-dir)"
        elif not credentials_dir.is_dir() or not any(credentials_dir.iterdir()):
            where = f"nothing is mounted at {credentials_dir}"
        else:
            where = f"the files at {credentials_dir} lack them or are empty"
        raise BuildError(
            MODEL_CREDENTIALS_MISSING,
            f"the credentials Secret {secret!r} lacks the key(s) {', '.join(missing)} ({where}): the "
            f"Secret must exist in the InferenceService's namespace and hold {ACCESS_KEY_ID} and "
            f"{SECRET_ACCESS_KEY} (and optionally {SESSION_TOKEN})",
        )
    return values[ACCESS_KEY_ID], values[SECRET_ACCESS_KEY], values.get(SESSION_TOKEN)


def _pool(*, ca_certs: str, timeout_s: float) -> urllib3.PoolManager:
    return urllib3.PoolManager(
        timeout=urllib3.Timeout(connect=timeout_s / (_RETRIES + 1), read=timeout_s),
        maxsize=2,
        cert_reqs="CERT_REQUIRED",
        ca_certs=ca_certs,
        retries=urllib3.Retry(
            total=_RETRIES, read=0, backoff_factor=0.2, status_forcelist=[500, 502, 503, 504]
        ),
    )


def _credentials(
    *, credentials_dir: Path | None, credentials_secret: str | None, uri: str, timeout_s: float
) -> Provider:
    """The Secret's keys when one is named, else the pod's identity; checked before any request.

    Raises:
        BuildError: ModelCredentialsMissing when neither gives credentials.
    """
    if credentials_secret:
        return StaticProvider(*read_secret_keys(credentials_dir, credentials_secret))
    # The identity endpoints (STS, the metadata services) are AWS's or the node's: the default
    # trust store, not the model store's private CA.
    identity = ChainedProvider(
        [EnvAWSProvider(), IamAwsProvider(http_client=_pool(ca_certs=certifi.where(), timeout_s=timeout_s))]
    )
    try:
        identity.retrieve()
    except Exception as exc:  # the SDK's providers raise ValueError, urllib3's and json's errors
        raise BuildError(
            MODEL_CREDENTIALS_MISSING,
            f"{uri}: no credentials Secret is named and the build pod has no identity of its own "
            f"(no {ACCESS_KEY_ID}/{SECRET_ACCESS_KEY} variables; IAM: web identity token, container "
            f"or instance metadata gave none: {type(exc).__name__}); name a Secret in the "
            "InferenceService's namespace holding the keys",
        ) from exc
    return identity


def _reason(exc: S3Error) -> str:
    if exc.code in ACCESS_DENIED_CODES:
        return MODEL_ACCESS_DENIED
    if exc.code in NOT_FOUND_CODES:
        return MODEL_NOT_FOUND
    status = exc.response.status if exc.response is not None else None
    return MODEL_ACCESS_DENIED if status in {401, 403} else MODEL_UNREACHABLE


def fetch_s3(
    bucket: str,
    key: str,
    dest: Path,
    *,
    access: S3Access | None,
    credentials_dir: Path | None,
    credentials_secret: str | None,
    ca_bundle: str | None,
    timeout_s: float,
    max_bytes: int = MAX_FETCH_BYTES,
    what: str = "model",
) -> tuple[str, int]:
    """Copy `s3://bucket/key` to `dest`; the sha256 (hex) and size of its bytes.

    Nothing is left at `dest` on failure.

    Raises:
        BuildError: ModelCredentialsMissing, ModelAccessDenied, ModelNotFound, ModelUnreachable,
            ModelTooLarge, EngineStoreFull or UnsupportedModelUri (a malformed endpoint or region).
    """
    uri = f"s3://{bucket}/{key}"
    endpoint = parse_endpoint(access)
    if not bucket or not key:
        raise BuildError(UNSUPPORTED_URI, f"{what} URI {uri} names no bucket or no key")
    where = f"{what} {uri} at {endpoint.url}"
    credentials = _credentials(
        credentials_dir=credentials_dir,
        credentials_secret=credentials_secret,
        uri=f"{what} {uri}",
        timeout_s=timeout_s,
    )
    try:
        client = Minio(
            endpoint.netloc,
            secure=endpoint.secure,
            region=access.region if access else None,
            http_client=_pool(ca_certs=ca_bundle or certifi.where(), timeout_s=timeout_s),
            credentials=credentials,
        )
    except ValueError as exc:  # the SDK's own checks of the endpoint and the region
        raise BuildError(UNSUPPORTED_URI, f"{where}: {exc}") from exc
    if endpoint.virtual_style:
        client.enable_virtual_style_endpoint()  # type: ignore[no-untyped-call]
    else:
        client.disable_virtual_style_endpoint()  # type: ignore[no-untyped-call]
    try:
        response = client.get_object(bucket, key)
        try:
            length = response.headers.get("content-length")
            if length and length.isdigit() and int(length) > max_bytes:
                raise BuildError(
                    MODEL_TOO_LARGE, f"{where} is {length} bytes, larger than {max_bytes} bytes: refused"
                )
            with dest.open("wb") as out:
                return write_hashed(response.stream(CHUNK), out, max_bytes=max_bytes, what=where)
        finally:
            response.close()
            response.release_conn()
    except BuildError:
        dest.unlink(missing_ok=True)
        raise
    except S3Error as exc:
        dest.unlink(missing_ok=True)
        said = f"{quoted(exc.code or '')}: {quoted(exc.message or '')}"
        raise BuildError(_reason(exc), f"cannot download {where}: {said}") from exc
    except (MinioException, urllib3.exceptions.HTTPError) as exc:
        dest.unlink(missing_ok=True)
        raise BuildError(
            MODEL_UNREACHABLE, f"cannot download {where}: {type(exc).__name__}: {quoted(str(exc), limit=500)}"
        ) from exc
