"""scripts/call_cost.py: one row per (temperatures, rows) with a ratio to the one-row call; bad input."""

from __future__ import annotations

import os
import subprocess
import sys

from presto.models import make_tiny_model
from tests.conftest import PROJECT_ROOT

SCRIPT = PROJECT_ROOT / "scripts" / "call_cost.py"


def run_script(*args: str, cwd) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=300, cwd=cwd, env=env
    )


def test_call_cost_prints_a_line_per_setting(tmp_path):
    model = make_tiny_model(tmp_path / "tiny")
    done = run_script(
        "--rows", "1", "3", "--tokens", "2", "--prompt-tokens", "5", "engine=hf", f"model.path={model}", cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr[-2000:]
    rows = [line.split() for line in done.stdout.splitlines() if line.strip().endswith("x")]
    assert [(r[0], r[1]) for r in rows] == [
        ("0.25", "1"),
        ("0.25", "3"),
        ("0.25+0.25,0.5,1", "1"),
        ("0.25+0.25,0.5,1", "3"),
    ]
    assert rows[0][-1] == "1.00x" and float(rows[1][-1].rstrip("x")) > 0


def test_call_cost_refuses_zero_rows(tmp_path):
    done = run_script("--rows", "0", cwd=tmp_path)
    assert done.returncode == 2 and "--rows" in done.stderr


def test_call_cost_times_the_configured_proposal_temperature(tmp_path):
    model = make_tiny_model(tmp_path / "tiny")
    done = run_script(
        "--rows", "1", "--tokens", "2", "--prompt-tokens", "5", "engine=hf", f"model.path={model}", "sampler.alpha=2",
        cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    rows = [line.split()[0] for line in done.stdout.splitlines() if line.strip().endswith("x")]
    assert rows == ["0.5", "0.5+0.25,0.5,1"]
