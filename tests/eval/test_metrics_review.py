"""Review of the numbers researchers read: what a report says about the chains it pairs, the
epsilon-certainty of decisions logged with A = 0, and pairs whose prompts are other tokens."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from presto.eval.plots import acceptance_probabilities, epsilon_rounded, epsilon_shares
from presto.eval.report import build_report, comparison_lines
from presto.eval.runs import compare, load_run
from presto.runner.outputs import dumps

SUMMARY = {"sampler": "powermh", "alpha": 4.0, "tau": 0.25, "max_new_tokens": 8, "block_size": 4, "steps": 2}


def record(prompt: str, chain: int, calls: int, seconds: float, seed: int = 0, **extra) -> dict:
    return {
        "prompt_id": prompt,
        "chain": chain,
        "seed": seed,
        "model_calls": calls,
        "call_time_s": seconds,
        "transitions": 4,
        "loglik": -1.0 - 0.1 * chain - 0.3 * int(prompt[1:]),
        "confidence": -0.5,
        **extra,
    }


def write_run(path: Path, traversal: str, records: list[dict], **summary) -> Path:
    path.mkdir(parents=True)
    n_pf = 1 if traversal == "sequential" else 4
    full = {**SUMMARY, "traversal": traversal, "n_pf": n_pf, "seed": 0, "chains": len(records), **summary}
    (path / "summary.json").write_text(json.dumps(full))
    (path / "chains.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def test_report_says_which_chains_its_speedup_leaves_out_and_that_seeds_differ(tmp_path):
    # One chain per prompt in the sequential run, two in the PreSTO run (run.* is not part of the
    # setting), and another seed: the speedup and TOST cover the 3 paired chains only.
    seq = [record(f"p{i}", 0, 10, 10.0, seed=1) for i in range(3)]
    bfs = [record(f"p{i}", c, 2, 5.0) for i in range(3) for c in range(2)]
    runs = [
        load_run(write_run(tmp_path / "seq", "sequential", seq, seed=1)),
        load_run(write_run(tmp_path / "bfs", "bfs", bfs)),
    ]
    text = build_report(runs, tmp_path / "report.md", figures=False).read_text()
    assert "3 of" in text and "have no partner" in text
    assert "not seed-matched" in text


def test_report_says_when_accuracy_covers_only_the_graded_chains(tmp_path):
    seq = [record(f"p{i}", 0, 10, 10.0, correct=c) for i, c in enumerate([True, None, None])]
    run = load_run(write_run(tmp_path / "seq", "sequential", seq, accuracy=1.0, graded=1, ungraded=2))
    text = build_report([run], tmp_path / "report.md", figures=False).read_text()
    assert "accuracy is over 1 of 3 chains" in text


def test_a_decision_that_can_never_be_accepted_counts_as_a_certain_reject():
    # log A = -inf (a NaN ratio, or a proposal p0 rules out) is null in trees.jsonl: JSON has no -inf.
    nodes = [
        {"id": 0, "parent": None, "branch": "root", "depth": 0, "feasible": True, "log_accept": float("-inf")},
        {"id": 1, "parent": 0, "branch": "accept", "depth": 1, "feasible": False, "log_accept": None},
        {"id": 2, "parent": 0, "branch": "reject", "depth": 1, "feasible": True, "log_accept": 0.0},
    ]
    logged = json.loads(dumps({"nodes": nodes}))
    assert logged["nodes"][0]["log_accept"] is None
    accept = acceptance_probabilities([logged])
    assert sorted(accept.tolist()) == [0.0, 1.0]  # the unscored node 1 stays out
    assert epsilon_shares(np.asarray(accept)) == {"reject": 0.5, "uncertain": 0.0, "accept": 0.5}
    assert epsilon_rounded(logged["nodes"]) == {0, 2}  # a certain reject keeps its rejection child


def test_pairs_whose_prompts_are_other_tokens_are_named(tmp_path):
    seq = [record(f"p{i}", 0, 10, 10.0, prompt_sha=f"s{i}") for i in range(3)]
    bfs = [record(f"p{i}", 0, 2, 5.0, prompt_sha="other" if i == 2 else f"s{i}") for i in range(3)]
    a = load_run(write_run(tmp_path / "seq", "sequential", seq))
    b = load_run(write_run(tmp_path / "bfs", "bfs", bfs))
    comparison = compare(a, b)
    assert comparison.prompts_differ == ["p2"]
    assert comparison.as_dict()["prompts_differ"] == ["p2"]
    text = "\n".join(comparison_lines([comparison], {}))
    assert "p2" in text and "other tokens" in text
    report = build_report([a, b], tmp_path / "report.md", figures=False).read_text()
    assert "other tokens" in report


def test_oracle_replay_counts_the_rounds_that_made_no_call(capsys):
    from tests.conftest import load_script

    oracle_bound = load_script("oracle_bound")
    root = {"id": 0, "parent": None, "branch": "root", "depth": 0, "cut": 0, "requested": True, "feasible": True}
    nodes = [{**root, "features": {}, "log_accept": 0.0}]
    rounds = [
        {"depth_cap": 1, "requested_depths": [0], "realized": 1, "model_call": call, "nodes": nodes}
        for call in (True, False)
    ]
    result = oracle_bound.replay_rounds(rounds, [1], predictor=None)
    assert result["rounds"] == 2 and result["rounds_without_a_call"] == 1
    oracle_bound.print_table(result, [1])
    assert "1 served by reused proposals without one" in capsys.readouterr().out


def test_a_side_without_calls_has_no_decomposition_and_no_scatter_point(tmp_path):
    from presto.eval.plots import make_plots
    from presto.eval.runs import pair_chains, speedup

    seq = [record(f"p{i}", 0, 0, 0.0) for i in range(2)]  # no call timed: nothing to divide by
    bfs = [record(f"p{i}", 0, 2, 5.0) for i in range(2)]
    a = load_run(write_run(tmp_path / "seq", "sequential", seq))
    b = load_run(write_run(tmp_path / "bfs", "bfs", bfs))
    s = speedup(pair_chains(a, b))
    assert s.time_per_call_increase is None and s.call_reduction is None  # not NaN
    written = make_plots([a, b], tmp_path / "figures")  # a NaN point would fail the scatter's axes
    assert "speedup_scatter.png" not in {p.name for p in written}
