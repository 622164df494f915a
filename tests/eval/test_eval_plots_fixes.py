"""presto.eval.plots on toy runs: the sampled path, block titles, stale figures, labels, backend."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.colors import to_rgb
from matplotlib.figure import Figure

from presto.eval import plots
from presto.eval.plots import SAMPLED, draw_subtree, make_plots, realized_path
from presto.eval.runs import load_run
from tests.conftest import PROJECT_ROOT, run_cli, toy_args, write_toy_table


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Toy runs (2 prompts x 2 chains, n=8, K=5 per block): sequential and PreSTO, two alphas, two budgets.

    Directory names put the larger budget first, as a multirun's job 10 sorts before job 2.
    """
    root = tmp_path_factory.mktemp("plot_runs")
    table = write_toy_table(root / "table.json", vocab=6, seed=3)
    settings = {
        "a_seq": ("traversal=sequential",),
        "b_bfs6": ("traversal=bfs", "budget.n_pf=6"),
        "c_bfs2": ("traversal=bfs", "budget.n_pf=2"),
        "d_bfs6_alpha4": ("traversal=bfs", "budget.n_pf=6", "sampler.alpha=4"),
        "e_one_block": ("traversal=bfs", "budget.n_pf=6", "sampler.block_size=8"),
        "f_no_rounds": ("traversal=bfs", "budget.n_pf=6"),
    }
    for name, extra in settings.items():
        steps = 0 if name == "f_no_rounds" else 5
        result = run_cli(*toy_args(table, root / name, "sampler.alpha=2", "seed=3", *extra, steps=steps))
        assert result.returncode == 0, result.stderr
    return root


def plots_script(*args: str) -> subprocess.CompletedProcess:
    path = PROJECT_ROOT / "scripts" / "plots.py"
    return subprocess.run([sys.executable, str(path), *args], capture_output=True, text=True, timeout=300, cwd="/")


def drawn_path(tree):
    """(branches of the thick blue edges from the root down, the endpoint ring's position, the last edge's end)."""
    ax = Figure().subplots()
    draw_subtree(ax, tree)
    edges = [line for line in ax.lines if to_rgb(line.get_color()) == to_rgb(SAMPLED) and line.get_linewidth() == 2.0]
    edges.sort(key=lambda line: -line.get_ydata()[0])  # y = -depth of the edge's parent
    branches = ["accept" if line.get_linestyle() == "-" else "reject" for line in edges]
    rings = [c.get_offsets()[0].tolist() for c in ax.collections if list(c.get_sizes()) == [190]]
    end = [edges[-1].get_xdata()[1], edges[-1].get_ydata()[1]] if edges else None
    return branches, rings, end


def test_sampled_path_has_one_edge_per_realized_transition_and_follows_the_chain(runs):
    """Every round's blue path is the chain's own accept/reject sequence, depth-capped rounds included."""
    run = load_run(runs / "b_bfs6")
    steps = int(run.summary["steps"])
    accepts = {(r["prompt_id"], r["chain"]): r["accepts"] for r in run.full_chains()}  # load_run keeps no lists
    capped = 0
    for chain, rounds in run.trees_by_chain.items():
        for tree in rounds:
            offset = tree["stage"] * steps + tree["transition"]
            expected = ["accept" if a else "reject" for a in accepts[chain][offset : offset + tree["realized"]]]
            branches, rings, end = drawn_path(tree)
            assert branches == expected, (chain, tree["round"])
            assert rings == [pytest.approx(end)]  # the endpoint is where the path ends
            capped += tree["realized"] == tree["depth_cap"]
    assert capped  # the toy run has rounds whose walk stops at the block's last transition


def test_depth_capped_walk_ends_below_its_last_decision():
    def node(i, parent, branch, depth, accepted=None, decided=True):
        return {
            "id": i,
            "parent": parent,
            "branch": branch,
            "depth": depth,
            "log_accept": -0.1,
            "feasible": True,
            "accepted": accepted,
            "reached": decided,
            "decided": decided,
        }

    # cap 2: root accepts, its acceptance child rejects; the state after that is not logged
    nodes = [node(0, None, "root", 0, True), node(1, 0, "accept", 1, False), node(2, 0, "reject", 1, decided=False)]
    tree = {"stage": 0, "transition": 3, "depth_cap": 2, "realized": 2, "nodes": nodes}
    extended, path = realized_path(tree)
    assert path[:2] == [0, 1] and len(path) == 3
    endpoint = {n["id"]: n for n in extended}[path[-1]]
    assert endpoint["parent"] == 1 and endpoint["branch"] == "reject" and endpoint["depth"] == 2
    assert len(tree["nodes"]) == 3  # the record itself is left as it was
    # a walk stopped by a deferred node already ends at a logged node
    deferred = [node(0, None, "root", 0, True), {**node(1, 0, "accept", 1), "decided": False, "feasible": False}]
    assert realized_path({"realized": 1, "nodes": deferred})[1] == [0, 1]
    assert drawn_path({"realized": 1, "nodes": deferred})[0] == ["accept"]


