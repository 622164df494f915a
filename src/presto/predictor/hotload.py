"""Serving the epsilon-certainty predictor: load a checkpoint, watch it, swap it between rounds.

A checkpoint is what :mod:`presto.predictor.module` trains: a Lightning checkpoint whose
``hyper_parameters`` are plain values (feature names, hidden sizes, class order, the
standardization) and whose ``state_dict`` holds a stack of linear layers. Serving does not
need Lightning: the file is read with ``torch.load(weights_only=True)`` (no code from a
replaced file ever runs) and turned into a numpy forward pass, which costs microseconds
per prefetch round.

:class:`HotPredictor` watches the file by (mtime, ctime, size, inode, device), and by
content while the file is too young for those to tell a rewrite apart. The traversal asks
it for the current predictor at the start of every round, so a retraining job that
replaces the file is picked up between rounds, never in the middle of one. Replace it
atomically (write a sibling, then rename, as training does): a file rewritten in place is
picked up too, but a round may catch it half-written (a warning, or for one round a model
mixing the two files' bytes; planning only, the chains never depend on it). At start an unreadable or incompatible file
is an error (:class:`PredictorError`, a config error: one line, no traceback); during a
run it is a warning and the previous predictor stays.

A served checkpoint's ``provenance`` (what its training trees came from) is read as
:mod:`presto.predictor.provenance` parses it: None for older checkpoints.
"""

from __future__ import annotations

import hashlib
import io
import os
import re
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from presto.config import ConfigError
from presto.predictor.features import CLASSES, node_feature_names
from presto.predictor.provenance import parse_provenance

CHECKPOINT_FORMAT = "presto-epsilon-classifier/1"


class PredictorError(ConfigError):
    """A predictor checkpoint is missing, unreadable, or not one this version can serve."""


@dataclass(frozen=True)
class Predictor:
    """A loaded classifier as numpy arrays: standardize, (linear, ReLU)*, linear, softmax."""

    feature_names: tuple[str, ...]
    mean: np.ndarray
    std: np.ndarray
    layers: tuple[tuple[np.ndarray, np.ndarray], ...]  # (weight [out, in], bias [out])
    epsilon: float
    fingerprint: str  # sha256 prefix of the weights: which model planned a round
    path: str
    # What the training trees came from (samplers, composition, sampler_settings); None: not recorded.
    provenance: dict[str, Any] | None = None

    def predict_proba(self, features: np.ndarray) -> np.ndarray:
        """Class probabilities (n, 3) in CLASSES order for an (n, d) feature matrix."""
        z = (np.asarray(features, dtype=np.float64) - self.mean) / self.std
        for i, (weight, bias) in enumerate(self.layers):
            z = z @ weight.T + bias
            if i + 1 < len(self.layers):
                z = np.maximum(z, 0.0)
        z = z - z.max(axis=1, keepdims=True)
        p = np.exp(z)
        return p / p.sum(axis=1, keepdims=True)

    def branch_probability(self, features: np.ndarray) -> np.ndarray:
        """h_hat(v+; eps) of eq. 14 from the predicted class probabilities."""
        from presto.prefetch.allocation import predicted_branch_probability

        p = self.predict_proba(features)
        return predicted_branch_probability(p[:, CLASSES.index("reject")], p[:, CLASSES.index("accept")])


def _layer_index(key: str) -> int:
    match = re.fullmatch(r"net\.(\d+)\.(weight|bias)", key)
    return int(match.group(1)) if match else -1


OPTION = "traversal.predictor"
"""The setting errors name by default; a script with its own flag passes that instead."""


def predictor_from_checkpoint(
    checkpoint: Any, path: str, fingerprint: str | None = None, option: str = OPTION
) -> Predictor:
    """Validate a loaded checkpoint dict and convert it; PredictorError says what is wrong.

    torch.load(weights_only=True) reads any nesting of plain containers, so every field's
    type is checked here: a file of the wrong structure is a PredictorError like any other
    bad file (a one-line error at start, a warning that keeps the old predictor in a run).
    """
    where = f"{option}: {path}"
    try:
        return _from_checkpoint(checkpoint, where, path, fingerprint)
    except PredictorError:
        raise
    except Exception as err:  # a structure no check above foresaw: still the file's fault, not the run's
        raise PredictorError(f"{where} has a malformed structure ({type(err).__name__}: {err})") from None


