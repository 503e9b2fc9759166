"""The engine backends: the one place their names are spelled.

`Backend` is what `spec.engine.backend` accepts (the CRD's enum is generated from it, in this
order) and what the operator writes into a `BuildRequest`. How each one is built lives in
`tailpilot.builders.backends`, one module per backend, registered under the same name; a test
checks that every `Backend` has a builder.

A `BuildRequest` carries a `BackendName` rather than a `Backend`: the request is the build Job's
input, and which backends a builder can build is its registry's answer (`builders/cli.py` refuses
a name it does not hold as an invalid request), not a second copy of this list.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

from pydantic import Field


class Backend(StrEnum):
    """Engine backend."""

    TENSORRT = "tensorrt"
    ONNXRUNTIME = "onnxruntime"


#: A backend's name as a build request carries it: lower-case letters, digits and dashes, like
#: every `Backend` value (it is part of the engine key and of progress lines, never a path).
BackendName = Annotated[str, Field(pattern=r"^[a-z][a-z0-9-]*$", max_length=32)]
