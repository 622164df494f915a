"""Power-SMC: sequential Monte Carlo towards p0^alpha with particles grown block by block.

P particles are extended by one block of tokens at a time from q_tau, all in one batched
model call. The intermediate target after t generated tokens is

    gamma_t(x) = p0(x_{1:min(t, L)})^{alpha_t},   alpha_t = 1 + (alpha - 1) * min(1, t / R)

where L is the particle's length up to and including its first EOS (a finished particle
stops growing) and R the ramp length (the paper's 400 tokens of n = 1024; R = 0 targets
alpha from the start). R is capped at n: a ramp longer than the answer would end below
alpha, and the answer would not target p0^alpha at all.

Extending a particle from t0 to t1 tokens multiplies its weight by
gamma_t1 / (gamma_t0 * q_tau(new tokens)), i.e. in logs

    alpha_t1 * log p0(x_{1:t1}) - alpha_t0 * log p0(x_{1:t0}) - log q_tau(x_{t0+1:t1}).

After each block, if the effective sample size 1 / sum(w_i^2) of the normalized weights
falls below ``ess_threshold * P``, the particles are resampled (systematic) and every
weight is reset to 1: the resampled population is equally weighted by construction. The
answer is one particle drawn in proportion to its final weight. Once t >= R the target is
exactly p0^alpha, so with enough particles the answer's law approaches the power law.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from presto.baselines.common import POWER_SMC_STREAM, BaselineTrace, eos_length, seeds, stream, truncate
from presto.engines.base import Engine, SuffixRequest
from presto.samplers.chain import BlockSchedule
from presto.samplers.randomness import ChainKey
from presto.samplers.state import ChainState


def ramped_alpha(alpha: float, tokens: int, ramp_tokens: int) -> float:
    """The exponent of the intermediate target after ``tokens`` generated tokens."""
    if ramp_tokens <= 0:
        return alpha
    return 1.0 + (alpha - 1.0) * min(1.0, tokens / ramp_tokens)


def normalized_weights(log_weights: np.ndarray) -> np.ndarray:
    """Weights summing to 1; a particle of log-weight -inf gets 0.

    Refuses a population with a NaN weight or no finite maximum (every weight zero, or an
    infinite one): its normalized weights would be NaN, the ESS test would never resample
    and the answer would silently be the last particle.
    """
    top = np.max(log_weights)
    if np.isnan(log_weights).any() or not np.isfinite(top):
        raise ValueError(
            "Power-SMC weights are undefined (a NaN weight, or no particle with a finite one): "
            "the engine returned a non-finite log p0 or log q_tau"
        )
    shifted = np.exp(log_weights - top)
    return shifted / shifted.sum()


def effective_sample_size(log_weights: np.ndarray) -> float:
    """1 / sum of squared normalized weights: P for equal weights, 1 for a degenerate set."""
    weights = normalized_weights(log_weights)
    return float(1.0 / np.sum(weights**2))


def systematic_resample(weights: np.ndarray, uniform: float) -> np.ndarray:
    """Indices of P particles drawn with one uniform: particle i gets floor or ceil of P * w_i
    copies (P * w_i on average over the uniform), and a particle of weight 0 none."""
    count = weights.shape[0]
    positions = (uniform + np.arange(count)) / count
    cumulative = np.cumsum(weights)
    # The last position can round up to 1.0 (u + P - 1 rounds to P for u just below 1) and the
    # sum to just below 1: both must land on the last particle of positive weight, never on a
    # trailing particle of weight 0 (an underflowed or ruled-out one).
    last = int(np.flatnonzero(weights > 0)[-1])
    cumulative[last:] = 1.0
    return np.searchsorted(cumulative, positions, side="right").clip(max=last)


def categorical(weights: np.ndarray, uniform: float) -> int:
    """One index drawn in proportion to ``weights`` (normalized) by inverting their CDF."""
    cumulative = np.cumsum(weights)
    return int(min(np.searchsorted(cumulative, uniform * cumulative[-1], side="right"), weights.shape[0] - 1))


@dataclass(frozen=True)
class BlockRecord:
    """What one block did to the population (kept on the trace for tests and plots)."""

    block: int
    tokens: int  # generated tokens per particle after this block (before EOS stops)
    alpha: float  # exponent of the intermediate target after this block
    log_weights: np.ndarray  # after the block's increments, before any resampling
    ess: float
    resampled: bool
    ancestors: np.ndarray  # index of each particle's parent (identity when not resampled)
    log_weights_after: np.ndarray  # what the next block starts from (zeros after resampling)


@dataclass
class SMCTrace(BaselineTrace):
    """The baseline trace plus the population's history and its final particles."""

    history: list[BlockRecord] | None = None
    particles: list[ChainState] | None = None


