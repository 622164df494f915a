"""Training examples from logged prefetch trees (trees.jsonl of PreSTO runs).

Every feasible node of a logged round is an example (the nodes the traversal generated
and scored, so the examples follow the distribution of prefetched trees, as in the
paper's Appendix E.7). Examples are grouped by prompt: cross-validation holds out whole
prompts, because nodes of one prompt share its text and are far from independent.
"""

from __future__ import annotations

import json
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

    def __len__(self) -> int:
        return int(self.labels.shape[0])

    def class_counts(self) -> dict[str, int]:
        return {name: int((self.labels == k).sum()) for k, name in enumerate(CLASSES)}


def tree_files(paths: Iterable[str | Path]) -> list[Path]:
    """trees.jsonl files of run directories (searched recursively, so sweeps work) or given directly."""
    files: list[Path] = []
    for path in map(Path, paths):
        if path.is_file():
            files.append(path)
        elif path.is_dir():
            found = sorted(path.rglob("trees.jsonl"))
            if not found:
                raise FileNotFoundError(f"no trees.jsonl under {path} (was it a PreSTO run?)")
            files += found
        else:
            raise FileNotFoundError(f"no such run directory or trees file: {path}")
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


def collect_examples(paths: Iterable[str | Path], feature_names: Sequence[str], epsilon: float) -> Examples:
    """All feasible logged nodes of the given runs, with the named features and epsilon-class labels."""
    files = tree_files(paths)
    rows: list[dict[str, float]] = []
    labels: list[int] = []
    groups: list[str] = []
    for record in iter_rounds(files):
        for node in record.get("nodes", ()):
            if not node.get("feasible") or not node.get("features"):
                continue
            rows.append(node["features"])
            labels.append(label_of(node.get("log_accept"), epsilon))
            groups.append(str(record.get("prompt_id")))
    if not rows:
        raise ValueError(f"no feasible tree nodes in {', '.join(map(str, files))}")
    return Examples(
        feature_matrix(rows, feature_names),
        np.asarray(labels, dtype=np.int64),
        np.asarray(groups),
        tuple(feature_names),
        tuple(str(f) for f in files),
    )
