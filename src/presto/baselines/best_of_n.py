"""Best-of-N: N answers from q_tau in one batched call, keep the highest-scoring one.

The score follows the paper's Case Study 8 (and the issue): the unnormalized sequence
log-probability under the sampling law q_tau, i.e. the sum of the answer's token log q_tau,
not log p0 (``score: logp0`` selects by the base model instead). Sums run up to and
including the first EOS, where the paper's baselines stop. Ties go to the first candidate.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from presto.baselines.common import BEST_OF_N_STREAM, BaselineTrace, seeds, state_until_eos, stream
from presto.engines.base import Engine, SuffixRequest
from presto.samplers.chain import BlockSchedule
from presto.samplers.randomness import ChainKey
from presto.samplers.state import ChainState

SCORES = ("logq", "logp0")


class BestOfN:
    name = "best_of_n"

    def __init__(self, tau: float, num_samples: int, score: str = "logq") -> None:
        if not tau > 0:
            raise ValueError(f"tau must be > 0, got {tau}")
        if num_samples < 1:
            raise ValueError(f"num_samples must be >= 1, got {num_samples}")
        if score not in SCORES:
            raise ValueError(f"score must be one of {SCORES}, got {score!r}")
        self.tau = tau
        self.num_samples = num_samples
        self.score = score

    def sample(
        self, engine: Engine, prompt_ids: Sequence[int], key: ChainKey, schedule: BlockSchedule
    ) -> tuple[ChainState, BaselineTrace]:
        """All N candidates in one model call; the state is the best candidate."""
        prefix = tuple(int(t) for t in prompt_ids)
        requests = [
            SuffixRequest(prefix, schedule.max_new_tokens, self.tau, seed, stop_at_eos=True)
            for seed in seeds(stream(key, BEST_OF_N_STREAM), self.num_samples)
        ]
        candidates = [state_until_eos(r, engine.eos_token_ids) for r in engine.generate(requests)]
        scores = [float((c.logq if self.score == "logq" else c.logp0).sum()) for c in candidates]
        best = int(np.argmax(scores))
        info = {"num_samples": self.num_samples, "candidate_scores": scores, "selected": best}
        return candidates[best], BaselineTrace(rounds=1, info=info)
