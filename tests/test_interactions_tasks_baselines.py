"""Interaction review: the reasoning datasets and their graders, the test-time baselines, and the evaluation of runs.

A researcher's sequence: a local copy of each dataset (``dataset.path=FILE`` in the hub's column layout), run with a
PreSTO sampler and with each baseline (``sampler=lowtemp|best_of_n|power_smc``), graded, then resumed after an
interruption or after a grader failed for some chains, rescored, and evaluated with ``scripts/compare_runs.py`` and
``scripts/report.py`` beside a sequential run of the same dataset and seed. The same scenarios ran by hand on the
embedded SmolLM2 with ``engine=hf`` (tiny settings); here they run on the toy engine, whose text is token ids, so
every chain is graded (wrong) by the real graders, the code datasets' in the real sandbox. The tests under "Defects"
reproduce what the review found (fixed since).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from presto.runner import run as run_module
from presto.runner.outputs import read_jsonl
from tests.conftest import call_script, compose_run, gpqa_rows, load_script, run_cli

TOY = (
    "engine=toy",
    "model=toy",
    "experiment=none",
    "run.progress=false",
    "dataset.num_prompts=2",
    "sampler.max_new_tokens=8",
    "sampler.block_size=4",
    "sampler.steps=2",
)
SAMPLERS = {
    "presto": ("sampler=powermh", "traversal=bfs", "budget.n_pf=4"),
    "sequential": ("sampler=powermh", "traversal=sequential"),
    "lowtemp": ("sampler=lowtemp",),
    "best_of_n": ("sampler=best_of_n", "sampler.num_samples=3"),
    "power_smc": ("sampler=power_smc", "sampler.num_particles=3"),
}


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def lcb_row(k: int) -> dict:
    cases = json.dumps([{"input": f"{k}\n", "output": f"{k + 1}\n", "testtype": "stdin"}])
    return {
        "question_title": f"Inc {k}",
        "question_content": "Read n; print n + 1.",
        "platform": "atcoder",
        "question_id": f"abc{k:03d}_a",
        "contest_id": f"abc{k:03d}",
        "contest_date": "2025-01-04T00:00:00",
        "starter_code": "",
        "difficulty": "easy",
        "public_test_cases": cases,
        "private_test_cases": "",
        "metadata": "{}",
    }


def dataset_file(tmp_path: Path, name: str, rows: int = 3) -> Path | None:
    """A local copy of dataset ``name`` with ``rows`` rows in its hub layout (None: it ships in a package)."""
    ks = range(1, rows + 1)
    layouts = {
        "math500": [
            {"problem": f"What is {k}+{k}?", "solution": "", "answer": str(2 * k), "unique_id": f"test/{k}.json"}
            for k in ks
        ],
        "aime24": [{"ID": f"2024-I-{k}", "Problem": f"Compute {k}*2.", "Solution": "", "Answer": 2 * k} for k in ks],
        "aime25": [{"problem_idx": k, "problem": f"Compute {k}*3.", "answer": 3 * k} for k in ks],
        "gpqa_diamond": gpqa_rows(rows),
        "mmlu": [
            {"question": f"{k}+1?", "subject": "math", "choices": [str(k + i) for i in range(4)], "answer": 1}
            for k in ks
        ],
        "mmlu_pro": [
            {"question_id": k, "question": f"{k}+1?", "options": [str(k + i) for i in range(10)], "answer": "B"}
            for k in ks
        ],
        "mbpp": [
            {"task_id": k, "prompt": f"add{k}", "code": "", "test_imports": [], "test_list": [f"assert add{k}(1) == 1"]}
            for k in ks
        ],
        "livecodebench": [lcb_row(k) for k in ks],
    }
    if name not in layouts:
        return None
    return write_jsonl(tmp_path / f"{name}.jsonl", layouts[name])


def task_config(table: Path, tmp_path: Path, dataset: str, sampler: str, *extra: str):
    path = dataset_file(tmp_path, dataset)
    source = (f"dataset.path={path}",) if path else ()
    return compose_run(*TOY, f"engine.table={table}", f"dataset={dataset}", *source, *SAMPLERS[sampler], *extra)


def summary_of(run_dir: Path) -> dict:
    return json.loads((run_dir / "summary.json").read_text())


def assert_graded_consistently(run_dir: Path) -> list[dict]:
    """summary.json's grading figures are those of chains.jsonl's ``correct``; returns the records."""
    records = read_jsonl(run_dir / "chains.jsonl")
    summary = summary_of(run_dir)
    graded = [r["correct"] for r in records if r["correct"] is not None]
    assert summary["graded"] == len(graded) and summary["ungraded"] == len(records) - len(graded)
    assert summary["accuracy"] == (float(np.mean(graded)) if graded else None)
    assert summary["grade_errors"] == sum(1 for r in records if r.get("grade_error"))
    assert summary["chains"] == len(records) == summary["expected_chains"] and summary["complete"] is True
    assert summary["loglik_mean"] == pytest.approx(float(np.mean([r["loglik"] for r in records])))
    return records


# --- Interactions that work ------------------------------------------------------------------------------------------

DATASETS = (
    "math500",
    "aime24",
    "aime25",
    "gpqa_diamond",
    "mmlu",
    "mmlu_pro",
    "mbpp",
    "livecodebench",
    "humaneval",
    "gen_math",
)


@pytest.mark.parametrize("dataset", DATASETS)
def test_each_dataset_runs_graded_with_presto_and_a_baseline(toy_table, tmp_path, dataset):
    """Every dataset from a local file (humaneval and gen_math from their packages), with PreSTO and with a baseline
    (one per dataset, in turn): every chain graded, the summary's accuracy that of the records."""
    baseline = ("lowtemp", "best_of_n", "power_smc")[DATASETS.index(dataset) % 3]
    for sampler in ("presto", baseline):
        run_dir = tmp_path / sampler
        run_module.run(task_config(toy_table, tmp_path, dataset, sampler), run_dir)
        records = assert_graded_consistently(run_dir)
        assert len(records) == 2 and all(r["correct"] is False and "grade_error" not in r for r in records)
        assert summary_of(run_dir)["traversal"] == ("bfs" if sampler == "presto" else "none")


