"""A measuring instrument: the traversal that knows in advance how far each walk will go.

The predictive rule's only lever (see :mod:`presto.prefetch.predictive`) is how many depths
a call carries: BFS already serves every feasible node of each depth it requests, so no
rule realizes more transitions per round, and a rule can only win by leaving out the
depths the walk will not decide. This traversal leaves out exactly those, because it is
given the chain's future: the sequential chain's state before every decision
(:class:`TrajectoryRecorder`). Its rounds realize BFS's walks with none of the requests
they leave unused: what the predictive rule would request with a perfect predictor, so its
time against BFS measures, on a given machine and engine, how much any prediction of walk
lengths can save.

It is not a sampler setting (a run cannot know its own future); scripts/benchmark.py
runs it with ``--traversals clairvoyant`` after each sequential chain. The chain it
produces is still the sequential one: it plans a prefix of depths like any rule, and the
walk decides each of them with the kernel's own rule.
"""

from __future__ import annotations

from collections.abc import Callable, Collection

from presto.engines.base import SuffixRequest
from presto.prefetch.traversal import Traversal, walk_decides
from presto.samplers.chain import SequentialStepper
from presto.samplers.kernel import Kernel
from presto.samplers.randomness import DecisionInputs
from presto.samplers.state import ChainState

Trajectory = dict[tuple[int, int], ChainState]
"""(stage, transition) -> the state the decision starts from."""


class TrajectoryRecorder(SequentialStepper):
    """The sequential chain, remembering the state every decision starts from."""

    def __init__(self) -> None:
        self.trajectory: Trajectory = {}

    def before_decision(self, stage: int, transition: int, state: ChainState, cut: int) -> None:
        self.trajectory[(stage, transition)] = state  # states are never changed in place


class ClairvoyantTraversal(Traversal):
    """Requests depth d only if the walk from this root will decide transition d.

    :func:`~presto.prefetch.traversal.walk_decides`, the walk's own test, evaluated on the
    recorded sequential trajectory, which the PreSTO chain follows token for token on a
    deterministic engine.
    """

    name = "clairvoyant"

    def __init__(self, trajectory: Trajectory) -> None:
        if not trajectory:
            raise ValueError("the clairvoyant traversal needs the recorded sequential trajectory of its chain")
        self.trajectory = trajectory

    def plan(
        self,
        kernel: Kernel,
        root: ChainState,
        inputs: Callable[[int], DecisionInputs],
        depth_cap: int,
        budget: int,
        reusable: Collection[SuffixRequest] = (),
    ) -> dict[int, int]:
        plan = {}
        for depth in range(min(budget, depth_cap)):
            decision = inputs(depth)
            cut = kernel.cut(root, decision)
            state = self.trajectory[(decision.stage, decision.transition)]
            if depth > 0 and not walk_decides(kernel, root, state, cut, decision):
                break
            plan[depth] = cut
        return plan
