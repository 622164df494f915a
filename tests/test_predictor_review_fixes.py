"""Predictor training and serving on inputs a review found mishandled.

A class logged in one prompt only (the improvement gate and the baselines), early stopping
on whole prompts, checkpoints of the wrong structure, a diverged fit, and the reference's
convergence.
"""

from __future__ import annotations

import json
import math
import subprocess
import warnings

import numpy as np
import pytest
import torch

from presto.predictor.data import Examples
from presto.predictor.features import CLASSES
from presto.predictor.hotload import HotPredictor, PredictorError, load_predictor
from presto.predictor.train import (
    ModelSettings,
    UnservableModelError,
    _sklearn_logistic,
    absent_class_warning,
    cross_validate,
    format_metrics,
    non_finite_warning,
    prompt_folds,
    train_predictor,
)
from tests.conftest import PROJECT_ROOT

REJECT, ACCEPT, UNCERTAIN = (CLASSES.index(c) for c in ("reject", "accept", "uncertain"))
DEFAULT = PROJECT_ROOT / "src" / "presto" / "predictor" / "default" / "powermh.ckpt"
RETRAIN = PROJECT_ROOT / "scripts" / "retrain_predictor.sh"
MLP = ModelSettings("mlp", (4,), 1e-3, "adam", 1e-2, max_epochs=2, batch_size=50, val_fraction=0.1, patience=2)


def noise_examples(prompts: int = 10, nodes: int = 40, seed: int = 0) -> Examples:
    """Pure-noise features; accept 70 %, uncertain 30 %, and 4 rejections, all in prompt 0 (the review's syn1)."""
    rng = np.random.default_rng(seed)
    labels = np.where(rng.random(prompts * nodes) < 0.7, ACCEPT, UNCERTAIN)
    labels[:4] = REJECT
    groups = np.repeat([f"p{i}" for i in range(prompts)], nodes)
    return Examples(rng.random((prompts * nodes, 1)), labels, groups, ("cut_fraction",), ("synthetic",))


def test_the_gate_refuses_a_noise_model_when_a_class_lives_in_one_prompt(tmp_path):
    """The fold holding prompt 0 trains without rejections: a 1e-15 floor made the baselines lose there."""
    examples = noise_examples()
    out = tmp_path / "live" / "p.ckpt"
    metrics = train_predictor(examples, ModelSettings(), tmp_path / "work", out, folds=5, require_improvement=True)
    cv = metrics["cross_validation"]
    assert not metrics["beats_class_frequencies"] and metrics["checkpoint"] is None and not out.exists()
    # The baselines never pay 34.5 nats per unseen node: theirs cost less than the softmax's.
    assert cv["frequencies"]["log_loss"] < cv["model"]["log_loss"]
    assert cv["sklearn_logistic"]["log_loss"] < cv["model"]["log_loss"]
    # The held-out rejections had no rejection in their training fold: recorded, and warned about.
    assert cv["unseen_class_nodes"] == 4
    assert [part["classes"] for part in cv["absent_classes"]] == [["reject"]]
    assert "4 held-out nodes of class(es) reject" in absent_class_warning(metrics)
    saved = json.loads((tmp_path / "work" / "metrics.json").read_text())
    assert saved["cross_validation"]["unseen_class_nodes"] == 4


def test_a_class_absent_from_the_training_fold_gets_its_add_one_share():
    """Baseline and reference give an absent class (0 + 1) / (n + 3), not 1e-15; folds with every class are plain."""
    x = np.linspace(0.0, 1.0, 20)[:, None]
    y = np.where(x[:, 0] > 0.5, ACCEPT, UNCERTAIN)  # no rejection: 20 nodes, 2 classes
    reference, constant = _sklearn_logistic(x, y, x, np.full(20, 3.0))  # the weights' scale does not matter
    assert not constant and np.allclose(reference[:, REJECT], 1 / 23)
    np.testing.assert_allclose(reference.sum(axis=1), 1.0)
    one_class, constant = _sklearn_logistic(x, np.full(20, ACCEPT), x, np.ones(20))
    assert constant
    expected = np.zeros(3)
    expected[[REJECT, UNCERTAIN, ACCEPT]] = [1 / 23, 1 / 23, 21 / 23]
    np.testing.assert_allclose(one_class, np.tile(expected, (20, 1)))
    # Every class in every training fold: the frequencies are the plain shares, as before.
    every = Examples(
        np.zeros((60, 1)), np.tile([REJECT, ACCEPT, ACCEPT], 20), np.repeat(np.arange(6), 10), ("cut_fraction",), ()
    )
    cv = cross_validate(every, ModelSettings(max_epochs=2), folds=3, seed=0, epsilon=0.01)
    assert cv["unseen_class_nodes"] == 0 and cv["absent_classes"] == []
    assert cv["frequencies"]["log_loss"] == pytest.approx(-(np.log(1 / 3) + 2 * np.log(2 / 3)) / 3, abs=0.02)


