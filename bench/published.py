"""What a published benchmark page is made of: its figures, and the provenance of the run that wrote them.

Every page under docs/benchmarks is written by the command that measures it; none is edited by
hand. A page names the run that wrote it in a few provenance lines (the command, the commit, the
date and the wall time), which differ from run to run while the figures of a deterministic
simulator benchmark do not. The drift check (`tests/bench/test_published_pages.py`) reruns those
benchmarks and compares the pages without their provenance lines, as the CRD drift test compares
the generated CRD: a change to the simulator or the policy that moves a published figure fails
`make test` until the pages are regenerated.
"""

from __future__ import annotations

import datetime as dt
import os
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
#: The lines of a page that name its run rather than state its figures.
PROVENANCE_PREFIXES = ("- Command:", "- Commit:", "- Date (UTC):")


def git_commit(repo: Path = REPO) -> str:
    """HEAD's hash (+ "-dirty"), or a note when there is no commit or no git."""
    try:
        head = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True, timeout=10
        )
        if head.returncode != 0:
            return "none (no commit yet)"
        dirty = subprocess.run(
            ["git", "status", "--porcelain"], cwd=repo, capture_output=True, text=True, timeout=10
        )
        return head.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown (git unavailable)"


def utc_minute() -> str:
    """Now, to the minute, as the pages print it."""
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M")


def provenance_lines(*, command: str, commit: str, date: str, elapsed_s: float) -> list[str]:
    """The lines naming a run (each starts with one of `PROVENANCE_PREFIXES`)."""
    return [
        f"- Command: `{command}`",
        f"- Commit: `{commit}`",
        f"- Date (UTC): {date}; wall time {elapsed_s:.0f} s on {os.cpu_count() or 1} CPU core(s)",
    ]


def figures_of(page: str) -> str:
    """`page` without its provenance lines: what two runs of a deterministic benchmark must agree on."""
    return "\n".join(line for line in page.splitlines() if not line.startswith(PROVENANCE_PREFIXES))
