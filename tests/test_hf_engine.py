"""The transformers engine: batch-invariant sampling, exact statistics, exact PreSTO chains."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from presto.engines.base import SuffixRequest  # noqa: E402
from presto.engines.hf import HFEngine, decode_groups, group_prefix_chains, prefix_sharing_limit  # noqa: E402
from presto.models import make_tiny_model  # noqa: E402
from presto.prefetch.predictive import PredictiveTraversal  # noqa: E402
from presto.prefetch.presto import PrefetchStepper  # noqa: E402
from presto.prefetch.traversal import BreadthFirst  # noqa: E402
from presto.samplers.chain import BlockSchedule, SequentialStepper, run_chain  # noqa: E402
from presto.samplers.entropycut import EntropyCut  # noqa: E402
from presto.samplers.multitry import MultiTryMH  # noqa: E402
from presto.samplers.powermh import PowerMH  # noqa: E402
from presto.samplers.randomness import ChainKey  # noqa: E402


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    model_dir = make_tiny_model(tmp_path_factory.mktemp("tiny") / "model", dtype="float64", seed=1)
    return HFEngine(model_dir, dtype="float64")


@pytest.fixture(scope="module")
def prompt(engine):
    return engine.encode_prompt([{"role": "user", "content": "Write a function that adds two numbers."}])


def test_group_prefix_chains_groups_prefixes_of_one_sequence():
    requests = [SuffixRequest((1, 2, 3), 2, 1.0, 0), SuffixRequest((1, 2), 2, 1.0, 0), SuffixRequest((1, 5), 2, 1.0, 0)]
    groups = group_prefix_chains(requests)
    assert sorted(map(sorted, groups)) == [[0, 1], [2]]


def test_attention_that_counts_slots_limits_how_far_prefixes_share_a_cache():
    from transformers import Gemma2Config, LlamaConfig, MistralConfig, Phi3Config, Qwen2Config

    assert prefix_sharing_limit(LlamaConfig()) is None
    assert prefix_sharing_limit(Qwen2Config(use_sliding_window=False)) is None
    assert prefix_sharing_limit(MistralConfig(sliding_window=None)) is None
    assert prefix_sharing_limit(MistralConfig(sliding_window=8)) == 8
    assert prefix_sharing_limit(Gemma2Config(sliding_window=64)) == 64
    longrope = {"rope_type": "longrope", "short_factor": [1.0] * 4, "long_factor": [2.0] * 4}
    phi = Phi3Config(
        hidden_size=32, num_attention_heads=4, rope_parameters=longrope, original_max_position_embeddings=16
    )
    assert prefix_sharing_limit(phi) == 16
    requests = [
        SuffixRequest((1, 2, 3, 4), 2, 1.0, 0),
        SuffixRequest((1, 2), 2, 1.0, 1),
        SuffixRequest((1, 2), 3, 1.0, 2),
    ]
    assert decode_groups(requests, None) == decode_groups(requests, 7) == [[0, 1, 2]]
    assert decode_groups(requests, 6) == [[0], [1, 2]]  # 4 + 3 tokens do not fit: one prefix per group


def test_a_sliding_window_model_decodes_a_short_prefix_as_it_would_alone(engine, tmp_path):
    """With a window of 8 slots, a row masked inside a 40-token group would lose its own keys."""
    import torch
    from transformers import MistralConfig, MistralForCausalLM

    torch.manual_seed(0)
    config = MistralConfig(
        vocab_size=len(engine.tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        sliding_window=8,
        max_position_embeddings=128,
    )
    model = MistralForCausalLM(config).to(torch.float64)
    for parameter in model.parameters():
        torch.nn.init.normal_(parameter, std=0.3)
    model.save_pretrained(tmp_path / "mistral")
    engine.tokenizer.save_pretrained(tmp_path / "mistral")
    windowed = HFEngine(tmp_path / "mistral", dtype="float64")
    sequence = tuple(range(100, 140))
    short = SuffixRequest(sequence[:10], 12, 1.0, 5)
    (alone,) = windowed.generate([short])
    _, grouped = windowed.generate([SuffixRequest(sequence, 4, 1.0, 1), short])
    np.testing.assert_array_equal(grouped.tokens, alone.tokens)
    np.testing.assert_allclose(grouped.logp0, alone.logp0, rtol=0, atol=1e-12)


def test_batched_call_equals_single_calls_and_direct_forward(engine, prompt):
    sequence = tuple(prompt) + tuple(range(1000, 1030))
    cuts = [(len(prompt) + 3, 12), (len(sequence), 4), (len(prompt) + 20, 9), (len(prompt), 15)]
    requests = [SuffixRequest(sequence[:m], n, 0.5, 77 + m, (0.25, 1.0)) for m, n in cuts]
    batched = engine.generate(requests)
    for request, result in zip(requests, batched, strict=True):
        (single,) = engine.generate([request])
        np.testing.assert_array_equal(single.tokens, result.tokens)
        np.testing.assert_allclose(single.logq, result.logq, atol=1e-10)
        ids = list(request.prefix) + result.tokens.tolist()
        with torch.no_grad():
            logits = engine.model(input_ids=torch.tensor([ids])).logits[0].double()
        positions = torch.arange(len(request.prefix) - 1, len(ids) - 1)
        picked = torch.tensor(result.tokens)
        logp0 = torch.log_softmax(logits[positions], -1)
        np.testing.assert_allclose(result.logp0, logp0[torch.arange(len(picked)), picked].numpy(), atol=1e-10)
        logq = torch.log_softmax(logits[positions] / 0.5, -1)[torch.arange(len(picked)), picked]
        np.testing.assert_allclose(result.logq, logq.numpy(), atol=1e-10)
        quarter = torch.log_softmax(logits[positions] / 0.25, -1)[torch.arange(len(picked)), picked]
        np.testing.assert_allclose(result.logq_extra[:, 0], quarter.numpy(), atol=1e-10)
        np.testing.assert_allclose(result.logq_extra[:, 1], result.logp0, atol=1e-10)
        entropy = -(logp0.exp() * logp0).sum(-1)
        np.testing.assert_allclose(result.entropy, entropy.numpy(), atol=1e-10)
    assert engine.stats.calls >= 1 + len(requests)


def test_rows_recording_different_extra_temperatures_share_a_call(engine, prompt):
    # MultiTryMH rows record three temperatures, block extensions none, another sampler one:
    # the call computes each set for its own rows only, and each row's values are its own.
    sequence = tuple(prompt) + tuple(range(1000, 1020))
    recorded = [(0.25, 0.5, 1.0), (), (0.5,), (0.25, 0.5, 1.0), (2.0,)]
    requests = [
        SuffixRequest(sequence[: len(prompt) + 3 * i], 6 + i, 0.5, 5 + i, temps) for i, temps in enumerate(recorded)
    ]
    for request, result in zip(requests, engine.generate(requests), strict=True):
        (single,) = engine.generate([request])
        assert result.logq_extra.shape == (request.num_new_tokens, len(request.extra_temperatures))
        np.testing.assert_array_equal(single.tokens, result.tokens)
        np.testing.assert_allclose(single.logq_extra, result.logq_extra, atol=1e-10)
        if 0.5 in request.extra_temperatures:  # the sampling temperature: log q itself
            np.testing.assert_allclose(result.logq_extra[:, request.extra_temperatures.index(0.5)], result.logq)


def test_sampling_depends_on_seed_not_on_batch(engine, prompt):
    base = SuffixRequest(tuple(prompt), 10, 1.0, 5)
    other = SuffixRequest(tuple(prompt), 10, 1.0, 6)
    a, b = engine.generate([base, other])
    (alone,) = engine.generate([base])
    np.testing.assert_array_equal(a.tokens, alone.tokens)
    assert not np.array_equal(a.tokens, b.tokens)


KERNELS = {
    "powermh": lambda: PowerMH(alpha=4.0, tau=0.25),
    "entropycut": lambda: EntropyCut(alpha=4.0, tau=0.25),
    "multitry": lambda: MultiTryMH(alpha=4.0, tau=0.25),
}
TRAVERSALS = {
    "bfs": lambda sampler: BreadthFirst(),
    "predictive": lambda sampler: PredictiveTraversal.from_options({}, sampler),  # its shipped predictor, timed costs
}


@pytest.mark.parametrize("traversal", sorted(TRAVERSALS))
@pytest.mark.parametrize("sampler", sorted(KERNELS))
def test_presto_chains_equal_sequential_chains_in_float64(engine, prompt, sampler, traversal):
    kernel = KERNELS[sampler]()
    schedule = BlockSchedule(12, 6, 6)
    for seed in range(4 if sampler == "powermh" else 2):
        key = ChainKey(seed, 0, 0)
        reference, reference_trace = run_chain(kernel, engine, SequentialStepper(), prompt, key, schedule)
        for n_pf in (2, 5, 20):
            stepper = PrefetchStepper(TRAVERSALS[traversal](sampler), n_pf)
            state, trace = run_chain(kernel, engine, stepper, prompt, key, schedule)
            np.testing.assert_array_equal(state.tokens, reference.tokens)
            assert trace.accepts == reference_trace.accepts
            # float64 here is batch-invariant to ~1e-14, not bit for bit (shared-prefix prefill)
            np.testing.assert_allclose(trace.log_accepts, reference_trace.log_accepts, rtol=0, atol=1e-9)


def test_sequences_past_the_models_positions_are_refused(engine, prompt):
    from presto.config import ConfigError

    limit = engine.max_sequence_tokens()
    assert limit == engine.model.config.max_position_embeddings
    with pytest.raises(ConfigError, match=f"needs {limit + 1} tokens"):
        engine.generate([SuffixRequest(tuple(range(limit - 3)), 4, 1.0, 0)])
    with pytest.raises(ValueError, match="non-empty prefix"):
        engine.score([], [1, 2])


def test_only_float64_is_reported_batch_invariant(engine, tmp_path):
    assert engine.batch_variance() is None
    float32 = HFEngine(make_tiny_model(tmp_path / "model32", seed=1), dtype="float32")
    note = float32.batch_variance()
    assert note is not None and "float32" in note and "engine.dtype=float64" in note


@pytest.mark.parametrize(("dtype", "traversal", "warned"), [("float32", "bfs", True), ("float32", "sequential", False)])
def test_a_presto_run_says_when_its_chains_may_not_equal_sequential_ones(tmp_path, dtype, traversal, warned):
    from tests.conftest import run_cli

    model = make_tiny_model(tmp_path / "tiny", seed=1)
    result = run_cli(
        "engine=hf",
        f"engine.dtype={dtype}",
        f"model.path={model}",
        "dataset.num_prompts=1",
        "sampler.max_new_tokens=4",
        "sampler.block_size=4",
        "sampler.steps=2",
        f"traversal={traversal}",
        f"hydra.run.dir={tmp_path / 'run'}",
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert ("WARNING: engine=hf in float32 is not batch-invariant" in result.stderr) == warned


def test_an_unknown_hf_engine_key_is_refused_not_ignored():
    from presto.config import ConfigError
    from presto.engines import build_engine

    with pytest.raises(ConfigError, match=r"engine\.devices is not a key of engine=hf"):
        build_engine({"name": "hf", "dtype": "float64", "devices": "cuda"}, {"path": "unused"})


def test_a_device_that_is_not_there_is_one_clear_line(engine):
    import torch

    from presto.config import ConfigError

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    with pytest.raises(ConfigError, match=r"engine\.device=cuda but torch sees no CUDA GPU"):
        HFEngine(engine.model_dir, dtype="float64", device="cuda")
    with pytest.raises(ConfigError, match=r"engine\.device=gpu0 is not a torch device"):
        HFEngine(engine.model_dir, dtype="float64", device="gpu0")


@pytest.mark.gpu
def test_on_a_gpu_presto_chains_equal_sequential_chains_and_the_cpu_statistics(engine, prompt):
    import torch

    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    gpu = HFEngine(engine.model_dir, dtype="float64", device="cuda")
    request = SuffixRequest(tuple(prompt), 12, 0.5, 5, (0.25, 1.0))
    (on_cpu,), (on_gpu,) = engine.generate([request]), gpu.generate([request])
    np.testing.assert_allclose(on_gpu.logp0, on_cpu.logp0, rtol=0, atol=1e-9)  # float64 on both
    np.testing.assert_allclose(on_gpu.logq_extra, on_cpu.logq_extra, rtol=0, atol=1e-9)
    kernel, schedule = PowerMH(alpha=4.0, tau=0.25), BlockSchedule(16, 8, 10)
    key = ChainKey(3, 0, 0)
    sequential, seq_trace = run_chain(kernel, gpu, SequentialStepper(), list(prompt), key, schedule)
    presto, presto_trace = run_chain(kernel, gpu, PrefetchStepper(BreadthFirst(), 6), list(prompt), key, schedule)
    np.testing.assert_array_equal(presto.tokens, sequential.tokens)
    assert presto_trace.accepts == seq_trace.accepts
    # float64 here is batch-invariant to ~1e-14, not bit for bit (shared-prefix prefill)
    np.testing.assert_allclose(presto_trace.log_accepts, seq_trace.log_accepts, rtol=0, atol=1e-9)


def test_rescoring_a_generated_suffix_gives_its_statistics(engine, prompt):
    (result,) = engine.generate([SuffixRequest(tuple(prompt), 6, 0.5, 3)])
    logp0, entropy = engine.score(prompt, result.tokens)
    np.testing.assert_allclose(logp0, result.logp0, rtol=0, atol=1e-10)
    np.testing.assert_allclose(entropy, result.entropy, rtol=0, atol=1e-10)


def test_a_masked_token_adds_nothing_to_the_entropy():
    import torch

    from presto.engines.hf import _entropy

    logp = torch.log_softmax(torch.tensor([[0.0, 0.0, float("-inf")]], dtype=torch.float64), dim=-1)
    np.testing.assert_allclose(_entropy(logp).numpy(), [np.log(2.0)], rtol=1e-15)


def test_a_gpu_index_past_the_visible_ones_is_one_clear_line(monkeypatch):
    """torch.device("cuda:5") is accepted on any machine; the failure would come later, as "invalid device ordinal"."""
    from presto.config import ConfigError
    from presto.engines.hf import _torch_device

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert _torch_device(torch, "cuda:1") == torch.device("cuda:1")
    assert _torch_device(torch, "cuda") == torch.device("cuda")
    with pytest.raises(ConfigError, match=r"^engine\.device=cuda:2 but torch sees 2 CUDA GPUs \(cuda:0 to cuda:1;"):
        _torch_device(torch, "cuda:2")
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    with pytest.raises(ConfigError, match=r"^engine\.device=cuda:7 but torch sees 1 CUDA GPU \(cuda:0 to cuda:0;"):
        _torch_device(torch, "cuda:7")


def test_a_lone_row_is_scanned_beside_a_copy_with_the_same_bits_on_the_cpu(monkeypatch):
    """On CUDA a one-row cumsum takes a device-wide scan, a batch's rows a row-wise one: the scan
    must never see one row. On the CPU the padded scan gives the former CDF and tokens bit for bit."""
    from presto.engines.hf import _inverse_cdf_sample

    logits = torch.randn(1, 4099, generator=torch.Generator().manual_seed(3), dtype=torch.float64) * 6
    logq = torch.log_softmax(logits / 0.25, dim=-1)
    # The former code: one cumsum over the row as it is.
    before = torch.cumsum(torch.exp(logq - logq.max(dim=-1, keepdim=True).values), dim=-1)
    uniforms = np.random.default_rng(0).random(200)
    # Uniforms at the CDF's own steps, where a last-bit difference would move the token.
    uniforms = np.concatenate([uniforms, (before[0, ::97] / before[0, -1]).numpy()])

    def former(u):
        picked = torch.searchsorted(before, (u * before[:, -1])[:, None], right=True)[:, 0]
        return picked.clamp(max=before.shape[-1] - 1)

    scanned = []
    original = torch.cumsum

    def spy(tensor, *args, **kwargs):
        out = original(tensor, *args, **kwargs)
        scanned.append((tensor.shape[0], out))
        return out

    monkeypatch.setattr(torch, "cumsum", spy)
    for u in uniforms:
        u = torch.tensor([u], dtype=torch.float64)
        assert _inverse_cdf_sample(torch, logq, u).tolist() == former(u).tolist()
    assert scanned and all(rows >= 2 for rows, _ in scanned)
    for _, cdf in scanned:
        assert torch.equal(cdf[:1], before)
    # Several rows are scanned as they are.
    scanned.clear()
    batch = torch.cat([logq, logq.flip(-1)])
    assert _inverse_cdf_sample(torch, batch, torch.tensor([0.3, 0.3], dtype=torch.float64)).shape == (2,)
    assert [rows for rows, _ in scanned] == [2]


def test_a_one_request_call_never_scans_a_single_row(engine, prompt, monkeypatch):
    """A sequential chain's calls hold one request: every decode step's CDF is still scanned in two rows."""
    rows = []
    original = torch.cumsum

    def spy(tensor, *args, **kwargs):
        rows.append(tensor.shape[0])
        return original(tensor, *args, **kwargs)

    monkeypatch.setattr(torch, "cumsum", spy)
    engine.generate([SuffixRequest(tuple(prompt), 5, 0.5, 11)])
    assert len(rows) == 5 and min(rows) >= 2


def test_close_releases_the_model_and_a_closed_engine_says_so(tmp_path):
    import gc
    import weakref

    model_dir = make_tiny_model(tmp_path / "model", dtype="float32", seed=2)
    engine = HFEngine(model_dir, dtype="float32")
    prompt = tuple(engine.encode_prompt([{"role": "user", "content": "Hi"}]))
    engine.generate([SuffixRequest(prompt, 3, 1.0, 0)])
    model = weakref.ref(engine.model)
    engine.close()
    gc.collect()
    assert model() is None  # before: the weights lived as long as the engine object
    with pytest.raises(RuntimeError, match="this hf engine is closed"):
        engine.generate([SuffixRequest(prompt, 3, 1.0, 0)])
    engine.close()  # twice is fine


def test_the_engine_warms_up_uncounted_before_its_first_call(tmp_path, monkeypatch):
    """One-time setup is paid while the engine is built, not in the first counted model call."""
    calls: list[list[SuffixRequest]] = []
    generate = HFEngine._generate

    def spy(self, requests):
        calls.append(list(requests))
        return generate(self, requests)

    monkeypatch.setattr(HFEngine, "_generate", spy)
    engine = HFEngine(make_tiny_model(tmp_path / "model", dtype="float32", seed=3), dtype="float32")
    assert len(calls) == 1 and len(calls[0]) == 2  # the warm-up: a shared-prefix pair
    assert any(r.extra_temperatures for r in calls[0])  # MultiTryMH's extra-temperature path too
    assert (engine.stats.calls, engine.stats.call_time_s, engine.stats.generated_tokens) == (0, 0.0, 0)
