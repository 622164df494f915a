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


def test_resume_drops_the_rounds_of_unfinished_chains(toy_table, tmp_path):
    run_dir = tmp_path / "run"
    assert run_cli(*toy_args(toy_table, run_dir, "traversal=bfs", "budget.n_pf=2")).returncode == 0
    complete = (run_dir / "trees.jsonl").read_text()
    # Killed during the third chain: two chains recorded, the third's rounds half logged.
    chains = (run_dir / "chains.jsonl").read_text().splitlines()
    (run_dir / "chains.jsonl").write_text("\n".join(chains[:2]) + "\n")
    third = json.loads(chains[2])
    trees = [json.loads(line) for line in complete.splitlines()]
    cut = max(i for i, t in enumerate(trees) if (t["prompt_id"], t["chain"]) == (third["prompt_id"], third["chain"]))
    (run_dir / "trees.jsonl").write_text("".join(line + "\n" for line in complete.splitlines()[:cut]))
    result = run_cli(*toy_args(toy_table, run_dir, "traversal=bfs", "budget.n_pf=2", "run.resume=true"))
    assert result.returncode == 0, result.stderr
    resumed = [json.loads(line) for line in (run_dir / "trees.jsonl").read_text().splitlines()]
    keys = [(t["prompt_id"], t["chain"], t["round"]) for t in resumed]
    assert len(keys) == len(set(keys)) == len(trees), "every round exactly once"
    assert sorted(keys) == sorted((t["prompt_id"], t["chain"], t["round"]) for t in trees)


def test_resume_refuses_another_config_but_may_add_chains(toy_table, tmp_path):
    run_dir = tmp_path / "run"
    assert run_cli(*toy_args(toy_table, run_dir, "run.chains_per_prompt=1")).returncode == 0
    before = read_chains(run_dir)
    refused = run_cli(*toy_args(toy_table, run_dir, "run.chains_per_prompt=1", "run.resume=true", "seed=7"))
    assert refused.returncode == 2 and "seed (0 -> 7)" in refused.stderr, refused.stderr
    assert read_chains(run_dir) == before
    more = run_cli(*toy_args(toy_table, run_dir, "run.chains_per_prompt=2", "run.resume=true"))
    assert more.returncode == 0, more.stderr
    assert len(read_chains(run_dir)) == 4 and read_chains(run_dir)[:2] == before
    assert json.loads((run_dir / "summary.json").read_text())["chains"] == 4


def signal_after_first_chain(run_dir, args, signum, preexec_fn=None) -> tuple[int, str]:
    """Start a run, send it ``signum`` once its first chain is in chains.jsonl; (exit status, stderr)."""
    import subprocess
    import sys
    import time

    from tests.conftest import MAIN

    process = subprocess.Popen(
        [sys.executable, str(MAIN), *args], stderr=subprocess.PIPE, text=True, cwd="/", preexec_fn=preexec_fn
    )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not (
        (run_dir / "chains.jsonl").exists() and (run_dir / "chains.jsonl").read_text().strip()
    ):
        time.sleep(0.1)
    process.send_signal(signum)
    _, stderr = process.communicate(timeout=60)
    return process.returncode, stderr


def test_sigterm_is_an_interrupt_that_keeps_finished_chains(toy_table, tmp_path):
    import signal

    run_dir = tmp_path / "run"
    args = toy_args(toy_table, run_dir, "run.chains_per_prompt=50", "run.progress=false", steps=400)
    returncode, stderr = signal_after_first_chain(run_dir, args, signal.SIGTERM)
    assert returncode == 143, stderr
    assert "terminated" in stderr and "run.resume=true" in stderr
    summary = json.loads((run_dir / "summary.json").read_text())
    assert 1 <= summary["chains"] == len(read_chains(run_dir)) < 100
    assert summary["complete"] is False and summary["expected_chains"] == 100


def test_sigint_stops_a_run_started_in_the_background_and_resume_completes_it(toy_table, tmp_path):
    """A shell script's background job inherits SIGINT ignored; kill -INT must still stop the run."""
    import signal

    run_dir = tmp_path / "run"
    args = toy_args(toy_table, run_dir, "run.chains_per_prompt=3", "run.progress=false", steps=300)

    def ignore_sigint():  # what a shell gives a background job
        signal.signal(signal.SIGINT, signal.SIG_IGN)

    returncode, stderr = signal_after_first_chain(run_dir, args, signal.SIGINT, preexec_fn=ignore_sigint)
    assert returncode == 130, stderr
    interrupted = json.loads((run_dir / "summary.json").read_text())
    assert interrupted["complete"] is False and interrupted["chains"] < interrupted["expected_chains"] == 6
    resumed = run_cli(*args, "run.resume=true")
    assert resumed.returncode == 0, resumed.stderr
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["complete"] is True and summary["chains"] == summary["expected_chains"] == 6
    # Both sessions' engine calls, and those of the chain the interrupt cut short (not in chains.jsonl).
    assert summary["engine_calls"] > interrupted["engine_calls"] and summary["engine_calls"] >= summary["model_calls"]


