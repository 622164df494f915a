"""Training examples from logged prefetch trees (trees.jsonl of PreSTO runs).

Every feasible node of a logged round is an example (the nodes the traversal generated
and scored, so the examples follow the distribution of prefetched trees, as in the
paper's Appendix E.7). Examples are grouped by prompt: cross-validation holds out whole
prompts, because nodes of one prompt share its text and are far from independent.

A node logged by several runs is one example. Runs of one setting (same seed, sampler,
model, engine and prompts) make the same MH decisions whatever their traversal or N_pf
(that is PreSTO's exactness), so a BFS sweep over N_pf logs the same candidate nodes once
per run: pooled as they are, these copies would multiply some decisions' weight. A node
is a copy when its run's setting (config.yaml), its place (prompt, chain, the round's
stage and transition, the branches and cuts from the round's root) and its logged
content (features, log A) all equal those of a node already read; only the first is
kept. Nodes whose run has no config.yaml, or whose round has no transition, are never
taken for copies.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from presto.predictor.features import CLASSES, feature_matrix, label_of, logged_acceptance
from presto.predictor.provenance import UNKNOWN_SAMPLER, tau_as_meant
from presto.runner.outputs import iter_jsonl


@dataclass(frozen=True)
class Examples:
    """Feature matrix, labels (indices into CLASSES) and prompt groups of the examples."""

    features: np.ndarray  # (n, d)
    labels: np.ndarray  # (n,) int64
    groups: np.ndarray  # (n,) str: prompt ids
    feature_names: tuple[str, ...]
    sources: tuple[str, ...]  # the trees.jsonl files read
    weights: np.ndarray | None = None  # (n,) per-example weights; None: all 1
    duplicates: int = 0  # feasible nodes dropped as copies of a node read before (another run's)
    # Per (sampler, traversal) of the runs read: runs, examples kept, duplicates dropped.
    composition: tuple[dict[str, Any], ...] = ()
    # The distinct sampler sections (config.yaml, less sampler.steps) of the runs read, each with its runs.
    sampler_settings: tuple[dict[str, Any], ...] = ()

    @property
    def sample_weights(self) -> np.ndarray:
        return np.ones(len(self)) if self.weights is None else self.weights

    def __len__(self) -> int:
        return int(self.labels.shape[0])

    def class_counts(self) -> dict[str, int]:
        """Examples per class, each counted once (whatever the weighting)."""
        return {name: int((self.labels == k).sum()) for k, name in enumerate(CLASSES)}

    def class_shares(self) -> dict[str, float]:
        """Weighted class frequencies (equal to counts / n without weights)."""
        w = self.sample_weights
        return {name: float(w[self.labels == k].sum() / w.sum()) for k, name in enumerate(CLASSES)}


def _first_line_is_json(path: Path) -> bool:
    """Whether ``path`` starts with a JSON line (or is empty), as a JSON-lines file does."""
    try:
        with path.open() as handle:
            line = handle.readline()
        if line.strip():
            json.loads(line)
    except (OSError, UnicodeDecodeError, ValueError):
        return False
    return True


def tree_files(paths: Iterable[str | Path]) -> list[Path]:
    """trees.jsonl files of run directories (searched recursively, so sweeps work) or given directly.

    Each file is read once, whatever spelling or nesting led to it: ``runs=[A,A]``, or a
    multirun directory beside one of its own job directories, must not count its trees twice.
    """
    files: list[Path] = []
    seen: set[Path] = set()
    for path in map(Path, paths):
        if path.is_file():
            if path.suffix != ".jsonl" and not _first_line_is_json(path):
                # summary.json or config.yaml: every line would be warned about as damaged, then nothing found
                raise ValueError(f"{path} is not a trees.jsonl file; give its run directory or its trees.jsonl")
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
    """Round records in file order, a line at a time: a torn last line (a killed run) is skipped
    silently, a damaged line elsewhere with a warning naming it (``iter_jsonl``), since it drops
    a round from the training data and the oracle replay."""
    for file in files:
        yield from iter_jsonl(file)


UNKNOWN = UNKNOWN_SAMPLER
"""Sampler or traversal of a trees file with neither summary.json nor config.yaml beside it."""

# Parts of a run's config.yaml that decide its MH decisions (traversal, budget, logging and
# run.* do not), and keys inside them that only choose which prompts run (the shards of one
# setting pool into one training set).
SETTING_SECTIONS = ("seed", "engine", "model", "dataset", "sampler")
SETTING_IGNORED = {"dataset": ("num_prompts", "shard")}


@dataclass(frozen=True)
class RunInfo:
    """What a trees file's run directory says about it."""

    sampler: str
    traversal: str
    setting: str | None  # canonical JSON of the decision-relevant config; None: unknown
    sampler_config: str | None = None  # canonical JSON of config.yaml's sampler section less steps; None: unknown
    sampler_logged: str | None = None  # the same with tau as logged (sampler_config has tau=null as 1/alpha)


def _load_mapping(path: Path, loader) -> dict[str, Any]:
    """The JSON or YAML object in ``path``; {} if it is missing or unreadable (a run still starting)."""
    try:
        value = loader(path.read_text())
    except (OSError, ValueError, yaml.YAMLError):
        return {}
    return value if isinstance(value, dict) else {}


