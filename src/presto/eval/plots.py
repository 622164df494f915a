"""Figures from run directories (PNG, matplotlib with the Agg backend).

- prefetched subtrees as binary trees (the paper's Figures 7d and 21): acceptance edges go
  left and are solid, rejection edges go right and are dashed; orange marks the
  epsilon-rounded subtree (at an epsilon-certain decision only the near-sure branch is
  kept, at an uncertain one both), blue the sampled path (its endpoint double-bordered),
  gray the other prefetched branches; hollow nodes were not served by this call (not
  requested, or deferred because the realized path rewrote their prefix);
- per-transition traces: cumulative model-call time against completed MH transitions,
  mean over chains with a +-1 SD band, sequential dashed, PreSTO solid (Figure 13);
- the speedup scatter: reduction in model calls against increase in time per call, one
  point per setting, with iso-speedup lines (Figure 1);
- the epsilon-certainty histogram of every scored decision's acceptance probability, and
  the share of certain rejects, uncertain decisions and certain accepts (Figures 15-16).

Every function takes plain records (as read from the run directory) and writes one file.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from presto.eval.runs import RunData, chain_progress, compare, sequential_baseline

EPSILON = 0.01
SAMPLED = "#1f77b4"  # blue: the sampled path
ROUNDED = "#ff7f0e"  # orange: the epsilon-rounded subtree
OTHER = "#9a9a9a"  # gray: other prefetched branches


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110, bbox_inches="tight")
    _pyplot().close(fig)
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
        log_accept = by_id[node_id].get("log_accept")
        if log_accept is None:
            continue
        accept = math.exp(log_accept)
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


def draw_subtree(ax, tree: Mapping[str, Any], epsilon: float = EPSILON) -> None:
    """One prefetched subtree on ``ax`` in the paper's style."""
    nodes = tree.get("nodes") or []
    ax.set_axis_off()
    if not nodes:
        return
    positions = tree_layout(nodes)
    rounded = epsilon_rounded(nodes, epsilon)
    sampled = {n["id"] for n in nodes if n.get("reached")}
    # The endpoint: the first undecided node reached, else (the walk hit the depth cap) the deepest reached node.
    reached = [n for n in nodes if n.get("reached")]
    undecided = [n["id"] for n in reached if not n.get("decided")]
    endpoints = set(undecided[:1]) or ({max(reached, key=lambda n: n["depth"])["id"]} if reached else set())
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
    start, realized = int(tree.get("transition", 0)), int(tree.get("realized", 0))
    block = f"block {tree['stage']}: " if tree.get("stage") else ""
    ax.set_title(f"{block}MH {start}→{start + realized}", fontsize=9)


def plot_subtrees(trees: Sequence[Mapping[str, Any]], path: Path, *, max_panels: int = 20, title: str = "") -> Path:
    """The prefetched subtrees of one chain in sampling order (Figure 21)."""
    plt = _pyplot()
    trees = list(trees)[:max_panels]
    cols = min(5, max(1, len(trees)))
    rows = max(1, math.ceil(len(trees) / cols))
    fig, axes = plt.subplots(rows, cols, figsize=(3.2 * cols, 2.8 * rows), squeeze=False)
    for ax in axes.flat:
        ax.set_axis_off()
    for ax, tree in zip(axes.flat, trees, strict=False):
        draw_subtree(ax, tree)
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


def transition_trace(run: RunData) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """(transitions 1..K, mean cumulative call time, SD) over the run's chains."""
    curves = []
    for record in run.chains:
        progress = chain_progress(run, record)
        if progress is not None:
            curves.append(_time_to_transition(*progress, int(record["transitions"])))
    if not curves:
        return None
    total = min(len(c) for c in curves)
    stacked = np.stack([c[:total] for c in curves])
    return np.arange(1, total + 1), stacked.mean(axis=0), stacked.std(axis=0)


def plot_transition_traces(runs: Sequence[RunData], path: Path) -> Path | None:
    """Cumulative model-call time vs MH transitions: sequential dashed, PreSTO solid."""
    traces = [(run, transition_trace(run)) for run in runs]
    traces = [(run, t) for run, t in traces if t is not None]
    if not traces:
        return None
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    presto = [r for r, _ in traces if not r.is_sequential]
    sequential = [r for r, _ in traces if r.is_sequential]
    shades = plt.get_cmap("Blues")(np.linspace(0.45, 0.95, max(1, len(presto))))
    grays = plt.get_cmap("Greys")(np.linspace(0.95, 0.5, max(1, len(sequential))))
    dashes = ("--", "-.", ":")  # several sequential samplers (a mixed multirun) stay apart
    for run, (x, mean, sd) in traces:
        if run.is_sequential:
            i = sequential.index(run)
            color, style = grays[i], dashes[i % len(dashes)]
        else:
            color, style = shades[presto.index(run)], "-"
        ax.plot(x, mean, style, color=color, label=run.label)
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


