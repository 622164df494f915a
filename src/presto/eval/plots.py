"""Figures from run directories (PNG, matplotlib with the Agg backend).

- prefetched subtrees as binary trees (the paper's Figures 7d and 21): acceptance edges go
  left and are solid, rejection edges go right and are dashed; orange marks the
  epsilon-rounded subtree (at an epsilon-certain decision only the near-sure branch is
  kept, at an uncertain one both), blue the sampled path (its endpoint double-bordered),
  gray the other prefetched branches; hollow nodes were not served by this call (not
  requested, or deferred because the realized path rewrote their prefix). The sampled path
  has one edge per realized transition: a walk that reached the block's last transition
  ends at the state after it, a node no decision of the round holds, drawn hollow;
  in a multi-block run every panel's title names its block;
- per-transition traces: cumulative model-call time against completed MH transitions,
  mean over chains with a +-1 SD band, sequential dashed, PreSTO solid (Figure 13);
- the speedup scatter: reduction in model calls against increase in time per call, one
  point per setting, with iso-speedup lines (Figure 1);
- the epsilon-certainty histogram of every scored decision's acceptance probability, and
  the share of certain rejects, uncertain decisions and certain accepts (Figures 15-16).

Every function takes plain records (as read from the run directory) and writes one file.
A run's trees.jsonl (GBs for a long run) is read a record at a time, once, into what the
figures need (``RunData.tree_digest``): it is never held whole.
Figures are bare matplotlib Figures rendered with Agg: plotting never switches the
caller's pyplot backend and leaves no open pyplot figure. ``make_plots`` keeps an output
directory to the figures of its latest call (a manifest lists what it wrote).
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from presto.config import differing_keys
from presto.eval.runs import (
    RunData,
    chain_progress,
    compare,
    nearest_sequential,
    node_acceptance,
    sequential_baseline,
)

EPSILON = 0.01
SAMPLED = "#1f77b4"  # blue: the sampled path
ROUNDED = "#ff7f0e"  # orange: the epsilon-rounded subtree
OTHER = "#9a9a9a"  # gray: other prefetched branches


def _figure(**kwargs):
    """A matplotlib Figure outside pyplot: no global backend switch, nothing to close.

    ``matplotlib.use("Agg")`` would switch the caller's backend (a notebook's inline one,
    say) for the rest of its session; a bare Figure renders PNG with Agg on its own and is
    freed with its last reference.
    """
    from matplotlib.figure import Figure

    return Figure(**kwargs)


def _colormap(name: str):
    import matplotlib

    return matplotlib.colormaps[name]


def _save(fig, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110, bbox_inches="tight")
    return path


# --- prefetched subtrees -----------------------------------------------------------------


def _children(nodes: Sequence[Mapping[str, Any]]) -> dict[int, dict[str, int]]:
    children: dict[int, dict[str, int]] = {}
    for node in nodes:
        if node.get("parent") is not None:
            children.setdefault(node["parent"], {})[node["branch"]] = node["id"]
    return children


def epsilon_rounded(nodes: Sequence[Mapping[str, Any]], epsilon: float = EPSILON) -> set[int]:
    """Ids of the epsilon-rounded subtree: from the root, keep only branches rounding leaves possible.

    A decision with A <= epsilon keeps its rejection child, one with A >= 1 - epsilon its
    acceptance child, and an uncertain one both; nodes without a decision end the subtree.
    """
    if not nodes:
        return set()
    children = _children(nodes)
    by_id = {n["id"]: n for n in nodes}
    kept: set[int] = set()
    stack = [nodes[0]["id"]]
    while stack:
        node_id = stack.pop()
        kept.add(node_id)
        accept = node_acceptance(by_id[node_id])
        if accept is None:
            continue
        branches = ["accept"] if accept >= 1 - epsilon else ["reject"] if accept <= epsilon else ["accept", "reject"]
        stack.extend(children[node_id][b] for b in branches if b in children.get(node_id, {}))
    return kept


def tree_layout(nodes: Sequence[Mapping[str, Any]]) -> dict[int, tuple[float, float]]:
    """(x, y) per node id: leaves in order (acceptance subtree first), parents centred above.

    A missing child takes half a leaf slot on its side, so that a lone child still leans to
    its branch's side. Slots are handed out left to right, so every node lies within its
    subtree's slots and an acceptance subtree always stays left of its rejection sibling
    (leaning the parent off a lone child instead would push a long unary accept chain to the
    right of a sibling placed later).
    """
    children = _children(nodes)
    positions: dict[int, tuple[float, float]] = {}
    next_slot = [0.0]

    def slot(width: float) -> float:
        x = next_slot[0]
        next_slot[0] += width
        return x

    def place(node_id: int, depth: int) -> float:
        kids = children.get(node_id, {})
        if not kids:
            x = slot(1.0)
        else:
            xs = [place(kids[b], depth + 1) if b in kids else slot(0.5) for b in ("accept", "reject")]
            x = float(np.mean(xs))
        positions[node_id] = (x, -float(depth))
        return x

    if nodes:
        place(nodes[0]["id"], 0)
    return positions


def realized_count(tree: Mapping[str, Any]) -> int:
    """The MH transitions the round advanced: its ``realized`` field, or for an older record
    without it (or with ``null``), the number of decided nodes its walk reached."""
    realized = tree.get("realized")
    if realized is None:
        realized = sum(1 for n in tree.get("nodes") or [] if n.get("reached") and n.get("decided"))
    return int(realized)


def realized_path(tree: Mapping[str, Any]) -> tuple[list[dict[str, Any]], list[int]]:
    """The round's nodes, plus its walk's endpoint where it was not logged, and the walk's node ids.

    The walk realizes ``tree["realized"]`` transitions, so its path has that many edges:
    root, the decided nodes it passed (``reached``), and the endpoint, the state it ended in.
    A walk stopped by a deferred or unrequested decision ends at that (logged, undecided)
    node. A walk that reached the depth cap (the block's last transition) ends one level
    below the deepest logged depth: the state after its last decision, which no node of the
    round holds (there is no decision left to log there). That endpoint is added as the
    decided node's child on the branch it took (its ``accepted``), marked ``endpoint_only``.
    """
    nodes = [dict(n) for n in tree.get("nodes") or []]
    reached = sorted((n for n in nodes if n.get("reached")), key=lambda n: n["depth"])
    if not reached:
        return nodes, []
    realized = realized_count(tree)
    path = [n for n in reached if n["depth"] <= realized]
    last = path[-1]
    taken = last.get("accepted")
    if last["depth"] == realized - 1 and last.get("decided") and taken is not None:
        branch = "accept" if taken else "reject"
        if branch not in _children(nodes).get(last["id"], {}):
            endpoint = {
                "id": max(n["id"] for n in nodes) + 1,
                "parent": last["id"],
                "branch": branch,
                "depth": last["depth"] + 1,
                "cut": None,
                "requested": False,
                "feasible": False,
                "log_accept": None,
                "reached": True,
                "decided": False,
                "endpoint_only": True,
            }
            nodes.append(endpoint)
            path.append(endpoint)
    return nodes, [n["id"] for n in path]


def draw_subtree(ax, tree: Mapping[str, Any], epsilon: float = EPSILON, *, show_block: bool | None = None) -> None:
    """One prefetched subtree on ``ax`` in the paper's style.

    The title names the MH transitions the round advanced, prefixed by ``block B:`` when
    ``show_block`` (default: when the round belongs to a block after the first; a figure
    of a multi-block chain passes True so that block 0 is labelled too).
    """
    nodes, path = realized_path(tree)
    ax.set_axis_off()
    if nodes:
        positions = tree_layout(nodes)
        rounded = epsilon_rounded([n for n in nodes if not n.get("endpoint_only")], epsilon)
        sampled = set(path)
        endpoints = set(path[-1:])
        by_id = {n["id"]: n for n in nodes}
        for node in nodes:
            parent = node.get("parent")
            if parent is None or node["id"] not in positions or parent not in positions:
                continue
            (x0, y0), (x1, y1) = positions[parent], positions[node["id"]]
            on_path = node["id"] in sampled and parent in sampled
            color = SAMPLED if on_path else ROUNDED if node["id"] in rounded else OTHER
            style = "-" if node["branch"] == "accept" else "--"
            ax.plot([x0, x1], [y0, y1], style, color=color, lw=2.0 if on_path else 1.2, zorder=1)
        for node_id, (x, y) in positions.items():
            node = by_id[node_id]
            color = SAMPLED if node_id in sampled else ROUNDED if node_id in rounded else OTHER
            served = bool(node.get("feasible"))
            ax.scatter([x], [y], s=70, zorder=3, facecolor=color if served else "white", edgecolor=color, linewidth=1.5)
            if node_id in endpoints:
                ax.scatter([x], [y], s=190, zorder=2, facecolor="none", edgecolor=SAMPLED, linewidth=1.5)
    start, realized = int(tree.get("transition", 0)), realized_count(tree)
    stage = tree.get("stage")
    if show_block is None:
        show_block = bool(stage)
    block = f"block {stage}: " if show_block and stage is not None else ""
    ax.set_title(f"{block}MH {start}→{start + realized}", fontsize=9)


def plot_subtrees(
    trees: Sequence[Mapping[str, Any]],
    path: Path,
    *,
    max_panels: int = 20,
    title: str = "",
    blocks: int | None = None,
    total: int | None = None,
    later_blocks: bool | None = None,
) -> Path:
    """The prefetched subtrees of one chain in sampling order (Figure 21).

    ``blocks``: the run's number of blocks (n / B); with more than one, every panel's title
    names its block. Without it, a chain with a round outside block 0 counts as multi-block.
    When only the first ``max_panels`` rounds fit, the title says so.

    ``trees`` may hold only the chain's first rounds (a long run's chain is not read whole):
    ``total`` then counts all of its rounds, and ``later_blocks`` says whether any lies
    outside block 0 (both default to what ``trees`` shows).
    """
    trees = list(trees)
    total = len(trees) if total is None else total
    if blocks is not None:
        multi_block = blocks > 1
    else:
        multi_block = later_blocks if later_blocks is not None else any(t.get("stage") for t in trees)
    if total > max_panels:
        shown = f"first {max_panels} of {total} rounds"
        title = f"{title} ({shown})" if title else shown
    trees = trees[:max_panels]
    cols = min(5, max(1, len(trees)))
    rows = max(1, math.ceil(len(trees) / cols))
    fig = _figure(figsize=(3.2 * cols, 2.8 * rows))
    axes = fig.subplots(rows, cols, squeeze=False)
    for ax in axes.flat:
        ax.set_axis_off()
    for ax, tree in zip(axes.flat, trees, strict=False):
        draw_subtree(ax, tree, show_block=multi_block)
    from matplotlib.lines import Line2D

    legend = [
        Line2D([], [], color="black", ls="-", label="accept (left)"),
        Line2D([], [], color="black", ls="--", label="reject (right)"),
        Line2D([], [], color=SAMPLED, lw=2, label="sampled path"),
        Line2D([], [], color=ROUNDED, label=f"ε-rounded subtree (ε={EPSILON})"),
        Line2D([], [], color=OTHER, label="other prefetched"),
    ]
    fig.legend(handles=legend, loc="lower center", ncol=5, fontsize=8, frameon=False)
    if title:
        fig.suptitle(title, fontsize=10, y=1.0 + 0.04 / rows)
    fig.subplots_adjust(bottom=0.12 / rows, top=0.92)
    return _save(fig, path)


# --- per-transition traces ---------------------------------------------------------------


def _time_to_transition(transitions: np.ndarray, times: np.ndarray, total: int) -> np.ndarray:
    """Cumulative call time when transition k (1..total) was completed."""
    idx = np.searchsorted(transitions, np.arange(1, total + 1), side="left")
    return times[np.clip(idx, 0, len(times) - 1)]


def _drawn(
    runs: Sequence[RunData], labels: Sequence[str] | None, data_of: Callable[[RunData], Any]
) -> list[tuple[RunData, str, Any]]:
    """(run, legend label, its data) for each run with something to draw (``data_of`` not None).

    ``labels``: one per run in ``runs``; by default :func:`run_labels` of the runs drawn, so a
    setting that only an undrawn run differs in does not enter the others' labels.
    """
    given = list(labels) if labels is not None else [None] * len(runs)
    drawn = [(run, label, data) for run, label in zip(runs, given, strict=True) if (data := data_of(run)) is not None]
    if labels is None:
        told_apart = run_labels([run for run, _, _ in drawn])
        drawn = [(run, label, data) for (run, _, data), label in zip(drawn, told_apart, strict=True)]
    return drawn


def transition_trace(run: RunData) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """(transitions 1..K, mean cumulative call time, SD) over the run's chains."""
    curves = []
    for record in run.answers.values():  # a chain recorded twice counts once
        progress = chain_progress(run, record)
        if progress is not None:
            curves.append(_time_to_transition(*progress, int(record["transitions"])))
    if not curves:
        return None
    total = min(len(c) for c in curves)
    stacked = np.stack([c[:total] for c in curves])
    return np.arange(1, total + 1), stacked.mean(axis=0), stacked.std(axis=0)


