"""Semantic checks the API server cannot do (no CEL access to other objects, build results, or catalogues).

The CRD's schema and CEL rules reject malformed objects at `kubectl apply`.
What remains needs knowledge the API server does not have: which GPU products
exist, what the built engine accepts (its input names and dimensions, its
maximum batch size), or regexes too costly for CEL. The operator runs these
checks and, on any problem, sets a False condition (reason `InvalidSpec`) with
the messages and creates nothing.

All functions are pure: they take values and return a list of problems, each a
(field, message) pair whose field is the JSON path on the object.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

from tailpilot.api import constants as c
from tailpilot.api.autoscaling import BatchingConfig
from tailpilot.api.quantity import milli_cpu, quantity_value
from tailpilot.api.v1alpha1 import NAME_PATTERN, Backend, Device, InferenceServiceSpec, ServingVariant


class Problem(NamedTuple):
    """One semantic problem: the JSON path of the field and a message a user can act on."""

    field: str
    message: str


def format_problems(problems: Iterable[Problem]) -> str:
    """One condition message listing every problem."""
    return "; ".join(f"{p.field}: {p.message}" for p in problems)


def check_spec(
    spec: InferenceServiceSpec,
    *,
    name: str,
    known_gpu_products: Mapping[str, int] = c.KNOWN_GPU_PRODUCTS,
) -> list[Problem]:
    """Check what needs nothing but the object (and the GPU catalogue)."""
    problems: list[Problem] = []
    if not re.match(NAME_PATTERN, name):
        problems.append(
            Problem(
                "metadata.name", f"{name!r} must start with a letter (it names a Service, a DNS-1035 label)"
            )
        )
    gpu = spec.runtime.gpu
    if spec.runtime.device is Device.GPU and gpu is not None:
        field = "spec.runtime.gpu.products" if gpu.chooses_product else "spec.runtime.gpu.product"
        for product in gpu.allowed_products():
            if product not in known_gpu_products:
                known = ", ".join(sorted(known_gpu_products))
                problems.append(Problem(field, f"unknown GPU product {product!r} (known: {known})"))
    if spec.engine.backend is Backend.TENSORRT and spec.runtime.serving_variant is ServingVariant.PYTHON:
        problems.append(
            Problem(
                "spec.runtime.servingVariant",
                "python serves ONNX Runtime models only; a tensorrt engine needs servingVariant native",
            )
        )
    resources = spec.runtime.resources or {}
    for section in ("limits", "requests"):
        if c.GPU_RESOURCE in (resources.get(section) or {}):
            problems.append(
                Problem(
                    f"spec.runtime.resources.{section}",
                    f"{c.GPU_RESOURCE} is set from spec.runtime.gpu.count; remove it here",
                )
            )
        problems.extend(_check_cpu(resources, section))
        problems.extend(_check_quantities(resources, section))
    problems.extend(_check_requests_within_limits(resources))
    problems.extend(_check_affinity(spec.runtime.affinity))
    return problems


def _check_cpu(resources: Mapping[str, Any], section: str) -> list[Problem]:
    """A CPU quantity the operator can read (it builds and profiles the engine under the limit)."""
    cpu = (resources.get(section) or {}).get("cpu")
    try:
        milli = milli_cpu(cpu)
    except ValueError:
        milli = None
    if cpu is None or (milli is not None and (milli > 0 or section == "requests")):
        return []
    what = "a CPU quantity above zero" if section == "limits" else "a CPU quantity"
    return [Problem(f"spec.runtime.resources.{section}.cpu", f"{cpu!r} is not {what} (write e.g. 500m or 2)")]


def _check_quantities(resources: Mapping[str, Any], section: str) -> list[Problem]:
    """Every amount other than CPU's (which `_check_cpu` words) must be a quantity.

    The API server takes the field as free-form (it is the user's ResourceRequirements, kept whole);
    a value that is not a quantity would pass admission, then have the Deployment refused on every
    pass after the engine was built, while the conditions said the build ran.
    """
    amounts = resources.get(section)
    if amounts is None:
        return []
    if not isinstance(amounts, Mapping):
        return [Problem(f"spec.runtime.resources.{section}", "must map resource names to quantities")]
    problems = []
    for resource, amount in amounts.items():
        if resource == "cpu" or resource == c.GPU_RESOURCE:
            continue
        try:
            quantity_value(amount)
        except ValueError:
            problems.append(
                Problem(
                    f"spec.runtime.resources.{section}.{resource}",
                    f"{amount!r} is not a quantity (write e.g. 512Mi, 2Gi or 1)",
                )
            )
    return problems


def _check_requests_within_limits(resources: Mapping[str, Any]) -> list[Problem]:
    """A request above its limit: the API server refuses every pod of such a template."""
    requests, limits = resources.get("requests"), resources.get("limits")
    if not isinstance(requests, Mapping) or not isinstance(limits, Mapping):
        return []
    problems = []
    for resource in sorted(set(requests) & set(limits)):
        try:
            above = quantity_value(requests[resource]) > quantity_value(limits[resource])
        except ValueError:
            continue  # said already, as not a quantity
        if above:
            problems.append(
                Problem(
                    f"spec.runtime.resources.requests.{resource}",
                    f"{requests[resource]!r} is above its limit {limits[resource]!r} "
                    "(a request must not exceed its limit)",
                )
            )
    return problems


#: The fields of a Kubernetes Affinity, each an object.
AFFINITY_FIELDS = ("nodeAffinity", "podAffinity", "podAntiAffinity")


def _check_affinity(affinity: Mapping[str, Any] | None) -> list[Problem]:
    """The affinity's shape at its top: the API server would refuse the pods of any other."""
    if affinity is None:
        return []
    problems = []
    for key, value in affinity.items():
        if key not in AFFINITY_FIELDS:
            problems.append(
                Problem(
                    f"spec.runtime.affinity.{key}", f"unknown field (one of {', '.join(AFFINITY_FIELDS)})"
                )
            )
        elif not isinstance(value, Mapping):
            problems.append(Problem(f"spec.runtime.affinity.{key}", "must be an object"))
    return problems


def check_batching(batching: BatchingConfig, *, engine_max_batch_size: int) -> list[Problem]:
    """Batch sizes must lie within the engine's batch-dimension profile (a TensorRT engine rejects others)."""
    problems: list[Problem] = []
    if batching.max_batch_size > engine_max_batch_size:
        problems.append(
            Problem(
                "spec.batching.maxBatchSize",
                f"{batching.max_batch_size} exceeds the engine's maximum batch size {engine_max_batch_size}",
            )
        )
    outside = [s for s in batching.preferred_batch_sizes if s > engine_max_batch_size]
    if outside:
        problems.append(
            Problem(
                "spec.batching.preferredBatchSizes",
                f"{outside} lie outside the engine's batch profile (max {engine_max_batch_size})",
            )
        )
    return problems
