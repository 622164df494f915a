"""Test-time baselines on the toy engine: their laws by enumeration, and Power-SMC's weights.

Low temperature must draw exactly q_tau (product of tempered conditionals); best-of-N must
draw the law of the argmax of N i.i.d. q_tau samples by summed log q_tau, which has the
closed form P(x) = (1 - F(x))^N - (1 - F(x) - q(x))^N with F(x) the q-mass of better
sequences. Power-SMC's final log-weights must telescope from the last resampling only.
"""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest

from presto.baselines import BASELINES, build_baseline
from presto.baselines.power_smc import PowerSMC, effective_sample_size, ramped_alpha, systematic_resample
from presto.config import ConfigError, SamplerSettings, validate_sampler
from presto.engines.token_sampling import log_softmax
from presto.engines.toy import ToyEngine
from presto.samplers.chain import BlockSchedule
from presto.samplers.randomness import ChainKey
from tests.conftest import PROJECT_ROOT, chi_square_p, run_cli, toy_args, write_toy_table

VOCAB, N = 3, 3
SAMPLES = 3000


@pytest.fixture(scope="module")
def engine(tmp_path_factory) -> ToyEngine:
    return ToyEngine(write_toy_table(tmp_path_factory.mktemp("toy") / "table.json", vocab=VOCAB, seed=7, scale=1.0))


def log_prob(engine: ToyEngine, seq, temperature: float = 1.0, start: int = 0) -> float:
    """log of prod_t softmax(logits / temperature)[seq[t]] over t >= start."""
    total = 0.0
    for t in range(start, len(seq)):
        row = engine.bos_logits if t == 0 else engine.logits[seq[t - 1]]
        total += log_softmax(row / temperature)[seq[t]]
    return total


def sequences():
    return list(itertools.product(range(VOCAB), repeat=N))


def draw(engine, baseline, count: int = SAMPLES, n: int = N):
    schedule = BlockSchedule(n, n, 0)
    return [baseline.sample(engine, [], ChainKey(11, 0, i), schedule) for i in range(count)]


def settings(name: str, alpha: float = 2.0, tau: float = 0.5, block: int = 1, **options) -> SamplerSettings:
    return SamplerSettings(name, alpha, tau, N, block, 0, options)


def test_registry_names_the_three_baselines():
    assert BASELINES == ("lowtemp", "best_of_n", "power_smc")
    for name in BASELINES:
        assert build_baseline(settings(name)).name == name


def test_low_temperature_draws_q_tau_exactly(engine):
    tau = 0.5
    results = draw(engine, build_baseline(settings("lowtemp", tau=tau)))
    law = {s: float(np.exp(log_prob(engine, s, tau))) for s in sequences()}
    assert abs(sum(law.values()) - 1) < 1e-12
    samples = [tuple(int(t) for t in state.tokens) for state, _ in results]
    for (state, trace), seq in zip(results[:50], samples[:50], strict=True):
        # The stored per-token log q and log p0 are the enumerated ones.
        assert abs(state.logq.sum() - log_prob(engine, seq, tau)) < 1e-12
        assert abs(state.logp0.sum() - log_prob(engine, seq, 1.0)) < 1e-12
        assert trace.rounds == 1 and trace.accepts == []
    assert chi_square_p(samples, law) > 1e-3
    wrong = {s: float(np.exp(log_prob(engine, s, 1.0))) for s in sequences()}  # tau = 1 is another law
    assert chi_square_p(samples, wrong) < 1e-6


def best_of_n_law(engine, tau: float, n_samples: int) -> dict:
    q = {s: float(np.exp(log_prob(engine, s, tau))) for s in sequences()}
    score = {s: log_prob(engine, s, tau) for s in q}
    law = {}
    for s in q:
        better = sum(q[y] for y in q if score[y] > score[s])
        law[s] = (1 - better) ** n_samples - (1 - better - q[s]) ** n_samples
    return law


def test_best_of_n_draws_the_law_of_the_best_of_n_by_log_q(engine):
    tau, n_samples = 1.0, 4
    baseline = build_baseline(settings("best_of_n", tau=tau, num_samples=n_samples))
    law = best_of_n_law(engine, tau, n_samples)
    assert abs(sum(law.values()) - 1) < 1e-12
    calls = engine.stats.calls
    results = draw(engine, baseline)
    assert engine.stats.calls - calls == SAMPLES  # one batched call per answer
    samples = [tuple(int(t) for t in state.tokens) for state, _ in results]
    for state, trace in results[:50]:
        scores = trace.info["candidate_scores"]
        assert len(scores) == n_samples and scores[trace.info["selected"]] == max(scores)
        assert abs(state.logq.sum() - max(scores)) < 1e-12
    assert chi_square_p(samples, law) > 1e-3
    plain = {s: float(np.exp(log_prob(engine, s, tau))) for s in sequences()}  # best-of-1
    assert chi_square_p(samples, plain) < 1e-6


