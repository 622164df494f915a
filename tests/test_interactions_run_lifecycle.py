"""A run's lifecycle across several commands: interrupted (Ctrl-C, SIGTERM, kill -9), then resumed in its directory.

An interaction review of the run directory (DESIGN.md section 3, README "Ctrl-C or a SIGTERM ..."): each test
runs the toy engine in this process (``presto.runner.run.run``) or the CLI in a subprocess, interrupts a run the way
a researcher's session ends (a signal, a killed process: its files cut at a chain boundary with a torn last line, no
summary), resumes it with ``run.resume=true`` in the same directory, and compares the directory with an
uninterrupted run's. The tests under "Defects" reproduce what the review found, fixed since.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from presto.engines.toy import ToyEngine
from presto.runner import run as run_module
from presto.runner.outputs import read_jsonl
from tests.conftest import MAIN, compose_run, run_cli, toy_args

# Two prompts x two chains, n = 12 in three blocks of B = 4, K = 4 transitions per block.
SMALL = (
    "engine=toy",
    "model=toy",
    "dataset=toy",
    "experiment=none",
    "run.progress=false",
    "dataset.num_prompts=2",
    "run.chains_per_prompt=2",
    "sampler.max_new_tokens=12",
    "sampler.block_size=4",
    "sampler.steps=4",
    "budget.n_pf=4",
)


def config(table, *extra: str):
    return compose_run(*SMALL, f"engine.table={table}", *extra)


def chain_key(record):
    return record["prompt_id"], record["chain"]


def chains_by_key(run_dir: Path) -> dict:
    return {chain_key(r): (r["tokens"], r["accepts"]) for r in read_jsonl(run_dir / "chains.jsonl")}


def round_keys(run_dir: Path) -> list:
    return [(t["prompt_id"], t["chain"], t["round"]) for t in read_jsonl(run_dir / "trees.jsonl")]


def summary_of(run_dir: Path) -> dict:
    return json.loads((run_dir / "summary.json").read_text())


def interrupt_after_calls(monkeypatch, calls: int) -> None:
    """The toy engine raises KeyboardInterrupt (what Ctrl-C or the CLI's SIGTERM handler raise) at call ``calls``."""
    generate = ToyEngine.generate
    made = [0]

    def counting(self, requests):
        made[0] += 1
        if made[0] == calls:
            raise KeyboardInterrupt
        return generate(self, requests)

    monkeypatch.setattr(ToyEngine, "generate", counting)


def interrupt_in_chain(monkeypatch, chain: int, calls: int) -> None:
    """KeyboardInterrupt at call ``calls`` of the run's ``chain``-th chain (counted from 1). Counted per chain,
    not per run: a predictive rule plans from measured call times, so how many calls the chains before it
    make varies from run to run (on a busy machine, enough to finish a run before a run-wide count)."""
    sample = run_module.sample_chain
    started = [0]

    def counting(*args, **kwargs):
        started[0] += 1
        if started[0] == chain:  # before the chain wraps the engine's generate for its call times
            interrupt_after_calls(monkeypatch, calls)
        return sample(*args, **kwargs)

    monkeypatch.setattr(run_module, "sample_chain", counting)


def assert_consistent(run_dir: Path) -> None:
    """Every chain once; each chain's rounds logged once, numbered 0..rounds-1; summary totals = chain records'."""
    records = read_jsonl(run_dir / "chains.jsonl")
    assert len({chain_key(r) for r in records}) == len(records), "a chain recorded twice"
    keys = round_keys(run_dir)
    assert len(keys) == len(set(keys)), "a round logged twice"
    summary = summary_of(run_dir)
    for record in records:
        logged = sorted(k[2] for k in keys if k[:2] == chain_key(record))
        assert logged == ([] if summary["traversal"] in ("sequential", "none") else list(range(record["rounds"])))
    assert summary["chains"] == len(records) == summary["expected_chains"] and summary["complete"] is True
    assert summary["model_calls"] == sum(r["model_calls"] for r in records)
    assert summary["transitions"] == sum(r["transitions"] for r in records)


def kill_nine_at_a_chain_boundary(run_dir: Path, kept: int) -> None:
    """What kill -9 leaves of a finished run: ``kept`` chains, the next one's record torn, the rounds of the chain in
    flight partly logged with a torn last line, no summary (a killed process writes none)."""
    chains = (run_dir / "chains.jsonl").read_text().splitlines()
    (run_dir / "chains.jsonl").write_text("".join(line + "\n" for line in chains[:kept]) + chains[kept][:25])
    finished = {chain_key(json.loads(line)) for line in chains[:kept]}
    trees = (run_dir / "trees.jsonl").read_text().splitlines()
    kept_trees = [line for line in trees if chain_key(json.loads(line)) in finished]
    in_flight = [line for line in trees if chain_key(json.loads(line)) == chain_key(json.loads(chains[kept]))]
    partial = in_flight[: len(in_flight) // 2 + 1]
    torn = partial[-1][: len(partial[-1]) // 2] if partial else ""
    (run_dir / "trees.jsonl").write_text("".join(line + "\n" for line in kept_trees + partial[:-1]) + torn)
    (run_dir / "summary.json").unlink()


# --- Interactions that work: interrupted and resumed runs equal uninterrupted ones --------------------------------


@pytest.mark.parametrize("traversal", ["sequential", "bfs", "predictive"])
@pytest.mark.parametrize("sampler", ["powermh", "entropycut", "multitry"])
def test_an_interrupted_then_resumed_run_equals_an_uninterrupted_one_token_for_token(
    toy_table, tmp_path, monkeypatch, sampler, traversal
):
    """Every sampler x traversal, several chains per prompt and several blocks per chain, Ctrl-C in the middle of
    the third chain: the resumed run keeps the finished chains, reruns the cut one, and ends with the chains of a run
    that was never interrupted, each chain and each round once, its summary over both sessions."""
    extra = (f"sampler={sampler}", f"traversal={traversal}")
    reference = run_module.run(config(toy_table, *extra), tmp_path / "reference")
    run_dir = tmp_path / "run"
    with monkeypatch.context() as patched:
        interrupt_in_chain(patched, chain=3, calls=2)  # a chain makes a call per block at least: 3 here
        with pytest.raises(KeyboardInterrupt):
            run_module.run(config(toy_table, *extra), run_dir)
    first = summary_of(run_dir)
    assert first["complete"] is False and first["chains"] == 2
    resumed = run_module.run(config(toy_table, *extra, "run.resume=true"), run_dir)
    assert chains_by_key(run_dir) == chains_by_key(tmp_path / "reference")
    assert_consistent(run_dir)
    assert resumed["transitions"] == reference["transitions"]
    assert resumed["engine_calls"] >= resumed["model_calls"] and resumed["wall_time_s"] >= first["wall_time_s"]
    if traversal != "predictive":  # the predictive rule's plans follow measured call times: its calls and rounds vary
        assert resumed["model_calls"] == reference["model_calls"]
        assert sorted(round_keys(run_dir)) == sorted(round_keys(tmp_path / "reference"))


@pytest.mark.parametrize("sampler", ["powermh", "power_smc", "best_of_n"])
def test_a_run_killed_at_a_chain_boundary_resumes_to_the_uninterrupted_chains(toy_table, tmp_path, sampler):
    """kill -9 (torn chains.jsonl and trees.jsonl last lines, no summary), for an MH sampler and test-time baselines."""
    extra = (f"sampler={sampler}", "traversal=bfs")
    run_module.run(config(toy_table, *extra), tmp_path / "reference")
    run_module.run(config(toy_table, *extra), tmp_path / "run")
    kill_nine_at_a_chain_boundary(tmp_path / "run", kept=1)
    run_module.run(config(toy_table, *extra, "run.resume=true"), tmp_path / "run")
    assert chains_by_key(tmp_path / "run") == chains_by_key(tmp_path / "reference")
    assert_consistent(tmp_path / "run")
    assert sorted(round_keys(tmp_path / "run")) == sorted(round_keys(tmp_path / "reference"))


def test_a_resume_with_fewer_prompts_then_more_ends_as_the_whole_run(toy_table, tmp_path, monkeypatch):
    """Interrupted in its second prompt's first chain, resumed with dataset.num_prompts=1 (allowed: no finished chain
    of prompt 2), then with 3: the chains of an uninterrupted 3-prompt run, each once."""
    run_module.run(config(toy_table, "dataset.num_prompts=3"), tmp_path / "reference")
    run_dir = tmp_path / "run"
    with monkeypatch.context() as patched:
        interrupt_after_calls(patched, 1)  # the first call: no chain finished
        with pytest.raises(KeyboardInterrupt):
            run_module.run(config(toy_table, "dataset.num_prompts=3"), run_dir)
    one = run_module.run(config(toy_table, "dataset.num_prompts=1", "run.resume=true"), run_dir)
    assert one["chains"] == one["expected_chains"] == 2 and one["complete"] is True
    run_module.run(config(toy_table, "dataset.num_prompts=3", "run.resume=true"), run_dir)
    assert chains_by_key(run_dir) == chains_by_key(tmp_path / "reference")
    assert_consistent(run_dir)


def test_resuming_a_finished_run_changes_no_chain_or_round(toy_table, tmp_path):
    run_module.run(config(toy_table), tmp_path)
    chains, trees = (tmp_path / "chains.jsonl").read_bytes(), (tmp_path / "trees.jsonl").read_bytes()
    summary = run_module.run(config(toy_table, "run.resume=true"), tmp_path)
    assert (tmp_path / "chains.jsonl").read_bytes() == chains and (tmp_path / "trees.jsonl").read_bytes() == trees
    assert summary["chains"] == 4 and summary["complete"] is True


def test_a_sigkilled_cli_run_resumes_past_its_stale_lock(toy_table, tmp_path):
    """A real kill -9 of the CLI: the .lock it leaves (flock, released by the kernel) does not stop the resume."""
    run_dir = tmp_path / "run"
    args = toy_args(toy_table, run_dir, "run.chains_per_prompt=3", "run.progress=false", steps=300)
    process = subprocess.Popen([sys.executable, str(MAIN), *args], stderr=subprocess.DEVNULL, cwd="/")
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not (
        (run_dir / "chains.jsonl").exists() and (run_dir / "chains.jsonl").read_text().strip()
    ):
        time.sleep(0.02)
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=60)
    assert (run_dir / ".lock").exists() and not (run_dir / "summary.json").exists()
    resumed = run_cli(*args, "run.resume=true")
    assert resumed.returncode == 0, resumed.stderr
    records = read_jsonl(run_dir / "chains.jsonl")
    assert len(records) == len({chain_key(r) for r in records}) == summary_of(run_dir)["chains"] == 6


# --- Defects -----------------------------------------------------------------------------------------------------


def test_a_resume_after_kill_nine_counts_the_killed_sessions_calls_and_time(toy_table, tmp_path):
    run_dir = tmp_path / "run"
    run_module.run(config(toy_table, "traversal=bfs"), run_dir)
    kill_nine_at_a_chain_boundary(run_dir, kept=2)
    summary = run_module.run(config(toy_table, "traversal=bfs", "run.resume=true"), run_dir)
    records = read_jsonl(run_dir / "chains.jsonl")
    assert summary["model_calls"] == sum(r["model_calls"] for r in records)
    assert summary["engine_calls"] >= summary["model_calls"]
    assert summary["wall_time_s"] >= sum(r["wall_time_s"] for r in records[:2])


def test_a_chain_recorded_twice_is_counted_once_by_a_resume(toy_table, tmp_path):
    run_module.run(config(toy_table), tmp_path)
    lines = (tmp_path / "chains.jsonl").read_text().splitlines()
    (tmp_path / "chains.jsonl").write_text("".join(line + "\n" for line in [*lines, lines[1]]))
    summary = run_module.run(config(toy_table, "run.resume=true"), tmp_path)
    assert summary["chains"] == summary["expected_chains"] == 4
    assert summary["model_calls"] == sum(json.loads(line)["model_calls"] for line in lines)


@pytest.mark.parametrize("line", ["42", "null", '{"prompt_id": "toy/0", "chain": 1}'])
def test_a_hand_edited_chains_line_that_is_json_but_no_record_is_no_traceback(toy_table, tmp_path, line):
    run_dir = tmp_path / "run"
    assert run_cli(*toy_args(toy_table, run_dir, "run.progress=false")).returncode == 0
    lines = (run_dir / "chains.jsonl").read_text().splitlines()
    (run_dir / "chains.jsonl").write_text("".join(x + "\n" for x in [lines[0], line, *lines[2:]]))
    result = run_cli(*toy_args(toy_table, run_dir, "run.progress=false", "run.resume=true"))
    assert "Traceback" not in result.stderr and "chains.jsonl" in result.stderr, result.stderr


@pytest.mark.parametrize("content", ["", "[]"])
def test_a_damaged_summary_json_does_not_stop_a_resume_with_a_traceback(toy_table, tmp_path, content):
    run_dir = tmp_path / "run"
    assert run_cli(*toy_args(toy_table, run_dir, "run.progress=false")).returncode == 0
    (run_dir / "summary.json").write_text(content)
    result = run_cli(*toy_args(toy_table, run_dir, "run.progress=false", "run.resume=true"))
    assert "Traceback" not in result.stderr, result.stderr


def test_a_run_directory_under_a_file_is_one_error_line(toy_table, tmp_path):
    (tmp_path / "afile").write_text("")
    result = run_cli(*toy_args(toy_table, tmp_path / "afile" / "run"))
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    assert [line for line in result.stderr.splitlines() if line.startswith("error:")], result.stderr


def test_a_full_disk_is_one_error_line(toy_table, tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "chains.jsonl").symlink_to("/dev/full")  # every write: ENOSPC
    result = run_cli(*toy_args(toy_table, run_dir, "run.progress=false"))
    assert result.returncode != 0 and "Traceback" not in result.stderr, result.stderr
    assert [line for line in result.stderr.splitlines() if line.startswith("error:")], result.stderr


def test_a_full_disk_still_closes_the_engine(toy_table, tmp_path, monkeypatch):
    closed = []
    close = ToyEngine.close
    monkeypatch.setattr(ToyEngine, "close", lambda self: (closed.append(True), close(self)))
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "chains.jsonl").symlink_to("/dev/full")
    with pytest.raises(Exception):  # noqa: B017 (ENOSPC, or the one-line error a fix turns it into)
        run_module.run(config(toy_table), run_dir)
    assert closed


def test_resuming_a_sweep_directory_without_multirun_is_refused(toy_table, tmp_path):
    sweep_dir = tmp_path / "sweep"
    base = toy_args(toy_table, tmp_path / "unused", "run.progress=false")
    assert run_cli("-m", *base, f"hydra.sweep.dir={sweep_dir}", "budget.n_pf=2,3").returncode == 0
    result = run_cli(*toy_args(toy_table, sweep_dir, "run.progress=false", "budget.n_pf=2", "run.resume=true"))
    assert result.returncode == 2 and "-m" in result.stderr, result.stderr
    assert not (sweep_dir / "chains.jsonl").exists()


def test_resuming_a_single_runs_directory_as_a_sweep_is_refused(toy_table, tmp_path):
    """The mirror case: `-m run.resume=true hydra.sweep.dir=RUN_DIR` started a fresh run in RUN_DIR/0."""
    run_dir = tmp_path / "run"
    assert run_cli(*toy_args(toy_table, run_dir, "run.progress=false")).returncode == 0
    base = toy_args(toy_table, tmp_path / "unused", "run.progress=false", "run.resume=true")
    result = run_cli("-m", *base, f"hydra.sweep.dir={run_dir}", "budget.n_pf=2,3")
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    assert f"without -m, with hydra.run.dir={run_dir}" in result.stderr
    assert not (run_dir / "0" / "chains.jsonl").exists() and not (run_dir / "1" / "chains.jsonl").exists()


def test_a_damaged_config_yaml_stops_a_resume_with_one_line_naming_it(toy_table, tmp_path):
    run_dir = tmp_path / "run"
    assert run_cli(*toy_args(toy_table, run_dir, "run.progress=false")).returncode == 0
    (run_dir / "config.yaml").write_text("sampler: [unclosed\n")
    result = run_cli(*toy_args(toy_table, run_dir, "run.progress=false", "run.resume=true"))
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    (line,) = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert f"{run_dir / 'config.yaml'} cannot be read" in line


def test_dropped_chain_lines_are_named_and_their_chains_run_again(toy_table, tmp_path, capsys):
    """A second record of a chain and a line that is JSON but no record: each moved to chains.dropped.jsonl with a
    warning naming its line; the run then holds each chain once, the dropped line's chain sampled again, equal to its
    first sampling."""
    run_dir = tmp_path / "run"
    run_module.run(config(toy_table), run_dir)
    original = chains_by_key(run_dir)
    lines = (run_dir / "chains.jsonl").read_text().splitlines()
    damaged = [lines[0], lines[0], "[1, 2]", *lines[2:]]  # line 2 repeats line 1; line 3 replaces the second chain
    (run_dir / "chains.jsonl").write_text("".join(line + "\n" for line in damaged))
    capsys.readouterr()
    summary = run_module.run(config(toy_table, "run.resume=true"), run_dir)
    err = capsys.readouterr().err
    assert "line 2 is a second record of chain" in err and "line 3 is not a chain record (a JSON list)" in err, err
    assert summary["chains"] == summary["expected_chains"] == len(original) and summary["complete"]
    assert chains_by_key(run_dir) == original
    assert len(read_jsonl(run_dir / "chains.jsonl")) == len(original)
    assert read_jsonl(run_dir / "chains.dropped.jsonl") == [json.loads(lines[0]), [1, 2]]  # set aside, not lost


def test_ctrl_c_while_the_engine_loads_points_at_no_missing_file_and_the_resume_it_names_works(toy_table, tmp_path):
    """Ctrl-C while the engine starts (vLLM takes minutes): the message named DIR/chains.jsonl, which did not exist."""
    hooks = tmp_path / "hooks"
    hooks.mkdir()
    (hooks / "sitecustomize.py").write_text(
        "from presto.engines import toy\n"
        "def interrupted(self, table):\n"
        "    raise KeyboardInterrupt\n"
        "toy.ToyEngine.__init__ = interrupted\n"
    )
    run_dir = tmp_path / "run"
    args = toy_args(toy_table, run_dir, "run.progress=false")
    src = str(MAIN.parent)
    done = run_cli(*args, env={"PYTHONPATH": f"{hooks}:{src}"})
    assert done.returncode == 130, done.stderr
    assert not (run_dir / "chains.jsonl").exists()
    assert (
        f"interrupted: no chain had finished; rerun with the same overrides and run.resume=true hydra.run.dir={run_dir}"
        in done.stderr
    )
    assert "chains.jsonl" not in done.stderr, done.stderr
    resumed = run_cli(*args, "run.resume=true")
    assert resumed.returncode == 0, resumed.stderr
    assert summary_of(run_dir)["complete"] is True
