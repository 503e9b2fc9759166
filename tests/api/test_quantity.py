"""Kubernetes quantities: CPU in millicores as the kubelet reads them, and exact values."""

from __future__ import annotations

import pytest

from tailpilot.api.quantity import milli_cpu, quantity_value


@pytest.mark.parametrize(
    ("quantity", "milli"),
    [
        ("500m", 500),
        ("2", 2000),
        ("0.5", 500),
        (2, 2000),
        ("1.25", 1250),
        (None, None),
        # The rest of Kubernetes' decimal grammar: SI suffixes and exponents.
        ("2k", 2_000_000),
        ("1e-3", 1),
        ("2e3", 2_000_000),
        ("1.5E0", 1500),
        ("250000u", 250),
        (".5", 500),
        ("+1", 1000),
        # Rounded up to whole millicores, as the kubelet does.
        ("100u", 1),
        ("1500500u", 1501),
        ("0", 0),
    ],
)
def test_cpu_quantities_are_read_in_millicores(quantity: str | int | None, milli: int | None) -> None:
    assert milli_cpu(quantity) == milli


@pytest.mark.parametrize("bad", ["1Gi", "", "-1", "one", "1e3m", "1e", "1.5.5", "m", "1 m", "1e999999999999"])
def test_a_quantity_that_is_not_cpu_is_refused(bad: str) -> None:
    with pytest.raises(ValueError, match="not a CPU quantity"):
        milli_cpu(bad)


@pytest.mark.parametrize(
    ("quantity", "value"),
    [("1Gi", 2**30), ("1073741824", 2**30), ("1.5Ki", 1536), ("500m", 0.5), ("2k", 2000), ("1e3", 1000)],
)
def test_any_quantity_reads_as_its_exact_value(quantity: str, value: float) -> None:
    assert quantity_value(quantity) == value
