"""The epsilon-certainty classifier as a LightningModule (the paper's Appendix E.7).

Three-class logistic regression (no hidden layer) or an MLP with ReLU hidden layers,
trained on the log loss plus the paper's L2 penalty lambda / (2 n) * sum of squared
weights (biases excluded), with n the number of training examples: lambda = 1 for the
logistic regression (scikit-learn's C = 1 / lambda) and 1e-3 for the MLPs (scikit-learn's
``alpha``). The logistic regression is convex and small, so it is fitted full-batch with
L-BFGS to its optimum; MLPs use Adam with early stopping on a validation split of whole
prompts (nodes of one prompt are alike, so validating on nodes of training prompts would
stop too late).

The module takes plain hyperparameters and calls ``save_hyperparameters()``; the feature
standardization lives in buffers. ``provenance`` (what the training trees came from:
samplers, composition, sampler_settings; None for a model not trained from logged runs) is
one of them, so a served checkpoint says which sampler and setting it was fitted for;
checkpoints written before it load with None. ``EpsilonClassifier.load_from_checkpoint(path)``
works without Hydra, and :mod:`presto.predictor.hotload` serves the same file without Lightning.
"""

from __future__ import annotations

import copy
import logging
import os
import warnings
from collections.abc import Sequence
from pathlib import Path

import lightning as L
import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from presto.predictor.features import CLASSES
from presto.predictor.hotload import CHECKPOINT_FORMAT, predictor_from_checkpoint
from presto.predictor.train import ModelSettings


class EpsilonClassifier(L.LightningModule):
    """Standardize, (Linear, ReLU) per hidden layer, Linear to the three class logits."""

    def __init__(
        self,
        feature_names: Sequence[str],
        hidden: Sequence[int] = (),
        l2: float = 1.0,
        num_train: int = 1,
        optimizer: str = "lbfgs",
        learning_rate: float = 1.0,
        mean: Sequence[float] | None = None,
        std: Sequence[float] | None = None,
        epsilon: float = 0.01,
        classes: Sequence[str] = CLASSES,
        checkpoint_format: str = CHECKPOINT_FORMAT,
        provenance: dict | None = None,
    ) -> None:
        super().__init__()
        if optimizer not in ("lbfgs", "adam"):
            raise ValueError(f"optimizer must be 'lbfgs' or 'adam', got {optimizer!r}")
        self.save_hyperparameters()
        width = len(feature_names)
        self.register_buffer("feature_mean", torch.tensor(mean if mean is not None else [0.0] * width))
        self.register_buffer("feature_std", torch.tensor(std if std is not None else [1.0] * width))
        layers: list[nn.Module] = []
        for units in hidden:
            layers += [nn.Linear(width, int(units)), nn.ReLU()]
            width = int(units)
        layers.append(nn.Linear(width, len(classes)))
        self.net = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net((x - self.feature_mean) / self.feature_std)

    def penalty(self) -> torch.Tensor:
        weights = [p for name, p in self.net.named_parameters() if name.endswith("weight")]
        return sum((w**2).sum() for w in weights) * (self.hparams.l2 / (2.0 * max(1, self.hparams.num_train)))

    def training_step(self, batch, batch_idx):
        x, y, w = batch  # w: example weights, mean 1 over the training set
        loss = (w * nn.functional.cross_entropy(self(x), y, reduction="none")).mean() + self.penalty()
        self.log("train_loss", loss, prog_bar=False, on_epoch=True, on_step=False)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y, w = batch
        loss = (w * nn.functional.cross_entropy(self(x), y, reduction="none")).sum() / w.sum().clamp_min(1e-12)
        self.log("val_loss", loss, on_epoch=True, on_step=False)

    def configure_optimizers(self):
        if self.hparams.optimizer == "lbfgs":
            return torch.optim.LBFGS(
                self.parameters(),
                lr=self.hparams.learning_rate,
                max_iter=100,
                tolerance_grad=1e-9,
                tolerance_change=1e-12,
                line_search_fn="strong_wolfe",
            )
        return torch.optim.Adam(self.parameters(), lr=self.hparams.learning_rate)

    @torch.no_grad()
    def predict_proba(self, features: np.ndarray) -> np.ndarray:
        self.eval()
        logits = self(torch.as_tensor(np.asarray(features), dtype=torch.float32))
        return torch.softmax(logits.double(), dim=1).numpy()


