"""Tests that kill the mutants a hand mutation review of predictor training found surviving.

Each test names the mutants it kills (ids of the review: N = predictor/train.py, M =
predictor/module.py). The cross-validation numbers are checked against hand computations on
two-prompt data sets, where holding out whole prompts leaves one way to deal the folds: each
fold trains on one prompt and scores the other. The model is replaced by a stub with a known
constant prediction where only the bookkeeping around it is under test (fast, and exact),
and scikit-learn's reference is refitted independently.
"""

from __future__ import annotations

import math
from dataclasses import asdict
from typing import ClassVar

import numpy as np
import pytest
import yaml

from presto.predictor.data import Examples
from presto.predictor.features import CLASSES
from presto.predictor.train import (
    IMPROVEMENT_MARGIN,
    ModelSettings,
    cross_validate,
    finite_metrics,
    fold_frequencies,
    prompt_folds,
    train_predictor,
)
from tests.conftest import PROJECT_ROOT

REJECT, ACCEPT, UNCERTAIN = (CLASSES.index(c) for c in ("reject", "accept", "uncertain"))
STUB_Q = np.array([0.2, 0.3, 0.5])  # the stub model's prediction for every node, in CLASSES order


class StubModule:
    """What cross_validate needs of a fitted classifier: predict_proba and the split made."""

    validation: ClassVar[dict] = {"split": None, "prompts": 0, "nodes": 0}

    def predict_proba(self, features: np.ndarray) -> np.ndarray:
        return np.tile(STUB_Q, (len(features), 1))


@pytest.fixture
def stub_fits(monkeypatch):
    """Replace fit_classifier by the stub; the list records each fit's arguments, in call order."""
    from presto.predictor import module as module_py

    calls: list[dict] = []

    def fit(features, labels, feature_names, settings, seed=0, epsilon=0.01, weights=None, groups=None, **kw):
        calls.append(
            {"x": np.array(features), "y": np.array(labels), "seed": seed, "weights": weights, "groups": groups}
        )
        return StubModule()

    monkeypatch.setattr(module_py, "fit_classifier", fit)
    return calls


def two_prompts(labels_a, labels_b, weights_a=None, weights_b=None) -> Examples:
    labels = np.array([*labels_a, *labels_b], dtype=np.int64)
    n = len(labels)
    weights = None if weights_a is None else np.array([*weights_a, *weights_b], dtype=np.float64)
    features = np.linspace(0.0, 1.0, n)[:, None] + 0.3 * (labels == ACCEPT)[:, None]
    groups = np.array(["a"] * len(labels_a) + ["b"] * len(labels_b))
    return Examples(features, labels, groups, ("cut_fraction",), ("synthetic",), weights=weights)


def nll(probabilities: np.ndarray, labels: np.ndarray, weights: np.ndarray) -> float:
    return float(-(weights * np.log(probabilities[np.arange(len(labels)), labels])).sum())