@pytest.mark.parametrize("sampler", ["lowtemp", "best_of_n", "power_smc"])
def test_every_baseline_is_graded_on_math500(toy_table, tmp_path, sampler):
    run_module.run(task_config(toy_table, tmp_path, "math500", sampler), tmp_path / "run")
    assert len(assert_graded_consistently(tmp_path / "run")) == 2


def test_num_prompts_beyond_the_file_runs_every_row_and_the_run_is_complete(toy_table, tmp_path, capsys):
    run_module.run(task_config(toy_table, tmp_path, "aime24", "best_of_n", "dataset.num_prompts=7"), tmp_path / "run")
    notice = "notice: dataset aime24 has 3 prompts; running all of them (dataset.num_prompts=7)"
    assert notice in capsys.readouterr().err
    records = assert_graded_consistently(tmp_path / "run")
    assert [r["prompt_id"] for r in records] == ["aime24/2024-I-1", "aime24/2024-I-2", "aime24/2024-I-3"]


def test_a_malformed_row_is_one_error_line_before_the_run_directory_is_made(toy_table, tmp_path):
    rows = [{"ID": "1", "Problem": "Compute.", "Answer": 2}, {"ID": "2", "Problem": "Compute.", "Answer": "abc"}]
    path = write_jsonl(tmp_path / "aime24.jsonl", rows)
    run_dir = tmp_path / "run"
    args = [*TOY, f"engine.table={toy_table}", "dataset=aime24", f"dataset.path={path}", "sampler=lowtemp"]
    result = run_cli(*args, f"hydra.run.dir={run_dir}")
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert errors == [f"error: aime24: {path} row 1: field 'Answer' should be an integer, got 'abc'"], result.stderr
    assert not (run_dir / "chains.jsonl").exists()


@pytest.mark.parametrize("dataset", ["mbpp", "livecodebench", "humaneval"])
def test_code_execution_disabled_runs_no_program_and_leaves_the_chains_ungraded(
    toy_table, tmp_path, dataset, monkeypatch
):
    from presto.tasks import code_grader

    def refuse(job, limits):
        raise AssertionError("the sandbox ran with dataset.allow_code_execution=false")

    monkeypatch.setattr(code_grader, "run_sandboxed", refuse)
    cfg = task_config(toy_table, tmp_path, dataset, "lowtemp", "dataset.allow_code_execution=false")
    run_module.run(cfg, tmp_path / "run")
    records = assert_graded_consistently(tmp_path / "run")
    assert all(r["correct"] is None for r in records) and summary_of(tmp_path / "run")["accuracy"] is None


def interrupt_at_chain(monkeypatch, chain: int) -> None:
    """The run is interrupted (what Ctrl-C or the CLI's SIGTERM handler raise) as chain number ``chain`` starts."""
    started = []
    real = run_module.sample_chain

    def sample(*args, **kwargs):
        started.append(1)
        if len(started) == chain:
            raise KeyboardInterrupt("SIGTERM")
        return real(*args, **kwargs)

    monkeypatch.setattr(run_module, "sample_chain", sample)


