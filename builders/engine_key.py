"""Content-addressed engine keys (pure).

The engine key hashes everything that changes the engine: the model bytes,
the calibration bytes, backend, precision, serving variant, shape profiles,
batching bounds, the target (CPU or GPU product), the builder version and the
versions of the libraries that produce the engine; and, for a CPU target with a
CPU limit, that limit, because the profile stored with the engine holds for it.
Two builds with the same key produce interchangeable engines, so the second one
is skipped.

The index key maps a request (`BuildRequest.request_key()`) plus the library
versions to an engine key, so a repeated request whose model bytes are pinned
by sha256 is answered without downloading the model again.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tailpilot.api.engine import BUILDER_VERSION, BuildRequest

#: Length of a key in hex characters (128 bits: collisions are not a concern).
KEY_HEX_CHARS = 32


@dataclass(frozen=True)
class EngineKeyInputs:
    """Everything the engine depends on."""

    model_sha256: str
    calibration_sha256: str | None
    request: BuildRequest
    library_versions: Mapping[str, str] = field(default_factory=dict)
    builder_version: str = BUILDER_VERSION


def _digest(document: Mapping[str, Any]) -> str:
    canonical = json.dumps(document, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:KEY_HEX_CHARS]


def engine_key(inputs: EngineKeyInputs) -> str:
    """Hash of everything that changes the engine (32 hex chars)."""
    r = inputs.request
    # The profile is stored with the engine and holds for the CPU limit it was measured under;
    # without a limit the document (and so every earlier key) is unchanged.
    cpu_limit = {} if r.cpu_limit_millis is None else {"cpuLimitMillis": r.cpu_limit_millis}
    return _digest(
        {
            **cpu_limit,
            "model": inputs.model_sha256,
            "calibration": inputs.calibration_sha256,
            "backend": r.backend,
            "precision": r.precision,
            "servingVariant": r.serving_variant,
            "modelName": r.model_name,
            "shapes": [s.model_dump(mode="json") for s in r.shapes],
            "maxBatchSize": r.max_batch_size,
            "target": r.target,
            "builder": inputs.builder_version,
            "libraries": dict(inputs.library_versions),
        }
    )


def index_key(request: BuildRequest, library_versions: Mapping[str, str]) -> str:
    """Key of the request index: the request's own key plus the library versions."""
    return _digest({"request": request.request_key(), "libraries": dict(library_versions)})


def index_is_trusted(request: BuildRequest) -> bool:
    """Whether the index may answer without reading the model: only when every input's bytes are pinned."""
    return bool(request.model_sha256) and (
        request.calibration_uri is None or bool(request.calibration_sha256)
    )
