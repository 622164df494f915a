"""Case Study 8 in the report: MH runs beside the test-time baselines of the same task.

Toy runs of PowerMH (sequential and BFS), low temperature and best-of-N on the same prompts
must share one table, with each run's call time per prompt (summary call_time_s / prompts);
a baseline on other prompts is compared over the shared prompts only, and says so; a
baseline's unused sampler keys (steps, and block_size for lowtemp/best_of_n) split nothing.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from presto.baselines import BASELINES
from presto.eval.report import build_report
from presto.eval.runs import load_run, load_runs, setting_differences
from tests.conftest import PROJECT_ROOT, run_cli, toy_args, write_toy_table

RUNS = {
    "mh/seq": ("traversal=sequential",),
    "mh/bfs": ("traversal=bfs", "budget.n_pf=6"),
    "base/lowtemp": ("sampler=lowtemp",),
    "base/bon": ("sampler=best_of_n", "sampler.num_samples=4"),
    # Another prompt set (3 prompts, 2 of them shared) and unused keys set otherwise.
    "other/lowtemp3": ("sampler=lowtemp", "dataset.num_prompts=3", "sampler.steps=0", "sampler.block_size=8"),
    # Another alpha: a task without an MH run.
    "alpha2/lowtemp": ("sampler=lowtemp", "sampler.alpha=2"),
}


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    root = tmp_path_factory.mktemp("cs8")
    table = write_toy_table(root / "table.json", vocab=6, seed=3)
    for name, extra in RUNS.items():
        result = run_cli(*toy_args(table, root / name, "run.progress=false", *extra))
        assert result.returncode == 0, result.stderr
    return root


def case_study(text: str) -> str:
    assert "## Case Study 8" in text, text
    return text[text.index("## Case Study 8") :]


def tables(section: str) -> list[tuple[str, list[list[str]], list[str]]]:
    """(heading, rows as cells, notes) of each table of the section."""
    out = []
    for block in section.split("\n### ")[1:]:
        lines = block.splitlines()
        rows = [[c.strip() for c in line.strip("|").split("|")] for line in lines if line.startswith("| ")]
        notes = [line for line in lines if line.startswith("- note:")]
        out.append((lines[0], rows, notes))
    return out


def test_mh_runs_and_baselines_on_the_same_prompts_share_one_table(root, tmp_path):
    out = tmp_path / "report.md"
    script = PROJECT_ROOT / "scripts" / "report.py"
    result = subprocess.run(
        [sys.executable, str(script), str(root / "base"), str(root / "mh"), "--no-figures", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    [(heading, rows, notes)] = tables(case_study(out.read_text()))
    assert "engine=toy" in heading and "dataset=toy" in heading and "α=4" in heading and "n=8" in heading
    assert "2 prompts" in heading
    header, body = rows[0], rows[1:]
    assert [r[0] for r in body] == ["powermh (sequential)", "PreSTO-powermh (bfs)", "lowtemp", "best_of_n"]
    options = header.index("options")
    assert "N_pf=6" in body[1][options] and "N=4" in body[3][options]
    assert [r[header.index("run")] for r in body] == ["mh/seq", "mh/bfs", "base/lowtemp", "base/bon"]
    column = header.index("call time/prompt (s)")
    for name, row in zip(("mh/seq", "mh/bfs", "base/lowtemp", "base/bon"), body, strict=True):
        summary = json.loads((root / name / "summary.json").read_text())
        assert float(row[column]) == pytest.approx(summary["call_time_s"] / summary["prompts"], rel=1e-3)
        assert row[header.index("n")] == "8" and row[header.index("answers")] == "4"
    assert any("horizons differ" in note and "EOS" in note for note in notes)
    assert not any("shared" in note for note in notes)


def test_a_baseline_on_other_prompts_is_compared_over_the_shared_prompts(root, tmp_path):
    runs = load_runs([root / "mh", root / "base", root / "other"])
    text = build_report(runs, tmp_path / "report.md", figures=False).read_text()
    [(heading, rows, notes)] = tables(case_study(text))
    assert len(rows) == 1 + 5 and "2 prompts" in heading  # the 3-prompt lowtemp joins the group
    [note] = [note for note in notes if "shared" in note]
    assert "2 prompts are shared" in note and "shared prompts only" in note
    assert "steps" not in text[text.index("## Case Study 8") :].replace("K=6", "")

    from presto.eval.runs import prompt_figures

    other = load_run(root / "other" / "lowtemp3")
    assert len(other.prompt_ids) == 3
    shared = prompt_figures(other, {"toy/0", "toy/1"})
    expected = sum(r["call_time_s"] for r in other.chains if r["prompt_id"] != "toy/2") / 2
    assert shared.prompts == 2 and shared.answers == 4 and shared.call_time == pytest.approx(expected)
    lowtemp_rows = [r for r in rows[1:] if r[0] == "lowtemp"]
    column = rows[0].index("call time/prompt (s)")
    assert f"{expected:.4g}" in [r[column] for r in lowtemp_rows]


def test_a_baseline_without_an_mh_run_of_its_task_states_its_setting(root, tmp_path):
    runs = load_runs([root / "mh", root / "alpha2"])
    text = build_report(runs, tmp_path / "report.md", figures=False).read_text()
    [(heading, rows, notes)] = tables(case_study(text))
    assert "α=2" in heading and "n=8" in heading and "dataset=toy" in heading
    assert [r[0] for r in rows[1:]] == ["lowtemp"]
    [note] = notes
    assert "no MH run of this task" in note and "sampler.alpha (4.0 vs 2.0)" in note


def test_a_baselines_unused_keys_split_nothing(root):
    from presto.eval.runs import BASELINE_UNUSED_KEYS

    assert set(BASELINE_UNUSED_KEYS) == set(BASELINES)
    lowtemp, lowtemp3 = load_run(root / "base" / "lowtemp"), load_run(root / "other" / "lowtemp3")
    # Different steps and block_size (unused), different prompt counts (read from chains.jsonl).
    assert lowtemp.task() == lowtemp3.task() == load_run(root / "mh" / "seq").task()
    differences = setting_differences(lowtemp, lowtemp3)
    assert differences == ["dataset.num_prompts (2 vs 3)"]
    assert not any("steps" in k or "block_size" in k for k in lowtemp.setting_values())
