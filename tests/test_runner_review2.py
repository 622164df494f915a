"""Second review of the command line: engine and dataset keys, null groups, grading crashes, resuming."""

from __future__ import annotations

import json

import pytest

from tests.conftest import run_cli, toy_args
from tests.test_runner_review_fixes import toy_run_config


def error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("error:")]


# 1. Engine keys are checked with the rest of the config, before the task or the model loads.


@pytest.mark.parametrize(
    ("overrides", "needle"),
    [
        (("engine.dtype=float16",), "engine.dtype must be one of float32, float64, bfloat16, got 'float16'"),
        (("engine.dtype=null",), "engine.dtype must be one of"),
        (("engine.threads=0",), "engine.threads must be an integer >= 1 or null, got 0"),
        (("engine.threads=-1",), "engine.threads must be an integer >= 1 or null"),
        (("engine.threads=abc",), "engine.threads must be an integer >= 1 or null, got 'abc'"),
        (("engine.threads=true",), "engine.threads must be an integer >= 1 or null, got True"),
        (("engine=vllm", "engine.threads=0"), "engine.threads must be an integer >= 1 or null, got 0"),
        (("engine=vllm", "engine.gpu_memory_utilization=abc"), "engine.gpu_memory_utilization must be a number"),
        (("engine=vllm", "engine.enforce_eager=maybe"), "engine.enforce_eager must be true or false"),
        (("engine=vllm", "engine.enable_prefix_caching=no"), "engine.enable_prefix_caching must be true or false"),
        (("engine=vllm", "engine.exact_logprobs=1"), "engine.exact_logprobs must be true or false"),
        (("engine=vllm", "engine.max_model_len=0"), "engine.max_model_len must be an integer >= 1"),
        (("engine=vllm", "+engine.foo=1"), "engine.foo is not a key of engine=vllm"),
    ],
)
def test_engine_keys_are_validated_with_the_config(overrides, needle):
    from presto.config import ConfigError, validate
    from tests.conftest import compose_run

    cfg = compose_run("engine=hf", "dataset=toy", "experiment=none", *overrides)
    with pytest.raises(ConfigError) as err:
        validate(cfg)
    assert needle in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize("threads", [0, -1, True, 1.5, "2"])
def test_the_hf_engine_built_without_the_config_checks_its_thread_count(tmp_path, threads):
    """The engines check engine.threads themselves (a script builds them without presto.config),
    before any model file is read: ``tmp_path / "missing"`` does not exist."""
    from presto.config import ConfigError
    from presto.engines.hf import HFEngine

    with pytest.raises(ConfigError, match=r"engine\.threads must be an integer >= 1 or null"):
        HFEngine(tmp_path / "missing", threads=threads)


def test_the_shipped_engine_configs_validate():
    from presto.config import validate
    from tests.conftest import compose_run

    for engine in ("hf", "vllm"):
        validate(compose_run(f"engine={engine}", "dataset=toy", "experiment=none"))


def test_a_bad_hf_dtype_is_one_line_before_anything_loads(tmp_path):
    run_dir = tmp_path / "run"
    result = run_cli("engine=hf", "dataset=toy", "engine.dtype=float16", f"hydra.run.dir={run_dir}", timeout=120)
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    assert error_lines(result.stderr) == [
        "error: engine.dtype must be one of float32, float64, bfloat16, got 'float16'"
    ], result.stderr
    assert not run_dir.exists()


def test_a_bad_vllm_key_in_a_sweep_stops_it_before_any_job(tmp_path):
    sweep_dir = tmp_path / "sweep"
    args = ("engine=vllm", "dataset=toy", f"hydra.sweep.dir={sweep_dir}", "engine.max_model_len=4096,0")
    result = run_cli("-m", *args, timeout=120)
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    assert "engine.max_model_len must be an integer >= 1, got 0; no job was started" in result.stderr
    assert not sweep_dir.exists()


# 2. Dataset keys a user sets


@pytest.mark.parametrize(
    ("overrides", "needle"),
    [
        (("dataset=humaneval", "dataset.timeout_s=-1"), "dataset.timeout_s must be > 0"),
        (("dataset=humaneval", "dataset.timeout_s=abc"), "dataset.timeout_s must be a number > 0"),
        (("dataset=humaneval", "dataset.memory_mb=32"), "dataset.memory_mb must be >= 64"),
        (("dataset=humaneval", "dataset.memory_mb=0"), "dataset.memory_mb must be >= 64"),
        (("dataset=humaneval", "dataset.allow_code_execution=maybe"), "dataset.allow_code_execution must be true"),
        (("dataset=humaneval", "dataset.use_package=maybe"), "dataset.use_package must be true or false"),
        (("dataset=math500", "dataset.enable_thinking=maybe"), "dataset.enable_thinking must be true, false or null"),
        (("dataset=gen_math", "dataset.generator_seed=abc"), "dataset.generator_seed must be an integer >= 0"),
        (("dataset=gen_math", "dataset.generators=[]"), "dataset.generators must be a non-empty list"),
    ],
)
def test_dataset_keys_are_validated_with_the_config(toy_table, overrides, needle):
    from presto.config import ConfigError, validate

    with pytest.raises(ConfigError) as err:
        validate(toy_run_config(toy_table, *overrides))
    assert needle in str(err.value) and "\n" not in str(err.value)


