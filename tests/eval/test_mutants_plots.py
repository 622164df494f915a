"""Tests that kill the mutants a hand mutation review of presto/eval/plots.py found surviving.

Ids of the review: R = the epsilon-rounded subtree, L = the tree layout, P = the realized path,
D = drawing one subtree, S = the subtree figure, T = the per-transition traces, V = the speedup
scatter and its notice, E = the epsilon-certainty figure, N = legend labels, file names and the
output directory's manifest. Each test names the mutants it kills. The tests read the data the
figures are built from (node and edge colours, bar extents, legend labels, scatter offsets,
the curves' values recomputed by hand from per-call times) rather than pixels. Runs are
RunData built in memory (a summary and chain records; a trees.jsonl where a figure reads one).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from matplotlib.colors import to_rgba
from matplotlib.figure import Figure

from presto.eval import plots
from presto.eval.plots import (
    OTHER,
    ROUNDED,
    SAMPLED,
    draw_subtree,
    epsilon_rounded,
    epsilon_shares,
    no_scatter_reason,
    realized_path,
    run_labels,
    speedup_points,
    transition_trace,
    tree_layout,
)
from presto.eval.runs import RunData

SUMMARY = {"sampler": "powermh", "alpha": 4.0, "tau": 0.25, "max_new_tokens": 4, "block_size": 2, "steps": 2}


def log_a(accept: float) -> float | None:
    """log A as trees.jsonl logs it (A = 0 is null)."""
    return math.log(accept) if accept > 0 else None


def node(i, parent, branch, depth, accept=None, *, reached=False, decided=False, accepted=None, feasible=None):
    return {
        "id": i,
        "parent": parent,
        "branch": branch,
        "depth": depth,
        "log_accept": None if accept is None else log_a(accept),
        "feasible": accept is not None if feasible is None else feasible,
        "reached": reached,
        "decided": decided,
        "accepted": accepted,
    }


def run(path: Path, traversal: str = "sequential", chains=(), trees=None, **summary) -> RunData:
    """A run in memory; with ``trees``, its trees.jsonl is written under ``path``."""
    n_pf = 1 if traversal == "sequential" else 4
    full = {**SUMMARY, "traversal": traversal, "n_pf": n_pf, "seed": 0, **summary}
    if trees is not None:
        path.mkdir(parents=True, exist_ok=True)
        (path / "trees.jsonl").write_text("".join(json.dumps(t) + "\n" for t in trees))
    return RunData(path, full, [dict(c) for c in chains])


def chain(prompt="p0", index=0, calls=6, seconds=21.0, times=None, transitions=4, seed=0):
    record = {"prompt_id": prompt, "chain": index, "seed": seed, "model_calls": calls, "call_time_s": seconds}
    record["transitions"] = transitions
    if times is not None:
        record["call_times_s"] = list(times)
    return record


def same_color(a, b) -> bool:
    return np.allclose(to_rgba(a), to_rgba(b))


# --- R, E: the epsilon classes at their boundaries ------------------------------------------------


def test_a_decision_exactly_at_epsilon_is_certain():
    """R1 (`A >= 1 - eps` -> `>`), R2 (`A <= eps` -> `<`), E1, E2 (the same in epsilon_shares), R4
    (the empty-tree guard dropped), R6 (an undecided node keeps its children): the docstring's
    classes are closed, A <= eps and A >= 1 - eps, and a node without a decision ends the subtree."""
    certain_accept = [node(0, None, "root", 0, 1.0), node(1, 0, "accept", 1), node(2, 0, "reject", 1)]
    assert epsilon_rounded(certain_accept, epsilon=0.0) == {0, 1}  # A = 1 >= 1 - 0
    certain_reject = [node(0, None, "root", 0, 0.0), node(1, 0, "accept", 1), node(2, 0, "reject", 1)]
    assert epsilon_rounded(certain_reject, epsilon=0.0) == {0, 2}  # A = 0 <= 0
    undecided = [node(0, None, "root", 0), node(1, 0, "accept", 1, 0.5), node(2, 0, "reject", 1, 0.5)]
    assert epsilon_rounded(undecided) == {0}
    assert epsilon_rounded([]) == set()
    # 1 - 0.01 == 0.99 in floating point: both default bounds are hit exactly.
    assert epsilon_shares(np.array([0.01, 0.99, 0.5, 0.5])) == {"reject": 0.25, "uncertain": 0.5, "accept": 0.25}
    assert epsilon_shares(np.array([0.0, 0.5, 1.0]), epsilon=0.0) == pytest.approx(
        {"reject": 1 / 3, "uncertain": 1 / 3, "accept": 1 / 3}
    )


# --- L: the layout's slots --------------------------------------------------------------------


def test_a_missing_child_takes_half_a_slot_and_leaves_one_slot_apart():
    """L1 (a missing child takes a whole slot), L6 (a leaf takes half a slot), L3 (the parent sits
    over its first child, not centred): root, its acceptance child with a lone rejection leaf,
    and its rejection leaf. The lone leaf sits a quarter slot right of its parent, the two
    leaves one slot apart, every parent at the mean of its two child slots."""
    nodes = [
        node(0, None, "root", 0, 0.5),
        node(1, 0, "accept", 1, 0.5),
        node(2, 0, "reject", 1),
        node(3, 1, "reject", 2),
    ]
    x = {i: p[0] for i, p in tree_layout(nodes).items()}
    assert {i: p[1] for i, p in tree_layout(nodes).items()} == {0: 0.0, 1: -1.0, 2: -1.0, 3: -2.0}
    assert x[3] - x[1] == pytest.approx(0.25)  # slots [missing accept: 0.5][leaf 3: 1.0]
    assert x[2] - x[3] == pytest.approx(1.0)
    assert x[0] == pytest.approx((x[1] + x[2]) / 2)
    assert tree_layout([]) == {}


# --- P: the realized path of an older record ------------------------------------------------------


def test_a_record_without_the_realized_count_counts_its_decided_nodes():
    """P11 (the fallback for a record without ``realized`` skipped: None compared with a depth):
    every decided node on the path is then one transition, so a walk stopped by a deferred node
    ends there, and one stopped by the depth cap gets its endpoint."""
    deferred = [
        node(0, None, "root", 0, 0.5, reached=True, decided=True, accepted=True),
        node(1, 0, "accept", 1, reached=True, feasible=False),
    ]
    assert realized_path({"nodes": deferred})[1] == [0, 1]
    capped = [
        node(0, None, "root", 0, 0.5, reached=True, decided=True, accepted=False),
        node(1, 0, "accept", 1, 0.5),
    ]
    extended, path = realized_path({"nodes": capped})
    assert path[0] == 0 and len(path) == 2
    endpoint = {n["id"]: n for n in extended}[path[1]]
    assert (endpoint["parent"], endpoint["branch"], endpoint["depth"]) == (0, "reject", 1)


@pytest.mark.parametrize("extra", [{}, {"realized": None}], ids=["missing", "null"])
def test_the_title_of_a_record_without_the_realized_count_matches_its_path(extra):
    """The title names the transitions the round advanced: for a record without ``realized``
    (absent or null), realized_path counts the decided nodes on the path (here 1), so the
    title reads MH 3→4, not MH 3→3 (and a null count is no TypeError)."""
    deferred = [
        node(0, None, "root", 0, 0.5, reached=True, decided=True, accepted=True),
        node(1, 0, "accept", 1, reached=True, feasible=False),
    ]
    tree = {"transition": 3, "nodes": deferred, **extra}
    assert len(realized_path(tree)[1]) - 1 == 1
    ax = Figure().subplots()
    draw_subtree(ax, tree)
    assert ax.get_title() == "MH 3→4"


# --- D: colours, hollow nodes and titles of one subtree ----------------------------------------


def subtree_tree(stage=0):
    """Root certainly accepts (A = 1); its acceptance child (A = 0.25) is the sampled state that
    rejects; the walk ends at that node's logged rejection child (2 transitions from MH 3)."""
    nodes = [
        node(0, None, "root", 0, 1.0, reached=True, decided=True, accepted=True),
        node(1, 0, "accept", 1, 0.25, reached=True, decided=True, accepted=False),
        node(2, 0, "reject", 1, 0.5),
        node(3, 1, "accept", 2, feasible=False),  # not served: hollow
        node(4, 1, "reject", 2, 0.5, reached=True),
    ]
    return {"stage": stage, "transition": 3, "realized": 2, "nodes": nodes}