def test_multirun_sweeps_budgets(toy_table, tmp_path):
    sweep_dir = tmp_path / "sweep"
    result = run_cli("-m", *toy_args(toy_table, tmp_path / "unused", f"hydra.sweep.dir={sweep_dir}", "budget.n_pf=1,3"))
    assert result.returncode == 0, result.stderr
    summaries = sorted(json.loads(p.read_text())["n_pf"] for p in sweep_dir.glob("*/summary.json"))
    assert summaries == [1, 3]


def test_a_bad_sweep_point_stops_the_sweep_before_any_job(toy_table, tmp_path):
    sweep_dir = tmp_path / "sweep"
    args = toy_args(toy_table, tmp_path / "unused", f"hydra.sweep.dir={sweep_dir}")
    result = run_cli("-m", *args, "budget.n_pf=3,0,5", "traversal=bfs,sequential")
    assert result.returncode == 2, result.stderr
    assert "error: sweep job 2 of 6 (budget.n_pf=0 traversal=bfs): budget.n_pf must be >= 1" in result.stderr
    assert not sweep_dir.exists(), "no job may have run"


def test_an_unknown_key_in_a_sweep_is_one_line_before_any_job(toy_table, tmp_path):
    sweep_dir = tmp_path / "sweep"
    result = run_cli("-m", *toy_args(toy_table, tmp_path / "unused", f"hydra.sweep.dir={sweep_dir}"), "nosuch=1,2")
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert errors == [
        "error: sweep job 0 of 2 (nosuch=1): Could not override 'nosuch'; To append to your config "
        "use +nosuch=1; no job was started"
    ], result.stderr
    assert not sweep_dir.exists()


@pytest.mark.parametrize("traversal", ["sequential", "bfs"])
def test_a_key_given_to_a_traversal_without_options_is_one_line(toy_table, tmp_path, traversal):
    run_dir = tmp_path / "run"
    result = run_cli(*toy_args(toy_table, run_dir, f"traversal={traversal}", "+traversal.predictor=x"))
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    assert f"error: traversal.predictor is not a key of traversal={traversal}" in result.stderr
    assert not run_dir.exists()


def test_a_sweep_point_giving_bfs_a_predictive_key_is_one_line_before_any_job(toy_table, tmp_path):
    sweep_dir = tmp_path / "sweep"
    args = toy_args(toy_table, tmp_path / "unused", f"hydra.sweep.dir={sweep_dir}")
    result = run_cli("-m", *args, "traversal=predictive,bfs", "++traversal.cost_aware=false")
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    assert "traversal.cost_aware is not a key of traversal=bfs" in result.stderr
    assert not sweep_dir.exists()


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
        ("engine.table=???", "engine.table is required"),
        ("sampler.alpha=nan", "sampler.alpha"),
        ("sampler.tau=inf", "sampler.tau"),
        ("run.resume=no", "run.resume must be true or false"),
        ("run.progress=off", "run.progress"),
        ("+sampler.beta=2", "sampler.beta is not a key of sampler=powermh"),
        ("+engine.device=cuda", "engine.device is not a key of engine=toy"),
        ("+budget.npf=3", "budget.npf is not a key"),
        ("+run.resum=true", "run.resum is not a key"),
        ("logger=wandb logger.mode=bogus", "logger.mode=bogus"),
        ("nosuch=1", "Could not override 'nosuch'; To append to your config use +nosuch=1"),
        ("sampler.alpha=[", "no viable alternative at input '['"),
    ],
)
def test_bad_input_is_one_clear_line(toy_table, tmp_path, override, needle):
    run_dir = tmp_path / "run"
    result = run_cli(*toy_args(toy_table, run_dir), *override.split())
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


def test_dataset_rows_with_one_id_are_refused_and_a_short_file_is_said(toy_table, tmp_path):
    rows = [{"problem": f"{i}+{i}?", "solution": str(2 * i), "answer": str(2 * i), "unique_id": "same"} for i in (1, 2)]
    data = tmp_path / "math.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    args = (*toy_args(toy_table, tmp_path / "dup"), "dataset=math500", f"dataset.path={data}", "dataset.num_prompts=5")
    duplicate = run_cli(*args)
    assert duplicate.returncode == 2 and "appears twice" in duplicate.stderr, duplicate.stderr
    rows[1]["unique_id"] = "other"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    short = run_cli(*args)
    assert short.returncode == 0, short.stderr
    assert "has 2 prompts; running all of them (dataset.num_prompts=5)" in short.stderr