class _KeepBest(L.Callback):
    """Restore the weights of the epoch with the lowest validation loss when fitting ends."""

    def __init__(self) -> None:
        self.best = float("inf")
        self.state: dict | None = None

    def on_validation_epoch_end(self, trainer, pl_module):
        loss = trainer.callback_metrics.get("val_loss")
        if loss is not None and float(loss) < self.best:
            self.best = float(loss)
            self.state = copy.deepcopy(pl_module.state_dict())

    def on_fit_end(self, trainer, pl_module):
        if self.state is not None:
            pl_module.load_state_dict(self.state)


def _quiet_lightning() -> None:
    for name in ("lightning", "lightning.pytorch", "lightning.fabric", "pytorch_lightning"):
        logging.getLogger(name).setLevel(logging.ERROR)
    warnings.filterwarnings("ignore", message=".*does not have many workers.*")
    warnings.filterwarnings("ignore", message=".*number of training batches.*")
    warnings.filterwarnings("ignore", message=".*LeafSpec.*")
    warnings.filterwarnings("ignore", message=".*defined a `validation_step` but have no `val_dataloader`.*")


def fit_classifier(
    features: np.ndarray,
    labels: np.ndarray,
    feature_names: Sequence[str],
    settings: ModelSettings,
    seed: int = 0,
    epsilon: float = 0.01,
    weights: np.ndarray | None = None,
    groups: np.ndarray | None = None,
    provenance: dict | None = None,
) -> EpsilonClassifier:
    """Train one classifier on (features, labels[, weights]); the standardization comes from these features.

    ``groups`` (the prompt of each example) makes the early-stopping split hold out whole
    prompts; see :func:`validation_split`. The split made is ``module.validation``.
    ``provenance`` is stored as a hyperparameter (what the examples came from), never used in the fit.
    """
    _quiet_lightning()
    L.seed_everything(seed, workers=True, verbose=False)
    features = np.asarray(features, dtype=np.float32)
    labels = np.asarray(labels, dtype=np.int64)
    weights = np.ones(len(labels)) if weights is None else np.asarray(weights, dtype=np.float64)
    mean = features.mean(axis=0)
    std = features.std(axis=0)
    std = np.where(std > 1e-8, std, 1.0)
    val_idx, train_idx, validation = validation_split(len(labels), settings.val_fraction, seed, groups)
    n_val = len(val_idx)
    module = EpsilonClassifier(
        feature_names=list(feature_names),
        hidden=[int(h) for h in settings.hidden],
        l2=float(settings.l2),
        num_train=len(train_idx),
        optimizer=settings.optimizer,
        learning_rate=float(settings.learning_rate),
        mean=[float(v) for v in mean],
        std=[float(v) for v in std],
        epsilon=float(epsilon),
        classes=list(CLASSES),
        provenance=provenance,
    )

    scaled = (weights / max(weights[train_idx].mean(), 1e-300)).astype(np.float32)

    def loader(idx: np.ndarray, shuffle: bool, full_batch: bool = False) -> DataLoader:
        data = TensorDataset(
            torch.from_numpy(features[idx]), torch.from_numpy(labels[idx]), torch.from_numpy(scaled[idx])
        )
        whole = full_batch or settings.batch_size is None
        size = len(idx) if whole else min(int(settings.batch_size), len(idx))
        return DataLoader(data, batch_size=max(1, size), shuffle=shuffle)

    callbacks: list[L.Callback] = []
    if n_val:
        from lightning.pytorch.callbacks import EarlyStopping

        callbacks += [EarlyStopping(monitor="val_loss", patience=settings.patience, mode="min"), _KeepBest()]
    trainer = L.Trainer(
        max_epochs=settings.max_epochs,
        accelerator="cpu",
        devices=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        callbacks=callbacks,
        deterministic=True,
    )
    try:
        trainer.fit(
            module,
            train_dataloaders=loader(train_idx, shuffle=settings.batch_size is not None),
            # One validation batch: Lightning averages a logged value over batches by their node
            # counts, not their weights, so with several batches val_loss was not the weighted loss.
            val_dataloaders=loader(val_idx, shuffle=False, full_batch=True) if n_val else None,
        )
    except RuntimeError as err:
        # L-BFGS whose step overflows float32 (a huge learning_rate or l2) raises "value cannot be
        # converted to type float without overflow": the fit diverged. Its weights become NaN, so it
        # takes the diverged fit's path (metrics.json with nulls, nothing installed), not a traceback.
        finite = all(bool(torch.isfinite(p).all()) for p in module.parameters())
        if finite and "overflow" not in str(err):
            raise
        with torch.no_grad():
            for parameter in module.net.parameters():
                parameter.fill_(float("nan"))
    module.eval()
    module.validation = validation  # not a hyperparameter: how this fit was made, not what it serves
    return module