def plot_speedup_scatter(points: Sequence[Mapping[str, Any]], path: Path) -> Path | None:
    """Reduction in calls (x) against increase in time per call (y), log axes (Figure 1).

    speedup = reduction / increase, so settings below the diagonal are faster than the
    sequential sampler and iso-speedup lines are parallel to it.
    """
    if not points:
        return None
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(5.5, 4.5))
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
    colors = plt.get_cmap("tab10")
    for i, sampler in enumerate(samplers):
        mask = np.array([str(p["sampler"]) == sampler for p in points])
        speedups = [p["speedup"] for p in points if str(p["sampler"]) == sampler]
        ax.scatter(xs[mask], ys[mask], color=colors(i), label=f"{sampler} (median {np.median(speedups):.2f}×)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(low, high)
    ax.set_ylim(low, high)
    ax.set_xlabel("reduction in model calls (×)")
    ax.set_ylabel("increase in time per call (×)")
    ax.set_title("Speedup = reduction / increase (dotted: iso-speedup)")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3, which="both")
    return _save(fig, path)


# --- epsilon certainty -------------------------------------------------------------------


def acceptance_probabilities(trees: Sequence[Mapping[str, Any]]) -> np.ndarray:
    """A = exp(log A) of every scored decision in the logged trees (feasible nodes)."""
    values = [
        math.exp(node["log_accept"])
        for tree in trees
        for node in tree.get("nodes") or []
        if node.get("log_accept") is not None
    ]
    return np.asarray(values, dtype=float)


def epsilon_shares(accept: np.ndarray, epsilon: float = EPSILON) -> dict[str, float]:
    """Fractions of certain rejects (A <= eps), uncertain decisions, certain accepts (A >= 1 - eps)."""
    if accept.size == 0:
        return {"reject": 0.0, "uncertain": 0.0, "accept": 0.0}
    reject = float(np.mean(accept <= epsilon))
    certain_accept = float(np.mean(accept >= 1 - epsilon))
    return {"reject": reject, "uncertain": 1.0 - reject - certain_accept, "accept": certain_accept}


def plot_epsilon_histogram(runs: Sequence[RunData], path: Path, epsilon: float = EPSILON) -> Path | None:
    """Histogram of acceptance probabilities and the epsilon-class shares per run."""
    data = [(run.label, acceptance_probabilities([t for r in run.trees_by_chain.values() for t in r])) for run in runs]
    data = [(label, a) for label, a in data if a.size]
    if not data:
        return None
    plt = _pyplot()
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.8), gridspec_kw={"width_ratios": [3, 2]})
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
    fig.subplots_adjust(wspace=0.45)
    right.set_xlim(0, 1)
    right.set_xlabel("share of scored decisions")
    right.legend(fontsize=7, loc="lower right")
    return _save(fig, path)


# --- everything for a set of runs --------------------------------------------------------


def make_plots(runs: Sequence[RunData], out_dir: Path, *, max_tree_panels: int = 20) -> list[Path]:
    """All figures that the runs support, written under ``out_dir``; returns their paths."""
    out_dir = Path(out_dir)
    written: list[Path] = []
    for i, run in enumerate(runs):
        by_chain = run.trees_by_chain
        if not by_chain:
            continue
        first = sorted(by_chain)[0]
        name = f"subtrees_{i:02d}_{slug(run.label)}.png"
        title = f"{run.label}: prefetched subtrees of {first[0]} chain {first[1]}"
        written.append(plot_subtrees(by_chain[first], out_dir / name, max_panels=max_tree_panels, title=title))
    for maker, name in (
        (plot_transition_traces, "transition_traces.png"),
        (plot_epsilon_histogram, "epsilon_certainty.png"),
    ):
        path = maker(runs, out_dir / name)
        if path is not None:
            written.append(path)
    scatter = plot_speedup_scatter(speedup_points(runs), out_dir / "speedup_scatter.png")
    if scatter is not None:
        written.append(scatter)
    return written


def slug(text: str) -> str:
    return "".join(c if c.isalnum() or c in "-_" else "_" for c in text)
