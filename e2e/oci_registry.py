"""A real OCI registry on 127.0.0.1 for tests: CNCF Distribution's `registry`, TLS and htpasswd auth.

`e2e/build-binaries.sh` builds it from its Go module (`DISTRIBUTION_VERSION` in versions.env). It
serves the OCI distribution spec as registries in the field do: its certificate is signed by a CA
made with the project's own certificate helper (`pki.py`), so a client trusts it only when given
that CA; every request needs a user and password (htpasswd auth, which the registry reads only with
bcrypt entries and only over TLS), so anonymous and wrong-password pulls are refused for real.

The bcrypt entry is made with the system's libcrypt (libxcrypt, through ctypes): no Python package
and no `htpasswd` tool is needed. Content is pushed through the registry's HTTP API (monolithic
blob uploads, then the manifest), in the shapes `oras push` and a modelcar image build produce.

    registry = LocalRegistry(binary, tmp_dir).start()
    digest = registry.push_oras_artifact("models/m", "v1", {"model.onnx": data})
    uri = registry.uri("models/m", digest, tag="v1")   # oci://127.0.0.1:PORT/models/m:v1@sha256:...
    ... registry.ca_file, registry.user, registry.password ...
    registry.stop()
"""

from __future__ import annotations

import base64
import ctypes
import ctypes.util
import gzip
import hashlib
import io
import json
import secrets
import ssl
import tarfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urljoin

import httpx
import yaml

from tailpilot.builders.triton_server import free_port
from tailpilot_e2e import pki
from tailpilot_e2e.procs import Component, pid_runs, read_pid, start, stop

#: Name of the process (its PID file and log under the state directory).
NAME = "oci-registry"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
OCI_EMPTY = "application/vnd.oci.empty.v1+json"
OCI_IMAGE_CONFIG = "application/vnd.oci.image.config.v1+json"
OCI_LAYER_TAR = "application/vnd.oci.image.layer.v1.tar"
OCI_LAYER_TAR_GZIP = "application/vnd.oci.image.layer.v1.tar+gzip"
#: The type `oras push` gives an artifact when told none.
ORAS_ARTIFACT_TYPE = "application/vnd.unknown.artifact.v1"
TITLE = "org.opencontainers.image.title"


def bcrypt_hash(password: str, *, cost: int = 5) -> str:
    """A bcrypt (`$2b$`) hash of `password`, made by the system's libcrypt (libxcrypt).

    The lowest costs keep tests fast; the registry accepts any.
    """
    name = ctypes.util.find_library("crypt")
    if name is None:
        raise RuntimeError("libcrypt (libxcrypt) is not installed: it makes the registry's bcrypt entry")
    lib = ctypes.CDLL(name)
    lib.crypt_gensalt.restype = ctypes.c_char_p
    lib.crypt_gensalt.argtypes = [ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p, ctypes.c_int]
    lib.crypt.restype = ctypes.c_char_p
    lib.crypt.argtypes = [ctypes.c_char_p, ctypes.c_char_p]
    salt = lib.crypt_gensalt(b"$2b$", cost, None, 0)
    hashed = lib.crypt(password.encode(), salt) if salt else None
    if not hashed or not hashed.startswith(b"$2b$"):
        raise RuntimeError("libcrypt made no bcrypt hash (a libcrypt without bcrypt?)")
    return str(hashed.decode())


def digest_of(data: bytes) -> str:
    """`sha256:<hex>` of `data`."""
    return f"sha256:{hashlib.sha256(data).hexdigest()}"


def canonical_json(doc: dict[str, Any]) -> bytes:
    """`doc` as compact JSON with sorted keys: the bytes its digest is taken of."""
    return json.dumps(doc, separators=(",", ":"), sort_keys=True).encode()


def tar_layer(files: dict[str, bytes], *, executable: frozenset[str] = frozenset()) -> bytes:
    """A layer: `files` (path in the image -> bytes) as an uncompressed tar (`image_manifest` gzips).

    The paths in `executable` get mode 0755, the others 0644.
    """
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as archive:
        for path, data in files.items():
            info = tarfile.TarInfo(path)
            info.size, info.mtime = len(data), 0
            info.mode = 0o755 if path in executable else 0o644
            archive.addfile(info, io.BytesIO(data))
    return raw.getvalue()