def _n_pf(run: RunData) -> float:
    n_pf = run.summary.get("n_pf")
    return float(n_pf) if isinstance(n_pf, int | float) else math.inf


def plot_transition_traces(runs: Sequence[RunData], path: Path, labels: Sequence[str] | None = None) -> Path | None:
    """Cumulative model-call time vs MH transitions: sequential dashed, PreSTO solid.

    PreSTO curves go from light (small N_pf) to dark (large N_pf), as in Figure 13, whatever
    the order of the run directories (a multirun's job 10 sorts before job 2). ``labels``:
    one legend entry per run (default ``run.label``; ``run_labels`` tells apart runs that
    share one).
    """
    traces = _drawn(runs, labels, transition_trace)
    if not traces:
        return None
    fig = _figure(figsize=(6.5, 4.2))
    ax = fig.subplots()
    sequential = [i for i, (run, _, _) in enumerate(traces) if run.is_sequential]
    presto = [i for i, (run, _, _) in enumerate(traces) if not run.is_sequential]
    presto.sort(key=lambda i: _n_pf(traces[i][0]))
    shades = _colormap("Blues")(np.linspace(0.45, 0.95, max(1, len(presto))))
    grays = _colormap("Greys")(np.linspace(0.95, 0.5, max(1, len(sequential))))
    dashes = ("--", "-.", ":")  # several sequential samplers (a mixed multirun) stay apart
    styles = {i: (grays[k], dashes[k % len(dashes)]) for k, i in enumerate(sequential)}
    styles.update({i: (shades[k], "-") for k, i in enumerate(presto)})
    for i in sequential + presto:  # legend: sequential first, then PreSTO by budget
        _, label, (x, mean, sd) = traces[i]
        color, style = styles[i]
        ax.plot(x, mean, style, color=color, label=label)
        ax.fill_between(x, mean - sd, mean + sd, color=color, alpha=0.15, lw=0)
    ax.set_xlabel("MH transitions completed")
    ax.set_ylabel("cumulative model-call time (s)")
    ax.set_title("Per-transition traces (mean ± 1 SD over chains)")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    return _save(fig, path)