def test_folds_deal_the_prompts_of_a_rare_class_apart_and_deterministically():
    """Two prompts hold all rejections: stratified folds put them in different folds, for every seed."""
    labels = np.full(100, ACCEPT)
    labels[[0, 1, 10, 11]] = REJECT  # prompts 0 and 1
    labels[50:60] = UNCERTAIN
    groups = np.repeat(np.arange(10), 10)
    for seed in range(8):
        folds = prompt_folds(groups, 5, seed, labels=labels)
        assert len(folds) == 5 and all(np.any(labels[train] == REJECT) for train, _ in folds)
        held = np.concatenate([test for _, test in folds])
        assert sorted(held) == list(range(100))
        assert all(not set(groups[train]) & set(groups[test]) for train, test in folds)
        again = prompt_folds(groups, 5, seed, labels=labels)
        assert all(np.array_equal(a[1], b[1]) for a, b in zip(folds, again, strict=True))


def test_early_stopping_holds_out_whole_prompts():
    from presto.predictor.module import validation_split

    groups = np.repeat([f"p{i}" for i in range(20)], 7)
    val, train, made = validation_split(len(groups), 0.1, 3, groups)
    assert made == {"split": "prompts", "prompts": 2, "nodes": 14}
    assert not set(groups[val]) & set(groups[train]) and len(val) + len(train) == len(groups)
    again = validation_split(len(groups), 0.1, 3, groups)
    assert np.array_equal(again[0], val)  # a function of the seed
    # One prompt cannot be split into whole prompts, and one of 4 is 25 % (> twice 10 %):
    # the nodes are split, and the description says so.
    val, train, made = validation_split(30, 0.1, 0, np.zeros(30))
    assert made["split"] == "nodes" and len(val) == 3 and len(train) == 27
    assert validation_split(40, 0.1, 0, np.repeat(np.arange(4), 10))[2]["split"] == "nodes"
    five = validation_split(50, 0.1, 0, np.repeat(np.arange(5), 10))[2]
    assert five == {"split": "prompts", "prompts": 1, "nodes": 10}
    assert validation_split(30, 0.0, 0, groups[:30])[2]["split"] is None


def test_fits_validate_on_prompts_they_do_not_train_on(monkeypatch, tmp_path):
    """What reaches Lightning's validation loader: whole prompts, in CV folds and in the final refit."""
    import lightning as L

    from presto.predictor.module import fit_classifier

    examples = noise_examples(prompts=10, nodes=10)
    examples = Examples(
        np.repeat(np.arange(10.0), 10)[:, None], examples.labels, examples.groups, ("cut_fraction",), ("synthetic",)
    )  # the feature names the prompt: the loaders show which prompts they hold
    seen: list[tuple[set, set]] = []
    fit = L.Trainer.fit

    def spy(trainer, module, train_dataloaders=None, val_dataloaders=None, **kwargs):
        train, val = (
            {float(v) for v in loader.dataset.tensors[0][:, 0]} for loader in (train_dataloaders, val_dataloaders)
        )
        seen.append((train, val))
        return fit(trainer, module, train_dataloaders=train_dataloaders, val_dataloaders=val_dataloaders, **kwargs)

    monkeypatch.setattr(L.Trainer, "fit", spy)
    module = fit_classifier(examples.features, examples.labels, ("cut_fraction",), MLP, groups=examples.groups)
    assert module.validation == {"split": "prompts", "prompts": 1, "nodes": 10}
    metrics = train_predictor(examples, MLP, tmp_path / "work", None, folds=2)
    assert metrics["cross_validation"]["early_stopping"] == ["prompts", "prompts"]
    assert metrics["early_stopping"] == {"split": "prompts", "prompts": 1, "nodes": 10}
    assert len(seen) == 4 and all(val and not train & val for train, val in seen)


def good_payload() -> dict:
    return torch.load(DEFAULT, map_location="cpu", weights_only=True)


def malformed_payloads() -> dict[str, object]:
    good = good_payload()

    def with_hp(**changes):
        return {**good, "hyper_parameters": {**good["hyper_parameters"], **changes}}

    return {
        "hyper_parameters_list": {"hyper_parameters": [1], "state_dict": {}},
        "classes_int": with_hp(classes=3),
        "feature_names_int": with_hp(feature_names=7),
        "feature_names_of_ints": with_hp(feature_names=[1, 2]),
        "epsilon_none": with_hp(epsilon=None),
        "epsilon_text": with_hp(epsilon="abc"),
        "epsilon_nan": with_hp(epsilon=float("nan")),
        "state_dict_list": {**good, "state_dict": [1, 2]},
    }