def drawn(tree, **kwargs):
    """({node id: (face colour, edge colour)}, {child id: edge colour}, title) of draw_subtree."""
    ax = Figure().subplots()
    draw_subtree(ax, tree, **kwargs)
    positions = tree_layout(realized_path(tree)[0])
    at = {tuple(np.round(p, 6)): i for i, p in positions.items()}
    colours = {}
    for c in ax.collections:
        if list(c.get_sizes()) == [70]:
            colours[at[tuple(np.round(c.get_offsets()[0], 6))]] = (c.get_facecolor()[0], c.get_edgecolor()[0])
    edges = {}
    for line in ax.lines:
        end = (round(line.get_xdata()[1], 6), round(line.get_ydata()[1], 6))
        edges[at[end]] = line.get_color()
    return colours, edges, ax.get_title()


def test_subtree_colours_mark_the_sampled_path_the_rounded_subtree_and_the_rest():
    """D3 (nodes off the path never orange), D6 (edges off the path never orange), D4 (unserved
    nodes filled), D7 (draw_subtree's epsilon not passed on): blue path 0-1-4, orange node 3 in
    the epsilon-rounded subtree (node 1 is uncertain at eps = 0.01), gray node 2 (the root is a
    certain accept); at eps = 0.3 node 1 is a certain reject and node 3 turns gray."""
    colours, edges, _ = drawn(subtree_tree())
    for i in (0, 1, 4):
        assert same_color(colours[i][1], SAMPLED)
    assert same_color(colours[3][1], ROUNDED) and same_color(colours[3][0], "white")  # hollow: not served
    assert same_color(colours[2][1], OTHER) and same_color(colours[2][0], OTHER)
    assert same_color(edges[1], SAMPLED) and same_color(edges[4], SAMPLED)
    assert same_color(edges[3], ROUNDED) and same_color(edges[2], OTHER)
    colours, edges, _ = drawn(subtree_tree(), epsilon=0.3)
    assert same_color(colours[3][1], OTHER) and same_color(edges[3], OTHER)


