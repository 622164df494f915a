"""Replay logged prefetch trees with their true acceptance probabilities: BFS, predictive, oracle.

    python scripts/oracle_bound.py outputs/runs/RUN [RUN ...] [--n-pf 1 2 4 8 12 16 20]
                                   [--predictor default|PATH] [--out FILE.json]

(--predictor default: the predictor shipped for the runs' sampler, when they share one.)

Every round of trees.jsonl is a root state with its candidate tree: the feasible nodes
(Condition 1, checked on tokens) with the true acceptance probability A of each, known
after the fact. For each budget N_pf the script computes, averaged over rounds, the
EXPECTED number of transitions one prefetch round realizes when the walk follows the true A
(Lemma 1 with h = A), for these allocations (a round is one call, except a round whose
proposals an earlier round of its block had all generated: it makes none, and the script
counts those). Beside them it prints what the logged run realized per round; that is above
the run's summary transitions_per_call, which also counts each block's extension call.

  node-level model (the paper: one request per tree node, N_pf nodes per call)
    bfs-paper     breadth-first, spending requests below deferred nodes as the paper's BFS does
    bfs           breadth-first, skipping the subtree below a deferred node
    predictive    Proposition 2's DP with h_hat (eq. 14) from the predictor's class probabilities
    oracle        Proposition 2's DP with the true A: the best any node-level allocation can do
  shared-request model (this codebase: one request per depth serves every feasible node there)
    shared-bfs    depths 0..min(N_pf, K-k)-1, i.e. every candidate node above depth N_pf

So shared-bfs >= oracle >= bfs >= bfs-paper, and shared-bfs >= oracle >= predictive, on every
round: with shared requests, BFS already covers what an oracle would choose. Nothing orders
predictive against bfs or bfs-paper: a predictor that misjudges the tree can do worse than
either. Caveats: a replay scores each
allocation on the roots the logged run visited (a different allocation would visit other
roots), and nodes missing from the log (run.max_logged_nodes; use 1024 for replays) or
beyond the logged run's own N_pf count as unavailable; the script reports both. A truncated
log keeps the walk's own path, so its BFS and predictive rows can come out too high.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import deque
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

PROJECT_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(PROJECT_ROOT / "src"))

from presto.predictor.data import iter_rounds, run_info, tree_files  # noqa: E402
from presto.predictor.features import feature_matrix, logged_acceptance  # noqa: E402
from presto.prefetch.allocation import (  # noqa: E402
    ACCEPT,
    REJECT,
    AllocationProgram,
    PrefetchTree,
    expected_transitions,
    expected_transitions_recursive,
    node_bfs,
    reaching_weights,
)

METHODS = (
    ("bfs-paper", "node-level", "BFS, requests below deferred nodes (the paper's implementation)"),
    ("bfs", "node-level", "BFS, nothing below deferred nodes"),
    ("predictive", "node-level", "Proposition 2 DP with the predictor's h_hat (eq. 14)"),
    ("oracle", "node-level", "Proposition 2 DP with the true A (upper bound for node-level)"),
    ("shared-bfs", "shared-request", "one request per depth, depths 0..N_pf-1 (this codebase's BFS)"),
)


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", nargs="+", type=Path, help="run directories (or trees.jsonl files)")
    parser.add_argument("--n-pf", type=int, nargs="+", default=[1, 2, 4, 8, 12, 16, 20])
    parser.add_argument(
        "--predictor",
        default="default",
        help="checkpoint for the predictive row (default: the one shipped for the runs' sampler)",
    )
    parser.add_argument("--out", type=Path, default=None, help="also write the replay's results to this JSON file")
    return parser.parse_args(argv)


def replay_tree(record: dict[str, Any], max_budget: int) -> tuple[PrefetchTree, np.ndarray, list, int, bool]:
    """The logged candidate tree, plus the unlogged subtrees the paper's BFS would spend requests on.

    Returns (tree, true A per node, logged node per tree node or None, usable depth cap, truncated).
    """
    nodes = record["nodes"]
    requested = sorted(record.get("requested_depths") or {n["depth"] for n in nodes if n.get("requested")})
    depth_cap = min(int(record["depth_cap"]), max(requested) + 1 if requested else 1)
    ids = {n["id"]: i for i, n in enumerate(nodes)}
    tree = PrefetchTree.from_edges(
        [None if n["parent"] is None else ids[n["parent"]] for n in nodes],
        [n["branch"] for n in nodes],
        [bool(n.get("feasible")) for n in nodes],
    )
    accept = np.zeros(len(nodes))
    for i, n in enumerate(nodes):
        if n.get("feasible"):
            accept[i] = logged_acceptance(n.get("log_accept"))
    cuts = {n["depth"]: n["cut"] for n in nodes if n.get("cut") is not None}
    truncated = any(
        n.get("feasible") and n["depth"] + 1 < depth_cap and (tree.accept_child[i] < 0 or tree.reject_child[i] < 0)
        for i, n in enumerate(nodes)
    )
    # Below a deferred node the paper's BFS keeps expanding its rejection child (same state,
    # same node cut); those nodes are never logged (the walk cannot reach them), so build
    # them from the cuts, at the cut level, as far as a budget of max_budget could go.
    for i, n in enumerate(nodes):
        if n.get("feasible") or not n.get("requested") or n["depth"] + 1 >= depth_cap:
            continue
        node_cut = (n.get("features") or {}).get("parent_cut")
        if node_cut is None:
            continue
        queue, spent = deque([(tree.add_node(i, REJECT, False), node_cut)]), 0
        while queue and spent < max_budget:
            v, cut_index = queue.popleft()
            depth = tree.depth[v]
            ok = depth in cuts and cuts[depth] <= cut_index
            tree.expandable[v] = ok
            if not ok or depth + 1 >= depth_cap:
                continue
            spent += 1
            queue.append((tree.add_node(v, ACCEPT, False), cuts[depth]))
            queue.append((tree.add_node(v, REJECT, False), cut_index))
    logged: list = list(nodes) + [None] * (len(tree) - len(nodes))  # built nodes carry no log
    accept = np.concatenate([accept, np.zeros(len(tree) - len(accept))])
    return tree, accept, logged, depth_cap, truncated


class FeatureMismatch(Exception):
    """The predictor needs a feature the logged nodes do not carry (trees from another version)."""


def predicted_h(predictor, logged: list) -> np.ndarray:
    h = np.full(len(logged), 0.5)
    rows = [(i, n["features"]) for i, n in enumerate(logged) if n is not None and n.get("feasible")]
    if predictor is not None and rows:
        try:
            matrix = feature_matrix([f for _, f in rows], predictor.feature_names)
        except KeyError as err:  # told apart from a KeyError of a malformed record
            raise FeatureMismatch(f"--predictor {predictor.path}: {err.args[0]}") from None
        h[[i for i, _ in rows]] = predictor.branch_probability(matrix)
    return h


class MalformedTrees(Exception):
    """A trees.jsonl line that is not a round record of this project (one line naming the file)."""


NODE_KEYS = ("id", "parent", "depth", "branch")
PROGRESS_DELAY_S = 2.0
"""Seconds before the replay shows a progress bar on stderr (short replays stay quiet)."""


def is_round(record: Any) -> bool:
    """Whether a trees.jsonl record has a prefetch round's shape, as far as the replay reads it
    (its nodes are checked one by one as it reads them)."""
    return isinstance(record, dict) and isinstance(record.get("nodes"), list) and "depth_cap" in record


def checked_rounds(files: list[Path]) -> Iterator[dict[str, Any]]:
    """Round records of ``files``, each checked for what the replay reads (MalformedTrees otherwise)."""
    for file in files:
        for number, record in enumerate(iter_rounds([file]), 1):
            where = f"{file}: record {number}"
            if not is_round(record):
                raise MalformedTrees(f"{where} is not a prefetch round (an object with nodes and depth_cap)")
            for node in record["nodes"]:
                if not isinstance(node, dict) or any(k not in node for k in NODE_KEYS):
                    raise MalformedTrees(f"{where}: a node lacks one of {', '.join(NODE_KEYS)}")
            yield record


def replay(files: list[Path], n_pf: list[int], predictor) -> dict[str, Any]:
    """The replay of every round logged in ``files`` (trees.jsonl), with a progress bar on long ones."""
    from tqdm import tqdm

    with tqdm(checked_rounds(files), desc="rounds", unit="round", delay=PROGRESS_DELAY_S, file=sys.stderr) as rounds:
        return replay_rounds(rounds, n_pf, predictor)


def replay_rounds(records: Iterable[dict[str, Any]], n_pf: list[int], predictor) -> dict[str, Any]:
    """Expected transitions (and requests) per call of every method at every budget, averaged over rounds.

    ``records`` are round records as trees.jsonl holds them (or as ``PrefetchStepper``'s
    ``on_round`` hands them over); ``predictor`` None scores the predictive row with h = 1/2.
    """
    max_budget = max(n_pf)
    sums = {name: np.zeros(len(n_pf)) for name, _, _ in METHODS}
    requests = {name: np.zeros(len(n_pf)) for name, _, _ in METHODS}
    rounds = truncated = short = realized = without_call = 0
    planned_with: set[str] = set()  # fingerprints of the predictors the logged predictive rounds planned with
    for record in records:
        tree, accept, logged, cap, cut_short = replay_tree(record, max_budget)
        rounds += 1
        fingerprint = (record.get("plan") or {}).get("predictor")
        if fingerprint:
            planned_with.add(fingerprint)
        truncated += cut_short
        realized += int(record.get("realized", 0))
        without_call += record.get("model_call") is False
        short += len(record.get("requested_depths") or []) < min(max_budget, int(record["depth_cap"]))
        weights = reaching_weights(tree, accept)
        # The DP is sized by its budget, and no selection holds more nodes than the tree's
        # candidates: a larger budget (a typo, 10**20) chooses as that many would.
        usable = min(max_budget, int(tree.candidates(cap).sum()))
        oracle = AllocationProgram(tree, accept, usable, cap)
        predictive = AllocationProgram(tree, predicted_h(predictor, logged), usable, cap)
        for j, budget in enumerate(n_pf):
            for name, spend in (("bfs-paper", True), ("bfs", False)):
                chosen = node_bfs(tree, budget, cap, spend_below_deferred=spend)
                sums[name][j] += expected_transitions_recursive(tree, chosen, accept)
                requests[name][j] += len(chosen)
            within = min(budget, usable)  # what the DPs were sized for
            chosen = predictive.selection(within)
            sums["predictive"][j] += expected_transitions(tree, chosen, accept)
            requests["predictive"][j] += len(chosen)
            sums["oracle"][j] += oracle.value(within)
            requests["oracle"][j] += len(oracle.selection(within))
            depths = min(budget, cap)
            covered = tree.candidates(depths)
            sums["shared-bfs"][j] += float(weights[covered].sum())
            requests["shared-bfs"][j] += depths
    if rounds == 0:
        raise ValueError("no rounds to replay")
    rows = []
    for name, model, meaning in METHODS:
        for j, budget in enumerate(n_pf):
            rows.append(
                {
                    "method": name,
                    "request_model": model,
                    "meaning": meaning,
                    "n_pf": budget,
                    "transitions_per_call": sums[name][j] / rounds,
                    "requests_per_call": requests[name][j] / rounds,
                }
            )
    return {
        "rounds": rounds,
        "rounds_with_truncated_logs": truncated,
        "rounds_without_a_call": without_call,  # served by reused proposals: "per call" is per round
        "rounds_with_fewer_logged_depths_than_max_n_pf": short,
        "realized_transitions_per_round_in_the_logged_run": realized / rounds,
        "logged_predictors": sorted(planned_with),
        "rows": rows,
    }


def predictor_note(result: dict[str, Any], predictor) -> str | None:
    """A line when the predictive row replays with a predictor other than the one(s) the logged
    run planned with: legitimate (judging a new predictor offline), but then its row is not the
    logged run's rule."""
    logged = result.get("logged_predictors") or []
    replayed = predictor.fingerprint if predictor is not None else None
    if not logged or logged == [replayed]:
        return None
    from presto.prefetch.predictive import describe_predictor

    used = describe_predictor(predictor) if predictor is not None else "no predictor (h = 1/2)"
    return (
        f"note: the predictive row replays with {used}; the logged run planned with fingerprint "
        f"{', '.join(logged)} (pass that checkpoint as --predictor to replay its own rule)"
    )


