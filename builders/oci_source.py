"""Fetch a model from an OCI registry, `oci://REGISTRY[:PORT]/REPOSITORY[:TAG]@sha256:DIGEST` (I/O module).

The pull follows the OCI distribution spec with plain HTTP calls (httpx), not a registry client
library: the build needs one read path (a manifest, then some blobs), and each step must be
checked and reported in the build's own terms.

- Pinning: the manifest is fetched by the URI's digest, never by the tag (a tag can be moved; it
  is only a label here), and its bytes must hash to that digest, so a registry cannot serve other
  content under it. Every blob is hashed while it streams and must match its descriptor's digest
  and size. A mismatch is `ModelChecksumMismatch`. An index (or Docker manifest list) resolves to
  its linux/amd64 manifest, or to its only one.
- Which file: an ORAS artifact (`oras push`) carries each file as one layer whose
  `org.opencontainers.image.title` annotation names it: exactly one titled layer ending in `.onnx`
  is the model, its bytes as they are (oras labels files with the tar media type: a titled layer
  is a file, unless annotated as a directory to unpack). Otherwise the untitled image layers (tar,
  tar+gzip; zstd is not read) are read as a stream, in order, stacked as a container runtime
  stacks them (a later layer's file replaces an earlier one's, whiteouts delete): the model is
  the one regular `.onnx` file under `models/`, where a KServe "modelcar" image keeps it. None,
  or several, is `ModelNotFound`, naming what the artifact holds. Nothing but the model is written to disk.
- Bounds: the model file is at most `max_bytes` (`ModelTooLarge`); a manifest at most 4 MiB (the
  distribution spec's limit); a layer, compressed or not, at most `max_bytes` plus
  `ARCHIVE_OVERHEAD`, so a hostile image (a gzip bomb, a huge base layer) cannot run unbounded.
  gzip is decompressed here rather than by tarfile's `r|gz` so that its output is counted.
- Transport: https only; `ca_bundle` replaces the default trust store (a private CA); verification
  is never disabled. Redirects (registries send blob GETs to their storage) are followed under
  `redirects.redirect_refusal`'s rules, and the Authorization header is dropped when the host changes:
  a storage host gets a pre-signed URL, never the registry's credentials.
- Auth: anonymous first, as clients do (public repositories need nothing). A 401 names the scheme
  in `WWW-Authenticate`: `Basic` is answered with the Secret's user and password; `Bearer
  realm=...,service=...,scope=...` sends them (if any) to the token realm, which must be https,
  and the token it returns is used for the manifest and the blobs. The credentials come from the
  named Secret (type kubernetes.io/dockerconfigjson), its `.dockerconfigjson` file mounted in
  `credentials_dir`: `auths[<host[:port]>]` with `auth` (base64 `user:password`) or `username` and
  `password`; keys written `https://host/...` match too. A missing file or entry is
  `ModelCredentialsMissing`, found before any request.
- Failures: 401/403 (after credentials, or with none to give) is `ModelAccessDenied`; 404
  (MANIFEST_UNKNOWN, BLOB_UNKNOWN, NAME_UNKNOWN) is `ModelNotFound`; a connection or TLS failure,
  or any other answer, is `ModelUnreachable`. Messages name the URI, never a credential.

Docker Hub is `docker.io` in a URI, as in image names: its API is registry-1.docker.io, its
one-component repositories live under `library/`, and its credentials key is usually
`https://index.docker.io/v1/`.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import functools
import gzip
import hashlib
import io
import json
import re
import ssl
import tarfile
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urljoin, urlsplit

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
from tailpilot.builders.redirects import redirect_refusal

if TYPE_CHECKING:
    import httpx

#: The file of a kubernetes.io/dockerconfigjson Secret, mounted in the credentials directory.
DOCKER_CONFIG_KEY = ".dockerconfigjson"
#: Manifest media types the build reads.
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
DOCKER_MANIFEST_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
MANIFEST_ACCEPT = ", ".join((OCI_MANIFEST, OCI_INDEX, DOCKER_MANIFEST, DOCKER_MANIFEST_LIST))
#: Image layers read as tar archives, by whether they are gzip-compressed.
TAR_LAYERS = {
    "application/vnd.oci.image.layer.v1.tar": False,
    "application/vnd.oci.image.layer.v1.tar+gzip": True,
    "application/vnd.docker.image.rootfs.diff.tar": False,
    "application/vnd.docker.image.rootfs.diff.tar.gzip": True,
}
#: The annotation `oras push` gives each file's layer.
TITLE_ANNOTATION = "org.opencontainers.image.title"
#: The annotation `oras push` gives a directory's layer (a tar+gzip of it).
UNPACK_ANNOTATION = "io.deis.oras.content.unpack"
#: Where a KServe modelcar image keeps its model.
MODELS_DIR = "models/"
#: The distribution spec lets registries refuse manifests larger than this; so does the build.
MAX_MANIFEST_BYTES = 4 << 20
#: What a layer may hold beyond the model (a modelcar's base image, tar headers), compressed or not.
ARCHIVE_OVERHEAD = 1 << 30
#: Redirects followed for one request (the same bound as https downloads).
MAX_REDIRECTS = 5
#: Names listed when the artifact holds no single model file.
_LISTED = 10
#: Index levels followed (an index naming an index).
_MAX_INDEX_DEPTH = 2
_NOT_FOUND_CODES = frozenset({"MANIFEST_UNKNOWN", "BLOB_UNKNOWN", "NAME_UNKNOWN"})
_REFERENCE = re.compile(
    r"^oci://(?P<registry>[A-Za-z0-9.-]+(?::[0-9]{1,5})?)/(?P<repository>[a-z0-9]+(?:[._/-][a-z0-9]+)*)"
    r"(?::(?P<tag>[A-Za-z0-9_][A-Za-z0-9._-]{0,127}))?@(?P<digest>sha256:[a-f0-9]{64})$"
)
_DOCKER_HUB = frozenset({"docker.io", "index.docker.io", "registry-1.docker.io"})


# ---------------------------------------------------------------------------------------------
# Pure parts: the URI, challenges, the docker config, manifests and the choice of the file.


@dataclass(frozen=True)
class OciReference:
    """An oci:// URI's parts: `registry` is host[:port] as written, `digest` is `sha256:<hex>`."""

    registry: str
    repository: str
    tag: str | None
    digest: str

    @property
    def api_host(self) -> str:
        """The host[:port] that serves the registry API (Docker Hub's differs from its name)."""
        return "registry-1.docker.io" if self.registry.lower() in _DOCKER_HUB else self.registry

    @property
    def api_repository(self) -> str:
        """The repository as the API names it (Docker Hub's official images are under library/)."""
        if self.registry.lower() in _DOCKER_HUB and "/" not in self.repository:
            return f"library/{self.repository}"
        return self.repository

    def url(self, kind: str, reference: str) -> str:
        """`https://host/v2/<repository>/<kind>/<reference>` (kind: manifests or blobs)."""
        return f"https://{self.api_host}/v2/{self.api_repository}/{kind}/{reference}"


