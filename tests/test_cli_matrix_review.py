"""The run CLI across the combinations a researcher tries: sampler x traversal, engine x model x dataset,
experiments with overrides, edge values, sweeps with launchers and loggers, resume with changed settings.

Each test below failed before its fix (the table at the end of this file lists what was tried).
"""

from __future__ import annotations

import json

import pytest

from tests.conftest import run_cli, toy_args


def error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("error:")]


def notice_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("notice:")]


# 1. conf/sweeps/ is W&B's, not a Hydra group: the advice to add it with + ended in a traceback.


@pytest.mark.parametrize("multirun", [True, False])
def test_the_wandb_sweep_file_given_as_a_group_is_one_line_with_the_hydra_equivalent(toy_table, tmp_path, multirun):
    sweep_dir, run_dir = tmp_path / "sweep", tmp_path / "run"
    if multirun:  # Hydra's advice was to add it with +
        args = ("-m", *toy_args(toy_table, run_dir, f"hydra.sweep.dir={sweep_dir}"), "sweeps=n_pf")
    else:  # which composed the W&B file into the run config: a traceback on its ${env}
        args = (*toy_args(toy_table, run_dir), "+sweeps=n_pf")
    result = run_cli(*args)
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    (line,) = error_lines(result.stderr)
    assert "wandb sweep conf/sweeps/n_pf.yaml" in line, line
    assert "-m budget.n_pf=8,10,12,16,20" in line, line  # read from the sweep file's parameters
    assert "+sweeps" not in line, line
    assert not sweep_dir.exists() and not run_dir.exists()


# 2. Output directories and launchers that only one of a run and a sweep reads were ignored without a word.


@pytest.mark.parametrize(
    ("case", "needle"),
    [
        ("run dir with -m", "hydra.run.dir is not used with -m"),
        ("sweep dir without -m", "hydra.sweep.dir is used only with -m"),
        ("launcher without -m", "launcher=joblib runs the jobs of a sweep"),
    ],
)
def test_an_output_directory_or_launcher_the_mode_does_not_read_is_one_line(toy_table, tmp_path, case, needle):
    run_dir = tmp_path / "run"
    args = {
        "run dir with -m": ("-m", *toy_args(toy_table, run_dir), "budget.n_pf=2,4"),
        "sweep dir without -m": (*toy_args(toy_table, run_dir)[:-1], f"hydra.sweep.dir={run_dir}"),
        "launcher without -m": (*toy_args(toy_table, run_dir), "launcher=joblib"),
    }[case]
    result = run_cli(*args)
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    assert len(error_lines(result.stderr)) == 1 and needle in result.stderr, result.stderr
    assert not run_dir.exists()  # nor anything under the project's outputs/: it stopped before Hydra


def test_a_command_that_only_prints_the_config_may_name_a_launcher(toy_table):
    result = run_cli("engine=toy", "launcher=joblib", "--cfg", "hydra", "-p", "hydra.launcher")
    assert result.returncode == 0 and "n_jobs: 2" in result.stdout, result.stderr


# 3. Options the chosen sampler or traversal does not use are named, not silently dropped.


def test_options_a_baseline_does_not_use_are_named(toy_table, tmp_path):
    run_dir = tmp_path / "lowtemp"
    result = run_cli(
        *toy_args(toy_table, run_dir, "sampler=lowtemp", "traversal=predictive", "budget.n_pf=8", "run.progress=false")
    )
    assert result.returncode == 0, result.stderr
    (notice,) = notice_lines(result.stderr)
    given = ("sampler=lowtemp", "traversal=predictive", "budget.n_pf=8", "sampler.steps=6", "sampler.block_size=4")
    assert all(text in notice for text in given), notice
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["traversal"] == "none" and summary["n_pf"] is None  # what the notice says
    # Power-SMC grows its answers in blocks of sampler.block_size: that one it uses.
    result = run_cli(*toy_args(toy_table, tmp_path / "smc", "sampler=power_smc", "run.progress=false"))
    assert result.returncode == 0, result.stderr
    (notice,) = notice_lines(result.stderr)
    assert "sampler.steps=6" in notice and "sampler.block_size" not in notice and "traversal=" not in notice, notice


def test_a_budget_given_to_the_sequential_traversal_is_named(toy_table, tmp_path):
    run_dir = tmp_path / "seq"
    result = run_cli(*toy_args(toy_table, run_dir, "traversal=sequential", "budget.n_pf=8", "run.progress=false"))
    assert result.returncode == 0, result.stderr
    (notice,) = notice_lines(result.stderr)
    assert "traversal=sequential" in notice and "budget.n_pf=8 is not used" in notice, notice
    assert json.loads((run_dir / "summary.json").read_text())["n_pf"] == 1


