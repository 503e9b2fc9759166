"""Write a download to its file while hashing it, within a size bound (I/O module).

Shared by every fetch source (`fetch.py`: http(s), pvc://, file; `s3_source.py`: s3://), so that
each one hashes, bounds and reports a full volume the same way.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from tailpilot.builders.errors import ENGINE_STORE_FULL, MODEL_TOO_LARGE, BuildError
from tailpilot.builders.store import is_out_of_space, out_of_space_message

#: Bytes read and written at a time.
CHUNK = 1 << 20
#: Largest file a build fetches: an ONNX model is one protobuf, which cannot exceed 2 GiB; twice that
#: leaves room for calibration data, and bounds what a wrong or hostile URI can make the pod write.
MAX_FETCH_BYTES = 4 << 30


def write_hashed(
    chunks: Iterator[bytes], out: IO[bytes], *, max_bytes: int = MAX_FETCH_BYTES, what: str = "model"
) -> tuple[str, int]:
    """Write `chunks` to `out`; the sha256 (hex) and the size of what was written.

    Raises:
        BuildError: ModelTooLarge past `max_bytes` (the caller removes the partial file);
            EngineStoreFull when the volume is full.
    """
    h, size = hashlib.sha256(), 0
    for chunk in chunks:
        size += len(chunk)
        if size > max_bytes:
            raise BuildError(MODEL_TOO_LARGE, f"{what} is larger than {max_bytes} bytes: refused")
        h.update(chunk)
        try:
            out.write(chunk)
        except OSError as exc:
            # Said here, where it happens: a source may take other errors for "unreachable".
            if is_out_of_space(exc):
                raise BuildError(ENGINE_STORE_FULL, out_of_space_message(Path(out.name).parent, exc)) from exc
            raise
    return h.hexdigest(), size