def parse_oci_uri(uri: str) -> OciReference:
    """The parts of `oci://REGISTRY[:PORT]/REPOSITORY[:TAG]@sha256:DIGEST` (the API's OCI_URI).

    Raises:
        BuildError: UnsupportedModelUri for any other shape (no digest, an upper-case repository).
    """
    match = _REFERENCE.match(uri)
    if match is None:
        raise BuildError(
            UNSUPPORTED_URI,
            f"{uri} is not oci://REGISTRY[:PORT]/REPOSITORY[:TAG]@sha256:DIGEST "
            "(the digest pins the artifact)",
        )
    return OciReference(
        registry=match["registry"], repository=match["repository"], tag=match["tag"], digest=match["digest"]
    )


@dataclass(frozen=True)
class Challenge:
    """A `WWW-Authenticate` challenge: the scheme (lower case) and its parameters."""

    scheme: str
    params: dict[str, str] = field(default_factory=dict)


_PARAM = re.compile(r'\s*([A-Za-z][A-Za-z0-9_-]*)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^\s,]*))\s*,?')


def parse_www_authenticate(header: str) -> Challenge | None:
    """The first challenge of a `WWW-Authenticate` value (`Basic realm="x"`, `Bearer realm=...,scope=...`).

    Registries send one challenge; a scope holds commas inside its quotes, which the parse keeps.
    None when the header is empty or has no scheme.
    """
    text = header.strip()
    scheme, _, rest = text.partition(" ")
    if not scheme or "=" in scheme:
        return None
    params: dict[str, str] = {}
    pos = 0
    while pos < len(rest):
        match = _PARAM.match(rest, pos)
        if match is None or match.end() == pos:
            break
        quoted, bare = match.group(2), match.group(3)
        value = re.sub(r"\\(.)", r"\1", quoted) if quoted is not None else bare
        params[match.group(1).lower()] = value
        pos = match.end()
    return Challenge(scheme=scheme.lower(), params=params)


def _config_host(key: str) -> str:
    """A docker config `auths` key as host[:port]: `https://host:5000/v1/` -> `host:5000`."""
    key = key.strip().lower()
    if "://" in key:
        key = urlsplit(key).netloc
    return key.split("/", 1)[0]


