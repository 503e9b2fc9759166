"""The content-addressed engine store on disk (I/O module).

Layout under the store root (a PVC in the cluster, a directory locally)::

    engines/<engineKey>/                 one complete engine, published by rename
        manifest.json                    EngineManifest (written last before publishing)
        profile.json                     EngineProfile of `tailpilot profile --engine` (a local Triton)
        profiles/<profileKey>.json       EngineProfile measured by a profile Job where the engine serves
        repository/<modelName>/config.pbtxt
        repository/<modelName>/1/model.onnx | model.plan | model.py + model.onnx
    index/<indexKey>.json                {"engineKey": ...}: request -> engine
    tmp/<random>/                        builds in progress; never read as engines

Publishing writes everything into `tmp/`, fsyncs files and directories, then
renames the directory to `engines/<key>` (atomic on one filesystem). A crashed
build leaves only a `tmp/` directory, which no reader looks at. An engine is
complete exactly when `engines/<key>/manifest.json` exists.

Garbage collection (`collect`, run by every build before it fetches anything):

- What "used" means. An engine is used while a service serves it, is profiled or
  is a candidate (its key is on some InferenceService's status), and when a build
  publishes it or finds it (a cache hit); serving pods copy it from the store when
  they start, so an engine a service serves must stay for as long as it serves:
  the next pod of that service reads it, maybe months after its build. A
  last-used marker alone cannot know that (nothing touches the engine while it
  serves), so the operator tells the build the keys on its namespace's services'
  statuses (`keep`), and those are never removed, whatever their age or the
  size budget.
- The marker (`engines/<key>/.last-used`, its mtime) covers the rest: the
  engine a build has just published or found, which the service's status names
  only once the operator reads the build's result, and what a build Job created
  before it was published could not be told. Nothing idle for less than
  `min_idle_s` (6 hours: far past a build Job's deadline, pending time
  included) is removed, so an engine between its build and the status that
  names it is safe from every other build's GC.
- Retention: an unreferenced engine idle for longer than `retention_s` is
  removed. Size budget: while the engines take more than `budget_bytes`,
  unreferenced engines idle past `min_idle_s` go, least recently used first. An
  engine is taken out as `discard` does (renamed into `tmp/`, then deleted), so
  no reader finds half of one; an index entry is dropped with its engine.
- What GC removed, and the bytes freed, go to the build's log and its result.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import shutil
import tempfile
import time
from collections.abc import Collection as Keys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from tailpilot.api.engine import AccuracyReport, TensorSpec

MANIFEST = "manifest.json"
PROFILE = "profile.json"
PROFILES = "profiles"
REPOSITORY = "repository"
#: Seconds a staging directory may go untouched before a build takes it as abandoned: far past the
#: longest build (a TensorRT build of a large model takes tens of minutes; its directory's mtime
#: moves whenever a file is added to it).
STALE_STAGING_S = 6 * 3600.0
#: A volume with less than this share free is full, for a build that failed writing to it.
FULL_FREE_FRACTION = 0.01
#: The engine's last-used marker: its mtime is when a build last published or found the engine.
LAST_USED = ".last-used"
#: An engine idle for less than this is never collected (see the module docstring).
GC_MIN_IDLE_S = 6 * 3600.0
#: An unreferenced engine idle for longer than this is collected (the operator's default).
GC_RETENTION_S = 30 * 86400.0


@dataclass(frozen=True)
class Collection:
    """What one garbage collection removed, and what the store holds after it."""

    removed: tuple[str, ...] = ()
    freed_bytes: int = 0
    kept_bytes: int = 0

    def describe(self) -> str:
        """One line for the build's log."""
        removed = ", ".join(k[:12] for k in self.removed) or "nothing"
        return (
            f"store GC removed {len(self.removed)} engine(s) ({removed}), freeing {self.freed_bytes} "
            f"bytes; {self.kept_bytes} bytes of engines kept"
        )


class EngineManifest(BaseModel):
    """Content of `manifest.json`: what the engine is and how it was made."""

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    engine_key: str = Field(alias="engineKey")
    builder_version: str = Field(alias="builderVersion")
    created_at: str = Field(alias="createdAt")
    build_seconds: float = Field(alias="buildSeconds")
    #: The BuildRequest, camelCase, as given.
    request: dict[str, Any]
    model_sha256: str = Field(alias="modelSha256")
    calibration_sha256: str | None = Field(default=None, alias="calibrationSha256")
    library_versions: dict[str, str] = Field(alias="libraryVersions")
    triton_backend: str = Field(alias="tritonBackend")
    model_name: str = Field(alias="modelName")
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    #: Relative path -> sha256 of every file of the engine except the manifest and profile.
    files: dict[str, str]
    #: How the engine was made (e.g. "onnxruntime graph optimization level extended", the trtexec command).
    method: str = ""
    #: The device the build ran on (GPU name, or "cpu").
    built_on: str = Field(default="cpu", alias="builtOn")
    #: The engine's outputs against the FP32 source model (None for engines built before the guard).
    accuracy: AccuracyReport | None = None


