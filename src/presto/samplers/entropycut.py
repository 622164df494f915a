"""EntropyCut (Zhou et al.): suffix resampling that cuts where p0's entropy jumps.

The cut law
-----------
Let the state hold T >= 1 generated tokens and let ``H[i] = state.entropy[i]`` be the
entropy of p0's next-token distribution at generated position i (i = 0..T-1). ``H[i]``
is a function of the prompt and ``tokens[:i]`` only. A cut ``c`` in {0, ..., T-1} keeps
the first c generated tokens and resamples positions c..T-1 from q_tau (as PowerMH does).

- Jump weight: for c >= 1, ``d_c = H[c] - H[c-1]`` and ``w_c = d_c ** beta`` when
  ``d_c > 0``, else ``w_c = 0`` (a flat or falling entropy never attracts a cut; with
  beta = 0 the weight is the indicator of an increase). ``w_0 = 0``: position 0 has no
  earlier generated position to compare with, so it is reached only through the uniform
  part below.
- Entropy law: ``e_c = w_c / S`` with ``S = sum_c w_c``; when ``S = 0`` (T = 1, or the
  entropy never increases) the entropy law falls back to the uniform law ``e_c = 1/T``.
- Cut law: ``p_x(c) = (1 - m) * e_c + m / T`` with ``m = uniform_mix`` in [0, 1].
  With m > 0 every cut has positive probability, so the chain can reach all of
  pi_alpha; m = 0 is the pure entropy law, m = 1 is PowerMH's uniform law.

The cut is ``c = min{c : CDF(c) > u * CDF(T-1)}`` for the decision's retained uniform u
(inversion of the CDF; cuts of probability zero are never chosen). Numerics: jumps are
divided by the largest one before the power (the normalized law is unchanged, and large
beta cannot overflow); a rise whose (rise / largest) ** beta is below the smallest double
(~5e-324; subnormal weights down to there are kept) then weighs zero, which keeps the law a
function of the state alone (the chain stays exact).

Acceptance
----------
With y = x[:c] + s, s ~ q_tau(. | x[:c]), the reverse move from y draws the same c under
y's own law and resamples x's suffix, so

    A = min(1, [p0(y)^alpha q_tau(x[c:] | x[:c]) p_y(c)] / [p0(x)^alpha q_tau(s | x[:c]) p_x(c)]).

Since ``H[c]`` and ``H[c-1]`` depend only on the shared prefix, ``w_c`` is the same for x
and y; the two laws differ through their normalizers S and the fallback. For PreSTO the
law depends on the whole state, so ``state_depends_cut`` is True: a prefetched cut chosen
under the round root's entropy profile is re-checked against the realized state and the
proposal discarded when it differs (prefetch/presto.py).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from numbers import Real

import numpy as np

from presto.config import ConfigError
from presto.engines.base import SuffixResult
from presto.samplers.kernel import Decision, Kernel, metropolis_accept
from presto.samplers.powermh import suffix_log_ratio
from presto.samplers.randomness import DecisionInputs
from presto.samplers.state import ChainState

DEFAULT_BETA = 4.0
DEFAULT_UNIFORM_MIX = 0.1


def validate_entropycut_options(beta: object, uniform_mix: object) -> tuple[float, float]:
    """Check ``sampler.beta`` >= 0 and ``sampler.uniform_mix`` in [0, 1]; one line per mistake."""
    if isinstance(beta, bool) or not isinstance(beta, Real) or not math.isfinite(beta) or beta < 0:
        raise ConfigError(f"sampler.beta must be a finite number >= 0, got {beta!r}")
    if isinstance(uniform_mix, bool) or not isinstance(uniform_mix, Real) or not (0.0 <= float(uniform_mix) <= 1.0):
        raise ConfigError(f"sampler.uniform_mix must be a number in [0, 1], got {uniform_mix!r}")
    return float(beta), float(uniform_mix)


def entropy_jump_weights(entropy: np.ndarray, beta: float) -> np.ndarray:
    """Unnormalized weights ``w_c``, c = 0..T-1, scaled by the largest jump.

    Dividing every positive jump by the largest one leaves the normalized law unchanged
    and keeps ``d ** beta`` from overflowing for large beta.
    """
    entropy = np.asarray(entropy, dtype=np.float64)
    weights = np.zeros(entropy.shape[0])
    if entropy.shape[0] < 2:
        return weights
    rises = np.maximum(entropy[1:] - entropy[:-1], 0.0)
    top = rises.max()
    if not top > 0:
        return weights
    # 0 ** beta is 0 for beta > 0; for beta = 0 the weight is the indicator of a rise.
    weights[1:] = (rises > 0) if beta == 0 else (rises / top) ** beta
    return weights


def cut_law(entropy: np.ndarray, beta: float, uniform_mix: float) -> np.ndarray:
    """The probabilities ``p(c)``, c = 0..T-1, of the module docstring's cut law."""
    length = int(np.shape(entropy)[0])
    if length < 1:
        raise ValueError("the cut law needs a state with at least one generated token")
    weights = entropy_jump_weights(entropy, beta)
    total = weights.sum()
    entropy_part = weights / total if total > 0 else np.full(length, 1.0 / length)
    return (1.0 - uniform_mix) * entropy_part + uniform_mix / length


