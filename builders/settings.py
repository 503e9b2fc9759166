"""What the build environment provides a build: filled by the CLI from flags and the environment.

Its own module so that the engine backends (`builders/backends/`) can read it without importing
the build that calls them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tailpilot.builders.fetch import FetchOptions
from tailpilot.builders.store import GC_RETENTION_S


@dataclass(frozen=True)
class BuildSettings:
    """What the build environment provides (filled by the CLI from flags and environment)."""

    fetch: FetchOptions = field(default_factory=FetchOptions)
    #: trtexec path, None when TensorRT is not installed.
    trtexec: str | None = None
    #: nvidia-smi name of the GPU the build runs on, None without a GPU.
    gpu_name: str | None = None
    #: The store's garbage collection before the build; None: none (a local `tailpilot build`).
    gc: StoreGcPolicy | None = None


@dataclass(frozen=True)
class StoreGcPolicy:
    """What the operator tells a build Job about the store's garbage collection (`EngineStore.collect`)."""

    #: Engine keys some service's status names in the store's namespace: never removed.
    keep: frozenset[str] = frozenset()
    retention_s: float = GC_RETENTION_S
    #: Bytes the engines may take before the least recently used unreferenced ones go; None: no budget.
    budget_bytes: int | None = None
