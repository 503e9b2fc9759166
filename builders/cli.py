"""Entry points of the engine Jobs: `tailpilot build`, `tailpilot profile`, `tailpilot make-example-model`.

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

from tailpilot.api.engine import (
    BuildOutcome,
    BuildRequest,
    BuildResult,
    EngineProfile,
    ProfileRequest,
    ProfileResult,
)
from tailpilot.api.v1alpha1 import DEFAULT_MAX_LATENCY_REGRESSION_PERCENT
from tailpilot.builders.errors import INVALID_PROFILE_REQUEST, INVALID_REQUEST, BuildError
from tailpilot.manifests.triton_access import ADMIN_KEY_ENV

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


def _request_text(value: str) -> str:
    """A request given as `-` (stdin), inline JSON or a file path."""
    if value == "-":
        return sys.stdin.read()
    return value if value.lstrip().startswith("{") else Path(value).read_text()


def _emit(result: BuildResult | ProfileResult, result_file: str | None) -> None:
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
        "--credentials-dir",
        type=Path,
        default=None,
        help="the request's credentials Secret, its keys as files (the build Job mounts it read-only)",
    )
    parser.add_argument(
        "--store-gc",
        action="store_true",
        help="collect unused engines before building (the build Job passes the keys in use)",
    )
    parser.add_argument(
        "--keep-engines", default="", help="comma-separated engine keys in use: never collected"
    )
    parser.add_argument(
        "--gc-retention-hours", type=float, default=30 * 24.0, help="collect unused engines idle longer"
    )
    parser.add_argument(
        "--gc-budget-bytes", type=int, default=None, help="collect LRU unused engines while over this size"
    )
    args = parser.parse_args(argv)
    # Here rather than at the top: `tailpilot profile` shares this module and needs no backend.
    from tailpilot.builders.backends import registry

    try:
        request = BuildRequest.model_validate_json(_request_text(args.request))
        # A backend this builder does not hold is a bad request, like a field the schema refuses.
        registry.lookup(request.backend)
    except (OSError, ValidationError, ValueError, BuildError) as exc:
        problem = exc.message if isinstance(exc, BuildError) else str(exc)
        result = BuildResult(
            outcome=BuildOutcome.FAILED, reason=INVALID_REQUEST, message=f"invalid build request: {problem}"
        )
        _emit(result, args.result_file)
        return 2
    # Heavy imports (onnx, onnxruntime) only once the request is known to be valid.
    from tailpilot.builders import tensorrt
    from tailpilot.builders.build import BuildSettings, StoreGcPolicy, run_build
    from tailpilot.builders.fetch import FetchOptions

    settings = BuildSettings(
        fetch=FetchOptions(
            pvc_root=Path(args.pvc_root), ca_bundle=args.ca_bundle, credentials_dir=args.credentials_dir
        ),
        trtexec=tensorrt.find_trtexec(),
        gpu_name=tensorrt.detect_gpu_name(),
        gc=StoreGcPolicy(
            keep=frozenset(k for k in args.keep_engines.split(",") if k),
            retention_s=args.gc_retention_hours * 3600.0,
            budget_bytes=args.gc_budget_bytes,
        )
        if args.store_gc
        else None,
    )
    try:
        result = run_build(request, settings, progress=_progress)
    except Exception as exc:  # a bug, not a user error: still report it in the form the operator reads
        traceback.print_exc()
        result = BuildResult(
            outcome=BuildOutcome.FAILED, reason=INTERNAL_ERROR, message=f"{type(exc).__name__}: {exc}"
        )
    _emit(result, args.result_file)
    return 0 if result.outcome == BuildOutcome.SUCCEEDED else 1


def profile_main(argv: list[str]) -> int:
    """`tailpilot profile`: measure an engine in a running Triton (the profile Job) or a local one.

    With `--request REQUEST --triton-url HOST:PORT` (the profile Job): profile the engine the Triton
    at that gRPC address serves, cache the profile in the store, print the ProfileResult JSON (and
    write it to `--result-file`); exit code 0 on success, 1 on a failed profile, 2 on a bad request.
    With `--engine DIR` (a developer's check): start a local Triton on DIR's repository, measure,
    and (re)write DIR/profile.json. With `--profile FILE`: read a profile measured before.
    With `--compare BASELINE.json` (after `--engine` or `--profile`): the regression gate of users'
    CI; compare the profile with the baseline's at `--rate` requests per second on `--replicas`
    replicas (predicted P99 and capacity per replica, as the operator's gate does) and exit 3 when
    it is worse by more than `--max-regression-percent`.
    """
    parser = argparse.ArgumentParser(prog="tailpilot profile", description=profile_main.__doc__)
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--request", help="ProfileRequest as a file path, inline JSON, or - for stdin")
    mode.add_argument("--engine", type=Path, help="engine directory (with manifest.json), local Triton")
    mode.add_argument("--profile", type=Path, help="a profile JSON measured before (with --compare)")
    parser.add_argument("--triton-url", help="gRPC address of the Triton serving the engine (with --request)")
    parser.add_argument("--result-file", help="also write the ProfileResult JSON here (with --request)")
    parser.add_argument("--compare", type=Path, help="baseline profile JSON: exit 3 on a regression")
    parser.add_argument(
        "--max-regression-percent",
        type=float,
        default=DEFAULT_MAX_LATENCY_REGRESSION_PERCENT,
        help="how much worse than the baseline is still accepted (default: the operator's)",
    )
    parser.add_argument("--rate", type=float, default=0.0, help="operating point: requests per second")
    parser.add_argument("--replicas", type=int, default=1, help="operating point: replicas sharing the rate")
    _add_profile_flags(parser)
    args = parser.parse_args(argv)
    if args.request is not None:
        return _profile_request(args.request, triton_url=args.triton_url, result_file=args.result_file)
    if args.profile is not None:
        if args.compare is None:
            parser.error("--profile needs --compare")
        return _compare(EngineProfile.model_validate_json(args.profile.read_text()), args)
    code = _profile_local(args)
    if code != 0 or args.compare is None:
        return code
    from tailpilot.builders.store import PROFILE

    return _compare(EngineProfile.model_validate_json((args.engine / PROFILE).read_text()), args)


#: Exit code of `tailpilot profile --compare` when the profile regresses beyond the threshold.
REGRESSION_EXIT_CODE = 3


def _compare(profile: EngineProfile, args: argparse.Namespace) -> int:
    """Compare `profile` with the baseline at the operating point; 0, or 3 on a regression."""
    from tailpilot.api.autoscaling import BatchingConfig
    from tailpilot.policy.regression import compare_engines

    baseline = EngineProfile.model_validate_json(args.compare.read_text())
    comparison = compare_engines(
        serving=baseline.service_time,
        serving_max_batch=baseline.max_batch_size,
        candidate=profile.service_time,
        candidate_max_batch=profile.max_batch_size,
        batching=BatchingConfig(max_batch_size=max(baseline.max_batch_size, profile.max_batch_size)),
        rate_per_s=args.rate,
        replicas=args.replicas,
    )
    regressed = comparison.regression_percent > args.max_regression_percent
    verdict = "REGRESSION" if regressed else "ok"
    print(
        f"{verdict}: {comparison.describe()} (baseline vs this profile; threshold "
        f"{args.max_regression_percent:g}%)",
        flush=True,
    )
    return REGRESSION_EXIT_CODE if regressed else 0


def _profile_request(value: str, *, triton_url: str | None, result_file: str | None) -> int:
    try:
        request = ProfileRequest.model_validate_json(_request_text(value))
        if not triton_url:
            raise ValueError("--triton-url is required with --request")
    except (OSError, ValidationError, ValueError) as exc:
        failed = ProfileResult(
            outcome=BuildOutcome.FAILED,
            reason=INVALID_PROFILE_REQUEST,
            message=f"invalid profile request: {exc}",
        )
        _emit(failed, result_file)
        return 2
    from tailpilot.builders.profile_job import run_profile

    try:
        # The profile Job sets it from the service's admin-key Secret (`manifests.profile_job`).
        admin_key = os.environ.get(ADMIN_KEY_ENV) or None
        result = run_profile(request, triton_url=triton_url, progress=_progress, admin_key=admin_key)
    except Exception as exc:  # a bug, not a user error: still report it in the form the operator reads
        traceback.print_exc()
        result = ProfileResult(
            outcome=BuildOutcome.FAILED,
            profile_key=request.profile_key(),
            reason=INTERNAL_ERROR,
            message=f"{type(exc).__name__}: {exc}",
        )
    _emit(result, result_file)
    return 0 if result.outcome == BuildOutcome.SUCCEEDED else 1


def _profile_local(args: argparse.Namespace) -> int:
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
