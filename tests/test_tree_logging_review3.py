"""Third review of what a PreSTO run logs per prefetched node (trees.jsonl) and how it is read back.

Every logged field is checked against a value recomputed here from the toy table alone
(closed-form log p0, log q and entropies, the sequential chain's own states and accepts),
not from the tree code: cut, feasibility, log A, epsilon-class, reached/decided, and every
feature. Then the file's life: a chain's rounds are on disk before its chain record, and an
interrupted run resumes with each round logged once.
"""

from __future__ import annotations

import json
import math
import os

import numpy as np
import pytest

from presto.engines.base import SuffixRequest
from presto.engines.toy import ToyEngine
from presto.prefetch.presto import PrefetchStepper
from presto.prefetch.traversal import BreadthFirst
from presto.runner.outputs import dumps
from presto.samplers.chain import BlockSchedule, SequentialStepper, run_chain
from presto.samplers.entropycut import EntropyCut
from presto.samplers.powermh import PowerMH
from presto.samplers.randomness import ChainKey
from tests.conftest import paper_features, write_toy_table
from tests.test_runner_review_fixes import toy_run_config
from tests.toy_model import ToyModel

ALPHA, TAU, EPS = 4.0, 0.25, 0.01


def paper_class(accept: float) -> str:
    """The epsilon-class of an acceptance probability A, as the paper defines it (eps = 0.01)."""
    return "reject" if accept <= EPS else "accept" if accept >= 1 - EPS else "uncertain"


class RecordingSequential(SequentialStepper):
    """The reference chain, remembering the state before each decision (a round's root)."""

    def __init__(self) -> None:
        self.states: dict[tuple[int, int], list[int]] = {}

    def before_decision(self, stage, transition, state, cut):
        self.states[(stage, transition)] = [int(t) for t in state.tokens]


class ReuseAfterFirst(BreadthFirst):
    """Every depth in a block's first round, then one depth a round: later rounds often find their
    proposal generated already (a round with no model call), which the log must not notice."""

    def plan(self, kernel, root, inputs, depth_cap, budget, reusable=()):
        width = min(budget, depth_cap) if inputs(0).transition == 0 else 1
        return {d: kernel.cut(root, inputs(d)) for d in range(width)}


def check_rounds(kernel, engine, model, key, schedule, budget, max_nodes, traversal) -> dict:
    sequential = RecordingSequential()
    _, trace = run_chain(kernel, engine, sequential, [], key, schedule)
    rounds: list[dict] = []
    run_chain(kernel, engine, PrefetchStepper(traversal, budget, rounds.append, max_nodes), [], key, schedule)
    seen = {"nodes": 0, "feasible": 0, "infeasible_reached": 0, "no_call_rounds": 0, "classes": set()}
    for raw in rounds:
        record = json.loads(dumps(raw))  # what trees.jsonl holds, read back
        stage, start, realized = record["stage"], record["transition"], record["realized"]
        seen["no_call_rounds"] += not record["model_call"]
        root = sequential.states[(stage, start)]
        length = len(root)
        root_logq = list(model.per_token(root, 0, TAU))
        root_entropy = list(model.entropies(root))
        taken = ["accept" if a else "reject" for a in trace.accepts[stage * schedule.steps + start :]][:realized]
        assert realized >= 1 and [n["id"] for n in record["nodes"]] == list(range(len(record["nodes"])))
        # Every node the walk visited is logged, whatever the cap; it visits realized + 1 nodes
        # unless it decided every remaining transition of the block.
        visited = realized + (realized < record["depth_cap"])
        assert sum(n["reached"] for n in record["nodes"]) == visited
        mine: dict[int, tuple] = {}  # id -> (tokens, node cut, accepts, branches, proposal)
        for node in record["nodes"]:
            seen["nodes"] += 1
            depth, inputs = node["depth"], key.decision(stage, start + node["depth"])
            if node["parent"] is None:
                tokens, node_cut, accepts, branches = root, length, 0, ()
            else:
                p_tokens, p_cut, p_accepts, p_branches, p_proposal = mine[node["parent"]]
                parent_cut = next(n["cut"] for n in record["nodes"] if n["id"] == node["parent"])
                if node["branch"] == "accept":
                    tokens, node_cut, accepts = p_proposal, parent_cut, p_accepts + 1
                else:
                    tokens, node_cut, accepts = p_tokens, p_cut, p_accepts
                branches = (*p_branches, node["branch"])
            on_path = list(branches) == taken[:depth] and depth <= realized
            assert node["reached"] == on_path and node["decided"] == (on_path and depth < realized), node
            mine[node["id"]] = (tokens, node_cut, accepts, branches, None)
            if not node["requested"]:
                assert node["cut"] is None and not node["feasible"]
                continue
            cut = node["cut"]
            assert cut == kernel.cut(model.state(root, tau=TAU), inputs)  # the decision's cut from the root
            expected = paper_features(root_logq, root_entropy, cut, depth, node_cut, accepts)
            assert node["features"].keys() == expected.keys()
            for name, value in expected.items():
                assert node["features"][name] == pytest.approx(value, abs=1e-12), (name, node)
            state = model.state(tokens, tau=TAU)
            feasible = tokens[:cut] == root[:cut]
            if feasible and kernel.state_depends_cut:
                feasible = kernel.cut(state, inputs) == cut  # EntropyCut: the speculated cut must hold
            assert node["feasible"] == feasible, node
            if not feasible:
                assert node["log_accept"] is None and node["eps_class"] is None
                seen["infeasible_reached"] += node["reached"]
                continue
            seen["feasible"] += 1
            (suffix,) = engine.generate([SuffixRequest(tuple(root[:cut]), length - cut, TAU, inputs.suffix_seed, ())])
            proposal = root[:cut] + [int(t) for t in suffix.tokens]
            mine[node["id"]] = (*mine[node["id"]][:4], proposal)
            new = model.state(proposal, tau=TAU)
            log_ratio = (
                state.logq[cut:].sum()
                - new.logq[cut:].sum()
                + ALPHA * (new.logp0[cut:].sum() - state.logp0[cut:].sum())
            )
            if kernel.state_depends_cut:  # the reverse cut under the proposal's law over the forward one
                log_ratio += math.log(kernel.cut_law(new)[cut]) - math.log(kernel.cut_law(state)[cut])
            accept = math.exp(min(0.0, log_ratio))
            logged = 0.0 if node["log_accept"] is None else math.exp(node["log_accept"])
            assert logged == pytest.approx(accept, rel=1e-9, abs=1e-12), node
            assert node["eps_class"] == paper_class(accept)
            assert node["accepted"] == (inputs.accept_uniform < accept)
            seen["classes"].add(node["eps_class"])
    return seen


