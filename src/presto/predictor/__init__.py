"""The epsilon-certainty predictor: features of logged tree nodes, training, hot-loading.

Light at import: :mod:`presto.predictor.hotload` needs numpy and torch (to read a
checkpoint); only :mod:`presto.predictor.module` and :mod:`presto.predictor.train`
import Lightning and scikit-learn.
"""

from __future__ import annotations

from pathlib import Path

DEFAULT_CHECKPOINT = Path(__file__).resolve().parent / "default" / "predictor.ckpt"
"""The shipped predictor (see default/HOW_IT_WAS_MADE.md); ``traversal.predictor=default`` names it."""
