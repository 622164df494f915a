"""Feature sets and labels of the epsilon-certainty classifier (the paper's Appendix E.7).

A training example is a feasible node of a logged prefetch tree: its features are what
was known before its proposal was generated (computed by
:func:`presto.prefetch.tree.node_features`, which the predictive traversal calls too, so
training and serving see the same numbers) and its label is the epsilon-class of its
true acceptance probability. Classes are indexed in the paper's order.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from functools import cache

import numpy as np

CLASSES = ("reject", "accept", "uncertain")
"""Class order: epsilon-certain reject (A <= eps), certain accept (A >= 1 - eps), uncertain."""

FEATURE_SETS: dict[str, tuple[str, ...]] = {
    # Feature 1: the cut fraction c_j / T of the request.
    "cut": ("cut_fraction",),
    # Feature 2: tree position: the node's cut index c_i and the gap c_i - c_j (both as
    # fractions of T, so one model serves every block length), depth, accepts on the path.
    "tree": ("parent_cut_fraction", "gap_fraction", "depth", "accepts_on_path"),
    # Feature 3: log q of the root state around the cut (value, change in, change out, suffix mean).
    "likelihood": ("logq_at_cut", "logq_into_cut", "logq_out_of_cut", "logq_suffix_mean"),
    # Feature 4: the same statistics of p0's entropy (the paper uses them for EntropyCut).
    "entropy": ("entropy_at_cut", "entropy_into_cut", "entropy_out_of_cut", "entropy_suffix_mean"),
}


@cache
def node_feature_names() -> frozenset[str]:
    """Every feature a logged node carries and the prefetcher computes: the keys of node_features.

    Asked of the function itself (on a tiny probe state), so this list cannot drift from
    what trees.jsonl holds and what a served predictor may use.
    """
    from presto.prefetch.tree import node_features
    from presto.samplers.state import ChainState

    probe = ChainState(np.zeros(2, dtype=np.int64), np.zeros(2), np.zeros(2), np.zeros(2), np.zeros((2, 0)))
    return frozenset(node_features(probe, 1, 0, 2, 0))


def resolve_features(spec: Iterable[str] | str | None) -> tuple[str, ...]:
    """Expand set names (cut, tree, likelihood, entropy) and raw feature names, in order, once each.

    An unknown name is a ValueError that lists the valid ones (a typo would otherwise only
    surface after every trees.jsonl has been read). A single string is one name: Hydra
    reads ``features=cut`` as the string "cut", not as a list of its letters.
    """
    if spec is None:
        spec = ()
    elif isinstance(spec, str):
        spec = (spec,)
    names: list[str] = []
    unknown: list[str] = []
    for item in map(str, spec):
        if item not in FEATURE_SETS and item not in node_feature_names():
            unknown.append(item)
            continue
        for name in FEATURE_SETS.get(item, (item,)):
            if name not in names:
                names.append(name)
    if unknown:
        raise ValueError(
            f"features: unknown {', '.join(map(repr, unknown))}; choose feature sets "
            f"({', '.join(FEATURE_SETS)}) or node features ({', '.join(sorted(node_feature_names()))})"
        )
    if not names:
        raise ValueError("features: choose at least one feature or feature set")
    return tuple(names)


def logged_acceptance(log_accept: float | None) -> float:
    """A of a feasible logged node from its log A; null is A = 0: a decision that can never be
    accepted has log A = -inf, which trees.jsonl holds as null (JSON has no -inf)."""
    return 0.0 if log_accept is None else math.exp(min(0.0, float(log_accept)))


def label_of(log_accept: float | None, epsilon: float) -> int:
    """Class index of a feasible node (:func:`logged_acceptance` of its log A)."""
    if not 0.0 < epsilon < 0.5:
        raise ValueError(f"epsilon must be in (0, 1/2), got {epsilon}")
    accept = logged_acceptance(log_accept)
    if accept <= epsilon:
        return 0
    if accept >= 1.0 - epsilon:
        return 1
    return 2


def broadcast_feature_matrix(columns: Mapping[str, float | np.ndarray], names: Sequence[str], count: int) -> np.ndarray:
    """The (count, len(names)) matrix of features given as one value or one array of ``count`` values
    each (:func:`~presto.prefetch.tree.node_features` of many DP states at once); a missing name is a
    KeyError naming it."""
    out = np.empty((count, len(names)))
    for j, name in enumerate(names):
        if name not in columns:
            raise KeyError(f"feature {name!r} is not among the node features this version computes")
        out[:, j] = np.broadcast_to(np.asarray(columns[name], dtype=np.float64), (count,))
    return out


def feature_matrix(rows: Sequence[Mapping[str, float]], names: Sequence[str]) -> np.ndarray:
    """Stack feature dicts into an (n, len(names)) float array; a missing name is a KeyError naming it."""
    out = np.empty((len(rows), len(names)))
    for i, row in enumerate(rows):
        for j, name in enumerate(names):
            try:
                out[i, j] = float(row[name])
            except KeyError:
                raise KeyError(
                    f"feature {name!r} is not in the logged node features (trees.jsonl from an older version?)"
                ) from None
            except (TypeError, ValueError):  # null: a non-finite statistic was logged (strict JSON)
                raise ValueError(
                    f"feature {name!r} of node {i} is {row[name]!r}, not a number; leave it out of the feature set"
                ) from None
    return out
