"""Where a trained predictor goes: its location, checked before training, and its installation.

Running traversals hot-load a checkpoint by path and people read ``PATH.metrics.json`` to
know what is serving there, so the two files must describe each other. Both are staged
beside their final names and renamed into place one right after the other, and only when
the checkpoint is really written: a rejected model, a failed job or a failed write leaves
both as they were.
"""

from __future__ import annotations

import os
from pathlib import Path

from presto.config import ConfigError


class MetricsNotInstalled(OSError):
    """The checkpoint went live, but the metrics file beside it could not be renamed into place."""


def metrics_path(checkpoint: Path) -> Path:
    """The metrics file installed beside a checkpoint: ``PATH.metrics.json``."""
    return checkpoint.with_name(checkpoint.name + ".metrics.json")


def check_output(path: Path) -> None:
    """ConfigError (one line, naming ``output``) if a checkpoint cannot be written at ``path``.

    Cross-validation takes minutes on real trees; a location that cannot work is refused
    before it starts. Missing directories are fine (saving creates them), so the check is
    made on the nearest ancestor that exists.
    """
    if path.is_dir():
        raise ConfigError(f"output={path} is a directory; give the checkpoint's file path")
    if metrics_path(path).is_dir():  # the metrics could not be installed beside the checkpoint
        raise ConfigError(f"output={path} cannot be written: {metrics_path(path)} is a directory")
    existing = path.parent
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir():
        raise ConfigError(f"output={path} cannot be written: {existing} is not a directory")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise ConfigError(f"output={path} cannot be written: no permission to write in {existing}")


def install_checkpoint(module, checkpoint: Path, metrics_text: str | None = None) -> Path:
    """Write ``module`` to ``checkpoint`` atomically and, if given, ``metrics_text`` beside it.

    The metrics are staged first and renamed right after the checkpoint, so a reader sees
    the new pair a moment after the new checkpoint appears, and never metrics of a
    checkpoint that failed to be written. Raises OSError when a write fails, and
    :class:`MetricsNotInstalled` when only the metrics' rename (after the checkpoint's) does.
    """
    from presto.predictor.module import save_checkpoint

    if metrics_text is None:
        return save_checkpoint(module, checkpoint)
    final = metrics_path(checkpoint)
    final.parent.mkdir(parents=True, exist_ok=True)
    if final.is_dir():  # checked before the checkpoint goes live: the pair is installed whole or not at all
        raise IsADirectoryError(21, "the metrics file's name is a directory", str(final))
    staged = final.with_name(f".{final.name}.{os.getpid()}.tmp")
    try:
        staged.write_text(metrics_text)
        written = save_checkpoint(module, checkpoint)
    except BaseException:
        staged.unlink(missing_ok=True)
        raise
    try:
        os.replace(staged, final)
    except OSError as err:  # the checkpoint is live already: say so, and leave no staged file
        staged.unlink(missing_ok=True)
        raise MetricsNotInstalled(err.errno, err.strerror or str(err), str(final)) from err
    return written
