"""oracle_bound, benchmark, call_cost and predictor training on bad and edge inputs.

Each mistake is one `error:` line and exit status 2, found before the work it would spoil;
a run's own files are never an output; long replays show progress.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.conftest import (
    PROJECT_ROOT,
    call_script,
    load_script,
    one_error_line,
    run_cli,
    toy_args,
    toy_overrides,
    write_toy_table,
)

oracle_bound = load_script("oracle_bound")
benchmark = load_script("benchmark")
call_cost = load_script("call_cost")


@pytest.fixture(scope="module")
def table(tmp_path_factory):
    return write_toy_table(tmp_path_factory.mktemp("table") / "table.json", vocab=6, seed=3)


@pytest.fixture(scope="module")
def bfs_run(table, tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("runs") / "bfs"
    done = run_cli(*toy_args(table, run_dir, "traversal=bfs", "budget.n_pf=3", "run.progress=false"))
    assert done.returncode == 0, done.stderr[-2000:]
    return run_dir


def test_oracle_bound_names_a_file_that_is_not_a_tree_log(table, capsys):
    assert call_script(oracle_bound, table) == 2  # a JSON file, but a toy table, not trees.jsonl
    assert f"{table}: record 1 is not a prefetch round" in one_error_line(capsys.readouterr().err)


def test_oracle_bound_output_is_checked_before_the_replay(bfs_run, tmp_path, capsys):
    trees = bfs_run / "trees.jsonl"
    before = trees.read_text()
    assert call_script(oracle_bound, bfs_run, "--out", trees) == 2
    assert "would overwrite the run" in one_error_line(capsys.readouterr().err)
    assert trees.read_text() == before
    assert call_script(oracle_bound, bfs_run, "--out", tmp_path) == 2
    assert "is a directory" in one_error_line(capsys.readouterr().err)
    (tmp_path / "file").write_text("")
    assert call_script(oracle_bound, bfs_run, "--out", tmp_path / "file" / "oracle.json") == 2
    assert "is a file, not a directory" in one_error_line(capsys.readouterr().err)


def test_oracle_bound_shows_progress_over_rounds(bfs_run, monkeypatch, capsys):
    monkeypatch.setattr(oracle_bound, "PROGRESS_DELAY_S", 0.0, raising=False)  # shown at once, not after 2 s
    assert call_script(oracle_bound, bfs_run, "--n-pf", "1", "3") == 0
    out, err = capsys.readouterr()
    rounds = int(out.split()[0])  # "N logged rounds; ..."
    assert rounds > 0 and f"rounds: {rounds}round [" in err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--n-pf", "0"), "--n-pf: budgets must be integers >= 1, got 0"),
        (("--n-pf", "3", "-2"), "--n-pf: budgets must be integers >= 1, got -2"),
        (("--traversals", "sequential"), "the sequential chain always runs"),
        (("--traversals", "bfs", "dfs"), "--traversals: dfs is not a PreSTO traversal; choose from bfs, clairvoyant,"),
        # The overrides that stand for those options get the same checks, naming the override.
        (("budget.n_pf=3,-2",), "budget.n_pf=3,-2: budgets must be integers >= 1, got -2"),
        (("traversal=bfs,sequential",), "traversal=bfs,sequential: the sequential chain always runs"),
        (("traversal=dfs",), "traversal=dfs: dfs is not a PreSTO traversal; choose from bfs, clairvoyant,"),
        (("--samplers", "best_of_n"), "sampler=best_of_n is a test-time baseline"),
        (("no_such_key=1",), "Could not override 'no_such_key'"),
        (("sampler.steps=x",), "sampler.steps must be an integer"),
        (("engine.table=/no/such/table.json",), "engine.table: no such file"),
    ],
)
def test_benchmark_refuses_bad_input_before_any_chain(table, tmp_path, capsys, args, message):
    assert call_script(benchmark, *toy_overrides(table), *args, "--out", tmp_path / "b.json") == 2
    out, err = capsys.readouterr()
    assert message in err and "Traceback" not in err and "chain 0" not in out
    assert not (tmp_path / "b.json").exists()


def test_benchmark_refuses_an_output_that_would_destroy_a_run(table, bfs_run, capsys):
    summary = (bfs_run / "summary.json").read_text()
    assert call_script(benchmark, *toy_overrides(table), "--n-pf", "2", "--out", bfs_run / "summary.json") == 2
    out, err = capsys.readouterr()
    assert "would overwrite the run" in one_error_line(err) and "chain 0" not in out
    assert (bfs_run / "summary.json").read_text() == summary


def test_benchmark_runs_a_setting_given_twice_once(table, tmp_path):
    out = tmp_path / "b.json"
    args = ("--n-pf", "2", "2", "--traversals", "bfs", "bfs", "--samplers", "powermh", "powermh")
    assert call_script(benchmark, *toy_overrides(table, steps=2), "dataset.num_prompts=1", *args, "--out", out) == 0
    rows = json.loads(out.read_text())["rows"]
    assert [(r["sampler"], r["traversal"], r["n_pf"], r["chains"]) for r in rows] == [
        ("powermh", "sequential", 1, 2),
        ("powermh", "bfs", 2, 2),
    ]
    assert rows[1]["identical_chains"] == 1.0


def test_an_interrupted_benchmark_keeps_the_samplers_it_finished(table, tmp_path, monkeypatch, capsys):
    import presto.runner.run

    sample_chain, calls = presto.runner.run.sample_chain, []

    def interrupted_in_the_second_sampler(*args, **kwargs):
        calls.append(1)
        if len(calls) > 4:  # powermh: 1 prompt x 2 chains x (sequential, bfs)
            raise KeyboardInterrupt
        return sample_chain(*args, **kwargs)

    monkeypatch.setattr(presto.runner.run, "sample_chain", interrupted_in_the_second_sampler)
    out = tmp_path / "b.json"
    args = ("--n-pf", "2", "--traversals", "bfs", "--samplers", "powermh", "entropycut", "--out", out)
    assert call_script(benchmark, *toy_overrides(table, steps=2), "dataset.num_prompts=1", *args) == 130
    figures = json.loads(out.read_text())
    assert figures["complete"] is False
    assert [(r["sampler"], r["traversal"]) for r in figures["rows"]] == [("powermh", "sequential"), ("powermh", "bfs")]
    assert not list(tmp_path.glob("*.tmp"))
    assert f"interrupted: the figures of powermh are in {out}" in capsys.readouterr().err


def test_call_cost_runs_on_the_toy_engine_and_reports_bad_input_in_one_line(table, capsys):
    toy = ("engine=toy", "model=toy")
    args = ("--rows", "1", "2", "--tokens", "2", "--prompt-tokens", "4")
    assert call_script(call_cost, *toy, f"engine.table={table}", *args) == 0  # prompt ids fit a 6-token vocabulary
    assert capsys.readouterr().out.count("x\n") == 4
    assert call_script(call_cost, *toy, "engine.table=/no/such/table.json", *args) == 2
    assert "engine.table: no such file" in one_error_line(capsys.readouterr().err)
    assert call_script(call_cost, *toy, f"engine.table={table}", "no_such_key=1", *args) == 2
    assert "Could not override 'no_such_key'" in one_error_line(capsys.readouterr().err)


def train(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(PROJECT_ROOT / "src" / "train_predictor.py"), *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd="/",
    )


def test_train_predictor_names_the_key_of_a_bad_number_and_a_file_for_a_directory(tmp_path):
    runs = f"runs=[{tmp_path}]"
    for key in ("epsilon=x", "folds=2.5", "seed=x"):
        done = train(runs, key, f"hydra.run.dir={tmp_path / 'job'}")
        assert done.returncode == 2 and done.stderr.startswith(f"error: {key.split('=')[0]} must be "), done.stderr
    (tmp_path / "file").write_text("")
    done = train(runs, f"hydra.run.dir={tmp_path / 'file'}")
    assert done.returncode == 2
    assert done.stderr == f"error: hydra.run.dir={tmp_path / 'file'} is a file; give a directory\n"
    done = train(runs, "nosuch=1", f"hydra.run.dir={tmp_path / 'job'}")  # Hydra's own message, in one line
    assert done.returncode == 2
    assert done.stderr == "error: Could not override 'nosuch'; To append to your config use +nosuch=1\n"


def test_retrain_refuses_a_workdir_that_is_a_file(tmp_path):
    (tmp_path / "file").write_text("")
    retrain = str(PROJECT_ROOT / "scripts" / "retrain_predictor.sh")
    done = subprocess.run(
        ["bash", retrain, str(tmp_path), "--out", str(tmp_path / "p.ckpt"), "--workdir", str(tmp_path / "file")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2 and done.stderr.startswith(f"error: --workdir {tmp_path / 'file'} is a file")
    assert done.stderr.count("\n") == 1


def test_toy_table_script_writes_a_table_a_toy_run_uses(tmp_path, capsys):
    from presto.engines.toy import ToyEngine, load_toy_table

    toy_table = load_script("toy_table")
    out = tmp_path / "table.json"
    assert call_script(toy_table, out, "--vocab", "4", "--seed", "7") == 0
    assert f"engine.table={out}" in capsys.readouterr().out
    bos, logits = load_toy_table(out)
    assert bos.shape == (4,) and logits.shape == (4, 4)
    assert ToyEngine(out).vocab_size == 4
    again = tmp_path / "again.json"
    assert call_script(toy_table, again, "--vocab", "4", "--seed", "7") == 0
    assert again.read_text() == out.read_text()  # the seed fixes the table
    assert call_script(toy_table, tmp_path / "other.json", "--vocab", "4", "--seed", "8") == 0
    assert (tmp_path / "other.json").read_text() != out.read_text()
    capsys.readouterr()
    for argv, message in [
        ((tmp_path / "t.json", "--vocab", "0"), "vocabulary of at least 1 token, got 0"),
        ((tmp_path / "t.json", "--scale", "nan"), "finite number >= 0, got nan"),
        ((tmp_path,), "is a directory"),
        ((tmp_path / "missing" / "t.json",), "no folder"),
    ]:
        assert call_script(toy_table, *argv) == 2
        assert message in one_error_line(capsys.readouterr().err)
    assert not (tmp_path / "t.json").exists()


def test_benchmark_refuses_an_unwritable_output_before_the_engine(table, capsys, monkeypatch):
    import presto.runner.run

    def no_engine(*args, **kwargs):
        raise AssertionError("the engine loaded before --out was found unwritable")

    monkeypatch.setattr(presto.runner.run, "load_task_and_engine", no_engine)
    out = "/proc/presto_benchmark_figures.json"  # procfs: no file can be created there, even by root
    assert call_script(benchmark, *toy_overrides(table), "--n-pf", "2", "--out", out) == 2
    assert f"--out {out}: cannot write it" in one_error_line(capsys.readouterr().err)


def test_a_figures_file_that_fails_midway_is_one_line_naming_out(table, tmp_path, monkeypatch, capsys):
    import presto.runner.outputs

    write, calls = presto.runner.outputs.write_json_atomic, []

    def disk_full_after_the_first(out, figures):
        calls.append(out)
        if len(calls) > 1:
            raise OSError(28, "No space left on device")
        write(out, figures)

    monkeypatch.setattr(presto.runner.outputs, "write_json_atomic", disk_full_after_the_first)
    out = tmp_path / "b.json"
    args = (*toy_overrides(table, steps=2), "dataset.num_prompts=1", "--n-pf", "2", "--out", out)
    assert call_script(benchmark, *args) == 2
    err = one_error_line(capsys.readouterr().err)
    assert f"--out {out}: cannot write it (No space left on device)" in err and len(calls) == 2


def test_an_output_path_with_an_equals_sign_is_the_option_value(table, tmp_path):
    out = tmp_path / "n_pf=2.json"
    args = (*toy_overrides(table, steps=2), "dataset.num_prompts=1", "--out", out, "--n-pf", "2")
    assert call_script(benchmark, *args) == 0
    assert [r["n_pf"] for r in json.loads(out.read_text())["rows"]] == [1, 2]


@pytest.mark.parametrize("prefix", ["+", "++"])
def test_an_appended_budget_override_chooses_the_budgets(table, tmp_path, prefix):
    out = tmp_path / "b.json"
    args = (*toy_overrides(table, steps=2), "dataset.num_prompts=1", f"{prefix}budget.n_pf=3", "--out", out)
    assert call_script(benchmark, *args) == 0
    assert [r["n_pf"] for r in json.loads(out.read_text())["rows"]] == [1, 3]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("budget.n_pf=2", "budget.n_pf=3"), "budget.n_pf=3 and budget.n_pf=2 both choose the benchmark's n_pf"),
        (("traversal=bfs", "traversal=bfs"), "traversal=bfs and traversal=bfs both choose the benchmark's traversals"),
        (("--n-pf", "2", "++budget.n_pf=3"), "++budget.n_pf=3 and --n-pf both choose the benchmark's n_pf"),
        (("~budget.n_pf=8",), "~budget.n_pf=8: the benchmark's n_pf cannot be deleted; choose it with --n-pf"),
        (("~sampler",), "~sampler: the benchmark's samplers cannot be deleted; choose it with --samplers"),
    ],
)
def test_a_setting_chosen_twice_names_both_sources(table, tmp_path, capsys, args, message):
    assert call_script(benchmark, *toy_overrides(table), *args, "--out", tmp_path / "b.json") == 2
    assert message in one_error_line(capsys.readouterr().err)


def test_the_oracle_table_says_when_trees_were_truncated(table, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(benchmark, "REPLAY_LOGGED_NODES", 2)  # every round's tree is cut short
    out = tmp_path / "b.json"
    args = (*toy_overrides(table), "dataset.num_prompts=1", "--n-pf", "4", "run.progress=false", "--out", out)
    assert call_script(benchmark, *args, "--traversals", "bfs", "predictive") == 0
    rows = {r["traversal"]: r for r in json.loads(out.read_text())["rows"] if r["traversal"] != "sequential"}
    printed = capsys.readouterr().out
    for row in rows.values():  # the predictive row is replayed on BFS's trees: BFS's rounds are the total
        truncated, replayed = row["replayed_rounds_with_truncated_trees"], row["replayed_rounds"]
        assert 0 < truncated <= replayed == rows["bfs"]["rounds"]
        assert f"{truncated} of {replayed} replayed trees truncated: oracle and bfs E are lower bounds" in printed