@pytest.mark.parametrize("sampler", ["lowtemp", "best_of_n", "power_smc"])
def test_an_interrupted_baseline_run_resumes_to_the_uninterrupted_answers_and_grades(
    toy_table, tmp_path, sampler, monkeypatch
):
    whole = tmp_path / "whole"
    run_module.run(task_config(toy_table, tmp_path, "mmlu_pro", sampler, "run.chains_per_prompt=2"), whole)
    resumed = tmp_path / "resumed"
    with monkeypatch.context() as patch:
        interrupt_at_chain(patch, 3)
        with pytest.raises(KeyboardInterrupt):
            run_module.run(task_config(toy_table, tmp_path, "mmlu_pro", sampler, "run.chains_per_prompt=2"), resumed)
    assert summary_of(resumed)["chains"] == 2 and summary_of(resumed)["complete"] is False
    cfg = task_config(toy_table, tmp_path, "mmlu_pro", sampler, "run.chains_per_prompt=2", "run.resume=true")
    run_module.run(cfg, resumed)
    ours, theirs = assert_graded_consistently(resumed), assert_graded_consistently(whole)
    fields = ("prompt_id", "chain", "tokens", "text", "correct", "extracted", "loglik", "confidence")
    assert [[r[f] for f in fields] for r in ours] == [[r[f] for f in fields] for r in theirs]
    for key in ("accuracy", "graded", "loglik_mean", "confidence_mean", "model_calls"):
        assert summary_of(resumed)[key] == summary_of(whole)[key]


@pytest.mark.parametrize("sampler", ["presto", "best_of_n"])
def test_chains_a_math_grader_failed_on_are_graded_again_by_a_resume(toy_table, tmp_path, sampler, monkeypatch, capsys):
    """The grader raises on one problem's chains (kept ungraded, with grade_error); a resume with a working grader
    grades them on their recorded text, and the summary's accuracy is again that of the records."""
    from presto.tasks import math_tasks

    real = math_tasks.grade_math

    def broken_on_4(completion, reference):
        if reference == "4":
            raise RuntimeError("grader broke")
        return real(completion, reference)

    run_dir = tmp_path / "run"
    with monkeypatch.context() as patch:
        patch.setattr(math_tasks, "grade_math", broken_on_4)
        run_module.run(task_config(toy_table, tmp_path, "math500", sampler, "run.chains_per_prompt=2"), run_dir)
    records = assert_graded_consistently(run_dir)
    failed = [r for r in records if r.get("grade_error")]
    assert [r["prompt_id"] for r in failed] == ["test/2.json"] * 2 and all(r["correct"] is None for r in failed)
    assert "warning: grading test/2.json chain 0 failed (RuntimeError: grader broke); kept ungraded" in (
        capsys.readouterr().err
    )
    cfg = task_config(toy_table, tmp_path, "math500", sampler, "run.chains_per_prompt=2", "run.resume=true")
    run_module.run(cfg, run_dir)
    regraded = assert_graded_consistently(run_dir)
    assert all(r["correct"] is False and "grade_error" not in r for r in regraded)
    assert [r["text"] for r in regraded] == [r["text"] for r in records]


@pytest.mark.parametrize("sampler", ["presto", "sequential", "lowtemp", "best_of_n", "power_smc"])
def test_rescored_statistics_equal_the_recorded_ones(toy_table, tmp_path, sampler):
    """run.rescore=true: a fresh p0 pass over each final state (the toy engine is exact) gives the recorded figures."""
    run_module.run(task_config(toy_table, tmp_path, "gen_math", sampler, "run.rescore=true"), tmp_path / "run")
    summary = summary_of(tmp_path / "run")
    for record in read_jsonl(tmp_path / "run" / "chains.jsonl"):
        assert record["loglik_rescored"] == pytest.approx(record["loglik"], abs=1e-12)
        assert record["confidence_rescored"] == pytest.approx(record["confidence"], abs=1e-12)
    assert summary["loglik_rescored_mean"] == pytest.approx(summary["loglik_mean"], abs=1e-12)


def by_prompt(run_dir: Path, stat: str) -> dict[str, float]:
    values: dict[str, list[float]] = {}
    for record in read_jsonl(run_dir / "chains.jsonl"):
        values.setdefault(record["prompt_id"], []).append(record[stat])
    return {prompt: float(np.mean(v)) for prompt, v in values.items()}


