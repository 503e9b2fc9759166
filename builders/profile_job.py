"""The profile Job's program: measure one engine in the service's own Triton, cache and report it.

`run_profile` is what `tailpilot profile --request ... --triton-url ...` runs in
the profile Job's `profile` container, beside the Triton sidecar. Steps: find
the engine in the store -> answer from the store when this profile key was
measured before -> wait until the sidecar has the model ready -> measure
(`profiler.profile_served`) -> cache the profile atomically in the store ->
return a `ProfileResult`. Failures become a failed result (never an exception):
the operator then serves the engine without a profile and says why.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from pydantic import ValidationError

from tailpilot.api.engine import BuildOutcome, EngineProfile, ProfileRequest, ProfileResult
from tailpilot.builders.errors import ENGINE_NOT_FOUND, BuildError
from tailpilot.builders.store import EngineStore, write_atomic

#: How long the sidecar may take to get the model ready after its startup probe passed.
MODEL_READY_TIMEOUT_S = 600.0


def run_profile(
    request: ProfileRequest,
    *,
    triton_url: str,
    progress: Callable[[str], None],
    model_ready_timeout_s: float = MODEL_READY_TIMEOUT_S,
    admin_key: str | None = None,
) -> ProfileResult:
    """Profile `request.engine_key` in the Triton at `triton_url` (gRPC); never raises BuildError.

    `admin_key`: the key of the sidecar's restricted APIs (the service's, from its Secret); the timed
    reload is refused without it, and the profile then has no reload cost.
    """
    key = request.profile_key()
    try:
        profile, cache_hit = _profile(request, key, triton_url, progress, model_ready_timeout_s, admin_key)
    except BuildError as err:
        progress(f"profile failed: {err.reason}: {err.message}")
        return ProfileResult(
            outcome=BuildOutcome.FAILED, profile_key=key, reason=err.reason, message=err.message
        )
    return ProfileResult(
        outcome=BuildOutcome.SUCCEEDED, profile_key=key, profile=profile.to_summary(), cache_hit=cache_hit
    )


def _profile(
    request: ProfileRequest,
    key: str,
    triton_url: str,
    progress: Callable[[str], None],
    model_ready_timeout_s: float,
    admin_key: str | None,
) -> tuple[EngineProfile, bool]:
    # tritonclient's import is slow: only past the request's checks.
    from tailpilot.builders.profiler import ProfileOptions, profile_served, wait_until_model_ready

    store = EngineStore(request.store)
    if store.lookup(request.engine_key) is None:
        raise BuildError(
            ENGINE_NOT_FOUND,
            f"engine {request.engine_key} is not in the store at {request.store}: "
            "it was removed after its build, or the profile Job mounts another engine store claim",
        )
    cached = _cached(store.profile_path(request.engine_key, key))
    if cached is not None:
        progress(f"profile {key} found in the store; nothing to measure")
        return cached, True
    manifest = store.read_manifest(request.engine_key)
    progress(f"waiting for Triton at {triton_url} to have model {request.model_name} ready")
    wait_until_model_ready(triton_url, request.model_name, timeout_s=model_ready_timeout_s)
    limit = (
        "no CPU limit" if request.cpu_limit_millis is None else f"a CPU limit of {request.cpu_limit_millis}m"
    )
    where = request.hardware if request.hardware != "cpu" else f"cpu, {limit}"
    progress(f"profiling engine {request.engine_key[:12]} in {request.triton_image} on {where}")
    profile = profile_served(
        triton_url,
        manifest,
        store.engine_dir(request.engine_key),
        ProfileOptions(
            batch_sizes=request.batch_sizes, duration_s=request.duration_s, concurrency=request.concurrency
        ),
        hardware=request.hardware,
        cpu_limit_millis=request.cpu_limit_millis,
        max_batch_size=request.max_batch_size,
        where=f"{request.triton_image}, the service's image, beside the profiler on {where}",
        progress=progress,
        admin_key=admin_key,
    )
    write_atomic(
        store.profile_path(request.engine_key, key), profile.model_dump_json(by_alias=True, indent=2) + "\n"
    )
    return profile, False


def _cached(path: Path) -> EngineProfile | None:
    """A profile cached by an earlier Job; None when absent or unreadable (then it is measured again)."""
    if not path.is_file():
        return None
    try:
        return EngineProfile.model_validate_json(path.read_text())
    except (OSError, ValidationError):
        return None
