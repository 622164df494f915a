"""The random-input keys: one stream per (seed, prompt, chain, stage, transition, purpose)."""

from __future__ import annotations

import numpy as np
import pytest

from presto.samplers.randomness import ChainKey, _stream


def every_draw(key: ChainKey) -> set[float]:
    """First draws of every stream of a chain's first stages and transitions, all purposes."""
    out = set()
    for stage in range(6):
        for transition in range(6):
            decision = key.decision(stage, transition)
            out |= {decision.cut_uniform, decision.accept_uniform}
            out |= {float(decision.auxiliary(purpose).random()) for purpose in range(3)}
    return out


def draws(key: ChainKey) -> tuple[float, float]:
    decision = key.decision(2, 4)
    return decision.cut_uniform, float(decision.auxiliary(0).random())


def test_narrow_keys_keep_their_streams():
    # Every key whose fields fit 32 bits is SeedSequence of the plain field list, as before:
    # runs with ordinary seeds reproduce the chains recorded with earlier versions.
    plain = np.random.Generator(np.random.PCG64(np.random.SeedSequence([5, 1, 2, 3, 4, 0])))
    assert _stream(5, 1, 2, 3, 4, 0).random() == plain.random()


@pytest.mark.parametrize(
    ("wide", "narrow"),
    [
        # the audit's collisions: a seed's upper 32-bit words ran into the prompt and chain fields
        (ChainKey(7 + 3 * 2**32, 1, 2), ChainKey(7, 3, 1)),
        (ChainKey(2**32, 0, 0), ChainKey(0, 1, 0)),
        (ChainKey(2**64 + 5, 0, 0), ChainKey(5, 0, 0)),
    ],
)
def test_seeds_of_32_bits_or_more_share_no_stream_with_other_keys(wide, narrow):
    assert not every_draw(wide) & every_draw(narrow)


def test_wide_seeds_are_deterministic_and_bounded():
    assert draws(ChainKey(2**100 + 1, 0, 0)) == draws(ChainKey(2**100 + 1, 0, 0))
    assert draws(ChainKey(2**100 + 1, 0, 0)) != draws(ChainKey(2**100 + 2, 0, 0))
    with pytest.raises(ValueError, match="128 bits"):
        draws(ChainKey(2**128, 0, 0))