def test_every_panel_of_a_multi_block_chain_names_its_block(runs, tmp_path, saved_figures):
    multi, single = load_run(runs / "b_bfs6"), load_run(runs / "e_one_block")
    make_plots([multi, single], tmp_path, max_tree_panels=50)
    for i, run in enumerate((multi, single)):
        fig = saved_figures[f"subtrees_{i:02d}_{plots.slug(run.label)}.png"]
        titles = [ax.get_title() for ax in fig.axes if ax.get_title()]
        rounds = run.trees_by_chain[sorted(run.trees_by_chain)[0]]
        assert len(titles) == len(rounds)
        for title, tree in zip(titles, rounds, strict=True):
            span = f"MH {tree['transition']}→{tree['transition'] + tree['realized']}"
            assert title == (f"block {tree['stage']}: {span}" if run is multi else span)
    assert {t["stage"] for t in multi.trees_by_chain[sorted(multi.trees_by_chain)[0]]} == {0, 1}


def test_a_truncated_chain_says_how_many_rounds_it_shows(runs, tmp_path, saved_figures):
    run = load_run(runs / "b_bfs6")
    make_plots([run], tmp_path, max_tree_panels=2)
    fig = next(f for name, f in saved_figures.items() if name.startswith("subtrees_"))
    total = len(run.trees_by_chain[sorted(run.trees_by_chain)[0]])
    assert total > 2 and f"(first 2 of {total} rounds)" in fig._suptitle.get_text()


def test_out_dir_keeps_only_this_invocations_figures(runs, tmp_path):
    out = tmp_path / "figures"
    everything = make_plots([load_run(runs / n) for n in ("a_seq", "b_bfs6")], out)
    assert {"subtrees_00_powermh_bfs_6.png", "speedup_scatter.png", "epsilon_certainty.png"} <= {
        p.name for p in everything
    }
    (out / "notes.txt").write_text("mine")
    (out / "mine.png").write_bytes(b"not ours")
    outside = tmp_path / "outside.png"
    outside.write_bytes(b"not ours either")
    # The next invocation plots the sequential run alone: the PreSTO figures would be stale.
    result = plots_script(str(runs / "a_seq"), "--out", str(out))
    assert result.returncode == 0, result.stderr
    assert sorted(p.name for p in out.iterdir() if not p.name.startswith(".")) == [
        "mine.png",
        "notes.txt",
        "transition_traces.png",
    ]
    assert result.stdout.split() == [str(out / "transition_traces.png")]
    # A manifest naming anything but a bare PNG of out_dir (edited by hand, say) removes nothing else.
    (out / plots.MANIFEST).write_text(json.dumps(["../outside.png", "notes.txt", "transition_traces.png"]))
    make_plots([], out)
    assert outside.exists() and (out / "notes.txt").exists() and not (out / "transition_traces.png").exists()
    assert not (out / plots.MANIFEST).exists()  # nothing written, nothing left to track


def test_legend_tells_apart_runs_that_share_a_label(runs, tmp_path, saved_figures):
    loaded = [load_run(runs / n) for n in ("a_seq", "b_bfs6", "c_bfs2", "d_bfs6_alpha4")]
    assert loaded[1].label == loaded[3].label  # same sampler, traversal and budget; alpha differs
    make_plots(loaded, tmp_path)
    for name in ("transition_traces.png", "epsilon_certainty.png"):
        ax = saved_figures[name].axes[0]
        labels = [text.get_text() for text in ax.get_legend().get_texts()]
        assert len(labels) == len(set(labels)), (name, labels)
        assert any("alpha=4" in label for label in labels) and any("alpha=2" in label for label in labels)
    assert plots.run_labels(loaded[:3]) == [run.label for run in loaded[:3]]  # unique labels stay short
    fig = saved_figures["epsilon_certainty.png"]
    canvas = FigureCanvasAgg(fig)
    canvas.draw()  # lay it out
    renderer = canvas.get_renderer()
    left, right = fig.axes[:2]
    histogram_edge = left.get_tightbbox(renderer).x1
    assert all(t.get_window_extent(renderer).x0 > histogram_edge for t in right.get_yticklabels())  # no overlap


def test_traces_shade_presto_runs_by_budget_not_by_directory_order(runs, tmp_path, saved_figures):
    make_plots([load_run(runs / n) for n in ("a_seq", "b_bfs6", "c_bfs2")], tmp_path)  # N_pf 6 listed before 2
    lines = {line.get_label(): line for line in saved_figures["transition_traces.png"].axes[0].lines}
    brightness = {label: sum(to_rgb(line.get_color())) for label, line in lines.items()}
    assert brightness["powermh/bfs@6"] < brightness["powermh/bfs@2"]  # larger budget, darker blue (Figure 13)


