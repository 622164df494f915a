"""Tests that kill the mutants a hand mutation review of samplers/multitry.py and samplers/randomness.py
found surviving (ids MT = multitry.py, RD = randomness.py; the list is at the end of the file).

They check the module docstring's stream assignment (temperature indices, then seeds, from
PROPOSAL_STREAM; the selection uniform from SELECTION_STREAM) against the streams written out from
randomness.py's documented key, the log-space helpers against closed forms (q_mix is a density:
it sums to 1 over every suffix), their edge cases (-inf weights, spreads beyond float range), the
option checks, the defaults against the paper's config, and ChainKey's sign check.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from omegaconf import OmegaConf

from presto.config import ConfigError
from presto.engines.base import SuffixResult
from presto.engines.toy import ToyEngine
from presto.samplers.multitry import (
    DEFAULT_NUM_CANDIDATES,
    DEFAULT_TEMPERATURES,
    MultiTryMH,
    log_mixture_density,
    logsumexp,
    multitry_log_ratio,
    select_index,
)
from presto.samplers.randomness import ChainKey
from presto.samplers.state import ChainState
from tests.conftest import PROJECT_ROOT, write_toy_table
from tests.toy_model import ToyModel

ALPHA, TAU = 2.0, 0.5


def documented_stream(key: ChainKey, stage: int, transition: int, purpose: int) -> np.random.Generator:
    """The auxiliary stream of randomness.py's docstring: (seed, prompt, chain, stage, transition, 2, purpose)."""
    words = [key.seed, key.prompt, key.chain, stage, transition, 2, purpose]
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence(words)))


@pytest.mark.parametrize(("m", "temperatures"), [(2, (1.0, 0.25)), (3, (0.5, 2.0, 0.25))])
def test_the_tries_are_the_documented_draws_of_the_proposal_stream(m, temperatures):
    """MT24 (seeds below 2**62), MT25 (seeds drawn before the temperature indices), MT28
    (PROPOSAL_STREAM = 3), MT29 (seeds assigned to the tries in reverse order), MT38 (the
    temperature set sorted, so an index picks another temperature): the docstring says the
    temperature indices, then the seeds, of the 2M-1 requests come from auxiliary purpose 0, in
    request order, indices into the configured set. The law tests cannot see these (every try is
    still an independent uniform draw), but a recorded run would no longer replay."""
    kernel = MultiTryMH(ALPHA, TAU, num_candidates=m, temperatures=temperatures)
    state = ChainState.empty(len(temperatures)).splice(
        0,
        SuffixResult(
            np.arange(5), np.full(5, -1.0), np.full(5, -1.0), np.zeros(5), np.full((5, len(temperatures)), -1.0)
        ),
    )
    high_seed = False
    for stage, transition in itertools.product(range(2), range(5)):
        key = ChainKey(17, 2, 3)
        inputs = key.decision(stage, transition)
        rng = documented_stream(key, stage, transition, 0)
        indices = rng.integers(len(temperatures), size=2 * m - 1)
        seeds = rng.integers(2**63, size=2 * m - 1)
        requests = kernel.requests([9], state, kernel.cut(state, inputs), inputs)
        assert [r.temperature for r in requests] == [temperatures[int(j)] for j in indices]
        assert [r.seed for r in requests] == [int(s) for s in seeds]
        assert all(r.extra_temperatures == temperatures for r in requests)
        high_seed |= any(r.seed >= 2**62 for r in requests)
    assert high_seed


def test_the_selection_uniform_is_the_first_draw_of_purpose_one():
    """MT27 (SELECTION_STREAM = 0, the proposal stream: the selection uniform is then the first word
    that also picks the first try's temperature, so the choice depends on the tries' law) and MT28.
    M candidates of equal weight: the proposal is candidate floor(u * M) for the documented u."""
    m = 4
    kernel = MultiTryMH(ALPHA, TAU, num_candidates=m, temperatures=(1.0,))

    def suffix(token: int) -> SuffixResult:
        return SuffixResult(np.array([token]), np.array([-1.0]), np.array([-1.0]), np.zeros(1), np.array([[-1.0]]))

    state = ChainState.empty(1).splice(0, suffix(0))
    results = [suffix(1 + i) for i in range(2 * m - 1)]
    key = ChainKey(5, 1, 0)
    for transition in range(40):
        inputs = key.decision(0, transition)
        u = float(documented_stream(key, 0, transition, 1).random())
        decision = kernel.decide(state, 0, results, inputs)
        assert decision.proposal.tokens.tolist() == [1 + math.floor(u * m)]


