"""Engine backends by name: the one table the build dispatches through.

A backend joins by its module in this folder and one line in `_BUILT_IN`; its name must also be a
`Backend` value (operator/api/backends.py) for a spec to ask for it. `register` and `unregister`
add and remove one at run time (a test's toy backend).
"""

from __future__ import annotations

from tailpilot.builders.backends.base import EngineBackend
from tailpilot.builders.backends.onnxruntime import OnnxRuntimeBackend
from tailpilot.builders.backends.tensorrt import TensorRtBackend
from tailpilot.builders.errors import INVALID_REQUEST, BuildError

_BUILT_IN: tuple[EngineBackend, ...] = (OnnxRuntimeBackend(), TensorRtBackend())

_BACKENDS: dict[str, EngineBackend] = {backend.name: backend for backend in _BUILT_IN}


def register(backend: EngineBackend) -> None:
    """Make `backend` buildable under its name.

    Raises:
        ValueError: When a backend of that name is registered already (replacing one silently
            would change what a request builds).
    """
    if backend.name in _BACKENDS:
        raise ValueError(f"an engine backend named {backend.name!r} is registered already")
    _BACKENDS[backend.name] = backend


def unregister(name: str) -> None:
    """Remove the backend registered as `name` (a no-op when there is none)."""
    _BACKENDS.pop(name, None)


def names() -> tuple[str, ...]:
    """The registered backends' names, sorted."""
    return tuple(sorted(_BACKENDS))


def lookup(name: str) -> EngineBackend:
    """The backend a request names.

    Raises:
        BuildError: InvalidBuildRequest when this builder has no backend of that name (e.g. a builder
            image older than the operator that asked).
    """
    backend = _BACKENDS.get(name)
    if backend is None:
        raise BuildError(
            INVALID_REQUEST,
            f"this builder has no engine backend {name!r}; it builds {', '.join(names())}",
        )
    return backend
