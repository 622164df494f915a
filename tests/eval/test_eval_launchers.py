"""Hydra multirun through the launcher plugins: submitit_local (the cluster code path) and joblib."""

from __future__ import annotations

import json

import pytest

from presto.cli import options_first
from tests.conftest import run_cli, toy_args


def sweep(toy_table, tmp_path, *launcher):
    sweep_dir = tmp_path / "sweep"
    args = toy_args(toy_table, tmp_path / "unused", f"hydra.sweep.dir={sweep_dir}", "budget.n_pf=2,3,4", *launcher)
    result = run_cli("-m", *args, timeout=600)
    assert result.returncode == 0, result.stderr
    summaries = {p.parent.name: json.loads(p.read_text()) for p in sweep_dir.glob("*/summary.json")}
    assert sorted(summaries) == ["0", "1", "2"]
    assert sorted(s["n_pf"] for s in summaries.values()) == [2, 3, 4]
    assert all(s["chains"] == 4 for s in summaries.values())
    return sweep_dir


def test_three_job_sweep_with_submitit_local(toy_table, tmp_path):
    sweep_dir = sweep(toy_table, tmp_path, "hydra/launcher=submitit_local")
    assert (sweep_dir / ".submitit").is_dir()  # the jobs ran as submitit processes


@pytest.mark.slow
def test_three_job_sweep_with_the_project_joblib_launcher(toy_table, tmp_path):
    sweep(toy_table, tmp_path, "launcher=joblib")


def test_options_first_keeps_option_values_and_gathers_overrides():

    assert options_first(["sampler=entropycut", "-m", "budget.n_pf=8,12"]) == [
        "-m",
        "sampler=entropycut",
        "budget.n_pf=8,12",
    ]
    assert options_first(["a=1", "--cfg", "hydra", "-p", "hydra.launcher", "b=2"]) == [
        "--cfg",
        "hydra",
        "-p",
        "hydra.launcher",
        "a=1",
        "b=2",
    ]
    # A bare --info before overrides would take the first override as its value.
    assert options_first(["--info", "a=1"]) == ["--info=all", "a=1"]
    assert options_first(["a=1", "-i"]) == ["--info=all", "a=1"]
    assert options_first(["--info", "defaults", "~x"]) == ["--info", "defaults", "~x"]
    assert options_first(["--config-name=config", "a=1"]) == ["--config-name=config", "a=1"]


def test_multirun_flag_between_overrides_with_the_basic_launcher(toy_table, tmp_path):
    """The README's `sampler=entropycut traversal=predictive -m budget.n_pf=8,12,20`, on the toy engine."""
    sweep_dir = tmp_path / "sweep"
    args = toy_args(toy_table, tmp_path / "unused", f"hydra.sweep.dir={sweep_dir}", "sampler.steps=10")
    result = run_cli("sampler=entropycut", "traversal=predictive", "-m", "budget.n_pf=8,12,20", *args)
    assert result.returncode == 0, result.stderr
    summaries = [json.loads(p.read_text()) for p in sweep_dir.glob("*/summary.json")]
    assert sorted(s["n_pf"] for s in summaries) == [8, 12, 20]
    assert {(s["sampler"], s["traversal"]) for s in summaries} == {("entropycut", "predictive")}
