"""The embedded default end to end: SmolLM2 from its wheel, HumanEval from its package."""

from __future__ import annotations

import json

import pytest

from tests.conftest import run_cli


@pytest.mark.slow
def test_embedded_default_runs_on_hf_and_reports_accuracy(tmp_path):
    run_dir = tmp_path / "run"
    result = run_cli(
        "engine=hf",
        "dataset.num_prompts=1",
        "sampler.max_new_tokens=16",
        "sampler.block_size=16",
        "sampler.steps=4",
        "budget.n_pf=4",
        f"hydra.run.dir={run_dir}",
        timeout=900,
    )
    assert result.returncode == 0, result.stderr
    assert "transitions_per_call" in result.stdout and "accuracy" in result.stdout
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["chains"] == 1 and summary["transitions"] == 4
    assert summary["graded"] + summary["ungraded"] == 1
    (chain,) = [json.loads(line) for line in (run_dir / "chains.jsonl").read_text().splitlines()]
    assert chain["prompt_id"] == "HumanEval/0" and len(chain["tokens"]) == 16 and chain["text"]
    assert chain["correct"] in (True, False)