def registry_credentials(config: dict[str, Any], registry: str) -> tuple[str, str] | None:
    """The user and password a docker config (`{"auths": {...}}`) holds for `registry` (host[:port]).

    An entry is keyed by host[:port], or by a URL on it (`https://host/v1/`); it holds `auth`
    (base64 of `user:password`) or `username` and `password`. None when no entry serves the registry.
    """
    auths = config.get("auths")
    if not isinstance(auths, dict):
        return None
    wanted = {registry.lower()}
    if registry.lower() in _DOCKER_HUB:
        wanted |= _DOCKER_HUB
    for key, entry in auths.items():
        if not isinstance(key, str) or _config_host(key) not in wanted or not isinstance(entry, dict):
            continue
        auth = entry.get("auth")
        if isinstance(auth, str) and auth:
            try:
                user, sep, password = base64.b64decode(auth, validate=True).decode().partition(":")
            except (binascii.Error, UnicodeDecodeError):
                continue
            if sep and user:
                return user, password
        name, secret = entry.get("username"), entry.get("password")
        if isinstance(name, str) and name and isinstance(secret, str):
            return name, secret
    return None


def read_registry_credentials(credentials_dir: Path | None, secret: str, registry: str) -> tuple[str, str]:
    """The user and password for `registry` in the named Secret's mounted `.dockerconfigjson`.

    Raises:
        BuildError: ModelCredentialsMissing naming the Secret and the registry (never a value).
    """
    path = credentials_dir / DOCKER_CONFIG_KEY if credentials_dir else None
    if credentials_dir is None or path is None:
        problem = "the build was given no credentials directory (--credentials-dir)"
    elif not path.is_file():
        problem = f"it has no {DOCKER_CONFIG_KEY} key (nothing at {path})"
    else:
        try:
            config = json.loads(path.read_text())
        except (ValueError, UnicodeDecodeError):
            problem = f"its {DOCKER_CONFIG_KEY} is not JSON"
        else:
            found = registry_credentials(config, registry) if isinstance(config, dict) else None
            if found is not None:
                return found
            problem = (
                f"its {DOCKER_CONFIG_KEY} has no usable auths entry (auth, or username and password) for it"
            )
    raise BuildError(
        MODEL_CREDENTIALS_MISSING,
        f"the credentials Secret {secret!r} holds no credentials for the registry {registry}: {problem}; "
        f"it must be a kubernetes.io/dockerconfigjson Secret in the InferenceService's namespace",
    )


def manifest_digest_refusal(body: bytes, digest: str) -> str | None:
    """Why manifest bytes do not match the digest that names them (None: they match)."""
    algorithm, _, expected = digest.partition(":")
    if algorithm != "sha256":
        return f"digest algorithm {algorithm!r} is not supported"
    actual = hashlib.sha256(body).hexdigest()
    return None if actual == expected else f"its bytes hash to sha256:{actual}, not {digest}"


@dataclass(frozen=True)
class Descriptor:
    """A manifest's reference to a blob or another manifest."""

    media_type: str
    digest: str
    size: int
    title: str | None = None
    platform: str | None = None  # os/architecture, for an index's entries
    unpack: bool = False  # an ORAS directory: its tar is to be unpacked


def _descriptor(raw: object) -> Descriptor:
    if not isinstance(raw, dict):
        raise ValueError("a descriptor is not an object")
    digest, size = raw.get("digest"), raw.get("size")
    if not isinstance(digest, str) or not re.fullmatch(r"sha256:[a-f0-9]{64}", digest):
        raise ValueError(f"descriptor digest {digest!r} is not sha256:<64 hex digits>")
    if not isinstance(size, int) or size < 0:
        raise ValueError(f"descriptor size {size!r} is not a count of bytes")
    annotations = raw.get("annotations")
    if not isinstance(annotations, dict):
        annotations = {}
    title = annotations.get(TITLE_ANNOTATION)
    platform = raw.get("platform")
    where = f"{platform.get('os')}/{platform.get('architecture')}" if isinstance(platform, dict) else None
    return Descriptor(
        media_type=str(raw.get("mediaType") or ""),
        digest=digest,
        size=size,
        title=title if isinstance(title, str) else None,
        platform=where,
        unpack=str(annotations.get(UNPACK_ANNOTATION, "")).lower() == "true",
    )


@dataclass(frozen=True)
class Manifest:
    """A parsed manifest: an index's entries, or an image/artifact manifest's layers."""

    is_index: bool
    entries: tuple[Descriptor, ...]