def test_compare_runs_and_report_over_a_baseline_presto_and_sequential_run_match_the_chains(toy_table, tmp_path):
    """One dataset and seed, 3 prompts x 2 chains: compare_runs' speedup and paired TOST, and report.py's Case Study 8
    row, recomputed by hand from chains.jsonl."""
    runs = tmp_path / "runs"
    for sampler in ("sequential", "presto", "lowtemp", "power_smc"):
        cfg = task_config(toy_table, tmp_path, "math500", sampler, "dataset.num_prompts=3", "run.chains_per_prompt=2")
        run_module.run(cfg, runs / sampler)
    out = tmp_path / "cmp.json"
    compare = load_script("compare_runs")
    args = (runs / "sequential", runs / "presto", runs / "sequential", runs / "lowtemp")
    assert call_script(compare, *args, "--allow-different-settings", "--json", out) == 0
    presto, lowtemp = json.loads(out.read_text())["pairs"]
    assert presto["setting_differences"] == [] and presto["seed_matched"] is True
    seq_time = np.mean([r["call_time_s"] for r in read_jsonl(runs / "sequential" / "chains.jsonl")])
    low_time = np.mean([r["call_time_s"] for r in read_jsonl(runs / "lowtemp" / "chains.jsonl")])
    assert lowtemp["speedup"]["speedup"] == pytest.approx(seq_time / low_time)
    for stat in ("loglik", "confidence"):
        a = np.array(list(by_prompt(runs / "sequential", stat).values()))
        b = np.array(list(by_prompt(runs / "lowtemp", stat).values()))
        d, n = b - a, len(a)
        se, delta = d.std(ddof=1) / np.sqrt(n), 0.2 * a.std(ddof=1)
        p_eq = max(stats.t(n - 1).sf((d.mean() + delta) / se), stats.t(n - 1).cdf((d.mean() - delta) / se))
        tost = lowtemp["tost"][stat]
        assert (tost["n"], tost["mean_diff"], tost["margin"]) == (3, pytest.approx(d.mean()), pytest.approx(delta))
        assert tost["p_eq"] == pytest.approx(p_eq)
        assert presto["tost"][stat]["mean_diff"] == pytest.approx(0.0, abs=1e-12)  # the toy engine is exact

    report = load_script("report")
    assert call_script(report, runs, "--no-figures") == 0
    text = (runs / "report.md").read_text()
    row = re.search(r"^\| power_smc \| power_smc \| P=3, B=4 \|.*$", text, re.MULTILINE)
    assert row is not None, text
    cells = [c.strip() for c in row.group(0).strip("|").split("|")]
    smc = read_jsonl(runs / "power_smc" / "chains.jsonl")
    assert cells[4] == "6" and float(cells[7]) == pytest.approx(sum(r["model_calls"] for r in smc) / 3)
    assert float(cells[9]) == np.mean([r["correct"] for r in smc])


# --- Defects ---------------------------------------------------------------------------------------------------------


def sandbox_that_cannot_start(monkeypatch) -> None:
    """The grading sandbox fails to start for every program (fork refused: EAGAIN on a node at its process limit)."""
    from presto.tasks import code_grader
    from presto.tasks.sandbox import RunResult

    def cannot_start(job, limits):
        return RunResult("error", "could not start the sandbox: [Errno 11] Resource temporarily unavailable", 0.0)

    monkeypatch.setattr(code_grader, "run_sandboxed", cannot_start)


def test_a_chain_the_sandbox_could_not_grade_says_why_and_a_resume_grades_it_again(toy_table, tmp_path, monkeypatch):
    run_dir = tmp_path / "run"
    with monkeypatch.context() as patch:
        sandbox_that_cannot_start(patch)
        run_module.run(task_config(toy_table, tmp_path, "mbpp", "lowtemp"), run_dir)
    records = assert_graded_consistently(run_dir)
    assert all(r["correct"] is None for r in records)
    assert all("could not start the sandbox" in (r.get("grade_error") or "") for r in records), records
    run_module.run(task_config(toy_table, tmp_path, "mbpp", "lowtemp", "run.resume=true"), run_dir)
    assert all(r["correct"] is False for r in assert_graded_consistently(run_dir))


def test_a_sandbox_that_never_starts_stops_the_run_after_three_chains(toy_table, tmp_path, monkeypatch):
    from presto.tasks import GradingError

    sandbox_that_cannot_start(monkeypatch)
    cfg = task_config(toy_table, tmp_path, "mbpp", "lowtemp", "run.chains_per_prompt=3")
    with pytest.raises(GradingError):
        run_module.run(cfg, tmp_path / "run")


def test_runs_of_the_same_prompts_compare_when_num_prompts_exceeds_the_file(toy_table, tmp_path):
    runs = tmp_path / "runs"
    run_module.run(task_config(toy_table, tmp_path, "math500", "sequential", "dataset.num_prompts=3"), runs / "seq")
    run_module.run(task_config(toy_table, tmp_path, "math500", "presto", "dataset.num_prompts=10"), runs / "presto")
    assert summary_of(runs / "seq")["prompts"] == summary_of(runs / "presto")["prompts"] == 3
    assert call_script(load_script("compare_runs"), runs / "seq", runs / "presto") == 0