def test_a_new_run_starts_its_tree_log_afresh(tmp_path):
    from presto.runner.outputs import RunWriter

    # An earlier attempt died before its first chain finished: no chains, some rounds.
    (tmp_path / "chains.jsonl").write_text("")
    (tmp_path / "trees.jsonl").write_text('{"prompt_id": "p", "chain": 0, "round": 0}\n')
    writer = RunWriter(tmp_path, resume=False)
    writer.append_tree({"prompt_id": "q", "chain": 0, "round": 0})
    writer.close()
    assert [json.loads(line)["prompt_id"] for line in (tmp_path / "trees.jsonl").read_text().splitlines()] == ["q"]


def test_one_run_directory_is_written_by_one_process_at_a_time(tmp_path):
    from presto.runner.outputs import RunWriter

    first = RunWriter(tmp_path, resume=False)
    with pytest.raises(FileExistsError, match="another run is writing"):
        RunWriter(tmp_path, resume=True)
    first.close()
    RunWriter(tmp_path, resume=True).close()  # free again once the first run has ended


def test_a_requeued_slurm_job_resumes_its_directory(toy_table, tmp_path):
    from presto.runner.run import requeued_by_slurm

    assert requeued_by_slurm({"SLURM_RESTART_COUNT": "1"}) and not requeued_by_slurm({"SLURM_RESTART_COUNT": "0"})
    assert not requeued_by_slurm({})
    run_dir = tmp_path / "run"
    assert run_cli(*toy_args(toy_table, run_dir)).returncode == 0
    before = read_chains(run_dir)
    again = run_cli(*toy_args(toy_table, run_dir), env={"SLURM_RESTART_COUNT": "1"})
    assert again.returncode == 0 and "a requeued Slurm job: resuming" in again.stderr, again.stderr
    assert read_chains(run_dir) == before


def test_an_output_directory_that_is_a_file_is_one_line(toy_table, tmp_path):
    taken = tmp_path / "taken"
    taken.write_text("not a directory")
    result = run_cli(*toy_args(toy_table, taken))
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert f"error: hydra.run.dir={taken} is a file" in result.stderr
    assert taken.read_text() == "not a directory"


def test_a_baseline_builds_no_traversal_and_reports_no_transition_figures(toy_table, tmp_path):
    """traversal=predictive means nothing to a baseline: no predictor loaded, no per-call transition figures."""
    from omegaconf import OmegaConf

    from presto.config import validate
    from presto.runner.run import build_traversal

    run_dir = tmp_path / "run"
    result = run_cli(*toy_args(toy_table, run_dir, "sampler=lowtemp", "traversal=predictive"))
    assert result.returncode == 0, result.stderr
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["traversal"] == "none" and summary["model_calls"] == 4
    assert summary["transitions_per_call"] is None and summary["prefetch_rounds"] is None
    assert "transitions_per_call" not in result.stdout and "None" not in result.stdout
    settings = validate(OmegaConf.load(run_dir / "config.yaml"))
    assert settings.traversal == "predictive" and build_traversal(settings) is None


def test_an_atomic_write_that_fails_leaves_no_temporary_file(tmp_path):
    from presto.runner.outputs import write_json_atomic

    (tmp_path / "summary.json").mkdir()  # os.replace cannot put a file over a directory
    with pytest.raises(OSError):
        write_json_atomic(tmp_path / "summary.json", {"chains": 1})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["summary.json"]


@pytest.mark.parametrize(
    ("options", "needle"),
    [
        (("--cfg", "job"), "sampler:"),
        (("-c", "job", "-p", "sampler"), "name: powermh"),
        (("--info", "defaults"), "Defaults List"),
    ],
)
def test_hydra_options_with_a_separate_value_still_work(options, needle):
    result = run_cli("engine=toy", *options)
    assert result.returncode == 0 and "error:" not in result.stderr, result.stderr
    assert needle in result.stdout


def test_the_paper_experiment_sets_the_paper_seed():
    result = run_cli("experiment=paper", "engine=toy", "--cfg=job")
    assert result.returncode == 0, result.stderr
    assert "\nseed: 10086\n" in result.stdout  # Table 6; config.yaml's own seed: 0 must not win


def test_a_slurm_sweep_off_a_cluster_is_one_line(toy_table, tmp_path):
    import shutil

    if shutil.which("srun"):
        pytest.skip("this machine has Slurm")
    sweep_dir = tmp_path / "sweep"
    result = run_cli("-m", *toy_args(toy_table, tmp_path / "unused", f"hydra.sweep.dir={sweep_dir}"), "launcher=slurm")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.startswith("error: launcher=slurm needs Slurm (no srun on PATH)"), result.stderr
    assert not sweep_dir.exists()


