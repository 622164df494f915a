"""Random inputs keyed by decision, the mechanism that makes PreSTO exact and testable.

Every MH decision takes its cut uniform, its suffix-sampling seed and its acceptance
uniform from a stream keyed by (seed, prompt, chain, stage, transition). The sequential
chain and every prefetch round use the same inputs for the same decision, so with a
deterministic engine a PreSTO chain equals the sequential chain token for token, for any
traversal and any budget. A consequence used by the prefetcher: all nodes at one depth of
a prefetch tree share their inputs, hence their proposal when their prefixes agree.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

# Domain tags keep the streams of different purposes independent.
_DECISION = 0
_EXTENSION = 1
_AUXILIARY = 2


_WORD = 2**32
# First word of a key with a field of 32 bits or more: no key of narrow fields starts with two
# of them unless its seed and prompt are both 2**32 - 1.
_WIDE = (_WORD - 1, _WORD - 1)


def _entropy(key: tuple[int, ...]) -> list[int]:
    """The SeedSequence entropy of a key, one value per field when every field fits 32 bits.

    SeedSequence splits a value of 32 bits or more into several words and joins the words
    of all values, so (2**32 + 7, 1) and (7, 1, 1) would feed it the same words: a run
    with a large seed would share streams with another run's prompts. A key with such a
    field is therefore encoded at a fixed width of four words (128 bits) per field, behind
    a marker; narrow keys keep their one-word encoding, so existing seeds keep their streams.
    """
    if all(k < _WORD for k in key):
        return list(key)
    if any(k >= _WORD**4 for k in key):
        raise ValueError(f"random key fields are limited to 128 bits, got {key}")
    return [*_WIDE, len(key), *(k // _WORD**i % _WORD for k in key for i in range(4))]


def _stream(*key: int) -> np.random.Generator:
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence(_entropy(tuple(int(k) for k in key)))))


@dataclass(frozen=True)
class ChainKey:
    """Identifies one chain: run seed, prompt index, chain index (all >= 0)."""

    seed: int
    prompt: int
    chain: int

    def __post_init__(self) -> None:
        if min(self.seed, self.prompt, self.chain) < 0:
            raise ValueError(f"seed, prompt and chain must be >= 0, got {self}")

    def decision(self, stage: int, transition: int) -> DecisionInputs:
        return DecisionInputs(self, stage, transition)

    def extension_seed(self, stage: int) -> int:
        """Seed of the suffix that extends the state by one block at the start of ``stage``."""
        return int(_stream(self.seed, self.prompt, self.chain, stage, 0, _EXTENSION).integers(2**63))


@dataclass(frozen=True)
class DecisionInputs:
    """The random inputs of one MH decision; every draw is a pure function of the key."""

    key: ChainKey
    stage: int
    transition: int

    @cached_property
    def _draws(self) -> tuple[float, int, float]:
        rng = _stream(self.key.seed, self.key.prompt, self.key.chain, self.stage, self.transition, _DECISION)
        cut_uniform = float(rng.random())
        suffix_seed = int(rng.integers(2**63))
        accept_uniform = float(rng.random())
        return cut_uniform, suffix_seed, accept_uniform

    @property
    def cut_uniform(self) -> float:
        """Uniform in [0, 1) inverted through the cut law's CDF."""
        return self._draws[0]

    @property
    def suffix_seed(self) -> int:
        """Seed of the proposal suffix (the engine samples with it)."""
        return self._draws[1]

    @property
    def accept_uniform(self) -> float:
        """Uniform in [0, 1): accept when log u < log A."""
        return self._draws[2]

    def auxiliary(self, purpose: int) -> np.random.Generator:
        """A further independent stream of this decision (e.g. MultiTryMH's extra draws)."""
        return _stream(self.key.seed, self.key.prompt, self.key.chain, self.stage, self.transition, _AUXILIARY, purpose)
