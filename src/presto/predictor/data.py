"""Training examples from logged prefetch trees (trees.jsonl of PreSTO runs).

Every feasible node of a logged round is an example (the nodes the traversal generated
and scored, so the examples follow the distribution of prefetched trees, as in the
paper's Appendix E.7). Examples are grouped by prompt: cross-validation holds out whole
prompts, because nodes of one prompt share its text and are far from independent.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from presto.predictor.features import CLASSES, feature_matrix, label_of


@dataclass(frozen=True)
class Examples:
    """Feature matrix, labels (indices into CLASSES) and prompt groups of the examples."""

    features: np.ndarray  # (n, d)
    labels: np.ndarray  # (n,) int64
    groups: np.ndarray  # (n,) str: prompt ids
    feature_names: tuple[str, ...]
    sources: tuple[str, ...]  # the trees.jsonl files read
    weights: np.ndarray | None = None  # (n,) per-example weights; None: all 1

    @property
    def sample_weights(self) -> np.ndarray:
        return np.ones(len(self)) if self.weights is None else self.weights

    def __len__(self) -> int:
        return int(self.labels.shape[0])

    def class_counts(self) -> dict[str, int]:
        return {name: int((self.labels == k).sum()) for k, name in enumerate(CLASSES)}

    def class_shares(self) -> dict[str, float]:
        """Weighted class frequencies (equal to counts / n without weights)."""
        w = self.sample_weights
        return {name: float(w[self.labels == k].sum() / w.sum()) for k, name in enumerate(CLASSES)}


def tree_files(paths: Iterable[str | Path]) -> list[Path]:
    """trees.jsonl files of run directories (searched recursively, so sweeps work) or given directly.

    Each file is read once, whatever spelling or nesting led to it: ``runs=[A,A]``, or a
    multirun directory beside one of its own job directories, must not count its trees twice.
    """
    files: list[Path] = []
    seen: set[Path] = set()
    for path in map(Path, paths):
        if path.is_file():
            found = [path]
        elif path.is_dir():
            found = sorted(path.rglob("trees.jsonl"))
            if not found:
                raise FileNotFoundError(f"no trees.jsonl under {path} (was it a PreSTO run?)")
        else:
            raise FileNotFoundError(f"no such run directory or trees file: {path}")
        for file in found:
            if file.resolve() not in seen:
                seen.add(file.resolve())
                files.append(file)
    return files


def iter_rounds(files: Sequence[Path]) -> Iterator[dict[str, Any]]:
    """Round records in file order; a torn last line (a killed run) is skipped."""
    for file in files:
        with file.open() as handle:
            for line in handle:
                try:
                    yield json.loads(line)
                except json.JSONDecodeError:
                    continue


WEIGHTINGS = ("uniform", "reach")


def reaching_probabilities(nodes: Sequence[dict[str, Any]]) -> dict[Any, float]:
    """P(the MH walk visits each logged node): the product of the true A (or 1 - A) along its path.

    Nodes come in BFS order, parents first; a logged null log A of a feasible node is A = 0.
    """
    by_id = {n["id"]: n for n in nodes}
    reach: dict[Any, float] = {}
    for node in nodes:
        parent = node.get("parent")
        if parent is None:
            reach[node["id"]] = 1.0
            continue
        above = by_id.get(parent)
        if above is None or parent not in reach:
            reach[node["id"]] = 0.0
            continue
        accept = 0.0 if above.get("log_accept") is None else math.exp(min(0.0, float(above["log_accept"])))
        reach[node["id"]] = reach[parent] * (accept if node.get("branch") == "accept" else 1.0 - accept)
    return reach


def collect_examples(
    paths: Iterable[str | Path], feature_names: Sequence[str], epsilon: float, weighting: str = "uniform"
) -> Examples:
    """All feasible logged nodes of the given runs, with the named features and epsilon-class labels.

    ``weighting="uniform"`` counts every logged node once (the paper's Appendix E.7);
    ``"reach"`` weights a node by the probability that the walk visits it, so the model
    is fitted (and scored) on the decisions the chain actually meets: a logged candidate
    tree is dominated by deep subtrees below near-certain rejections that the walk almost
    never enters, and the predictive traversal's DP needs h where the walk goes.
    """
    if weighting not in WEIGHTINGS:
        raise ValueError(f"weighting must be one of {', '.join(WEIGHTINGS)}, got {weighting!r}")
    files = tree_files(paths)
    if not files:
        raise ValueError("no runs given: pass runs=[RUN_DIR,...] (directories holding trees.jsonl)")
    rows: list[dict[str, float]] = []
    labels: list[int] = []
    groups: list[str] = []
    weights: list[float] = []
    for record in iter_rounds(files):
        nodes = record.get("nodes", ())
        reach = reaching_probabilities(nodes) if weighting == "reach" else None
        for node in nodes:
            if not node.get("feasible") or not node.get("features"):
                continue
            rows.append(node["features"])
            labels.append(label_of(node.get("log_accept"), epsilon))
            groups.append(str(record.get("prompt_id")))
            weights.append(1.0 if reach is None else reach.get(node["id"], 0.0))
    if not rows:
        raise ValueError(f"no feasible tree nodes in {', '.join(map(str, files))}")
    return Examples(
        feature_matrix(rows, feature_names),
        np.asarray(labels, dtype=np.int64),
        np.asarray(groups),
        tuple(feature_names),
        tuple(str(f) for f in files),
        np.asarray(weights, dtype=np.float64),
    )
