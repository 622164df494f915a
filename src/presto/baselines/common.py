"""What the baselines share: their trace record, EOS stopping, and their random streams."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from presto.engines.base import SuffixResult
from presto.samplers.chain import ChainTrace
from presto.samplers.randomness import ChainKey
from presto.samplers.state import ChainState

# Auxiliary stream purposes of the baselines: far from the MH samplers' small purposes,
# so a baseline never reuses a stream an MH kernel draws from for the same decision key.
LOWTEMP_STREAM = 101
BEST_OF_N_STREAM = 102
POWER_SMC_STREAM = 103


@dataclass
class BaselineTrace(ChainTrace):
    """A chain trace without MH transitions; ``info`` goes into the chains.jsonl record."""

    info: dict[str, Any] = field(default_factory=dict)


def stream(key: ChainKey, purpose: int, step: int = 0) -> np.random.Generator:
    """The baseline's random stream for one step (block) of one chain."""
    return key.decision(step, 0).auxiliary(purpose)


def seeds(rng: np.random.Generator, count: int) -> list[int]:
    """Request seeds in [0, 2**63)."""
    return [int(s) for s in rng.integers(2**63, size=count)]


def eos_length(tokens: np.ndarray, eos_ids: Collection[int]) -> int:
    """Tokens up to and including the first EOS (all of them when there is none)."""
    if eos_ids:
        hits = np.flatnonzero(np.isin(tokens, list(eos_ids)))
        if hits.size:
            return int(hits[0]) + 1
    return int(tokens.shape[0])


def truncate(result: SuffixResult, length: int) -> SuffixResult:
    """The first ``length`` tokens of a result with their statistics."""
    return SuffixResult(
        result.tokens[:length],
        result.logp0[:length],
        result.logq[:length],
        result.entropy[:length],
        result.logq_extra[:length],
    )


def state_until_eos(result: SuffixResult, eos_ids: Collection[int]) -> ChainState:
    """A whole sampled answer as a state, stopped after its first EOS."""
    stopped = truncate(result, eos_length(result.tokens, eos_ids))
    return ChainState.empty(result.logq_extra.shape[1]).splice(0, stopped)