# --- speedup scatter ---------------------------------------------------------------------


def speedup_points(runs: Sequence[RunData]) -> list[dict[str, Any]]:
    """One point per PreSTO run that has a sequential run of the same setting."""
    points = []
    for run in runs:
        baseline = sequential_baseline(run, runs)
        if baseline is None:
            continue
        try:
            s = compare(baseline, run, stats=()).speedup
        except ValueError:
            continue
        if s.call_reduction and s.time_per_call_increase:
            points.append(
                {
                    "label": run.label,
                    "sampler": run.summary.get("sampler"),
                    "call_reduction": s.call_reduction,
                    "time_per_call_increase": s.time_per_call_increase,
                    "speedup": s.speedup,
                }
            )
    return points


def no_scatter_reason(runs: Sequence[RunData]) -> str | None:
    """Why ``speedup_points`` found no point although there are PreSTO and sequential runs (else None)."""
    sequential = [r for r in runs if r.is_sequential]
    presto = [r for r in runs if not r.is_sequential and r.summary.get("traversal") not in (None, "none")]
    if not sequential or not presto:
        return None
    if not any(sequential_baseline(r, runs) is not None for r in presto):
        near = [(r, nearest_sequential(r, runs)) for r in presto]
        near = [(r, n) for r, n in near if n is not None]
        reason = "no PreSTO run shares its setting with a sequential run"
        if near:
            run, (baseline, differences) = min(near, key=lambda item: len(item[1][1]))
            reason += f" ({run.label} {run.path} and {baseline.path} differ in {'; '.join(differences)})"
        return reason + "; the scatter needs both of one setting"
    return "no PreSTO run pairs chains with its sequential run (no shared prompt_id and chain, or no model calls)"