def test_a_panel_names_its_block_only_after_the_first_unless_asked():
    """D5 (the default ``show_block`` true for block 0 too): by default only a round of a later
    block is prefixed; a multi-block figure asks for block 0's prefix."""
    assert drawn(subtree_tree(stage=0))[2] == "MH 3→5"
    assert drawn(subtree_tree(stage=1))[2] == "block 1: MH 3→5"
    assert drawn(subtree_tree(stage=0), show_block=True)[2] == "block 0: MH 3→5"


# --- S: the subtree figure's title ---------------------------------------------------------------


def test_a_chain_that_fits_the_panels_is_not_called_truncated(tmp_path, saved_figures):
    """S1 (`total > max_panels` -> `>=`): as many rounds as panels is the whole chain."""
    trees = [subtree_tree(), subtree_tree()]
    plots.plot_subtrees(trees, tmp_path / "whole.png", max_panels=2, title="run")
    assert saved_figures["whole.png"]._suptitle.get_text() == "run"
    plots.plot_subtrees(trees, tmp_path / "cut.png", max_panels=1, title="run")
    assert saved_figures["cut.png"]._suptitle.get_text() == "run (first 1 of 2 rounds)"


# --- T: per-transition traces ---------------------------------------------------------------------

# Sequential, 2 blocks of 2 transitions: calls are [extension, t1, t2, extension, t3, t4].
TIMES_A = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]  # cumulative 1 3 6 10 15 21: t1..t4 done at 3 6 15 21
TIMES_B = [2.0] * 6  # cumulative 2 4 6 8 10 12: t1..t4 done at 4 6 10 12


def test_a_transition_is_timed_at_the_call_that_completed_it(tmp_path):
    """T1 (searchsorted side="right": a transition timed at a later call, the next block's
    extension included), T2, T5 (transitions counted from 0), T9 (one transition short), T4
    (ddof=1: a one-chain run's band would be NaN): mean and population SD over the chains of the
    cumulative call time at the call that completed transition k, recomputed by hand."""
    two = run(tmp_path / "two", chains=[chain(times=TIMES_A), chain(index=1, times=TIMES_B)])
    x, mean, sd = transition_trace(two)
    np.testing.assert_array_equal(x, [1, 2, 3, 4])
    np.testing.assert_allclose(mean, [3.5, 6.0, 12.5, 16.5])
    np.testing.assert_allclose(sd, [0.5, 0.0, 2.5, 4.5])
    x, mean, sd = transition_trace(run(tmp_path / "one", chains=[chain(times=TIMES_A)]))
    np.testing.assert_allclose(mean, [3.0, 6.0, 15.0, 21.0])
    np.testing.assert_array_equal(sd, 0.0)


