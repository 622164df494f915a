"""The blockwise chain loop (Algorithm 1 and 2 of the paper share it).

For each block the state is extended by B tokens at the proposal temperature, then K MH
transitions target p0^alpha over the tokens so far. How the K transitions of a block are
executed is the stepper's business: one model call per transition (sequential) or one
batched call per prefetch round (PreSTO). The chain and the random inputs are the same.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from presto.engines.base import Engine
from presto.samplers.kernel import Kernel
from presto.samplers.randomness import ChainKey
from presto.samplers.state import ChainState


@dataclass
class ChainTrace:
    """What a chain did: accept flags and log A in transition order, and per-round bookkeeping."""

    accepts: list[int] = field(default_factory=list)
    # log A of every decision: two runs of one chain took the same path only if these agree
    # (bit for bit on a batch-invariant engine); equal final tokens and accept flags alone
    # could hide proposals that differed.
    log_accepts: list[float] = field(default_factory=list)
    rounds: int = 0
    discarded_requests: int = 0  # speculative proposals whose cut did not validate


class BlockStepper(Protocol):
    def run_block(
        self,
        kernel: Kernel,
        engine: Engine,
        prompt_ids: Sequence[int],
        state: ChainState,
        key: ChainKey,
        stage: int,
        steps: int,
        trace: ChainTrace,
    ) -> ChainState: ...


class SequentialStepper:
    """One model call per MH transition: the reference chain."""

    name = "sequential"

    def run_block(self, kernel, engine, prompt_ids, state, key, stage, steps, trace):
        for transition in range(steps):
            inputs = key.decision(stage, transition)
            cut = kernel.cut(state, inputs)
            self.before_decision(stage, transition, state, cut)
            results = engine.generate(kernel.requests(prompt_ids, state, cut, inputs))
            decision = kernel.decide(state, cut, results, inputs)
            state = decision.state
            trace.accepts.append(int(decision.accepted))
            trace.log_accepts.append(float(decision.log_accept))
            trace.rounds += 1
        return state

    def before_decision(self, stage: int, transition: int, state: ChainState, cut: int) -> None:
        """Called with the state and cut of every decision, before its proposal is generated."""


@dataclass(frozen=True)
class BlockSchedule:
    """n generated tokens in blocks of B, K transitions per block."""

    max_new_tokens: int
    block_size: int
    steps: int

    @property
    def stages(self) -> int:
        return self.max_new_tokens // self.block_size


def run_chain(
    kernel: Kernel,
    engine: Engine,
    stepper: BlockStepper,
    prompt_ids: Sequence[int],
    key: ChainKey,
    schedule: BlockSchedule,
    on_stage: Callable[[int, ChainState], None] | None = None,
) -> tuple[ChainState, ChainTrace]:
    """Run one chain to the fixed horizon; returns the final state and its trace."""
    state = ChainState.empty(len(kernel.extra_temperatures))
    trace = ChainTrace()
    for stage in range(schedule.stages):
        request = kernel.extension_request(prompt_ids, state, schedule.block_size, key.extension_seed(stage))
        (extension,) = engine.generate([request])
        state = state.splice(state.length, extension)
        state = stepper.run_block(kernel, engine, prompt_ids, state, key, stage, schedule.steps, trace)
        if on_stage is not None:
            on_stage(stage, state)
    return state, trace