def plot_speedup_scatter(points: Sequence[Mapping[str, Any]], path: Path) -> Path | None:
    """Reduction in calls (x) against increase in time per call (y, reversed), log axes (Figure 1).

    speedup = reduction / increase, so iso-speedup lines are parallel to the diagonal. The
    y axis runs from large increases at the bottom to small ones at the top, so that, as in
    the paper's Figure 1, faster settings lie toward the upper right (above the 1x line).
    """
    if not points:
        return None
    fig = _figure(figsize=(5.5, 4.5))
    ax = fig.subplots()
    xs = np.array([p["call_reduction"] for p in points], dtype=float)
    ys = np.array([p["time_per_call_increase"] for p in points], dtype=float)
    low = min(xs.min(), ys.min(), 1.0) / 1.3
    high = max(xs.max(), ys.max(), 1.0) * 1.3
    grid = np.geomspace(low, high, 50)
    for factor in (0.5, 1.0, 1.5, 2.0, 3.0, 5.0):
        ax.plot(grid, grid / factor, ":", color="gray", lw=0.8)
        if low <= high / factor:
            ax.annotate(f"{factor:g}×", (high, high / factor), fontsize=7, color="gray", ha="right", va="bottom")
    samplers = sorted({str(p["sampler"]) for p in points})
    colors = _colormap("tab10")
    for i, sampler in enumerate(samplers):
        mask = np.array([str(p["sampler"]) == sampler for p in points])
        speedups = [p["speedup"] for p in points if str(p["sampler"]) == sampler]
        ax.scatter(xs[mask], ys[mask], color=colors(i), label=f"{sampler} (median {np.median(speedups):.2f}×)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(low, high)
    ax.set_ylim(high, low)  # reversed: cheaper calls higher up, faster settings upper right
    ax.set_xlabel("reduction in model calls (×)")
    ax.set_ylabel("increase in time per call (×, reversed)")
    ax.set_title("Speedup = reduction / increase (dotted: iso-speedup)")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3, which="both")
    return _save(fig, path)


