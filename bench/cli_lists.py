"""Comma-separated command-line lists the benchmark commands share (argparse `type=` readers)."""

from __future__ import annotations

import argparse
import math


def names(value: str) -> tuple[str, ...]:
    """`a, b,,c` -> ("a", "b", "c")."""
    return tuple(v.strip() for v in value.split(",") if v.strip())


def seconds(value: str) -> tuple[float, ...]:
    """`5,30,90` -> (5.0, 30.0, 90.0); anything else (empty, negative, not finite) refused."""
    try:
        out = tuple(float(v) for v in names(value))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not a list of seconds: {value!r}") from exc
    if not out or any(not math.isfinite(v) or v < 0 for v in out):
        raise argparse.ArgumentTypeError(f"not a list of seconds >= 0: {value!r}")
    return out