def parse_manifest(body: bytes, content_type: str = "") -> Manifest:
    """An OCI or Docker v2 manifest, or an index / manifest list.

    Raises:
        ValueError: not JSON, or not one of those (schema 1, an OCI artifact manifest, bad descriptors).
    """
    doc = json.loads(body)
    if not isinstance(doc, dict):
        raise ValueError("the manifest is not a JSON object")
    media_type = str(doc.get("mediaType") or content_type.split(";")[0].strip())
    if media_type in {OCI_INDEX, DOCKER_MANIFEST_LIST} or (not media_type and "manifests" in doc):
        raw = doc.get("manifests")
        is_index = True
    elif media_type in {OCI_MANIFEST, DOCKER_MANIFEST} or (not media_type and "layers" in doc):
        raw = doc.get("layers")
        is_index = False
    else:
        raise ValueError(
            f"manifest media type {media_type or '(none)'!r} is not an OCI or Docker v2 manifest"
        )
    if not isinstance(raw, list):
        raise ValueError("the manifest lists no " + ("manifests" if is_index else "layers"))
    return Manifest(is_index=is_index, entries=tuple(_descriptor(item) for item in raw))


def choose_platform(index: Manifest) -> Descriptor | None:
    """An index's linux/amd64 manifest, else its only one (attestations, `unknown/unknown`, aside)."""
    entries = [d for d in index.entries if d.platform != "unknown/unknown"]
    for entry in entries:
        if entry.platform == "linux/amd64":
            return entry
    return entries[0] if len(entries) == 1 else None


def _matches(name: str, suffixes: tuple[str, ...] | None) -> bool:
    return suffixes is None or name.lower().endswith(suffixes)


@dataclass(frozen=True)
class LayerChoice:
    """Where the file is: one titled layer's bytes, or inside these archive layers (in order)."""

    titled: Descriptor | None
    archives: tuple[Descriptor, ...] = ()


def choose_layers(
    layers: tuple[Descriptor, ...], *, suffixes: tuple[str, ...] | None, uri: str, what: str
) -> LayerChoice:
    """Which layers hold the file: the one titled layer whose name has a wanted suffix, else the tar layers.

    `suffixes` None wants any file: then the artifact must hold exactly one titled layer.

    Raises:
        BuildError: ModelNotFound when several titled layers match, or none does and no layer is a tar.
    """
    titled = [d for d in layers if d.title and _matches(d.title, suffixes)]
    if len(titled) == 1:
        return LayerChoice(titled=titled[0])
    if len(titled) > 1:
        raise BuildError(
            MODEL_NOT_FOUND,
            f"{what} {uri} holds several {_wanted(suffixes)} files, so which one is meant is unclear: "
            f"{_listing([d.title or '' for d in titled])}",
        )
    # A titled layer is one file (oras gives files the tar media type), unless it is a directory's tar.
    archives = tuple(d for d in layers if d.media_type in TAR_LAYERS and (not d.title or d.unpack))
    if not archives:
        holds = [d.title or f"an untitled {d.media_type or 'layer'}" for d in layers]
        raise BuildError(
            MODEL_NOT_FOUND,
            f"{what} {uri} holds no {_wanted(suffixes)} file: "
            f"it holds {_listing(holds) if holds else 'no layers'}",
        )
    return LayerChoice(titled=None, archives=archives)


def _wanted(suffixes: tuple[str, ...] | None) -> str:
    return "/".join(suffixes) if suffixes else "single"


def _listing(names: list[str]) -> str:
    shown = ", ".join(names[:_LISTED])
    return shown + (f" and {len(names) - _LISTED} more" if len(names) > _LISTED else "")


def model_member(name: str, suffixes: tuple[str, ...] | None) -> str | None:
    """A tar member's normalized path (`./models/m.onnx` -> `models/m.onnx`) if it is a wanted file."""
    path = _normalized(name)
    return path if path.startswith(MODELS_DIR) and _matches(path, suffixes) else None


def _normalized(name: str) -> str:
    path = name
    while path.startswith(("./", "/")):
        path = path[2:] if path.startswith("./") else path[1:]
    return path