# --- epsilon certainty -------------------------------------------------------------------


def acceptance_probabilities(trees: Sequence[Mapping[str, Any]]) -> np.ndarray:
    """A = exp(log A) of every scored decision in the logged trees (feasible nodes)."""
    values = [node_acceptance(node) for tree in trees for node in tree.get("nodes") or []]
    return np.asarray([a for a in values if a is not None], dtype=float)


def epsilon_shares(accept: np.ndarray, epsilon: float = EPSILON) -> dict[str, float]:
    """Fractions of certain rejects (A <= eps), uncertain decisions, certain accepts (A >= 1 - eps)."""
    if accept.size == 0:
        return {"reject": 0.0, "uncertain": 0.0, "accept": 0.0}
    reject = float(np.mean(accept <= epsilon))
    certain_accept = float(np.mean(accept >= 1 - epsilon))
    return {"reject": reject, "uncertain": 1.0 - reject - certain_accept, "accept": certain_accept}


def plot_epsilon_histogram(
    runs: Sequence[RunData], path: Path, epsilon: float = EPSILON, labels: Sequence[str] | None = None
) -> Path | None:
    """Histogram of acceptance probabilities and the epsilon-class shares per run (``labels`` as in the traces)."""

    def probabilities(run: RunData) -> np.ndarray | None:
        # The digest's A values (trees.jsonl read a record at a time), not the parsed records.
        accept = run.tree_digest().acceptance
        return accept if accept.size else None

    data = [(label, accept) for _, label, accept in _drawn(runs, labels, probabilities)]
    if not data:
        return None
    fig = _figure(figsize=(10, 3.8), layout="constrained")  # room for long run labels
    left, right = fig.subplots(1, 2, gridspec_kw={"width_ratios": [3, 2]})
    bins = np.concatenate([[0.0], np.linspace(epsilon, 1 - epsilon, 21), [1.0]])  # certain bands get their own bins
    for label, accept in data:
        left.hist(accept, bins=bins, histtype="step", lw=1.5, label=f"{label} ({accept.size} decisions)")
    left.axvspan(0, epsilon, color="red", alpha=0.1)
    left.axvspan(1 - epsilon, 1, color="green", alpha=0.1)
    left.set_yscale("log")
    left.set_xlabel("acceptance probability A")
    left.set_ylabel("scored decisions")
    left.set_title(f"ε-certainty (ε={epsilon}): shaded A ≤ ε and A ≥ 1-ε")
    left.legend(fontsize=7)
    labels = [label for label, _ in data]
    shares = [epsilon_shares(a, epsilon) for _, a in data]
    y = np.arange(len(labels))
    start = np.zeros(len(labels))
    for key, color in (("reject", "#d62728"), ("uncertain", "#bbbbbb"), ("accept", "#2ca02c")):
        values = np.array([s[key] for s in shares])
        right.barh(y, values, left=start, color=color, label=f"certain {key}" if key != "uncertain" else key)
        start += values
    right.set_yticks(y, labels, fontsize=7)
    right.set_xlim(0, 1)
    right.set_xlabel("share of scored decisions")
    right.legend(fontsize=7, loc="lower right")
    return _save(fig, path)


