"""scripts/plots.py and scripts/report.py on toy runs (and one tiny real-model run, slow)."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from presto.eval.plots import epsilon_rounded, epsilon_shares, tree_layout
from presto.eval.runs import chain_progress, find_runs
from tests.conftest import PROJECT_ROOT, run_cli, toy_args, write_toy_table

PNG = b"\x89PNG\r\n\x1a\n"


def script(name: str, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    path = PROJECT_ROOT / "scripts" / name
    return subprocess.run([sys.executable, str(path), *args], capture_output=True, text=True, timeout=timeout, cwd="/")


def assert_pngs(paths) -> None:
    assert paths
    for path in paths:
        data = path.read_bytes()
        assert data.startswith(PNG) and len(data) > 2000, path


@pytest.fixture(scope="module")
def toy_runs(tmp_path_factory):
    """A sequential run, a PreSTO run of the same setting, and a baseline, in one 'multirun' dir."""
    root = tmp_path_factory.mktemp("multirun")
    table = write_toy_table(root.parent / "table.json", vocab=6, seed=3)
    for name, extra in (
        ("0", ("traversal=sequential",)),
        ("1", ("traversal=bfs", "budget.n_pf=6")),
        ("2", ("sampler=best_of_n", "sampler.num_samples=4")),
    ):
        result = run_cli(*toy_args(table, root / name, "sampler.alpha=2", "seed=3", *extra))
        assert result.returncode == 0, result.stderr
    return root


def node(i, parent, branch, log_accept, reached=False, decided=False):
    return {
        "id": i,
        "parent": parent,
        "branch": branch,
        "depth": 0 if parent is None else 1 + (parent > 0),
        "log_accept": log_accept,
        "feasible": log_accept is not None,
        "reached": reached,
        "decided": decided,
    }


def test_epsilon_rounded_subtree_and_layout():
    # root: certain accept -> only its accept child; that child uncertain -> both of its children
    nodes = [
        node(0, None, "root", 0.0, True, True),
        node(1, 0, "accept", -0.5, True, True),
        node(2, 0, "reject", -0.1),
        node(3, 1, "accept", -20.0, True),
        node(4, 1, "reject", None),
    ]
    assert epsilon_rounded(nodes) == {0, 1, 3, 4}
    positions = tree_layout(nodes)
    assert positions[1][0] < positions[0][0] < positions[2][0]  # acceptance left, rejection right
    assert positions[3][0] < positions[4][0] and positions[3][1] == -2.0
    # A long lone-accept chain under the accept child must not push it right of its reject sibling.
    unary = [node(0, None, None, 0.5), node(1, 0, "accept", 0.5), node(2, 0, "reject", None)]
    unary += [node(3, 1, "accept", 0.99), node(4, 3, "accept", 0.99), node(5, 4, "accept", None)]
    positions = tree_layout(unary)
    assert positions[1][0] < positions[0][0] < positions[2][0]
    assert positions[5][0] < positions[4][0] < positions[3][0] < positions[1][0]  # lone accepts lean left
    shares = epsilon_shares(np.array([0.0, 0.005, 0.5, 0.995, 1.0]))
    assert shares == pytest.approx({"reject": 0.4, "uncertain": 0.2, "accept": 0.4})


def test_call_times_line_up_with_transitions(toy_runs):
    for run in find_runs(toy_runs):
        for record in run.chains:
            progress = chain_progress(run, record)
            if run.summary["sampler"] == "best_of_n":
                assert progress is None  # no MH transitions to trace
                continue
            transitions, times = progress
            assert transitions[-1] == record["transitions"]
            assert times[-1] == pytest.approx(record["call_time_s"])


def test_plots_script_writes_non_empty_pngs(toy_runs, tmp_path):
    out = tmp_path / "figures"
    result = script("plots.py", str(toy_runs), "--out", str(out))
    assert result.returncode == 0, result.stderr
    names = {p.name for p in out.glob("*.png")}
    assert {"transition_traces.png", "epsilon_certainty.png", "speedup_scatter.png"} <= names
    assert any(n.startswith("subtrees_") for n in names)
    assert_pngs(sorted(out.glob("*.png")))
    assert sorted(result.stdout.split()) == sorted(str(p) for p in out.glob("*.png"))
    missing = script("plots.py", str(tmp_path / "nothing"), "--out", str(out))
    assert missing.returncode == 2 and "error:" in missing.stderr


def test_report_script_writes_one_markdown_report(toy_runs):
    result = script("report.py", str(toy_runs))
    assert result.returncode == 0, result.stderr
    report = toy_runs / "report.md"
    assert result.stdout.strip() == str(report)
    text = report.read_text()
    for needle in ("Speed per sampler", "transitions/call", "time/call", "speedup", "accuracy", "p_eq", "best_of_n"):
        assert needle in text, needle
    assert "| bfs | 6 |" in text and "| sequential | 1 |" in text
    figures = [line.split("(")[1].rstrip(")") for line in text.splitlines() if line.startswith("![")]
    assert len(figures) >= 4
    assert_pngs([toy_runs / f for f in figures])


@pytest.mark.slow
def test_plots_for_a_tiny_real_model_run(tmp_path):
    """The embedded default (SmolLM2 on HumanEval, transformers engine), shortened to a few steps."""
    run_dir = tmp_path / "run"
    result = run_cli(
        "engine=hf",
        "dataset.num_prompts=1",
        "sampler.max_new_tokens=8",
        "sampler.block_size=8",
        "sampler.steps=3",
        "budget.n_pf=3",
        "run.progress=false",
        f"hydra.run.dir={run_dir}",
        timeout=900,
    )
    assert result.returncode == 0, result.stderr
    out = tmp_path / "figures"
    plots = script("plots.py", str(run_dir), "--out", str(out))
    assert plots.returncode == 0, plots.stderr
    names = {p.name for p in out.glob("*.png")}
    assert "transition_traces.png" in names and any(n.startswith("subtrees_") for n in names)
    assert_pngs(sorted(out.glob("*.png")))