def invert_cut_cdf(law: np.ndarray, uniform: float) -> int:
    """Smallest c with CDF(c) > u * CDF(T-1): never a cut of probability zero."""
    cdf = np.cumsum(law)
    index = int(np.searchsorted(cdf, uniform * cdf[-1], side="right"))
    if index >= cdf.shape[0]:  # u * total rounded up to total: take the last cut with mass
        index = int(np.flatnonzero(law > 0)[-1])
    return index


class EntropyCut(Kernel):
    """Entropy-jump cut law mixed with the uniform law; suffix resampled at tau."""

    name = "entropycut"

    def __init__(
        self, alpha: float, tau: float, beta: float = DEFAULT_BETA, uniform_mix: float = DEFAULT_UNIFORM_MIX
    ) -> None:
        super().__init__(alpha, tau)
        self.beta, self.uniform_mix = validate_entropycut_options(beta, uniform_mix)

    @property
    def state_depends_cut(self) -> bool:
        return True

    def cut_law(self, state: ChainState) -> np.ndarray:
        """``p_state(c)`` for c = 0..T-1."""
        return cut_law(state.entropy, self.beta, self.uniform_mix)

    def log_cut_probability(self, state: ChainState, cut: int) -> float:
        probability = float(self.cut_law(state)[cut])
        return math.log(probability) if probability > 0 else -math.inf

    def cut(self, state: ChainState, inputs: DecisionInputs) -> int:
        return invert_cut_cdf(self.cut_law(state), inputs.cut_uniform)

    def log_ratio(self, state: ChainState, proposal: ChainState, cut: int) -> float:
        """log of the acceptance ratio: the suffix MH ratio plus log p_y(c) - log p_x(c)."""
        log_forward_cut = self.log_cut_probability(state, cut)
        if log_forward_cut == -math.inf:
            # The ratio would be +inf: a move this state never proposes would always be accepted.
            raise ValueError(f"cut {cut} has probability 0 under the state's cut law; it is not this state's move")
        log_reverse_cut = self.log_cut_probability(proposal, cut)
        if log_reverse_cut == -math.inf:
            return -math.inf  # y cannot cut at c, so the move can never be reversed
        return suffix_log_ratio(self.alpha, state, proposal, cut) + log_reverse_cut - log_forward_cut

    def decide(self, state: ChainState, cut: int, results: Sequence[SuffixResult], inputs: DecisionInputs) -> Decision:
        proposal = state.splice(cut, results[0])
        accepted, log_accept = metropolis_accept(self.log_ratio(state, proposal, cut), inputs.accept_uniform)
        return Decision(proposal if accepted else state, proposal, accepted, log_accept)