@pytest.mark.parametrize("sampler", ["powermh", "entropycut"])
@pytest.mark.parametrize(
    ("traversal", "budget", "max_nodes"),
    [(BreadthFirst, 4, 64), (BreadthFirst, 6, 5), (ReuseAfterFirst, 8, 64)],
    ids=["bfs", "bfs-capped", "reuse"],
)
def test_every_logged_field_equals_its_recomputation(tmp_path, sampler, traversal, budget, max_nodes):
    engine = ToyEngine(write_toy_table(tmp_path / "table.json", vocab=6, seed=2, scale=2.0))
    model = ToyModel(engine)
    kernel = PowerMH(ALPHA, TAU) if sampler == "powermh" else EntropyCut(ALPHA, TAU)
    totals = {"nodes": 0, "feasible": 0, "infeasible_reached": 0, "no_call_rounds": 0, "classes": set()}
    for prompt in range(3):
        seen = check_rounds(
            kernel, engine, model, ChainKey(7, prompt, 0), BlockSchedule(12, 6, 8), budget, max_nodes, traversal()
        )
        for name, value in seen.items():
            totals[name] = totals[name] | value if name == "classes" else totals[name] + value
    # The check saw what it is about: deferred or discarded nodes the walk stopped at, and certain classes.
    assert totals["feasible"] > 50 and totals["infeasible_reached"] > 0, totals
    assert {"accept", "reject"} <= totals["classes"], totals
    if traversal is ReuseAfterFirst:
        assert totals["no_call_rounds"] > 0, totals


def test_the_epsilon_classes_include_their_boundaries():
    """A <= eps is a certain reject and A >= 1 - eps a certain accept (the paper's Section 3.3), in the
    logged eps_class and in the trainer's labels alike; just inside, uncertain."""
    from presto.predictor.features import CLASSES, label_of
    from presto.prefetch.tree import epsilon_class

    def first_past(x: float, toward: float, threshold: float) -> float:
        """The first double from x toward ``toward`` whose A = exp(log A) has left ``threshold``."""
        while math.exp(x) == threshold:
            x = math.nextafter(x, toward)
        return x

    for epsilon in (0.25, 0.2, 0.0625):  # exp(log(x)) == x for both thresholds of these
        for log_accept, expected in (
            (math.log(epsilon), "reject"),
            (first_past(math.log(epsilon), 0.0, epsilon), "uncertain"),
            (math.log(1.0 - epsilon), "accept"),
            (first_past(math.log(1.0 - epsilon), -math.inf, 1.0 - epsilon), "uncertain"),
            (-math.inf, "reject"),
            (0.0, "accept"),
        ):
            assert epsilon_class(log_accept, epsilon) == expected, (epsilon, log_accept)
            assert CLASSES[label_of(log_accept, epsilon)] == expected, (epsilon, log_accept)
    # Logged at eps = 0.01: the class of the A the decision itself used, exp(log A).
    for log_accept in np.linspace(math.log(0.005), math.log(0.995), 41):
        assert epsilon_class(log_accept) == paper_class(math.exp(log_accept))


