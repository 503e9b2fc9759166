"""Kubernetes CPU quantities ("500m", "2", "0.5") in millicores (pure).

The operator reads the Triton container's CPU limit to build and profile the engine under it, and
the e2e node agent turns the same quantities into CFS quotas as the kubelet does.
"""

from __future__ import annotations

import re

_CPU_QUANTITY = re.compile(r"^(?P<number>[0-9]+(?:\.[0-9]+)?)(?P<milli>m?)$")


def milli_cpu(quantity: str | int | float | None) -> int | None:
    """A CPU quantity ("500m", "2", "0.5", 2) in millicores; None for none.

    Raises:
        ValueError: for anything that is not a plain or milli CPU quantity ("1Gi", "-1", "one").
    """
    if quantity is None:
        return None
    match = _CPU_QUANTITY.match(str(quantity).strip())
    if match is None:
        raise ValueError(f"not a CPU quantity: {quantity!r}")
    number = float(match["number"])
    return round(number if match["milli"] else number * 1000)
