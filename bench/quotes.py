"""Figures that README.md and docs/ quote from the benchmark pages, written from those pages.

A quote is a region of a Markdown file between `<!-- figures: NAME -->` and `<!-- /figures -->`.
Its text is rendered from the committed pages (docs/benchmarks/results.csv, README.md,
gpu-products.md) by the renderer of that name, never typed, so a page and what quotes it cannot
disagree. `python -P -m tailpilot.bench.quotes` rewrites every region (the benchmark commands run it
after writing their pages); `--check` exits 1 naming each region that differs, and `make test`'s
drift check (`tests/bench/test_published_pages.py`) runs the same comparison.
"""

from __future__ import annotations

import argparse
import csv
import re
import sys
from collections.abc import Callable, Mapping
from pathlib import Path

from tailpilot.bench.published import REPO
from tailpilot.bench.suite import TAILPILOT

#: The files that may quote (globs relative to the repository).
QUOTING_FILES = ("README.md", "docs/**/*.md")
BENCHMARKS = Path("docs") / "benchmarks"
_REGION = re.compile(r"(<!-- figures: ([a-z0-9-]+) -->\n)(.*?)(<!-- /figures -->)", re.DOTALL)
_GOALS = re.compile(r"^(\d+) of (\d+) checks hold\.", re.MULTILINE)


class QuoteError(Exception):
    """A region names no renderer, or a page it quotes lacks what it quotes."""


def _results(root: Path) -> list[dict[str, str]]:
    with (root / BENCHMARKS / "results.csv").open(newline="") as fh:
        return list(csv.DictReader(fh))


