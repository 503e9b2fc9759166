"""Entry points of the build Job: `tailpilot build`, `tailpilot profile`, `tailpilot make-example-model`.

This is where the environment is read (flags, `TAILPILOT_*` variables, which
tools are installed); everything below receives it as values.

Environment:
    TAILPILOT_PVC_ROOT: where `pvc://claim/path` claims are mounted (default /mnt/pvc).
    TAILPILOT_CA_BUNDLE: PEM CA bundle trusted for https model downloads (in addition to nothing:
        it replaces the default trust store; use it for private registries and tests).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import traceback
from pathlib import Path

from pydantic import ValidationError

from tailpilot.api.engine import BuildOutcome, BuildRequest, BuildResult, EngineProfile
from tailpilot.builders.errors import INVALID_REQUEST

INTERNAL_ERROR = "InternalError"


def _progress(line: str) -> None:
    print(f"[tailpilot-build] {line}", file=sys.stderr, flush=True)


def _batch_sizes(text: str) -> tuple[int, ...]:
    try:
        sizes = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not a comma-separated list of integers: {text!r}") from exc
    if not sizes or min(sizes) < 1:
        raise argparse.ArgumentTypeError("batch sizes must be positive integers")
    return sizes


def _add_profile_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--batch-sizes", type=_batch_sizes, default=(1, 4, 16), help="e.g. 1,4,16")
    parser.add_argument("--duration-s", type=float, default=3.0, help="measurement seconds per batch size")
    parser.add_argument("--concurrency", type=int, default=1, help="requests in flight from the client")


def _read_request(value: str) -> BuildRequest:
    text = (
        sys.stdin.read()
        if value == "-"
        else value
        if value.lstrip().startswith("{")
        else Path(value).read_text()
    )
    return BuildRequest.model_validate_json(text)


def _emit(result: BuildResult, result_file: str | None) -> None:
    message = result.to_termination_message()
    print(message, flush=True)
    if result_file:
        Path(result_file).write_text(message)


def build_main(argv: list[str]) -> int:
    """`tailpilot build --request FILE|JSON|- [--result-file PATH]`: build or find an engine.

    Prints the BuildResult JSON to stdout (and to `--result-file`, e.g. /dev/termination-log);
    progress goes to stderr. Exit code 0 on success, 1 on a build failure, 2 on a bad request.
    """
    parser = argparse.ArgumentParser(prog="tailpilot build", description=build_main.__doc__)
    parser.add_argument(
        "--request", required=True, help="BuildRequest as a file path, inline JSON, or - for stdin"
    )
    parser.add_argument("--result-file", help="also write the BuildResult JSON here")
    parser.add_argument(
        "--ca-bundle", default=os.environ.get("TAILPILOT_CA_BUNDLE"), help="PEM CA bundle for https"
    )
    parser.add_argument("--pvc-root", default=os.environ.get("TAILPILOT_PVC_ROOT", "/mnt/pvc"))
    parser.add_argument(
        "--no-profile", action="store_true", help="skip profiling even if the request asks for it"
    )
    _add_profile_flags(parser)
    args = parser.parse_args(argv)
    try:
        request = _read_request(args.request)
    except (OSError, ValidationError, ValueError) as exc:
        result = BuildResult(
            outcome=BuildOutcome.FAILED, reason=INVALID_REQUEST, message=f"invalid build request: {exc}"
        )
        _emit(result, args.result_file)
        return 2
    # Heavy imports (onnx, onnxruntime, tritonclient) only once the request is known to be valid.
    from tailpilot.builders import tensorrt
    from tailpilot.builders.build import BuildSettings, run_build
    from tailpilot.builders.fetch import FetchOptions
    from tailpilot.builders.triton_server import local_backends

    settings = BuildSettings(
        fetch=FetchOptions(pvc_root=Path(args.pvc_root), ca_bundle=args.ca_bundle),
        trtexec=tensorrt.find_trtexec(),
        gpu_name=tensorrt.detect_gpu_name(),
        local_triton_backends=local_backends(),
    )

    def profiler(engine_dir: Path) -> EngineProfile:
        # Imported only when a build profiles: tritonclient's import is slow and a cache hit must be fast.
        from tailpilot.builders.profiler import ProfileOptions, profile_engine

        options = ProfileOptions(
            batch_sizes=args.batch_sizes, duration_s=args.duration_s, concurrency=args.concurrency
        )
        return profile_engine(engine_dir, options, progress=_progress)

    try:
        result = run_build(
            request, settings, progress=_progress, profiler=None if args.no_profile else profiler
        )
    except Exception as exc:  # a bug, not a user error: still report it in the form the operator reads
        traceback.print_exc()
        result = BuildResult(
            outcome=BuildOutcome.FAILED, reason=INTERNAL_ERROR, message=f"{type(exc).__name__}: {exc}"
        )
    _emit(result, args.result_file)
    return 0 if result.outcome == BuildOutcome.SUCCEEDED else 1


def profile_main(argv: list[str]) -> int:
    """`tailpilot profile --engine DIR`: measure a published engine and (re)write DIR/profile.json."""
    parser = argparse.ArgumentParser(prog="tailpilot profile", description=profile_main.__doc__)
    parser.add_argument("--engine", required=True, type=Path, help="engine directory (with manifest.json)")
    _add_profile_flags(parser)
    args = parser.parse_args(argv)
    from tailpilot.builders.errors import BuildError
    from tailpilot.builders.profiler import ProfileOptions, profile_engine
    from tailpilot.builders.store import PROFILE, write_atomic

    options = ProfileOptions(
        batch_sizes=args.batch_sizes, duration_s=args.duration_s, concurrency=args.concurrency
    )
    try:
        profile = profile_engine(args.engine, options, progress=_progress)
    except (BuildError, OSError, ValidationError) as exc:
        _progress(f"profile failed: {exc}")
        return 1
    write_atomic(args.engine / PROFILE, profile.model_dump_json(by_alias=True, indent=2) + "\n")
    print(profile.to_summary().model_dump_json(by_alias=True))
    return 0


def example_model_main(argv: list[str]) -> int:
    """`tailpilot make-example-model OUT.onnx [--calibration OUT.npz]`: write the example model."""
    parser = argparse.ArgumentParser(
        prog="tailpilot make-example-model", description=example_model_main.__doc__
    )
    parser.add_argument("output", type=Path)
    parser.add_argument(
        "--seed", type=int, default=None, help="weight seed (default: the fixed project seed)"
    )
    parser.add_argument("--calibration", type=Path, help="also write calibration inputs (.npz) here")
    args = parser.parse_args(argv)
    from tailpilot.builders import example_model

    seed = example_model.DEFAULT_SEED if args.seed is None else args.seed
    path = example_model.write_example_model(args.output, seed=seed)
    info = {"model": str(path), "sha256": hashlib.sha256(path.read_bytes()).hexdigest()}
    if args.calibration:
        cal = example_model.write_calibration_data(args.calibration)
        info |= {"calibration": str(cal), "calibrationSha256": hashlib.sha256(cal.read_bytes()).hexdigest()}
    print(json.dumps(info))
    return 0