def test_chains_of_different_lengths_are_traced_to_the_shortest(tmp_path):
    """T3 (`min` -> `max`: curves of unequal length stacked): the mean over all chains exists
    only up to the transitions every chain completed."""
    short = chain(index=1, times=TIMES_B, transitions=3)
    x, mean, _ = transition_trace(run(tmp_path / "r", chains=[chain(times=TIMES_A), short]))
    np.testing.assert_array_equal(x, [1, 2, 3])
    np.testing.assert_allclose(mean, [3.5, 6.0, 12.5])


def presto_run(path: Path, n_pf: int, **summary) -> RunData:
    """A PreSTO chain: per block an extension call and one round realizing both transitions."""
    trees = [
        {"prompt_id": "p0", "chain": 0, "round": r, "stage": r, "transition": 0, "realized": 2, "nodes": []}
        for r in (0, 1)
    ]
    records = [chain(calls=4, seconds=10.0, times=[1.0, 4.0, 1.0, 4.0])]
    return run(path, "bfs", records, trees, n_pf=n_pf, **summary)


def test_traces_list_sequential_runs_first_keep_their_dashes_apart_and_shade_one_sd(tmp_path, saved_figures):
    """T7 (legend PreSTO first), T10 (every sequential sampler dashed alike), T8 (the band's upper
    edge at the mean, not mean + SD): sequential runs first, then PreSTO by budget; two sequential
    samplers in two line styles; each band spans mean - SD to mean + SD."""
    runs = [
        presto_run(tmp_path / "bfs8", 8),
        run(tmp_path / "seq", chains=[chain(times=TIMES_A), chain(index=1, times=TIMES_B)]),
        presto_run(tmp_path / "bfs2", 2),
        run(tmp_path / "seq_mt", chains=[chain(times=TIMES_A)], sampler="multitry"),
    ]
    plots.plot_transition_traces(runs, tmp_path / "traces.png")
    ax = saved_figures["traces.png"].axes[0]
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert labels == ["powermh/sequential", "multitry/sequential", "powermh/bfs@2", "powermh/bfs@8"]
    styles = {line.get_label(): line.get_linestyle() for line in ax.lines}
    assert styles["powermh/sequential"] != styles["multitry/sequential"]
    assert styles["powermh/bfs@2"] == styles["powermh/bfs@8"] == "-"
    band = ax.collections[0].get_paths()[0].vertices[:, 1]  # the first curve drawn: powermh/sequential
    assert band.min() == pytest.approx(3.5 - 0.5) and band.max() == pytest.approx(16.5 + 4.5)


# --- V: speedup points, the scatter and the notice when there is none ----------------------------


def test_a_speedup_point_holds_the_decomposition_of_one_setting(tmp_path):
    """V2 (the point's speedup is the call reduction), V3 (the ValueError of runs without shared
    chains not caught): speedup = reduction / increase; a pair without shared chains is no point."""
    seq = run(tmp_path / "seq", chains=[chain(calls=10, seconds=10.0)])
    bfs = run(tmp_path / "bfs", "bfs", [chain(calls=2, seconds=5.0)])
    (point,) = speedup_points([seq, bfs])
    assert point == {
        "label": "powermh/bfs@4",
        "sampler": "powermh",
        "call_reduction": pytest.approx(5.0),
        "time_per_call_increase": pytest.approx(2.5),
        "speedup": pytest.approx(2.0),
    }
    unpaired = run(tmp_path / "other", "bfs", [chain(prompt="p9", calls=2, seconds=5.0)])
    assert speedup_points([seq, unpaired]) == []


