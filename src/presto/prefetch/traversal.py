"""Traversal rules: which decisions of the prefetch tree a model call generates.

The prefetch tree below a root state at transition k holds every accept/reject path of
the next K-k decisions. Random inputs are keyed by transition, so all nodes at depth d
share the cut c_d and the suffix seed; a node is feasible (Condition 1, generalized) when
its state agrees with the root on the first c_d tokens, and then its proposal is the
proposal generated from the root's prefix. The all-reject path is always feasible, so
every feasible node at depth d is served by ONE request: ``root[:c_d] + suffix(seed_d)``.
A traversal rule therefore picks depths, and a call with N_pf requests covers the whole
tree down to depth N_pf - 1 — what the paper's BFS covers with 2^N_pf - 1 node requests
when identical requests are not merged.

Deferred requests keep their random inputs: a node that turns out infeasible (its path
accepted a proposal that changed the first c_d tokens) stops the walk, and the next round,
rooted at the realized state, asks for that same decision with the same inputs.
"""

from __future__ import annotations

import importlib
from abc import ABC, abstractmethod
from collections.abc import Callable, Collection, Sequence
from typing import Any, ClassVar

from presto.engines.base import SuffixRequest
from presto.samplers.kernel import Kernel
from presto.samplers.randomness import DecisionInputs
from presto.samplers.state import ChainState


class Traversal(ABC):
    name: str = "traversal"
    last_plan: dict[str, Any] | None = None
    """What the latest plan was based on (logged with its round in trees.jsonl); None: nothing to log."""

    @classmethod
    def from_options(cls, options: dict[str, Any], sampler: str | None = None) -> Traversal:
        """Build from the traversal group's keys (besides ``name``); rules without keys take none.
        ``sampler``: the run's sampler name, for rules whose defaults depend on it (the predictive
        rule's shipped predictor)."""
        from presto.config import check_keys

        check_keys(options, "traversal", f"traversal={cls.name}", ())  # a ConfigError: one line
        return cls()

    @abstractmethod
    def plan(
        self,
        kernel: Kernel,
        root: ChainState,
        inputs: Callable[[int], DecisionInputs],
        depth_cap: int,
        budget: int,
        reusable: Collection[SuffixRequest] = (),
    ) -> dict[int, int]:
        """Map each depth to request (0 always included) to its speculative cut.

        ``reusable``: requests an earlier round of the block already generated, as
        ``kernel.requests((), ...)`` builds them (prefixes without the prompt); the call
        will not generate them again, so a cost-aware rule counts them as free.
        """

    # Feedback from the PrefetchStepper; rules that learn override these. A plan may use
    # what they learned, the chain never does (any plan is exact).
    def observe_call(self, record: dict[str, Any]) -> None:  # noqa: B027 - most rules learn nothing
        """After a round's engine call: call_time_s, generated_tokens, unique_requests, longest_suffix,
        row_pairs (:func:`~presto.prefetch.allocation.squared_row_steps` of the generated rows)."""

    def observe_round(self, realized: int, states: Sequence[ChainState] = ()) -> None:  # noqa: B027
        """After a round's walk: the transitions it realized, and the chain's state before each
        decision it took and after the last (``realized + 1`` states, the root first)."""


def walk_decides(kernel: Kernel, root: ChainState, state: ChainState, cut: int, inputs: DecisionInputs) -> bool:
    """Whether a walk from ``root`` that has reached ``state`` decides the depth whose request
    was cut at ``cut`` (speculated from the root): the state still holds the root's first
    ``cut`` tokens and, for a state-dependent cut law, its own cut is that one. The
    PrefetchStepper's walk stops at the first depth that fails it."""
    if not state.shares_prefix(root, cut):
        return False
    return not kernel.state_depends_cut or kernel.cut(state, inputs) == cut


class BreadthFirst(Traversal):
    """Level by level from the root: depths 0 .. min(N_pf, K-k) - 1."""

    name = "bfs"

    def plan(self, kernel, root, inputs, depth_cap, budget, reusable=()):
        return {depth: kernel.cut(root, inputs(depth)) for depth in range(min(budget, depth_cap))}


class TraversalRegistry(dict[str, type[Traversal]]):
    """Rules keyed by ``traversal.name``; those in their own modules are imported on first use.

    The predictive rule subclasses Traversal and pulls in the predictor code, so importing
    it here would be a cycle (and a cost every BFS run would pay).
    """

    _lazy: ClassVar[dict[str, tuple[str, str]]] = {"predictive": ("presto.prefetch.predictive", "PredictiveTraversal")}

    def __missing__(self, name: str) -> type[Traversal]:
        if name not in self._lazy:
            raise KeyError(name)
        module, attribute = self._lazy[name]
        rule = getattr(importlib.import_module(module), attribute)
        self[name] = rule
        return rule

    def __contains__(self, name: object) -> bool:
        return dict.__contains__(self, name) or name in self._lazy

    def names(self) -> list[str]:
        """Every rule's name, those not imported yet included."""
        return sorted({*self.keys(), *self._lazy})


TRAVERSALS: TraversalRegistry = TraversalRegistry(bfs=BreadthFirst)
