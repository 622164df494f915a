"""The run directory: chains.jsonl (appended and flushed per chain), trees.jsonl, summary.json."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any, TextIO

import numpy as np


def _plain(value: Any) -> Any:
    """JSON-safe values: numpy scalars and arrays to Python, non-finite floats to null."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, np.ndarray):
        return _plain(value.tolist())
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, float | np.floating):
        return float(value) if math.isfinite(value) else None
    return value


def dumps(record: dict[str, Any]) -> str:
    return json.dumps(_plain(record), allow_nan=False)


def write_json_atomic(path: Path, data: dict[str, Any]) -> None:
    """Write to a temporary sibling, then rename: readers never see half a file."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(_plain(data), indent=2, allow_nan=False) + "\n")
    os.replace(tmp, path)


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """Records of a JSONL file; a torn last line (a killed run) is ignored."""
    if not path.exists():
        return []
    records = []
    for line in path.read_text().splitlines():
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return records


class RunWriter:
    """Owns the output files of one run directory."""

    @staticmethod
    def check(run_dir: Path, resume: bool) -> None:
        """Refuse to mix a new run into a directory that already holds chains."""
        chains = run_dir / "chains.jsonl"
        if not resume and chains.exists() and chains.stat().st_size > 0:
            raise FileExistsError(
                f"{chains} already holds chains: pass run.resume=true to continue it, or a new hydra.run.dir"
            )

    def __init__(self, run_dir: Path, resume: bool) -> None:
        self.run_dir = run_dir
        self.chains_path = run_dir / "chains.jsonl"
        self.trees_path = run_dir / "trees.jsonl"
        self.summary_path = run_dir / "summary.json"
        self.check(run_dir, resume)
        run_dir.mkdir(parents=True, exist_ok=True)
        self.previous = read_jsonl(self.chains_path) if resume else []
        if resume and self.chains_path.exists():
            # Drop a torn last line so appends start on a clean line.
            self.chains_path.write_text("".join(dumps(r) + "\n" for r in self.previous))
        self._chains: TextIO = self.chains_path.open("a")
        self._trees: TextIO = self.trees_path.open("a")

    def finished(self) -> set[tuple[str, int]]:
        return {(str(r["prompt_id"]), int(r["chain"])) for r in self.previous}

    def append_chain(self, record: dict[str, Any]) -> None:
        self._chains.write(dumps(record) + "\n")
        self._chains.flush()
        os.fsync(self._chains.fileno())

    def append_tree(self, record: dict[str, Any]) -> None:
        self._trees.write(dumps(record) + "\n")

    def flush_trees(self) -> None:
        self._trees.flush()

    def write_summary(self, summary: dict[str, Any]) -> None:
        write_json_atomic(self.summary_path, summary)

    def close(self) -> None:
        for handle in (self._chains, self._trees):
            if not handle.closed:
                handle.close()