def test_the_notice_names_the_nearest_sequential_run_and_says_none_when_a_side_is_missing(tmp_path):
    """V4 (the PreSTO run differing most is named), V5 (`or` -> `and`: a notice for sequential runs
    alone), V6 (`any` -> `all`: one PreSTO run with a baseline is not a missing setting)."""
    seq = run(tmp_path / "seq", chains=[chain(calls=10, seconds=10.0)])
    one_key = run(tmp_path / "one_key", "bfs", [chain(calls=2, seconds=5.0)], alpha=2.0)
    two_keys = run(tmp_path / "two_keys", "bfs", [chain(calls=2, seconds=5.0)], alpha=2.0, tau=0.5)
    reason = no_scatter_reason([seq, two_keys, one_key])
    assert reason.startswith("no PreSTO run shares its setting with a sequential run")
    assert str(one_key.path) in reason and str(two_keys.path) not in reason
    assert no_scatter_reason([seq]) is None and no_scatter_reason([one_key]) is None
    unpaired = run(tmp_path / "unpaired", "bfs", [chain(prompt="p9", calls=2, seconds=5.0)])
    assert no_scatter_reason([seq, unpaired, one_key]).startswith("no PreSTO run pairs chains")


def test_scatter_groups_points_by_sampler_with_their_median_speedup(tmp_path, saved_figures):
    """V7 (mean for median in the legend), V8 (a sampler's mask inverted: another sampler's points)."""

    def point(sampler, reduction, increase):
        return {"sampler": sampler, "call_reduction": reduction, "time_per_call_increase": increase}

    points = [point("powermh", 2.0, 2.0), point("powermh", 4.0, 2.0), point("powermh", 6.0, 1.0)]
    points.append(point("multitry", 3.0, 1.5))
    for p in points:
        p["speedup"] = p["call_reduction"] / p["time_per_call_increase"]  # 1, 2, 6 and 2
    plots.plot_speedup_scatter(points, tmp_path / "scatter.png")
    ax = saved_figures["scatter.png"].axes[0]
    offsets = {c.get_label(): c.get_offsets().tolist() for c in ax.collections}
    assert offsets == {
        "multitry (median 2.00×)": [[3.0, 1.5]],
        "powermh (median 2.00×)": [[2.0, 2.0], [4.0, 2.0], [6.0, 1.0]],  # mean 3.00
    }


# --- E: the epsilon-certainty figure ----------------------------------------------------------------


def decisions_run(path: Path, accepts, **summary) -> RunData:
    nodes = [node(i, None if i == 0 else 0, "root" if i == 0 else "accept", 0, a) for i, a in enumerate(accepts)]
    tree = {"prompt_id": "p0", "chain": 0, "round": 0, "stage": 0, "realized": 1, "nodes": nodes}
    return run(path, "bfs", [], [tree], **summary)


def test_certainty_bars_stack_each_runs_shares_beside_its_label(tmp_path, saved_figures):
    """E3 (the figure's epsilon not passed to the shares), E4 (bars not stacked), E6 (tick labels
    out of the bars' order), E5 (no bins of their own for the certain bands): at eps = 0.26,
    run "a" has shares 1/2, 1/4, 1/4 and run "b" 1/4, 1/4, 1/2; the histogram's bin edges include
    eps and 1 - eps (which 20 equal bins over [0, 1] would not)."""
    a = decisions_run(tmp_path / "a", [0.0, 0.2, 0.5, 1.0])
    b = decisions_run(tmp_path / "b", [0.25, 0.5, 0.8, 1.0], alpha=2.0)
    plots.plot_epsilon_histogram([a, b], tmp_path / "eps.png", epsilon=0.26, labels=["a", "b"])
    left, right = saved_figures["eps.png"].axes[:2]
    ticks = [t.get_text() for t in right.get_yticklabels()]
    assert ticks == ["a", "b"]
    bars = {}
    for patch in right.patches:
        row = ticks[round(patch.get_y() + patch.get_height() / 2)]
        bars.setdefault(row, []).append((round(patch.get_x(), 9), round(patch.get_width(), 9)))
    assert bars == {"a": [(0.0, 0.5), (0.5, 0.25), (0.75, 0.25)], "b": [(0.0, 0.25), (0.25, 0.25), (0.5, 0.5)]}
    edges = {round(x, 9) for patch in left.patches for x in patch.get_path().vertices[:, 0]}
    assert {0.0, 0.26, 0.74, 1.0} <= edges


# --- N: labels, file names, the manifest --------------------------------------------------------


