"""Engine profiles the benchmark runs on, and the capacity and batching derived from them.

Two kinds:

- `bench/profiles/example-cpu.json`, measured: the example engine (the dense model the demo
  serves) profiled by the profile Job's own code (`builders/profiler.profile_served`) under a
  500m CPU limit, written by `make bench-validate`, the run that also checks the simulator
  against real Triton on it (docs/benchmarks/validation.md);
- scaled variants that stand for GPU engines (the default table runs on `gpu-large-like`):
  their numbers are *not measured*; they are computed from the stated service-time
  parameters, and `method` says so.
"""

from __future__ import annotations

import math
from pathlib import Path

from tailpilot.api.autoscaling import BatchingConfig
from tailpilot.api.engine import BatchProfilePoint, EngineProfile, ServiceTimeModel

PROFILES_DIR = Path(__file__).parent / "profiles"

#: The measured CPU profile of the example engine (`make bench-validate` writes it).
MEASURED_EXAMPLE = PROFILES_DIR / "example-cpu.json"

#: The variant the default benchmark runs on (see docs/benchmarks/README.md for why).
DEFAULT_PROFILE = PROFILES_DIR / "gpu-large-like.json"

#: Scaled variants: name -> (intercept ms, per-item ms, jitter CV, max batch, hardware label,
#: what it stands for).
SCALED_VARIANTS: dict[str, tuple[float, float, float, int, str, str]] = {
    "gpu-large-like": (
        100.0,
        30.0,
        0.10,
        16,
        "NVIDIA-A10G",
        "a large encoder/vision model on one mid-range GPU (~8-28 inferences/s per replica)",
    ),
    "gpu-small-like": (
        4.0,
        0.5,
        0.10,
        64,
        "NVIDIA-H100-80GB-HBM3",
        "a small CNN on a fast GPU (~200-1400 inferences/s per replica)",
    ),
}


def _lognormal_quantile_factor(cv: float, q: float) -> float:
    """Quantile of a lognormal with mean 1 and coefficient of variation `cv`."""
    if cv <= 0:
        return 1.0
    from statistics import NormalDist

    sigma = math.sqrt(math.log1p(cv * cv))
    return math.exp(-sigma * sigma / 2 + sigma * NormalDist().inv_cdf(q))


def scaled_variant(name: str) -> EngineProfile:
    """Build a scaled variant from its stated parameters (no measurement involved)."""
    a, c, cv, max_batch, hardware, stands_for = SCALED_VARIANTS[name]
    model = ServiceTimeModel(intercept_ms=a, per_item_ms=c, jitter_cv=cv)
    points = []
    b = 1
    while b <= max_batch:
        mean = model.mean_ms(b)
        points.append(
            BatchProfilePoint(
                batch_size=b,
                concurrency=1,
                p50_ms=mean * _lognormal_quantile_factor(cv, 0.50),
                p95_ms=mean * _lognormal_quantile_factor(cv, 0.95),
                p99_ms=mean * _lognormal_quantile_factor(cv, 0.99),
                throughput_per_s=b * 1000.0 / mean,
                samples=0,
            )
        )
        b *= 2
    return EngineProfile(
        engine_key=f"scaled-{name}",
        backend="tensorrt",
        precision="fp16",
        hardware=hardware,
        max_batch_size=max_batch,
        points=points,
        service_time=model,
        method=(
            f"SCALED VARIANT, NOT MEASURED: stands for {stands_for}. "
            "Computed by tailpilot.bench.engine_profiles "
            f"from t(b) = {a} ms + {c} ms * b with lognormal jitter CV {cv}; percentiles at concurrency 1 "
            "are the lognormal's."
        ),
    )


def load_profile(path: Path) -> EngineProfile:
    """Read a `profile.json` (camelCase keys, as the builder writes it)."""
    return EngineProfile.model_validate_json(path.read_text())


def write_scaled_variants(directory: Path = PROFILES_DIR) -> list[Path]:
    """(Re)write every scaled variant as `<name>.json`; returns the paths."""
    directory.mkdir(parents=True, exist_ok=True)
    out = []
    for name in SCALED_VARIANTS:
        path = directory / f"{name}.json"
        path.write_text(scaled_variant(name).model_dump_json(by_alias=True, indent=2) + "\n")
        out.append(path)
    return out


def slo_batch(profile: EngineProfile, slo_ms: float) -> int:
    """Largest batch whose worst case (wait for one batch, then run one, at P99 jitter) fits the SLO."""
    model = profile.service_time
    p99 = _lognormal_quantile_factor(model.jitter_cv, 0.99)
    best = 1
    for b in range(1, profile.max_batch_size + 1):
        if 2 * model.mean_ms(b) * p99 <= slo_ms:
            best = b
    return best


def replica_capacity(profile: EngineProfile, slo_ms: float, *, instances: int = 1) -> float:
    """Requests/s one replica sustains within the SLO: throughput at `slo_batch` (the fleet-capacity unit)."""
    b = slo_batch(profile, slo_ms)
    return float(instances * b * 1000.0 / profile.service_time.mean_ms(b))


def default_batching(profile: EngineProfile, slo_ms: float) -> BatchingConfig:
    """A well-chosen static batching for baselines: no delay, max batch = `slo_batch`, one instance."""
    return BatchingConfig(
        max_batch_size=slo_batch(profile, slo_ms), max_queue_delay_us=0, instances_per_replica=1
    )


def batching_candidates(profile: EngineProfile, slo_ms: float) -> list[BatchingConfig]:
    """Batchings the oracle chooses from, most throughput first (powers of two up to the SLO batch)."""
    top = slo_batch(profile, slo_ms)
    sizes = sorted({top, *(b for b in (1, 2, 4, 8, 16, 32, 64, 128) if b < top)}, reverse=True)
    out = [BatchingConfig(max_batch_size=b, max_queue_delay_us=0) for b in sizes]
    # One delayed variant: holding requests up to a tenth of the SLO can fill batches at low load.
    out.append(BatchingConfig(max_batch_size=top, max_queue_delay_us=int(slo_ms * 100)))
    return out