def test_best_of_n_can_select_by_log_p0(engine):
    baseline = build_baseline(settings("best_of_n", tau=1.0, num_samples=8, score="logp0"))
    state, trace = baseline.sample(engine, [], ChainKey(0, 0, 0), BlockSchedule(N, N, 0))
    assert abs(state.logp0.sum() - max(trace.info["candidate_scores"])) < 1e-12


def smc(engine, threshold: float, ramp: int = 0, particles: int = 16, n: int = 8, block: int = 2):
    baseline = PowerSMC(alpha=4.0, tau=1.0, num_particles=particles, ramp_tokens=ramp, ess_threshold=threshold)
    return baseline.sample(engine, [], ChainKey(3, 0, 0), BlockSchedule(n, block, 0))


def expected_log_weight(engine, tokens, alpha_end: float, alpha_start: float, start: int) -> float:
    """alpha_n log p0(x) - alpha_s log p0(x_{1:s}) - log q(x_{s+1:n}): weight since a reset at s."""
    seq = [int(t) for t in tokens]
    return (
        alpha_end * log_prob(engine, seq)
        - alpha_start * log_prob(engine, seq[:start])
        - log_prob(engine, seq, 1.0, start)  # tau = 1: q is p0 here
    )


def test_power_smc_weights_are_reset_after_resampling(engine):
    state, trace = smc(engine, threshold=0.9)
    history = trace.history
    resampled = [r for r in history if r.resampled]
    assert resampled, "the test needs at least one resampling (lower the threshold otherwise)"
    for record in history:
        if record.resampled:
            assert np.all(record.log_weights_after == 0.0)
            assert record.ess < 0.9 * 16
        else:
            assert np.array_equal(record.log_weights_after, record.log_weights)
    # Each block starts from the weights the previous one left (zeros after resampling).
    for previous, current in itertools.pairwise(history):
        assert current.block == previous.block + 1
    # The final weights telescope from the last resampling only.
    last_reset = max(r.tokens for r in resampled)
    final = history[-1].log_weights_after
    for particle, log_weight in zip(trace.particles, final, strict=True):
        assert abs(log_weight - expected_log_weight(engine, particle.tokens, 4.0, 4.0, last_reset)) < 1e-9
    assert trace.info["resamples"] == len(resampled)
    assert any(np.array_equal(state.tokens, p.tokens) for p in trace.particles)


def test_power_smc_without_resampling_is_importance_sampling_with_the_ramp(engine):
    _, trace = smc(engine, threshold=0.0, ramp=6)
    assert not any(r.resampled for r in trace.history)
    assert [r.alpha for r in trace.history] == [ramped_alpha(4.0, t, 6) for t in (2, 4, 6, 8)]
    assert trace.history[-1].alpha == 4.0  # past the ramp the target is p0^alpha
    for particle, log_weight in zip(trace.particles, trace.history[-1].log_weights_after, strict=True):
        assert abs(log_weight - expected_log_weight(engine, particle.tokens, 4.0, 0.0, 0)) < 1e-9
    assert trace.rounds == 4  # one batched call per block


def test_power_smc_ramp_longer_than_the_answer_ends_at_alpha(engine):
    # The paper's 400-token ramp on an 8-token answer: without the cap the last target is p0^1.06.
    _, trace = smc(engine, threshold=0.0, ramp=400)
    assert [r.alpha for r in trace.history] == [ramped_alpha(4.0, t, 8) for t in (2, 4, 6, 8)]
    assert trace.history[-1].alpha == 4.0


def test_smc_helpers():
    assert ramped_alpha(4.0, 0, 400) == 1.0 and ramped_alpha(4.0, 200, 400) == 2.5 and ramped_alpha(4.0, 999, 400) == 4
    assert effective_sample_size(np.zeros(8)) == pytest.approx(8.0)
    assert effective_sample_size(np.array([0.0, -1e9, -1e9])) == pytest.approx(1.0)
    indices = systematic_resample(np.array([0.5, 0.25, 0.25, 0.0]), 0.1)
    assert sorted(indices.tolist()) == [0, 0, 1, 2]