def _fsynced_names(monkeypatch, run_dir) -> list[str]:
    """Names of the run-directory files os.fsync is called on, in order (matched by inode)."""
    names: list[str] = []
    real = os.fsync

    def fsync(fd):
        inode = os.fstat(fd).st_ino
        names.extend(p.name for p in run_dir.iterdir() if p.is_file() and p.stat().st_ino == inode)
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    return names


def test_a_chains_rounds_are_on_disk_before_its_chain_record(tmp_path, monkeypatch):
    """chains.jsonl is fsynced per chain, and a resume takes every chain it holds as finished, with
    the rounds trees.jsonl holds for it. A crash of the machine (not just of the process) after the
    chain's line reached the disk but before its rounds did would lose those rounds for good: the
    resumed run never runs that chain again."""
    from presto.runner.run import run

    table = write_toy_table(tmp_path / "table.json", vocab=6, seed=3)
    run_dir = tmp_path / "run"
    names = _fsynced_names(monkeypatch, run_dir)
    run(toy_run_config(table, "traversal=bfs", "budget.n_pf=3"), run_dir)
    synced = [name for name in names if name in ("trees.jsonl", "chains.jsonl")]
    chains = len((run_dir / "chains.jsonl").read_text().splitlines())
    assert synced.count("chains.jsonl") == chains == 4
    # Before each chain record is made durable, the trees file is (with that chain's rounds).
    assert synced == ["trees.jsonl", "chains.jsonl"] * chains, synced


def test_an_interrupted_run_resumes_with_each_round_logged_once(tmp_path, monkeypatch):
    """Killed in the middle of a chain's rounds, a resumed run logs that chain's rounds once (the
    partial ones are dropped and the chain runs again): trees.jsonl equals an uninterrupted run's."""
    from presto.runner import run as run_module

    table = write_toy_table(tmp_path / "table.json", vocab=6, seed=3)

    def config(resume: bool = False):
        cfg = toy_run_config(table, "traversal=bfs", "budget.n_pf=3", "sampler.steps=5")
        cfg.run.resume = resume
        return cfg

    run_module.run(config(), tmp_path / "clean")
    real, chains = run_module.sample_chain, []

    def interrupted(*args, **kwargs):
        chains.append(1)
        stepper = args[2]
        if len(chains) == 3:  # the third chain dies after logging two of its rounds
            log, rounds = stepper.on_round, []

            def on_round(record):
                log(record)
                rounds.append(record)
                if len(rounds) == 2:
                    raise KeyboardInterrupt

            stepper.on_round = on_round
        return real(*args, **kwargs)

    monkeypatch.setattr(run_module, "sample_chain", interrupted)
    with pytest.raises(KeyboardInterrupt):
        run_module.run(config(), tmp_path / "broken")
    monkeypatch.setattr(run_module, "sample_chain", real)
    run_module.run(config(resume=True), tmp_path / "broken")

    def rounds(run_dir):
        records = [json.loads(line) for line in (run_dir / "trees.jsonl").read_text().splitlines()]
        for record in records:
            record.pop("call_time_s")  # wall time: the one field two runs do not share
        return records

    clean = rounds(tmp_path / "clean")
    assert len(clean) > 8 and rounds(tmp_path / "broken") == clean


def test_a_damaged_middle_line_is_skipped_with_a_warning_a_torn_last_line_silently(tmp_path, capsys):
    from presto.runner.outputs import read_jsonl

    path = tmp_path / "trees.jsonl"
    path.write_text('{"round": 0}\n{"round": 1, "no\n{"round": 2}\n{"round": 3, "torn')
    assert [r["round"] for r in read_jsonl(path)] == [0, 2]
    err = capsys.readouterr().err
    assert err == f"warning: {path}: line 2 is not JSON; skipped\n"  # before: nothing said


def test_a_null_feature_is_named_in_a_value_error():
    from presto.predictor.features import feature_matrix

    with pytest.raises(ValueError, match="feature 'gap' of node 1 is None, not a number"):  # before: bare TypeError
        feature_matrix([{"gap": 1.0}, {"gap": None}], ["gap"])
