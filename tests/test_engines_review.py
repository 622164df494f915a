"""Engine review: bad requests are refused up front, and the toy engine's law is the exact softmax."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from presto.engines.base import SuffixRequest
from presto.engines.token_sampling import log_softmax
from presto.engines.toy import ToyEngine
from tests.conftest import write_toy_table


@pytest.fixture
def toy(tmp_path) -> ToyEngine:
    return ToyEngine(write_toy_table(tmp_path / "table.json", vocab=4, seed=7))


@pytest.mark.parametrize("bad", [-1, 4])
def test_a_toy_prefix_id_outside_the_vocabulary_is_refused(toy, bad):
    """-1 used to read the last logits row (a silently wrong answer), 4 an IndexError."""
    with pytest.raises(ValueError, match=rf"token id {bad}, outside the vocabulary \[0, 4\) of engine=toy"):
        toy.generate([SuffixRequest((0, 1), 2, 1.0, 0), SuffixRequest((2, bad), 2, 1.0, 0)])
    assert toy.stats.calls == 0, "refused before any work"
    with pytest.raises(ValueError, match=rf"rescoring \(prefix \+ tokens\) holds token id {bad},"):
        toy.score([0], [1, bad])


@pytest.mark.parametrize(
    ("field", "value"),
    [("num_new_tokens", 2.0), ("num_new_tokens", True), ("seed", 1.5), ("seed", "3")],
)
def test_a_request_with_a_non_integer_length_or_seed_is_one_clear_line(field, value):
    """A float passed the range checks and failed later inside numpy (``range(2.0)``, SeedSequence(1.5))."""
    args = {"prefix": (1,), "num_new_tokens": 2, "temperature": 1.0, "seed": 0, field: value}
    with pytest.raises(ValueError, match=rf"^{field} must be an int"):
        SuffixRequest(**args)
    # numpy integers (what seed streams hand out) are integers
    assert SuffixRequest((1,), np.int64(2), 1.0, np.uint64(5)).seed == 5


def test_list_prefixes_and_temperatures_make_hashable_requests(toy):
    """A call de-duplicates requests by hashing them: a list prefix was 'unhashable type: list'."""
    request = SuffixRequest([0, 1], 3, 0.5, 4, [0.25])
    assert request == SuffixRequest((0, 1), 3, 0.5, 4, (0.25,))
    (result,) = toy.generate([request])
    assert result.logq_extra.shape == (3, 1)


def test_toy_tokens_follow_the_exact_tempered_softmax(toy):
    """Chi-square of the first and second token against softmax(logits / tau), and exact log-probs."""
    tau, n = 0.6, 4000
    results = toy.generate([SuffixRequest((), 2, tau, seed, (1.0, 0.3)) for seed in range(n)])
    first = np.array([r.tokens[0] for r in results])
    law = np.exp(log_softmax(toy.bos_logits / tau))
    assert stats.chisquare(np.bincount(first, minlength=4), n * law).pvalue > 1e-3
    assert stats.chisquare(np.bincount(first, minlength=4), n * np.exp(log_softmax(toy.bos_logits))).pvalue < 1e-6
    after = [r.tokens[1] for r in results if r.tokens[0] == 1]
    law = np.exp(log_softmax(toy.logits[1] / tau))
    assert stats.chisquare(np.bincount(after, minlength=4), len(after) * law).pvalue > 1e-3
    for r in results[:50]:
        rows = [toy.bos_logits, toy.logits[r.tokens[0]]]
        for i, (row, token) in enumerate(zip(rows, r.tokens, strict=True)):
            logp0 = log_softmax(row)
            assert r.logp0[i] == logp0[token] and r.logq[i] == log_softmax(row / tau)[token]
            assert r.logq_extra[i, 0] == logp0[token] and r.logq_extra[i, 1] == log_softmax(row / 0.3)[token]
            np.testing.assert_allclose(r.entropy[i], -np.sum(np.exp(logp0) * logp0), rtol=1e-14)
    # the seeded uniform is the request's own: the same seed alone gives the same tokens
    (alone,) = toy.generate([SuffixRequest((), 2, tau, 17, (1.0, 0.3))])
    np.testing.assert_array_equal(alone.tokens, results[17].tokens)


@pytest.fixture(scope="module")
def hf(tmp_path_factory):
    pytest.importorskip("torch")
    from presto.engines.hf import HFEngine
    from presto.models import make_tiny_model

    return HFEngine(make_tiny_model(tmp_path_factory.mktemp("tiny") / "model", dtype="float64", seed=1), "float64")


def test_an_hf_prefix_id_outside_the_vocabulary_is_refused_before_any_work(hf):
    """It was 'IndexError: index out of range in self' from the embedding (a device assert on a GPU)."""
    vocab = hf.model.get_input_embeddings().num_embeddings
    calls = hf.stats.calls
    for bad in (vocab, -1):
        with pytest.raises(ValueError, match=rf"token id {bad}, outside the vocabulary \[0, {vocab}\) of engine=hf"):
            hf.generate([SuffixRequest((1, 2, 3), 2, 1.0, 0), SuffixRequest((1, bad), 2, 1.0, 0)])
    assert hf.stats.calls == calls
    assert len(hf.generate([SuffixRequest((1, vocab - 1), 2, 1.0, 0)])[0].tokens) == 2


def test_inverse_cdf_never_picks_a_token_of_probability_zero():
    """u = 0, u just below 1, a -inf logit, and weights that underflow at a low temperature:
    the toy and hf samplers pick the same token, always one of positive probability."""
    torch = pytest.importorskip("torch")
    from presto.engines.hf import _entropy, _inverse_cdf_sample
    from presto.engines.token_sampling import TokenStats, sample_index

    logits = np.array([-np.inf, -np.inf, 1.0, 2.0, -np.inf])
    top = np.nextafter(1.0, 0.0)
    expected = {1.0: {0.0: 2, 0.5: 3, top: 3}, 1e-6: {0.0: 3, 0.5: 3, top: 3}}  # at 1e-6 token 2's weight is 0
    for tau, picks in expected.items():
        logq = log_softmax(logits / tau)
        for u, token in picks.items():
            assert sample_index(logq, u) == token
            rows = torch.tensor(np.stack([logq, logq[::-1].copy()]))
            assert _inverse_cdf_sample(torch, rows, torch.tensor([u, u], dtype=torch.float64)).tolist()[0] == token
    stats_ = TokenStats(1, 1)
    assert stats_.draw(0, logits, 0.5, (0.25,), 0.0) == 2
    p = np.exp(log_softmax(logits[2:4]))
    assert np.isclose(stats_.entropy[0], -np.sum(p * np.log(p)), rtol=1e-14, atol=0)
    assert np.isfinite(stats_.logq_extra[0, 0])
    hf_entropy = _entropy(torch.log_softmax(torch.tensor(logits)[None], dim=-1))
    np.testing.assert_allclose(hf_entropy.numpy(), stats_.entropy, rtol=1e-14)


def test_omp_num_threads_is_read_as_libgomp_reads_it():
    """An empty OMP_NUM_THREADS (a job script's unset variable) or OpenMP's list form ended a
    vLLM run in an int() traceback; libgomp (and the hf engine) take both."""
    pytest.importorskip("vllm")
    from presto.config import ConfigError
    from presto.engines.vllm import _omp_threads

    assert _omp_threads(None) is None and _omp_threads("") is None and _omp_threads("  ") is None
    assert _omp_threads("3") == 3 and _omp_threads("2,1") == 2 and _omp_threads(" 4 ") == 4
    for bad in ("abc", "0", "-2", "1.5", ",2"):
        with pytest.raises(ConfigError, match="OMP_NUM_THREADS="):
            _omp_threads(bad)


@pytest.mark.parametrize(
    ("device", "message"),
    [("gpu", r"engine\.device=gpu is not a torch device"), ("mps", r"engine\.device=mps: the hf engine runs on")],
)
def test_the_hf_device_is_checked_before_the_task_loads(device, message):
    """engine.dtype and engine.threads were checked up front, engine.device only once the engine
    was built after the task had loaded: -m engine.device=cpu,gpu ran the cpu job before failing."""
    from presto.config import ConfigError, validate
    from tests.conftest import compose_run

    with pytest.raises(ConfigError, match=message):
        validate(compose_run("engine=hf", f"engine.device={device}"))
    validate(compose_run("engine=hf", "engine.device=cpu"))


def test_a_gpu_the_launcher_lacks_is_not_refused_before_the_jobs_run():
    """A Slurm sweep of engine=hf engine.device=cuda is validated on a login node that may have no
    GPU: only the spelling is checked there; the engine checks the GPU where the job runs."""
    import torch

    from presto.config import validate
    from tests.conftest import compose_run

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    validate(compose_run("engine=hf", "engine.device=cuda"))
    validate(compose_run("engine=hf", "engine.device=cuda:1"))
