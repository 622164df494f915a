"""Train and evaluate the epsilon-certainty predictor (what src/train_predictor.py runs).

Evaluation follows the paper's Appendix E.7: K-fold cross-validation with whole prompts
held out, out-of-fold predictions pooled over all nodes, held-out accuracy and log loss
of the model against two constant baselines fitted on each training fold (the majority
class for accuracy, the class frequencies for log loss) and against scikit-learn's
``LogisticRegression`` on the same standardized features as a reference. The reference is
fixed (the paper's logistic regression, L2 lambda = 1), whatever model is compared, so its
row means the same thing in every metrics.json. The model is then refitted on all
examples and saved; ``metrics.json`` holds every number, says which of them are weighted
(``weighting_of``: class_counts count nodes; class_shares and every cross-validation row,
the majority baseline included, follow ``weighting``), what was pooled (``composition``
per sampler and traversal, ``duplicates_dropped``) and the saved model's ``fingerprint``,
computed as hot-loading computes it (trees.jsonl's plan ``predictor``).
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from presto.predictor.data import Examples
from presto.predictor.features import CLASSES

IMPROVEMENT_MARGIN = 1e-4
"""Held-out log loss (nats per node) a model must gain over the class frequencies to count as better."""

REFERENCE_L2 = 1.0
"""L2 lambda of the scikit-learn reference: the paper's logistic regression, whatever model is trained."""
REFERENCE_C = 1.0 / REFERENCE_L2
"""scikit-learn's C of that penalty: both objectives are sum of (weighted) log losses + lambda/2 |w|^2."""


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
        if any(int(h) < 1 for h in self.hidden):
            raise ValueError(f"predictor.hidden must hold positive layer widths, got {list(self.hidden)}")
        if self.l2 < 0 or self.learning_rate <= 0 or self.max_epochs < 1:
            raise ValueError("predictor.l2 must be >= 0, learning_rate > 0, max_epochs >= 1")
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
    return float(np.average(np.argmax(probabilities, axis=1) == labels, weights=weights))


