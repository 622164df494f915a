"""Low-temperature sampling: one answer from q_tau, the token-level tempered law.

Scaling each token's logits by 1/tau = alpha renormalizes every conditional separately, so
this is not the sequence-level power law p0^alpha; it is the cheapest sharpening and the
speed floor the MH samplers are compared against (the paper's Case Study 8).
"""

from __future__ import annotations

from collections.abc import Sequence

from presto.baselines.common import LOWTEMP_STREAM, BaselineTrace, seeds, state_until_eos, stream
from presto.engines.base import Engine, SuffixRequest
from presto.samplers.chain import BlockSchedule
from presto.samplers.randomness import ChainKey
from presto.samplers.state import ChainState


class LowTemperature:
    name = "lowtemp"

    def __init__(self, tau: float) -> None:
        if not tau > 0:
            raise ValueError(f"tau must be > 0, got {tau}")
        self.tau = tau

    def sample(
        self, engine: Engine, prompt_ids: Sequence[int], key: ChainKey, schedule: BlockSchedule
    ) -> tuple[ChainState, BaselineTrace]:
        """One request of up to ``max_new_tokens`` at tau (stopped at EOS): one model call."""
        (seed,) = seeds(stream(key, LOWTEMP_STREAM), 1)
        request = SuffixRequest(
            tuple(int(t) for t in prompt_ids), schedule.max_new_tokens, self.tau, seed, stop_at_eos=True
        )
        (result,) = engine.generate([request])
        state = state_until_eos(result, engine.eos_token_ids)
        return state, BaselineTrace(rounds=1)