def _from_checkpoint(checkpoint: Any, where: str, path: str, fingerprint: str | None) -> Predictor:
    if not isinstance(checkpoint, dict) or "hyper_parameters" not in checkpoint or "state_dict" not in checkpoint:
        raise PredictorError(f"{where} is not a Lightning checkpoint (no hyper_parameters/state_dict)")
    hp = checkpoint["hyper_parameters"]
    if not isinstance(hp, dict):
        raise PredictorError(f"{where} has hyper_parameters of type {type(hp).__name__}, expected a dict")
    if hp.get("checkpoint_format") != CHECKPOINT_FORMAT:
        raise PredictorError(
            f"{where} is not an epsilon-certainty predictor of this version "
            f"(checkpoint_format={hp.get('checkpoint_format')!r}, expected {CHECKPOINT_FORMAT!r})"
        )
    classes = hp.get("classes", ())
    if not isinstance(classes, list | tuple) or tuple(classes) != CLASSES:
        raise PredictorError(f"{where} predicts classes {classes!r}, expected {list(CLASSES)}")
    listed = hp.get("feature_names", ())
    if not isinstance(listed, list | tuple) or not all(isinstance(n, str) for n in listed):
        raise PredictorError(f"{where} has feature_names {listed!r}, expected a list of feature names")
    names = tuple(listed)
    unknown = sorted(set(names) - node_feature_names())
    if not names or unknown:
        raise PredictorError(f"{where} needs features the prefetcher does not compute: {unknown or 'none given'}")
    epsilon = hp.get("epsilon", 0.01)
    if isinstance(epsilon, bool) or not isinstance(epsilon, int | float) or not 0.0 < epsilon < 0.5:
        raise PredictorError(f"{where} has epsilon={epsilon!r}, expected a number in (0, 1/2)")
    state = checkpoint["state_dict"]
    if not isinstance(state, dict):
        raise PredictorError(f"{where} has a state_dict of type {type(state).__name__}, expected a dict")
    try:
        mean = np.asarray(state["feature_mean"], dtype=np.float64)
        std = np.asarray(state["feature_std"], dtype=np.float64)
        indices = sorted({_layer_index(k) for k in state if _layer_index(k) >= 0})
        layers = tuple(
            (
                np.asarray(state[f"net.{i}.weight"], dtype=np.float64),
                np.asarray(state[f"net.{i}.bias"], dtype=np.float64),
            )
            for i in indices
        )
    except (KeyError, TypeError, ValueError) as err:
        raise PredictorError(f"{where} has an incomplete state_dict ({err})") from None
    width = len(names)
    if mean.shape != (width,) or std.shape != (width,) or not layers or np.any(std <= 0):
        raise PredictorError(f"{where} has a standardization that does not match its {width} features")
    for weight, bias in layers:
        if weight.ndim != 2 or weight.shape[1] != width or bias.shape != (weight.shape[0],):
            raise PredictorError(f"{where} has layer shapes that do not chain ({weight.shape} after width {width})")
        width = weight.shape[0]
    if width != len(CLASSES):
        raise PredictorError(f"{where} has {width} outputs, expected {len(CLASSES)}")
    arrays = [mean, std, *(a for layer in layers for a in layer)]
    if not all(np.all(np.isfinite(a)) for a in arrays):
        raise PredictorError(f"{where} holds non-finite weights")
    if fingerprint is None:  # identify the model, not the file: equal weights, equal fingerprint
        digest = hashlib.sha256("\0".join(names).encode())
        for array in arrays:
            digest.update(np.ascontiguousarray(array, dtype=np.float64).tobytes())
        fingerprint = digest.hexdigest()[:12]
    provenance = parse_provenance(hp.get("provenance"))
    return Predictor(names, mean, std, layers, float(epsilon), fingerprint, path, provenance)


Signature = tuple[int, int, int, int, int]
"""(mtime, ctime, size, inode, device): ctime too, which no tool can set back (cp -p, rsync -t
and touch -r restore the mtime of a file rewritten in place with a same-sized model)."""

RACY_NS = 2_000_000_000
"""Timestamp granularity to allow for (FAT has 2 s; ext4 a kernel tick). Within it of a file's
last change, a rewrite in place can leave every stat field as it was, so until the file is
older than this its content is compared too (git's "racily clean" index entries)."""


def _now_ns() -> int:
    return time.time_ns()


def _signature(stat: os.stat_result) -> Signature:
    return stat.st_mtime_ns, stat.st_ctime_ns, stat.st_size, stat.st_ino, stat.st_dev


