"""The engine store's garbage collection, and a full store: real files, a real size-limited filesystem.

The full store is a tmpfs of a few hundred KiB, mounted in a user and mount namespace of a child
process (`unshare --user --map-root-user --mount`: no root needed), in which the real build runs
with its store there; its writes meet the kernel's ENOSPC, nothing is simulated.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tailpilot.api.engine import BuildOutcome, BuildRequest, BuildResult
from tailpilot.builders.build import BuildSettings, StoreGcPolicy, run_build
from tailpilot.builders.errors import ENGINE_STORE_FULL
from tailpilot.builders.store import GC_MIN_IDLE_S, LAST_USED, MANIFEST, EngineStore, write_atomic

DAY = 86400.0
NOW = 1_900_000_000.0


def put_engine(store: EngineStore, key: str, *, size: int, used_days_ago: float, now_s: float = NOW) -> None:
    """Publish an engine of `size` bytes last used `used_days_ago` days before `now_s`."""
    with store.staging() as staging:
        engine = staging / "engine"
        (engine / "repository" / "m" / "1").mkdir(parents=True)
        (engine / "repository" / "m" / "1" / "model.onnx").write_bytes(b"w" * size)
        write_atomic(engine / MANIFEST, "{}")
        store.publish(engine, key)
    store.touch(key, now_s=now_s - used_days_ago * DAY)


def test_unused_engines_past_the_retention_go_and_engines_in_use_never_do(tmp_path: Path) -> None:
    store = EngineStore(tmp_path)
    put_engine(store, "old", size=1000, used_days_ago=40)
    put_engine(store, "old-but-serving", size=1000, used_days_ago=400)
    put_engine(store, "recent", size=1000, used_days_ago=3)
    store.record_index("req-old", "old")
    store.record_index("req-recent", "recent")
    collection = store.collect(keep={"old-but-serving"}, retention_s=30 * DAY, now_s=NOW)
    assert collection.removed == ("old",)
    assert collection.freed_bytes >= 1000
    assert store.published_keys() == ["old-but-serving", "recent"]
    # Its index entry went with it; the others stay; nothing is left half-removed in tmp/.
    assert not (store.index / "req-old.json").exists() and store.lookup_index("req-recent") == "recent"
    assert list(store.tmp.iterdir()) == []
    assert "removed 1 engine(s) (old)" in collection.describe()


def test_over_the_budget_the_least_recently_used_unreferenced_engines_go_first(tmp_path: Path) -> None:
    store = EngineStore(tmp_path)
    for key, days in (("a", 5), ("b", 4), ("c", 3), ("serving", 9)):
        put_engine(store, key, size=10_000, used_days_ago=days)
    put_engine(store, "just-built", size=10_000, used_days_ago=GC_MIN_IDLE_S / DAY / 2)
    sizes = {k: store.size_of(k) for k in store.published_keys()}
    budget = sizes["serving"] + sizes["just-built"] + sizes["c"]
    collection = store.collect(keep={"serving"}, retention_s=30 * DAY, budget_bytes=budget, now_s=NOW)
    # a then b (oldest first) bring it to the budget; c stays; the engine in use stays though
    # older; the one just built stays though unnamed (no status names it yet).
    assert collection.removed == ("a", "b")
    assert store.published_keys() == ["c", "just-built", "serving"]
    assert collection.kept_bytes == budget
    # A budget nothing removable can reach removes what it may and stops there.
    tight = store.collect(keep={"serving"}, budget_bytes=1, now_s=NOW)
    assert tight.removed == ("c",) and store.published_keys() == ["just-built", "serving"]


def test_a_build_touches_what_it_publishes_and_finds_and_reports_its_gc(
    make_request: Callable[..., BuildRequest], store: Path
) -> None:
    engines = EngineStore(store)
    put_engine(engines, "forgotten", size=100, used_days_ago=90, now_s=time.time())
    lines: list[str] = []
    settings = BuildSettings(gc=StoreGcPolicy(keep=frozenset(), retention_s=30 * DAY))
    result = run_build(make_request(), settings, progress=lines.append)
    assert result.outcome == BuildOutcome.SUCCEEDED, result.message
    assert result.store_gc is not None and result.store_gc.removed == 1
    assert any("store GC removed 1 engine(s) (forgotten)" in line for line in lines)
    marker = store / "engines" / result.engine_key / LAST_USED
    two_days_ago = time.time() - 2 * DAY
    os.utime(marker, (two_days_ago, two_days_ago))  # as if last used two days ago...
    again = run_build(make_request(), settings, progress=lines.append)
    assert again.cache_hit and again.store_gc is not None and again.store_gc.removed == 0
    assert marker.stat().st_mtime > two_days_ago + DAY  # ...a hit is a use
    # Reported in the result the operator reads.
    assert json.loads(again.to_termination_message())["storeGc"]["removed"] == 0


# ---- a full store ---------------------------------------------------------------------------------

_BUILD_IN_SMALL_FS = """
import sys
from pathlib import Path
from tailpilot.api.engine import BuildRequest
from tailpilot.builders.build import BuildSettings, run_build
request = BuildRequest.model_validate_json(sys.argv[1])
print(run_build(request, BuildSettings(), progress=lambda line: None).model_dump_json(by_alias=True))
"""


def build_in_small_filesystem(
    mount: Path, size: str, request: BuildRequest, *, before: str = "", after: str = ""
) -> tuple[BuildResult, str]:
    """Run the build with its store on a tmpfs of `size`, mounted for one child process alone.

    `before` and `after` are shell commands run there around the build (the tmpfs is gone once the
    child exits); returns the build's result and what `after` printed.
    """
    if shutil.which("unshare") is None:
        pytest.skip("unshare (util-linux) is not installed: no size-limited filesystem without root")
    mount.mkdir(parents=True, exist_ok=True)
    script = (
        f"mount -t tmpfs -o size={size} tmpfs {mount} && {before or 'true'} && "
        f'"{sys.executable}" -P -c "$0" "$1" && echo ---- && {after or "true"}'
    )
    proc = subprocess.run(  # noqa: S603 - fixed arguments
        ["unshare", "--user", "--map-root-user", "--mount", "sh", "-c", script]
        + [_BUILD_IN_SMALL_FS, request.model_dump_json(by_alias=True)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if proc.returncode != 0 and "unshare" in proc.stderr:
        pytest.skip(f"user namespaces are not available here: {proc.stderr.strip()}")
    assert proc.returncode == 0, proc.stderr
    built, _, listed = proc.stdout.partition("----\n")
    return BuildResult.model_validate_json(built.strip().splitlines()[-1]), listed


@pytest.mark.parametrize(
    ("size", "where"),
    [
        ("300k", "the model's download"),  # the fetch's own write fails
        ("900k", "the engine's write"),  # ONNX Runtime cannot write the optimized model
    ],
)
def test_a_full_store_is_a_named_failure_and_publishes_nothing(
    make_request: Callable[..., BuildRequest], tmp_path: Path, size: str, where: str
) -> None:
    mount = tmp_path / "small"
    store = mount / "store"
    result, listed = build_in_small_filesystem(
        mount, size, make_request(store=str(store)), after=f"ls -A {store}/engines {store}/tmp 2>&1; true"
    )
    assert (result.outcome, result.reason) == (BuildOutcome.FAILED, ENGINE_STORE_FULL), (where, result)
    assert "no space left" in result.message and "nothing was published" in result.message
    assert listed.split() == [f"{store}/tmp:"] or "No such file" in listed, listed  # no engine, no staging


def test_an_engine_already_published_survives_a_build_that_fills_the_store(
    make_request: Callable[..., BuildRequest], tmp_path: Path
) -> None:
    mount = tmp_path / "small"
    store, serving = mount / "store", "s" * 32
    seed = (
        f"mkdir -p {store}/engines/{serving} && printf '{{}}' > {store}/engines/{serving}/{MANIFEST} && "
        f"head -c 100000 /dev/zero > {store}/engines/{serving}/weights"
    )
    after = f"ls -A {store}/engines {store}/tmp; wc -c < {store}/engines/{serving}/weights"
    result, listed = build_in_small_filesystem(
        mount, "1000k", make_request(store=str(store)), before=seed, after=after
    )
    assert result.reason == ENGINE_STORE_FULL, result
    # Only the engine that was there, whole; no staging left behind.
    assert listed.split() == [f"{store}/engines:", serving, f"{store}/tmp:", "100000"], listed
