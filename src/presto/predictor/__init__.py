"""The epsilon-certainty predictor: features of logged tree nodes, training, hot-loading.

Light at import: :mod:`presto.predictor.hotload` needs numpy and torch (to read a
checkpoint); only :mod:`presto.predictor.module` and :mod:`presto.predictor.train`
import Lightning and scikit-learn.
"""

from __future__ import annotations

from pathlib import Path

DEFAULT_DIR = Path(__file__).resolve().parent / "default"
"""Where the shipped predictors live (see default/HOW_IT_WAS_MADE.md), next to the package."""

SHIPPED_SAMPLERS = ("powermh", "entropycut", "multitry")
"""The samplers a predictor ships for. The paper trains one predictor per sampler: each shipped
one was trained on its own sampler's trees, logged by the embedded default."""


def default_checkpoint(sampler: str | None) -> Path:
    """The shipped predictor of ``sampler`` (one of :data:`SHIPPED_SAMPLERS`), which
    ``traversal.predictor=default`` names in a run of that sampler."""
    if sampler not in SHIPPED_SAMPLERS:
        raise ValueError(f"no predictor ships for sampler {sampler!r}; shipped: {', '.join(SHIPPED_SAMPLERS)}")
    return DEFAULT_DIR / f"{sampler}.ckpt"