def test_the_toy_engine_on_a_real_dataset_says_its_prompts_and_grades_mean_nothing(toy_table, tmp_path):
    run_dir = tmp_path / "run"
    args = ("dataset=humaneval", "dataset.allow_code_execution=false", "model=smollm2", "run.progress=false")
    result = run_cli(*toy_args(toy_table, run_dir, *args))
    assert result.returncode == 0, result.stderr
    notices = notice_lines(result.stderr)
    assert any("engine=toy" in n and "dataset=humaneval" in n and "empty prompt" in n for n in notices), notices
    assert any("model=smollm2 is not used" in n for n in notices), notices
    assert json.loads((run_dir / "summary.json").read_text())["chains"] == 4


# 4. model=toy on a real engine: the message named model.path='none', after the dataset had loaded.


def test_the_toy_model_on_a_real_engine_is_one_line_naming_it_before_anything_loads(tmp_path):
    run_dir = tmp_path / "run"
    result = run_cli("engine=hf", "model=toy", "dataset=humaneval", f"hydra.run.dir={run_dir}", timeout=120)
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    assert error_lines(result.stderr) == [
        "error: model=toy has no model files (it is engine=toy's); engine=hf needs a model: "
        "model=smollm2 or model.path=DIR (a Hugging Face folder) or a .gguf file"
    ], result.stderr
    assert "WARNING" not in result.stderr  # refused before the dataset (and its code-execution warning)
    assert not run_dir.exists()


# 5. Resume with fewer prompts or chains than the directory holds: the summary counted chains beyond them.


def test_a_resume_with_fewer_prompts_or_chains_than_it_holds_is_refused(toy_table, tmp_path):
    run_dir = tmp_path / "run"
    assert run_cli(*toy_args(toy_table, run_dir, "run.progress=false")).returncode == 0
    before = {name: (run_dir / name).read_text() for name in ("config.yaml", "summary.json", "chains.jsonl")}
    for fewer in ("dataset.num_prompts=1", "run.chains_per_prompt=1"):
        result = run_cli(*toy_args(toy_table, run_dir, "run.resume=true", "run.progress=false", fewer))
        assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
        (line,) = error_lines(result.stderr)
        assert "which its summary would count" in line and fewer in line, line
        assert {name: (run_dir / name).read_text() for name in before} == before  # nothing rewritten


# 6. A long chain showed no sign of life: the bar moved only when a whole chain finished.


def test_the_progress_bar_shows_the_model_calls_of_the_chain_in_flight(toy_table, tmp_path):
    run_dir = tmp_path / "run"
    result = run_cli(*toy_args(toy_table, run_dir, "traversal=bfs", "budget.n_pf=2"))
    assert result.returncode == 0, result.stderr
    assert notice_lines(result.stderr) == []  # every option given is used
    frames = result.stderr.replace("\r", "\n").splitlines()
    # Before the first chain is done (0/4), the bar already counts that chain's calls.
    assert any(" 0/4 " in frame and "chain_calls=1" in frame for frame in frames), frames
    assert any(" 3/4 " in frame and "chain_calls=" in frame for frame in frames), frames


