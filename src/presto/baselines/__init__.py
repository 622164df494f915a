"""Test-time baselines (the paper's Case Study 8) on the same engines and output contract.

A baseline samples a whole answer itself: ``sample(engine, prompt_ids, key, schedule)``
returns the final state and a trace, like a chain, so the runner, the run directory and
the summaries treat it as one.
"""

from __future__ import annotations

from typing import Protocol

from presto.config import SamplerSettings
from presto.engines.base import Engine
from presto.samplers.chain import BlockSchedule, ChainTrace
from presto.samplers.randomness import ChainKey
from presto.samplers.state import ChainState

BASELINES: tuple[str, ...] = ()


class Baseline(Protocol):
    name: str

    def sample(
        self, engine: Engine, prompt_ids: list[int], key: ChainKey, schedule: BlockSchedule
    ) -> tuple[ChainState, ChainTrace]: ...


def build_baseline(settings: SamplerSettings) -> Baseline:
    raise ValueError(f"sampler={settings.name} is not a baseline; choose one of: {', '.join(BASELINES) or 'none yet'}")
