"""docs/architecture.md's recipe "An engine backend", followed with a toy backend.

The toy is registered for one test at a time (`toy` fixture) and removed after it, so the real
registry is the same before and after: the last test checks that it holds exactly the spec's
backends.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import pytest

from tailpilot.api.backends import Backend
from tailpilot.api.engine import AccuracyReport, BuildOutcome, BuildRequest
from tailpilot.api.v1alpha1 import EngineSpec
from tailpilot.builders.backends import registry
from tailpilot.builders.backends.base import BuiltEngine, EngineJob
from tailpilot.builders.build import BuildSettings, run_build
from tailpilot.builders.cli import build_main
from tailpilot.builders.errors import INVALID_REQUEST, UNSUPPORTED_TARGET, BuildError
from tailpilot.builders.store import EngineStore

TOY = "toy"


class ToyBackend:
    """Step 2 of the recipe: a backend that serves the source model as it is, recording its calls."""

    name = TOY
    triton_backend = "onnxruntime"
    needs_static_profile = False

    def __init__(self) -> None:
        self.calls: list[str] = []

    def check(self, request: BuildRequest, settings: BuildSettings) -> None:
        self.calls.append("check")
        if request.target != "cpu":
            raise BuildError(UNSUPPORTED_TARGET, "the toy builds for the CPU only")

    def library_versions(self, settings: BuildSettings) -> Mapping[str, str]:
        return {"toy": "1.0"}

    def build(self, job: EngineJob) -> BuiltEngine:
        self.calls.append("build")
        out = job.work / "engine.onnx"
        shutil.copyfile(job.model.path, out)
        return BuiltEngine(out, "toy: copied")

    def measure_accuracy(self, job: EngineJob, engine_file: Path) -> AccuracyReport:
        self.calls.append("measure_accuracy")
        return AccuracyReport(checked=False, note="the toy's engine is the source model")


@pytest.fixture
def toy() -> Iterator[ToyBackend]:
    backend = ToyBackend()
    registry.register(backend)
    try:
        yield backend
    finally:
        registry.unregister(TOY)
    assert TOY not in registry.names()


def toy_request(make_request: Callable[..., BuildRequest], **overrides: object) -> BuildRequest:
    return make_request(backend=TOY, serving_variant="native", **overrides)


def test_a_request_naming_a_registered_backend_validates_and_builds_through_it(
    toy: ToyBackend, make_request: Callable[..., BuildRequest], store: Path
) -> None:
    request = BuildRequest.model_validate_json(toy_request(make_request).model_dump_json(by_alias=True))
    assert request.backend == TOY
    result = run_build(request, BuildSettings(), progress=lambda _: None)
    assert result.outcome == BuildOutcome.SUCCEEDED, result.message
    assert toy.calls == ["check", "build", "measure_accuracy"]
    assert result.triton_backend == "onnxruntime"
    assert result.accuracy is not None and not result.accuracy.checked
    manifest = EngineStore(store).read_manifest(result.engine_key)
    assert manifest.method == "toy: copied"
    assert manifest.library_versions["toy"] == "1.0"
    assert (Path(result.artifact) / "repository" / "model" / "1" / "model.onnx").is_file()

    # The toy's own refusal comes before anything is fetched.
    refused = run_build(
        toy_request(make_request, target="NVIDIA-A10", model_uri="/nonexistent/model.onnx"),
        BuildSettings(),
        progress=lambda _: None,
    )
    assert (refused.outcome, refused.reason) == (BuildOutcome.FAILED, UNSUPPORTED_TARGET)


def test_an_unregistered_backend_is_an_invalid_request(
    make_request: Callable[..., BuildRequest], tmp_path: Path
) -> None:
    request = toy_request(make_request)
    result = run_build(request, BuildSettings(), progress=lambda _: None)
    assert (result.outcome, result.reason) == (BuildOutcome.FAILED, INVALID_REQUEST)
    assert "'toy'" in result.message and "onnxruntime, tensorrt" in result.message

    result_file = tmp_path / "termination-log"
    text = request.model_dump_json(by_alias=True)
    assert build_main(["--request", text, "--result-file", str(result_file)]) == 2
    assert json.loads(result_file.read_text())["reason"] == INVALID_REQUEST


def test_a_name_is_registered_once(toy: ToyBackend) -> None:
    with pytest.raises(ValueError, match="registered already"):
        registry.register(ToyBackend())


@pytest.mark.parametrize("backend", list(Backend))
def test_every_spec_backend_reaches_the_build(backend: Backend) -> None:
    # Step 1 of the recipe is enough for the request: the spec and BuildRequest read one list.
    spec = EngineSpec.model_validate({"backend": backend.value, "precision": "fp16"})
    request = BuildRequest(
        model_uri="/m.onnx", backend=spec.backend.value, precision="fp16", max_batch_size=1
    )
    assert registry.lookup(request.backend).name == backend.value


def test_the_registry_holds_exactly_the_spec_backends() -> None:
    assert set(registry.names()) == {b.value for b in Backend}