# Combinations tried (toy: tests/conftest.py toy_args; hf/vllm: 1 prompt, n=16, K=2; cwd /).
# combination -> result -> verdict
# sampler {powermh,entropycut,multitry} x traversal {sequential,bfs,predictive} -> runs; PreSTO chains
#     = sequential ones, fewer calls -> OK
# sampler {best_of_n,lowtemp,power_smc} x traversal {sequential,bfs,predictive} -> runs, summary
#     "traversal": "none", but an explicit traversal/n_pf/steps (block_size for lowtemp, best_of_n) was
#     dropped without a word (a -m sweep ran the same baseline once per traversal) -> fixed: notice line
# traversal=sequential budget.n_pf=8 -> n_pf silently 1 -> fixed: notice line
# budget.n_pf=0 / -1 -> one error line -> OK; n_pf=1 -> sequential's calls -> OK; n_pf=1e9, 1e20 -> OK
# sampler.steps=0 -> block extensions only, acceptance_rate null -> OK
# max_new_tokens=10 with B=4; block_size=16 > n=8 -> "block_size must divide" one line -> OK
# run.chains_per_prompt=0 -> one line -> OK; dataset.num_prompts=100 on toy -> 100 prompts -> OK
# num_prompts > dataset (math500 file of 2) -> notice, runs all -> OK (tests/test_cli.py)
# sampler.alpha=1 -> acceptance 1 (q = p0) -> OK; alpha=0.5 -> runs (flattens) -> OK; alpha=0 -> one line -> OK
# engine=toy + dataset=humaneval/gen_math -> empty prompts, token-id text graded (accuracy 0.0, code run
#     in the sandbox), no word -> fixed: notice line; engine=toy model=smollm2 -> model ignored -> fixed: notice
# engine=hf/vllm model=toy -> "model.path='none' does not exist" after the dataset loaded -> fixed: names model=toy
# engine=hf dataset=toy (empty chat prompt) -> runs -> OK; engine=vllm entropycut predictive n_pf=1 -> OK
# dataset=math500/aime24/aime25/gpqa_diamond/mmlu/mmlu_pro/mbpp/livecodebench offline -> one error line
#     naming dataset.path, but only after huggingface_hub's 5 retries (~40 s, log lines) -> left (tasks/)
# offline datasets: humaneval, gen_math, toy -> OK
# experiment=paper|quickstart|none + sampler.steps/num_prompts/seed/sampler= -> explicit override wins -> OK
# experiment=paper engine=hf on CPU -> no download; 20 chains of n=1024, K=100; Ctrl-C keeps summary -> OK,
#     but the bar sat at 0/20 for the whole first chain -> fixed: in-flight model calls on the bar
# -m sampler=powermh,entropycut traversal=bfs,predictive budget.n_pf=4,8 launcher=joblib -> 8 dirs -> OK
# -m ... sweeps=n_pf -> "use +sweeps=n_pf"; +sweeps=n_pf -> InterpolationKeyError traceback -> fixed
# -m with hydra.run.dir only; hydra.sweep.dir without -m -> dir ignored, output under the project -> fixed
# launcher=joblib|submitit_local|slurm without -m -> ignored (slurm would run on the login node) -> fixed
# -m with one job's dir already holding chains (basic, joblib) -> others run, one error line, rc 1 -> OK
# -m logger=wandb WANDB_MODE=offline launcher=joblib -> per-job wandb/, offline notices -> OK
#     (baseline jobs get no plots/ although the README lists it -> left: src/presto/eval)
# run.resume=true with sampler / n_pf / traversal / seed changed -> refused naming the keys -> OK;
#     chains_per_prompt raised, logger=wandb added -> continues -> OK
# run.resume=true with num_prompts or chains_per_prompt lowered -> summary counted chains beyond
#     expected_chains, config.yaml rewritten to the lower values -> fixed: refused
# -m run.resume=true, same sweep -> OK; sweep order changed -> every job refused, rc 1 -> OK
# +foo=1, +dataset.foo=1, +model.foo=1, +logger.foo=1 -> accepted silently -> left (explicit +, single option)


def test_hydra_mode_multirun_is_a_sweep_as_dash_m_is(toy_table, tmp_path):
    # Was: "hydra.sweep.dir is used only with -m", though hydra.mode=MULTIRUN is Hydra's override form of -m.
    sweep_dir = tmp_path / "sweep"
    args = (*toy_args(toy_table, tmp_path / "unused"), "hydra.mode=MULTIRUN", f"hydra.sweep.dir={sweep_dir}")
    result = run_cli(*[a for a in args if not a.startswith("hydra.run.dir=")], "budget.n_pf=2")
    assert result.returncode == 0 and error_lines(result.stderr) == [], result.stderr
    assert (sweep_dir / "0" / "summary.json").is_file()


def test_a_sweep_file_that_does_not_exist_is_not_answered_with_another_ones_sweep(toy_table, tmp_path):
    result = run_cli(*toy_args(toy_table, tmp_path / "run"), "sweeps=nope")
    (line,) = error_lines(result.stderr)
    assert result.returncode == 2 and "sweeps=nope" in line and "(n_pf)" in line, line
    assert "budget.n_pf=8" not in line and "conf/sweeps/n_pf.yaml" not in line, line  # was: n_pf's sweep


def test_hydras_own_launcher_spelling_without_dash_m_is_refused_as_launcher_is(toy_table, tmp_path):
    result = run_cli(*toy_args(toy_table, tmp_path / "run"), "hydra/launcher=joblib")
    (line,) = error_lines(result.stderr)
    assert result.returncode == 2 and "hydra/launcher=joblib runs the jobs of a sweep" in line, line
    assert not (tmp_path / "run").exists()
