"""The command line: runs on the toy engine, sweeps, resumes, and bad input."""

from __future__ import annotations

import json

import pytest

from tests.conftest import run_cli, toy_args


def read_chains(run_dir):
    return [json.loads(line) for line in (run_dir / "chains.jsonl").read_text().splitlines()]


def test_toy_run_writes_the_run_directory(toy_table, tmp_path):
    run_dir = tmp_path / "run"
    result = run_cli(*toy_args(toy_table, run_dir, "traversal=bfs", "budget.n_pf=5"))
    assert result.returncode == 0, result.stderr
    summary = json.loads((run_dir / "summary.json").read_text())
    for key in (
        "sampler",
        "traversal",
        "n_pf",
        "prompts",
        "chains",
        "transitions",
        "model_calls",
        "call_time_s",
        "transitions_per_call",
        "time_per_call_s",
        "wall_time_s",
        "loglik_mean",
        "confidence_mean",
    ):
        assert key in summary, key
    assert summary["chains"] == 4 and summary["prompts"] == 2
    assert summary["transitions"] == 4 * 2 * 6
    chains = read_chains(run_dir)
    assert len(chains) == 4
    for record in chains:
        assert len(record["tokens"]) == 8 and len(record["accepts"]) == 12
        for key in ("prompt_id", "chain", "seed", "text", "model_calls", "call_time_s", "transitions"):
            assert key in record
    trees = [json.loads(line) for line in (run_dir / "trees.jsonl").read_text().splitlines()]
    assert trees and {"prompt_id", "chain", "round", "nodes"} <= set(trees[0])
    node = trees[0]["nodes"][0]
    assert {"id", "parent", "depth", "cut", "features", "log_accept", "eps_class", "reached"} <= set(node)
    assert (run_dir / "config.yaml").exists()


def test_sequential_and_bfs_runs_agree(toy_table, tmp_path):
    outputs = {}
    for traversal in ("sequential", "bfs"):
        run_dir = tmp_path / traversal
        result = run_cli(*toy_args(toy_table, run_dir, f"traversal={traversal}", "seed=5"))
        assert result.returncode == 0, result.stderr
        outputs[traversal] = [(r["prompt_id"], r["chain"], r["tokens"], r["accepts"]) for r in read_chains(run_dir)]
    assert outputs["sequential"] == outputs["bfs"]


def test_resume_skips_finished_chains(toy_table, tmp_path):
    run_dir = tmp_path / "run"
    assert run_cli(*toy_args(toy_table, run_dir)).returncode == 0
    lines = (run_dir / "chains.jsonl").read_text().splitlines()
    # Simulate a run killed after two chains, mid-write of the third.
    (run_dir / "chains.jsonl").write_text("\n".join(lines[:2]) + "\n" + lines[2][:20])
    result = run_cli(*toy_args(toy_table, run_dir, "run.resume=true"))
    assert result.returncode == 0, result.stderr
    resumed = read_chains(run_dir)
    assert [json.loads(x)["tokens"] for x in lines] == [r["tokens"] for r in resumed]
    assert json.loads((run_dir / "summary.json").read_text())["chains"] == 4
    # Without resume the finished directory is refused, nothing overwritten.
    again = run_cli(*toy_args(toy_table, run_dir))
    assert again.returncode != 0 and "run.resume=true" in again.stderr
    assert read_chains(run_dir) == resumed


def test_multirun_sweeps_budgets(toy_table, tmp_path):
    sweep_dir = tmp_path / "sweep"
    result = run_cli("-m", *toy_args(toy_table, tmp_path / "unused", f"hydra.sweep.dir={sweep_dir}", "budget.n_pf=1,3"))
    assert result.returncode == 0, result.stderr
    summaries = sorted(json.loads(p.read_text())["n_pf"] for p in sweep_dir.glob("*/summary.json"))
    assert summaries == [1, 3]


@pytest.mark.parametrize(
    ("override", "needle"),
    [
        ("sampler.alpha=0", "sampler.alpha"),
        ("sampler.alpha=-2", "sampler.alpha"),
        ("sampler.tau=0", "sampler.tau"),
        ("sampler.block_size=3", "sampler.block_size"),
        ("sampler.steps=-1", "sampler.steps"),
        ("budget.n_pf=0", "budget.n_pf"),
        ("seed=-1", "seed"),
        ("run.chains_per_prompt=0", "run.chains_per_prompt"),
        ("sampler=nope", "sampler=nope"),
        ("traversal=dfs", "traversal=dfs"),
        ("engine.table=/does/not/exist.json", "engine.table"),
    ],
)
def test_bad_input_is_one_clear_line(toy_table, tmp_path, override, needle):
    run_dir = tmp_path / "run"
    result = run_cli(*toy_args(toy_table, run_dir), override)
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    error_lines = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(error_lines) == 1 and needle in error_lines[0], result.stderr
    assert not run_dir.exists(), "nothing may be written for a run that never started"


def test_malformed_toy_table_is_one_clear_line(tmp_path):
    table = tmp_path / "bad.json"
    table.write_text('{"bos_logits": [0, 1], "logits": [[0, 1]]}')
    run_dir = tmp_path / "run"
    result = run_cli(*toy_args(table, run_dir))
    assert result.returncode != 0 and "Traceback" not in result.stderr
    assert "engine.table" in result.stderr and "VxV" in result.stderr
    assert not (run_dir / "chains.jsonl").exists()


def test_missing_model_is_one_clear_line(tmp_path):
    run_dir = tmp_path / "run"
    result = run_cli("engine=hf", "model.path=/no/such/model", "dataset=toy", f"hydra.run.dir={run_dir}", timeout=120)
    assert result.returncode != 0 and "Traceback" not in result.stderr
    assert "model.path" in result.stderr
    assert not (run_dir / "chains.jsonl").exists()
