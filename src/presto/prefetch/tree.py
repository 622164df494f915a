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

from presto.engines.base import SuffixResult
from presto.samplers.kernel import Decision, Kernel
from presto.samplers.randomness import DecisionInputs
from presto.samplers.state import ChainState

EPSILON = 0.01


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
    # queue items: (parent id, branch, state, depth, parent cut, accepts so far, branch path)
    queue: deque = deque([(None, "root", root, 0, root.length, 0, ())])
    while queue:
        parent, branch, state, depth, parent_cut, accepts, branches = queue.popleft()
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
            "features": {
                "cut_fraction": None if cut is None else cut / root.length,
                "parent_cut": parent_cut,
                "gap": None if cut is None else parent_cut - cut,
                "depth": depth,
                "accepts_on_path": accepts,
            },
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
        queue.append((node_id, "reject", state, depth + 1, cut, accepts, (*branches, "reject")))
    return nodes