def _not_a_file(path: Path, option: str) -> PredictorError:
    if path.is_dir():
        return PredictorError(f"{option}: {path} is a directory, not a checkpoint file")
    return PredictorError(f"{option}: no such checkpoint {path}")


def _read_bytes(path: Path, option: str = OPTION) -> tuple[bytes, Signature]:
    try:
        with path.open("rb") as handle:
            stat = os.fstat(handle.fileno())
            data = handle.read()
    except OSError as err:
        raise PredictorError(f"{option}: cannot read {path} ({err.strerror or err})") from None
    return data, _signature(stat)


def _parse(data: bytes, path: Path, option: str = OPTION) -> Predictor:
    import torch

    try:
        checkpoint = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    except Exception as err:  # torch raises many types for a damaged or foreign file
        raise PredictorError(f"{option}: {path} is not a readable checkpoint ({type(err).__name__})") from None
    return predictor_from_checkpoint(checkpoint, str(path), option=option)


def load_predictor(path: str | Path, option: str = OPTION) -> Predictor:
    """Read and validate a checkpoint now; PredictorError (one line, naming ``option``) if it cannot be served."""
    path = Path(path)
    if not path.is_file():
        raise _not_a_file(path, option)
    return _parse(_read_bytes(path, option)[0], path, option)


class HotPredictor:
    """A checkpoint path whose predictor is reloaded when the file is replaced.

    ``current()`` costs one ``os.stat`` when nothing changed (plus a read of the file while it
    is younger than :data:`RACY_NS`). A changed file is loaded in full before the swap, so a
    round plans with either the old or the new predictor, never a mix. A file that fails to
    load, or that disappears, is warned about once; the next replacement is tried again.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.swaps = 0
        self._predictor = self._load_strictly()

    def _load_strictly(self) -> Predictor:
        """Load the file as it is now, or PredictorError (a run's start)."""
        if not self.path.is_file():
            raise _not_a_file(self.path, OPTION)
        now = _now_ns()
        data, signature = _read_bytes(self.path)
        predictor = _parse(data, self.path)
        self._remember(signature, hashlib.sha256(data).digest(), now)
        return predictor

    def _remember(self, signature: Signature | None, digest: bytes | None, now: int) -> None:
        """The last file state read, served or not (``digest``: its content's sha256, None when it
        could not be read): until it changes there is nothing new to load."""
        self._seen = signature
        self._digest = digest
        # Once the file was older than the granularity when read, any later write shows in its
        # ctime (an unreadable file: a new permission or a new file changes the ctime too). The
        # ctime, not the mtime, which touch -d can set in the future.
        self._settled = digest is None or signature is None or now - signature[1] > RACY_NS

    def check(self) -> Predictor:
        """At the start of a later run served by this watcher: the file as it is now, or PredictorError.

        A watcher outlives its run (one per file per process), and a checkpoint broken or
        deleted since is an error at a run's start, as for the first run.
        """
        predictor = self._load_strictly()
        if predictor.fingerprint != self._predictor.fingerprint:
            self.swaps += 1
        self._predictor = predictor
        return predictor

    def _stat(self) -> Signature | None:
        try:
            return _signature(os.stat(self.path))
        except OSError:
            return None

    def _keep(self, reason: str) -> Predictor:
        with warnings.catch_warnings():  # each failed replacement: the default filter shows a message once a process
            warnings.simplefilter("always", RuntimeWarning)
            warnings.warn(
                f"{reason}; keeping the previous predictor ({self._predictor.fingerprint})",
                RuntimeWarning,
                stacklevel=3,
            )
        return self._predictor

    def current(self) -> Predictor:
        """The predictor to plan this round with (reloaded first if the file changed)."""
        signature = self._stat()
        if signature is None:
            if self._seen is not None:  # say so once: a deleted file may be a job about to write anew
                self._remember(None, None, 0)
                return self._keep(f"{OPTION}: {self.path} no longer exists")
            return self._predictor
        if signature == self._seen and self._settled:
            return self._predictor
        now = _now_ns()
        try:
            data, read_signature = _read_bytes(self.path)
        except PredictorError as err:
            if signature == self._seen:
                return self._predictor
            self._remember(signature, None, now)
            return self._keep(str(err))
        digest = hashlib.sha256(data).digest()
        unchanged = digest == self._digest
        self._remember(read_signature, digest, now)
        if unchanged:
            return self._predictor
        try:
            predictor = _parse(data, self.path)
        except PredictorError as err:
            return self._keep(str(err))
        self._predictor = predictor
        self.swaps += 1
        return predictor