# --- everything for a set of runs --------------------------------------------------------

MANIFEST = ".presto-plots.json"
"""Names of the figures the last ``make_plots`` wrote into a directory (it removes them when stale)."""


def _short(value: Any, width: int = 24) -> str:
    text = str(value)
    if len(text) > width and "/" in text:  # a file path: its name tells runs apart
        text = Path(text).name
    return text if len(text) <= width else text[: width - 1] + "…"


def run_labels(runs: Sequence[RunData], max_keys: int = 2) -> list[str]:
    """Legend labels: ``run.label``, with what tells apart runs that share one.

    Runs with the same label (a sweep over alpha, a model or a seed) get the setting
    values that differ among them (at most ``max_keys``, then "…"), then the seed, and as a
    last resort the run directory's name.
    """
    labels = [run.label for run in runs]
    extras: list[list[str]] = [[] for _ in runs]

    def collisions() -> list[list[int]]:
        groups: dict[str, list[int]] = {}
        for i, label in enumerate(labels):
            groups.setdefault(_with(label, extras[i]), []).append(i)
        return [g for g in groups.values() if len(g) > 1]

    for group in collisions():
        values = {i: runs[i].setting_values() for i in group}
        keys = differing_keys(list(values.values()))
        for i in group:
            extras[i] += [f"{k.removeprefix('summary.')}={_short(values[i].get(k))}" for k in keys[:max_keys]]
            extras[i] += ["…"] if len(keys) > max_keys else []
    for group in collisions():
        if len({repr(runs[i].summary.get("seed")) for i in group}) > 1:
            for i in group:
                extras[i].append(f"seed={runs[i].summary.get('seed')}")
    for group in collisions():
        for i in group:
            extras[i].append(runs[i].path.name)
    return [_with(label, extra) for label, extra in zip(labels, extras, strict=True)]