def test_the_mixture_density_is_a_normalized_density(tmp_path):
    """MT11 (the - log J term dropped) and MT39 (the temperature totals averaged, then log J taken off
    again): log_mixture_density is log of (1/J) sum_j q_tj, a density, so its exponential sums to 1
    over every suffix of a given length. (The kernel's ratios cancel a constant, so only the
    function's own contract sees it.)"""
    model = ToyModel(ToyEngine(write_toy_table(tmp_path / "t.json", vocab=3, seed=2, scale=1.5)))
    temperatures = (0.25, 0.5, 1.0, 2.0)
    suffixes = [model.suffix(s, 0, temperatures) for s in itertools.product(range(3), repeat=3)]
    log_q = log_mixture_density(np.stack([s.logq_extra for s in suffixes]))
    assert log_q.shape == (27,)
    assert float(np.exp(log_q).sum()) == pytest.approx(1.0, abs=1e-12)


def test_the_mixture_density_is_computed_in_log_space_at_any_spread():
    """MT13 (shifted by the smallest temperature total, not the largest): totals that differ by more
    than ~709 nats overflow exp(). A 1000-token suffix nearly impossible at t = 0.25 and likely at
    t = 1 has such totals. MT12 (no guard for a suffix impossible at every temperature): log 0 is
    -inf, not NaN."""
    logq_extra = np.zeros((2, 1000, 2))
    logq_extra[0, :, 0], logq_extra[0, :, 1] = -2.0, -0.5  # totals -2000 and -500
    logq_extra[1] = -np.inf
    expected = np.logaddexp(-2000.0, -500.0) - math.log(2)
    result = log_mixture_density(logq_extra)
    assert result[0] == pytest.approx(expected, abs=1e-9)
    assert result[1] == -math.inf


@pytest.mark.parametrize(
    "values",
    [[-math.inf, 0.0, math.log(3.0)], [-1000.0, -2.0, 5.0], [math.log(2.0), -math.inf], [700.0, 800.0]],
)
def test_logsumexp_matches_logaddexp(values):
    """MT10 (the shift taken from the first value, not the largest: -inf first gives NaN, a small first
    value overflows)."""
    assert logsumexp(np.array(values)) == pytest.approx(float(np.logaddexp.reduce(values)), abs=1e-12)


def test_logsumexp_and_the_ratio_of_weights_that_are_all_zero():
    """MT8 (logsumexp without its non-finite guard: all -inf gives NaN) and MT19 (the ratio's zero
    numerator not short-cut: -inf - (-inf) = NaN). Documented: all -inf returns -inf, one +inf
    returns +inf; no candidate of positive weight is a ratio of 0; candidates of positive weight
    against references and a current suffix all of weight 0 are a ratio of +inf (always accept)."""
    assert logsumexp(np.full(3, -np.inf)) == -math.inf
    assert logsumexp(np.array([0.0, np.inf])) == math.inf
    assert multitry_log_ratio(np.full(2, -np.inf), np.full(2, -np.inf)) == -math.inf
    assert multitry_log_ratio(np.full(2, -np.inf), np.array([0.0, -1.0])) == -math.inf
    assert multitry_log_ratio(np.array([0.0, -1.0]), np.full(2, -np.inf)) == math.inf


def test_selection_among_candidates_all_of_weight_zero_is_uniform():
    """MT17 (the all-zero fallback to equal weights dropped: NaN CDF). Docstring of select_index:
    uniform if all weights are zero."""
    grid = (np.arange(400) + 0.5) / 400
    with np.errstate(invalid="ignore"):
        picks = [select_index(np.full(4, -np.inf), float(u)) for u in grid]
    np.testing.assert_array_equal(np.bincount(picks, minlength=4), [100, 100, 100, 100])


