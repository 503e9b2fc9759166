"""The one way tests wait: poll a condition until it holds or a timeout expires."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


class EventuallyTimeout(AssertionError):
    """The condition did not hold in time; carries the last value or error seen."""


def eventually(
    condition: Callable[[], T],
    *,
    timeout: float,
    interval: float = 0.2,
    description: str = "condition",
) -> T:
    """Return the first truthy result of `condition()` within `timeout` seconds.

    Exceptions raised by the condition count as "not yet" until the deadline;
    the last one is reported. Never waits unboundedly.
    """
    deadline = time.monotonic() + timeout
    last: object = None
    while True:
        try:
            value = condition()
            if value:
                return value
            last = value
        except Exception as error:  # noqa: BLE001 - "not yet" until the deadline
            last = error
        if time.monotonic() >= deadline:
            raise EventuallyTimeout(f"{description} did not hold within {timeout:.1f}s; last: {last!r}")
        time.sleep(interval)