def validation_split(
    n: int, fraction: float, seed: int, groups: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray, dict]:
    """(validation, training) indices for early stopping, and what was held out.

    With ``groups``, ``fraction`` of the prompts (rounded, at least one) are held out whole,
    chosen by ``seed``. Too few prompts for that (or no groups given): when a single prompt
    would be more than twice ``fraction`` of them (fewer than 5 prompts at 10 %), holding
    one out would take that much data from the fit, so the split falls back to a random
    ``fraction`` of the nodes, and the returned description says ``"split": "nodes"``
    (metrics.json then shows that early stopping validated on nodes of its training prompts).
    """
    rng = np.random.default_rng(seed)
    none = np.arange(0), np.arange(n), {"split": None, "prompts": 0, "nodes": 0}
    if fraction <= 0:
        return none
    if groups is not None:
        groups = np.asarray(groups)
        prompts = np.unique(groups)
        if len(prompts) >= 2 and 2.0 * fraction * len(prompts) >= 1.0 - 1e-9:
            held = rng.permutation(prompts)[: min(len(prompts) - 1, max(1, round(fraction * len(prompts))))]
            is_val = np.isin(groups, held)
            val_idx, train_idx = np.flatnonzero(is_val), np.flatnonzero(~is_val)
            if len(train_idx) >= 2:
                return val_idx, train_idx, {"split": "prompts", "prompts": len(held), "nodes": len(val_idx)}
    order = rng.permutation(n)
    n_val = round(fraction * n)
    if n_val == 0 or n - n_val < 2:
        return none
    return order[:n_val], order[n_val:], {"split": "nodes", "prompts": 0, "nodes": n_val}


def checkpoint_payload(module: EpsilonClassifier) -> dict:
    """What :func:`save_checkpoint` writes (and hot-loading reads back): weights and plain hyperparameters."""
    return {
        "state_dict": {k: v.detach().cpu().clone() for k, v in module.state_dict().items()},
        "hyper_parameters": _plain(dict(module.hparams)),
        "pytorch-lightning_version": L.__version__,
        "epoch": 0,
        "global_step": 0,
    }


def fingerprint(module: EpsilonClassifier, path: str | Path = "") -> str:
    """The fingerprint a traversal logs (trees.jsonl's plan ``predictor``) once it serves this module.

    Computed by hot-loading's own :func:`presto.predictor.hotload.predictor_from_checkpoint`
    on what :func:`save_checkpoint` writes, so it equals ``load_predictor(path).fingerprint``.
    """
    return predictor_from_checkpoint(checkpoint_payload(module), str(path)).fingerprint


def save_checkpoint(module: EpsilonClassifier, path: str | Path) -> Path:
    """Write a small checkpoint (weights and hyperparameters, no optimizer state) atomically.

    The file is written next to ``path`` and renamed over it, so a running traversal that
    watches ``path`` sees either the old or the new checkpoint, never half of one.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    checkpoint = checkpoint_payload(module)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        torch.save(checkpoint, tmp)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)  # a full disk must not leave half a checkpoint behind
        raise
    return path


def _plain(value):
    """Hyperparameters as lists, floats and strings only (torch.load(weights_only=True) reads them)."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    return value
