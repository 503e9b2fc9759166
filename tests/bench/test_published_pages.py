"""The published benchmark pages are the code's figures: the deterministic benchmarks rerun and compared.

Like the CRD drift test: the simulator benchmarks are deterministic for a given seed, so a rerun
must write the committed pages again, figure for figure (their provenance lines, which name the
run, aside). A change to the simulator, a baseline or the policy that moves a published figure
fails here until the pages are regenerated with the command each failure names.

- `make bench`'s table (docs/benchmarks/results.csv, README.md and the plots), its GPU product
  page (gpu-products.md, `make bench-products`) and its scale-to-zero page (scale-to-zero.md,
  `make bench-zero`): rerun in full, by the run `make test` starts in the background
  (`tailpilot_e2e.background_bench`); these tests wait for it.
- `make bench-measured` (measured-cpu/) and `make bench-batching` (batching-capacity.md) take 3-10
  minutes, so a named subset of each (`MEASURED_SUBSET_*`, `BATCHING_SUBSET`) is rerun and its rows
  must be the committed ones.
- The figures README.md and docs/ quote from these pages (`tailpilot.bench.quotes` regions) must be
  what the committed pages give.
"""

from __future__ import annotations

import csv
import difflib
from pathlib import Path

import pytest

from tailpilot.bench import batching_capacity, quotes, run
from tailpilot.bench.engine_profiles import load_profile
from tailpilot.bench.published import REPO, figures_of
from tailpilot.bench.report import csv_record
from tailpilot.bench.suite import Setup, run_suite
from tailpilot_e2e.background_bench import GPU_PRODUCTS_PAGE, SCALE_TO_ZERO_PAGE, BenchRun

pytestmark = pytest.mark.slow

BENCHMARKS = REPO / "docs" / "benchmarks"
MEASURED = BENCHMARKS / "measured-cpu"
MEASURED_PROFILE = REPO / "bench" / "profiles" / "example-cpu.json"
#: The rows of measured-cpu/results.csv rerun here: TailPilot and the oracle it is priced against, at
#: the page's one start-up time, on the traces a simulated hour of this engine runs quickest.
MEASURED_SUBSET_TRACES = ("T6-spike",)
MEASURED_SUBSET_POLICIES = ("tailpilot", "oracle-realizable")
MEASURED_SUBSET_TS = (30.0,)
#: The case of batching-capacity.md rerun here: its smallest search (one replica, the tighter SLO).
BATCHING_SUBSET = ("gpu-large-like", 1, 500.0)


def _differences(committed: str, fresh: str, *, name: str, command: str) -> str:
    diff = list(
        difflib.unified_diff(committed.splitlines(), fresh.splitlines(), "committed", "rerun", lineterm="")
    )
    return f"{name} is not what the code gives; regenerate it with `{command}`:\n" + "\n".join(diff[:40])


#: `make bench` (553 s on this machine's two cores alone, 2026-12-05) runs in the background from
#: collection's end (`tailpilot_e2e.background_bench`); a test waiting for it is bounded by this.
BENCH_TIMEOUT_S = 1200


@pytest.fixture
def bench_out(background_bench_run: BenchRun) -> Path:
    return background_bench_run.wait(timeout_s=BENCH_TIMEOUT_S - 30)


@pytest.mark.background_bench
@pytest.mark.timeout(BENCH_TIMEOUT_S)
def test_results_csv_is_what_make_bench_writes(bench_out: Path) -> None:
    committed, fresh = (BENCHMARKS / "results.csv").read_text(), (bench_out / "results.csv").read_text()
    assert fresh == committed, _differences(committed, fresh, name="results.csv", command="make bench")


@pytest.mark.background_bench
@pytest.mark.timeout(BENCH_TIMEOUT_S)
def test_the_benchmark_readme_and_plots_are_what_make_bench_writes(bench_out: Path) -> None:
    # Written elsewhere, the page links method.md by another relative path; that is not a figure.
    fresh = (bench_out / "README.md").read_text().replace(f"]({run.method_href(bench_out)})", "](method.md)")
    committed = (BENCHMARKS / "README.md").read_text()
    assert figures_of(fresh) == figures_of(committed), _differences(
        figures_of(committed), figures_of(fresh), name="docs/benchmarks/README.md", command="make bench"
    )
    plots = sorted(p.name for pattern in ("plot-*.png", "trade-*.png") for p in bench_out.glob(pattern))
    assert plots == sorted(
        p.name for pattern in ("plot-*.png", "trade-*.png") for p in BENCHMARKS.glob(pattern)
    )
    for name in plots:
        assert (bench_out / name).read_bytes() == (BENCHMARKS / name).read_bytes(), (
            f"{name} is not what the code draws; regenerate it with `make bench`"
        )


