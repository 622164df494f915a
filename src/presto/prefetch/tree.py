"""The explicit prefetch tree of a round, for trees.jsonl, predictors and plots.

Nodes are MH decisions. The root decides transition k from the root state; a node's
acceptance child holds its proposal, its rejection child keeps its state. A node at depth
d is feasible when its state shares the root's first c_d tokens (so the round's depth-d
proposal is its proposal) and, for state-dependent cut laws, its cut equals the speculated
one. Every feasible node's acceptance is computed against its own state, never the root's.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from presto.engines.base import SuffixResult
from presto.samplers.kernel import Decision, Kernel
from presto.samplers.randomness import DecisionInputs
from presto.samplers.state import ChainState

EPSILON = 0.01

ROOT_STATISTICS = ("logq", "entropy")
"""Per-token root arrays summarized around a cut (Appendix E.7: likelihood, entropy)."""


def cut_statistics(values: np.ndarray, cut: int) -> tuple[float, float, float, float]:
    """Value at the first resampled token, change into it, change out of it, suffix mean.

    ``values[i]`` belongs to generated position i; the cut keeps positions < cut, so
    position ``cut`` is the first resampled one. Changes that would need a position
    outside the sequence are 0.
    """
    length = values.shape[0]
    if not 0 <= cut < length:
        return 0.0, 0.0, 0.0, 0.0
    at = float(values[cut])
    into = at - float(values[cut - 1]) if cut >= 1 else 0.0
    out = float(values[cut + 1]) - at if cut + 1 < length else 0.0
    return at, into, out, float(values[cut:].mean())


PATH_FEATURES = frozenset({"parent_cut", "parent_cut_fraction", "gap", "gap_fraction", "accepts_on_path"})
"""Features that depend on the node's path, not only on (root, depth, cut): a predictor that
uses none of them gives every node of a depth the same prediction."""


def node_features(
    root: ChainState, cut: int, depth: int, node_cut: int | np.ndarray, accepts: int | np.ndarray
) -> dict[str, float | np.ndarray]:
    """What a predictor may know about a decision before its proposal is generated.

    ``node_cut`` is the paper's c_i, the cut index of the node: the cut of the last
    accepted proposal on its path (the root's length T when there is none; a rejection
    child keeps its parent's). ``cut`` is c_j, the cut of the node's own request. The
    likelihood (log q) and entropy statistics read the ROOT state around ``cut``: the
    root is all a traversal knows when it assembles a batch, so logging and prediction
    compute the same numbers (this function serves both). Given arrays of ``node_cut`` and
    ``accepts`` (the predictive DP's states at one depth), the path features are arrays too.
    """
    length = max(root.length, 1)
    features = {
        "cut_fraction": cut / length,
        "parent_cut": node_cut,
        "parent_cut_fraction": node_cut / length,
        "gap": node_cut - cut,
        "gap_fraction": (node_cut - cut) / length,
        "depth": depth,
        "accepts_on_path": accepts,
        "length": root.length,
    }
    for name in ROOT_STATISTICS:
        at, into, out, mean = cut_statistics(getattr(root, name), cut)
        features[f"{name}_at_cut"] = at
        features[f"{name}_into_cut"] = into
        features[f"{name}_out_of_cut"] = out
        features[f"{name}_suffix_mean"] = mean
    return features


def epsilon_class(log_accept: float, epsilon: float = EPSILON) -> str:
    """'reject' if A <= eps, 'accept' if A >= 1 - eps, else 'uncertain'."""
    accept = math.exp(log_accept)
    if accept <= epsilon:
        return "reject"
    if accept >= 1.0 - epsilon:
        return "accept"
    return "uncertain"


def log_tree(
    kernel: Kernel,
    root: ChainState,
    plan: dict[int, int],
    results: dict[int, Sequence[SuffixResult]],
    inputs: Callable[[int], DecisionInputs],
    realized: Sequence[Decision],
    depth_cap: int,
    max_nodes: int,
) -> list[dict[str, Any]]:
    """Nodes in BFS order (at most ``max_nodes``, plus the whole realized path)."""
    realized_branches = ["accept" if d.accepted else "reject" for d in realized]
    nodes: list[dict[str, Any]] = []
    # queue items: (parent id, branch, state, depth, node cut, accepts so far, branch path)
    queue: deque = deque([(None, "root", root, 0, root.length, 0, ())])
    while queue:
        parent, branch, state, depth, node_cut, accepts, branches = queue.popleft()
        reached = list(branches) == realized_branches[: len(branches)]
        if len(nodes) >= max_nodes and not reached:
            continue
        if depth >= depth_cap:
            continue
        cut = plan.get(depth)
        node: dict[str, Any] = {
            "id": len(nodes),
            "parent": parent,
            "branch": branch,
            "depth": depth,
            "transition_offset": depth,
            "cut": cut,
            "requested": cut is not None,
            "reached": reached and depth <= len(realized),
            "decided": reached and depth < len(realized),
            "features": (
                {"depth": depth, "parent_cut": node_cut, "accepts_on_path": accepts}
                if cut is None
                else node_features(root, cut, depth, node_cut, accepts)
            ),
        }
        nodes.append(node)
        feasible = cut is not None and state.shares_prefix(root, cut)
        if feasible and kernel.state_depends_cut:
            feasible = kernel.cut(state, inputs(depth)) == cut
        node["feasible"] = feasible
        if not feasible:
            node["log_accept"] = None
            node["eps_class"] = None
            continue
        decision = kernel.decide(state, cut, results[depth], inputs(depth))
        node["log_accept"] = decision.log_accept
        node["eps_class"] = epsilon_class(decision.log_accept)
        node["accepted"] = decision.accepted
        node_id = node["id"]
        queue.append((node_id, "accept", decision.proposal, depth + 1, cut, accepts + 1, (*branches, "accept")))
        queue.append((node_id, "reject", state, depth + 1, node_cut, accepts, (*branches, "reject")))
    return nodes
