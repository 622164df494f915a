"""The kernel interface shared by every sampler, sequential or prefetched.

A kernel is three pure functions of one MH decision (DESIGN.md section 6):

- ``cut(state, inputs)``: the number of generated tokens kept, from the cut law;
- ``requests(prompt_ids, state, cut, inputs)``: the suffix requests of the proposal, all
  conditioned on ``prompt_ids + state.tokens[:cut]`` only;
- ``decide(state, cut, results, inputs)``: the MH decision given the generated suffixes.

Because a proposal depends on the state only through ``state.tokens[:cut]``, a prefetcher
may generate it from any state that shares that prefix (Condition 1 of the paper), and
``decide`` then gives the same decision the sequential chain takes.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass

from presto.engines.base import SuffixRequest, SuffixResult
from presto.samplers.randomness import DecisionInputs
from presto.samplers.state import ChainState


@dataclass(frozen=True)
class Decision:
    """Outcome of one MH transition."""

    state: ChainState  # the next state (the proposal if accepted, else the old state)
    proposal: ChainState  # the candidate the decision was about
    accepted: bool
    log_accept: float  # log A, in [-inf, 0]: -inf when the move can never be accepted (or the ratio is NaN)


def metropolis_accept(log_ratio: float, uniform: float) -> tuple[bool, float]:
    """Accept with probability min(1, exp(log_ratio)) using the decision's uniform."""
    log_accept = min(0.0, log_ratio) if not math.isnan(log_ratio) else -math.inf
    accepted = uniform < math.exp(log_accept)
    return accepted, log_accept


def proposal_prefix(prompt_ids: Sequence[int], state: ChainState, cut: int) -> tuple[int, ...]:
    """What a proposal at ``cut`` conditions on: the prompt, then the state's first ``cut`` tokens."""
    return tuple(prompt_ids) + tuple(state.tokens[:cut].tolist())  # Python ints, in one pass (not per token)


class Kernel(ABC):
    """One MH transition of a suffix-resampling sampler targeting p0^alpha."""

    name: str = "kernel"

    def __init__(self, alpha: float, tau: float) -> None:
        self.alpha = alpha
        self.tau = tau

    @property
    def extra_temperatures(self) -> tuple[float, ...]:
        """Temperatures whose log q every state must store (MultiTryMH); none by default."""
        return ()

    @property
    def state_depends_cut(self) -> bool:
        """True when the cut law reads the state beyond its length (prefetch must validate)."""
        return False

    @abstractmethod
    def cut(self, state: ChainState, inputs: DecisionInputs) -> int: ...

    def requests(
        self, prompt_ids: Sequence[int], state: ChainState, cut: int, inputs: DecisionInputs
    ) -> list[SuffixRequest]:
        """One suffix of the cut's length at tau with the decision's seed (PowerMH, EntropyCut)."""
        return [
            SuffixRequest(
                proposal_prefix(prompt_ids, state, cut),
                state.length - cut,
                self.tau,
                inputs.suffix_seed,
                self.extra_temperatures,
            )
        ]

    @abstractmethod
    def decide(
        self, state: ChainState, cut: int, results: Sequence[SuffixResult], inputs: DecisionInputs
    ) -> Decision: ...

    def extension_request(self, prompt_ids: Sequence[int], state: ChainState, new_tokens: int, seed: int):
        """Request that extends the state by one block at the proposal temperature."""
        return SuffixRequest(
            proposal_prefix(prompt_ids, state, state.length),
            new_tokens,
            self.tau,
            seed,
            self.extra_temperatures,
        )