def _sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def fsync_tree(root: Path) -> None:
    """Flush every file and directory under `root` to disk."""
    for dirpath, _, filenames in os.walk(root):
        for name in filenames:
            fd = os.open(os.path.join(dirpath, name), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        _fsync_dir(Path(dirpath))


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomic(path: Path, text: str) -> None:
    """Replace `path` with `text` atomically (temp file in the same directory, fsync, rename)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    _fsync_dir(path.parent)


def is_out_of_space(exc: BaseException) -> bool:
    """Whether `exc` is the filesystem saying it is full (no space, or a quota reached)."""
    return isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT)


def out_of_space_message(root: Path, exc: OSError) -> str:
    """The EngineStoreFull message: where the write failed and what the store's volume has left."""
    where = f" writing {exc.filename}" if exc.filename else ""
    try:
        usage = shutil.disk_usage(root)
        figures = f"{usage.free} of {usage.total} bytes free on the store's volume"
    except OSError:
        figures = "the store's volume could not be measured"
    return (
        f"no space left{where} ({exc.strerror or exc}; {figures}); nothing was published and the engine "
        "serving, if any, keeps serving. Free space on the engine store (older engines go by the store's "
        "retention and size budget) or give it a larger volume; the build is retried with back-off"
    )


class EngineStore:
    """An engine store rooted at a directory."""

    def __init__(self, root: Path | str) -> None:
        """Use (and create when missing) the store at `root`."""
        self.root = Path(root)
        self.engines = self.root / "engines"
        self.index = self.root / "index"
        self.tmp = self.root / "tmp"

    def engine_dir(self, key: str) -> Path:
        """Where the engine with this key lives once published."""
        return self.engines / key

    def lookup(self, key: str) -> Path | None:
        """Return the published engine's directory, or None when there is no complete engine with this key."""
        path = self.engine_dir(key)
        return path if (path / MANIFEST).is_file() else None

    def lookup_index(self, index_key: str) -> str | None:
        """Engine key recorded for this index key, if that engine is still complete in the store."""
        try:
            key = str(json.loads((self.index / f"{index_key}.json").read_text())["engineKey"])
        except (FileNotFoundError, KeyError, ValueError):
            return None
        return key if self.lookup(key) else None

    def record_index(self, index_key: str, engine_key: str) -> None:
        """Point the index entry at an engine (atomic)."""
        write_atomic(self.index / f"{index_key}.json", json.dumps({"engineKey": engine_key}) + "\n")

    def profile_path(self, key: str, profile_key: str) -> Path:
        """Where the profile Job caches the profile `profile_key` of engine `key`."""
        return self.engine_dir(key) / PROFILES / f"{profile_key}.json"

    def read_manifest(self, key: str) -> EngineManifest:
        """Read a published engine's manifest."""
        return EngineManifest.model_validate_json((self.engine_dir(key) / MANIFEST).read_text())

    def damage(self, key: str) -> str | None:
        """What is wrong with a published engine (None: its manifest reads and every file matches it).

        Read on every cache hit: a file changed or lost on the volume since its build, or a manifest
        that no longer parses, would otherwise be served (or fail every build after it) for ever.
        Hashing costs a read of the engine (an ONNX Runtime engine is megabytes; a TensorRT plan of
        hundreds reads in well under a second).
        """
        try:
            manifest = self.read_manifest(key)
        except (OSError, ValueError) as exc:
            return f"its manifest cannot be read ({type(exc).__name__})"
        root = self.engine_dir(key)
        for name, expected in sorted(manifest.files.items()):
            try:
                actual = _sha256_of(root / name)
            except OSError:
                return f"{name} is missing"
            if actual != expected:
                return f"{name} has sha256 {actual[:12]}..., its manifest says {expected[:12]}..."
        return None

    def discard(self, key: str) -> None:
        """Take an engine out of the store (renamed into `tmp/` first, so no reader finds half)."""
        self.tmp.mkdir(parents=True, exist_ok=True)
        aside = Path(tempfile.mkdtemp(prefix=f"removed-{key[:12]}-", dir=self.tmp))
        try:
            os.rename(self.engine_dir(key), aside / "engine")
        except FileNotFoundError:
            pass  # another build discarded it first
        shutil.rmtree(aside, ignore_errors=True)

    def collect_staging(
        self, *, older_than_s: float = STALE_STAGING_S, now_s: float | None = None
    ) -> list[str]:
        """Remove staging directories no build can still be writing (untouched for `older_than_s`).

        `staging()` removes its directory when the build ends, even on an error; only a build killed
        outright (SIGKILL, an OOM kill, the node lost) leaves one, which nothing would ever read. Every
        build collects those first. Returns the names removed.
        """
        if not self.tmp.is_dir():
            return []
        now = time.time() if now_s is None else now_s
        removed = []
        for entry in self.tmp.iterdir():
            try:
                # A build writes into work/ and engine/ below its directory: their times move too.
                touched = max(p.stat().st_mtime for p in (entry, *entry.iterdir()))
            except (FileNotFoundError, NotADirectoryError):
                continue  # removed meanwhile by its own build, or not a build's directory
            idle = now - touched
            if idle > older_than_s:
                shutil.rmtree(entry, ignore_errors=True)
                removed.append(entry.name)
        return sorted(removed)

    @contextlib.contextmanager
    def staging(self) -> Iterator[Path]:
        """Yield a fresh directory under `tmp/` for one build; removed afterwards (published or not).

        A build that fails while the store's volume is full fails for that, whatever its tools said
        (ONNX Runtime reports a failed write as "Protobuf serialization failed"): the failure is
        raised as ENOSPC, checked here, before the staging directory is removed and frees the space.
        """
        self.tmp.mkdir(parents=True, exist_ok=True)
        path = Path(tempfile.mkdtemp(prefix="build-", dir=self.tmp))
        try:
            yield path
        except Exception as exc:
            if not is_out_of_space(exc) and self.nearly_full():
                full = f"the store's volume is full ({type(exc).__name__}: {exc})"
                raise OSError(errno.ENOSPC, full) from exc
            raise
        finally:
            shutil.rmtree(path, ignore_errors=True)

    def nearly_full(self) -> bool:
        """Whether the store's volume has less than FULL_FREE_FRACTION of it free."""
        try:
            usage = shutil.disk_usage(self.root)
        except OSError:
            return False
        return usage.free < usage.total * FULL_FREE_FRACTION

    def publish(self, staged: Path, key: str) -> Path:
        """Atomically move a fully written engine directory into place; return its final path.

        `staged` must contain `manifest.json`. When another build published the same key
        first, its engine is kept (same key, same engine) and `staged` is left for cleanup.
        """
        if not (staged / MANIFEST).is_file():
            raise ValueError(f"{staged} has no {MANIFEST}; refusing to publish an incomplete engine")
        fsync_tree(staged)
        self.engines.mkdir(parents=True, exist_ok=True)
        final = self.engine_dir(key)
        try:
            os.rename(staged, final)
        except OSError:
            if self.lookup(key):  # lost a race with an identical build: fine
                return final
            raise
        _fsync_dir(self.engines)
        return final

    def touch(self, key: str, *, now_s: float | None = None) -> None:
        """Mark the engine used now (a build published or found it)."""
        marker = self.engine_dir(key) / LAST_USED
        marker.touch()
        now = time.time() if now_s is None else now_s
        os.utime(marker, (now, now))

    def last_used(self, key: str) -> float:
        """When the engine was last marked used (its manifest's time for an engine never marked)."""
        root = self.engine_dir(key)
        for name in (LAST_USED, MANIFEST):
            with contextlib.suppress(FileNotFoundError):
                return (root / name).stat().st_mtime
        return 0.0

    def size_of(self, key: str) -> int:
        """Bytes of the engine's files (its profiles included)."""
        total = 0
        for dirpath, _, filenames in os.walk(self.engine_dir(key)):
            for name in filenames:
                with contextlib.suppress(FileNotFoundError):
                    total += os.lstat(os.path.join(dirpath, name)).st_size
        return total

    def collect(
        self,
        *,
        keep: Keys[str],
        retention_s: float = GC_RETENTION_S,
        budget_bytes: int | None = None,
        min_idle_s: float = GC_MIN_IDLE_S,
        now_s: float | None = None,
    ) -> Collection:
        """Remove unreferenced engines idle past `retention_s`, then LRU ones while over `budget_bytes`.

        `keep`: the engine keys some service's status names; never removed. Nothing idle for less
        than `min_idle_s` is removed either (see the module docstring for why both are needed).
        """
        now = time.time() if now_s is None else now_s
        engines = [(self.last_used(k), k, self.size_of(k)) for k in self.published_keys()]
        total = sum(size for _, _, size in engines)
        removable = sorted(
            (used, key, size)
            for used, key, size in engines
            if key not in keep and now - used > max(min_idle_s, 0.0)
        )
        removed, freed = [], 0
        for used, key, size in removable:  # least recently used first
            expired = now - used > retention_s
            over_budget = budget_bytes is not None and total - freed > budget_bytes
            if not (expired or over_budget):
                continue
            self.discard(key)
            removed.append(key)
            freed += size
        if removed:
            self._drop_index_entries(set(removed))
        return Collection(removed=tuple(sorted(removed)), freed_bytes=freed, kept_bytes=total - freed)

    def _drop_index_entries(self, gone: set[str]) -> None:
        if not self.index.is_dir():
            return
        for entry in self.index.glob("*.json"):
            try:
                key = str(json.loads(entry.read_text())["engineKey"])
            except (FileNotFoundError, KeyError, ValueError):
                continue
            if key in gone:
                with contextlib.suppress(FileNotFoundError):
                    entry.unlink()

    def published_keys(self) -> list[str]:
        """Keys of all complete engines."""
        if not self.engines.is_dir():
            return []
        return sorted(p.name for p in self.engines.iterdir() if (p / MANIFEST).is_file())
