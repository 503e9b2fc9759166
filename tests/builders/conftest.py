"""Fixtures for the builder tests: the example model, calibration data, a store, a bounded wait, and a
real S3-compatible store (versitygw on 127.0.0.1, plain and TLS)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tailpilot.api.engine import BuildRequest
from tailpilot.builders.example_model import write_calibration_data, write_example_model
from tailpilot_e2e.config import Binaries
from tailpilot_e2e.object_store import LocalObjectStore


def eventually(condition: Callable[[], bool], *, timeout: float, interval: float = 0.05) -> None:
    """Poll `condition` until true; fail after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout} s")
        time.sleep(interval)


@pytest.fixture(name="eventually")
def eventually_fixture() -> Callable[..., None]:
    return eventually


@pytest.fixture(scope="session")
def example_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_example_model(tmp_path_factory.mktemp("model") / "model.onnx")


@pytest.fixture(scope="session")
def calibration(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_calibration_data(tmp_path_factory.mktemp("calibration") / "calibration.npz")


@pytest.fixture
def store(tmp_path: Path) -> Path:
    return tmp_path / "store"


@pytest.fixture
def make_request(example_model: Path, store: Path) -> Callable[..., BuildRequest]:
    """BuildRequest for the example model into the test's store; keyword overrides use field names."""

    def make(**overrides: Any) -> BuildRequest:
        fields: dict[str, Any] = {
            "model_uri": str(example_model),
            "backend": "onnxruntime",
            "precision": "fp32",
            "max_batch_size": 16,
            "serving_variant": "python",
            "store": str(store),
        }
        fields.update(overrides)
        return BuildRequest(**fields)

    return make


def _object_store(state: Path, *, tls: bool) -> Iterator[LocalObjectStore]:
    # `make test` builds the binary first (`make binaries`); a missing one fails here, naming the fix.
    store = LocalObjectStore(Binaries.from_cache().versitygw, state).start(tls=tls)
    try:
        yield store
    finally:
        store.stop()


@pytest.fixture(scope="session")
def object_store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalObjectStore]:
    """A real S3 server (versitygw) on http://127.0.0.1:PORT, stopped by PID at the end."""
    yield from _object_store(tmp_path_factory.mktemp("object-store"), tls=False)


@pytest.fixture(scope="session")
def object_store_tls(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalObjectStore]:
    """The same on https://127.0.0.1:PORT, its certificate signed by a CA made for the test."""
    yield from _object_store(tmp_path_factory.mktemp("object-store-tls"), tls=True)