def reference_probabilities(x_train, y_train, w_train, x_test) -> np.ndarray:
    """scikit-learn's LogisticRegression with lambda = 1 (C = 1) on standardized features, the weights
    scaled to mean 1 (the sum of weighted log losses + lambda / 2 |w|^2), fitted to convergence."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    model = make_pipeline(StandardScaler(), LogisticRegression(C=1.0, tol=1e-12, max_iter=1_000_000))
    model.fit(x_train, y_train, logisticregression__sample_weight=w_train / w_train.mean())
    out = np.zeros((len(x_test), len(CLASSES)))
    out[:, model.classes_] = model.predict_proba(x_test)
    return out


# --- cross-validation: pooled, weighted scores and baselines ------------------------------------


def test_pooled_scores_weigh_every_held_out_node_and_baselines_are_fitted_on_the_training_prompt(stub_fits):
    """N1/N35 (log loss unweighted), N2 (log loss a sum / n), N3 (accuracy unweighted), N5 (the
    log loss of another class), N33 (the fold's frequencies unweighted), N38 (frequencies fitted on
    all nodes, held-out ones included), N32 (majority = the rarest class), N34 (majority accuracy
    unweighted), N22 (reference fitted without the weights), N24 (reference at another C), N36
    (folds reported as asked, not as made), N39 (model columns permuted), N27/N28 (fold k not
    fitted with seed + k, or without its weights), N9/N10/N11 through the same folds.

    Two prompts: each fold trains on one and scores the other. Prompt a weighs its rejection 4,
    prompt b its uncertain node 6, so weighted and unweighted majorities differ in both folds."""
    examples = two_prompts(
        [REJECT, ACCEPT, ACCEPT, UNCERTAIN], [REJECT, ACCEPT, ACCEPT, UNCERTAIN], [4, 1, 1, 1], [1, 1, 1, 6]
    )
    y, w, x = examples.labels, examples.sample_weights, examples.features
    a, b = slice(0, 4), slice(4, 8)
    cv = cross_validate(examples, ModelSettings(), folds=5, seed=7, epsilon=0.01)

    assert cv["folds"] == 2 and len(stub_fits) == 2
    assert [call["seed"] for call in stub_fits] == [7, 8]  # fold k fits with seed + k
    for call in stub_fits:
        trained = a if call["y"].tolist() == y[a].tolist() and np.allclose(call["x"], x[a]) else b
        np.testing.assert_array_equal(call["weights"], w[trained])
        assert set(call["groups"]) == {"a" if trained == a else "b"}
    total = w.sum()
    # The model predicts STUB_Q everywhere: its scores are weighted means over all 8 nodes.
    stub = np.tile(STUB_Q, (8, 1))
    assert cv["model"]["log_loss"] == pytest.approx(nll(stub, y, w) / total, rel=1e-12)
    assert cv["model"]["accuracy"] == pytest.approx(w[y == UNCERTAIN].sum() / total)  # 7 / 16
    # Frequencies of the training prompt, weighted: a -> (4, 2, 1) / 7, b -> (1, 2, 6) / 9.
    freq_a, freq_b = np.array([4, 2, 1]) / 7, np.array([1, 2, 6]) / 9
    expected = (nll(np.tile(freq_b, (4, 1)), y[a], w[a]) + nll(np.tile(freq_a, (4, 1)), y[b], w[b])) / total
    assert cv["frequencies"]["log_loss"] == pytest.approx(expected, rel=1e-12)
    # Majority (weighted): uncertain when trained on b, reject when trained on a; one hit of weight 1 each.
    assert cv["majority"]["accuracy"] == pytest.approx(2 / 16) and cv["majority"]["log_loss"] is None
    assert cv["frequencies"]["accuracy"] == pytest.approx(2 / 16)
    # The reference: LogisticRegression(C=1), weighted, fitted on the training prompt.
    on_a = reference_probabilities(x[b], y[b], w[b], x[a])
    on_b = reference_probabilities(x[a], y[a], w[a], x[b])
    expected = (nll(on_a, y[a], w[a]) + nll(on_b, y[b], w[b])) / total
    assert cv["sklearn_logistic"]["log_loss"] == pytest.approx(expected, rel=1e-6)
    assert cv["sklearn_logistic"]["constant_folds"] == [] and cv["absent_classes"] == []


def test_a_class_absent_from_a_training_fold_is_recorded_for_that_fold_and_smoothed_over_the_datas_classes(
    stub_fits,
):
    """N17/N18/N25 (the smoothing gives a class the data never holds a share), N20 (add-1/2),
    N29/N30 (constant_folds or absent_classes naming another fold), N31 (unseen nodes counted in
    the training fold), N37 (unseen_class_nodes counting folds, not nodes).

    Prompt a holds 4 acceptances, prompt b 2 acceptances and 2 rejections; no node is uncertain.
    The fold training on a has one class: the reference predicts its frequencies, add-one smoothed
    over the data's two classes: reject 1/6, accept 5/6, uncertain 0 (never scored)."""
    examples = two_prompts([ACCEPT] * 4, [ACCEPT, REJECT, ACCEPT, REJECT])
    y = examples.labels
    cv = cross_validate(examples, ModelSettings(), folds=2, seed=0, epsilon=0.01)
    on_a_alone = [k for k, call in enumerate(stub_fits) if set(call["y"].tolist()) == {ACCEPT}]
    assert len(stub_fits) == 2 and len(on_a_alone) == 1
    fold = on_a_alone[0]
    assert cv["sklearn_logistic"]["constant_folds"] == [fold]
    assert cv["absent_classes"] == [{"fold": fold, "classes": ["reject"], "held_out_nodes": 2}]
    assert cv["unseen_class_nodes"] == 2
    smoothed = np.array([1 / 6, 5 / 6, 0.0])
    plain = np.array([0.5, 0.5, 0.0])  # trained on b: both classes present, plain frequencies
    expected = (nll(np.tile(plain, (4, 1)), y[:4], np.ones(4)) + nll(np.tile(smoothed, (4, 1)), y[4:], np.ones(4))) / 8
    assert cv["frequencies"]["log_loss"] == pytest.approx(expected, rel=1e-12)
    on_a = reference_probabilities(examples.features[4:], y[4:], np.ones(4), examples.features[:4])
    expected = (nll(on_a, y[:4], np.ones(4)) + nll(np.tile(smoothed, (4, 1)), y[4:], np.ones(4))) / 8
    assert cv["sklearn_logistic"]["log_loss"] == pytest.approx(expected, rel=1e-6)


