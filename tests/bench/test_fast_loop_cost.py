"""The fast-loop cost benchmark reads every pod every period through the operator's reader."""

from __future__ import annotations

import re

from tailpilot.bench import fast_loop_cost


def test_every_pod_is_read_every_period_and_the_costs_are_printed(capsys):
    assert fast_loop_cost.main(["--services", "4", "--pods", "2", "--seconds", "4.5"]) == 0
    out = capsys.readouterr().out
    done, wanted = map(float, re.search(r"pod reads completed\s+(\d+)/s of (\d+)/s wanted", out).groups())
    # 4 services x 2 pods every 2 s: 4 reads/s wanted; a loop that fell behind would complete fewer.
    assert wanted == 4.0 and done >= 0.75 * wanted
    assert re.search(r"operator CPU\s+\d+\.\d\d s per s", out)
    assert re.search(r"one observation\s+\d+\.\d\d ms CPU from 151 reads", out)
