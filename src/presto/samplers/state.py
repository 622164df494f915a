"""The MH state: the generated tokens and the per-token statistics stored with them.

Each stored value was computed, when its token was sampled, from the state's own prefix:
after an accepted proposal at cut c, positions < c keep the old values (same prefix
tokens) and positions >= c take the proposal's. So the sums over any suffix of the state
are exactly log q(x_{c+1:T} | x_{0:c}) and log p0(x_{c+1:T} | x_{0:c}), which is what the
acceptance ratio needs, with no rescoring call.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from presto.engines.base import SuffixResult


@dataclass(frozen=True)
class ChainState:
    """Generated tokens (prompt excluded) with log p0, log q_tau, entropy and extra log q."""

    tokens: np.ndarray  # int64 (T,)
    logp0: np.ndarray  # float64 (T,)
    logq: np.ndarray  # float64 (T,)
    entropy: np.ndarray  # float64 (T,)
    logq_extra: np.ndarray  # float64 (T, E)

    @classmethod
    def empty(cls, num_extra: int = 0) -> ChainState:
        return cls(
            np.zeros(0, dtype=np.int64),
            np.zeros(0),
            np.zeros(0),
            np.zeros(0),
            np.zeros((0, num_extra)),
        )

    @property
    def length(self) -> int:
        return int(self.tokens.shape[0])

    def splice(self, cut: int, suffix: SuffixResult) -> ChainState:
        """Keep the first ``cut`` tokens and append a generated suffix."""
        return ChainState(
            np.concatenate([self.tokens[:cut], suffix.tokens]),
            np.concatenate([self.logp0[:cut], suffix.logp0]),
            np.concatenate([self.logq[:cut], suffix.logq]),
            np.concatenate([self.entropy[:cut], suffix.entropy]),
            np.concatenate([self.logq_extra[:cut], suffix.logq_extra]),
        )

    def shares_prefix(self, other: ChainState, cut: int) -> bool:
        """True when both states hold the same first ``cut`` tokens."""
        return bool(np.array_equal(self.tokens[:cut], other.tokens[:cut]))

    def loglik_mean(self) -> float:
        """Token-normalized log-likelihood under p0."""
        return float(self.logp0.mean()) if self.length else 0.0

    def confidence_mean(self) -> float:
        """Mean negative entropy of p0 along the sequence (higher = more confident)."""
        return float(-self.entropy.mean()) if self.length else 0.0
