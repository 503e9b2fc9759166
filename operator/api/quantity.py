"""Kubernetes CPU quantities ("500m", "2", "0.5", "2k", "1e-3") in millicores (pure).

The operator reads the Triton container's CPU limit to build and profile the engine under it, and
the e2e node agent turns the same quantities into CFS quotas as the kubelet does.

The grammar is Kubernetes' (resource.Quantity) with the decimal suffixes and exponents; a value is
rounded up to whole millicores as the kubelet does ("100u" is 1m). Binary suffixes ("1Gi") are
refused: they are legal quantities but never a CPU amount anyone means.
"""

from __future__ import annotations

import math
import re
from decimal import Decimal, InvalidOperation

_CPU_QUANTITY = re.compile(
    r"^(?P<number>[+]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))"
    r"(?:(?P<suffix>[numkMGTPE])|[eE](?P<exponent>[+-]?[0-9]+))?$"
)
#: Decimal SI suffixes as powers of ten.
_SUFFIX_EXPONENT = {"n": -9, "u": -6, "m": -3, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}


def milli_cpu(quantity: str | int | float | None) -> int | None:
    """A CPU quantity ("500m", "2", "0.5", "2k", "1e-3", 2) in millicores, rounded up; None for none.

    Raises:
        ValueError: for anything that is not a decimal CPU quantity ("1Gi", "-1", "1e3m", "one").
    """
    if quantity is None:
        return None
    text = str(quantity).strip()
    match = _CPU_QUANTITY.match(text)
    if match is None:
        raise ValueError(f"not a CPU quantity: {quantity!r}")
    power = _SUFFIX_EXPONENT.get(match["suffix"] or "", 0) + int(match["exponent"] or 0)
    try:
        cores = Decimal(match["number"]).scaleb(power)
    except InvalidOperation as error:  # an exponent beyond Decimal's range
        raise ValueError(f"not a CPU quantity: {quantity!r}") from error
    return math.ceil(cores * 1000)
