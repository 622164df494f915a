"""Exact laws of the baselines on a toy engine with an EOS token, Power-SMC's included.

The toy engine has no EOS, so these tests give it one: answers then live on the sequences
that end at their first EOS or reach n tokens, and every law can still be enumerated.
Power-SMC with two particles and no resampling is sampling-importance-resampling, whose
law is closed-form: P(x) = 2 sum_y q(x) q(y) w(x) / (w(x) + w(y)) with w = p0^alpha / q_tau,
whatever the ramp (the weights telescope). With many particles and resampling its answers
must come close to pi_alpha itself.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from presto.baselines import build_baseline
from presto.baselines.power_smc import PowerSMC
from presto.config import SamplerSettings
from presto.engines.token_sampling import log_softmax
from presto.engines.toy import ToyEngine
from presto.samplers.chain import BlockSchedule
from presto.samplers.randomness import ChainKey
from tests.conftest import chi_square_p, write_toy_table

VOCAB, EOS, N = 3, 2, 4
BLOCK = 2  # Power-SMC's blocks: an EOS can fall inside one, and the ramp spans two
ALPHA, TAU = 4.0, 0.5


class EosToyEngine(ToyEngine):
    """The toy Markov LM with token ``EOS`` ending a text (generation still runs past it)."""

    @property
    def eos_token_ids(self) -> frozenset[int]:
        return frozenset({EOS})


@pytest.fixture(scope="module")
def engine(tmp_path_factory) -> EosToyEngine:
    return EosToyEngine(write_toy_table(tmp_path_factory.mktemp("toy") / "table.json", vocab=VOCAB, seed=7, scale=1.0))


def log_prob(engine: ToyEngine, seq, temperature: float = 1.0) -> float:
    total = 0.0
    for t, token in enumerate(seq):
        row = engine.bos_logits if t == 0 else engine.logits[seq[t - 1]]
        total += log_softmax(row / temperature)[token]
    return total


def answers() -> list[tuple[int, ...]]:
    """Every answer: EOS-free prefixes closed by EOS, and EOS-free sequences of n tokens."""
    words = [t for t in range(VOCAB) if t != EOS]
    closed = [(*p, EOS) for k in range(N) for p in itertools.product(words, repeat=k)]
    return closed + list(itertools.product(words, repeat=N))


def normalized(weights: dict) -> dict:
    total = sum(weights.values())
    return {s: w / total for s, w in weights.items()}


def q_law(engine) -> dict:
    return {s: float(np.exp(log_prob(engine, s, TAU))) for s in answers()}


def power_law(engine) -> dict:
    return normalized({s: float(np.exp(ALPHA * log_prob(engine, s))) for s in answers()})


def sir_two_law(engine) -> dict:
    q = q_law(engine)
    w = {s: float(np.exp(ALPHA * log_prob(engine, s) - log_prob(engine, s, TAU))) for s in q}
    return {x: 2 * sum(q[x] * q[y] * w[x] / (w[x] + w[y]) for y in q) for x in q}


def sample(engine, baseline, count: int, block: int = BLOCK) -> list[tuple[int, ...]]:
    schedule = BlockSchedule(N, block, 0)
    return [
        tuple(int(t) for t in baseline.sample(engine, [], ChainKey(13, 0, i), schedule)[0].tokens) for i in range(count)
    ]


def total_variation(samples, law: dict) -> float:
    counts = {s: 0 for s in law}
    for seq in samples:
        counts[seq] += 1
    return 0.5 * sum(abs(counts[s] / len(samples) - law[s]) for s in law)


def test_the_laws_are_distinct_distributions_on_the_answers(engine):
    q, pi, sir = q_law(engine), power_law(engine), sir_two_law(engine)
    for law in (q, pi, sir):
        assert abs(sum(law.values()) - 1) < 1e-12
    # Far enough apart that the tests below tell them apart.
    assert 0.5 * sum(abs(q[s] - pi[s]) for s in q) > 0.3
    assert 0.5 * sum(abs(sir[s] - pi[s]) for s in q) > 0.1


def test_low_temperature_answers_stop_at_eos_and_follow_q_tau(engine):
    samples = sample(engine, build_baseline(SamplerSettings("lowtemp", ALPHA, TAU, N, N, 0, {})), 2000)
    assert any(s[-1] == EOS and len(s) < N for s in samples)  # the test exercises early stops
    assert chi_square_p(samples, q_law(engine)) > 1e-3
    assert chi_square_p(samples, power_law(engine)) < 1e-6


def test_best_of_n_scores_answers_up_to_their_eos(engine):
    # The law of the best of N i.i.d. q_tau answers by summed log q_tau (EOS included, nothing
    # after it). Answers of equal q (a Markov chain has some) form one cell: which of them wins
    # is up to rounding.
    q = q_law(engine)
    cells: dict[float, float] = {}
    for s in q:
        cells[round(np.log(q[s]), 9)] = cells.get(round(np.log(q[s]), 9), 0.0) + q[s]
    law = {}
    for cell, mass in cells.items():
        better = sum(m for c, m in cells.items() if c > cell)
        law[cell] = (1 - better) ** 4 - (1 - better - mass) ** 4
    assert abs(sum(law.values()) - 1) < 1e-12 and len(cells) < len(q)
    baseline = build_baseline(SamplerSettings("best_of_n", ALPHA, TAU, N, N, 0, {"num_samples": 4}))
    samples = [round(np.log(q[s]), 9) for s in sample(engine, baseline, 2000)]
    assert chi_square_p(samples, law) > 1e-3
    assert chi_square_p(samples, cells) < 1e-6


def test_power_smc_with_two_particles_and_no_resampling_is_exact_sir(engine):
    smc = PowerSMC(ALPHA, TAU, num_particles=2, ramp_tokens=N, ess_threshold=0.0)
    samples = sample(engine, smc, 3000)
    assert chi_square_p(samples, sir_two_law(engine)) > 1e-3
    assert chi_square_p(samples, power_law(engine)) < 1e-6


def test_power_smc_with_many_particles_and_resampling_approaches_the_power_law(engine):
    # ESS after the first block is about 25 of 32: a threshold of 0.9 resamples there.
    smc = PowerSMC(ALPHA, TAU, num_particles=32, ramp_tokens=N, ess_threshold=0.9)
    samples = sample(engine, smc, 1200)
    pi = power_law(engine)
    # Sampling noise alone is a few hundredths here (0.008 seen); q_tau is 0.70 away, SIR with two particles 0.57.
    assert total_variation(samples, pi) < 0.08


def test_power_smc_stops_requesting_finished_particles(engine):
    smc = PowerSMC(ALPHA, TAU, num_particles=16, ramp_tokens=0, ess_threshold=0.0)
    calls, requests = engine.stats.calls, engine.stats.requests
    _, trace = smc.sample(engine, [], ChainKey(2, 0, 0), BlockSchedule(N, BLOCK, 0))
    particles = trace.particles
    # Without resampling particle i keeps its lineage: it is requested in block b exactly when
    # its first b * BLOCK tokens hold no EOS; tokens after an EOS inside a block are dropped.
    blocks = N // BLOCK
    expected = sum(1 for p in particles for b in range(blocks) if EOS not in p.tokens[: b * BLOCK].tolist())
    assert engine.stats.requests - requests == expected < 16 * blocks
    assert engine.stats.calls - calls == trace.rounds
    for p in particles:
        tokens = p.tokens.tolist()
        assert EOS not in tokens[:-1] and (tokens[-1] == EOS or len(tokens) == N)


def test_baselines_are_functions_of_their_key(engine):
    schedule = BlockSchedule(N, BLOCK, 0)
    for baseline in (
        build_baseline(SamplerSettings("lowtemp", ALPHA, TAU, N, N, 0, {})),
        build_baseline(SamplerSettings("best_of_n", ALPHA, TAU, N, N, 0, {"num_samples": 4})),
        PowerSMC(ALPHA, TAU, num_particles=4, ramp_tokens=N, ess_threshold=0.9),
    ):
        again = [baseline.sample(engine, [], ChainKey(5, 1, c), schedule)[0].tokens.tolist() for c in range(30)]
        assert again == [baseline.sample(engine, [], ChainKey(5, 1, c), schedule)[0].tokens.tolist() for c in range(30)]
        assert len({tuple(t) for t in again}) > 1  # chains are not copies of one another


def test_baselines_ask_the_engine_to_stop_at_eos(engine, monkeypatch):
    # The engine stops decoding an answer at its EOS: no call decodes tokens a baseline drops,
    # and the engine's token count is that of the answers' tokens, EOS included.
    calls = []
    generate = engine.generate

    def recorded(requests):
        results = generate(requests)
        calls.append((list(requests), results))
        return results

    monkeypatch.setattr(engine, "generate", recorded)
    schedule = BlockSchedule(N, BLOCK, 0)
    for baseline in (
        build_baseline(SamplerSettings("lowtemp", ALPHA, TAU, N, N, 0, {})),
        build_baseline(SamplerSettings("best_of_n", ALPHA, TAU, N, N, 0, {"num_samples": 4})),
        PowerSMC(ALPHA, TAU, num_particles=4, ramp_tokens=N, ess_threshold=0.9),
    ):
        calls.clear()
        before = engine.stats.generated_tokens
        for chain in range(20):
            baseline.sample(engine, [], ChainKey(7, 0, chain), schedule)
        requests = [r for call, _ in calls for r in call]
        results = [r for _, call in calls for r in call]
        assert requests and all(r.stop_at_eos for r in requests), baseline.name
        lengths = [len(r.tokens) for r in results]
        assert any(length < r.num_new_tokens for r, length in zip(requests, lengths, strict=True)), baseline.name
        for request, result in zip(requests, results, strict=True):
            tokens = result.tokens.tolist()
            assert EOS not in tokens[:-1] and (tokens[-1] == EOS or len(tokens) == request.num_new_tokens)
        assert engine.stats.generated_tokens - before == sum(lengths), baseline.name
