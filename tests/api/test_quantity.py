"""CPU quantities in millicores, as the kubelet reads them."""

from __future__ import annotations

import pytest

from tailpilot.api.quantity import milli_cpu


@pytest.mark.parametrize(
    ("quantity", "milli"),
    [("500m", 500), ("2", 2000), ("0.5", 500), (2, 2000), ("1.25", 1250), (None, None)],
)
def test_cpu_quantities_are_read_in_millicores(quantity: str | int | None, milli: int | None) -> None:
    assert milli_cpu(quantity) == milli


@pytest.mark.parametrize("bad", ["1Gi", "", "-1", "one"])
def test_a_quantity_that_is_not_cpu_is_refused(bad: str) -> None:
    with pytest.raises(ValueError, match="not a CPU quantity"):
        milli_cpu(bad)
