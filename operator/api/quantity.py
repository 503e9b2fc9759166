"""Kubernetes resource quantities ("500m", "2", "0.5", "2k", "1e-3", "1Gi"), parsed once (pure).

The grammar is Kubernetes' (resource.Quantity): a non-negative decimal number with an optional
decimal SI suffix (n u m k M G T P E), binary suffix (Ki Mi Gi Ti Pi Ei) or exponent. Two readers
share it: CPU limits in millicores (`milli_cpu`: the operator builds and profiles the engine under
the Triton container's CPU limit, and the e2e node agent turns the same quantities into CFS quotas
as the kubelet does), and the drift check, which must see "1Gi" and "1073741824" as one value.
"""

from __future__ import annotations

import math
import re
from decimal import Decimal, InvalidOperation

_QUANTITY = re.compile(
    r"^(?P<number>[+]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))"
    r"(?:(?P<binary>[KMGTPE]i)|(?P<suffix>[numkMGTPE])|[eE](?P<exponent>[+-]?[0-9]+))?$"
)
#: Decimal SI suffixes as powers of ten.
_SUFFIX_EXPONENT = {"n": -9, "u": -6, "m": -3, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
#: Binary suffixes as powers of 1024.
_BINARY_POWER = {"Ki": 1, "Mi": 2, "Gi": 3, "Ti": 4, "Pi": 5, "Ei": 6}


def quantity_value(quantity: str | int | float, *, allow_binary: bool = True) -> Decimal:
    """The exact value of a quantity ("1Gi" -> 1073741824, "500m" -> 0.5).

    Raises:
        ValueError: for anything that is not a quantity ("-1", "1e3m", "one"), and for a binary
            suffix when `allow_binary` is false.
    """
    text = str(quantity).strip()
    match = _QUANTITY.match(text)
    refused = ValueError(f"not a {'' if allow_binary else 'CPU '}quantity: {quantity!r}")
    if match is None or (match["binary"] and not allow_binary):
        raise refused
    try:
        number = Decimal(match["number"])
        if match["binary"]:
            return number * Decimal(1024) ** _BINARY_POWER[match["binary"]]
        return number.scaleb(_SUFFIX_EXPONENT.get(match["suffix"] or "", 0) + int(match["exponent"] or 0))
    except InvalidOperation as error:  # an exponent beyond Decimal's range
        raise refused from error


def milli_cpu(quantity: str | int | float | None) -> int | None:
    """A CPU quantity ("500m", "2", "0.5", "2k", "1e-3", 2) in millicores, rounded up; None for none.

    A value is rounded up to whole millicores as the kubelet does ("100u" is 1m). Binary suffixes
    ("1Gi") are refused: they are legal quantities but never a CPU amount anyone means.

    Raises:
        ValueError: for anything that is not a decimal CPU quantity ("1Gi", "-1", "1e3m", "one").
    """
    if quantity is None:
        return None
    return math.ceil(quantity_value(quantity, allow_binary=False) * 1000)
