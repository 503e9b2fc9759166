r"""Fetch one file of a Hugging Face Hub model repository, `hf://ORG/REPO[@REVISION]/PATH` (I/O module).

The Hub's HTTP API is spoken directly with httpx (no huggingface_hub dependency), against
huggingface.co or any endpoint that serves the same API (a self-hosted Hub, a mirror such as olah):

1. `GET {endpoint}/api/models/{ORG}/{REPO}/revision/{REVISION}`: the revision (a branch, a tag, or
   already a 40-hex commit) resolved to the commit it names now (`sha`). A pinned commit must come
   back as itself.
2. `HEAD {endpoint}/{ORG}/{REPO}/resolve/{COMMIT}/{PATH}`: what the Hub states about the file at that
   commit: `X-Repo-Commit`, the ETag (`X-Linked-Etag` for an LFS file, the sha256 of its bytes;
   `ETag` for a plain git file, its git blob id), the size (`X-Linked-Size`, or `Content-Length`).
   The Hub answers an LFS file with a redirect to its CDN, on another host: the headers are read
   from that redirect, which is not followed (as huggingface_hub does).
3. `GET` of the same resolve URL, by commit, so that the bytes are the recorded commit's even when
   the branch moves meanwhile; redirects are followed under `redirects.redirect_refusal`'s rules (no
   https->http, no public->internal), and the token is dropped once the chain leaves the
   endpoint's origin (the CDN's URL is signed; it must not receive the Hub token).

The bytes are checked against what the Hub stated: a 64-hex ETag is the file's sha256, a 40-hex one
its git blob id (sha1 of `blob <size>\0<bytes>`); either mismatch is ModelChecksumMismatch, as is an
answer for another commit than the one resolved.

Token: when the request names a credentials Secret, its key `HF_TOKEN`, mounted as a file in the
credentials directory, sent as `Authorization: Bearer`; a missing or empty key is
ModelCredentialsMissing. Without a Secret, requests are anonymous (public repositories).

Failures: the Hub's `X-Error-Code` first: `RepoNotFound`, `RevisionNotFound`, `EntryNotFound` are
ModelNotFound (the Hub answers a private or gated repository it will not show the caller with 401
`RepoNotFound`, exactly as a missing one: the message says both), `GatedRepo` is ModelAccessDenied;
then the status: 401/403 ModelAccessDenied, 404/410 ModelNotFound, any other ModelUnreachable, as is a
connection or TLS failure. Messages name the hf:// URI and the endpoint, never the token.
"""

from __future__ import annotations

import contextlib
import hashlib
import re
import ssl
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote, urljoin, urlsplit

import httpx

from tailpilot.builders.endpoint import checked_endpoint
from tailpilot.builders.errors import (
    MODEL_ACCESS_DENIED,
    MODEL_CHECKSUM_MISMATCH,
    MODEL_CREDENTIALS_MISSING,
    MODEL_NOT_FOUND,
    MODEL_TOO_LARGE,
    MODEL_UNREACHABLE,
    UNSUPPORTED_URI,
    BuildError,
    quoted,
)
from tailpilot.builders.hashed_write import CHUNK, MAX_FETCH_BYTES, write_hashed
from tailpilot.builders.redirects import MAX_REDIRECTS, redirect_refusal

#: The public Hub, when the request names no endpoint.
HF_ENDPOINT = "https://huggingface.co"
#: The credentials Secret's key holding the Hub token (a file in the credentials directory).
TOKEN_KEY = "HF_TOKEN"
#: The revision when the URI names none.
DEFAULT_REVISION = "main"

_COMMIT = re.compile(r"[0-9a-f]{40}")
_SHA256 = re.compile(r"[0-9a-f]{64}")
#: Hub user, organization and repository names.
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,95}")
#: A branch, tag or commit: one path segment, no '/' (a ref such as refs/pr/1 is not addressable).
_REVISION = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,254}")
#: One segment of the file's path in the repository.
_SEGMENT = re.compile(r"[^/\\%?#\x00-\x1f\x7f]+")
#: Error codes with which the Hub says that what was asked for is not there (for this caller).
_NOT_FOUND_CODES = frozenset({"RepoNotFound", "RevisionNotFound", "EntryNotFound"})
#: The Hub's X-Error-Message for a token it does not know (a 401 without an error code).
_INVALID_TOKEN_MESSAGE = "Invalid credentials in Authorization header"


@dataclass(frozen=True)
class HfLocation:
    """Where an hf:// URI points: the repository, the revision as written, the file's path."""

    repo_id: str
    revision: str
    path: str

    @property
    def pinned(self) -> bool:
        """Whether the revision is already a full commit id."""
        return _COMMIT.fullmatch(self.revision) is not None