def _canonical(value: Any) -> Any:
    """``value`` with integral floats as ints, so that sampler.alpha=4 and the default 4.0 are one setting."""
    if isinstance(value, dict):
        return {k: _canonical(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_canonical(v) for v in value]
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def run_info(trees: Path) -> RunInfo:
    """Sampler and traversal (summary.json, else config.yaml) and setting (config.yaml) of a trees file's run."""
    summary = _load_mapping(trees.parent / "summary.json", json.loads)
    config = _load_mapping(trees.parent / "config.yaml", yaml.safe_load)

    def name(key: str) -> str:
        section = config.get(key)
        value = summary.get(key) or (section.get("name") if isinstance(section, dict) else None)
        return str(value) if value else UNKNOWN

    setting = None
    if config and all(key in config for key in SETTING_SECTIONS):
        decisive = {}
        for key in SETTING_SECTIONS:
            value = config[key]
            if isinstance(value, dict):
                value = {k: v for k, v in value.items() if k not in SETTING_IGNORED.get(key, ())}
                value = tau_as_meant(value) if key == "sampler" else value
            decisive[key] = _canonical(value)
        setting = json.dumps(decisive, sort_keys=True, default=str)
    section = config.get("sampler")
    sampler_config = sampler_logged = None
    if isinstance(section, dict):  # steps (K) sets how long chains run, not what a decision's acceptance is
        kept = {k: v for k, v in section.items() if k != "steps"}
        sampler_config = json.dumps(_canonical(tau_as_meant(kept)), sort_keys=True, default=str)
        sampler_logged = json.dumps(_canonical(kept), sort_keys=True, default=str)
    return RunInfo(name("sampler"), name("traversal"), setting, sampler_config, sampler_logged)


def _node_paths(nodes: Sequence[dict[str, Any]]) -> dict[Any, tuple]:
    """Each node's place in its tree: the (parent's cut, branch) steps from the root, parents first."""
    cuts = {n["id"]: n.get("cut") for n in nodes}
    paths: dict[Any, tuple] = {}
    for node in nodes:
        parent = node.get("parent")
        if parent is None:
            paths[node["id"]] = ()
        else:
            paths[node["id"]] = (*paths.get(parent, ("orphan",)), (cuts.get(parent), node.get("branch")))
    return paths


WEIGHTINGS = ("uniform", "reach")


def check_round(record: Any, file: Path, number: int) -> None:
    """ValueError (one line naming the file and record) unless ``record`` has a round's shape, as far as
    training reads it: a JSON line of another kind (another tool's file, a damaged one) would otherwise
    end in a TypeError or a KeyError far from its cause."""

    def bad(why: str) -> ValueError:
        return ValueError(f"{file}: record {number} is not a prefetch round ({why}); is it a PreSTO trees.jsonl?")

    if not isinstance(record, dict) or not isinstance(record.get("nodes"), list):
        raise bad("an object with a list of nodes")
    for node in record["nodes"]:
        if not isinstance(node, dict) or "id" not in node:
            raise bad("a node that is not an object with an id")
        if node.get("feasible") and node.get("features"):
            if not isinstance(node["features"], dict):
                raise bad(f"node {node['id']!r} has features that are not an object")
            log_accept = node.get("log_accept")
            if log_accept is not None and (isinstance(log_accept, bool) or not isinstance(log_accept, int | float)):
                raise bad(f"node {node['id']!r} has log_accept {log_accept!r}, not a number")


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
        accept = logged_acceptance(above.get("log_accept"))
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
    seen: set[tuple] = set()
    parts: dict[tuple[str, str], dict[str, Any]] = {}
    settings: dict[str, dict[str, Any]] = {}
    for file in files:
        info = run_info(file)
        part = parts.setdefault(
            (info.sampler, info.traversal),
            {"sampler": info.sampler, "traversal": info.traversal, "runs": 0, "examples": 0, "duplicates": 0},
        )
        part["runs"] += 1
        if info.sampler_config is not None:  # grouped by what tau means, reported as the first run logged it
            logged = json.loads(info.sampler_logged or info.sampler_config)
            settings.setdefault(info.sampler_config, {**logged, "runs": 0})["runs"] += 1
        for number, record in enumerate(iter_jsonl(file), 1):
            check_round(record, file, number)
            nodes = record.get("nodes", ())
            reach = reaching_probabilities(nodes) if weighting == "reach" else None
            place = (record.get("prompt_id"), record.get("chain"), record.get("stage"), record.get("transition"))
            known = info.setting is not None and record.get("transition") is not None
            paths = _node_paths(nodes) if known else {}
            for node in nodes:
                if not node.get("feasible") or not node.get("features"):
                    continue
                if known:
                    key = (
                        info.setting,
                        *place,
                        paths[node["id"]],
                        node.get("cut"),
                        json.dumps(node.get("log_accept")),
                        json.dumps(node["features"], sort_keys=True),
                    )
                    if key in seen:
                        part["duplicates"] += 1
                        continue
                    seen.add(key)
                part["examples"] += 1
                rows.append(node["features"])
                labels.append(label_of(node.get("log_accept"), epsilon))
                groups.append(str(record.get("prompt_id")))
                weights.append(1.0 if reach is None else reach.get(node["id"], 0.0))
    if not rows:
        kinds = sorted({part["traversal"] for part in parts.values()})
        hint = ""
        if set(kinds) & {"sequential", "none"}:  # none: a baseline's summary
            hint = "; sequential runs and baselines prefetch nothing: train on bfs or predictive runs"
        raise ValueError(
            f"no feasible tree nodes in {', '.join(map(str, files))} (traversal: {', '.join(kinds)}{hint})"
        )
    return Examples(
        feature_matrix(rows, feature_names),
        np.asarray(labels, dtype=np.int64),
        np.asarray(groups),
        tuple(feature_names),
        tuple(str(f) for f in files),
        np.asarray(weights, dtype=np.float64),
        duplicates=sum(part["duplicates"] for part in parts.values()),
        composition=tuple(parts.values()),
        sampler_settings=tuple(settings[key] for key in sorted(settings)),
    )