@pytest.mark.parametrize("name", sorted(malformed_payloads()))
def test_a_checkpoint_of_the_wrong_structure_is_a_predictor_error(name, tmp_path):
    """At start one line (PredictorError); during a run a warning, and the previous predictor stays."""
    path = tmp_path / "p.ckpt"
    torch.save(malformed_payloads()[name], path)
    with pytest.raises(PredictorError, match=str(path)):
        load_predictor(path)
    live = tmp_path / "live.ckpt"
    torch.save(good_payload(), live)
    hot = HotPredictor(live)
    before = hot.current()
    staged = tmp_path / "staged.ckpt"
    torch.save(malformed_payloads()[name], staged)
    staged.replace(live)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert hot.current() is before
    assert any("keeping the previous predictor" in str(w.message) for w in caught)


@pytest.mark.parametrize(
    ("sampler", "fingerprint"),
    [("powermh", "3d10d1e8b671"), ("entropycut", "6779dc384821"), ("multitry", "9f750276be37")],
)
def test_the_shipped_defaults_still_load(sampler, fingerprint):
    """The shipped models, unchanged (HOW_IT_WAS_MADE.md and the README name these fingerprints)."""
    from presto.predictor import default_checkpoint

    served = load_predictor(default_checkpoint(sampler))
    assert served.fingerprint == fingerprint and served.epsilon == 0.01


def diverging_examples() -> Examples:
    rng = np.random.default_rng(1)
    labels = np.tile([REJECT, ACCEPT, UNCERTAIN, ACCEPT], 25)
    return Examples(rng.random((100, 1)), labels, np.repeat(np.arange(5), 20), ("cut_fraction",), ("synthetic",))


DIVERGING = ModelSettings("mlp", (8,), 1e-3, "adam", 1e30, max_epochs=3, batch_size=50)


def test_a_diverged_fit_leaves_strict_json_metrics_and_installs_nothing(tmp_path):
    out = tmp_path / "live" / "p.ckpt"
    with pytest.raises(UnservableModelError, match=r"cannot be served.*no checkpoint was written"):
        train_predictor(diverging_examples(), DIVERGING, tmp_path / "work", out, folds=2)
    assert not out.exists() and not out.with_name("p.ckpt.metrics.json").exists()
    text = (tmp_path / "work" / "metrics.json").read_text()
    metrics = json.loads(text, parse_constant=lambda token: pytest.fail(f"{token} in metrics.json"))
    assert "cross_validation.model.log_loss" in metrics["non_finite"]
    assert metrics["cross_validation"]["model"]["log_loss"] is None
    assert metrics["checkpoint"] is None and metrics["fingerprint"] is None
    assert metrics["checkpoint_error"].startswith("not servable")
    assert "not finite" in non_finite_warning(metrics) and "not written (not servable" in format_metrics(metrics)


def test_the_retraining_script_does_not_install_a_diverged_model_even_with_force(tmp_path):
    trees = tmp_path / "run" / "trees.jsonl"
    trees.parent.mkdir()
    examples = diverging_examples()
    with trees.open("w") as handle:
        rows = zip(examples.features[:, 0], examples.labels, examples.groups, strict=True)
        for i, (x, label, group) in enumerate(rows):
            log_accept = {REJECT: math.log(0.001), ACCEPT: 0.0, UNCERTAIN: math.log(0.5)}[int(label)]
            node = {"id": 0, "parent": None, "depth": 0, "feasible": True, "log_accept": log_accept}
            node["features"] = {"cut_fraction": float(x)}
            handle.write(json.dumps({"prompt_id": f"p{group}", "chain": 0, "round": i, "nodes": [node]}) + "\n")
    out = tmp_path / "live" / "p.ckpt"
    options = ["--out", str(out), "--workdir", str(tmp_path / "work"), "--force"]
    # DIVERGING as overrides: no early stopping, which would keep the weights of a finite epoch.
    model = ["predictor=mlp16", "predictor.hidden=[8]", "predictor.learning_rate=1e30", "predictor.max_epochs=3"]
    overrides = [*model, "predictor.batch_size=50", "predictor.val_fraction=0.0", "folds=2"]
    done = subprocess.run(
        ["bash", str(RETRAIN), str(trees.parent), *options, *overrides],
        capture_output=True,
        text=True,
        timeout=600,
        cwd="/",
    )
    assert done.returncode == 1, done.stderr[-2000:]
    assert "cannot be served" in done.stderr and "installed" not in done.stdout
    assert not out.exists() and json.loads((tmp_path / "work" / "metrics.json").read_text())["non_finite"]


def test_the_sklearn_reference_is_converged():
    """Nearly collinear features: scikit-learn's default tol=1e-4 stops ~5e-4 short in probability."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    rng = np.random.default_rng(0)
    a = rng.normal(size=300)
    x = np.c_[a, a + 1e-3 * rng.normal(size=300), rng.normal(size=300)]
    y = (a + 0.5 * rng.normal(size=300) > 0).astype(int) + (a > 1).astype(int)
    exact = make_pipeline(StandardScaler(), LogisticRegression(C=1.0, tol=1e-14, max_iter=1_000_000)).fit(x, y)
    reference, _ = _sklearn_logistic(x, y, x, np.ones(300))
    np.testing.assert_allclose(reference, exact.predict_proba(x), atol=1e-6)
