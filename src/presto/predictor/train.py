"""Train and evaluate the epsilon-certainty predictor (what src/train_predictor.py runs).

Evaluation follows the paper's Appendix E.7: K-fold cross-validation with whole prompts
held out (stratified: prompts dealt so the folds' class shares stay close to the overall
ones), out-of-fold predictions pooled over all nodes, held-out accuracy and log loss
of the model against two constant baselines fitted on each training fold (the majority
class for accuracy, the class frequencies for log loss) and against scikit-learn's
``LogisticRegression`` on the same standardized features as a reference. The reference is
fixed (the paper's logistic regression, L2 lambda = 1, fitted to convergence), whatever
model is compared, so its row means the same thing in every metrics.json. A class absent
from a training fold gets add-one (Laplace) smoothed frequencies in the frequency baseline
and the reference, never a 1e-15 floor that no softmax would pay
(``absent_classes``/``unseen_class_nodes`` count the held-out nodes concerned). The model is then refitted on all
examples and saved; ``metrics.json`` holds every number, says which of them are weighted
(``weighting_of``: class_counts count nodes; class_shares and every cross-validation row,
the majority baseline included, follow ``weighting``), what was pooled (``composition``
per sampler and traversal, ``sampler_settings``, ``duplicates_dropped``) and the saved model's ``fingerprint``,
computed as hot-loading computes it (trees.jsonl's plan ``predictor``). The checkpoint
carries ``samplers``, ``composition`` and ``sampler_settings`` too, as its hyperparameter
``provenance`` (:func:`provenance`): a run serving it warns when its own sampler or setting
is not among them.
"""

from __future__ import annotations

import json
import math
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from presto.predictor.data import Examples
from presto.predictor.features import CLASSES

PROGRESS_DELAY_S = 2.0
"""Seconds before training shows its progress (fits done, of the folds and the final refit) on stderr."""

IMPROVEMENT_MARGIN = 1e-4
"""Held-out log loss (nats per node) a model must gain over the class frequencies to count as better."""

REFERENCE_L2 = 1.0
"""L2 lambda of the scikit-learn reference: the paper's logistic regression, whatever model is trained."""
REFERENCE_C = 1.0 / REFERENCE_L2
"""scikit-learn's C of that penalty: both objectives are sum of (weighted) log losses + lambda/2 |w|^2."""
REFERENCE_TOL = 1e-8
"""scikit-learn's stopping tolerance for the reference: converged, so it is the optimum of its objective."""


class UnservableModelError(RuntimeError):
    """The trained model could not be fingerprinted as hot-loading would (non-finite weights): not installed."""


@dataclass(frozen=True)
class ModelSettings:
    """One model of the comparison (conf/predictor/*.yaml)."""

    name: str = "logistic"
    hidden: tuple[int, ...] = ()
    l2: float = 1.0
    optimizer: str = "lbfgs"
    learning_rate: float = 1.0
    max_epochs: int = 30
    batch_size: int | None = None  # None: full batch
    val_fraction: float = 0.0  # early stopping on this share of the training data (0: none)
    patience: int = 10

    def __post_init__(self) -> None:
        # Types first: a wrong one would otherwise pass these checks and fail only once training
        # runs (after the trees were read), a fractional max_epochs as a Lightning AssertionError.
        if any(isinstance(h, bool) or not isinstance(h, int) or h < 1 for h in self.hidden):
            raise ValueError(f"predictor.hidden must hold positive layer widths, got {list(self.hidden)}")
        for key in ("l2", "learning_rate", "val_fraction"):
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise ValueError(f"predictor.{key} must be a number, got {value!r}")
        for key, least in (("max_epochs", 1), ("patience", 0)):
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, int) or value < least:
                raise ValueError(f"predictor.{key} must be an integer >= {least}, got {value!r}")
        if self.optimizer not in ("lbfgs", "adam"):
            raise ValueError(f"predictor.optimizer must be 'lbfgs' or 'adam', got {self.optimizer!r}")
        for key in ("l2", "learning_rate"):  # nan passes every comparison; inf overflows L-BFGS (a traceback)
            if not math.isfinite(getattr(self, key)):
                raise ValueError(f"predictor.{key} must be a finite number, got {getattr(self, key)}")
        if self.l2 < 0 or self.learning_rate <= 0:
            raise ValueError("predictor.l2 must be >= 0, learning_rate > 0")
        if not 0.0 <= self.val_fraction < 1.0:
            raise ValueError(f"predictor.val_fraction must be in [0, 1), got {self.val_fraction}")
        # null means full batch; 0 or a negative size is a mistake, not a request for size 1.
        size = self.batch_size
        if size is not None and (isinstance(size, bool) or not isinstance(size, int) or size < 1):
            raise ValueError(f"predictor.batch_size must be a positive integer or null (full batch), got {size!r}")