@pytest.mark.background_bench
@pytest.mark.timeout(BENCH_TIMEOUT_S)
def test_the_gpu_products_page_is_what_make_bench_products_writes(bench_out: Path) -> None:
    page = bench_out / GPU_PRODUCTS_PAGE
    committed = figures_of((BENCHMARKS / "gpu-products.md").read_text())
    fresh = figures_of(page.read_text())
    assert fresh == committed, _differences(
        committed, fresh, name="docs/benchmarks/gpu-products.md", command="make bench-products"
    )


@pytest.mark.background_bench
@pytest.mark.timeout(BENCH_TIMEOUT_S)
def test_the_scale_to_zero_page_is_what_make_bench_writes(bench_out: Path) -> None:
    committed = figures_of((BENCHMARKS / SCALE_TO_ZERO_PAGE).read_text())
    fresh = figures_of((bench_out / SCALE_TO_ZERO_PAGE).read_text())
    assert fresh == committed, _differences(
        committed, fresh, name="docs/benchmarks/scale-to-zero.md", command="make bench"
    )


def test_the_measured_profile_rows_are_what_make_bench_measured_writes() -> None:
    profile = load_profile(MEASURED_PROFILE)
    setup = Setup(
        profile=profile,
        slo_ms=run.default_slo_ms(MEASURED_PROFILE),
        seed=1,
        duration_s=3600.0,
        ts_values=MEASURED_SUBSET_TS,
        traces=MEASURED_SUBSET_TRACES,
        policies=MEASURED_SUBSET_POLICIES,
    )
    fresh = [csv_record(r) for r in run_suite(setup, jobs=2).rows]
    with (MEASURED / "results.csv").open(newline="") as fh:
        committed = {(r["trace"], r["ts_s"], r["policy"]): r for r in csv.DictReader(fh)}
    assert fresh, "the subset ran no row"
    for row in fresh:
        key = (row["trace"], row["ts_s"], row["policy"])
        assert committed.get(key) == row, (
            f"measured-cpu/results.csv {key} is {committed.get(key)}, the code gives {row}; regenerate it "
            "with `make bench-measured`"
        )


def test_the_batching_capacity_case_is_what_make_bench_batching_writes() -> None:
    profile_name, replicas, slo_ms = BATCHING_SUBSET
    (case,) = [
        c
        for c in batching_capacity.CASES
        if (c.profile_name, c.replicas, c.slo_ms) == (profile_name, replicas, slo_ms)
    ]
    fresh = batching_capacity.report(batching_capacity.run([case], jobs=2))
    page = (BENCHMARKS / "batching-capacity.md").read_text().splitlines()
    rows = [line for line in fresh.splitlines() if line.startswith("| ") and not line.startswith("| ---")]
    missing = [line for line in rows if line not in page]
    assert len(rows) > 3 and not missing, (
        f"batching-capacity.md lacks these rows the code gives for {case}; regenerate it with "
        f"`make bench-batching`: {missing}"
    )


def test_the_figures_readme_and_docs_quote_are_the_pages() -> None:
    assert quotes.stale_regions() == [], "regenerate them with `python -P -m tailpilot.bench.quotes`"


def test_a_quoted_region_is_rendered_from_the_pages_and_an_unknown_one_refused(tmp_path: Path) -> None:
    text = "a\n<!-- figures: gpu-products-totals -->\nold figures\n<!-- /figures -->\nb\n"
    fresh = quotes.rendered(text, REPO)
    assert "old figures" not in fresh
    assert "- Ts = 30 s: choice $" in fresh and "- Ts = 90 s: choice $" in fresh
    assert fresh.startswith("a\n") and fresh.endswith("b\n")
    with pytest.raises(quotes.QuoteError, match="no renderer named 'nope'"):
        quotes.rendered("<!-- figures: nope -->\n<!-- /figures -->", REPO)