def print_table(result: dict[str, Any], n_pf: list[int]) -> None:
    # Rows are per round (named transitions_per_call): a round is one call unless its proposals were all reused.
    reused = result.get("rounds_without_a_call", 0)
    calls = f"one call each, but {reused} served by reused proposals without one" if reused else "one call each"
    print(
        f"{result['rounds']} logged rounds; expected transitions per prefetch round ({calls}) with the "
        f"true A (logged run realized {result['realized_transitions_per_round_in_the_logged_run']:.2f} per round; "
        "its summary's transitions_per_call also counts each block's extension call)"
    )
    header = f"{'method':<12}{'request model':<16}" + "".join(f"{'N=' + str(n):>8}" for n in n_pf)
    print(header)
    print("-" * len(header))
    by = {(r["method"], r["n_pf"]): r for r in result["rows"]}
    for name, model, _ in METHODS:
        cells = "".join(f"{by[(name, n)]['transitions_per_call']:>8.2f}" for n in n_pf)
        print(f"{name:<12}{model:<16}{cells}")
    print("requests per call:")
    for name, model, _ in METHODS:
        cells = "".join(f"{by[(name, n)]['requests_per_call']:>8.2f}" for n in n_pf)
        print(f"{name:<12}{model:<16}{cells}")
    for name, model, meaning in METHODS:
        print(f"  {name:<11} [{model}] {meaning}")
    if result["rounds_with_truncated_logs"]:
        print(
            f"warning: {result['rounds_with_truncated_logs']} rounds have candidate nodes missing from the log "
            "(capped by run.max_logged_nodes); they count as unavailable, which biases every row either way: the "
            "log always keeps the path the walk took, so bfs and predictive spend their requests on it and can "
            "come out higher than a full log gives, oracle and shared-bfs lower; rerun with a larger "
            "run.max_logged_nodes (e.g. run.max_logged_nodes=1024) for a replay that means something"
        )
    if result["rounds_with_fewer_logged_depths_than_max_n_pf"]:
        print(
            f"note: in {result['rounds_with_fewer_logged_depths_than_max_n_pf']} rounds the logged run requested "
            "fewer depths than the largest N_pf here; deeper nodes count as unavailable"
        )