@dataclass(frozen=True)
class HfFetched:
    """A fetched file: the sha256 (hex) and size of its bytes, and the commit they came from."""

    sha256: str
    size: int
    commit: str


@dataclass(frozen=True)
class HfFileHeaders:
    """What a resolve answer's headers state about the file (each None when not stated)."""

    commit: str | None
    sha256: str | None
    git_blob: str | None
    size: int | None


def parse_hf_uri(uri: str) -> HfLocation:
    """`hf://ORG/REPO[@REVISION]/PATH` as its parts (pure); the revision defaults to "main".

    A 40-hex revision is a commit (kept lower-case). The path may have several segments, none of
    them empty, `.`, `..`, or holding a backslash, '%', '?', '#' or a control character.

    Raises:
        BuildError: UnsupportedModelUri naming what is wrong.
    """
    if not uri.startswith("hf://"):
        raise BuildError(UNSUPPORTED_URI, f"{uri!r} is not an hf:// URI")
    parts = uri.removeprefix("hf://").split("/")
    if len(parts) < 3:
        raise BuildError(UNSUPPORTED_URI, f"{uri}: expected hf://ORG/REPO[@REVISION]/PATH")
    org, repo_rev, *path = parts
    repo, sep, revision = repo_rev.partition("@")
    if not sep:
        revision = DEFAULT_REVISION
    for kind, name in (("organization", org), ("repository", repo)):
        if not _NAME.fullmatch(name) or ".." in name or name.endswith("."):
            raise BuildError(UNSUPPORTED_URI, f"{uri}: {kind} name {name!r} is not a Hub name")
    if _COMMIT.fullmatch(revision.lower()):
        revision = revision.lower()
    elif not _REVISION.fullmatch(revision) or ".." in revision or revision.endswith((".", ".lock")):
        raise BuildError(
            UNSUPPORTED_URI,
            f"{uri}: revision {revision!r} is not a branch, tag or 40-hex commit (one segment, no '/')",
        )
    for segment in path:
        if not _SEGMENT.fullmatch(segment) or segment in {".", ".."}:
            raise BuildError(UNSUPPORTED_URI, f"{uri}: path segment {segment!r} is not allowed")
    return HfLocation(repo_id=f"{org}/{repo}", revision=revision, path="/".join(path))


def parse_endpoint(endpoint: str | None) -> str:
    """The Hub's base URL without a trailing '/' (pure): `http(s)://host[:port][/prefix]`.

    Raises:
        BuildError: UnsupportedModelUri for anything else (credentials, a query, a fragment).
    """
    url = (endpoint or HF_ENDPOINT).rstrip("/")
    checked_endpoint(url, what="Hub endpoint", allow_path=True)
    return url


def read_token(credentials_dir: Path | None, secret: str) -> str:
    """The Hub token the named Secret's mounted `HF_TOKEN` file holds (surrounding whitespace removed).

    Raises:
        BuildError: ModelCredentialsMissing naming the Secret and the key.
    """
    path = credentials_dir / TOKEN_KEY if credentials_dir else None
    token = path.read_text().strip() if path is not None and path.is_file() else ""
    if token:
        return token
    if credentials_dir is None:
        where = "the build was given no credentials directory (--credentials-dir)"
    elif path is not None and path.is_file():
        where = f"{path} is empty"
    else:
        where = f"there is no {TOKEN_KEY} file in {credentials_dir}"
    raise BuildError(
        MODEL_CREDENTIALS_MISSING,
        f"the credentials Secret {secret!r} lacks the key {TOKEN_KEY} ({where}): the Secret must exist "
        f"in the InferenceService's namespace and hold the Hub token as {TOKEN_KEY}",
    )


def _etag(value: str | None) -> str | None:
    if not value:
        return None
    return value.strip().removeprefix("W/").strip('"').lower() or None


def read_file_headers(headers: Mapping[str, str], *, redirected: bool) -> HfFileHeaders:
    """What a resolve answer's headers state (pure).

    `X-Linked-Etag` / `X-Linked-Size` (an LFS file: the sha256 and size of its bytes) win over
    `ETag` / `Content-Length`; `Content-Length` is the file's only in a 200 answer (`redirected`
    False), not in a redirect's. A 64-hex ETag is a sha256, a 40-hex one a git blob id; any other
    ETag states nothing.
    """
    lowered = {k.lower(): v for k, v in headers.items()}
    commit = (lowered.get("x-repo-commit") or "").strip().lower() or None
    etag = _etag(lowered.get("x-linked-etag")) or _etag(lowered.get("etag"))
    size_text = lowered.get("x-linked-size") or (None if redirected else lowered.get("content-length"))
    size = int(size_text) if size_text and size_text.strip().isdigit() else None
    return HfFileHeaders(
        commit=commit,
        sha256=etag if etag and _SHA256.fullmatch(etag) else None,
        git_blob=etag if etag and _COMMIT.fullmatch(etag) else None,
        size=size,
    )