@dataclass
class StackedFiles:
    """The wanted files of an image's layers, stacked as a runtime would: later layers win, whiteouts delete.

    Each file carries where the caller wrote it. `add` and the whiteouts are
    called layer by layer; a whiteout deletes only what earlier layers hold (OCI image spec).
    """

    files: dict[str, tuple[int, Path]] = field(default_factory=dict)
    seen: list[str] = field(default_factory=list)

    def add(self, path: str, layer: int, payload: Path) -> Path | None:
        """Record `path` from `layer`; the payload it replaces, if any (for the caller to drop)."""
        old = self.files.get(path)
        self.files[path] = (layer, payload)
        return old[1] if old else None

    def whiteout(self, member: str, layer: int) -> list[Path]:
        """Apply a `.wh.` member of `layer`; the payloads it deletes."""
        path = _normalized(member)
        directory, _, base = path.rpartition("/")
        prefix = f"{directory}/" if directory else ""
        if base == ".wh..wh..opq":
            doomed = [p for p, (lay, _) in self.files.items() if p.startswith(prefix) and lay < layer]
        else:
            target = prefix + base.removeprefix(".wh.")
            doomed = [
                p
                for p, (lay, _) in self.files.items()
                if (p == target or p.startswith(target + "/")) and lay < layer
            ]
        return [self.files.pop(p)[1] for p in doomed]


# ---------------------------------------------------------------------------------------------
# I/O: the registry conversation and the blob streams.


class _BlobReader(io.RawIOBase):
    """A blob's body as a file, hashed and counted as it is read; `verify` checks the descriptor."""

    def __init__(self, chunks: Iterator[bytes], descriptor: Descriptor, *, label: str) -> None:
        super().__init__()
        self._chunks = chunks
        self._pending = memoryview(b"")  # the chunk being handed out, without copying its rest
        self._hash = hashlib.sha256()
        self._size = 0
        self._descriptor = descriptor
        self._label = label

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        while not self._pending:
            chunk = next(self._chunks, None)
            if chunk is None:
                return 0
            self._size += len(chunk)
            if self._size > self._descriptor.size:
                raise self._mismatch(f"it is longer than its descriptor's {self._descriptor.size} bytes")
            self._hash.update(chunk)
            self._pending = memoryview(chunk)
        count = min(len(view), len(self._pending))
        view[:count] = self._pending[:count]
        self._pending = self._pending[count:]
        return count

    def drain(self) -> None:
        """Read the rest (a tar's padding after its end), so that the digest covers the whole blob."""
        while self.read(CHUNK):
            pass

    def verify(self) -> None:
        """Raise ModelChecksumMismatch unless the bytes read are the descriptor's."""
        if self._size != self._descriptor.size:
            raise self._mismatch(f"it has {self._size} bytes, its descriptor {self._descriptor.size}")
        actual = f"sha256:{self._hash.hexdigest()}"
        if actual != self._descriptor.digest:
            raise self._mismatch(f"its bytes hash to {actual}")

    def _mismatch(self, problem: str) -> BuildError:
        return BuildError(
            MODEL_CHECKSUM_MISMATCH, f"{self._label}: blob {self._descriptor.digest}: {problem}"
        )


class _Bounded(io.RawIOBase):
    """A stream that refuses to yield more than `limit` bytes (decompressed layer output)."""

    def __init__(self, inner: io.BufferedIOBase, limit: int, *, label: str) -> None:
        super().__init__()
        self._inner = inner
        self._left = limit
        self._limit = limit
        self._label = label

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        data = self._inner.read(len(memoryview(buffer)))
        self._left -= len(data)
        if self._left < 0:
            raise BuildError(
                MODEL_TOO_LARGE, f"{self._label}: a layer unpacks to more than {self._limit} bytes"
            )
        memoryview(buffer).cast("B")[: len(data)] = data
        return len(data)


