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


def test_call_cost_warns_when_other_processes_kept_the_machine_busy(toy_table, monkeypatch, capsys):
    import presto.eval.machine_load as machine_load
    from tests.conftest import call_script, load_script

    steps = iter(range(10**6))

    def snapshot():  # 10 s of wall time between two snapshots, 9 CPU seconds of it others'
        step = next(steps)
        return machine_load.CpuSnapshot(wall_s=10.0 * step, machine_busy_s=9.0 * step, own_s=0.0)

    monkeypatch.setattr(machine_load, "cpu_snapshot", snapshot)
    toy = ("engine=toy", "model=toy", f"engine.table={toy_table}")
    assert call_script(load_script("call_cost"), "--rows", "1", "2", "--tokens", "2", "--prompt-tokens", "3", *toy) == 0
    captured = capsys.readouterr()
    assert "warning: other processes kept 0.90 of the " in captured.err and "these calls" in captured.err
    assert captured.out.count("x\n") == 4  # every call's line is still printed