class PowerSMC:
    name = "power_smc"

    def __init__(
        self, alpha: float, tau: float, num_particles: int, ramp_tokens: int = 400, ess_threshold: float = 0.5
    ) -> None:
        if not alpha > 0 or not tau > 0:
            raise ValueError(f"alpha and tau must be > 0, got {alpha} and {tau}")
        if num_particles < 1 or ramp_tokens < 0 or not 0 <= ess_threshold <= 1:
            raise ValueError(
                f"need num_particles >= 1, ramp_tokens >= 0, ess_threshold in [0, 1]; "
                f"got {num_particles}, {ramp_tokens}, {ess_threshold}"
            )
        self.alpha = alpha
        self.tau = tau
        self.num_particles = num_particles
        self.ramp_tokens = ramp_tokens
        self.ess_threshold = ess_threshold

    def sample(
        self, engine: Engine, prompt_ids: Sequence[int], key: ChainKey, schedule: BlockSchedule
    ) -> tuple[ChainState, SMCTrace]:
        """Grow the population block by block (one model call per block); return one particle."""
        count, prefix = self.num_particles, tuple(int(t) for t in prompt_ids)
        eos_ids = engine.eos_token_ids
        particles = [ChainState.empty() for _ in range(count)]
        finished = np.zeros(count, dtype=bool)
        log_weights = np.zeros(count)
        history: list[BlockRecord] = []
        calls = 0
        ramp = min(self.ramp_tokens, schedule.stages * schedule.block_size)
        for block in range(schedule.stages):
            rng = stream(key, POWER_SMC_STREAM, block)
            block_seeds = seeds(rng, count)
            t0, t1 = block * schedule.block_size, (block + 1) * schedule.block_size
            a0 = ramped_alpha(self.alpha, t0, ramp)
            a1 = ramped_alpha(self.alpha, t1, ramp)
            live = [i for i in range(count) if not finished[i]]
            requests = [
                SuffixRequest(
                    prefix + tuple(int(t) for t in particles[i].tokens),
                    schedule.block_size,
                    self.tau,
                    block_seeds[i],
                    stop_at_eos=True,
                )
                for i in live
            ]
            results = engine.generate(requests) if requests else []
            calls += bool(requests)
            old_logp = np.array([float(p.logp0.sum()) for p in particles])
            new_logq = np.zeros(count)
            for i, result in zip(live, results, strict=True):
                kept = truncate(result, eos_length(result.tokens, eos_ids))
                finished[i] = kept.tokens.shape[0] > 0 and int(kept.tokens[-1]) in eos_ids
                particles[i] = particles[i].splice(particles[i].length, kept)
                new_logq[i] = float(kept.logq.sum())
            new_logp = np.array([float(p.logp0.sum()) for p in particles])
            log_weights = log_weights + a1 * new_logp - a0 * old_logp - new_logq
            ess = effective_sample_size(log_weights)
            resample = ess < self.ess_threshold * count and block < schedule.stages - 1
            ancestors = np.arange(count)
            before = log_weights.copy()
            if resample:
                ancestors = systematic_resample(normalized_weights(log_weights), float(rng.random()))
                particles = [particles[i] for i in ancestors]
                finished = finished[ancestors]
                log_weights = np.zeros(count)  # an equally weighted population: weights reset
            history.append(BlockRecord(block, t1, a1, before, ess, bool(resample), ancestors, log_weights.copy()))
        uniform = float(stream(key, POWER_SMC_STREAM, schedule.stages).random())
        chosen = categorical(normalized_weights(log_weights), uniform)
        info = {
            "num_particles": count,
            "resamples": sum(r.resampled for r in history),
            "ess": [r.ess for r in history],
            "selected": chosen,
        }
        return particles[chosen], SMCTrace(rounds=calls, info=info, history=history, particles=particles)
