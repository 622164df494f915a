"""PowerMH (Karan and Du): uniform-cut suffix resampling, the paper's eq. (6)."""

from __future__ import annotations

from collections.abc import Sequence

from presto.engines.base import SuffixResult
from presto.samplers.kernel import Decision, Kernel, metropolis_accept
from presto.samplers.randomness import DecisionInputs
from presto.samplers.state import ChainState


def uniform_cut(length: int, uniform: float) -> int:
    """c ~ Unif{0, ..., T-1} by inverting its CDF: c = floor(u * T)."""
    if length < 1:  # T = 0 would give c = -1, a negative cut that slices the state from its end
        raise ValueError("a uniform cut needs a state with at least one generated token")
    return min(int(uniform * length), length - 1)


def suffix_log_ratio(alpha: float, current: ChainState, proposal: ChainState, cut: int) -> float:
    """log [pi(y) q(x|y) / (pi(x) q(y|x))] for a shared prefix of ``cut`` tokens.

    Sums run over the whole resampled suffix of both states (nothing stops at EOS).
    """
    log_q_reverse = float(current.logq[cut:].sum())
    log_q_forward = float(proposal.logq[cut:].sum())
    log_p_gain = float(proposal.logp0[cut:].sum() - current.logp0[cut:].sum())
    return log_q_reverse - log_q_forward + alpha * log_p_gain


class PowerMH(Kernel):
    name = "powermh"

    def cut(self, state: ChainState, inputs: DecisionInputs) -> int:
        return uniform_cut(state.length, inputs.cut_uniform)

    def decide(self, state: ChainState, cut: int, results: Sequence[SuffixResult], inputs: DecisionInputs) -> Decision:
        proposal = state.splice(cut, results[0])
        accepted, log_accept = metropolis_accept(
            suffix_log_ratio(self.alpha, state, proposal, cut), inputs.accept_uniform
        )
        return Decision(proposal if accepted else state, proposal, accepted, log_accept)
