"""Per-token statistics and seeded sampling from one row of logits (toy and hf engines).

All quantities of a position come from the same logits: log p0 from the raw logits,
log q at the sampling temperature and at any extra temperatures from the scaled ones, and
the entropy of p0. Sampling inverts the CDF of q with a uniform from the request's own
generator, so a token depends on (logits, seed, position) and never on the batch.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from presto.engines.base import SuffixResult


def request_generator(seed: int) -> np.random.Generator:
    """The per-request stream of sampling uniforms (one uniform per generated token)."""
    return np.random.Generator(np.random.PCG64(seed))


def log_softmax(logits: np.ndarray) -> np.ndarray:
    """Row-wise log-softmax in float64."""
    logits = np.asarray(logits, dtype=np.float64)
    shifted = logits - logits.max(axis=-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


def sample_index(log_probs: np.ndarray, uniform: float) -> int:
    """Invert the CDF of a normalized log-probability vector at ``uniform`` in [0, 1)."""
    cdf = np.cumsum(np.exp(log_probs - log_probs.max()))
    index = int(np.searchsorted(cdf, uniform * cdf[-1], side="right"))
    return min(index, len(cdf) - 1)


class TokenStats:
    """Accumulates the per-token arrays of one request as tokens are drawn."""

    def __init__(self, num_new_tokens: int, num_extra: int) -> None:
        self.tokens = np.zeros(num_new_tokens, dtype=np.int64)
        self.logp0 = np.zeros(num_new_tokens)
        self.logq = np.zeros(num_new_tokens)
        self.entropy = np.zeros(num_new_tokens)
        self.logq_extra = np.zeros((num_new_tokens, num_extra))

    def draw(
        self,
        position: int,
        logits: np.ndarray,
        temperature: float,
        extra_temperatures: Sequence[float],
        uniform: float,
    ) -> int:
        """Sample the token at ``position`` from ``logits`` and record its statistics."""
        logits = np.asarray(logits, dtype=np.float64)
        logp0 = log_softmax(logits)
        logq = logp0 if temperature == 1.0 else log_softmax(logits / temperature)
        token = sample_index(logq, uniform)
        self.tokens[position] = token
        self.logp0[position] = logp0[token]
        self.logq[position] = logq[token]
        p0 = np.exp(logp0)
        self.entropy[position] = -float(np.sum(p0 * np.where(p0 > 0, logp0, 0.0)))
        for j, extra in enumerate(extra_temperatures):
            self.logq_extra[position, j] = log_softmax(logits / extra)[token]
        return token

    def result(self) -> SuffixResult:
        return SuffixResult(self.tokens, self.logp0, self.logq, self.entropy, self.logq_extra)