def log_loss(labels: np.ndarray, probabilities: np.ndarray, weights: np.ndarray | None = None) -> float:
    """(Weighted) mean negative log-likelihood (natural log) of the true classes; probabilities clipped at 1e-15."""
    picked = probabilities[np.arange(len(labels)), labels]
    return float(-np.average(np.log(np.clip(picked, 1e-15, 1.0)), weights=weights))


def accuracy(labels: np.ndarray, probabilities: np.ndarray, weights: np.ndarray | None = None) -> float:
    """(Weighted) share of argmax hits; NaN when a probability is not finite (a diverged fit), whose
    argmax would be class 0 everywhere and score the share of that class as the model's accuracy."""
    if not np.all(np.isfinite(probabilities)):
        return math.nan
    return float(np.average(np.argmax(probabilities, axis=1) == labels, weights=weights))


def prompt_folds(
    groups: np.ndarray, folds: int, seed: int, labels: np.ndarray | None = None
) -> list[tuple[np.ndarray, np.ndarray]]:
    """(train, test) index pairs; each prompt lies in exactly one test fold.

    With ``labels`` the prompts are dealt so that every fold's class shares come as close
    to the overall ones as whole prompts allow (scikit-learn's StratifiedGroupKFold): a
    class logged in few prompts is then less often missing from a training fold. The
    assignment is a function of (groups, labels, folds, seed).
    """
    import warnings

    from sklearn.model_selection import GroupKFold, StratifiedGroupKFold

    n_groups = len(np.unique(groups))
    if n_groups < 2:
        raise ValueError(f"cross-validation holds out whole prompts and needs >= 2 prompts, got {n_groups}")
    n_splits = min(folds, n_groups)
    if labels is not None:
        counts = np.bincount(np.asarray(labels))
        if np.all(counts[counts > 0] < n_splits):  # scikit-learn refuses to stratify so few nodes of every class
            labels = None
    if labels is None:
        splitter = GroupKFold(n_splits=n_splits, shuffle=True, random_state=seed)
        return list(splitter.split(np.zeros(len(groups)), groups=groups))
    splitter = StratifiedGroupKFold(n_splits=n_splits, shuffle=True, random_state=seed)
    with warnings.catch_warnings():  # "the least populated class has only k members": what stratifying is for
        warnings.simplefilter("ignore", UserWarning)
        splits = list(splitter.split(np.zeros(len(groups)), labels, groups=groups))
    return [(train, test) for train, test in splits if len(test)]  # greedy dealing may leave a fold empty


def check_classes(examples: Examples, epsilon: float) -> None:
    """Refuse data whose nodes all fall in one epsilon-class: there is nothing to classify."""
    counts = examples.class_counts()
    present = [name for name, count in counts.items() if count > 0]
    if len(present) < 2:
        raise ValueError(
            f"all {len(examples)} nodes are in the epsilon-class {present[0]!r} at epsilon={epsilon} "
            f"(class counts {counts}): nothing to learn; log more varied runs or change epsilon"
        )