def test_a_resumed_run_merges_the_engine_counters_of_both_sessions():
    from presto.runner.run import merge_engine_metrics

    earlier = {"prefix_cached_tokens": 300.0, "prefix_missed_tokens": 100.0, "peak_kv_usage": 0.5, "engine_calls": 3}
    now = {"prefix_cached_tokens": 100.0, "prefix_missed_tokens": 100.0, "peak_kv_usage": 0.25, "kv_cache_tokens": 9.0}
    merged = merge_engine_metrics(earlier, {**now, "prefix_cache_hit_rate": 0.5}, calls=1)
    assert merged["prefix_cached_tokens"] == 400 and merged["prefix_missed_tokens"] == 200
    assert merged["prefix_cached_tokens_per_call"] == 100 and merged["prefix_missed_tokens_per_call"] == 50
    assert merged["prefix_cache_hit_rate"] == 400 / 600 and merged["peak_kv_usage"] == 0.5
    assert merged["engine_calls"] == 4 and merged["kv_cache_tokens"] == 9.0
    assert merge_engine_metrics({}, {}, calls=2) == {"engine_calls": 2}  # engines without counters


def test_a_predictive_run_names_its_predictor_as_trees_jsonl_does(toy_table, tmp_path):
    run_dir = tmp_path / "run"
    result = run_cli(*toy_args(toy_table, run_dir, "traversal=predictive"))
    assert result.returncode == 0, result.stderr
    trees = [json.loads(line) for line in (run_dir / "trees.jsonl").read_text().splitlines()]
    fingerprint = trees[0]["plan"]["predictor"]
    notices = [line for line in result.stderr.splitlines() if line.startswith("notice: planning with predictor ")]
    assert len(notices) == 1 and notices[0].endswith(f"(fingerprint {fingerprint})"), result.stderr


@pytest.mark.parametrize(
    ("override", "line"),
    [
        # Was: each ran with status 0 and the key ignored, though +budget.npf=8 was refused.
        ("+n_pf=8", "n_pf is not a key of the run config (budget.n_pf is);"),
        ("+steps=5", "steps is not a key of the run config (sampler.steps is);"),
        ("+foo=1", "foo is not a key of the run config;"),
        ("+logger.foo=1", "logger.foo is not a key of logger=none; its own keys: name"),
    ],
)
def test_a_mistyped_top_level_or_logger_key_is_one_line(toy_table, tmp_path, override, line):
    run_dir = tmp_path / "run"
    result = run_cli(*toy_args(toy_table, run_dir), override)
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    error_lines = [text for text in result.stderr.splitlines() if text.startswith("error:")]
    assert len(error_lines) == 1 and error_lines[0].startswith(f"error: {line}"), result.stderr
    if "logger" not in override:  # the keys a run config has, from conf/config.yaml (its groups, seed, run)
        assert error_lines[0].endswith(
            "its keys: budget, dataset, engine, logger, model, run, sampler, seed, traversal"
        ), error_lines
    assert not run_dir.exists()


def test_a_mistyped_top_level_key_in_a_sweep_is_one_line_before_any_job(toy_table, tmp_path):
    sweep_dir = tmp_path / "sweep"
    result = run_cli("-m", *toy_args(toy_table, tmp_path / "unused", f"hydra.sweep.dir={sweep_dir}"), "+n_pf=8,12")
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    assert "error: sweep job 0 of 2 (+n_pf=8): n_pf is not a key of the run config" in result.stderr
    assert not sweep_dir.exists()


@pytest.mark.parametrize("experiment", ["none", "quickstart", "paper"])
def test_each_experiment_passes_the_key_checks(toy_table, experiment):
    from presto.config import validate
    from tests.conftest import compose_run

    validate(
        compose_run("engine=toy", "model=toy", f"engine.table={toy_table}", "dataset=toy", f"experiment={experiment}")
    )


def test_a_mistyped_predictor_key_is_named_as_a_key(tmp_path):
    # Was: "error: ModelSettings.__init__() got an unexpected keyword argument 'foo'".
    import subprocess
    import sys

    from tests.conftest import PROJECT_ROOT

    run_dir = tmp_path / "out"
    args = [f"runs=[{tmp_path / 'run'}]", "+predictor.foo=1", f"hydra.run.dir={run_dir}"]
    result = subprocess.run(
        [sys.executable, str(PROJECT_ROOT / "src" / "train_predictor.py"), *args], capture_output=True, text=True
    )
    assert result.returncode == 2, result.stderr
    assert result.stderr == (
        "error: predictor.foo is not a key of predictor=logistic; its own keys: name, hidden, l2, optimizer, "
        "learning_rate, max_epochs, batch_size, val_fraction, patience\n"
    )
    assert not run_dir.exists()