def test_fold_frequencies_smooth_weights_as_node_counts_and_only_the_datas_classes():
    """N15 (weights not scaled to node counts before adding one), N16 (smoothing skipped when
    some class is present), N17/N18 (a class the data lacks smoothed too), N19 (never smoothed),
    N20 (add one half): (count + 1) / (n + |classes|) with the weights scaled to n nodes."""
    # Two acceptances of weight 3, two uncertain nodes of weight 1: as 4 nodes, counts (0, 3, 1).
    labels = np.array([ACCEPT, ACCEPT, UNCERTAIN, UNCERTAIN])
    got = fold_frequencies(labels, np.array([3.0, 3.0, 1.0, 1.0]))
    expected = np.zeros(3)
    expected[[REJECT, ACCEPT, UNCERTAIN]] = np.array([1, 4, 2]) / 7
    np.testing.assert_allclose(got, expected, rtol=1e-12)
    # The data holds rejections and acceptances only: uncertain gets nothing, reject (0 + 1) / (4 + 2).
    accepts = np.full(4, ACCEPT)
    got = fold_frequencies(accepts, np.ones(4), classes=np.array([REJECT, ACCEPT]))
    expected = np.zeros(3)
    expected[[REJECT, ACCEPT]] = [1 / 6, 5 / 6]
    np.testing.assert_allclose(got, expected, rtol=1e-12)
    # Every class of the data present: the plain weighted shares.
    got = fold_frequencies(np.array([REJECT, ACCEPT, ACCEPT]), np.array([2.0, 1.0, 1.0]), np.array([REJECT, ACCEPT]))
    expected = np.zeros(3)
    expected[[REJECT, ACCEPT]] = [0.5, 0.5]
    np.testing.assert_allclose(got, expected, rtol=1e-12)


# --- fold assignment -------------------------------------------------------------------------------


def test_folds_are_never_empty_and_the_seed_deals_them():
    """N12 (a fold the greedy stratified dealing left empty kept: a fit scoring nothing, counted
    in ``folds``), N10/N11 (the seed ignored: every seed deals the same folds), N13."""
    # 4 prompts of 3, 4, 1 and 2 nodes, 5 folds asked: StratifiedGroupKFold leaves a fold empty at seed 0.
    groups = np.repeat(np.arange(4), [3, 4, 1, 2])
    labels = np.array([1, 2, 1, 0, 1, 2, 2, 0, 0, 1])
    folds = prompt_folds(groups, 5, 0, labels=labels)
    assert all(len(test) for _, test in folds)
    assert sorted(np.concatenate([test for _, test in folds]).tolist()) == list(range(10))
    # Ten prompts: the folds of seeds 0..3 are not all the same, stratified or not.
    groups = np.repeat(np.arange(10), 10)
    labels = np.tile([0, 1, 1, 2], 25)

    def dealt(seed, stratified):
        split = prompt_folds(groups, 5, seed, labels=labels if stratified else None)
        return sorted(tuple(sorted(set(groups[test].tolist()))) for _, test in split)

    for stratified in (True, False):
        assert len({tuple(dealt(seed, stratified)) for seed in range(4)}) > 1
    # N13 (one prompt let through to scikit-learn): refused with the reason, whole prompts are held out.
    with pytest.raises(ValueError, match=r"needs >= 2 prompts, got 1"):
        prompt_folds(np.zeros(6), 5, 0, labels=np.array([0, 1, 2, 0, 1, 2]))