def class_frequencies(labels: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Weighted share of each class in CLASSES order."""
    counts = np.bincount(labels, weights=weights, minlength=len(CLASSES)).astype(np.float64)
    return counts / counts.sum()


def fold_frequencies(labels: np.ndarray, weights: np.ndarray, classes: np.ndarray | None = None) -> np.ndarray:
    """The class frequencies a baseline fitted on a training fold predicts.

    When a class of the data (``classes``: the class indices the whole data set holds; all
    three if None) is absent from the fold (whole prompts are held out, so a class logged
    in one prompt is absent whenever that prompt is), a plain frequency of 0 would be
    floored at 1e-15 and cost 34.5 nats per held-out node of that class, far more than any
    trained softmax pays (it never reaches 0): the baselines would lose for no reason of
    the model's. Such a fold gets add-one (Laplace) smoothed frequencies over the data's
    classes, (count + 1) / (n + |classes|) with the weights scaled to n nodes: an estimate
    of the absent class's share, not a floor. Folds holding every class of the data keep
    their plain frequencies (a class no node has is never scored, so it gets nothing).
    """
    counts = np.bincount(labels, weights=weights, minlength=len(CLASSES)).astype(np.float64)
    counts *= len(labels) / counts.sum()  # weights as node counts: n in all
    smoothed = np.zeros(len(CLASSES), dtype=bool)
    smoothed[np.arange(len(CLASSES)) if classes is None else np.asarray(classes)] = True
    if np.all(counts[smoothed] > 0):
        return counts / counts.sum()
    counts[smoothed] += 1.0
    return counts / counts.sum()


def _sklearn_logistic(
    train_x, train_y, test_x, train_w: np.ndarray, classes: np.ndarray | None = None
) -> tuple[np.ndarray, bool]:
    """The reference's test probabilities, and whether they are constant.

    A training fold with a single class (whole prompts are held out, so a class can live in
    one prompt only) has no decision boundary; scikit-learn refuses to fit it. The reference
    then predicts the fold's class frequencies, what any fit to that fold would converge to.
    A class absent from the fold gets its add-one smoothed share (:func:`fold_frequencies`),
    and the fitted classes share the rest, instead of a 1e-15 floor.
    Fitted to tol 1e-8: the default 1e-4 stops L-BFGS short of the optimum the model reaches.
    """
    frequencies = fold_frequencies(train_y, train_w, classes)
    if len(np.unique(train_y)) < 2:
        return np.tile(frequencies, (len(test_x), 1)), True
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    model = make_pipeline(StandardScaler(), LogisticRegression(C=REFERENCE_C, tol=REFERENCE_TOL, max_iter=100_000))
    weights = train_w / max(train_w.mean(), 1e-300)
    model.fit(train_x, train_y, logisticregression__sample_weight=weights)
    absent = np.setdiff1d(np.arange(len(CLASSES)), model.classes_)
    out = np.zeros((len(test_x), len(CLASSES)))
    out[:, absent] = frequencies[absent]
    out[:, model.classes_] = model.predict_proba(test_x) * (1.0 - frequencies[absent].sum())
    return out, False


def progress_bar(total: int | None = None):
    """The bar training shows on stderr once it has run :data:`PROGRESS_DELAY_S` (one tick per fit).

    Only ``update()`` draws it (tqdm's delay applies there alone: ``refresh()`` or a postfix set with
    ``refresh=True`` would draw it at once), and a bar that ``update()`` drew is closed with a newline,
    so what is printed next starts a line of its own; a training shorter than the delay shows none.
    """
    from tqdm import tqdm

    return tqdm(total=total, desc="training", unit="fit", delay=PROGRESS_DELAY_S, file=sys.stderr)


def cross_validate(
    examples: Examples, settings, folds: int, seed: int, epsilon: float, progress=None
) -> dict[str, Any]:
    """Pooled out-of-fold accuracy and log loss of the model, the sklearn reference and the baselines.

    ``progress``: a tqdm bar ticked once per fold (its total is raised by the number of folds). It is
    never refreshed here: that would draw it before :data:`PROGRESS_DELAY_S` (see :func:`progress_bar`).
    """
    from presto.predictor.module import fit_classifier

    x, y, w = examples.features, examples.labels, examples.sample_weights
    k = len(CLASSES)
    groups = examples.groups
    predictions = {name: np.zeros((len(y), k)) for name in ("model", "sklearn_logistic", "majority", "frequencies")}
    split_list = prompt_folds(groups, folds, seed, labels=y)
    if progress is not None:
        progress.total = (progress.total or 0) + len(split_list)  # shown with the next update
    labelled = np.unique(y)  # the classes the data holds: those a training fold can lack
    constant_folds: list[int] = []
    absent: list[dict[str, Any]] = []
    validation: list[str | None] = []
    for fold, (train, test) in enumerate(split_list):
        if progress is not None:
            progress.set_postfix_str(f"fold {fold + 1}/{len(split_list)}, {len(train)} nodes", refresh=False)
        module = fit_classifier(
            x[train], y[train], examples.feature_names, settings, seed + fold, epsilon, w[train], groups=groups[train]
        )
        predictions["model"][test] = module.predict_proba(x[test])
        validation.append(module.validation["split"])
        reference = _sklearn_logistic(x[train], y[train], x[test], w[train], labelled)
        predictions["sklearn_logistic"][test], constant = reference
        if constant:
            constant_folds.append(fold)
        missing = [int(c) for c in labelled if not np.any(y[train] == c)]
        if missing:  # the held-out nodes of these classes were never seen in training
            unseen = int(np.isin(y[test], missing).sum())
            absent.append({"fold": fold, "classes": [CLASSES[c] for c in missing], "held_out_nodes": unseen})
        frequencies = fold_frequencies(y[train], w[train], labelled)
        predictions["frequencies"][test] = frequencies
        majority = np.full(k, 1e-15)
        majority[int(np.argmax(frequencies))] = 1.0
        predictions["majority"][test] = majority
        if progress is not None:
            progress.update(1)
    results = {
        name: {"accuracy": accuracy(y, p, w), "log_loss": log_loss(y, p, w)}
        for name, p in predictions.items()
        if name != "majority"
    }
    # The majority baseline is scored on accuracy only: its log loss is infinite by design.
    results["majority"] = {"accuracy": accuracy(y, predictions["majority"], w), "log_loss": None}
    # Which reference this was: a fixed C, and the folds it could only predict frequencies in.
    results["sklearn_logistic"].update(C=REFERENCE_C, constant_folds=constant_folds)
    results["folds"] = len(split_list)
    # Per fold, what early stopping held out: "prompts", "nodes" (too few prompts) or None (no early stopping).
    results["early_stopping"] = validation
    # Held-out nodes whose class was absent from their training fold: no model can have learnt
    # them, and the baselines gave those folds smoothed frequencies (fold_frequencies).
    results["absent_classes"] = absent
    results["unseen_class_nodes"] = sum(part["held_out_nodes"] for part in absent)
    return results


def provenance(examples: Examples) -> dict[str, Any]:
    """What the examples came from, as the checkpoint stores it (hyperparameter ``provenance``)
    and metrics.json reports it: the samplers, the runs and nodes per sampler and traversal, and
    the distinct sampler settings (config.yaml's sampler section less steps, with their runs)."""
    composition = [dict(part) for part in examples.composition]
    return {
        "samplers": sorted({str(part["sampler"]) for part in composition}),
        "composition": composition,
        "sampler_settings": [dict(setting) for setting in examples.sampler_settings],
    }


def train_predictor(
    examples: Examples,
    settings,
    out_dir: Path,
    checkpoint: Path | None,
    folds: int = 5,
    seed: int = 0,
    epsilon: float = 0.01,
    require_improvement: bool = False,
    weighting: str = "uniform",
) -> dict[str, Any]:
    """Cross-validate, refit on everything, write metrics.json and the checkpoint; returns the metrics.

    With ``require_improvement`` the checkpoint is only written when the held-out log
    loss beats the class-frequency baseline (a retraining job must not replace a working
    predictor with a useless one). An explicit ``checkpoint`` gets its metrics beside it
    (``PATH.metrics.json``), installed with it and only with it. metrics.json in
    ``out_dir`` is written in every case, also when writing the checkpoint fails (then
    with ``checkpoint_error``, and the OSError is raised after it) and when the fit
    diverged: non-finite numbers are written as null and listed in ``non_finite``, and a
    model hot-loading would refuse (non-finite weights, so no fingerprint) is never
    installed, whatever ``require_improvement`` says (UnservableModelError after metrics.json).
    """
    check_classes(examples, epsilon)  # before Lightning is even imported: seconds, for a one-line error
    from presto.predictor.hotload import PredictorError
    from presto.predictor.install import MetricsNotInstalled, install_checkpoint
    from presto.predictor.module import fingerprint, fit_classifier

    start = time.perf_counter()
    out_dir.mkdir(parents=True, exist_ok=True)
    source = provenance(examples)  # stored in the checkpoint and reported in metrics.json
    with progress_bar(total=1) as progress:  # the folds, then the final fit on every node
        cv = cross_validate(examples, settings, folds, seed, epsilon, progress)
        progress.set_postfix_str(f"final fit, {len(examples)} nodes", refresh=False)
        module = fit_classifier(
            examples.features,
            examples.labels,
            examples.feature_names,
            settings,
            seed,
            epsilon,
            examples.sample_weights,
            groups=examples.groups,
            provenance=source,
        )
        progress.update(1)
    # "Better" needs a margin: an intercept-only fit IS the class frequencies, up to rounding.
    beats = cv["model"]["log_loss"] < cv["frequencies"]["log_loss"] - IMPROVEMENT_MARGIN
    target = checkpoint or out_dir / "predictor.ckpt"
    write_checkpoint = beats or not require_improvement
    served: str | None = None
    unservable: str | None = None
    if write_checkpoint:
        try:  # what a traversal serving the checkpoint logs as its plan's "predictor"
            served = fingerprint(module, target)
        except PredictorError as err:  # non-finite weights: hot-loading would refuse it, so it is not installed
            unservable = str(err).splitlines()[0]
            write_checkpoint = False
    metrics: dict[str, Any] = {
        "examples": len(examples),
        "prompts": len(np.unique(examples.groups)),
        "duplicates_dropped": examples.duplicates,
        "composition": source["composition"],
        "samplers": source["samplers"],
        "sampler_settings": source["sampler_settings"],
        "class_counts": examples.class_counts(),
        "class_shares": examples.class_shares(),
        "weighting": weighting,
        "weighting_of": {
            "class_counts": "none (nodes, each counted once)",
            "class_shares": weighting,
            "cross_validation": weighting,  # every row: the scores, and the baselines' class frequencies
        },
        "epsilon": epsilon,
        "features": list(examples.feature_names),
        "model": {k: (list(v) if isinstance(v, tuple) else v) for k, v in asdict(settings).items()},
        "early_stopping": module.validation,  # of the saved model: what its early stopping held out
        "cross_validation": cv,
        "beats_class_frequencies": bool(beats),
        "checkpoint": str(target) if write_checkpoint else None,
        "fingerprint": served,
        "sources": list(examples.sources),
        "seconds": time.perf_counter() - start,
    }
    metrics = finite_metrics(metrics)  # what is returned is what metrics.json holds
    failure: Exception | None = None
    if unservable is not None:
        metrics["checkpoint_error"] = f"not servable: {unservable}"
        failure = UnservableModelError(
            f"the trained model cannot be served ({unservable}); no checkpoint was written, "
            f"metrics are in {out_dir / 'metrics.json'}"
        )
    if write_checkpoint:
        try:
            install_checkpoint(module, target, _dumps(metrics) if checkpoint is not None else None)
        except MetricsNotInstalled as err:  # the checkpoint serves; only PATH.metrics.json is stale
            metrics["metrics_error"] = f"{type(err.__cause__).__name__}: {err}"
            failure = OSError(
                f"the checkpoint {target} was installed, but not its metrics file {err.filename} "
                f"({err.strerror}); its metrics are in {out_dir / 'metrics.json'}"
            )
        except OSError as err:
            metrics["checkpoint"] = metrics["fingerprint"] = None
            metrics["checkpoint_error"] = f"{type(err).__name__}: {err}"
            where = out_dir / "metrics.json"
            failure = OSError(f"cannot write the checkpoint {target} ({err.strerror or err}); metrics are in {where}")
    (out_dir / "metrics.json").write_text(_dumps(metrics))
    if failure is not None:
        raise failure
    return metrics


def finite_metrics(metrics: dict[str, Any]) -> dict[str, Any]:
    """``metrics`` with every non-finite number replaced by None, their paths listed in ``non_finite``.

    A diverged fit (NaN weights, a NaN log loss) must still leave its metrics.json, and
    strict JSON has no NaN or Infinity: null says "no number", ``non_finite`` says which.
    """
    found: list[str] = []
    plain = _finite(metrics, "", found)
    if found:
        plain["non_finite"] = sorted(set(plain.get("non_finite") or []) | set(found))
    return plain


def _dumps(metrics: dict[str, Any]) -> str:
    """metrics.json's text; ``metrics`` has been through :func:`finite_metrics` (strict JSON)."""
    return json.dumps(metrics, indent=2, allow_nan=False) + "\n"


def _finite(value: Any, where: str, found: list[str]) -> Any:
    """``value`` with non-finite floats replaced by None; their dotted paths are appended to ``found``."""
    if isinstance(value, dict):
        return {k: _finite(v, f"{where}.{k}" if where else str(k), found) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v, f"{where}[{i}]", found) for i, v in enumerate(value)]
    if isinstance(value, float | np.floating) and not math.isfinite(value):
        found.append(where)
        return None
    return value


def non_finite_warning(metrics: dict[str, Any]) -> str | None:
    """A warning line when a metric was not a finite number (a diverged fit): metrics.json holds null there."""
    found = metrics.get("non_finite") or []
    if not found:
        return None
    listed = ", ".join(found[:4]) + (", ..." if len(found) > 4 else "")
    return (
        f"warning: {_plural(len(found), 'metric')} not finite ({listed}), written as null in metrics.json: "
        "the fit diverged (a smaller learning_rate?)"
    )


def absent_class_warning(metrics: dict[str, Any]) -> str | None:
    """A warning line when held-out nodes belonged to a class their training fold lacked."""
    cv = metrics["cross_validation"]
    unseen = cv.get("unseen_class_nodes", 0)
    if not unseen:
        return None
    classes = sorted({c for part in cv["absent_classes"] for c in part["classes"]})
    return (
        f"warning: {_plural(unseen, 'held-out node')} of class(es) {', '.join(classes)} had none of their class "
        f"in their training fold (fold(s) {[part['fold'] for part in cv['absent_classes']]}): the class lives in "
        "too few prompts to be cross-validated; the baselines used add-one smoothed frequencies there"
    )


def early_stopping_warning(metrics: dict[str, Any]) -> str | None:
    """A warning line when early stopping could not hold out whole prompts (too few of them)."""
    splits = [metrics.get("early_stopping", {}).get("split"), *metrics["cross_validation"].get("early_stopping", [])]
    if "nodes" not in splits:
        return None
    return (
        "warning: too few prompts to hold out whole ones for early stopping in some fits: they validated on "
        "a share of their training prompts' nodes, which stops later (log more prompts)"
    )


def improvement_warning(metrics: dict[str, Any]) -> str | None:
    """A warning line when a model no better than the class frequencies was saved anyway."""
    if metrics["beats_class_frequencies"] or not metrics["checkpoint"]:
        return None
    cv = metrics["cross_validation"]
    return (
        f"warning: the saved model is no better than the class frequencies (held-out log loss "
        f"{_number(cv['model']['log_loss'])} vs {_number(cv['frequencies']['log_loss'])}); "
        "require_improvement=true keeps such a model out"
    )


def pooling_warning(metrics: dict[str, Any]) -> str | None:
    """A warning line when the trees of several samplers (different cut laws) were pooled."""
    samplers = metrics.get("samplers") or []
    if len(samplers) < 2:
        return None
    return (
        f"warning: pooled the trees of {len(samplers)} samplers ({', '.join(samplers)}): their cut laws differ, "
        "so one predictor is fitted to their mixture; the paper trains one per setting "
        "(give the runs of one sampler to train for it)"
    )


def setting_warning(metrics: dict[str, Any]) -> str | None:
    """A warning line when runs of one sampler with different settings (alpha, n, ...) were pooled."""
    by_sampler: dict[str, list[dict[str, Any]]] = {}
    for setting in metrics.get("sampler_settings") or []:
        by_sampler.setdefault(str(setting.get("name")), []).append(setting)
    parts = []
    for name, settings in sorted(by_sampler.items()):
        if len(settings) < 2:
            continue
        keys = sorted({k for s in settings for k in s} - {"name", "runs"})
        differ = [k for k in keys if len({json.dumps(s.get(k), sort_keys=True) for s in settings}) > 1]
        values = "; ".join(f"sampler.{k}: {', '.join(sorted({str(s.get(k)) for s in settings}))}" for k in differ)
        parts.append(f"{name} runs of {len(settings)} settings ({values})")
    if not parts:
        return None
    return (
        f"warning: pooled {' and '.join(parts)}: their acceptance probabilities differ, so one predictor "
        "is fitted to their mixture; the paper trains one per setting (give the runs of one setting to train for it)"
    )


def _number(value: float | None, width: int = 0) -> str:
    """A metric for the terminal: 4 decimals, or '-' where there is none (null: not finite)."""
    text = "-" if value is None or not math.isfinite(value) else f"{value:.4f}"
    return f"{text:>{width}}"


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def _weights_named(weighting: str) -> str:
    return "each node once" if weighting == "uniform" else f"{weighting}-weighted"


def format_metrics(metrics: dict[str, Any]) -> str:
    """A small table for the terminal."""
    cv = metrics["cross_validation"]
    weights = _weights_named(metrics["weighting"])
    shares = {name: round(share, 4) for name, share in metrics["class_shares"].items()}
    dropped = metrics.get("duplicates_dropped", 0)
    lines = [
        "data: "
        + "; ".join(
            f"{part['sampler']}/{part['traversal']}: {_plural(part['runs'], 'run')}, {part['examples']} nodes"
            + (f" ({part['duplicates']} duplicates dropped)" if part["duplicates"] else "")
            for part in metrics.get("composition", ())
        ),
        f"{metrics['examples']} nodes from {metrics['prompts']} prompts, "
        f"{dropped} duplicates dropped (the same decision logged by several runs of one setting), "
        f"features {metrics['features']}, {cv['folds']}-fold CV by prompt",
        f"classes: node counts {metrics['class_counts']} (unweighted); shares {shares} ({weights})",
        f"{'':<22}{'accuracy':>10}{'log loss':>10}  (held out, {weights})",
    ]
    for name in ("model", "sklearn_logistic", "frequencies", "majority"):
        row = cv[name]
        label = metrics["model"]["name"] if name == "model" else name
        lines.append(f"{label:<22}{_number(row['accuracy'], 10)}{_number(row['log_loss'], 10)}")
    reference = cv["sklearn_logistic"]
    note = f"sklearn_logistic: the fixed reference, LogisticRegression(C={reference['C']:g})"
    if reference["constant_folds"]:
        note += f"; class frequencies in fold(s) {reference['constant_folds']} (one class in training)"
    lines.append(note)
    if metrics["checkpoint"]:
        lines.append(f"checkpoint {metrics['checkpoint']} (fingerprint {metrics.get('fingerprint')})")
    elif metrics.get("checkpoint_error"):
        lines.append(f"checkpoint: not written ({metrics['checkpoint_error']})")
    else:
        lines.append("checkpoint: not written (no better than the class frequencies)")
    return "\n".join(lines)


def _check_replaceable(checkpoint: Path) -> None:
    """ConfigError if ``output`` names an existing file that is not a checkpoint (a zip, as torch.save writes):
    training replaces the file it names, and a run's trees.jsonl or a typo'd path would be lost."""
    import zipfile

    from presto.config import ConfigError

    if checkpoint.is_file() and not zipfile.is_zipfile(checkpoint):
        raise ConfigError(
            f"output={checkpoint} exists and is not a predictor checkpoint: training would replace it "
            "(remove it first, or choose another path)"
        )


PER_JOB_RESOLVERS = ("hydra:job.num", "hydra:job.id", "hydra:job.override_dirname", "hydra:runtime.output_dir")
"""Interpolations an ``output`` can name that differ between the jobs of any sweep."""


def sweep_output_error(argv: list[str]) -> str | None:
    """Why the command line ``argv`` of train_predictor.py has every job of its sweep write one ``output``
    checkpoint, the last over the others (decided before Hydra runs, nothing trained); None when it does not.

    Each job has its own file when the command line is no sweep (``-m``, ``--multirun`` or
    ``hydra.mode=MULTIRUN``), sweeps no key (one job), sweeps ``output`` itself (``output=A,B``,
    ``choice(...)``) or gives one that interpolates a swept key (``-m predictor=logistic,mlp16
    'output=DIR/${predictor.name}.ckpt'``: the key, a key under it or above it) or the job's number or
    directory (:data:`PER_JOB_RESOLVERS`). A command line Hydra cannot parse is left to Hydra to report.
    """
    import re

    from presto.cli import is_sweep, split_options

    if not is_sweep(argv):
        return None
    _, tokens = split_options(argv)
    try:
        from hydra.core.override_parser.overrides_parser import OverridesParser

        overrides = OverridesParser.create().parse_overrides(tokens)
    except Exception:  # a syntax error: Hydra reports it itself
        return None
    given = [o for o in overrides if o.key_or_group == "output"]
    if not given or given[-1].is_delete() or given[-1].is_sweep_override():
        return None
    value = given[-1].value()
    swept = [o.key_or_group for o in overrides if o.is_sweep_override()]
    if value is None or not swept:  # no checkpoint named, or a sweep of one job
        return None
    text = str(value)
    references = [ref.strip() for ref in re.findall(r"\$\{([^{}]*)\}", text)]
    for reference in references:
        key = reference.lstrip(".")
        if reference in PER_JOB_RESOLVERS:
            return None
        if ":" not in key and any(key == s or key.startswith(f"{s}.") or s.startswith(f"{key}.") for s in swept):
            return None
    example = next((s for s in swept if not s.startswith("hydra")), "predictor")
    example = "predictor.name" if example == "predictor" else example
    return (
        f"output={text} with -m: every job of the sweep would write this one checkpoint, the last overwriting "
        f"the others (the sweep varies {', '.join(swept)}{'; output interpolates none of them' if references else ''}"
        "); leave output unset (each job saves <its directory>/predictor.ckpt), sweep it too (output=A.ckpt,B.ckpt) "
        f"or name each job's own from a swept key (e.g. 'output=DIR/${{{example}}}.ckpt')"
    )


def run_training(cfg, out_dir: Path | None = None) -> dict[str, Any]:
    """The Hydra job: validate the config, collect the trees, train, evaluate, save.

    Everything a user can get wrong is checked before the trees are read (ConfigError, one
    line). ``out_dir`` defaults to Hydra's run directory.
    """
    from omegaconf import OmegaConf

    from presto.config import ConfigError, absolute
    from presto.predictor.data import collect_examples
    from presto.predictor.features import resolve_features
    from presto.predictor.install import check_output

    if OmegaConf.is_missing(cfg, "runs"):
        raise ConfigError("runs is required: pass runs=[RUN_DIR,...] (directories holding trees.jsonl)")
    listed = cfg.runs if OmegaConf.is_list(cfg.runs) else [cfg.runs]
    runs = [str(r) for r in listed if r is not None and str(r).strip()]
    if not runs:  # runs=[] or runs= would otherwise read nothing (or the working directory)
        raise ConfigError("runs is empty: pass runs=[RUN_DIR,...] (directories holding trees.jsonl)")
    model_cfg = OmegaConf.to_container(cfg.predictor, resolve=True)
    numbers = {"epsilon": ((int, float), "a number"), "folds": (int, "an integer"), "seed": (int, "an integer")}
    for key, (kind, what) in numbers.items():
        if isinstance(cfg[key], bool) or not isinstance(cfg[key], kind):
            raise ConfigError(f"{key} must be {what}, got {cfg[key]!r}")
    if not isinstance(cfg.require_improvement, bool):  # bool("no") is True: the opposite of what was asked
        raise ConfigError(f"require_improvement must be true or false, got {cfg.require_improvement!r}")
    try:
        hidden = model_cfg.get("hidden") or ()
        if not isinstance(hidden, list | tuple):  # predictor.hidden=16: tuple(16) would say "'int' ... not iterable"
            raise ValueError(f"predictor.hidden must be a list of layer widths (e.g. [32] or [32,32]), got {hidden!r}")
        settings = ModelSettings(**{**model_cfg, "hidden": tuple(hidden)})
        names = resolve_features(cfg.features)
        epsilon = float(cfg.epsilon)
        if not 0.0 < epsilon < 0.5:
            raise ValueError(f"epsilon must be in (0, 1/2), got {epsilon}")
        if int(cfg.folds) < 2:
            raise ValueError(f"folds must be >= 2, got {cfg.folds}")
        top = 2**32 - int(cfg.folds)  # fold k fits with seed + k, and seeds stop at 2**32 - 1
        if not 0 <= int(cfg.seed) <= top:
            raise ValueError(f"seed must be in [0, {top}] (fold k trains with seed + k), got {cfg.seed}")
    except (TypeError, ValueError) as err:
        raise ConfigError(str(err)) from None
    # Absolute, not resolve(): an output that is a symlink (current.ckpt -> v1.ckpt) is replaced by the
    # new file, its metrics beside it, and the version it pointed at is kept.
    checkpoint = Path(absolute(cfg.output)) if cfg.output else None
    if checkpoint is not None:
        check_output(checkpoint)
        _check_replaceable(checkpoint)  # one output for every job of -m: refused before Hydra (sweep_output_error)
    try:
        examples = collect_examples(runs, names, epsilon, str(cfg.weighting))
    except KeyError as err:
        raise ConfigError(str(err.args[0])) from None
    if out_dir is None:
        from hydra.core.hydra_config import HydraConfig

        out_dir = Path(HydraConfig.get().runtime.output_dir)
    return train_predictor(
        examples,
        settings,
        out_dir,
        checkpoint,
        folds=int(cfg.folds),
        seed=int(cfg.seed),
        epsilon=epsilon,
        require_improvement=bool(cfg.require_improvement),
        weighting=str(cfg.weighting),
    )