def tailpilot_attainment(root: Path) -> str:
    """TailPilot's row per trace at every Ts (requests within the SLO, replica-seconds, x oracle)."""
    rows = [r for r in _results(root) if r["policy"] == TAILPILOT]
    if not rows:
        raise QuoteError(f"{BENCHMARKS / 'results.csv'} has no {TAILPILOT} row")
    readme = (root / BENCHMARKS / "README.md").read_text()
    goals = _GOALS.search(readme)
    if goals is None:
        raise QuoteError(f"{BENCHMARKS / 'README.md'} has no goal count")
    ts_values = list(dict.fromkeys(r["ts_s"] for r in rows))
    slash = " / ".join(ts_values)
    lines = [
        f"From [benchmarks/results.csv](benchmarks/results.csv) (`make bench`, TailPilot at its defaults; "
        f"Ts = {slash} s): {goals.group(1)} of {goals.group(2)} goal checks hold "
        '([benchmarks/README.md](benchmarks/README.md), "Goals").',
        "",
        "| trace | % of requests within the SLO | % of minutes within the SLO | replica-seconds | "
        "x realizable oracle |",
        "| --- | --- | --- | --- | --- |",
    ]
    for trace in dict.fromkeys(r["trace"] for r in rows):
        mine = {r["ts_s"]: r for r in rows if r["trace"] == trace}
        cells = [
            " / ".join(mine[ts][column] if ts in mine else "-" for ts in ts_values)
            for column in ("pct_requests_in_slo", "pct_windows_in_slo", "replica_seconds", "oracle_ratio")
        ]
        lines.append(f"| {trace} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def gpu_products_totals(root: Path) -> str:
    """The product choice's money over all traces against each product picked by hand, per Ts."""
    page = (root / BENCHMARKS / "gpu-products.md").read_text()
    sections = re.findall(
        r"^## Results, Ts = ([0-9.]+) s.*?^(all traces: [^\n]*)$", page, re.MULTILINE | re.DOTALL
    )
    if not sections:
        raise QuoteError(f"{BENCHMARKS / 'gpu-products.md'} has no totals")
    lines = [
        "From [benchmarks/gpu-products.md](benchmarks/gpu-products.md) (`make bench-products`; money over "
        "all traces, one simulated hour each):",
        "",
    ]
    lines += [f"- Ts = {ts} s: {total.removeprefix('all traces: ')}" for ts, total in sections]
    return "\n".join(lines) + "\n"


_TRADE_COUNT = re.compile(
    r"^A baseline lies above the curve at (\d+) of (\d+) trace and Ts pairs: at (\d+) at TailPilot's cost "
    r"or less, at (\d+) only dearer, keeping more\.",
    re.MULTILINE,
)
_TRADE_ROW = re.compile(r"^\| (T[^|]+) \| ([0-9.]+) \| [^|]+ \| ([^|]+) \| [^|]+ \|$", re.MULTILINE)


def tuned_baselines(root: Path) -> str:
    """The pairs with a tuned baseline above TailPilot's curve, and those where one beats it at its cost."""
    readme = (root / BENCHMARKS / "README.md").read_text()
    count = _TRADE_COUNT.search(readme)
    if count is None:
        raise QuoteError(f"{BENCHMARKS / 'README.md'} has no attainment-cost section")
    section = readme[count.end() :].split("\n## ", 1)[0]
    total, pairs, beaten, beyond = count.groups()
    lines = [
        f'From [benchmarks/README.md](benchmarks/README.md) (`make bench`, "Attainment against cost"): '
        f"a tuned baseline lies above TailPilot's curve at {total} of {pairs} trace and Ts pairs; at "
        f"{beaten} it keeps more at TailPilot's cost or less, at the other {beyond} only by paying more "
        "than TailPilot's dearest point for more than its best attainment. Where a baseline beats the "
        "curve at its cost:",
        "",
    ]
    rows = [(trace, ts, cell.strip()) for trace, ts, cell in _TRADE_ROW.findall(section)]
    lines += [f"- {trace}, Ts = {ts} s: {cell}" for trace, ts, cell in rows if cell != "none"] or [
        "- nowhere"
    ]
    return "\n".join(lines) + "\n"


def scale_to_zero_verdicts(root: Path) -> str:
    """The scale-to-zero page's verdicts, one line per trace and Ts."""
    name = BENCHMARKS / "scale-to-zero.md"
    page = (root / name).read_text()
    _, _, section = page.partition("## Against the goals\n")
    lines = [line for line in section.splitlines() if line.startswith("- ")]
    if not lines:
        raise QuoteError(f"{name} has no verdicts under 'Against the goals'")
    return (
        "From [benchmarks/scale-to-zero.md](benchmarks/scale-to-zero.md) (`make bench-zero`):\n\n"
        + "\n".join(lines)
        + "\n"
    )


RENDERERS: Mapping[str, Callable[[Path], str]] = {
    "tailpilot-attainment": tailpilot_attainment,
    "gpu-products-totals": gpu_products_totals,
    "tuned-baselines": tuned_baselines,
    "scale-to-zero-verdicts": scale_to_zero_verdicts,
}


def _quoting(root: Path) -> list[str]:
    return sorted({str(p.relative_to(root)) for pattern in QUOTING_FILES for p in root.glob(pattern)})


def rendered(text: str, root: Path) -> str:
    """`text` with every region's body rendered afresh from the pages under `root`."""

    def body(match: re.Match[str]) -> str:
        name = match.group(2)
        if name not in RENDERERS:
            raise QuoteError(f"no renderer named {name!r} (known: {', '.join(RENDERERS)})")
        return match.group(1) + RENDERERS[name](root) + match.group(4)

    return _REGION.sub(body, text)


def stale_regions(root: Path = REPO) -> list[str]:
    """`file: region` for every region whose text differs from what the pages give."""
    stale = []
    for name in _quoting(root):
        text = (root / name).read_text()
        fresh = rendered(text, root)
        if fresh != text:
            old = {m.group(2): m.group(3) for m in _REGION.finditer(text)}
            new = {m.group(2): m.group(3) for m in _REGION.finditer(fresh)}
            stale += [f"{name}: {region}" for region in old if old[region] != new.get(region)]
    return stale


def refresh(root: Path = REPO) -> list[str]:
    """Rewrite every stale region; the files changed."""
    changed = []
    for name in _quoting(root):
        path = root / name
        text = path.read_text()
        fresh = rendered(text, root)
        if fresh != text:
            path.write_text(fresh)
            changed.append(name)
    return changed


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -P -m tailpilot.bench.quotes", description=__doc__.split("\n")[0]
    )
    ap.add_argument("--check", action="store_true", help="exit 1 when a region differs; write nothing")
    args = ap.parse_args(argv)
    if args.check:
        stale = stale_regions()
        for region in stale:
            print(f"stale: {region} (run python -P -m tailpilot.bench.quotes)", file=sys.stderr)
        return 1 if stale else 0
    for name in refresh():
        print(f"rewrote the quoted figures in {name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