def test_a_class_with_as_many_nodes_as_folds_is_stratified_one_per_fold():
    """N8 (stratifying given up when the commonest class has exactly n_splits nodes): ten one-node
    prompts, five of them acceptances, five folds: the closest each fold's shares can come to the
    overall ones is one acceptance per fold, for every seed."""
    labels = np.array([ACCEPT] * 5 + [REJECT] * 3 + [UNCERTAIN] * 2)
    for seed in range(6):
        folds = prompt_folds(np.arange(10), 5, seed, labels=labels)
        assert [int((labels[test] == ACCEPT).sum()) for _, test in folds] == [1] * 5


def test_cross_validation_stratifies_its_folds_so_a_rare_class_is_in_every_training_fold(stub_fits):
    """N9 (cross_validate dealing the folds without the labels), N7 (stratifying given up as soon
    as one class has fewer nodes than folds): rejections live in prompts 0 and 1 only; stratified
    folds deal these apart (never both held out together), so no training fold lacks rejections.
    Unstratified, seed 4 holds both out in one fold."""
    labels = np.full(100, ACCEPT)
    labels[[0, 1, 10, 11]] = REJECT
    labels[5::10] = UNCERTAIN  # in every prompt
    groups = np.repeat(np.arange(10), 10)
    examples = Examples(np.linspace(0, 1, 100)[:, None], labels, groups, ("cut_fraction",), ("synthetic",))
    for seed in (3, 4):
        cv = cross_validate(examples, ModelSettings(), folds=5, seed=seed, epsilon=0.01)
        assert cv["folds"] == 5 and cv["absent_classes"] == [] and cv["unseen_class_nodes"] == 0


# --- train_predictor: the gate, the final fit and what metrics.json holds --------------------------


def fake_cv(model: float, frequencies: float, reference: float) -> dict:
    return {
        "model": {"accuracy": 0.5, "log_loss": model},
        "frequencies": {"accuracy": 0.5, "log_loss": frequencies},
        "sklearn_logistic": {"accuracy": 0.5, "log_loss": reference, "C": 1.0, "constant_folds": []},
        "majority": {"accuracy": 0.5, "log_loss": None},
        "folds": 2,
        "early_stopping": [None, None],
        "absent_classes": [],
        "unseen_class_nodes": 0,
    }


def small_weighted_examples() -> Examples:
    rng = np.random.default_rng(3)
    labels = np.tile([REJECT, ACCEPT, UNCERTAIN, ACCEPT], 6)
    features = rng.random((24, 1)) + labels[:, None]
    weights = rng.uniform(0.5, 2.0, 24)
    groups = np.repeat(["p0", "p1", "p2"], [6, 8, 10])
    return Examples(features, labels, groups, ("cut_fraction",), ("synthetic",), weights=weights)


