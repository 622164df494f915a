"""Run directories as data: loading, pairing chains, speedups and quality comparisons.

The speedup follows the paper's eq. (20): a ratio of means over paired units of the
summed model-call time, baseline over variant. It splits exactly into two ratios of means
(App. D.2):

    time-per-call increase = mean over prompts of the variant's time per call
                             / mean over prompts of the baseline's time per call
    call reduction         = speedup * time-per-call increase

where a run's time per call on a prompt is the mean duration of its calls there: the
summed call time of the prompt's paired chains over their summed model calls. So
speedup = call reduction / time-per-call increase (Figure 1's two axes). The plain ratio
of mean model calls is reported too; it differs from the derived reduction only through
the spread of time per call across prompts.
"""

from __future__ import annotations

import json
import math
import sys
from array import array
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from presto.config import describe_differences, flatten
from presto.eval.tost import DEFAULT_LEVEL, DEFAULT_MARGIN_SD, PooledResult, TostResult, paired_tost, pooled_tost
from presto.predictor.features import logged_acceptance
from presto.runner.outputs import iter_jsonl, read_jsonl

QUALITY_STATS = ("loglik", "confidence")
# What defines a setting: two runs pair up when these agree. Every key of these config
# sections counts (a sampler's beta or temperatures, the toy table, the dataset file, the
# dtype); the stepper (traversal, budget), the seed, the logger and run options may differ.
# A run without config.yaml is described by these summary keys instead.
SETTING_SECTIONS = ("engine", "model", "dataset", "sampler")
SETTING_KEYS = ("sampler", "alpha", "tau", "max_new_tokens", "block_size", "steps", "prompts")
# Sampler keys a test-time baseline (sampler=NAME, traversal "none") carries in its config and
# summary but does not use: they neither tell its setting apart nor show up as differences.
BASELINE_UNUSED_KEYS = {
    "lowtemp": ("steps", "block_size"),
    "best_of_n": ("steps", "block_size"),
    "power_smc": ("steps",),
}
# What a Case Study 8 group shares (``RunData.task_values``): the engine, model and dataset
# sections except the prompt count (which prompts ran is read from chains.jsonl), plus α and n.
TASK_SECTIONS = ("engine", "model", "dataset")
TASK_FREE_KEYS = ("dataset.num_prompts",)


def node_acceptance(node: Mapping[str, Any]) -> float | None:
    """A of a scored (feasible) node (:func:`~presto.predictor.features.logged_acceptance`, so
    a null log A there is A = 0, a certain reject), None for a node without a decision."""
    if node.get("log_accept") is None and not node.get("feasible"):
        return None
    return logged_acceptance(node.get("log_accept"))


class RoundDigest(NamedTuple):
    """What the per-transition traces read of one prefetch round (:func:`chain_progress`)."""

    stage: Any  # its block (``stage``; None when the record has none)
    model_call: Any  # whether it made a model call of its own (``model_call``, True when absent)
    realized: Any  # the MH transitions it realized (``realized``)


@dataclass(frozen=True)
class TreeDigest:
    """What the evaluation reads of a run's trees.jsonl, gathered by one streaming pass (:func:`digest_trees`).

    A long run's trees.jsonl is GBs (a line of tens of KB per round) and several times that
    once parsed, so no figure holds it: per round this keeps three numbers, per scored
    decision one float, and the first chain's first ``keep`` rounds whole (the subtree figure
    draws no more). A round logged twice (a run resumed by a version that kept an
    interrupted chain's rounds) counts once, with its later record, as in ``RunData.trees_by_chain``.
    """

    rounds: dict[tuple[str, int], list[RoundDigest]]
    """Each (prompt_id, chain)'s rounds in round order; chains in order of first appearance."""
    acceptance: np.ndarray
    """A of every scored decision (:func:`node_acceptance`): chains and rounds in the order of
    ``rounds``, each round's nodes as logged (what ``acceptance_probabilities`` gives of all rounds)."""
    first_chain: tuple[str, int] | None
    """The smallest (prompt_id, chain), the chain the subtree figure draws; None without rounds."""
    first_lines: tuple[str, ...]
    """Its first ``keep`` rounds in round order, as JSON text (a fraction of their parsed size)."""
    keep: int

    def first_rounds(self, limit: int | None = None) -> list[dict[str, Any]]:
        """The first chain's first ``limit`` rounds (at most ``keep``; default all kept), as records."""
        return [json.loads(line) for line in self.first_lines[:limit]]

    @property
    def first_total(self) -> int:
        """Rounds of the first chain (0 without rounds)."""
        return len(self.rounds[self.first_chain]) if self.first_chain is not None else 0


