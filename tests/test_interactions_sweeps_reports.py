"""Interaction review: -m sweeps, logger=wandb (offline) and the evaluation scripts used together.

A researcher's sequence: a sweep over traversals and budgets (with or without W&B), one job of it
resumed on its own, then scripts/report.py, scripts/compare_runs.py and scripts/plots.py over the
sweep, over runs still going or killed, and over runs of other settings. Each test runs the CLI on
the toy engine; three tests reproduce defects the review found, fixed since.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from presto.eval.runs import load_run
from tests.conftest import MAIN, call_script, load_script, one_error_line, toy_overrides, write_toy_table

pytest.importorskip("wandb")


def toy(table, **values: object) -> list[str]:
    """toy_overrides(table) with some of its keys given other values (Hydra refuses a key given twice)."""
    args = list(toy_overrides(table))
    for key, value in values.items():
        key = key.replace("__", ".")
        args = [a for a in args if not a.startswith(f"{key}=")] + [f"{key}={value}"]
    return args


def offline_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """W&B offline, never online, writing under each run directory (no WANDB_DIR)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_")}
    env.update({"WANDB_MODE": "offline", "WANDB_SILENT": "true", "HOME": str(tmp_path)})
    env.update({"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", **extra})
    return env


def main_cli(*args: str, env: dict[str, str], cwd: str | Path = "/") -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(MAIN), *args], capture_output=True, text=True, timeout=300, cwd=str(cwd), env=env
    )


def wandb_logs(run_dir: Path) -> list[Path]:
    """The offline W&B transaction logs of a run directory, oldest first."""
    return sorted((run_dir / "wandb").glob("offline-run-*/run-*.wandb"), key=lambda p: p.parent.name)


def wandb_summary(log: Path) -> dict:
    from tests.eval.test_wandb_review import records

    summary = {}
    for record in records(log):
        if record.WhichOneof("record_type") == "summary":
            for item in record.summary.update:
                summary[item.key or "/".join(item.nested_key)] = json.loads(item.value_json)
    return summary


def lines(path: Path) -> int:
    return sum(1 for line in path.read_text().splitlines() if line.strip())


def speed_rows(report: Path) -> dict[str, list[str]]:
    """Rows of the report's speed tables, by their run column (16 cells: traversal, N_pf, run, ...)."""
    rows = {}
    for line in report.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("| ") and len(cells) == 16 and cells[0] != "traversal":
            rows[cells[2]] = cells
    return rows


# --- sweeps with W&B ------------------------------------------------------------------------------


def test_a_wandb_sweep_logs_each_job_to_its_own_run_and_a_job_resumed_alone_continues_it(toy_table, tmp_path):
    """-m over traversal x n_pf with logger=wandb: one W&B run per job, each with its job's summary and
    plots/; then one job resumed on its own (hydra.run.dir=JOB, more prompts) continues its W&B run."""
    env, sweep = offline_env(tmp_path), tmp_path / "sweep"
    base = (*toy(toy_table, dataset__num_prompts=1), "logger=wandb")
    result = main_cli("-m", *base, "traversal=sequential,bfs", "budget.n_pf=2,4", f"hydra.sweep.dir={sweep}", env=env)
    assert result.returncode == 0, result.stderr
    ids = {}
    for job in range(4):
        run_dir = sweep / str(job)
        summary = json.loads((run_dir / "summary.json").read_text())
        (log,) = wandb_logs(run_dir)
        logged = wandb_summary(log)
        assert {k: logged[k] for k in ("traversal", "n_pf", "model_calls", "transitions")} == {
            k: summary[k] for k in ("traversal", "n_pf", "model_calls", "transitions")
        }
        assert (run_dir / "plots" / "transition_traces.png").is_file()
        ids[job] = (run_dir / "wandb_run_id").read_text().strip()
    assert len(set(ids.values())) == 4

    job = sweep / "3"  # bfs, n_pf=4
    resumed = main_cli(
        *toy(toy_table, dataset__num_prompts=2), "logger=wandb", "traversal=bfs", "budget.n_pf=4", "run.resume=true",
        f"hydra.run.dir={job}",
        env=env,
    )  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr
    _, second = wandb_logs(job)
    assert second.name == f"run-{ids[3]}.wandb"  # the same W&B run, continued
    assert wandb_summary(second)["chains"] == json.loads((job / "summary.json").read_text())["chains"] == 4


