from __future__ import annotations

from pathlib import Path

import pytest

from tailpilot.builders.store import MANIFEST, EngineStore, write_atomic


def stage_engine(staging: Path, content: str) -> Path:
    engine = staging / "engine"
    (engine / "repository" / "m" / "1").mkdir(parents=True)
    (engine / "repository" / "m" / "1" / "model.onnx").write_text(content)
    return engine


def test_publish_is_a_rename_and_cleans_staging(tmp_path: Path) -> None:
    store = EngineStore(tmp_path)
    with store.staging() as staging:
        engine = stage_engine(staging, "weights")
        write_atomic(engine / MANIFEST, "{}")
        final = store.publish(engine, "k1")
    assert final == tmp_path / "engines" / "k1"
    assert (final / "repository" / "m" / "1" / "model.onnx").read_text() == "weights"
    assert store.lookup("k1") == final
    assert list(store.tmp.iterdir()) == []


def test_a_crashed_build_leaves_no_engine(tmp_path: Path) -> None:
    store = EngineStore(tmp_path)
    with pytest.raises(RuntimeError), store.staging() as staging:
        stage_engine(staging, "half")
        raise RuntimeError("killed mid-build")
    assert store.published_keys() == []
    assert list(store.tmp.iterdir()) == []


def test_an_engine_without_manifest_is_never_published_or_found(tmp_path: Path) -> None:
    store = EngineStore(tmp_path)
    with store.staging() as staging:
        engine = stage_engine(staging, "weights")
        with pytest.raises(ValueError, match="incomplete engine"):
            store.publish(engine, "k1")
    # A directory that appeared by other means, without a manifest, does not count as an engine.
    (tmp_path / "engines" / "k2").mkdir(parents=True)
    assert store.lookup("k1") is None and store.lookup("k2") is None
    assert store.published_keys() == []


def test_losing_a_publish_race_keeps_the_first_engine(tmp_path: Path) -> None:
    store = EngineStore(tmp_path)
    for content in ("first", "second"):
        with store.staging() as staging:
            engine = stage_engine(staging, content)
            write_atomic(engine / MANIFEST, "{}")
            store.publish(engine, "same")
    assert (tmp_path / "engines" / "same" / "repository" / "m" / "1" / "model.onnx").read_text() == "first"


def test_index_points_only_at_complete_engines(tmp_path: Path) -> None:
    store = EngineStore(tmp_path)
    store.record_index("req", "missing")
    assert store.lookup_index("req") is None
    assert store.lookup_index("never-recorded") is None
    with store.staging() as staging:
        engine = stage_engine(staging, "w")
        write_atomic(engine / MANIFEST, "{}")
        store.publish(engine, "present")
    store.record_index("req", "present")
    assert store.lookup_index("req") == "present"


def test_staging_left_by_a_killed_build_is_collected_and_a_live_one_is_not(tmp_path: Path) -> None:
    import os

    store = EngineStore(tmp_path)
    store.tmp.mkdir(parents=True)
    killed, running = store.tmp / "build-killed", store.tmp / "build-running"
    for d in (killed, running):
        (d / "work").mkdir(parents=True)
    now = 1_000_000.0
    for d in (killed, killed / "work", running):
        os.utime(d, (now - 7 * 3600, now - 7 * 3600))  # untouched for seven hours...
    os.utime(running / "work", (now - 60, now - 60))  # ...but for a build writing below a minute ago
    assert store.collect_staging(now_s=now) == ["build-killed"]
    assert not killed.exists() and running.exists()
    assert store.collect_staging(now_s=now) == []
