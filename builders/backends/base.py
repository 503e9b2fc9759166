"""What the build needs from an engine backend (`EngineBackend`), and what it hands one.

The build (`builders/build.py`) owns every step that is the same for all backends: fetching,
verifying the model, the engine key, the store, the Triton model config, the manifest and the
accuracy guard. A backend answers only the questions whose answers differ between backends; each
member of `EngineBackend` is one of them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from tailpilot.api.engine import AccuracyReport, BuildRequest
from tailpilot.builders.fetch import Fetched
from tailpilot.builders.settings import BuildSettings

if TYPE_CHECKING:
    # Type-only: model_info loads onnx, which checking a request must not wait for.
    from tailpilot.builders.model_info import ModelInfo


@dataclass(frozen=True)
class EngineJob:
    """One engine to build, past the model's checks: what a backend's build and measurement read."""

    request: BuildRequest
    settings: BuildSettings
    #: The verified source model.
    info: ModelInfo
    model: Fetched
    calibration: Fetched | None
    #: Scratch directory inside the build's staging (removed with it).
    work: Path
    #: The engine store's root, for what outlives one build (e.g. TensorRT's timing cache).
    store_root: Path


@dataclass(frozen=True)
class BuiltEngine:
    """The engine file a backend produced, and how (the manifest's `method` line)."""

    file: Path
    method: str


class EngineBackend(Protocol):
    """One engine backend, registered under `name` (`registry.register`)."""

    @property
    def name(self) -> str:
        """The `BuildRequest.backend` value it builds (a `Backend` value for the built-in ones)."""
        ...

    @property
    def triton_backend(self) -> str:
        """Triton's backend serving its engines natively (one of `triton_model_config.BACKEND_FILES`)."""
        ...

    @property
    def needs_static_profile(self) -> bool:
        """Whether every dynamic non-batch input dimension needs a shape profile in the request."""
        ...

    def check(self, request: BuildRequest, settings: BuildSettings) -> None:
        """Refuse a request this backend cannot build here, before anything is downloaded.

        Raises:
            BuildError: With the reason a user can act on (target, precision, serving variant, tools).
        """
        ...

    def library_versions(self, settings: BuildSettings) -> Mapping[str, str]:
        """Versions of its own tools, beyond the ones every build records (part of the engine key)."""
        ...

    def build(self, job: EngineJob) -> BuiltEngine:
        """Produce the engine file in `job.work`.

        Raises:
            BuildError: When the engine cannot be built.
        """
        ...

    def measure_accuracy(self, job: EngineJob, engine_file: Path) -> AccuracyReport:
        """The engine's outputs against the FP32 source model's, or a report saying why not measured."""
        ...