def test_a_sweep_under_a_wandb_run_id_is_refused_before_any_job(toy_table, tmp_path):
    """A W&B sweep agent (or a shell) exports WANDB_RUN_ID; W&B takes it over each job's own id, so every
    job of a -m sweep logged into that one W&B run, each replacing the last one's config and summary, its
    rows from step 0 dropped on `wandb sync`. Refused now in one line naming the variable, no job run."""
    sweep = tmp_path / "sweep"
    args = (*toy(toy_table, dataset__num_prompts=1), "logger=wandb", "logger.log_plots=false")
    result = main_cli(
        "-m", *args, "traversal=sequential,bfs", f"hydra.sweep.dir={sweep}",
        env=offline_env(tmp_path, WANDB_RUN_ID="agentrun1"),
    )  # fmt: skip
    assert result.returncode == 2
    assert "WANDB_RUN_ID=agentrun1" in one_error_line(result.stderr)
    assert not list(sweep.glob("*/chains.jsonl"))
    # Without W&B the variable is nobody's business; nor with one job (one run, the agent's).
    alone = main_cli(
        *args, "traversal=bfs", f"hydra.run.dir={tmp_path / 'one'}", env=offline_env(tmp_path, WANDB_RUN_ID="agentrun1")
    )
    assert alone.returncode == 0, alone.stderr
    unlogged = main_cli(
        "-m", *toy(toy_table, dataset__num_prompts=1), "traversal=sequential,bfs", f"hydra.sweep.dir={sweep}",
        env=offline_env(tmp_path, WANDB_RUN_ID="agentrun1"),
    )  # fmt: skip
    assert unlogged.returncode == 0, unlogged.stderr


def test_a_failing_job_of_a_wandb_sweep_is_named_and_the_other_jobs_results_stay(toy_table, tmp_path):
    """A bad toy table for one point of the sweep: that job fails with one error line naming it, the
    other job's run (and its W&B run) completes, and the sweep exits non-zero."""
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"bos_logits": [0.0, 0.0], "logits": [[0.0, 0.0]]}))
    sweep = tmp_path / "sweep"
    args = toy(toy_table, dataset__num_prompts=1, engine__table=f"{bad},{toy_table}")
    result = main_cli(
        "-m", *args, "logger=wandb",
        f"hydra.sweep.dir={sweep}", env=offline_env(tmp_path),
    )  # fmt: skip
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    assert [line for line in result.stderr.splitlines() if line.startswith("error: sweep job 0:")]
    assert not (sweep / "0").exists()  # nothing left behind for the failed job
    summary = json.loads((sweep / "1" / "summary.json").read_text())
    assert summary["complete"] is True and lines(sweep / "1" / "chains.jsonl") == summary["chains"] == 2
    (log,) = wandb_logs(sweep / "1")
    assert wandb_summary(log)["complete"] is True


# --- the evaluation scripts over a sweep -----------------------------------------------------------