def refusal_reason(status: int, error_code: str | None, error_message: str | None) -> str:
    """The build's reason for a Hub answer that is not a success (pure)."""
    if error_message and error_message.startswith(_INVALID_TOKEN_MESSAGE):
        return MODEL_ACCESS_DENIED
    if error_code in _NOT_FOUND_CODES:
        return MODEL_NOT_FOUND
    if error_code == "GatedRepo" or status in {401, 403}:
        return MODEL_ACCESS_DENIED
    if status in {404, 410}:
        return MODEL_NOT_FOUND
    return MODEL_UNREACHABLE


def _origin(url: str) -> tuple[str, str, int | None]:
    parts = urlsplit(url)
    return parts.scheme, (parts.hostname or "").lower(), parts.port


@dataclass(frozen=True)
class _Call:
    """One fetch's fixed parts: what to name in messages, the token and where it may go."""

    uri: str
    endpoint: str
    token: str | None
    secret: str | None
    what: str

    @property
    def where(self) -> str:
        return f"{self.what} {self.uri} at {self.endpoint}"

    def refused(self, response: httpx.Response) -> BuildError:
        code = response.headers.get("x-error-code")
        message = response.headers.get("x-error-message") or ""
        reason = refusal_reason(response.status_code, code, message)
        text = f"{self.where} answered HTTP {response.status_code}"
        text += f" {quoted(code, limit=64)}" if code else ""
        text += f": {quoted(message)}" if message else ""
        if code == "RepoNotFound" or (reason == MODEL_ACCESS_DENIED and code != "GatedRepo"):
            text += " (the repository does not exist, or it is private or gated and " + (
                f"the token of Secret {self.secret!r} may not read it)"
                if self.token
                else "no token was sent)"
            )
        elif code == "GatedRepo":
            text += " (a gated repository: the token's user must accept its conditions on the Hub)"
        return BuildError(reason, text)


def _send(
    client: httpx.Client, method: str, url: str, call: _Call, *, cross_origin: bool
) -> tuple[httpx.Response, bool]:
    """Send `method url`, following redirects; the open (streamed) answer and whether it is a redirect.

    Redirects within the current origin are always followed; one to another origin only with
    `cross_origin` (else the redirect itself is returned). The token goes only to the endpoint's
    origin, and never again once the chain has left it.

    Raises:
        BuildError: ModelUnreachable for a refused redirect or too many.
    """
    send_token = call.token is not None
    home = _origin(call.endpoint)
    for _ in range(MAX_REDIRECTS + 1):
        headers = {"Accept-Encoding": "identity"}
        if send_token and _origin(url) == home:
            headers["Authorization"] = f"Bearer {call.token}"
        response = client.send(client.build_request(method, url, headers=headers), stream=True)
        if not response.is_redirect:
            return response, False
        target = urljoin(url, response.headers.get("location", ""))
        if _origin(target) != _origin(url) and not cross_origin:
            return response, True
        response.close()
        refusal = redirect_refusal(url, target)
        if refusal:
            raise BuildError(MODEL_UNREACHABLE, f"{call.where}: {refusal} ({_no_query(target)}) refused")
        if _origin(target) != _origin(url):
            send_token = False
        url = target
    raise BuildError(MODEL_UNREACHABLE, f"{call.where}: more than {MAX_REDIRECTS} redirects")


def _no_query(url: str) -> str:
    """A URL without its query (a CDN's signed URL carries its signature there)."""
    return url.split("?", 1)[0]


def _resolve_commit(client: httpx.Client, location: HfLocation, call: _Call) -> str:
    url = f"{call.endpoint}/api/models/{location.repo_id}/revision/{quote(location.revision, safe='')}"
    response, _ = _send(client, "GET", url, call, cross_origin=True)
    with contextlib.closing(response):
        if response.status_code != 200:
            raise call.refused(response)
        response.read()
        try:
            sha = str(response.json().get("sha") or "").lower()
        except (ValueError, AttributeError) as exc:
            raise BuildError(
                MODEL_UNREACHABLE, f"{call.where}: the revision API answered no JSON object"
            ) from exc
    if not _COMMIT.fullmatch(sha):
        raise BuildError(
            MODEL_UNREACHABLE, f"{call.where}: the revision API named no commit for {location.revision!r}"
        )
    if location.pinned and sha != location.revision:
        raise BuildError(
            MODEL_CHECKSUM_MISMATCH, f"{call.where}: the pinned commit {location.revision} resolved to {sha}"
        )
    return sha


def _check_commit(stated: str | None, commit: str, call: _Call, step: str) -> None:
    if stated is not None and stated != commit:
        raise BuildError(
            MODEL_CHECKSUM_MISMATCH,
            f"{call.where}: the {step} answer is for commit {stated}, not the resolved {commit}",
        )