def digest_trees(path: Path, keep: int = 0) -> TreeDigest:
    """:class:`TreeDigest` of a trees.jsonl, read one record at a time (``iter_jsonl``: a torn
    last line is ignored, a damaged line elsewhere skipped with a warning, as ``read_jsonl`` does).

    ``keep``: how many of the first chain's rounds to keep whole.
    """
    keep = max(keep, 0)
    # Per chain, round -> (its digest, its slice of ``values``). A round's A values are appended
    # to one flat buffer as read; a later record of the same round leaves the earlier slice
    # unused (rare: only a resumed run holds one), so the order is settled once at the end.
    chains: dict[tuple[str, int], dict[Any, tuple[RoundDigest, int, int]]] = {}
    values = array("d")
    first: tuple[str, int] | None = None
    kept: dict[Any, dict[str, Any]] = {}  # round -> record: the first chain's smallest ``keep`` rounds so far
    for tree in iter_jsonl(path):
        key, number = (tree["prompt_id"], tree["chain"]), tree["round"]
        start = len(values)
        values.extend(a for a in map(node_acceptance, tree.get("nodes") or []) if a is not None)
        digest = RoundDigest(tree.get("stage"), tree.get("model_call", True), tree.get("realized"))
        chains.setdefault(key, {})[number] = (digest, start, len(values))
        # The smallest key so far, as sorted() would order them: a chain that is the smallest
        # overall becomes so at its first record, so every record of it is seen here.
        if first is None or key < first:
            first, kept = key, {}
        if key == first and keep:
            if number in kept or len(kept) < keep:
                kept[number] = tree
            elif number < (largest := max(kept)):  # an earlier round: the latest kept one is no longer among the first
                del kept[largest]
                kept[number] = tree
    flat = np.frombuffer(values, dtype=float) if values else np.empty(0)
    rounds: dict[tuple[str, int], list[RoundDigest]] = {}
    slices = []
    for key, by_round in chains.items():
        ordered = [by_round[number] for number in sorted(by_round)]
        rounds[key] = [digest for digest, _, _ in ordered]
        slices += [flat[start:stop] for _, start, stop in ordered]
    acceptance = np.concatenate(slices) if slices else np.empty(0)
    lines = tuple(json.dumps(kept[number]) for number in sorted(kept))
    return TreeDigest(rounds, acceptance, first, lines, keep)


class NotKept:
    """Stands in a loaded chain record (``RunData.chains``) for a value :func:`load_run` leaves
    on disk: the text, the token and per-transition lists, any string but the chain's ids.

    One instance per kind of value, so a key a record holds is still there (``key in record``)
    and reads as no number (``paired_values`` names it), at no cost per chain.
    ``RunData.full_chains`` reads the records whole.
    """

    __slots__ = ("kind",)

    def __init__(self, kind: str) -> None:
        self.kind = kind

    def __repr__(self) -> str:
        return f"<{self.kind} not kept by load_run>"


class SummedList(NotKept):
    """The :class:`NotKept` of a chain's ``accepts`` (0/1 per transition) that keeps its sum,
    the chain's accepted moves: what an acceptance rate over the chains held reads
    (:func:`chain_accepted`). One small object per chain, not the list."""

    __slots__ = ("total",)

    def __init__(self, total: float) -> None:
        super().__init__("list")
        self.total = total


_NOT_KEPT: dict[str, NotKept] = {}
# The strings of a chain record that the evaluation reads (pairing, and which prompt tokens it saw).
CHAIN_IDS = ("prompt_id", "prompt_sha")


def compact_chain(record: dict[str, Any]) -> dict[str, Any]:
    """What the evaluation reads of one chain record, in its key order.

    Every number, bool and null (so any numeric statistic ``compare`` may test), ``prompt_id``
    and ``prompt_sha`` as they are, and ``call_times_s`` (the per-call times the transition
    traces read) as an ``array('d')``: the values ``np.asarray(times, dtype=float)`` gives, null
    as NaN (a list that is no list of numbers stays as it is). Every other value (the text and
    the extracted answer, the token and per-transition lists, a grading error) is a
    :class:`NotKept` (of ``accepts``, 0/1 per transition, a :class:`SummedList` keeping its
    sum). A paper-scale record is over 100 KB parsed (3072 token ids, the text, per-transition
    lists); what is kept is about 2 KB (a dict of its numbers) plus 8 bytes per model call.
    """
    kept: dict[str, Any] = {}
    for key, value in record.items():
        if value is None or isinstance(value, bool | int | float) or key in CHAIN_IDS:
            kept[key] = value
        elif key == "call_times_s" and isinstance(value, list):
            try:
                kept[key] = array("d", (math.nan if v is None else v for v in value))
            except (TypeError, ValueError, OverflowError):  # not numbers: chain_progress sees it as before
                kept[key] = value
        elif key == "accepts" and _numbers(value):
            kept[key] = SummedList(sum(value))
        else:
            kind = type(value).__name__
            kept[key] = _NOT_KEPT.get(kind) or _NOT_KEPT.setdefault(kind, NotKept(kind))  # one per kind
    return kept


def _numbers(value: Any) -> bool:
    """A list of numbers (bools count, as 0/1)."""
    return isinstance(value, list) and all(isinstance(v, int | float) for v in value)


def chain_accepted(record: Mapping[str, Any]) -> float | None:
    """A chain's accepted moves: its ``accepted`` count where it has one, else the sum of its
    ``accepts`` (a list in a whole record, a :class:`SummedList` in a loaded one); None without either."""
    accepted, accepts = record.get("accepted"), record.get("accepts")
    if isinstance(accepted, int | float):
        return accepted
    if isinstance(accepts, SummedList):
        return accepts.total
    return sum(accepts) if _numbers(accepts) else None


