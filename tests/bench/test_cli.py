"""The command end to end on someone's own arrival file (small, so it stays fast)."""

from __future__ import annotations

import csv

import numpy as np
import pytest

from tailpilot.bench.run import REPO, main, method_href


@pytest.mark.slow
def test_run_on_an_arrival_file_writes_table_csv_readme_and_plot(tmp_path, capsys):
    arrivals = np.cumsum(np.random.default_rng(1).exponential(1 / 15.0, 2000))
    trace = tmp_path / "arrivals.txt"
    trace.write_text("\n".join(f"{t:.6f}" for t in arrivals[arrivals < 120]))
    out = tmp_path / "out"
    assert main(["--trace", str(trace), "--duration-s", "120", "--out", str(out), "--jobs", "1"]) == 0
    printed = capsys.readouterr().out
    assert "oracle-realizable" in printed
    with (out / "results.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    assert {r["trace"] for r in rows} == {"custom"}
    assert {r["ts_s"] for r in rows} == {"5", "30", "90"}
    readme = (out / "README.md").read_text()
    assert "- Commit: `" in readme and "arrivals.txt" in readme
    assert (out / "plot-custom-ts30.png").stat().st_size > 10_000


def test_named_traces_and_policies_run_alone_and_the_rotation_policy_only_when_named(capsys):
    args = ["--no-write", "--jobs", "1", "--duration-s", "120", "--traces", "T6-spike"]
    assert main([*args, "--policies", "tailpilot,tailpilot-rotation"]) == 0
    rows = [line.split() for line in capsys.readouterr().out.splitlines() if line.startswith("T6-spike")]
    assert {r[2] for r in rows} == {"tailpilot", "tailpilot-rotation"}
    assert {r[1] for r in rows} == {"5", "30", "90"}


@pytest.mark.parametrize("flag", ["--traces", "--policies"])
def test_unknown_names_are_refused_with_the_known_ones(flag, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["--no-write", flag, "T9-nope"])
    assert exc.value.code == 2
    assert "unknown T9-nope" in capsys.readouterr().err


def test_named_start_up_times_run_alone_and_a_bad_list_is_refused(capsys):
    args = ["--no-write", "--jobs", "1", "--duration-s", "120", "--traces", "T6-spike"]
    assert main([*args, "--policies", "tailpilot,oracle-realizable", "--ts", "30"]) == 0
    rows = [line.split() for line in capsys.readouterr().out.splitlines() if line.startswith("T6-spike")]
    assert {r[1] for r in rows} == {"30"} and len(rows) == 2
    with pytest.raises(SystemExit) as exc:
        main([*args, "--ts", "30,soon"])
    assert exc.value.code == 2
    assert "not a list of seconds" in capsys.readouterr().err


def test_a_readme_links_method_md_from_where_it_is_written():
    assert method_href(REPO / "docs" / "benchmarks") == "method.md"
    assert method_href(REPO / "docs" / "benchmarks" / "measured-cpu") == "../method.md"
