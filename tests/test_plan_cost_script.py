"""scripts/plan_cost.py: one row per N_pf timing the same cuts with and without path features; bad input."""

from __future__ import annotations

import subprocess
import sys

import numpy as np

from tests.conftest import PROJECT_ROOT, load_script

SCRIPT = PROJECT_ROOT / "scripts" / "plan_cost.py"


def test_plan_cost_prints_a_row_per_budget(tmp_path):
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--n-pf", "3", "8", "--length", "16", "--plans", "2"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,  # never the working directory: the script finds src/ on its own
    )
    assert done.returncode == 0, done.stderr[-2000:]
    rows = [line.strip("| ").split(" | ") for line in done.stdout.splitlines()[2:]]
    assert [row[0] for row in rows] == ["3", "8"]
    for _, path, root, ratio in rows:
        assert float(path) > 0 and float(root) > 0
        assert ratio.endswith("x") and float(ratio.rstrip("x")) > 0  # of the unrounded times


def test_the_stand_in_branch_is_a_probability_that_reads_the_path():
    branch = load_script("plan_cost").logistic_branch(length=10)
    h = branch(2, 4, np.array([10, 6, 4, 10]), np.array([0, 1, 2, 3]))
    assert np.all((h > 0) & (h < 1))
    assert len(set(np.round(h, 12))) == 4  # every (node cut, accepts) state gets its own probability


def test_plan_cost_refuses_an_empty_budget(tmp_path):
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--n-pf", "0"], capture_output=True, text=True, timeout=120, cwd=tmp_path
    )
    assert done.returncode == 2 and "--n-pf" in done.stderr
