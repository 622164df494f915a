"""Predictor training settings a second review found mishandled.

``features=cut`` (Hydra's spelling of a one-element list) was read letter by letter, and
model settings of the wrong type or range (an unknown optimizer, a fractional epoch count,
a bare hidden width) passed the checks made before the trees are read: they failed later,
after the trees were read and training had started, one as a traceback.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from presto.config import ConfigError
from presto.predictor.features import resolve_features
from presto.predictor.train import ModelSettings, run_training
from tests.conftest import PROJECT_ROOT


def training_config(*overrides: str):
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(str(PROJECT_ROOT / "conf"), version_base="1.3"):
        return compose("train_predictor", overrides=list(overrides))


def write_trees(run_dir: Path, prompts: int = 3, nodes: int = 8) -> Path:
    """Root nodes only: late cuts certain accepts, early cuts certain rejects."""
    run_dir.mkdir(parents=True, exist_ok=True)
    with (run_dir / "trees.jsonl").open("w") as handle:
        for p in range(prompts):
            logged = []
            for i in range(nodes):
                cut = (i + 0.5) / nodes
                node = {"id": i, "parent": None, "depth": 0, "feasible": True, "features": {"cut_fraction": cut}}
                node["log_accept"] = 0.0 if cut > 0.5 else -7.0
                logged.append(node)
            handle.write(json.dumps({"prompt_id": f"p{p}", "chain": 0, "round": 0, "nodes": logged}) + "\n")
    return run_dir


def test_one_feature_set_given_without_brackets_is_that_set():
    assert resolve_features("cut") == ("cut_fraction",)
    assert resolve_features("gap_fraction") == ("gap_fraction",)
    with pytest.raises(ValueError, match=r"unknown 'cutt'"):
        resolve_features("cutt")


def test_features_equals_cut_trains_on_the_cut_fraction(tmp_path):
    run = write_trees(tmp_path / "run")
    metrics = run_training(training_config(f"runs=[{run}]", "features=cut", "folds=3"), tmp_path / "out")
    assert metrics["features"] == ["cut_fraction"]


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("predictor.optimizer=sgd", r"predictor\.optimizer must be 'lbfgs' or 'adam', got 'sgd'"),
        ("predictor.max_epochs=2.5", r"predictor\.max_epochs must be an integer >= 1, got 2\.5"),
        ("predictor.patience=-1", r"predictor\.patience must be an integer >= 0, got -1"),
        ("predictor.hidden=16", r"predictor\.hidden must be a list of layer widths.*got 16"),
        ("predictor.hidden=[16.5]", r"predictor\.hidden must hold positive layer widths"),
        ("predictor.l2=null", r"predictor\.l2 must be a number, got None"),
        ("predictor.learning_rate=abc", r"predictor\.learning_rate must be a number, got 'abc'"),
    ],
)
def test_bad_model_settings_are_config_errors_before_any_tree_is_read(override, message, tmp_path):
    # The run directory does not exist: a setting checked only later would surface as
    # FileNotFoundError (or, had the trees been there, after training had started).
    cfg = training_config(f"runs=[{tmp_path / 'missing'}]", override)
    with pytest.raises(ConfigError, match=message):
        run_training(cfg, tmp_path / "out")


def test_the_shipped_model_configs_are_valid_settings():
    from omegaconf import OmegaConf

    for path in sorted((PROJECT_ROOT / "conf" / "predictor").glob("*.yaml")):
        values = OmegaConf.to_container(OmegaConf.load(path))
        ModelSettings(**{**values, "hidden": tuple(values["hidden"])})


def test_early_stopping_monitors_the_weighted_validation_loss(monkeypatch):
    """Lightning averages a logged value over batches by their node counts, not their weights:
    with several validation batches the monitored val_loss was not the weighted loss."""
    import lightning as L
    import numpy as np
    import torch

    from presto.predictor.module import fit_classifier, validation_split

    rng = np.random.default_rng(0)
    groups = np.repeat([f"p{i}" for i in range(10)], 40)
    x = rng.random((400, 1))
    y = (x[:, 0] > 0.5).astype(np.int64) + (rng.random(400) < 0.2)
    w = np.where(np.arange(400) % 40 < 20, 5.0, 0.05)  # heavy and light nodes in every prompt
    settings = ModelSettings("mlp", (4,), 1e-3, "adam", 1e-2, max_epochs=1, batch_size=8, val_fraction=0.1)
    trainers = []
    fit = L.Trainer.fit

    def spy(trainer, *args, **kwargs):
        trainers.append(trainer)
        return fit(trainer, *args, **kwargs)

    monkeypatch.setattr(L.Trainer, "fit", spy)
    module = fit_classifier(x, y, ("cut_fraction",), settings, seed=0, weights=w, groups=groups)
    val, _, made = validation_split(400, 0.1, 0, groups)
    assert made["split"] == "prompts" and len(val) > settings.batch_size
    with torch.no_grad():
        logits = module(torch.as_tensor(x[val], dtype=torch.float32))
        losses = torch.nn.functional.cross_entropy(logits, torch.as_tensor(y[val]), reduction="none").numpy()
    # One epoch: the weights validated are the ones returned.
    monitored = float(trainers[0].callback_metrics["val_loss"])
    assert monitored == pytest.approx(np.average(losses, weights=w[val]), rel=1e-5)
