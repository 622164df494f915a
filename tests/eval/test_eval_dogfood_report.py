"""Dogfooding fixes in report and plots: settings that read alike, the scatter's silence, subtree numbering."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from presto.eval.plots import make_plots
from presto.eval.runs import load_run
from tests.conftest import PROJECT_ROOT, run_cli, toy_args, write_toy_table


def script(name: str, *args: str) -> subprocess.CompletedProcess:
    path = PROJECT_ROOT / "scripts" / name
    return subprocess.run([sys.executable, str(path), *args], capture_output=True, text=True, timeout=300, cwd="/")


@pytest.fixture(scope="module")
def split(tmp_path_factory) -> Path:
    """A sequential and a BFS run whose settings differ only in a key the heading does not show.

    The two toy tables hold the same numbers under two names, as engine.threads=None vs 1 on
    the hf engine: engine.table differs, the sampler, alpha, n, B, K, dataset and model agree.
    """
    root = tmp_path_factory.mktemp("dogfood_split")
    first = write_toy_table(root / "table_a.json", vocab=6, seed=3)
    second = root / "table_b.json"
    shutil.copyfile(first, second)
    runs = root / "runs"
    for name, table, extra in (
        ("seq", first, ("traversal=sequential",)),
        ("bfs", second, ("traversal=bfs", "budget.n_pf=4")),
    ):
        done = run_cli(*toy_args(table, runs / name, *extra))
        assert done.returncode == 0, done.stderr[-2000:]
    return runs


def test_report_headings_name_the_keys_that_tell_settings_apart(split, tmp_path):
    out = tmp_path / "report.md"
    done = script("report.py", str(split), "--out", str(out), "--no-figures")
    assert done.returncode == 0, done.stderr
    text = out.read_text()
    headings = [line for line in text.splitlines() if line.startswith("### powermh")]
    assert len(headings) == 2 and len(set(headings)) == 2, headings
    table_a, table_b = str(split.parent / "table_a.json"), str(split.parent / "table_b.json")
    assert any(f"engine.table={table_a!r}" in h for h in headings)
    assert any(f"engine.table={table_b!r}" in h for h in headings)
    # The sequential run is printed, but not of this exact setting: the note says in what it differs.
    note = next(line for line in text.splitlines() if line.startswith(f"- note: {split / 'bfs'}:"))
    assert "no sequential run of this setting here" in note
    assert f"the sequential run {split / 'seq'} differs only in engine.table ({table_b!r} vs {table_a!r})" in note


def test_settings_with_distinct_headings_keep_them_plain(tmp_path):
    """Only headings that would read alike get keys appended."""
    table = write_toy_table(tmp_path / "table.json", vocab=6, seed=3)
    for name, extra in (("a2", ("sampler.alpha=2",)), ("a4", ("sampler.alpha=4",))):
        done = run_cli(*toy_args(table, tmp_path / "runs" / name, "traversal=sequential", *extra))
        assert done.returncode == 0, done.stderr[-2000:]
    done = script("report.py", str(tmp_path / "runs"), "--no-figures")
    assert done.returncode == 0, done.stderr
    headings = [line for line in (tmp_path / "runs" / "report.md").read_text().splitlines() if line.startswith("###")]
    assert len(headings) == 2 and not any("[" in h for h in headings), headings


def test_plots_says_why_no_speedup_scatter_was_drawn(split, tmp_path):
    done = script("plots.py", str(split), "--out", str(tmp_path / "figures"))
    assert done.returncode == 0, done.stderr
    notices = [line for line in done.stderr.splitlines() if "speedup scatter" in line]
    assert len(notices) == 1 and notices[0].startswith("notice: no speedup scatter: "), done.stderr
    assert "no PreSTO run shares its setting with a sequential run" in notices[0]
    assert "engine.table" in notices[0]
    assert not (tmp_path / "figures" / "speedup_scatter.png").exists()


def test_no_scatter_notice_when_the_scatter_is_drawn_or_cannot_be(split, tmp_path, capsys):
    """A sequential run of the same setting: a scatter and no notice; PreSTO runs alone: nothing to say."""
    root = tmp_path / "runs"
    shutil.copytree(split, root)
    table_b = split.parent / "table_b.json"
    done = run_cli(*toy_args(table_b, root / "seq_b", "traversal=sequential"))
    assert done.returncode == 0, done.stderr[-2000:]
    runs = [load_run(root / name) for name in ("seq", "bfs", "seq_b")]
    written = make_plots(runs, tmp_path / "with")
    assert "speedup_scatter.png" in {p.name for p in written}
    assert "speedup scatter" not in capsys.readouterr().err
    make_plots([load_run(root / "bfs")], tmp_path / "alone")
    assert "speedup scatter" not in capsys.readouterr().err


def test_subtree_figures_are_numbered_among_runs_with_trees(split, tmp_path):
    """Sequential runs (no trees) between PreSTO runs leave no gaps in the numbering."""
    root = tmp_path / "runs"
    root.mkdir()
    shutil.copytree(split / "seq", root / "a_seq")
    shutil.copytree(split / "bfs", root / "b_bfs")
    shutil.copytree(split / "seq", root / "c_seq")
    shutil.copytree(split / "bfs", root / "d_bfs")
    runs = [load_run(root / name) for name in ("a_seq", "b_bfs", "c_seq", "d_bfs")]
    written = make_plots(runs, tmp_path / "figures", max_tree_panels=2)
    subtrees = sorted(p.name for p in written if p.name.startswith("subtrees_"))
    assert [name.split("_")[1] for name in subtrees] == ["00", "01"], subtrees
