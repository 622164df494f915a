"""MultiTryMH: multiple-try Metropolis (Liu et al. 2000) with uniform cuts, as in EGPS.

One transition from a state x of T generated tokens
----------------------------------------------------
1. Cut: ``c ~ Unif{0, ..., T-1}`` (PowerMH's law, from the decision's cut uniform).
2. Proposal: a suffix of length T-c after ``x[:c]`` is drawn by picking a temperature
   ``t_j`` uniformly from the set ``(t_1, ..., t_J)`` and sampling at it. Its density
   is the mixture ``q_mix(s) = (1/J) sum_j q_{t_j}(s | x[:c])``, where each
   ``log q_{t_j}(s | x[:c])`` is the sum of the per-token log q at ``t_j`` returned by the
   generation pass (``logq_extra``; ``extra_temperatures`` is the temperature set, so
   every state stores them and the current suffix needs no rescoring).
3. Weight: ``w(s) = p0(s | x[:c])^alpha / q_mix(s)``, the importance weight of pi_alpha
   against the proposal (the common prefix factor p0(x[:c])^alpha cancels everywhere).
4. Candidates ``y_1..y_M`` from the proposal; ``y = y_k`` chosen with probability
   ``w(y_k) / sum_i w(y_i)`` (the decision's selection uniform inverts that CDF).
5. References ``r_1..r_{M-1}`` from the proposal after ``y[:c]``; since ``y[:c] = x[:c]``
   this is the same law as the candidates', so they are requested in the same engine
   call. ``r_M = x[c:]``, the current suffix.
6. Accept y with probability ``min(1, sum_i w(y_i) / sum_i w(r_i))``.

This is Liu et al.'s rule with ``lambda(x, y) = 1 / (T(x, y) T(y, x))``, which is
symmetric, so the kernel satisfies detailed balance for pi_alpha for each cut, and the
uniform cut law is the same from x and y. M = 1 reduces to MH with the mixture proposal.
Weights of 1000-token suffixes are far outside float range (|log w| of order 1e3), so
everything is computed in log space: ``log q_mix`` is a log-sum-exp over the J
temperature totals minus log J, the two sums of step 6 are log-sum-exps, and selection
exponentiates ``log w - max log w``.

Randomness: the temperature choices and seeds of the 2M-1 requests come from the
decision's auxiliary stream ``PROPOSAL_STREAM`` and the selection uniform from
``SELECTION_STREAM``, so a PreSTO round regenerates exactly the sequential chain's tries.
The cut law does not read the state, so no prefetched decision is ever discarded; a
prefetch depth is one group of 2M-1 requests, so a PreSTO call at budget N_pf carries up
to N_pf * (2M-1) suffixes.

``tau``: no MH proposal uses it. It is the temperature of the block extension (the
initial suffix of each block, ``Kernel.extension_request``). The default tau = 1/alpha
matches PowerMH and EntropyCut, so the three samplers start each block from the same
extension for the same seed (the paper holds initialization fixed across samplers);
the extension temperature does not change the invariant law pi_alpha.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from numbers import Integral, Real

import numpy as np

from presto.config import ConfigError
from presto.engines.base import SuffixRequest, SuffixResult
from presto.samplers.kernel import Decision, Kernel, metropolis_accept, proposal_prefix
from presto.samplers.powermh import uniform_cut
from presto.samplers.randomness import DecisionInputs
from presto.samplers.state import ChainState

DEFAULT_NUM_CANDIDATES = 4
DEFAULT_TEMPERATURES = (0.25, 0.5, 1.0)
PROPOSAL_STREAM = 0  # auxiliary purpose: temperature indices, then seeds, of the 2M-1 requests
SELECTION_STREAM = 1  # auxiliary purpose: the uniform that selects a candidate


def validate_multitry_options(num_candidates: object, temperatures: object) -> tuple[int, tuple[float, ...]]:
    """Check ``sampler.num_candidates`` >= 1 and a non-empty list of temperatures > 0."""
    if isinstance(num_candidates, bool) or not isinstance(num_candidates, Integral) or num_candidates < 1:
        raise ConfigError(f"sampler.num_candidates must be an integer >= 1, got {num_candidates!r}")
    if isinstance(temperatures, str | bytes) or not isinstance(temperatures, Sequence) or not temperatures:
        raise ConfigError(f"sampler.temperatures must be a non-empty list of numbers > 0, got {temperatures!r}")
    for t in temperatures:
        if isinstance(t, bool) or not isinstance(t, Real) or not (math.isfinite(t) and t > 0):
            raise ConfigError(f"sampler.temperatures must be a non-empty list of numbers > 0, got {list(temperatures)}")
    return int(num_candidates), tuple(float(t) for t in temperatures)


def logsumexp(values: np.ndarray) -> float:
    """log sum exp(values), exact for all -inf (returns -inf) and one +inf."""
    values = np.asarray(values, dtype=np.float64)
    top = float(values.max())
    if not math.isfinite(top):
        return top
    return top + math.log(float(np.exp(values - top).sum()))


def log_mixture_density(logq_extra: np.ndarray) -> np.ndarray:
    """log q_mix of suffixes from their per-token log q at each temperature.

    ``logq_extra`` has shape (..., L, J); the result has shape (...): for each suffix the
    log-sum-exp over the J temperature totals, minus log J.
    """
    totals = np.asarray(logq_extra, dtype=np.float64).sum(axis=-2)
    top = totals.max(axis=-1, keepdims=True)
    safe_top = np.where(np.isfinite(top), top, 0.0)
    with np.errstate(divide="ignore"):
        lse = np.log(np.exp(totals - safe_top).sum(axis=-1)) + safe_top[..., 0]
    return lse - math.log(totals.shape[-1])


def log_weights(alpha: float, logp0: np.ndarray, logq_extra: np.ndarray) -> np.ndarray:
    """log w = alpha * log p0(suffix) - log q_mix(suffix) for suffixes of shape (..., L) and (..., L, J)."""
    return alpha * np.asarray(logp0, dtype=np.float64).sum(axis=-1) - log_mixture_density(logq_extra)


def select_index(log_weights: np.ndarray, uniform: float) -> int:
    """Pick i with probability w_i / sum w by inverting the CDF (uniform if all are zero)."""
    log_weights = np.asarray(log_weights, dtype=np.float64)
    top = log_weights.max()
    weights = np.exp(log_weights - top) if math.isfinite(top) else np.ones_like(log_weights)
    cdf = np.cumsum(weights)
    index = int(np.searchsorted(cdf, uniform * cdf[-1], side="right"))
    if index >= cdf.shape[0]:
        index = int(np.flatnonzero(weights > 0)[-1])
    return index


def multitry_log_ratio(candidate_log_weights: np.ndarray, reference_log_weights: np.ndarray) -> float:
    """log [sum w(candidates) / sum w(references + current)] for the generalized MH rule."""
    numerator = logsumexp(candidate_log_weights)
    denominator = logsumexp(reference_log_weights)
    if numerator == -math.inf:
        return -math.inf
    return numerator - denominator


class MultiTryMH(Kernel):
    """M tries per transition at temperatures drawn from a set; uniform cut."""

    name = "multitry"

    def __init__(
        self,
        alpha: float,
        tau: float,
        num_candidates: int = DEFAULT_NUM_CANDIDATES,
        temperatures: Sequence[float] = DEFAULT_TEMPERATURES,
    ) -> None:
        super().__init__(alpha, tau)
        self.num_candidates, self.temperatures = validate_multitry_options(num_candidates, temperatures)

    @property
    def extra_temperatures(self) -> tuple[float, ...]:
        return self.temperatures

    @property
    def num_requests(self) -> int:
        """M candidates followed by M-1 references."""
        return 2 * self.num_candidates - 1

    def proposal_draws(self, inputs: DecisionInputs) -> tuple[list[float], list[int]]:
        """Temperatures and seeds of the 2M-1 requests, a pure function of the decision."""
        rng = inputs.auxiliary(PROPOSAL_STREAM)
        count = self.num_requests
        choices = rng.integers(len(self.temperatures), size=count)
        seeds = rng.integers(2**63, size=count)
        return [self.temperatures[int(j)] for j in choices], [int(s) for s in seeds]

    def cut(self, state: ChainState, inputs: DecisionInputs) -> int:
        return uniform_cut(state.length, inputs.cut_uniform)

    def requests(
        self, prompt_ids: Sequence[int], state: ChainState, cut: int, inputs: DecisionInputs
    ) -> list[SuffixRequest]:
        prefix = proposal_prefix(prompt_ids, state, cut)
        temperatures, seeds = self.proposal_draws(inputs)
        return [
            SuffixRequest(prefix, state.length - cut, t, seed, self.temperatures)
            for t, seed in zip(temperatures, seeds, strict=True)
        ]

    def decide(self, state: ChainState, cut: int, results: Sequence[SuffixResult], inputs: DecisionInputs) -> Decision:
        m = self.num_candidates
        if len(results) != self.num_requests:
            raise ValueError(f"multitry expects {self.num_requests} suffixes (M={m}), got {len(results)}")
        # Every suffix of one decision has length T - cut, so all 2M weights are one array op:
        # rows 0..M-1 are the candidates, rows M..2M-2 the references, the last row x[cut:].
        weights = log_weights(
            self.alpha,
            np.stack([*(r.logp0 for r in results), state.logp0[cut:]]),
            np.stack([*(r.logq_extra for r in results), state.logq_extra[cut:]]),
        )
        candidates, references = weights[:m], weights[m:]
        chosen = select_index(candidates, float(inputs.auxiliary(SELECTION_STREAM).random()))
        proposal = state.splice(cut, results[chosen])
        accepted, log_accept = metropolis_accept(multitry_log_ratio(candidates, references), inputs.accept_uniform)
        return Decision(proposal if accepted else state, proposal, accepted, log_accept)