@pytest.mark.parametrize("temperatures", [[0.5, math.inf], [True], [0.5, True], b"\x01\x02"])
def test_temperatures_must_be_finite_numbers(temperatures):
    """MT4 (infinite temperature admitted), MT5 (True admitted as temperature 1.0), MT6 (bytes admitted
    as a list of small integers). The check's message: a non-empty list of numbers > 0."""
    with pytest.raises(ConfigError, match=r"sampler\.temperatures"):
        MultiTryMH(ALPHA, TAU, temperatures=temperatures)


def test_the_defaults_are_the_configs():
    """Defaults of the kernel (used by build_kernel when the options omit a key, and by
    scripts/call_cost.py) equal conf/sampler/multitry.yaml's, the paper's Table 6 (MT32, MT33)."""
    config = OmegaConf.load(PROJECT_ROOT / "conf" / "sampler" / "multitry.yaml")
    assert config.num_candidates == DEFAULT_NUM_CANDIDATES
    assert tuple(config.temperatures) == DEFAULT_TEMPERATURES


@pytest.mark.parametrize("fields", [(-1, 0, 0), (0, -1, 0), (0, 0, -1)])
def test_a_chain_key_with_a_negative_field_is_refused(fields):
    """RD6 (the chain index left out of the sign check) and RD7 (-1 admitted): seed, prompt and chain
    must all be >= 0, refused when the key is made, not at its first draw."""
    with pytest.raises(ValueError, match=">= 0"):
        ChainKey(*fields)


# Mutants of the review (56: 32 killed by existing tests, 19 by this file, 5 equivalent)
#
# multitry.py (40: 22 existing, 17 new, 1 equivalent)
#   MT1 M >= 2 required, MT9 logsumexp without its shift added back, MT14 alpha dropped, MT20/MT21
#   reference rows one short / one long, MT35 the current suffix dropped from the denominator, MT36
#   temperature totals by max, MT40 numerator by max: existing (test_multitry detailed balance).
#   MT2 M = 0 admitted, MT3 temperature 0 admitted, MT7 empty set admitted: existing (test_multitry
#   options). MT15 selection not scaled by cdf[-1], MT37 side='left': existing (test_mutants_review
#   zero-weight selection). MT18 weights exponentiated unshifted: existing (test_multitry long
#   suffixes). MT22 candidate 0 always proposed: existing (test_mutants_review selection stream).
#   MT23 accept/reject swapped, MT26 proposal drawn from the selection stream: existing (test_multitry
#   chain law). MT30 cut law one short, MT32/MT33 defaults changed: existing (test_multitry requests).
#   MT31 extra temperatures = drawn ones, MT34 selection over all 2M rows: existing
#   (test_mutants_review stored statistics).
#   MT4, MT5, MT6, MT8, MT10, MT11, MT12, MT13, MT17, MT19, MT24, MT25, MT27, MT28, MT29, MT38, MT39:
#   new (this file).
#   MT16 (fallback index = last row instead of the last positive weight): equivalent: the fallback
#       runs only when uniform * cdf[-1] >= cdf[-1], which needs uniform >= 1 (for u <= 1 - 2**-53
#       the product rounds below cdf[-1]), and the kernel's uniform is rng.random() < 1.
#
# randomness.py (16: 10 existing, 2 new, 4 equivalent)
#   RD1 field 2**32 kept narrow, RD12 `any` for `all`: existing (test_randomness collisions).
#   RD2 2**128 admitted, RD13 low word dropped: existing (test_randomness wide seeds).
#   RD8 extension key, RD9 draw order, RD10 stage/transition swapped, RD14 auxiliary tag 1, RD15
#   purpose folded into the tag, RD16 accept uniform = 1 - cut uniform: existing (test_mutants_review
#   documented keys). RD6, RD7: new (this file).
#   RD3 (another wide marker), RD5 (wide words ordered word-major): equivalent for the law: the
#       encoding stays injective and apart from narrow keys; only streams of seeds >= 2**32 change,
#       for which no replay is promised (the docstring promises it for narrow keys).
#   RD4 (the field count dropped from the wide encoding): equivalent: keys of 6 and 7 fields give
#       24 and 28 words, longer than SeedSequence's pool, so they never share entropy.
#   RD11 (@cached_property -> @property): equivalent: the draws are a pure function of the key.