def test_the_shipped_dataset_configs_validate(toy_table):
    from presto.config import validate
    from presto.tasks import TASK_NAMES

    for name in TASK_NAMES:
        validate(toy_run_config(toy_table, f"dataset={name}"))


def test_a_bad_dataset_timeout_is_one_line(toy_table, tmp_path):
    run_dir = tmp_path / "run"
    result = run_cli(*toy_args(toy_table, run_dir, "dataset=humaneval", "dataset.timeout_s=-1"))
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    assert len(error_lines(result.stderr)) == 1 and "dataset.timeout_s" in result.stderr, result.stderr
    assert not run_dir.exists()


def test_wandb_logger_switches_are_true_or_false(toy_table):
    from presto.config import ConfigError, validate

    with pytest.raises(ConfigError, match=r"logger\.log_plots must be true or false, got 'no'"):
        validate(toy_run_config(toy_table, "logger=wandb", "logger.mode=disabled", "logger.log_plots=no"))
    validate(toy_run_config(toy_table, "logger=wandb", "logger.mode=disabled"))


# 3. A required group set to null


# Hydra 1.3 refuses every null group override (even launcher's, whose default is null) with a traceback.
@pytest.mark.parametrize("group", ["sampler", "traversal", "budget", "engine", "launcher", "logger"])
def test_a_required_group_set_to_null_is_one_line(toy_table, tmp_path, group):
    run_dir = tmp_path / "run"
    result = run_cli(*toy_args(toy_table, run_dir), f"{group}=null")
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    errors = error_lines(result.stderr)
    assert len(errors) == 1 and f"{group}=null" in errors[0], result.stderr
    assert not run_dir.exists()


# 4. A grader that crashes on one chain


def test_a_grader_crash_keeps_that_chain_and_runs_the_others(toy_table, tmp_path, monkeypatch, capsys):
    from presto.runner.run import run
    from presto.tasks.base import Grade
    from presto.tasks.toy import ToyTask

    def grade(self, problem, completion):
        if problem.index == 0:
            raise RuntimeError("sandbox broke")
        return Grade(True, completion)

    monkeypatch.setattr(ToyTask, "grade", grade)
    summary = run(toy_run_config(toy_table), tmp_path)
    records = [json.loads(line) for line in (tmp_path / "chains.jsonl").read_text().splitlines()]
    assert len(records) == 4, "every chain is kept, the ones whose grading crashed too"
    crashed = [r for r in records if r["prompt_index"] == 0]
    assert all(r["correct"] is None and "RuntimeError: sandbox broke" in r["grade_error"] for r in crashed)
    assert all(r["correct"] is True and "grade_error" not in r for r in records if r["prompt_index"] == 1)
    assert summary["complete"] is True and summary["grade_errors"] == 2 and summary["accuracy"] == 1.0
    assert "sandbox broke" in capsys.readouterr().err


# 5. Resuming: the message names the directory, and a resume with nothing to resume says so


def test_an_interrupted_run_names_the_directory_to_resume(toy_table, tmp_path):
    import signal

    from tests.test_cli import signal_after_first_chain

    run_dir = tmp_path / "run"
    args = toy_args(toy_table, run_dir, "run.chains_per_prompt=50", "run.progress=false", steps=400)
    returncode, stderr = signal_after_first_chain(run_dir, args, signal.SIGTERM)
    assert returncode == 143, stderr
    assert f"run.resume=true hydra.run.dir={run_dir}" in stderr, stderr


def test_a_resume_into_a_directory_without_chains_says_it_starts_afresh(toy_table, tmp_path):
    run_dir = tmp_path / "run"
    result = run_cli(*toy_args(toy_table, run_dir, "run.resume=true", "run.progress=false", steps=1))
    assert result.returncode == 0, result.stderr
    assert f"notice: run.resume=true, but {run_dir} holds no finished chains" in result.stderr, result.stderr


def test_a_grader_that_fails_on_every_chain_stops_the_run_and_a_resume_grades_them(toy_table, tmp_path, monkeypatch):
    """Chains whose grading failed are kept; once the grader works, resuming grades them and runs the rest."""
    from presto.runner.run import GRADING_FAILURES_TO_STOP, run
    from presto.tasks import GradingError
    from presto.tasks.base import Grade
    from presto.tasks.toy import ToyTask

    def broken(self, problem, completion):
        raise ModuleNotFoundError("No module named 'math_verify'")

    cfg = toy_run_config(toy_table, "dataset.num_prompts=4")
    monkeypatch.setattr(ToyTask, "grade", broken)
    with pytest.raises(GradingError, match="grading failed for all 3 chains so far"):
        run(cfg, tmp_path)
    chains = [json.loads(line) for line in (tmp_path / "chains.jsonl").read_text().splitlines()]
    assert len(chains) == GRADING_FAILURES_TO_STOP and all("math_verify" in r["grade_error"] for r in chains)
    assert json.loads((tmp_path / "summary.json").read_text())["complete"] is False

    monkeypatch.setattr(ToyTask, "grade", lambda self, problem, completion: Grade(True, completion))
    cfg.run.resume = True
    summary = run(cfg, tmp_path)
    records = [json.loads(line) for line in (tmp_path / "chains.jsonl").read_text().splitlines()]
    assert len(records) == 8 and len({(r["prompt_id"], r["chain"]) for r in records}) == 8
    assert all(r["correct"] is True and "grade_error" not in r for r in records)
    assert summary["complete"] is True and summary["grade_errors"] == 0 and summary["accuracy"] == 1.0