def holds_a_round(file: Path) -> bool:
    """Whether a line of ``file`` is a prefetch round, read quietly: the replay reads the file
    again, and warns about its damaged lines (or refuses what is not a tree log) then."""
    with open(file, encoding="utf-8", errors="replace") as lines:
        for line in lines:
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if is_round(record):
                return True
    return False


def default_predictor_path(value: str, files: list[Path]) -> Path | None:
    """The checkpoint ``--predictor`` names; ``default``: the one shipped for the sampler of the
    runs whose trees hold rounds (their summary.json or config.yaml), which must be one sampler
    (a ConfigError otherwise); None when no file holds a round."""
    from presto.config import ConfigError
    from presto.predictor.data import UNKNOWN
    from presto.prefetch.predictive import resolve_predictor_path

    if value != "default":
        return resolve_predictor_path(value, None, option="--predictor")
    logged = [file for file in files if holds_a_round(file)]
    if not logged:
        return None  # no rounds to replay, which the replay says
    names = sorted({run_info(file).sampler for file in logged})
    if UNKNOWN in names:
        raise ConfigError(
            "--predictor default: the runs do not say their sampler (no summary.json or config.yaml beside "
            "trees.jsonl); name a checkpoint with --predictor PATH"
        )
    if len(names) > 1:
        raise ConfigError(
            f"--predictor default: the trees come from runs of {', '.join(names)}, and each sampler has its "
            "own shipped predictor; replay one sampler's runs at a time, or name a checkpoint with --predictor PATH"
        )
    return resolve_predictor_path(value, names[0], option="--predictor")


