"""Pooling the trees of several runs: copies of one decision, mixed samplers, what metrics.json says.

Real toy runs (src/main.py): BFS at N_pf 4 and 8 of one seed make the same chains, so their
trees share nodes; another seed and EntropyCut make other decisions.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from presto.predictor import data, train
from presto.predictor.data import collect_examples, iter_rounds, tree_files
from presto.predictor.hotload import load_predictor
from presto.predictor.train import format_metrics, prompt_folds
from tests.conftest import PROJECT_ROOT, run_cli, toy_args

TRAIN = PROJECT_ROOT / "src" / "train_predictor.py"
FEATURES = ("cut_fraction", "depth", "logq_at_cut")


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    from tests.conftest import write_toy_table

    root = tmp_path_factory.mktemp("pooled")
    table = write_toy_table(root / "table.json", vocab=6, seed=3)
    settings = {
        "bfs4": ("budget.n_pf=4",),
        "bfs8": ("budget.n_pf=8",),
        "seed1": ("budget.n_pf=4", "seed=1"),
        "ec": ("budget.n_pf=4", "sampler=entropycut"),
    }
    for name, extra in settings.items():
        done = run_cli(*toy_args(table, root / name, "run.progress=false", *extra))
        assert done.returncode == 0, done.stderr[-2000:]
    return {name: root / name for name in settings} | {"root": root, "table": table}


def node_multiset(paths) -> Counter:
    """(prompt, chain, stage, transition, features, log A) of every feasible node, with multiplicity."""
    return Counter(
        (r["prompt_id"], r["chain"], r["stage"], r["transition"], json.dumps(n["features"], sort_keys=True),
         json.dumps(n["log_accept"]))
        for r in iter_rounds(tree_files(paths))
        for n in r["nodes"]
        if n["feasible"] and n["features"]
    )  # fmt: skip


def test_runs_of_one_setting_share_decisions_and_copies_are_dropped(runs):
    four = collect_examples([runs["bfs4"]], FEATURES, 0.01)
    eight = collect_examples([runs["bfs8"]], FEATURES, 0.01)
    both = collect_examples([runs["bfs4"], runs["bfs8"]], FEATURES, 0.01, weighting="reach")
    assert four.duplicates == eight.duplicates == 0  # one run never repeats a node
    assert both.duplicates > 0 and len(both) + both.duplicates == len(four) + len(eight)
    # Exactly the shared nodes are dropped: what is kept is the union of the two runs' nodes.
    shared = node_multiset([runs["bfs4"]]) & node_multiset([runs["bfs8"]])
    assert both.duplicates == sum(shared.values())
    assert (both.composition[0]["runs"], both.composition[0]["duplicates"]) == (2, both.duplicates)
    # A copy of a run directory adds nothing; another seed is another setting: nothing dropped.
    copy = runs["root"] / "copy_of_bfs4"
    shutil.copytree(runs["bfs4"], copy, dirs_exist_ok=True)
    again = collect_examples([runs["bfs4"], copy], FEATURES, 0.01)
    assert (len(again), again.duplicates) == (len(four), len(four))
    np.testing.assert_array_equal(again.features, four.features)
    other_seed = collect_examples([runs["bfs4"], runs["seed1"]], FEATURES, 0.01)
    assert other_seed.duplicates == 0
    # Copies share their prompt and folds hold out whole prompts: undropped, they stayed in one fold.
    for fitted, held_out in prompt_folds(both.groups, 5, 0):
        assert not set(both.groups[fitted]) & set(both.groups[held_out])


def test_a_node_whose_logged_content_differs_is_not_a_copy(runs, tmp_path):
    """Same setting and place but other numbers (a nondeterministic engine, a diverged chain): kept."""
    changed = tmp_path / "changed"
    shutil.copytree(runs["bfs4"], changed)
    records = [json.loads(line) for line in (changed / "trees.jsonl").read_text().splitlines()]
    records[0]["nodes"][0]["log_accept"] = -0.5
    (changed / "trees.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    pooled = collect_examples([runs["bfs4"], changed], FEATURES, 0.01)
    assert len(pooled) == len(collect_examples([runs["bfs4"]], FEATURES, 0.01)) + 1
    # Trees without their run's config.yaml cannot be matched to a setting: never taken for copies.
    bare = tmp_path / "bare"
    bare.mkdir()
    shutil.copy(runs["bfs4"] / "trees.jsonl", bare / "trees.jsonl")
    assert data.run_info(bare / "trees.jsonl").setting is None
    assert collect_examples([runs["bfs4"], bare], FEATURES, 0.01).duplicates == 0


def test_the_composition_per_sampler_and_traversal_comes_from_each_run(runs):
    pooled = collect_examples([runs["bfs4"], runs["bfs8"], runs["ec"]], FEATURES, 0.01)
    parts = {(p["sampler"], p["traversal"]): p for p in pooled.composition}
    assert set(parts) == {("powermh", "bfs"), ("entropycut", "bfs")}
    assert parts["powermh", "bfs"]["runs"] == 2 and parts["entropycut", "bfs"]["runs"] == 1
    assert sum(p["examples"] for p in parts.values()) == len(pooled)
    assert train.pooling_warning({"samplers": ["entropycut", "powermh"]}).startswith("warning: pooled the trees of 2")
    assert train.pooling_warning({"samplers": ["powermh"]}) is None


def test_training_reports_duplicates_samplers_weighting_and_the_served_fingerprint(runs, tmp_path):
    out = tmp_path / "live" / "p.ckpt"
    work = tmp_path / "work"
    done = subprocess.run(
        [
            sys.executable,
            str(TRAIN),
            f"runs=[{runs['bfs4']},{runs['bfs8']},{runs['ec']}]",
            "folds=2",
            f"output={out}",
            f"hydra.run.dir={work}",
        ],
        capture_output=True,
        text=True,
        timeout=600,
        cwd="/",
    )
    assert done.returncode == 0, done.stderr[-2000:]
    metrics = json.loads((work / "metrics.json").read_text())
    # 1. Copies dropped, counted in the summary and in metrics.json.
    dropped = collect_examples([runs["bfs4"], runs["bfs8"]], ("cut_fraction",), 0.01).duplicates
    assert metrics["duplicates_dropped"] == dropped > 0
    assert f"{dropped} duplicates dropped" in done.stdout
    # 2. What was pooled, per sampler and traversal, and a warning for several samplers.
    assert metrics["samplers"] == ["entropycut", "powermh"]
    assert {(p["sampler"], p["traversal"], p["runs"]) for p in metrics["composition"]} == {
        ("powermh", "bfs", 2),
        ("entropycut", "bfs", 1),
    }
    assert "powermh/bfs: 2 runs" in done.stdout and "entropycut/bfs: 1 run," in done.stdout
    assert "warning: pooled the trees of 2 samplers (entropycut, powermh)" in done.stderr
    # 3. Which numbers are weighted: counts are nodes, shares and CV follow the weighting (reach).
    assert sum(metrics["class_counts"].values()) == metrics["examples"]
    assert metrics["weighting_of"] == {
        "class_counts": "none (nodes, each counted once)",
        "class_shares": "reach",
        "cross_validation": "reach",
    }
    assert "(unweighted)" in done.stdout and "(reach-weighted)" in done.stdout
    # 4. The fingerprint hot-loading computes, printed last and stored.
    served = load_predictor(out).fingerprint
    assert metrics["fingerprint"] == served
    assert json.loads(Path(f"{out}.metrics.json").read_text())["fingerprint"] == served
    assert done.stdout.rstrip().splitlines()[-1] == f"checkpoint {out} (fingerprint {served})"
    assert format_metrics(metrics).endswith(f"(fingerprint {served})")
    # ... and the one a predictive run serving the checkpoint logs with its rounds.
    run = tmp_path / "predictive"
    args = toy_args(runs["table"], run, "run.progress=false", "traversal=predictive", f"traversal.predictor={out}")
    assert run_cli(*args).returncode == 0
    logged = {r["plan"]["predictor"] for r in iter_rounds([run / "trees.jsonl"]) if "plan" in r}
    assert logged == {served}


def test_a_rejected_model_has_no_fingerprint(tmp_path):
    from presto.predictor.train import ModelSettings, train_predictor
    from tests.test_predictor_inputs import FLAT, write_trees

    examples = collect_examples([write_trees(tmp_path / "flat", {"a": FLAT, "b": FLAT})], ("cut_fraction",), 0.01)
    metrics = train_predictor(examples, ModelSettings(), tmp_path / "w", None, folds=2, require_improvement=True)
    assert metrics["checkpoint"] is None and metrics["fingerprint"] is None


def test_a_damaged_middle_line_is_skipped_with_a_warning_a_torn_last_line_silently(tmp_path, capsys):
    """A bad line mid-file drops a round from training and the oracle replay: say so, naming it."""
    from presto.predictor.data import iter_rounds

    trees = tmp_path / "trees.jsonl"
    trees.write_text('{"round": 0}\n{"round": 1, "nod\n{"round": 2}\n{"round": 3, "torn')
    assert [r["round"] for r in iter_rounds([trees])] == [0, 2]
    err = capsys.readouterr().err
    assert f"warning: {trees}: line 2 is not JSON; skipped" in err and "line 4" not in err