def prompt_folds(groups: np.ndarray, folds: int, seed: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """(train, test) index pairs; each prompt lies in exactly one test fold."""
    from sklearn.model_selection import GroupKFold

    n_groups = len(np.unique(groups))
    if n_groups < 2:
        raise ValueError(f"cross-validation holds out whole prompts and needs >= 2 prompts, got {n_groups}")
    splitter = GroupKFold(n_splits=min(folds, n_groups), shuffle=True, random_state=seed)
    return list(splitter.split(np.zeros(len(groups)), groups=groups))


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


def _sklearn_logistic(train_x, train_y, test_x, train_w: np.ndarray) -> tuple[np.ndarray, bool]:
    """The reference's test probabilities, and whether they are constant.

    A training fold with a single class (whole prompts are held out, so a class can live in
    one prompt only) has no decision boundary; scikit-learn refuses to fit it. The reference
    then predicts the fold's class frequencies, what any fit to that fold would converge to.
    """
    if len(np.unique(train_y)) < 2:
        return np.tile(np.clip(class_frequencies(train_y, train_w), 1e-15, None), (len(test_x), 1)), True
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    model = make_pipeline(StandardScaler(), LogisticRegression(C=REFERENCE_C, max_iter=2000))
    weights = train_w / max(train_w.mean(), 1e-300)
    model.fit(train_x, train_y, logisticregression__sample_weight=weights)
    out = np.full((len(test_x), len(CLASSES)), 1e-15)
    out[:, model.classes_] = model.predict_proba(test_x)
    return out / out.sum(axis=1, keepdims=True), False


def cross_validate(examples: Examples, settings, folds: int, seed: int, epsilon: float) -> dict[str, Any]:
    """Pooled out-of-fold accuracy and log loss of the model, the sklearn reference and the baselines."""
    from presto.predictor.module import fit_classifier

    x, y, w = examples.features, examples.labels, examples.sample_weights
    k = len(CLASSES)
    predictions = {name: np.zeros((len(y), k)) for name in ("model", "sklearn_logistic", "majority", "frequencies")}
    split_list = prompt_folds(examples.groups, folds, seed)
    constant_folds: list[int] = []
    for fold, (train, test) in enumerate(split_list):
        module = fit_classifier(x[train], y[train], examples.feature_names, settings, seed + fold, epsilon, w[train])
        predictions["model"][test] = module.predict_proba(x[test])
        predictions["sklearn_logistic"][test], constant = _sklearn_logistic(x[train], y[train], x[test], w[train])
        if constant:
            constant_folds.append(fold)
        frequencies = class_frequencies(y[train], w[train])
        predictions["frequencies"][test] = np.clip(frequencies, 1e-15, None)
        majority = np.full(k, 1e-15)
        majority[int(np.argmax(frequencies))] = 1.0
        predictions["majority"][test] = majority
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
    return results


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
    with ``checkpoint_error``, and the OSError is raised after it).
    """
    check_classes(examples, epsilon)  # before Lightning is even imported: seconds, for a one-line error
    from presto.predictor.hotload import PredictorError
    from presto.predictor.install import install_checkpoint
    from presto.predictor.module import fingerprint, fit_classifier

    start = time.perf_counter()
    out_dir.mkdir(parents=True, exist_ok=True)
    cv = cross_validate(examples, settings, folds, seed, epsilon)
    # "Better" needs a margin: an intercept-only fit IS the class frequencies, up to rounding.
    beats = cv["model"]["log_loss"] < cv["frequencies"]["log_loss"] - IMPROVEMENT_MARGIN
    module = fit_classifier(
        examples.features, examples.labels, examples.feature_names, settings, seed, epsilon, examples.sample_weights
    )
    target = checkpoint or out_dir / "predictor.ckpt"
    write_checkpoint = beats or not require_improvement
    served: str | None = None
    if write_checkpoint:
        try:  # what a traversal serving the checkpoint logs as its plan's "predictor"
            served = fingerprint(module, target)
        except PredictorError:  # not servable (non-finite weights): metrics say so, hot-loading refuses it
            served = None
    composition = [dict(part) for part in examples.composition]
    metrics: dict[str, Any] = {
        "examples": len(examples),
        "prompts": len(np.unique(examples.groups)),
        "duplicates_dropped": examples.duplicates,
        "composition": composition,
        "samplers": sorted({part["sampler"] for part in composition}),
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
        "cross_validation": cv,
        "beats_class_frequencies": bool(beats),
        "checkpoint": str(target) if write_checkpoint else None,
        "fingerprint": served,
        "sources": list(examples.sources),
        "seconds": time.perf_counter() - start,
    }
    failure: OSError | None = None
    if write_checkpoint:
        try:
            install_checkpoint(module, target, _dumps(metrics) if checkpoint is not None else None)
        except OSError as err:
            metrics["checkpoint"] = metrics["fingerprint"] = None
            metrics["checkpoint_error"] = f"{type(err).__name__}: {err}"
            where = out_dir / "metrics.json"
            failure = OSError(f"cannot write the checkpoint {target} ({err.strerror or err}); metrics are in {where}")
    (out_dir / "metrics.json").write_text(_dumps(metrics))
    if failure is not None:
        raise failure
    return metrics


def _dumps(metrics: dict[str, Any]) -> str:
    return json.dumps(metrics, indent=2, allow_nan=False) + "\n"


def improvement_warning(metrics: dict[str, Any]) -> str | None:
    """A warning line when a model no better than the class frequencies was saved anyway."""
    if metrics["beats_class_frequencies"] or not metrics["checkpoint"]:
        return None
    cv = metrics["cross_validation"]
    return (
        f"warning: the saved model is no better than the class frequencies (held-out log loss "
        f"{cv['model']['log_loss']:.4f} vs {cv['frequencies']['log_loss']:.4f}); "
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
        loss = "-" if row["log_loss"] is None or not math.isfinite(row["log_loss"]) else f"{row['log_loss']:.4f}"
        label = metrics["model"]["name"] if name == "model" else name
        lines.append(f"{label:<22}{row['accuracy']:>10.4f}{loss:>10}")
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


def run_training(cfg, out_dir: Path | None = None) -> dict[str, Any]:
    """The Hydra job: validate the config, collect the trees, train, evaluate, save.

    Everything a user can get wrong is checked before the trees are read (ConfigError, one
    line). ``out_dir`` defaults to Hydra's run directory.
    """
    from omegaconf import OmegaConf

    from presto.config import ConfigError
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
    try:
        settings = ModelSettings(**{**model_cfg, "hidden": tuple(model_cfg.get("hidden") or ())})
        names = resolve_features(cfg.features)
        epsilon = float(cfg.epsilon)
        if not 0.0 < epsilon < 0.5:
            raise ValueError(f"epsilon must be in (0, 1/2), got {epsilon}")
        if int(cfg.folds) < 2:
            raise ValueError(f"folds must be >= 2, got {cfg.folds}")
    except (TypeError, ValueError) as err:
        raise ConfigError(str(err)) from None
    checkpoint = Path(str(cfg.output)).expanduser().resolve() if cfg.output else None
    if checkpoint is not None:
        check_output(checkpoint)
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