@dataclass
class RunData:
    """One run directory: summary, chain records, and (lazily) what the figures read of the prefetch trees."""

    path: Path
    summary: dict[str, Any]
    chains: list[dict[str, Any]]
    """The records of chains.jsonl in file order (a chain recorded twice, by a resumed run, is
    here twice; ``answers`` keeps its later record). :func:`load_run` keeps of each what the
    evaluation reads (:func:`compact_chain`: its numbers, ids and per-call times);
    ``full_chains`` reads the records whole."""
    _tree_digest: TreeDigest | None = field(default=None, init=False, repr=False, compare=False)

    def tree_digest(self, keep_rounds: int = 0) -> TreeDigest:
        """:func:`digest_trees` of the run's trees.jsonl, read once and kept (again only when
        ``keep_rounds`` asks for more of the first chain's rounds than the kept digest holds)."""
        digest = self._tree_digest
        if digest is None or (keep_rounds > digest.keep and digest.first_total > digest.keep):
            digest = self._tree_digest = digest_trees(self.path / "trees.jsonl", keep_rounds)
        return digest

    def full_chains(self) -> Iterator[dict[str, Any]]:
        """The records of chains.jsonl whole (tokens, text, per-transition lists), read from disk
        one at a time on each call, with ``iter_jsonl``'s rules for torn and damaged lines.
        ``chains`` holds only what the evaluation reads of them."""
        return iter_jsonl(self.path / "chains.jsonl")

    @cached_property
    def trees(self) -> list[dict[str, Any]]:
        """Every record of trees.jsonl, parsed and kept: for small runs and tests (a long run's
        would not fit in memory). The figures and reports read ``tree_digest`` instead."""
        return read_jsonl(self.path / "trees.jsonl")

    @cached_property
    def trees_by_chain(self) -> dict[tuple[str, int], list[dict[str, Any]]]:
        """Prefetch rounds of each (prompt_id, chain), in round order; every record, so for small
        runs and tests, like ``trees`` (the figures and reports read ``tree_digest``).

        A round logged twice (a run resumed by a version that kept an interrupted chain's
        rounds) counts once: the later record, from the attempt that finished the chain.
        """
        latest: dict[tuple[str, int], dict[int, dict[str, Any]]] = {}
        for tree in iter_jsonl(self.path / "trees.jsonl"):  # not through ``trees``: one copy, not two
            latest.setdefault((tree["prompt_id"], tree["chain"]), {})[tree["round"]] = tree
        return {chain: [rounds[r] for r in sorted(rounds)] for chain, rounds in latest.items()}

    @cached_property
    def config(self) -> dict[str, Any]:
        """The resolved config the run wrote (empty when absent)."""
        path = self.path / "config.yaml"
        if not path.is_file():
            return {}
        from omegaconf import OmegaConf

        return OmegaConf.to_container(OmegaConf.load(path), resolve=False)

    def _select(self, dotted: str) -> Any:
        node: Any = self.config
        for part in dotted.split("."):
            node = node.get(part) if isinstance(node, dict) else None
        return node

    @property
    def label(self) -> str:
        """Short name for tables and legends: sampler/traversal[@n_pf]."""
        s = self.summary
        traversal = s.get("traversal")
        if traversal in (None, "none"):
            return str(s.get("sampler"))
        if traversal == "sequential":
            return f"{s.get('sampler')}/sequential"
        return f"{s.get('sampler')}/{traversal}@{s.get('n_pf')}"

    @property
    def is_sequential(self) -> bool:
        return self.summary.get("traversal") == "sequential"

    @property
    def chains_held(self) -> int:
        """Finished chains in chains.jsonl (a chain recorded twice counts once)."""
        return len(self.answers)

    @property
    def blocks(self) -> int | None:
        """Blocks per chain, max_new_tokens / block_size; None unless summary.json holds both as
        positive integers, the block size dividing n."""
        tokens, block = self.summary.get("max_new_tokens"), self.summary.get("block_size")
        if not (_count(tokens) and _count(block) and tokens and block and tokens % block == 0):
            return None
        return tokens // block

    @property
    def expected_chains(self) -> int | None:
        """Chains the run was configured to produce, or None when unknown.

        summary.json's ``expected_chains`` where the runner wrote it; for older runs,
        config.yaml's dataset.num_prompts x run.chains_per_prompt when both are integers.
        """
        expected = self.summary.get("expected_chains")
        if _count(expected):
            return expected
        prompts, per_prompt = self._select("dataset.num_prompts"), self._select("run.chains_per_prompt")
        return prompts * per_prompt if _count(prompts) and _count(per_prompt) else None

    @property
    def prompts_to_run(self) -> Any:
        """The prompts the run was to sample: config.yaml's dataset.num_prompts, or fewer when
        the dataset holds fewer (then summary.json's ``expected_chains`` / run.chains_per_prompt),
        so that num_prompts=10 and num_prompts=3 on a file of 3 prompts are one setting."""
        configured = self._select("dataset.num_prompts")
        expected, per_prompt = self.summary.get("expected_chains"), self._select("run.chains_per_prompt")
        if _count(configured) and _count(expected) and _count(per_prompt) and per_prompt > 0:
            return min(configured, expected // per_prompt)
        return configured

    @property
    def complete(self) -> bool | None:
        """Whether every configured chain finished: summary.json's ``complete`` (False where
        chains.jsonl holds more chains than the summary counts: a later session added them and
        wrote no summary), else chains held vs ``expected_chains``; None when neither is known."""
        complete = self.summary.get("complete")
        counted = self.summary.get("chains")
        if complete is True and _count(counted) and self.chains_held > counted:
            # A later session (a resume that extended the run) added chains and wrote no summary: killed, or going.
            return False
        if isinstance(complete, bool):
            return complete
        expected = self.expected_chains
        return None if expected is None else self.chains_held >= expected

    def incomplete_note(self) -> str | None:
        """'RUN is incomplete: it holds H of E chains (...)' when the run is known to be incomplete."""
        if self.complete is not False:
            return None
        expected = self.expected_chains
        of = f" of {expected}" if expected is not None and expected > self.chains_held else ""
        return (
            f"{self.path} is incomplete: it holds {self.chains_held}{of} chains "
            "(interrupted? resume it with run.resume=true), so its figures cover only those"
        )

    @property
    def sampler_name(self) -> Any:
        """The summary's sampler (else config.yaml's sampler.name)."""
        return self.summary.get("sampler") or self._select("sampler.name")

    @property
    def is_test_time_baseline(self) -> bool:
        """lowtemp, best_of_n or power_smc: whole answers, no MH transitions."""
        return self.sampler_name in BASELINE_UNUSED_KEYS

    def setting_values(self) -> dict[str, Any]:
        """Dotted key -> value of everything that must agree for a baseline/variant pair.

        A test-time baseline's unused sampler keys (``BASELINE_UNUSED_KEYS``) are left out.
        """
        if not self.config:  # a run directory without config.yaml: what its summary says
            values = {f"summary.{k}": self.summary.get(k) for k in SETTING_KEYS}
            prefix = "summary"
        else:
            values = {}
            for section in SETTING_SECTIONS:
                values.update(flatten(self.config.get(section, {}), section))
            if "dataset.num_prompts" in values:
                values["dataset.num_prompts"] = self.prompts_to_run
            if values.get("dataset.shard") is None:  # runs made before dataset.shard existed have none
                values.pop("dataset.shard", None)
            prefix = "sampler"
        for key in BASELINE_UNUSED_KEYS.get(self.sampler_name, ()):
            values.pop(f"{prefix}.{key}", None)
        return values

    def task_values(self) -> dict[str, Any]:
        """Dotted key -> value of what runs compared in Case Study 8 share: engine, model and
        dataset (not its prompt count: the prompts that ran come from chains.jsonl), α and n."""
        values = {
            k: v
            for k, v in self.setting_values().items()
            if k.split(".")[0] in TASK_SECTIONS and k not in TASK_FREE_KEYS
        }
        for key in ("alpha", "max_new_tokens"):
            value = self.summary.get(key)
            values[f"sampler.{key}"] = value if value is not None else self._select(f"sampler.{key}")
        return values

    def task(self) -> tuple:
        """A hashable form of ``task_values``."""
        return tuple(sorted((k, repr(v)) for k, v in self.task_values().items()))

    @cached_property
    def answers(self) -> dict[tuple[str, int], dict[str, Any]]:
        """(prompt_id, chain) -> its chain record; of a chain recorded twice, the later record."""
        return {(r["prompt_id"], r["chain"]): r for r in self.chains}

    @property
    def prompt_ids(self) -> set[str]:
        """The prompts of the finished chains (answers) in chains.jsonl."""
        return {prompt for prompt, _ in self.answers}

    def setting(self) -> tuple:
        """A hashable form of ``setting_values`` (all but the stepper, seed, logger and run options)."""
        return tuple(sorted((k, repr(v)) for k, v in self.setting_values().items()))


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def setting_differences(a: RunData, b: RunData) -> list[str]:
    """'key (A vs B)' for each setting value on which two runs disagree."""
    return describe_differences(a.setting_values(), b.setting_values(), " vs ")


class RunReadError(ValueError):
    """A run directory whose files cannot be read as a run (one line naming the file and what is wrong)."""


# What every chains.jsonl record needs for pairing and speedups (all samplers write these).
CHAIN_NUMBERS = ("model_calls", "call_time_s", "transitions")


def _check_chain(record: Any, where: str) -> None:
    if not isinstance(record, dict):
        raise RunReadError(f"{where} is not a chain record (a JSON object), got {type(record).__name__}")
    missing = [k for k in ("prompt_id", "chain", *CHAIN_NUMBERS) if k not in record]
    if missing:
        raise RunReadError(f"{where} lacks {', '.join(missing)}")
    for key in ("chain", *CHAIN_NUMBERS):
        value = record[key]
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise RunReadError(f"{where}: {key} must be a number, got {value!r}")


def load_run(path: str | Path) -> RunData:
    """Read a finished (or interrupted) run directory; needs summary.json and chains.jsonl.

    FileNotFoundError when ``path`` holds no summary.json; RunReadError (a ValueError) when
    summary.json is not a JSON object or a chain record lacks what pairing needs. chains.jsonl
    is read a line at a time (``iter_jsonl``: a torn last line, from a run killed mid-write, is
    skipped; a damaged line elsewhere is skipped with a warning), and of each record only what
    the evaluation reads is kept (:func:`compact_chain`; ``RunData.full_chains`` reads them whole):
    a paper-scale run's records would take hundreds of MB parsed.
    """
    path = Path(path)
    summary_path = path / "summary.json"
    if path.is_file():
        raise FileNotFoundError(f"{path} is a file, not a run directory")
    if not summary_path.is_file():
        jobs = sorted(p.parent for p in path.glob("*/summary.json"))
        hint = f" (it holds runs, e.g. {jobs[0]}: give their directories)" if jobs else ""
        raise FileNotFoundError(f"{path} is not a run directory: no summary.json{hint}")
    try:
        summary = json.loads(summary_path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise RunReadError(f"{summary_path} cannot be read: {err}") from None
    if not isinstance(summary, dict):
        raise RunReadError(f"{summary_path} is not a run summary (a JSON object), got {type(summary).__name__}")
    chains_path = path / "chains.jsonl"
    chains = []
    try:
        for number, record in enumerate(iter_jsonl(chains_path), 1):
            _check_chain(record, f"{chains_path}: record {number}")
            chains.append(compact_chain(record))
    except (OSError, UnicodeDecodeError) as err:
        raise RunReadError(f"{chains_path} cannot be read: {err}") from None
    return RunData(path, summary, chains)


RUN_FILES = ("summary.json", "chains.jsonl", "trees.jsonl", "config.yaml")


def check_output_file(path: str | Path, option: str) -> None:
    """Refuse an output file that is a directory, or a run directory's own file (writing would destroy it).

    A ValueError with one line naming ``option``; scripts call this before their work starts.
    """
    path = Path(path)
    if path.is_dir():
        raise ValueError(f"{option} {path} is a directory; give a file path")
    parent = path.parent
    if path.name in RUN_FILES and ((parent / "summary.json").is_file() or (parent / "chains.jsonl").is_file()):
        raise ValueError(f"{option} {path} is a file of the run directory {parent}; writing it would overwrite the run")
    for folder in (parent, *parent.parents):
        if folder.exists():
            if not folder.is_dir():
                raise ValueError(f"{option} {path}: {folder} is a file, not a directory")
            break


def run_dirs(root: str | Path) -> list[Path]:
    """Directories holding summary.json at or below ``root`` (a run dir, or a Hydra multirun dir), sorted."""
    return sorted({p.parent for p in Path(root).rglob("summary.json")})


def find_runs(root: str | Path) -> list[RunData]:
    """Every run at or below ``root``, sorted by path."""
    return [load_run(p) for p in run_dirs(root)]


def load_runs(paths: Sequence[Path]) -> list[RunData]:
    """Every run under ``paths``; a ValueError with one line when a path or all runs are missing.

    Directories with chains.jsonl but no summary.json (a run still going, or killed before
    it could write one), and directories whose files cannot be read as a run, are left
    out, with a notice on stderr naming them and why.
    """
    files = [Path(p) for p in paths if Path(p).is_file()]
    if files:  # e.g. a run's summary.json: name the directory that would have been meant
        raise ValueError(
            f"{files[0]} is a file, not a run directory; give the directory that holds the run ({files[0].parent})"
        )
    missing = [str(p) for p in paths if not Path(p).is_dir()]
    if missing:
        raise ValueError(f"no such directory: {', '.join(missing)}")
    for path in paths:
        for chains in sorted(Path(path).rglob("chains.jsonl")):
            if not (chains.parent / "summary.json").is_file():
                print(f"notice: {chains.parent} left out: no summary.json (still running, or killed)", file=sys.stderr)
    runs: list[RunData] = []
    seen: set[Path] = set()
    for path in paths:
        for run_dir in run_dirs(path):
            if run_dir.resolve() in seen:  # a multirun given beside one of its own jobs: that job once
                continue
            seen.add(run_dir.resolve())
            try:
                runs.append(load_run(run_dir))
            except (FileNotFoundError, RunReadError) as err:
                print(f"notice: {run_dir} left out: {err}", file=sys.stderr)
    if not runs:
        raise ValueError(f"no run directory (with summary.json) under {' '.join(map(str, paths))}")
    return runs


@dataclass(frozen=True)
class PromptFigures:
    """A run's cost and accuracy per prompt over a set of prompts (its answers' sums per prompt, averaged)."""

    prompts: int
    answers: int
    call_time: float | None  # summed model-call time of the prompt's answers, mean over prompts
    wall_time: float | None  # summed wall time of the prompt's answers (None if a record lacks it)
    model_calls: float | None
    accuracy: float | None  # mean of ``correct`` over the graded answers; None when none is graded
    graded: int


def prompt_figures(run: RunData, prompts: set[str] | None = None) -> PromptFigures:
    """Per-prompt figures of ``run`` over ``prompts`` (default: all of its own).

    Over all of a run's prompts, ``call_time`` is summary.json's call_time_s / prompts.
    """
    records = [r for (prompt, _), r in run.answers.items() if prompts is None or prompt in prompts]
    count = len({r["prompt_id"] for r in records})

    def per_prompt(key: str) -> float | None:
        values = [r.get(key) for r in records]
        if not count or any(isinstance(v, bool) or not isinstance(v, int | float) for v in values):
            return None
        return float(sum(values)) / count

    graded = [r["correct"] for r in records if isinstance(r.get("correct"), bool | int | float)]
    return PromptFigures(
        prompts=count,
        answers=len(records),
        call_time=per_prompt("call_time_s"),
        wall_time=per_prompt("wall_time_s"),
        model_calls=per_prompt("model_calls"),
        accuracy=float(np.mean(graded)) if graded else None,
        graded=len(graded),
    )


def chain_summary(run: RunData) -> dict[str, float | None]:
    """summary.json's per-chain figures, recomputed over the chains chains.jsonl holds (``answers``).

    A resumed run that was killed, or is still running, holds chains its summary.json (written
    by an earlier session) does not count, so a table mixing the two would describe two sets
    of chains. Keys as in the summary: transitions_per_call and time_per_call_s (sums over
    the chains, over their summed model calls), acceptance_rate (accepted over transitions, of
    the chains that record their accepts), accuracy (mean ``correct`` over the graded chains),
    loglik_mean and confidence_mean; None where no chain records what a figure needs.
    """
    records = list(run.answers.values())

    def total(key: str, of: Sequence[dict[str, Any]] = records) -> float:
        return float(sum(r[key] for r in of))

    def mean(key: str) -> float | None:
        values = [r[key] for r in records if isinstance(r.get(key), int | float)]
        return float(np.mean(values)) if values else None

    calls = total("model_calls")
    accepted = [(a, r) for r in records if (a := chain_accepted(r)) is not None]
    return {
        "transitions_per_call": _ratio(total("transitions"), calls),
        "time_per_call_s": _ratio(total("call_time_s"), calls),
        "acceptance_rate": _ratio(sum(a for a, _ in accepted), total("transitions", [r for _, r in accepted])),
        "accuracy": mean("correct"),  # bools and 0/1 count; null (ungraded) is left out
        "loglik_mean": mean("loglik"),
        "confidence_mean": mean("confidence"),
    }


def case_study_groups(runs: Sequence[RunData]) -> list[list[RunData]]:
    """Runs grouped by task (``RunData.task_values``: engine, model, dataset, α, n), in order of
    first appearance; only groups holding a test-time baseline (Case Study 8's comparison)."""
    groups: dict[tuple, list[RunData]] = {}
    for run in runs:
        groups.setdefault(run.task(), []).append(run)
    return [g for g in groups.values() if any(r.is_test_time_baseline for r in g)]


def pair_chains(baseline: RunData, variant: RunData) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """Chains of the two runs matched by (prompt_id, chain), in the baseline's order.

    A chain recorded twice (a resumed run) pairs once, with its later record (``RunData.answers``).
    Each record carries its seed, so runs made with one seed are seed-matched pairs; runs
    with different seeds still pair by prompt and chain index (independent draws).
    """
    index = variant.answers
    return [(r, index[key]) for key, r in baseline.answers.items() if key in index]


def _ratio(num: float, den: float) -> float | None:
    # NaN (a side whose prompts made no call has no time per call) is truthy: without the
    # isfinite check it would pass as a ratio and reach the tables and the scatter's axes.
    return num / den if den and math.isfinite(num) and math.isfinite(den) else None


@dataclass(frozen=True)
class Speedup:
    """Eq. (20) and its decomposition, over paired units."""

    units: int
    call_time_baseline: float  # mean summed model-call time per unit
    call_time_variant: float
    speedup: float | None
    time_per_call_baseline: float  # mean over prompts of (summed call time / summed calls) there
    time_per_call_variant: float
    time_per_call_increase: float | None
    call_reduction: float | None  # speedup * time_per_call_increase
    calls_ratio: float | None  # mean calls (baseline) / mean calls (variant)
    transitions_per_call_baseline: float | None
    transitions_per_call_variant: float | None


def speedup(pairs: Sequence[tuple[dict[str, Any], dict[str, Any]]]) -> Speedup:
    """Speedup of the second run of each pair over the first, as ratios of means.

    Time per call is per prompt, as in the paper (App. D.2): a prompt's summed call time
    over its summed model calls (its paired chains pooled, not each chain's ratio averaged),
    then the mean over prompts; a prompt without a call on a side is left out of that side.
    """
    if not pairs:
        raise ValueError("no paired chains: the runs share no (prompt_id, chain)")
    a = [p[0] for p in pairs]
    b = [p[1] for p in pairs]

    def mean(records, key):
        return float(np.mean([r[key] for r in records]))

    def mean_tpc(records):
        prompts: dict[str, list[float]] = {}  # prompt -> [summed call time, summed calls]
        for r in records:
            sums = prompts.setdefault(r["prompt_id"], [0.0, 0.0])
            sums[0] += r["call_time_s"]
            sums[1] += r["model_calls"]
        per_prompt = [time / calls for time, calls in prompts.values() if calls]
        return float(np.mean(per_prompt)) if per_prompt else math.nan

    def tpc_transitions(records):
        calls = sum(r["model_calls"] for r in records)
        return _ratio(sum(r["transitions"] for r in records), calls)

    time_a, time_b = mean(a, "call_time_s"), mean(b, "call_time_s")
    tpc_a, tpc_b = mean_tpc(a), mean_tpc(b)
    ratio = _ratio(time_a, time_b)
    increase = _ratio(tpc_b, tpc_a)
    return Speedup(
        units=len(pairs),
        call_time_baseline=time_a,
        call_time_variant=time_b,
        speedup=ratio,
        time_per_call_baseline=tpc_a,
        time_per_call_variant=tpc_b,
        time_per_call_increase=increase,
        call_reduction=None if ratio is None or increase is None else ratio * increase,
        calls_ratio=_ratio(mean(a, "model_calls"), mean(b, "model_calls")),
        transitions_per_call_baseline=tpc_transitions(a),
        transitions_per_call_variant=tpc_transitions(b),
    )


def paired_values(
    pairs: Sequence[tuple[dict[str, Any], dict[str, Any]]], stat: str, unit: str = "prompt"
) -> tuple[np.ndarray, np.ndarray]:
    """(baseline, variant) values of ``stat`` per unit; ``unit='prompt'`` averages each prompt's chains.

    Pairs where either side lacks the statistic are dropped; a value that is not a number
    is a ValueError naming the statistic and the chain.
    """
    rows = [(p[0]["prompt_id"], p[0].get(stat), p[1].get(stat)) for p in pairs]
    rows = [r for r in rows if r[1] is not None and r[2] is not None]
    for prompt, *values in rows:
        for value in values:
            if not isinstance(value, int | float):  # bools (correct) count as 0/1
                raise ValueError(f"statistic {stat!r} is not a number in the chains of {prompt}: {value!r}")
    if unit == "chain":
        return np.array([r[1] for r in rows], dtype=float), np.array([r[2] for r in rows], dtype=float)
    if unit != "prompt":
        raise ValueError(f"unit must be 'chain' or 'prompt', got {unit!r}")
    groups: dict[str, list[tuple[float, float]]] = {}
    for prompt, x, y in rows:
        groups.setdefault(prompt, []).append((x, y))
    means = np.array([np.mean(v, axis=0) for v in groups.values()], dtype=float).reshape(-1, 2)
    return means[:, 0], means[:, 1]


@dataclass
class Comparison:
    """Baseline run vs variant run: speedup and TOST per quality statistic."""

    baseline: RunData
    variant: RunData
    speedup: Speedup
    tost: dict[str, TostResult | None] = field(default_factory=dict)
    seed_matched: bool = False
    unpaired: tuple[int, int] = (0, 0)  # chains of the baseline and of the variant without a partner
    differences: list[str] = field(default_factory=list)  # setting values that differ (when allowed)
    # Paired prompts whose two chains record other prompt tokens (prompt_sha): another tokenizer,
    # chat template or code version, or GPQA's choices shuffled by another seed. They pair by id
    # alone, so their differences are not PreSTO's.
    prompts_differ: list[str] = field(default_factory=list)
    unit: str = "prompt"  # what the TOST pairs: a prompt (its chains averaged) or a chain
    # Paired units of each tested statistic, also where there are too few for a TOST (tost None).
    units: dict[str, int] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {
            "baseline": str(self.baseline.path),
            "variant": str(self.variant.path),
            "baseline_label": self.baseline.label,
            "variant_label": self.variant.label,
            "seed_matched": self.seed_matched,
            "unpaired_chains": list(self.unpaired),
            "setting_differences": self.differences,
            "prompts_differ": self.prompts_differ,
            "unit": self.unit,
            "paired_units": self.units,
            "chains": {
                side: {"held": run.chains_held, "expected": run.expected_chains, "complete": run.complete}
                for side, run in (("baseline", self.baseline), ("variant", self.variant))
            },
            "speedup": self.speedup.__dict__,
            "tost": {k: (v.as_dict() if v else None) for k, v in self.tost.items()},
        }


def compare(
    baseline: RunData,
    variant: RunData,
    *,
    stats: Sequence[str] = QUALITY_STATS,
    unit: str = "prompt",
    margin_sd: float = DEFAULT_MARGIN_SD,
    level: float = DEFAULT_LEVEL,
    allow_different_settings: bool = False,
) -> Comparison:
    """Pair the chains of two runs, then speedup and one paired TOST per statistic.

    The runs must share their setting (``RunData.setting_values``: same engine, model,
    dataset and sampler options) unless ``allow_different_settings``; otherwise a
    ValueError names the keys that differ. The default unit is the prompt (its chains
    averaged), as in the paper's test: chains of one prompt are not independent units.
    A statistic with fewer than two paired units has no TOST (None); ``units`` says how many.
    """
    differences = setting_differences(baseline, variant)
    if differences and not allow_different_settings:
        raise ValueError(
            "the runs differ in their setting, so the comparison would not measure PreSTO alone: "
            + "; ".join(differences)
        )
    pairs = pair_chains(baseline, variant)
    result = Comparison(baseline, variant, speedup(pairs), differences=differences, unit=unit)
    # Counted over distinct chains, as pairs are: a chain recorded twice is one chain.
    result.unpaired = (len(baseline.answers) - len(pairs), len(variant.answers) - len(pairs))
    # Records without a seed (None on both sides) say nothing about seed matching.
    result.seed_matched = all(p[0].get("seed") is not None and p[0].get("seed") == p[1].get("seed") for p in pairs)
    shas = [(a["prompt_id"], a.get("prompt_sha"), b.get("prompt_sha")) for a, b in pairs]
    result.prompts_differ = sorted({p for p, x, y in shas if x is not None and y is not None and x != y}, key=str)
    for stat in stats:
        a, b = paired_values(pairs, stat, unit)
        result.units[stat] = int(a.shape[0])
        result.tost[stat] = paired_tost(a, b, margin_sd=margin_sd, level=level) if a.shape[0] >= 2 else None
    return result


def pool(
    comparisons: Sequence[Comparison], stat: str, *, margin_sd: float = DEFAULT_MARGIN_SD, level: float = DEFAULT_LEVEL
) -> PooledResult | None:
    """Fixed-effect pooled TOST of one statistic over several comparisons (None unless two are usable).

    The pooled test assumes independent pairs, so a run enters once, as baseline or variant:
    of several comparisons sharing a run (however its path is spelled) only the first is
    pooled (two PreSTO runs against one sequential run, or one PreSTO run against two
    sequential runs, are one independent comparison). None when fewer than two independent
    comparisons have a TOST with a baseline spread: a lone pair's answer is its paired
    t-TOST, which the pooled z-test could contradict.
    """
    seen: set[Path] = set()
    independent = []
    for c in comparisons:
        runs = {c.baseline.path.resolve(), c.variant.path.resolve()}
        if not runs & seen:
            seen |= runs
            independent.append(c)
    results = [c.tost.get(stat) for c in independent]
    results = [r for r in results if r is not None and r.baseline_sd > 0]
    return pooled_tost(results, margin_sd=margin_sd, level=level) if len(results) >= 2 else None


def pairing_note(comparison: Comparison) -> str | None:
    """A line when the comparison pairs fewer chains than either run was configured to produce."""
    paired = comparison.speedup.units
    short = [
        f"{side}: {run.expected_chains}"
        for side, run in (("A", comparison.baseline), ("B", comparison.variant))
        if run.expected_chains is not None and paired < run.expected_chains
    ]
    if not short:
        return None
    pair = f"{comparison.baseline.path} vs {comparison.variant.path}"
    return f"{pair} pairs {paired} chains, fewer than the runs configured ({', '.join(short)})"


def sequential_baseline(variant: RunData, runs: Sequence[RunData]) -> RunData | None:
    """The sequential run of the same setting as a PreSTO run (same seed preferred), if any."""
    if variant.is_sequential or variant.summary.get("traversal") in (None, "none"):
        return None
    candidates = [r for r in runs if r.is_sequential and r.setting() == variant.setting()]
    same_seed = [r for r in candidates if r.summary.get("seed") == variant.summary.get("seed")]
    chosen = same_seed or candidates
    return chosen[0] if chosen else None


NEAR_SETTING_KEYS = 3
"""A sequential run whose setting differs from a PreSTO run's in at most this many keys is named as near."""


def nearest_sequential(variant: RunData, runs: Sequence[RunData]) -> tuple[RunData, list[str]] | None:
    """The sequential run whose setting differs least from ``variant``'s, with the differences
    ('key (variant's vs its)'), when it differs in 1..NEAR_SETTING_KEYS keys (same seed preferred)."""
    if variant.is_sequential or variant.summary.get("traversal") in (None, "none"):
        return None
    seed = variant.summary.get("seed")
    near = [(setting_differences(variant, r), r.summary.get("seed") != seed, i, r) for i, r in enumerate(runs)]
    near = [n for n in near if n[3].is_sequential and 0 < len(n[0]) <= NEAR_SETTING_KEYS]
    if not near:
        return None
    differences, _, _, run = min(near, key=lambda n: (len(n[0]), n[1], n[2]))
    return run, differences


def chain_progress(run: RunData, record: dict[str, Any]) -> tuple[np.ndarray, np.ndarray] | None:
    """(transitions completed, cumulative call time) after each model call of one chain.

    The call order is fixed by the chain loop: each block starts with its extension call,
    then the sequential stepper makes one call per transition and a PreSTO stepper one call
    per round (trees.jsonl tells how many transitions each round realized). Returns None when
    the record predates per-call times, the summary lacks a usable max_new_tokens and
    block_size (positive integers, the block size dividing n), or the calls do not line up
    with that order.
    """
    times = record.get("call_times_s")
    if not times or not record.get("transitions"):
        return None
    steps = int(run.summary.get("steps") or 0)
    stages = run.blocks
    if stages is None:
        return None
    if run.is_sequential:
        advance = ([0] + [1] * steps) * stages
    else:
        rounds = run.tree_digest().rounds.get((record["prompt_id"], record["chain"]), [])
        advance = []
        for stage in range(stages):
            advance.append(0)
            for t in rounds:
                if t.stage != stage:
                    continue
                if t.model_call:
                    advance.append(int(t.realized))
                else:  # a round served entirely by reused proposals: no call of its own
                    advance[-1] += int(t.realized)
    if len(advance) != len(times):
        return None
    return np.cumsum(advance), np.cumsum(np.asarray(times, dtype=float))