class _Registry:
    """One repository's conversation: auth (anonymous, then Basic or a Bearer token) and redirects."""

    def __init__(
        self,
        client: httpx.Client,
        ref: OciReference,
        *,
        credentials: tuple[str, str] | None,
        label: str,
        refusal: Callable[[str, str], str | None],
    ) -> None:
        self._client = client
        self._ref = ref
        self._credentials = credentials
        self._label = label
        self._refusal = refusal
        self._authorization: str | None = None
        self._answered = False  # the credentials (or a token) were sent: a 401 now is a refusal

    @contextlib.contextmanager
    def get(self, url: str, *, accept: str | None = None) -> Iterator[httpx.Response]:
        """A 200 answer to GET `url`, streamed; every other outcome raised as a BuildError."""
        for _ in range(2):  # once as we are, once more after answering a challenge
            response = self._send(url, accept)
            try:
                if response.status_code == 401 and not self._answered:
                    self._answer(response.headers.get("www-authenticate", ""))
                    continue
                self._check(response)
                yield response
                return
            finally:
                response.close()
        raise AssertionError("unreachable")  # pragma: no cover - the second pass returns or raises

    def _send(self, url: str, accept: str | None) -> httpx.Response:
        origin_host = urlsplit(url).netloc.lower()
        for _ in range(MAX_REDIRECTS + 1):
            headers = {"Accept": accept} if accept else {}
            if self._authorization and urlsplit(url).netloc.lower() == origin_host:
                headers["Authorization"] = self._authorization
            response = self._client.send(self._client.build_request("GET", url, headers=headers), stream=True)
            if not response.is_redirect:
                return response
            response.close()
            target = urljoin(url, response.headers.get("location", ""))
            refusal = self._refusal(url, target)
            if refusal:
                raise BuildError(MODEL_UNREACHABLE, f"{self._label}: {refusal} ({target}) refused")
            url = target
        raise BuildError(MODEL_UNREACHABLE, f"{self._label}: more than {MAX_REDIRECTS} redirects")

    def _answer(self, header: str) -> None:
        challenge = parse_www_authenticate(header)
        if challenge is not None and challenge.scheme == "basic":
            if self._credentials is None:
                raise BuildError(
                    MODEL_ACCESS_DENIED,
                    f"{self._label}: the registry {self._ref.registry} asks for credentials and the request "
                    "names no credentials Secret (a kubernetes.io/dockerconfigjson Secret)",
                )
            user, password = self._credentials
            self._authorization = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
        elif challenge is not None and challenge.scheme == "bearer" and challenge.params.get("realm"):
            self._authorization = f"Bearer {self._token(challenge)}"
        else:
            raise BuildError(
                MODEL_ACCESS_DENIED,
                f"{self._label}: the registry {self._ref.registry} answered 401 with an authentication "
                f"scheme the build does not speak ({(challenge.scheme if challenge else header) or 'none'})",
            )
        self._answered = True

    def _token(self, challenge: Challenge) -> str:
        realm = challenge.params["realm"]
        registry_url = f"https://{self._ref.api_host}/v2/"
        refusal = self._refusal(registry_url, realm)
        if urlsplit(realm).scheme != "https":
            refusal = "a token realm that is not https"
        if refusal:
            raise BuildError(MODEL_UNREACHABLE, f"{self._label}: {refusal} ({realm}) refused")
        params = {"scope": challenge.params.get("scope") or f"repository:{self._ref.api_repository}:pull"}
        if challenge.params.get("service"):
            params["service"] = challenge.params["service"]
        auth = self._credentials  # None: an anonymous token (public repositories on token registries)
        response = self._client.get(realm, params=params, auth=auth, follow_redirects=False)
        if response.status_code in {401, 403}:
            raise BuildError(
                MODEL_ACCESS_DENIED,
                f"{self._label}: the registry's token service refused "
                + ("the credentials" if auth else "an anonymous token")
                + f" (HTTP {response.status_code})",
            )
        if response.status_code != 200 or len(response.content) > MAX_MANIFEST_BYTES:
            raise BuildError(
                MODEL_UNREACHABLE,
                f"{self._label}: the registry's token service answered HTTP {response.status_code}",
            )
        try:
            doc = response.json()
        except ValueError:
            doc = None
        token = (doc.get("token") or doc.get("access_token")) if isinstance(doc, dict) else None
        if not isinstance(token, str) or not token:
            raise BuildError(
                MODEL_UNREACHABLE, f"{self._label}: the registry's token service answered no token"
            )
        return token

    def _check(self, response: httpx.Response) -> None:
        status = response.status_code
        if status == 200:
            return
        codes = _error_codes(response)
        said = f"HTTP {status}" + (f" {quoted(', '.join(codes))}" if codes else "")
        if status in {401, 403}:
            raise BuildError(
                MODEL_ACCESS_DENIED,
                f"{self._label}: the registry {self._ref.registry} refused "
                + ("the credentials" if self._credentials else "anonymous access")
                + f" ({said})",
            )
        if status == 404 or _NOT_FOUND_CODES.intersection(codes):
            raise BuildError(
                MODEL_NOT_FOUND, f"{self._label}: the registry {self._ref.registry} answered {said}"
            )
        raise BuildError(
            MODEL_UNREACHABLE, f"{self._label}: the registry {self._ref.registry} answered {said}"
        )


def _error_codes(response: httpx.Response) -> list[str]:
    """The distribution spec's error codes in an answer's body (`{"errors": [{"code": ...}]}`)."""
    body = b""
    try:
        for chunk in response.iter_bytes():
            body += chunk
            if len(body) > 65536:  # an error document is small: past this, no codes
                return []
        doc = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return []
    errors = doc.get("errors") if isinstance(doc, dict) else None
    if not isinstance(errors, list):
        return []
    return [str(e["code"]) for e in errors if isinstance(e, dict) and isinstance(e.get("code"), str)]


