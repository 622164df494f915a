"""Test-time baselines (the paper's Case Study 8) on the same engines and output contract.

A baseline samples a whole answer itself: ``sample(engine, prompt_ids, key, schedule)``
returns the final state and a trace, like a chain, so the runner, the run directory and
the summaries treat it as one. Each baseline talks to the model only through
``Engine.generate`` (one batched call for all its candidates or particles of a block), so
its model calls, call time and the engine's KV-cache figures mean what they mean for the
MH samplers.

- ``lowtemp``: one sample at temperature tau (default 1/alpha).
- ``best_of_n``: N samples at tau in one call; keeps the highest summed log q_tau.
- ``power_smc``: P particles grown block by block at tau, importance-weighted towards
  p0^alpha with the exponent ramped in, resampled when the ESS falls below a threshold.
  It needs more than one block (``block_size`` < ``max_new_tokens``) to ever resample.

Unlike the MH chains (fixed horizon), the baselines stop a sample at its first EOS, as the
paper's baselines do: their requests set ``stop_at_eos``, so the engine stops decoding
there (call time, KV usage and generated tokens are those of the answers actually
produced), and tokens after an EOS, if an engine returns any, are dropped from the state,
from scores and weights.
"""

from __future__ import annotations

from typing import Any, Protocol

from presto.config import ConfigError, SamplerSettings, check_keys
from presto.engines.base import Engine
from presto.samplers.chain import BlockSchedule, ChainTrace
from presto.samplers.randomness import ChainKey
from presto.samplers.state import ChainState

BASELINES: tuple[str, ...] = ("lowtemp", "best_of_n", "power_smc")


class Baseline(Protocol):
    name: str

    def sample(
        self, engine: Engine, prompt_ids: list[int], key: ChainKey, schedule: BlockSchedule
    ) -> tuple[ChainState, ChainTrace]: ...


def _integer(options: dict[str, Any], sampler: str, key: str, default: int, minimum: int) -> int:
    value = options.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigError(f"sampler.{key} must be an integer >= {minimum} for sampler={sampler}, got {value!r}")
    return value


def build_baseline(settings: SamplerSettings) -> Baseline:
    """The baseline of ``settings.name``; checks its own keys (one-line ConfigError)."""
    name, options = settings.name, dict(settings.options)
    if name == "lowtemp":
        from presto.baselines.lowtemp import LowTemperature

        check_keys(options, "sampler", f"sampler={name}", ())
        return LowTemperature(settings.tau)
    if name == "best_of_n":
        from presto.baselines.best_of_n import SCORES, BestOfN

        check_keys(options, "sampler", f"sampler={name}", ("num_samples", "score"))
        score = options.get("score", "logq")
        if score not in SCORES:
            raise ConfigError(f"sampler.score={score} is not allowed; choose one of: {', '.join(SCORES)}")
        return BestOfN(settings.tau, _integer(options, name, "num_samples", 8, 1), score)
    if name == "power_smc":
        from presto.baselines.power_smc import PowerSMC

        check_keys(options, "sampler", f"sampler={name}", ("num_particles", "ramp_tokens", "ess_threshold"))
        threshold = options.get("ess_threshold", 0.5)
        if isinstance(threshold, bool) or not isinstance(threshold, int | float) or not 0 <= threshold <= 1:
            raise ConfigError(f"sampler.ess_threshold must be a number in [0, 1], got {threshold!r}")
        particles = _integer(options, name, "num_particles", 8, 1)
        ramp_tokens = _integer(options, name, "ramp_tokens", 400, 0)
        if settings.block_size == settings.max_new_tokens and particles > 1 and threshold > 0:
            # One block of n tokens (the MH samplers' default B, set here explicitly): no
            # resampling and no ramp, plain importance sampling rather than Power-SMC.
            raise ConfigError(
                f"sampler.block_size={settings.block_size} equals sampler.max_new_tokens, so sampler=power_smc "
                "would run one block and never resample (plain importance sampling); set sampler.block_size "
                "to a smaller divisor of n (the paper's Case Study 8 uses 128), or sampler.ess_threshold=0 "
                "for importance sampling"
            )
        return PowerSMC(
            settings.alpha,
            settings.tau,
            num_particles=particles,
            ramp_tokens=ramp_tokens,
            ess_threshold=float(threshold),
        )
    raise ValueError(f"sampler={name} is not a baseline; choose one of: {', '.join(BASELINES)}")