def fail(message: str) -> int:
    """One ``error:`` line, exit status 2 (as argparse and the Hydra entry points use for bad input)."""
    print(f"error: {message}", file=sys.stderr)
    return 2


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    from presto.config import ConfigError
    from presto.eval.runs import check_output_file
    from presto.predictor.hotload import load_predictor

    n_pf = sorted(set(args.n_pf))
    if n_pf[0] < 1:
        return fail("--n-pf values must be >= 1")
    try:
        if args.out:
            check_output_file(args.out, "--out")
        files = tree_files(args.runs)
        path = default_predictor_path(args.predictor, files)
        predictor = None if path is None else load_predictor(path, option="--predictor")
    except (ConfigError, FileNotFoundError) as err:  # PredictorError is a ConfigError
        return fail(str(err))
    except ValueError as err:  # --out
        return fail(str(err))
    try:
        result = replay(files, n_pf, predictor)
    except (FeatureMismatch, MalformedTrees) as err:
        return fail(str(err))
    except KeyboardInterrupt:  # a long replay stopped by hand: one line, not a traceback
        print("\ninterrupted: the replay needs every round; nothing was printed or written", file=sys.stderr)
        return 130
    except ValueError as err:
        return fail(f"{err} in the given trees.jsonl files")
    result["predictor"] = None if predictor is None else {"path": predictor.path, "fingerprint": predictor.fingerprint}
    print_table(result, n_pf)
    note = predictor_note(result, predictor)
    if note:
        print(note)
    if args.out:
        try:
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps(result, indent=2) + "\n")
        except OSError as err:
            return fail(f"--out {args.out}: cannot write it ({err.strerror or err}); the table above is complete")
        print(f"replay written to {args.out} (JSON)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