def _with(label: str, extra: list[str]) -> str:
    return f"{label} ({', '.join(extra)})" if extra else label


def _read_manifest(out_dir: Path) -> list[str]:
    try:
        names = json.loads((out_dir / MANIFEST).read_text())
    except (OSError, ValueError):
        return []
    return [n for n in names if isinstance(n, str)] if isinstance(names, list) else []


def _write_manifest(out_dir: Path, names: set[str]) -> None:
    path = out_dir / MANIFEST
    if names:
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(sorted(names), indent=1) + "\n")
        tmp.replace(path)
    elif path.is_file():
        path.unlink()


def _remove_stale(out_dir: Path, names: set[str]) -> None:
    """Delete figures an earlier call listed in the manifest: bare PNG names, plain files only."""
    for name in names:
        if Path(name).name != name or not name.endswith(".png"):
            continue  # never anything outside out_dir, nor a file this module would not write
        path = out_dir / name
        if path.is_file() and not path.is_symlink():
            path.unlink()


def make_plots(runs: Sequence[RunData], out_dir: Path, *, max_tree_panels: int = 20) -> list[Path]:
    """All figures that the runs support, written under ``out_dir``; returns their paths.

    ``out_dir`` then holds the figures of these runs only: the figures an earlier call wrote
    there (listed in ``out_dir/.presto-plots.json``) that this call does not write again are
    removed, since they would show other runs. Files this module did not write are left alone.
    """
    out_dir = Path(out_dir)
    before = set(_read_manifest(out_dir))
    written: list[Path] = []
    finished = False
    try:
        # One streaming pass per run (RunData.tree_digest) serves every figure: it keeps whole
        # only the rounds the subtree figure draws, so a long run's trees.jsonl is never held.
        drawn = [run for run in runs if run.tree_digest(max_tree_panels).rounds]
        with_trees = list(zip(drawn, run_labels(drawn), strict=True))
        for i, (run, label) in enumerate(with_trees):  # numbered among the runs that have trees
            digest = run.tree_digest(max_tree_panels)
            first = digest.first_chain
            name = f"subtrees_{i:02d}_{slug(run.label)}.png"
            title = f"{label}: prefetched subtrees of {first[0]} chain {first[1]}"
            written.append(
                plot_subtrees(
                    digest.first_rounds(max_tree_panels),
                    out_dir / name,
                    max_panels=max_tree_panels,
                    title=title,
                    blocks=run.blocks,
                    total=digest.first_total,
                    later_blocks=any(r.stage for r in digest.rounds[first]),
                )
            )
        for maker, name in (
            (plot_transition_traces, "transition_traces.png"),
            (plot_epsilon_histogram, "epsilon_certainty.png"),
        ):
            path = maker(runs, out_dir / name)  # each figure labels the runs it draws
            if path is not None:
                written.append(path)
        scatter = plot_speedup_scatter(speedup_points(runs), out_dir / "speedup_scatter.png")
        if scatter is not None:
            written.append(scatter)
        else:
            reason = no_scatter_reason(runs)
            if reason:
                print(f"notice: no speedup scatter: {reason}", file=sys.stderr)
        finished = True
    finally:
        now = {p.name for p in written}
        if out_dir.is_dir():
            if finished:
                _remove_stale(out_dir, before - now)
                _write_manifest(out_dir, now)
            else:  # keep tracking everything, so that the next complete call still cleans up
                _write_manifest(out_dir, before | now)
    return written


def slug(text: str) -> str:
    return "".join(c if c.isalnum() or c in "-_" else "_" for c in text)