@pytest.mark.parametrize(
    ("name", "options", "needle"),
    [
        ("best_of_n", {"num_samples": 0}, "sampler.num_samples"),
        ("best_of_n", {"num_samples": 2.5}, "sampler.num_samples"),
        ("best_of_n", {"score": "reward"}, "sampler.score"),
        ("power_smc", {"num_particles": 0}, "sampler.num_particles"),
        ("power_smc", {"ess_threshold": 2}, "sampler.ess_threshold"),
        ("power_smc", {"ramp_tokens": -1}, "sampler.ramp_tokens"),
        ("lowtemp", {"num_samples": 3}, "sampler.num_samples"),
    ],
)
def test_bad_baseline_keys_are_one_line_config_errors(name, options, needle):
    with pytest.raises(ConfigError) as err:
        build_baseline(settings(name, **options))
    assert needle in str(err.value) and "\n" not in str(err.value)


def test_power_smc_in_one_block_is_refused_unless_it_cannot_resample_anyway():
    # One block (B = n, the MH samplers' default) means no resampling
    # and no ramp: plain importance sampling, not the paper's Power-SMC.
    with pytest.raises(ConfigError) as err:
        build_baseline(settings("power_smc", block=N))
    assert "sampler.block_size" in str(err.value) and "\n" not in str(err.value)
    # Where resampling is moot (one particle, or a threshold of 0) one block is a fine request.
    assert build_baseline(settings("power_smc", block=N, num_particles=1)).num_particles == 1
    assert build_baseline(settings("power_smc", block=N, ess_threshold=0)).ess_threshold == 0.0
    assert build_baseline(settings("power_smc", block=1)).num_particles == 8
    # The other baselines ignore block_size: B = n is their natural setting.
    for name in ("lowtemp", "best_of_n"):
        assert build_baseline(settings(name, block=N)).name == name


def sampler_settings(*overrides: str) -> SamplerSettings:
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(str(PROJECT_ROOT / "conf"), version_base="1.3"):
        return validate_sampler(compose("config", overrides=list(overrides)))


@pytest.mark.parametrize(
    "overrides, block",
    [
        (("sampler=power_smc", "experiment=paper"), 128),  # the paper's Case Study 8: 1024 tokens in blocks of 128
        (("sampler=power_smc",), 8),  # the embedded default's n = 64: 8 blocks, so it resamples
        (("sampler=power_smc", "sampler.block_size=16"), 16),
        (("sampler=powermh", "experiment=paper"), 1024),  # MH samplers: one block of n (Table 6)
        (("sampler=entropycut",), 64),
        (("sampler=multitry", "sampler.max_new_tokens=32"), 32),  # B follows n unless set
    ],
)
def test_block_size_defaults_suit_each_sampler(overrides, block):
    assert sampler_settings(*overrides).block_size == block


def test_power_smc_default_block_needs_n_divisible_by_8():
    with pytest.raises(ConfigError) as err:
        sampler_settings("sampler=power_smc", "sampler.max_new_tokens=100")
    assert "sampler.block_size" in str(err.value) and "\n" not in str(err.value)


def test_bad_baseline_key_on_the_command_line_writes_nothing(toy_table, tmp_path):
    run_dir = tmp_path / "run"
    result = run_cli(*toy_args(toy_table, run_dir, "sampler=power_smc", "sampler.num_particles=0"))
    assert result.returncode != 0 and "Traceback" not in result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "sampler.num_particles" in errors[0], result.stderr
    assert not run_dir.exists()


def test_baseline_run_directory_reports_time_and_calls(toy_table, tmp_path):
    run_dir = tmp_path / "run"
    result = run_cli(*toy_args(toy_table, run_dir, "sampler=power_smc", "sampler.num_particles=4"))
    assert result.returncode == 0, result.stderr
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["sampler"] == "power_smc" and summary["traversal"] == "none" and summary["transitions"] == 0
    assert summary["model_calls"] == 4 * 2 and summary["call_time_s"] > 0  # 4 answers x 2 blocks of 4 tokens
    records = [json.loads(line) for line in (run_dir / "chains.jsonl").read_text().splitlines()]
    assert all(len(r["tokens"]) == 8 and r["num_particles"] == 4 and len(r["ess"]) == 2 for r in records)
