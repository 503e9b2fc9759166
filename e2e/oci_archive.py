"""OCI image archives written here, for containerd to import: no registry and no image builder needed.

An image is its layers (path -> bytes, some executable), an entrypoint and an environment. The
archive is an OCI image layout (`oci-layout`, `index.json`, `blobs/sha256/...`) in one tar, which
`ctr images import` reads; the index names the image (`io.containerd.image.name`) as the kubelet
asks for it, a short name normalised (`tailpilot/web:1` is `docker.io/tailpilot/web:1`), or the
kubelet reports `ErrImageNeverPull` for an image that is there.

    archive = write_archive(busybox_image("docker.io/tailpilot/web:1", ["/bin/busybox", "httpd", ...]), path)
"""

from __future__ import annotations

import io
import platform
import shutil
import tarfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tailpilot_e2e.oci_registry import (
    OCI_INDEX,
    OCI_MANIFEST,
    canonical_json,
    digest_of,
    image_manifest,
    tar_layer,
)

#: The annotation containerd names an imported image by.
CONTAINERD_IMAGE_NAME = "io.containerd.image.name"
#: The OCI annotation of an image's tag in a layout.
REF_NAME = "org.opencontainers.image.ref.name"
#: Go's names of the machines this runs on.
_GOARCH = {"x86_64": "amd64", "aarch64": "arm64"}


@dataclass(frozen=True)
class Layer:
    """One layer: the files (path in the image, no leading '/' -> bytes) and which are executable."""

    files: Mapping[str, bytes]
    executable: frozenset[str] = frozenset()


@dataclass(frozen=True)
class Image:
    """What an image is made of. `name` is a full reference (`docker.io/org/name:tag`)."""

    name: str
    layers: Sequence[Layer]
    entrypoint: Sequence[str]
    env: Sequence[str] = field(default=("PATH=/bin",))


def architecture() -> str:
    """This machine's architecture as images name it (amd64, arm64)."""
    machine = platform.machine()
    return _GOARCH.get(machine, machine)


def busybox_image(name: str, entrypoint: Sequence[str], *, files: Mapping[str, bytes] | None = None) -> Image:
    """An image of the host's static busybox (`/bin/busybox`) and `files`, running `entrypoint`.

    Debian's busybox-static is linked statically, so the binary alone is a working root filesystem.
    """
    found = shutil.which("busybox")
    if found is None:
        raise FileNotFoundError("busybox is not installed (Debian package busybox-static)")
    base = Layer({"bin/busybox": Path(found).read_bytes()}, executable=frozenset({"bin/busybox"}))
    layers = [base] if not files else [base, Layer(dict(files))]
    return Image(name=name, layers=layers, entrypoint=tuple(entrypoint))


def write_archive(image: Image, path: Path) -> Path:
    """Write `image` as an OCI image layout tar at `path`; return `path`."""
    blobs: dict[str, bytes] = {}

    def blob(data: bytes) -> dict[str, Any]:
        digest = digest_of(data)
        blobs[digest] = data
        return {"digest": digest, "size": len(data)}

    manifest = image_manifest(
        [(tar_layer(dict(layer.files), executable=layer.executable), False) for layer in image.layers],
        store=blob,
        architecture=architecture(),
        config={"Entrypoint": list(image.entrypoint), "Env": list(image.env)},
    )
    entry = {"mediaType": OCI_MANIFEST, **blob(canonical_json(manifest))}
    entry["platform"] = {"architecture": architecture(), "os": "linux"}
    entry["annotations"] = {CONTAINERD_IMAGE_NAME: image.name, REF_NAME: image.name.rsplit(":", 1)[-1]}
    index = {"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": [entry]}
    path.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(path, mode="w", format=tarfile.PAX_FORMAT) as archive:
        _add(archive, "oci-layout", canonical_json({"imageLayoutVersion": "1.0.0"}))
        _add(archive, "index.json", canonical_json(index))
        for digest, data in blobs.items():
            _add(archive, f"blobs/sha256/{digest.removeprefix('sha256:')}", data)
    return path


def _add(archive: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.mtime = len(data), 0o644, 0
    archive.addfile(info, io.BytesIO(data))