def test_report_compare_runs_and_plots_over_a_sweep_agree_with_its_summaries(toy_table, tmp_path, capsys):
    """report.py and compare_runs.py print the numbers summary.json holds (transitions per call, time
    per call, speedup = ratio of summed call times over the same chains), and PreSTO chains equal the
    sequential ones, so the paired TOST sees a zero difference."""
    sweep = tmp_path / "sweep"
    result = main_cli(
        "-m", *toy(toy_table, dataset__num_prompts=3), "sampler=entropycut", "traversal=sequential,bfs",
        "budget.n_pf=4", f"hydra.sweep.dir={sweep}", env=offline_env(tmp_path),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    seq, bfs = (json.loads((sweep / job / "summary.json").read_text()) for job in ("0", "1"))
    chains = [
        [json.loads(x)["tokens"] for x in (sweep / job / "chains.jsonl").read_text().splitlines()] for job in "01"
    ]
    assert chains[0] == chains[1]

    assert call_script(load_script("report"), sweep, "--no-figures") == 0
    rows = speed_rows(sweep / "report.md")
    for job, summary in (("0", seq), ("1", bfs)):
        assert float(rows[job][4]) == pytest.approx(summary["transitions_per_call"], rel=1e-3)
        assert float(rows[job][5]) == pytest.approx(summary["time_per_call_s"], rel=1e-3)
    assert float(rows["1"][7]) == pytest.approx(seq["call_time_s"] / bfs["call_time_s"], rel=1e-3)

    out = tmp_path / "cmp.json"
    capsys.readouterr()
    assert call_script(load_script("compare_runs"), sweep / "0", sweep / "1", "--json", out) == 0
    pair = json.loads(out.read_text())["pairs"][0]
    assert pair["speedup"]["speedup"] == pytest.approx(seq["call_time_s"] / bfs["call_time_s"])
    assert pair["speedup"]["calls_ratio"] == pytest.approx(seq["model_calls"] / bfs["model_calls"])
    for stat in ("loglik", "confidence"):
        tost = pair["tost"][stat]
        assert tost["mean_diff"] == 0 and tost["sd_diff"] == 0
        assert tost["equivalent"] is (tost["baseline_sd"] > 0)  # undefined (p_eq null) without a spread

    assert call_script(load_script("plots"), sweep, "--out", tmp_path / "figures") == 0
    assert (tmp_path / "figures" / "speedup_scatter.png").is_file()


def test_scripts_leave_out_a_run_without_a_summary_and_refuse_runs_of_another_table(toy_table, tmp_path, capsys):
    """A run still going (chains.jsonl, no summary.json) is left out of report.py with a notice and is
    one error line for compare_runs.py; runs of another toy table are a setting of their own in the
    report and are refused by compare_runs.py with the key that differs."""
    other = write_toy_table(tmp_path / "other.json", vocab=5, seed=11)
    env = offline_env(tmp_path)
    for name, table, traversal in (("seq", toy_table, "sequential"), ("bfs", other, "bfs")):
        result = main_cli(*toy(table), f"traversal={traversal}", f"hydra.run.dir={tmp_path / 'runs' / name}", env=env)
        assert result.returncode == 0, result.stderr
    going = tmp_path / "runs" / "going"
    going.mkdir()
    (going / "chains.jsonl").write_text((tmp_path / "runs" / "seq" / "chains.jsonl").read_text())

    capsys.readouterr()
    assert call_script(load_script("report"), tmp_path / "runs", "--no-figures") == 0
    err = capsys.readouterr().err
    assert "notice:" in err and "going left out: no summary.json" in err
    report = (tmp_path / "runs" / "report.md").read_text()
    assert "no sequential run of this setting here" in report and "engine.table" in report

    assert call_script(load_script("compare_runs"), tmp_path / "runs" / "seq", going) == 2
    assert "no summary.json" in one_error_line(capsys.readouterr().err)
    assert call_script(load_script("compare_runs"), tmp_path / "runs" / "seq", tmp_path / "runs" / "bfs") == 2
    assert "engine.table" in one_error_line(capsys.readouterr().err)


def test_a_run_killed_while_a_resume_extends_it_is_not_reported_complete(toy_table, tmp_path, capsys):
    """Finished with 1 prompt, resumed with dataset.num_prompts raised (README: extends the run) and killed
    hard (or still going): summary.json is the first session's, "complete": true for 2 chains, while
    config.yaml asks for many more and chains.jsonl holds more than 2. report.py and compare_runs.py
    then present the run as complete: no incomplete-run warning."""
    env, run_dir = offline_env(tmp_path), tmp_path / "run"
    args = ("traversal=bfs", "budget.n_pf=2", f"hydra.run.dir={run_dir}")
    assert main_cli(*toy(toy_table, dataset__num_prompts=1), *args, env=env).returncode == 0
    process = subprocess.Popen(
        [sys.executable, str(MAIN), *toy(toy_table, dataset__num_prompts=5000), *args, "run.resume=true"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        cwd="/",
        env=env,
    )
    try:
        deadline = time.monotonic() + 120
        while lines(run_dir / "chains.jsonl") < 12 and time.monotonic() < deadline and process.poll() is None:
            time.sleep(0.05)
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait()
    run = load_run(run_dir)
    assert 2 < run.chains_held < 10000, run.chains_held
    capsys.readouterr()
    assert call_script(load_script("report"), run_dir, "--no-figures") == 0
    assert run.complete is False and "incomplete" in (run_dir / "report.md").read_text()
    # The summary the resume left on starting says so itself, with the chains it was to make.
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["complete"] is False and summary["expected_chains"] > 2, summary


def test_a_resume_from_another_working_directory_keeps_to_the_runs_own_toy_table(tmp_path):
    """README: `engine.table=table.json` (a path relative to the working directory). config.yaml kept the
    relative path, so `run.resume=true` from another directory holding another table.json passed the config
    check and sampled the rest of the run from another model, silently. config.yaml now holds the absolute
    path: that resume is refused naming engine.table, and one that names the run's table goes on."""
    first, second = tmp_path / "a", tmp_path / "b"
    first.mkdir()
    second.mkdir()
    write_toy_table(first / "table.json", vocab=6, seed=1)
    write_toy_table(second / "table.json", vocab=6, seed=2)
    env, run_dir = offline_env(tmp_path), tmp_path / "run"
    one, two = toy("table.json", dataset__num_prompts=1), toy("table.json")
    assert main_cli(*one, "traversal=sequential", f"hydra.run.dir={run_dir}", env=env, cwd=first).returncode == 0
    saved = (run_dir / "config.yaml").read_text()
    assert f"table: {first / 'table.json'}" in saved, saved
    resumed = main_cli(*two, "traversal=sequential", "run.resume=true", f"hydra.run.dir={run_dir}", env=env, cwd=second)
    assert resumed.returncode == 2
    assert "engine.table" in one_error_line(resumed.stderr.strip().splitlines()[-1] + "\n")
    by_absolute_path = toy(str(first / "table.json"))
    resumed = main_cli(
        *by_absolute_path, "traversal=sequential", "run.resume=true", f"hydra.run.dir={run_dir}", env=env, cwd=second
    )
    assert resumed.returncode == 0, resumed.stderr
    fresh = main_cli(*two, "traversal=sequential", f"hydra.run.dir={tmp_path / 'fresh'}", env=env, cwd=first)
    assert fresh.returncode == 0, fresh.stderr

    def tokens(run_dir):
        return sorted((r["prompt_id"], r["chain"], r["tokens"]) for r in load_run(run_dir).full_chains())

    assert tokens(run_dir) == tokens(tmp_path / "fresh")