def test_labels_add_the_differing_settings_then_seeds_then_directory_names(tmp_path):
    """N3 (a third differing key shown), N4 ("…" after exactly max_keys keys), N5 (the seed added
    though all runs share it), N6 (runs alike in everything not told apart), N1 (a short path
    value cut to its file name), N2 (a cut value one character too long)."""
    base = run(tmp_path / "r0", "bfs")
    three = [base, run(tmp_path / "r1", "bfs", alpha=2.0, tau=0.5, steps=3)]
    assert run_labels(three) == [
        "powermh/bfs@4 (alpha=4.0, steps=2, …)",
        "powermh/bfs@4 (alpha=2.0, steps=3, …)",
    ]
    two = [base, run(tmp_path / "r2", "bfs", alpha=2.0, tau=0.5)]
    assert run_labels(two) == ["powermh/bfs@4 (alpha=4.0, tau=0.25)", "powermh/bfs@4 (alpha=2.0, tau=0.5)"]
    seeds = [base, run(tmp_path / "r3", "bfs", seed=1)]
    assert run_labels(seeds) == ["powermh/bfs@4 (seed=0)", "powermh/bfs@4 (seed=1)"]
    alike = [base, run(tmp_path / "r4", "bfs")]
    assert run_labels(alike) == ["powermh/bfs@4 (r0)", "powermh/bfs@4 (r4)"]
    paths = [run(tmp_path / "p0", "bfs", prompts="a/b.json"), run(tmp_path / "p1", "bfs", prompts="c/d.json")]
    assert run_labels(paths) == ["powermh/bfs@4 (prompts=a/b.json)", "powermh/bfs@4 (prompts=c/d.json)"]
    assert plots._short("/data/sets/long/humaneval_a.jsonl") == "humaneval_a.jsonl"
    assert plots._short("x" * 30) == "x" * 23 + "…" and len(plots._short("x" * 30)) == 24
    assert plots._short("x" * 24) == "x" * 24


def test_file_names_keep_dashes_and_underscores():
    """N13 (`-` and `_` replaced too)."""
    assert plots.slug("power-mh_x/bfs@6") == "power-mh_x_bfs_6"


def test_an_interrupted_call_keeps_tracking_the_earlier_figures(monkeypatch, tmp_path):
    """N9 (the manifest of a call that failed lists only its own figures): the next complete call
    still removes the figures the earlier one wrote. N7 (a manifest entry that is no string)."""
    out = tmp_path / "out"
    out.mkdir()
    (out / "old.png").write_bytes(b"stale")
    (out / plots.MANIFEST).write_text(json.dumps([1, "old.png"]))

    def broken(*args, **kwargs):
        raise RuntimeError("interrupted")

    monkeypatch.setattr(plots, "plot_transition_traces", broken)
    with pytest.raises(RuntimeError):
        plots.make_plots([], out)
    assert "old.png" in json.loads((out / plots.MANIFEST).read_text())
    monkeypatch.undo()
    assert plots.make_plots([], out) == []
    assert not (out / "old.png").exists() and not (out / plots.MANIFEST).exists()


def test_a_listed_symlink_is_not_removed(tmp_path):
    """N8 (`not is_symlink()` dropped): only plain files are removed, never a link a user put there."""
    out = tmp_path / "out"
    out.mkdir()
    target = tmp_path / "mine.png"
    target.write_bytes(b"mine")
    (out / "link.png").symlink_to(target)
    (out / plots.MANIFEST).write_text(json.dumps(["link.png"]))
    plots.make_plots([], out)
    assert (out / "link.png").is_symlink() and target.exists()


def test_a_run_without_block_sizes_labels_every_panel_when_its_first_chain_has_later_blocks(tmp_path, saved_figures):
    """N11 (``later_blocks`` not passed: the first chain's later blocks unseen when the summary
    lacks the block count): every panel then names its block, block 0 included."""
    trees = [{**subtree_tree(stage=s), "prompt_id": "p0", "chain": 0, "round": s} for s in (0, 1)]
    unsized = run(tmp_path / "r", "bfs", [], trees, max_new_tokens=None, block_size=None)
    assert unsized.blocks is None
    written = plots.make_plots([unsized], tmp_path / "out")
    assert "subtrees_00_powermh_bfs_4.png" in {p.name for p in written}
    titles = [ax.get_title() for ax in saved_figures["subtrees_00_powermh_bfs_4.png"].axes if ax.get_title()]
    assert titles == ["block 0: MH 3→5", "block 1: MH 3→5"]
