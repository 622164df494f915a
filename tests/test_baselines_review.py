"""Review fixes for Power-SMC: a population without a usable weight is an error, not a pick."""

from __future__ import annotations

import numpy as np
import pytest

from presto.baselines.power_smc import PowerSMC, effective_sample_size, normalized_weights
from presto.engines.base import SuffixResult
from presto.engines.toy import ToyEngine
from presto.samplers.chain import BlockSchedule
from presto.samplers.randomness import ChainKey
from tests.conftest import write_toy_table


@pytest.mark.parametrize(
    "log_weights", [np.full(4, -np.inf), np.array([0.0, np.nan, 0.0, 0.0]), np.array([0.0, np.inf, 0.0, 0.0])]
)
def test_weights_without_a_finite_maximum_or_with_nan_are_refused(log_weights):
    # Before: all-NaN normalized weights, an ESS of NaN (never resampled) and a silent pick of
    # the last particle.
    with pytest.raises(ValueError, match="Power-SMC"):
        normalized_weights(log_weights)


def test_particles_of_zero_weight_are_still_fine():
    weights = normalized_weights(np.array([0.0, -np.inf, np.log(3.0), -np.inf]))
    assert weights.tolist() == pytest.approx([0.25, 0.0, 0.75, 0.0])
    assert effective_sample_size(np.array([0.0, -np.inf])) == pytest.approx(1.0)


class NanEngine(ToyEngine):
    """The toy LM whose log p0 comes back NaN for one request (a broken engine row)."""

    def generate(self, requests):
        results = super().generate(requests)
        first = results[0]
        broken = SuffixResult(
            first.tokens, np.full_like(first.logp0, np.nan), first.logq, first.entropy, first.logq_extra
        )
        return [broken, *results[1:]]


def test_power_smc_reports_a_nan_weight_instead_of_picking_a_particle(tmp_path):
    engine = NanEngine(write_toy_table(tmp_path / "table.json", vocab=3, seed=7, scale=1.0))
    smc = PowerSMC(alpha=4.0, tau=0.5, num_particles=4, ramp_tokens=0, ess_threshold=0.5)
    with pytest.raises(ValueError, match="Power-SMC"):
        smc.sample(engine, [], ChainKey(0, 0, 0), BlockSchedule(4, 2, 0))