def _tee(chunks: Iterator[bytes], digest: hashlib._Hash | None) -> Iterator[bytes]:
    for chunk in chunks:
        if digest is not None:
            digest.update(chunk)
        yield chunk


def fetch_hf_with(
    client: httpx.Client,
    uri: str,
    dest: Path,
    *,
    endpoint: str | None,
    token: str | None,
    credentials_secret: str | None = None,
    max_bytes: int = MAX_FETCH_BYTES,
    what: str = "model",
) -> HfFetched:
    """`fetch_hf` through the given client (redirects off; tests pass one over a mock transport).

    Raises:
        BuildError: see `fetch_hf`.
    """
    location = parse_hf_uri(uri)
    call = _Call(
        uri=uri, endpoint=parse_endpoint(endpoint), token=token, secret=credentials_secret, what=what
    )
    try:
        commit = _resolve_commit(client, location, call)
        file_url = f"{call.endpoint}/{location.repo_id}/resolve/{commit}/{quote(location.path, safe='/')}"
        head, redirected = _send(client, "HEAD", file_url, call, cross_origin=False)
        with contextlib.closing(head):
            if head.status_code != 200 and not redirected:
                raise call.refused(head)
            stated = read_file_headers(head.headers, redirected=redirected)
        _check_commit(stated.commit, commit, call, "HEAD")
        if stated.size is not None and stated.size > max_bytes:
            raise BuildError(
                MODEL_TOO_LARGE,
                f"{call.where} is {stated.size} bytes, larger than {max_bytes} bytes: refused",
            )
        response, _ = _send(client, "GET", file_url, call, cross_origin=True)
        with contextlib.closing(response):
            if response.status_code != 200:
                raise call.refused(response)
            _check_commit(read_file_headers(response.headers, redirected=False).commit, commit, call, "GET")
            blob = None
            if stated.git_blob is not None and stated.size is not None:
                blob = hashlib.sha1(b"blob %d\0" % stated.size, usedforsecurity=False)
            with dest.open("wb") as out:
                digest, size = write_hashed(
                    _tee(response.iter_bytes(CHUNK), blob), out, max_bytes=max_bytes, what=call.where
                )
        if stated.sha256 is not None and digest != stated.sha256:
            raise BuildError(
                MODEL_CHECKSUM_MISMATCH,
                f"{call.where} has sha256 {digest}, but the Hub states {stated.sha256}",
            )
        if blob is not None and blob.hexdigest() != stated.git_blob:
            raise BuildError(
                MODEL_CHECKSUM_MISMATCH,
                f"{call.where}: {size} bytes that are not the git blob {stated.git_blob} "
                f"({stated.size} bytes) the Hub states",
            )
        return HfFetched(sha256=digest, size=size, commit=commit)
    except BuildError:
        dest.unlink(missing_ok=True)
        raise
    except (httpx.HTTPError, httpx.InvalidURL) as exc:
        dest.unlink(missing_ok=True)
        raise BuildError(
            MODEL_UNREACHABLE, f"cannot download {call.where}: {type(exc).__name__}: {exc}"
        ) from exc


def fetch_hf(
    uri: str,
    dest: Path,
    *,
    endpoint: str | None,
    credentials_dir: Path | None,
    credentials_secret: str | None,
    ca_bundle: str | None,
    timeout_s: float,
    max_bytes: int = MAX_FETCH_BYTES,
    what: str = "model",
) -> HfFetched:
    """Copy the file `uri` names to `dest`; its sha256, size and the commit it was fetched at.

    `endpoint` None is huggingface.co. The token is the named Secret's `HF_TOKEN` (none without a
    Secret). `ca_bundle` replaces the default trust store (verification is never disabled). Nothing
    is left at `dest` on failure.

    Raises:
        BuildError: UnsupportedModelUri, ModelCredentialsMissing, ModelAccessDenied, ModelNotFound,
            ModelChecksumMismatch, ModelTooLarge, ModelUnreachable or EngineStoreFull.
    """
    parse_hf_uri(uri)  # a malformed URI is said before the credentials are read
    parse_endpoint(endpoint)
    token = read_token(credentials_dir, credentials_secret) if credentials_secret else None
    verify: ssl.SSLContext | bool = ssl.create_default_context(cafile=ca_bundle) if ca_bundle else True
    dest.parent.mkdir(parents=True, exist_ok=True)
    with httpx.Client(verify=verify, timeout=timeout_s, follow_redirects=False) as client:
        return fetch_hf_with(
            client,
            uri,
            dest,
            endpoint=endpoint,
            token=token,
            credentials_secret=credentials_secret,
            max_bytes=max_bytes,
            what=what,
        )