def _read_limited(response: httpx.Response, limit: int, label: str) -> bytes:
    body = bytearray()
    for chunk in response.iter_bytes(CHUNK):
        body += chunk
        if len(body) > limit:
            raise BuildError(MODEL_TOO_LARGE, f"{label}: a manifest larger than {limit} bytes: refused")
    return bytes(body)


def _fetch_manifest(registry: _Registry, ref: OciReference, label: str) -> Manifest:
    """The image or artifact manifest the URI pins, through an index if it names one."""
    digest = ref.digest
    for _ in range(_MAX_INDEX_DEPTH + 1):
        with registry.get(ref.url("manifests", digest), accept=MANIFEST_ACCEPT) as response:
            body = _read_limited(response, MAX_MANIFEST_BYTES, label)
            content_type = response.headers.get("content-type", "")
        refusal = manifest_digest_refusal(body, digest)
        if refusal:
            raise BuildError(MODEL_CHECKSUM_MISMATCH, f"{label}: manifest {digest}: {refusal}")
        try:
            manifest = parse_manifest(body, content_type)
        except ValueError as exc:
            raise BuildError(MODEL_NOT_FOUND, f"{label}: manifest {digest} cannot be read: {exc}") from exc
        if not manifest.is_index:
            return manifest
        chosen = choose_platform(manifest)
        if chosen is None:
            platforms = [d.platform or "no platform" for d in manifest.entries]
            raise BuildError(
                MODEL_NOT_FOUND,
                f"{label}: the index {digest} has no linux/amd64 manifest and more than one other "
                f"({_listing(platforms)})",
            )
        digest = chosen.digest
    raise BuildError(MODEL_NOT_FOUND, f"{label}: indexes nest deeper than {_MAX_INDEX_DEPTH} levels")


def _fetch_titled(
    registry: _Registry, ref: OciReference, layer: Descriptor, dest: Path, *, max_bytes: int, label: str
) -> tuple[str, int]:
    if layer.size > max_bytes:
        raise BuildError(
            MODEL_TOO_LARGE, f"{label} ({layer.title}) is larger than {max_bytes} bytes: refused"
        )
    with registry.get(ref.url("blobs", layer.digest)) as response:
        reader = _BlobReader(response.iter_bytes(CHUNK), layer, label=label)
        with dest.open("wb") as out:
            result = write_hashed(iter(lambda: reader.read(CHUNK), b""), out, max_bytes=max_bytes, what=label)
        reader.verify()
    return result


@dataclass
class _ArchiveScan:
    """The wanted files of an image's tar layers, each written to its own part file beside `dest`."""

    dest: Path
    suffixes: tuple[str, ...] | None
    max_bytes: int
    label: str
    stack: StackedFiles = field(default_factory=StackedFiles)
    parts: list[Path] = field(default_factory=list)
    results: dict[Path, tuple[str, int]] = field(default_factory=dict)

    def scan(self, archive: tarfile.TarFile, layer: int) -> None:
        """Read one layer's members in order (the archive is a stream: each is read as it passes)."""
        for member in archive:
            name = _normalized(member.name)
            if name.rpartition("/")[2].startswith(".wh."):
                for gone in self.stack.whiteout(name, layer):
                    gone.unlink(missing_ok=True)
                continue
            if member.isreg() or member.issym() or member.islnk():
                self.stack.seen.append(name)
            path = model_member(name, self.suffixes)
            source = archive.extractfile(member) if path is not None and member.isreg() else None
            if path is None or source is None:
                continue
            part = self.dest.with_name(f"{self.dest.name}.oci-{len(self.parts)}.part")
            self.parts.append(part)
            with part.open("wb") as out:
                self.results[part] = write_hashed(
                    iter(functools.partial(source.read, CHUNK), b""),
                    out,
                    max_bytes=self.max_bytes,
                    what=f"{self.label} ({path})",
                )
            replaced = self.stack.add(path, layer, part)
            if replaced is not None:
                replaced.unlink(missing_ok=True)


