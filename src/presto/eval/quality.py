"""Sample quality under p0: token-normalized log-likelihood and confidence (eq. 21-22).

Both statistics describe a terminal state by the base model alone, so they compare
samplers (and a sampler with its PreSTO variant) on the same scale:

- log-likelihood  = (1/n) * sum_t log p0(x_t | x_<t)
- confidence      = (1/n) * sum_t sum_u p0(u | x_<t) log p0(u | x_<t)   (mean negative entropy)

The engine stores log p0 and the entropy of p0 for every token when it samples it, from
the same logits that drove sampling, so the statistics of a state come for free. The
rescoring path recomputes them through ``Engine.score`` (one forward pass over the whole
sequence, outside ``generate`` so it is not a model call): it is the check that the stored
values are the ones a fresh evaluation of p0 gives.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from presto.engines.base import Engine
from presto.samplers.state import ChainState


@dataclass(frozen=True)
class Quality:
    """The two statistics of one sequence (None when undefined: no tokens, or NaN inputs)."""

    loglik: float | None
    confidence: float | None


def _mean(values: np.ndarray) -> float | None:
    if values.size == 0:
        return None
    mean = float(np.mean(values))
    return mean if math.isfinite(mean) else None


def token_loglik(logp0: Sequence[float] | np.ndarray) -> float | None:
    """Eq. 21: mean log p0 of the generated tokens (None for an empty sequence)."""
    return _mean(np.asarray(logp0, dtype=np.float64))


def token_confidence(entropy: Sequence[float] | np.ndarray) -> float | None:
    """Eq. 22: mean negative entropy of p0's next-token laws along the sequence."""
    values = np.asarray(entropy, dtype=np.float64)
    mean = _mean(values)
    return None if mean is None else -mean


def state_quality(state: ChainState) -> Quality:
    """Statistics from the values stored with the state's tokens (no model call)."""
    return Quality(token_loglik(state.logp0), token_confidence(state.entropy))


def rescore(engine: Engine, prompt_ids: Sequence[int], tokens: Sequence[int] | np.ndarray) -> Quality:
    """Statistics from a fresh pass of p0 over ``prompt_ids + tokens`` via ``engine.score``.

    ``Engine.score`` does not go through ``Engine.generate``, so it adds nothing to the
    model-call count or call time that speedups are computed from. Engines that cannot
    compute entropies on this path (vLLM without exact log-probs) return NaN there, which
    comes back as ``confidence=None``.
    """
    tokens = [int(t) for t in tokens]
    if not tokens:
        return Quality(None, None)
    logp0, entropy = engine.score(list(prompt_ids), tokens)
    return Quality(token_loglik(logp0), token_confidence(entropy))
