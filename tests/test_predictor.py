"""The epsilon-certainty predictor: features, training with CV by prompt, checkpoints, retraining."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from presto.engines.toy import ToyEngine
from presto.predictor.data import collect_examples
from presto.predictor.features import CLASSES, FEATURE_SETS, label_of, resolve_features
from presto.predictor.hotload import load_predictor
from presto.prefetch.presto import PrefetchStepper
from presto.prefetch.traversal import BreadthFirst
from presto.prefetch.tree import cut_statistics, node_features
from presto.runner.outputs import dumps
from presto.samplers.chain import BlockSchedule, run_chain
from presto.samplers.powermh import PowerMH
from presto.samplers.randomness import ChainKey
from presto.samplers.state import ChainState
from tests.conftest import PROJECT_ROOT, write_toy_table

RETRAIN = PROJECT_ROOT / "scripts" / "retrain_predictor.sh"


def log_toy_trees(run_dir: Path, prompts: int, seed: int = 1) -> Path:
    """trees.jsonl of BFS chains on a toy engine, one prompt per chain, as run.py writes it."""
    run_dir.mkdir(parents=True, exist_ok=True)
    engine = ToyEngine(write_toy_table(run_dir / "table.json", vocab=8, seed=seed, scale=2.0))
    kernel = PowerMH(4.0, 0.25)
    with (run_dir / "trees.jsonl").open("w") as handle:
        for prompt in range(prompts):
            rounds: list[dict] = []
            stepper = PrefetchStepper(BreadthFirst(), 8, rounds.append, 256)
            run_chain(kernel, engine, stepper, [], ChainKey(0, prompt, 0), BlockSchedule(24, 24, 30))
            for i, record in enumerate(rounds):
                handle.write(dumps({"prompt_id": f"toy/{prompt}", "chain": 0, "round": i, **record}) + "\n")
    return run_dir


@pytest.fixture(scope="module")
def toy_runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("toy_runs")
    return [log_toy_trees(root / "a", prompts=6, seed=1), log_toy_trees(root / "b", prompts=4, seed=1)]


@pytest.fixture(scope="module")
def retrained(toy_runs, tmp_path_factory):
    """One retraining job through scripts/retrain_predictor.sh (which runs src/train_predictor.py)."""
    root = tmp_path_factory.mktemp("retrain")
    out = root / "live" / "predictor.ckpt"
    result = subprocess.run(
        ["bash", str(RETRAIN), *map(str, toy_runs), "--out", str(out), "--workdir", str(root / "work")],
        capture_output=True,
        text=True,
        timeout=600,
        cwd="/",
    )
    return result, out, root / "work"


def test_cut_statistics_and_node_features():
    values = np.array([-1.0, -2.0, -0.5, -3.0])
    assert cut_statistics(values, 0) == (-1.0, 0.0, -1.0, np.mean(values))
    assert cut_statistics(values, 2) == (-0.5, 1.5, -2.5, -1.75)
    assert cut_statistics(values, 3) == (-3.0, -2.5, 0.0, -3.0)
    root = ChainState(np.arange(4), np.zeros(4), values, values * 2, np.zeros((4, 0)))
    features = node_features(root, cut=1, depth=3, node_cut=2, accepts=1)
    assert features["cut_fraction"] == 0.25 and features["gap"] == 1 and features["parent_cut_fraction"] == 0.5
    for names in FEATURE_SETS.values():
        assert set(names) <= set(features)
    assert resolve_features(["cut", "tree", "cut_fraction"]) == ("cut_fraction", *FEATURE_SETS["tree"])


def test_labels_are_epsilon_classes():
    assert [label_of(x, 0.01) for x in (None, math.log(0.005), math.log(0.5), math.log(0.995), 0.0)] == [
        CLASSES.index("reject"),
        CLASSES.index("reject"),
        CLASSES.index("uncertain"),
        CLASSES.index("accept"),
        CLASSES.index("accept"),
    ]


def test_reach_weights_are_the_walks_visiting_probabilities(toy_runs):
    from presto.predictor.data import iter_rounds, reaching_probabilities, tree_files

    for record in list(iter_rounds(tree_files(toy_runs)))[:20]:
        reach = reaching_probabilities(record["nodes"])
        by_depth: dict[int, float] = {}
        for node in record["nodes"]:
            by_depth[node["depth"]] = by_depth.get(node["depth"], 0.0) + reach[node["id"]]
        assert by_depth[0] == 1.0 and all(total <= 1.0 + 1e-9 for total in by_depth.values())
        # The walk is at exactly one node per depth it reaches: total mass 1 on complete logged depths.
        assert by_depth.get(1, 1.0) == pytest.approx(1.0)
    examples = collect_examples(toy_runs, ("cut_fraction",), 0.01, weighting="reach")
    assert examples.weights is not None and examples.weights.max() <= 1.0
    assert sum(examples.class_shares().values()) == pytest.approx(1.0)


def test_examples_come_from_feasible_nodes_grouped_by_prompt(toy_runs):
    examples = collect_examples(toy_runs, resolve_features(["cut", "tree", "likelihood", "entropy"]), 0.01)
    assert examples.features.shape == (len(examples), 13) and len(set(examples.groups)) == 6
    assert all(count > 0 for count in examples.class_counts().values())


def test_retraining_beats_the_class_frequencies_and_writes_metrics(retrained):
    result, out, work = retrained
    assert result.returncode == 0, result.stderr[-2000:]
    assert out.is_file() and out.stat().st_size < 20_000
    metrics = json.loads((work / "metrics.json").read_text())
    assert json.loads(Path(f"{out}.metrics.json").read_text()) == metrics
    cv = metrics["cross_validation"]
    assert cv["folds"] == 5 and metrics["prompts"] == 6
    assert cv["model"]["log_loss"] < cv["frequencies"]["log_loss"]
    # Lightning's L-BFGS fit reaches scikit-learn's optimum of the same penalized objective.
    assert cv["model"]["log_loss"] == pytest.approx(cv["sklearn_logistic"]["log_loss"], abs=0.01)
    assert {"accuracy"} <= set(cv["majority"]) and metrics["beats_class_frequencies"]
    assert "sklearn_logistic" in result.stdout and "frequencies" in result.stdout


def test_checkpoint_loads_without_hydra_and_matches_the_served_predictor(retrained):
    from presto.predictor.module import EpsilonClassifier

    _, out, _ = retrained
    module = EpsilonClassifier.load_from_checkpoint(out, map_location="cpu")
    served = load_predictor(out)
    x = np.linspace(0.0, 1.0, 11)[:, None]
    np.testing.assert_allclose(module.predict_proba(x), served.predict_proba(x), atol=1e-6)
    assert module.hparams.feature_names == ["cut_fraction"] and module.hparams.hidden == []


def test_mlp_trains_with_early_stopping_and_round_trips(toy_runs, tmp_path):
    from presto.predictor.module import EpsilonClassifier, fit_classifier, save_checkpoint
    from presto.predictor.train import ModelSettings

    names = resolve_features(["cut", "tree"])
    examples = collect_examples(toy_runs, names, 0.01)
    settings = ModelSettings(
        "mlp16x2", (16, 16), 1e-3, "adam", 1e-2, max_epochs=15, batch_size=200, val_fraction=0.1, patience=3
    )
    module = fit_classifier(examples.features, examples.labels, names, settings)
    path = save_checkpoint(module, tmp_path / "mlp.ckpt")
    again = EpsilonClassifier.load_from_checkpoint(path, map_location="cpu")
    x = examples.features[:20]
    np.testing.assert_allclose(again.predict_proba(x), load_predictor(path).predict_proba(x), atol=1e-5)
    assert len(load_predictor(path).layers) == 3


def test_a_useless_model_is_not_installed_and_train_predictor_reports_bad_input(toy_runs, tmp_path):
    from presto.predictor.train import ModelSettings, train_predictor

    out = tmp_path / "kept.ckpt"
    out.write_bytes(b"previous")
    # A constant feature (one block length) carries no information: no better than the frequencies.
    examples = collect_examples(toy_runs[:1], ("length",), 0.01)
    metrics = train_predictor(examples, ModelSettings(), tmp_path / "work", out, folds=2, require_improvement=True)
    assert not metrics["beats_class_frequencies"] and metrics["checkpoint"] is None
    assert out.read_bytes() == b"previous" and (tmp_path / "work" / "metrics.json").is_file()
    bad = subprocess.run(
        [
            sys.executable,
            str(PROJECT_ROOT / "src" / "train_predictor.py"),
            f"runs=[{tmp_path / 'none'}]",
            f"hydra.run.dir={tmp_path / 'bad'}",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert bad.returncode == 2 and "no such run directory" in bad.stderr and "Traceback" not in bad.stderr