def _scan_layer(
    registry: _Registry, ref: OciReference, layer: Descriptor, index: int, scan: _ArchiveScan, limit: int
) -> None:
    if layer.size > limit:
        raise BuildError(MODEL_TOO_LARGE, f"{scan.label}: layer {layer.digest} is larger than {limit} bytes")
    with registry.get(ref.url("blobs", layer.digest)) as response:
        reader = _BlobReader(response.iter_bytes(CHUNK), layer, label=scan.label)
        unpacked: io.RawIOBase = reader
        if TAR_LAYERS[layer.media_type]:
            unpacked = _Bounded(gzip.GzipFile(fileobj=reader, mode="rb"), limit, label=scan.label)
        try:
            with tarfile.open(fileobj=unpacked, mode="r|") as archive:
                scan.scan(archive, index)
            while unpacked.read(CHUNK):  # past the archive's end: the digest covers the whole blob
                pass
        except (tarfile.TarError, OSError, EOFError, zlib.error) as exc:
            if isinstance(exc, OSError) and not isinstance(exc, gzip.BadGzipFile) and exc.errno:
                raise  # the disk, not the layer (write_hashed reports a full volume itself)
            reader.drain()
            reader.verify()  # a damaged blob is a checksum mismatch, not a bad archive
            raise BuildError(
                MODEL_NOT_FOUND,
                f"{scan.label}: layer {layer.digest} ({layer.media_type}) is not a readable tar: {exc}",
            ) from exc
        reader.drain()
        reader.verify()


def _fetch_from_archives(
    registry: _Registry,
    ref: OciReference,
    layers: tuple[Descriptor, ...],
    dest: Path,
    *,
    suffixes: tuple[str, ...] | None,
    max_bytes: int,
    label: str,
    what: str,
) -> tuple[str, int]:
    scan = _ArchiveScan(dest=dest, suffixes=suffixes, max_bytes=max_bytes, label=label)
    try:
        for index, layer in enumerate(layers):
            _scan_layer(registry, ref, layer, index, scan, max_bytes + ARCHIVE_OVERHEAD)
        found = sorted(scan.stack.files)
        if len(found) != 1:
            raise BuildError(MODEL_NOT_FOUND, _archive_miss(found, scan.stack.seen, suffixes, label, what))
        part = scan.stack.files[found[0]][1]
        part.replace(dest)
        return scan.results[part]
    finally:
        for part in scan.parts:
            part.unlink(missing_ok=True)


def _archive_miss(
    found: list[str], seen: list[str], suffixes: tuple[str, ...] | None, label: str, what: str
) -> str:
    wanted = f"{_wanted(suffixes)} file under /{MODELS_DIR}"
    if found:
        return f"{label} holds several {wanted}, so which one is meant is unclear: {_listing(found)}"
    under = [n for n in seen if n.startswith(MODELS_DIR)]
    holds = _listing(under or seen) if seen else "no files"
    return f"{label} holds no {wanted} (where a modelcar image keeps the {what}): it holds {holds}"


def fetch_oci(
    uri: str,
    dest: Path,
    *,
    credentials_dir: Path | None,
    credentials_secret: str | None,
    ca_bundle: str | None,
    timeout_s: float,
    max_bytes: int = MAX_FETCH_BYTES,
    what: str = "model",
    suffixes: tuple[str, ...] | None = (".onnx",),
) -> tuple[str, int]:
    """Pull the file an oci:// URI names into `dest`; its sha256 (hex) and size.

    `suffixes` names the file wanted (a model: `.onnx`); None wants the artifact's only file
    (calibration data, whose name the build does not prescribe).

    Raises:
        BuildError: UnsupportedModelUri, ModelCredentialsMissing, ModelUnreachable, ModelAccessDenied,
            ModelNotFound, ModelChecksumMismatch, ModelTooLarge, EngineStoreFull.
    """
    import httpx  # here, not at the top: a cache hit must not pay for its import

    ref = parse_oci_uri(uri)
    label = f"{what} {uri}"
    credentials = (
        read_registry_credentials(credentials_dir, credentials_secret, ref.registry)
        if credentials_secret
        else None
    )
    verify: ssl.SSLContext | bool = ssl.create_default_context(cafile=ca_bundle) if ca_bundle else True
    dest.parent.mkdir(parents=True, exist_ok=True)
    try:
        with httpx.Client(verify=verify, timeout=timeout_s, follow_redirects=False) as client:
            registry = _Registry(
                client, ref, credentials=credentials, label=label, refusal=lambda a, b: redirect_refusal(a, b)
            )
            manifest = _fetch_manifest(registry, ref, label)
            choice = choose_layers(manifest.entries, suffixes=suffixes, uri=uri, what=what)
            if choice.titled is not None:
                return _fetch_titled(registry, ref, choice.titled, dest, max_bytes=max_bytes, label=label)
            return _fetch_from_archives(
                registry,
                ref,
                choice.archives,
                dest,
                suffixes=suffixes,
                max_bytes=max_bytes,
                label=label,
                what=what,
            )
    except BuildError:
        dest.unlink(missing_ok=True)
        raise
    except httpx.HTTPError as exc:
        dest.unlink(missing_ok=True)
        raise BuildError(MODEL_UNREACHABLE, f"cannot pull {label}: {type(exc).__name__}: {exc}") from exc