@pytest.mark.parametrize(
    ("gain", "require", "beats", "written"),
    [(2.0, True, True, True), (0.5, True, False, False), (0.5, False, False, True), (-1.0, False, False, True)],
)
def test_the_gate_needs_a_margin_over_the_class_frequencies_and_the_final_fit_uses_every_node(
    monkeypatch, tmp_path, gain, require, beats, written
):
    """N40/N41/N43 (the margin added, dropped or 100 times larger), N42 (compared with the
    reference instead of the frequencies), N44/N56 (require_improvement ignored or inverted),
    N59 (cross-validation with another seed), N46/N47/N48/N49 (the final fit without the weights,
    the prompts, the seed or the epsilon), N45 (prompts counted as nodes), N53 (class shares
    unweighted), N55 (a setting missing from metrics.json).

    The cross-validation is faked: the model's held-out log loss is the frequencies' minus
    ``gain`` margins; the reference is far better than both, and must not matter."""
    from presto.predictor import module as module_py
    from presto.predictor import train as train_py
    from presto.predictor.hotload import load_predictor

    examples = small_weighted_examples()
    asked: list[tuple] = []

    def cv(examples_, settings, folds, seed, epsilon, progress=None):
        asked.append((folds, seed, epsilon))
        return fake_cv(1.0 - gain * IMPROVEMENT_MARGIN, 1.0, 0.2)

    fits: list[dict] = []
    real_fit = module_py.fit_classifier

    def fit(features, labels, feature_names, settings, seed=0, epsilon=0.01, weights=None, groups=None, **kw):
        fits.append({"seed": seed, "epsilon": epsilon, "weights": weights, "groups": groups, "n": len(labels)})
        return real_fit(features, labels, feature_names, settings, seed, epsilon, weights, groups, **kw)

    monkeypatch.setattr(train_py, "cross_validate", cv)
    monkeypatch.setattr(module_py, "fit_classifier", fit)
    settings = ModelSettings(max_epochs=2)
    out = tmp_path / "live" / "p.ckpt"
    metrics = train_predictor(
        examples, settings, tmp_path / "work", out, folds=3, seed=11, epsilon=0.05, require_improvement=require
    )
    assert asked == [(3, 11, 0.05)]
    assert metrics["beats_class_frequencies"] is beats
    assert (metrics["checkpoint"] == str(out)) is written and out.exists() is written
    # The saved model: one fit on every node, with their weights and prompts, the seed and epsilon given.
    assert len(fits) == 1 and fits[0]["n"] == 24 and fits[0]["seed"] == 11 and fits[0]["epsilon"] == 0.05
    np.testing.assert_array_equal(fits[0]["weights"], examples.weights)
    np.testing.assert_array_equal(fits[0]["groups"], examples.groups)
    if written:
        assert load_predictor(out).epsilon == 0.05
    assert metrics["prompts"] == 3 and metrics["examples"] == 24
    w = examples.weights
    for k, name in enumerate(CLASSES):
        assert metrics["class_shares"][name] == pytest.approx(w[examples.labels == k].sum() / w.sum())
    assert metrics["model"] == {**asdict(settings), "hidden": []}


def test_finite_metrics_nulls_infinities_and_names_list_items():
    """N51 (only NaN replaced: an infinite log loss made metrics.json invalid JSON, a ValueError
    after training), N52 (a list item's path without its index)."""
    import json

    from presto.predictor.train import _dumps

    metrics = {"a": [1.0, float("inf")], "b": {"c": -math.inf, "d": math.nan, "e": 2}, "f": "x"}
    plain = finite_metrics(metrics)
    assert plain["a"] == [1.0, None] and plain["b"] == {"c": None, "d": None, "e": 2} and plain["f"] == "x"
    assert plain["non_finite"] == ["a[1]", "b.c", "b.d"]
    assert json.loads(_dumps(plain))["a"] == [1.0, None]


def test_accuracy_is_no_number_when_any_probability_is_not_finite():
    """N4 (only an all-NaN matrix made the accuracy NaN): a fit whose float32 logits overflow
    on some nodes only (inf - inf in the softmax) gives NaN rows among finite ones; their argmax
    is class 0, which counted as predicted. The weighted accuracy of the finite rows is the plain
    weighted share of hits."""
    from presto.predictor.train import accuracy

    labels = np.array([REJECT, ACCEPT, UNCERTAIN])
    probabilities = np.eye(3)[labels]
    assert accuracy(labels, probabilities, np.array([1.0, 2.0, 3.0])) == 1.0
    probabilities[1] = np.nan
    assert math.isnan(accuracy(labels, probabilities))
    wrong = np.eye(3)[[ACCEPT, ACCEPT, REJECT]]
    assert accuracy(labels, wrong, np.array([1.0, 2.0, 5.0])) == pytest.approx(2 / 8)


def test_epsilon_one_half_is_a_config_error_before_any_tree_is_read(tmp_path):
    """N58 (epsilon = 1/2 let through run_training's check): the classes of eq. 10 need epsilon in
    (0, 1/2); the setting is refused in one line before the runs are read (here they do not exist)."""
    from hydra import compose, initialize_config_dir

    from presto.config import ConfigError
    from presto.predictor.train import run_training

    with initialize_config_dir(str(PROJECT_ROOT / "conf"), version_base="1.3"):
        cfg = compose("train_predictor", overrides=[f"runs=[{tmp_path / 'missing'}]", "epsilon=0.5"])
    with pytest.raises(ConfigError, match=r"epsilon must be in \(0, 1/2\)"):
        run_training(cfg, tmp_path / "work")