def test_plotting_leaves_the_callers_backend_and_figures_alone(runs, tmp_path):
    code = textwrap.dedent(
        f"""
        import sys
        sys.path.insert(0, {str(PROJECT_ROOT / "src")!r})
        import matplotlib
        matplotlib.use("svg")  # a caller's own backend (a notebook's inline one, say)
        import matplotlib.pyplot as plt
        mine = plt.figure()
        from pathlib import Path
        from presto.eval.plots import make_plots
        from presto.eval.runs import load_run
        written = make_plots([load_run({str(runs / "b_bfs6")!r})], Path({str(tmp_path / "out")!r}))
        assert written, written
        print(matplotlib.get_backend(), plt.get_fignums())
        """
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd="/")
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["svg", "[1]"]


def test_edge_runs_plot_without_crashing(runs, tmp_path):
    """Empty trees.jsonl (no figure), a PreSTO run with zero rounds beside a sequential one, non-ASCII prompt ids."""
    empty = tmp_path / "empty"
    shutil.copytree(runs / "b_bfs6", empty)
    (empty / "trees.jsonl").write_text("")
    assert make_plots([load_run(empty)], tmp_path / "none") == []
    no_rounds = load_run(runs / "f_no_rounds")
    assert no_rounds.summary["prefetch_rounds"] == 0 and not no_rounds.trees
    idle = make_plots([load_run(runs / "a_seq"), no_rounds], tmp_path / "idle")
    assert [p.name for p in idle] == ["transition_traces.png"]
    accented = tmp_path / "accented"
    shutil.copytree(runs / "b_bfs6", accented)
    for name in ("chains.jsonl", "trees.jsonl"):
        path = accented / name
        path.write_text(path.read_text().replace('"toy/', '"équation/'))
    written = make_plots([load_run(accented)], tmp_path / "accented_figures")
    assert {p.name for p in written} >= {"transition_traces.png", "epsilon_certainty.png"}


def test_no_figures_notice_names_a_missing_trees_file(runs, tmp_path):
    empty = tmp_path / "empty"
    shutil.copytree(runs / "b_bfs6", empty)
    (empty / "trees.jsonl").unlink()
    result = plots_script(str(empty), "--out", str(tmp_path / "figures"))
    assert result.returncode == 0 and "no figures" in result.stderr and "trees.jsonl" in result.stderr


def test_an_out_path_that_is_a_file_is_one_error_line(runs, tmp_path):
    blocked = tmp_path / "a_file"
    blocked.write_text("")
    result = plots_script(str(runs / "b_bfs6"), "--out", str(blocked))
    assert result.returncode == 2 and result.stderr.startswith("error: cannot write figures to")
    assert "Traceback" not in result.stderr


def test_speedup_scatter_puts_faster_settings_upper_right(tmp_path, monkeypatch):
    """As in the paper's Figure 1: more calls saved goes right, cheaper calls go up."""
    figures = []
    monkeypatch.setattr(plots, "_save", lambda fig, path: figures.append(fig) or path)
    fast = {"call_reduction": 5.0, "time_per_call_increase": 1.5, "speedup": 5.0 / 1.5, "sampler": "powermh"}
    slow = {"call_reduction": 2.0, "time_per_call_increase": 3.0, "speedup": 2.0 / 3.0, "sampler": "powermh"}
    plots.plot_speedup_scatter([fast, slow], tmp_path / "scatter.png")
    ax = figures[0].axes[0]
    (fx, fy), (sx, sy) = (
        ax.transData.transform((p["call_reduction"], p["time_per_call_increase"])) for p in (fast, slow)
    )
    assert fx > sx and fy > sy


def test_a_chain_recorded_twice_is_traced_once(runs):
    once = plots.transition_trace(load_run(runs / "b_bfs6"))
    run = load_run(runs / "b_bfs6")
    run.chains.append(dict(run.chains[0]))  # e.g. a resumed run whose chain was written again
    twice = plots.transition_trace(run)
    assert once is not None and twice is not None
    for a, b in zip(once, twice, strict=True):
        np.testing.assert_array_equal(a, b)


def test_legends_tell_apart_only_the_runs_a_figure_draws(runs, tmp_path, saved_figures):
    """A run without rounds (K = 0) draws no curve: its steps must not enter the others' labels."""
    loaded = [load_run(runs / n) for n in ("b_bfs6", "e_one_block", "f_no_rounds")]
    make_plots(loaded, tmp_path)
    for name in ("transition_traces.png", "epsilon_certainty.png"):
        labels = [text.get_text() for text in saved_figures[name].axes[0].get_legend().get_texts()]
        assert len(labels) == 2 and all("block_size" in label for label in labels), (name, labels)
        assert not any("steps" in label for label in labels), (name, labels)


def test_plots_refuses_a_panel_count_below_one(runs, tmp_path):
    result = plots_script(str(runs / "b_bfs6"), "--out", str(tmp_path / "figures"), "--max-tree-panels", "0")
    assert result.returncode == 2 and "--max-tree-panels must be >= 1" in result.stderr
    assert not (tmp_path / "figures").exists()