def image_manifest(
    layers: list[tuple[bytes, bool]],
    *,
    store: Callable[[bytes], dict[str, Any]],
    architecture: str = "amd64",
    config: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The OCI manifest of an image of tar layers (uncompressed tar, gzip it or not), bottom first.

    Each blob (the layers as stored, then the image config) goes to `store`, which keeps it and
    returns its descriptor (`digest`, `size`). `config` is the image config's own `config` (an
    entrypoint, an environment).
    """
    descriptors, diff_ids = [], []
    for raw, compress in layers:
        diff_ids.append(digest_of(raw))
        blob = gzip.compress(raw, mtime=0) if compress else raw
        descriptors.append({"mediaType": OCI_LAYER_TAR_GZIP if compress else OCI_LAYER_TAR, **store(blob)})
    image_config = {
        "architecture": architecture,
        "os": "linux",
        "config": config or {},
        "rootfs": {"type": "layers", "diff_ids": diff_ids},
    }
    return {
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "config": {"mediaType": OCI_IMAGE_CONFIG, **store(canonical_json(image_config))},
        "layers": descriptors,
    }


@dataclass
class LocalRegistry:
    """One registry process on 127.0.0.1, its storage, config, PID file and log under `state`."""

    binary: Path
    state: Path
    #: The one htpasswd user; the password is random per registry.
    user: str = "tailpilot"
    password: str = field(default_factory=lambda: secrets.token_urlsafe(18))
    port: int = 0

    @property
    def host(self) -> str:
        """`127.0.0.1:PORT`, the registry part of an oci:// URI."""
        return f"127.0.0.1:{self.port}"

    @property
    def ca_file(self) -> Path:
        """The CA that signed the serving certificate."""
        return self.state / "pki" / "ca.crt"

    @property
    def storage(self) -> Path:
        """The filesystem storage root (blobs under docker/registry/v2/blobs/sha256/)."""
        return self.state / "storage"

    def uri(self, repository: str, digest: str, *, tag: str | None = None) -> str:
        """`oci://127.0.0.1:PORT/REPOSITORY[:TAG]@DIGEST`."""
        return f"oci://{self.host}/{repository}{f':{tag}' if tag else ''}@{digest}"

    def docker_config(self, *, password: str | None = None) -> dict[str, Any]:
        """A `.dockerconfigjson` document for this registry (another password, to be refused, if given)."""
        auth = base64.b64encode(f"{self.user}:{password or self.password}".encode()).decode()
        return {"auths": {self.host: {"auth": auth}}}

    def blob_file(self, digest: str) -> Path:
        """Where the filesystem storage keeps a blob's bytes (to tamper with them in a test)."""
        hex_digest = digest.removeprefix("sha256:")
        return self.storage / "docker/registry/v2/blobs/sha256" / hex_digest[:2] / hex_digest / "data"

    def start(self, *, timeout_s: float = 30.0) -> LocalRegistry:
        """Start the registry on a free port and wait (bounded) until it answers /v2/ over TLS."""
        if not self.binary.is_file():
            raise FileNotFoundError(
                f"{self.binary}: the registry is missing (`make binaries` or "
                "`bash e2e/build-binaries.sh distribution` builds it from its Go module, cached)"
            )
        self.port = free_port()
        self.storage.mkdir(parents=True, exist_ok=True)
        cert, key = self._serving_certificate()
        htpasswd = self.state / "htpasswd"
        htpasswd.write_text(f"{self.user}:{bcrypt_hash(self.password)}\n")
        config = self.state / "config.yml"
        config.write_text(
            yaml.safe_dump(
                {
                    "version": 0.1,
                    "log": {"level": "info", "accesslog": {"disabled": True}},
                    "storage": {
                        "filesystem": {"rootdirectory": str(self.storage)},
                        "delete": {"enabled": True},
                    },
                    "http": {
                        "addr": self.host,
                        "secret": secrets.token_hex(16),
                        "tls": {"certificate": str(cert), "key": str(key)},
                    },
                    "auth": {"htpasswd": {"realm": "tailpilot-test-registry", "path": str(htpasswd)}},
                }
            )
        )
        start(
            Component(
                name=NAME,
                argv=[str(self.binary), "serve", str(config)],
                ports=[self.port],
                is_ready=self._answers,
                ready_timeout_s=timeout_s,
                # No tracing exporter: the registry would otherwise try to reach a collector.
                env={"OTEL_TRACES_EXPORTER": "none"},
            ),
            state=self.state,
        )
        return self

    def _serving_certificate(self) -> tuple[Path, Path]:
        return pki.localhost_server_certificate(self.state / "pki", "oci-registry")

    def client(self) -> httpx.Client:
        """An HTTP client for the registry API: trusts the CA, sends the user and password."""
        return httpx.Client(
            base_url=f"https://{self.host}",
            verify=ssl.create_default_context(cafile=str(self.ca_file)),
            auth=(self.user, self.password),
            timeout=10,
        )

    def _answers(self) -> bool:
        try:
            with self.client() as client:
                return client.get("/v2/").status_code == 200
        except httpx.TransportError:
            return False  # not listening yet

    def push_blob(self, repository: str, data: bytes) -> dict[str, Any]:
        """Upload `data` (monolithic: POST an upload, PUT its bytes); its descriptor's digest and size."""
        digest = digest_of(data)
        with self.client() as client:
            started = client.post(f"/v2/{repository}/blobs/uploads/")
            started.raise_for_status()
            location = urljoin(f"https://{self.host}/", started.headers["location"])
            separator = "&" if "?" in location else "?"
            done = client.put(
                f"{location}{separator}digest={digest}",
                content=data,
                headers={"Content-Type": "application/octet-stream"},
            )
            done.raise_for_status()
        return {"digest": digest, "size": len(data)}

    def push_manifest(self, repository: str, reference: str, manifest: dict[str, Any]) -> str:
        """PUT a manifest (or index) under a tag (or its digest); the digest of the bytes sent."""
        body = canonical_json(manifest)
        digest = digest_of(body)
        with self.client() as client:
            answer = client.put(
                f"/v2/{repository}/manifests/{reference}",
                content=body,
                headers={"Content-Type": str(manifest["mediaType"])},
            )
            answer.raise_for_status()
        if answer.headers.get("docker-content-digest") not in {None, digest}:
            raise AssertionError(f"the registry names the manifest {answer.headers['docker-content-digest']}")
        return digest

    def push_oras_artifact(self, repository: str, tag: str, files: dict[str, bytes]) -> str:
        """Push `files` as `oras push` does (a titled layer per file, the empty config); its digest."""
        empty = b"{}"
        self.push_blob(repository, empty)
        layers = []
        for name, data in files.items():
            descriptor = self.push_blob(repository, data)
            layers.append({"mediaType": OCI_LAYER_TAR, **descriptor, "annotations": {TITLE: name}})
        manifest = {
            "schemaVersion": 2,
            "mediaType": OCI_MANIFEST,
            "artifactType": ORAS_ARTIFACT_TYPE,
            "config": {
                "mediaType": OCI_EMPTY,
                "digest": digest_of(empty),
                "size": len(empty),
                "data": base64.b64encode(empty).decode(),
            },
            "layers": layers,
            "annotations": {"org.opencontainers.image.created": "2026-01-01T00:00:00Z"},
        }
        return self.push_manifest(repository, tag, manifest)

    def push_image(self, repository: str, tag: str, layers: list[tuple[dict[str, bytes], bool]]) -> str:
        """Push an image of tar layers (files, gzip or not), bottom first, a minimal config; its digest."""
        manifest = image_manifest(
            [(tar_layer(files), compress) for files, compress in layers],
            store=lambda blob: self.push_blob(repository, blob),
        )
        return self.push_manifest(repository, tag, manifest)

    def push_modelcar(self, repository: str, tag: str, files: dict[str, bytes], *, gzip: bool = True) -> str:
        """Push a KServe modelcar-like image: one layer of `files` (`models/model.onnx`); its digest."""
        return self.push_image(repository, tag, [(files, gzip)])

    def push_index(self, repository: str, tag: str, manifests: list[tuple[str, str]]) -> str:
        """Push an image index of (manifest digest, `os/arch`) entries, each pushed before; its digest."""
        entries = []
        with self.client() as client:
            for digest, platform in manifests:
                head = client.head(f"/v2/{repository}/manifests/{digest}", headers={"Accept": OCI_MANIFEST})
                head.raise_for_status()
                os_name, _, arch = platform.partition("/")
                entries.append(
                    {
                        "mediaType": OCI_MANIFEST,
                        "digest": digest,
                        "size": int(head.headers["content-length"]),
                        "platform": {"os": os_name, "architecture": arch},
                    }
                )
        return self.push_manifest(
            repository, tag, {"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": entries}
        )

    def running(self) -> bool:
        """Whether the registry's process (by its PID file) still runs."""
        pid = read_pid(self.state / f"{NAME}.pid")
        return pid is not None and pid_runs(pid, str(self.binary))

    def stop(self) -> None:
        """Stop the registry by its PID (SIGTERM, then SIGKILL after a grace period)."""
        stop(NAME, state=self.state, binary=str(self.binary))