def test_the_default_settings_are_the_papers_logistic_regression():
    """N54 (the default l2 not the paper's lambda = 1): ModelSettings() is conf/predictor/logistic.yaml,
    the model the reference (REFERENCE_L2) stands for."""
    from presto.predictor.train import REFERENCE_L2

    shipped = yaml.safe_load((PROJECT_ROOT / "conf" / "predictor" / "logistic.yaml").read_text())
    assert asdict(ModelSettings()) == {**shipped, "hidden": tuple(shipped["hidden"])}
    assert ModelSettings().l2 == REFERENCE_L2


# --- module.py: early stopping and the validation split ---------------------------------------------


def test_early_stopping_stops_patience_epochs_after_the_best(validation_losses):
    """M1 (mode max), M2 (one more epoch of patience): training stops once ``patience`` epochs in
    a row have not lowered the validation loss (or at max_epochs)."""

    from presto.predictor import module as module_py

    losses = validation_losses
    rng = np.random.default_rng(0)
    groups = np.repeat([f"p{i}" for i in range(10)], 20)
    x = rng.random((200, 1))
    y = rng.integers(0, 3, 200)  # noise: the validation loss soon rises
    settings = ModelSettings("mlp", (16,), 1e-3, "adam", 0.3, max_epochs=40, batch_size=8, val_fraction=0.2, patience=3)
    module_py.fit_classifier(x, y, ("cut_fraction",), settings, seed=0, groups=groups)
    best = int(np.argmin(losses))
    assert best + 1 + 3 < 40  # stopped early, not at max_epochs
    assert len(losses) == best + 1 + 3


def test_the_validation_split_rounds_to_the_nearest_count_and_follows_the_fits_seed():
    """M4/M5 (the held-out prompts or nodes truncated, not rounded), M11 (the fit's split made
    with seed 0 whatever its seed)."""
    from presto.predictor.module import fit_classifier, validation_split

    groups = np.repeat(np.arange(17), 3)
    val, train, made = validation_split(len(groups), 0.1, 0, groups)  # 1.7 prompts -> 2
    assert made == {"split": "prompts", "prompts": 2, "nodes": 6} and len(train) == 45
    val, train, made = validation_split(27, 0.1, 0)  # 2.7 nodes -> 3
    assert made == {"split": "nodes", "prompts": 0, "nodes": 3} and len(val) == 3
    # Prompts of 1..12 nodes: the nodes held out name the prompt, so seeds that pick others differ.
    sizes = np.arange(1, 13)
    groups = np.repeat(np.arange(12), sizes)
    rng = np.random.default_rng(0)
    x, y = rng.random((len(groups), 1)), rng.integers(0, 3, len(groups))
    settings = ModelSettings("mlp", (2,), 1e-3, "adam", 1e-2, max_epochs=1, batch_size=100, val_fraction=0.1)
    for seed in (0, 2):
        module = fit_classifier(x, y, ("cut_fraction",), settings, seed=seed, groups=groups)
        assert module.validation == validation_split(len(groups), 0.1, seed, groups)[2]
    assert validation_split(len(groups), 0.1, 0, groups)[2] != validation_split(len(groups), 0.1, 2, groups)[2]


def test_minibatches_are_of_the_configured_size_and_shuffled(monkeypatch):
    """M6 (minibatches never shuffled: Adam saw the nodes in the same order every epoch), M7
    (batch_size ignored: every fit full-batch)."""
    import lightning as L
    from torch.utils.data import RandomSampler, SequentialSampler

    from presto.predictor.module import fit_classifier

    seen = []
    fit = L.Trainer.fit

    def spy(trainer, module, train_dataloaders=None, val_dataloaders=None, **kwargs):
        seen.append(train_dataloaders)
        return fit(trainer, module, train_dataloaders=train_dataloaders, val_dataloaders=val_dataloaders, **kwargs)

    monkeypatch.setattr(L.Trainer, "fit", spy)
    rng = np.random.default_rng(0)
    x, y = rng.random((40, 1)), rng.integers(0, 3, 40)
    fit_classifier(x, y, ("cut_fraction",), ModelSettings("mlp", (2,), 1e-3, "adam", 1e-2, max_epochs=1, batch_size=8))
    fit_classifier(x, y, ("cut_fraction",), ModelSettings(max_epochs=1))
    minibatch, full = seen
    assert minibatch.batch_size == 8 and isinstance(minibatch.sampler, RandomSampler)
    assert full.batch_size == 40 and isinstance(full.sampler, SequentialSampler)
