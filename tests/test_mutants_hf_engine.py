"""Tests that kill the mutants a hand mutation review of the transformers engine (engines/hf.py) found surviving.

Ids of the review: H1-H62 (the full list, with what killed each one and why the survivors are
equivalent, is at the end of the file). The tests check what the module docstrings state rather
than how the code computes it: the cache-sharing limit of each kind of attention and long-context
RoPE, statistics in float64 from the very logits the model returned (also for a float32 model),
each row sampled at its own temperature by inverting the CDF with its own request's uniforms,
the refusals of bad requests and bad settings, and the EOS ids and vocabulary of the model folder.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from types import SimpleNamespace

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from presto.config import ConfigError  # noqa: E402
from presto.engines.base import SuffixRequest  # noqa: E402
from presto.engines.hf import HFEngine, _torch_device, prefix_sharing_limit  # noqa: E402
from presto.engines.token_sampling import request_generator, sample_index  # noqa: E402
from presto.models import make_tiny_model  # noqa: E402


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    return make_tiny_model(tmp_path_factory.mktemp("tiny") / "model", dtype="float64", seed=1)


@pytest.fixture(scope="module")
def engine64(tiny_dir):
    return HFEngine(tiny_dir, dtype="float64")


@pytest.fixture(scope="module")
def engine32(tiny_dir):
    return HFEngine(tiny_dir, dtype="float32")  # the float64 weights, loaded in float32


def chat_prompt(engine) -> tuple[int, ...]:
    return tuple(engine.encode_prompt([{"role": "user", "content": "Write a function that adds two numbers."}]))


# --- prefix_sharing_limit: which attention may share one masked cache, and how far ----------------


def test_local_attention_other_than_a_window_and_attention_chunks_never_share_a_cache():
    """H5 (layer types other than full attention without a window: no limit), H6 (attention_chunk_size
    ignored). Either kind spends its span on the masked slots of a shorter row: limit 0."""
    from transformers import LlamaConfig

    linear = SimpleNamespace(layer_types=["full_attention", "linear_attention"], sliding_window=None)
    assert prefix_sharing_limit(linear) == 0
    assert prefix_sharing_limit(SimpleNamespace(layer_types=["full_attention"] * 2)) is None
    assert prefix_sharing_limit(LlamaConfig(attention_chunk_size=8)) == 0
    assert prefix_sharing_limit(LlamaConfig()) is None


def test_long_context_rope_limits_sharing_to_the_positions_its_short_factors_hold():
    """H7 (the older ``{"type": ...}`` spelling not read), H8 (dynamic NTK not limited), H9 (the rope
    parameters' own original length not preferred), H11 (no fallback to max_position_embeddings)."""
    from transformers import LlamaConfig

    old_spelling = SimpleNamespace(rope_scaling={"type": "dynamic", "factor": 2.0}, max_position_embeddings=64)
    assert prefix_sharing_limit(old_spelling) == 64
    dynamic = LlamaConfig(rope_parameters={"rope_type": "dynamic", "factor": 2.0}, max_position_embeddings=48)
    assert prefix_sharing_limit(dynamic) == 48  # no original length anywhere: the trained positions
    own = SimpleNamespace(
        rope_parameters={"rope_type": "longrope", "original_max_position_embeddings": 16},
        original_max_position_embeddings=32,
        max_position_embeddings=128,
    )
    assert prefix_sharing_limit(own) == 16
    linear = SimpleNamespace(rope_parameters={"rope_type": "linear", "factor": 2.0}, max_position_embeddings=64)
    assert prefix_sharing_limit(linear) is None  # scales every position alike: no switch
    per_layer = SimpleNamespace(
        rope_parameters={
            "sliding_attention": {"rope_type": "default"},
            "full_attention": {"rope_type": "dynamic", "factor": 4.0},
        },
        max_position_embeddings=40,
    )
    assert prefix_sharing_limit(per_layer) == 40


def test_the_tightest_limit_wins_and_a_composite_config_is_read_through_its_text_config():
    """H10 (max of the limits instead of min), H12 (a multimodal config read at its top level, where
    neither its window nor its layer types are)."""
    from transformers import Gemma3Config

    both = SimpleNamespace(
        sliding_window=64,
        rope_parameters={"rope_type": "longrope", "original_max_position_embeddings": 16},
        max_position_embeddings=128,
    )
    assert prefix_sharing_limit(both) == 16
    both.sliding_window = 8
    assert prefix_sharing_limit(both) == 8
    gemma = Gemma3Config(text_config={"sliding_window": 16, "hidden_size": 32, "num_hidden_layers": 6})
    assert prefix_sharing_limit(gemma) == 16


# --- statistics and sampling: float64, from the model's own logits, at each row's temperature -----


def expected_statistics(logits: torch.Tensor, token: int, tau: float, extra: tuple[float, ...]):
    """(log p0, log q, entropy, log q at each extra temperature) of ``token``, in float64 from ``logits``."""
    row = logits.double()
    logp0 = torch.log_softmax(row, -1)
    at = [float(torch.log_softmax(row / t, -1)[token]) for t in (tau, *extra)]
    entropy = float(-(logp0.exp() * logp0).sum())
    return float(logp0[token]), at[0], entropy, at[1:]


def test_a_float32_models_statistics_are_float64_of_the_logits_it_returned(engine32, monkeypatch):
    """H50 (temperatures held in float32: tau = 0.7 is then 0.699999988), H51 (log-softmax in the
    model's float32), and the sampling law: each token inverts the CDF of softmax(logits / tau) at
    the next uniform of the request's own stream (PCG64 of its seed)."""
    returned: list[torch.Tensor] = []
    forward = engine32._forward

    def recording(*args, **kwargs):
        out = forward(*args, **kwargs)
        returned.append(out.clone())
        return out

    monkeypatch.setattr(engine32, "_forward", recording)
    request = SuffixRequest(chat_prompt(engine32), 8, 0.7, 123, (0.3, 1.0))
    (result,) = engine32.generate([request])
    assert len(returned) == 8 and all(out.dtype == torch.float32 for out in returned)
    step_logits = [returned[0][0, -1]] + [out[0, -1] for out in returned[1:]]  # prefill keeps one position
    uniforms = request_generator(request.seed)
    for step, logits in enumerate(step_logits):
        token = int(result.tokens[step])
        logq_row = torch.log_softmax(logits.double() / 0.7, -1).numpy()
        assert sample_index(logq_row, uniforms.random()) == token
        logp0, logq, entropy, extra = expected_statistics(logits, token, 0.7, (0.3, 1.0))
        assert abs(result.logp0[step] - logp0) < 1e-12 and abs(result.logq[step] - logq) < 1e-12
        assert abs(result.entropy[step] - entropy) < 1e-12
        np.testing.assert_allclose(result.logq_extra[step], extra, rtol=0, atol=1e-12)


def test_a_float32_rescore_is_float64_of_the_logits_it_returned(engine32, monkeypatch):
    """H44 (rescoring's log-softmax in the model's float32)."""
    prompt = chat_prompt(engine32)
    tokens = [1000, 2000, 3000, 17]
    returned: list[torch.Tensor] = []
    forward = engine32.model.forward

    def recording(**kwargs):
        out = forward(**kwargs)
        returned.append(out.logits.clone())
        return out

    monkeypatch.setattr(engine32.model, "forward", recording)
    logp0, entropy = engine32.score(prompt, tokens)
    (logits,) = returned
    assert logits.dtype == torch.float32 and logits.shape[1] == len(tokens) + 1
    for i, token in enumerate(tokens):
        want_logp0, _, want_entropy, _ = expected_statistics(logits[0, i], token, 1.0, ())
        assert abs(logp0[i] - want_logp0) < 1e-12 and abs(entropy[i] - want_entropy) < 1e-12


def test_a_rescore_after_a_one_token_prefix_gives_the_generated_statistics(engine64):
    """H43 (one more logits row kept and dropped from the front: the same rows, except when the
    prefix is one token long and there is no row before the first predicting one)."""
    (result,) = engine64.generate([SuffixRequest((1,), 5, 0.5, 3)])
    logp0, entropy = engine64.score([1], result.tokens)
    np.testing.assert_allclose(logp0, result.logp0, rtol=0, atol=1e-10)
    np.testing.assert_allclose(entropy, result.entropy, rtol=0, atol=1e-10)


def test_each_row_of_a_call_samples_at_its_own_temperature(engine64):
    """H24 (temperatures listed in the prefix group's order, not the batch rows'), H25 (the
    temperatures of the rows still in the batch read from the wrong end once a row has left).
    Four prefixes of one sequence at four temperatures, their lengths in another order than their
    prefixes': every row's statistics are its own prefix's forward at its own temperature."""
    prompt = chat_prompt(engine64)
    sequence = prompt + tuple(range(1000, 1012))
    plan = [(2, 3, 0.7), (8, 7, 1.3), (5, 5, 0.4), (0, 9, 2.0)]  # (extra prefix tokens, new tokens, tau)
    requests = [SuffixRequest(sequence[: len(prompt) + k], n, tau, 40 + k, (1.0,)) for k, n, tau in plan]
    for request, result in zip(requests, engine64.generate(requests), strict=True):
        ids = list(request.prefix) + result.tokens.tolist()
        with torch.no_grad():
            logits = engine64.model(input_ids=torch.tensor([ids])).logits[0]
        uniforms = request_generator(request.seed)
        for step, token in enumerate(result.tokens.tolist()):
            row = logits[len(request.prefix) - 1 + step]
            logp0, logq, entropy, (logp0_again,) = expected_statistics(row, token, request.temperature, (1.0,))
            logq_row = torch.log_softmax(row.double() / request.temperature, -1).numpy()
            assert sample_index(logq_row, uniforms.random()) == token
            np.testing.assert_allclose(
                [result.logp0[step], result.logq[step], result.entropy[step], result.logq_extra[step, 0]],
                [logp0, logq, entropy, logp0_again],
                rtol=0,
                atol=1e-10,
            )


def test_only_a_stop_at_eos_row_stops_at_an_eos_it_samples(engine64, monkeypatch):
    """H32 (every row stops at its first EOS, also the MH samplers' fixed-horizon rows). The same
    request with and without stop_at_eos in one call, an EOS id added that its answer holds early:
    the stopping row ends there, the other runs to its full length, past that EOS."""
    full_request = SuffixRequest(chat_prompt(engine64), 10, 1.0, 9, (0.5,))
    (full,) = engine64.generate([full_request])
    eos = int(full.tokens[2])
    monkeypatch.setattr(engine64, "_eos", engine64.eos_token_ids | {eos})
    stop_request = dataclasses.replace(full_request, stop_at_eos=True)
    plain, stopped = engine64.generate([full_request, stop_request])
    length = int(np.flatnonzero(full.tokens == eos)[0]) + 1
    assert length <= 3 and len(stopped.tokens) == length
    np.testing.assert_array_equal(stopped.tokens, full.tokens[:length])
    assert len(plain.tokens) == 10
    np.testing.assert_array_equal(plain.tokens, full.tokens)
    np.testing.assert_allclose(plain.logq_extra, full.logq_extra, rtol=0, atol=1e-12)


# --- refusals: requests, rescoring, settings ------------------------------------------------------


def test_an_empty_prefix_is_refused_with_one_clear_line(engine64):
    """H19 (the empty-prefix check off by one: an empty prompt went into the model)."""
    with pytest.raises(ValueError, match="non-empty prefix"):
        engine64.generate([SuffixRequest((), 3, 1.0, 0)])
    with pytest.raises(ValueError, match="non-empty prefix"):
        engine64.generate([SuffixRequest((5, 6), 3, 1.0, 0), SuffixRequest((), 3, 1.0, 1)])


def test_a_rescore_is_refused_before_any_work_when_it_cannot_be_served(engine64):
    """H45 (ids outside the vocabulary not checked: an IndexError from the embedding), H46 (past the
    model's positions: silently out of distribution), H47 (no token to score: an empty answer)."""
    vocab = engine64.vocab_size
    with pytest.raises(ValueError, match=rf"rescoring \(prefix \+ tokens\) holds token id {vocab}, outside"):
        engine64.score([1, 2], [3, vocab])
    with pytest.raises(ValueError, match=r"rescoring \(prefix \+ tokens\) holds token id -1, outside"):
        engine64.score([1, -1], [3])
    limit = engine64.max_sequence_tokens()
    with pytest.raises(ConfigError, match=rf"rescoring \(prefix \+ tokens\) needs {limit + 1} tokens"):
        engine64.score(list(range(1, limit)), [5, 6])
    with pytest.raises(ValueError, match="non-empty prefix and at least one token"):
        engine64.score([1, 2, 3], [])


def test_an_hf_engine_built_directly_checks_its_dtype_and_device(tmp_path):
    """H48 (dtype unchecked when the engine is built without the config checks: float16 loaded),
    H49 (a torch device that is neither cpu nor cuda accepted by the engine's own check)."""
    with pytest.raises(ConfigError, match=r"engine\.dtype must be one of float32, float64, bfloat16, got 'float16'"):
        HFEngine(tmp_path / "missing", dtype="float16")
    for device in ("meta", "mps"):
        with pytest.raises(ConfigError, match=rf"engine\.device={device}: the hf engine runs on cpu or cuda"):
            _torch_device(torch, device)
    assert _torch_device(torch, "cpu") == torch.device("cpu")


def test_eos_ids_and_vocabulary_come_from_the_model_folder_not_the_tokenizer_alone(tiny_dir, tmp_path):
    """H52 (the generation config's EOS ids dropped), H53 (vocab_size from the tokenizer, which may
    hold fewer ids than the embedding: a padded model's sampled ids would be refused next call)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder = tmp_path / "padded"
    shutil.copytree(tiny_dir, folder)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder)
    model.resize_token_embeddings(len(tokenizer) + 16, mean_resizing=False)
    model.save_pretrained(folder)
    config = json.loads((folder / "generation_config.json").read_text())
    config["eos_token_id"] = [tokenizer.eos_token_id, 7]
    (folder / "generation_config.json").write_text(json.dumps(config))
    padded = HFEngine(folder, dtype="float32")
    assert padded.eos_token_ids == {tokenizer.eos_token_id, 7}
    assert padded.vocab_size == len(tokenizer) + 16
    top = len(tokenizer) + 15
    (result,) = padded.generate([SuffixRequest((1, 2, top), 2, 1.0, 0)])
    assert len(result.tokens) == 2
    with pytest.raises(ValueError, match=rf"token id {top + 1}, outside the vocabulary"):
        padded.generate([SuffixRequest((1, top + 1), 2, 1.0, 0)])


# Mutants of engines/hf.py (62: 35 existing, 23 new, 4 equivalent)
#   H1 prefixes sorted shortest first, H2 group test one token short, H3 `break` dropped: existing
#   (test_hf_engine, grouping test). H4 use_sliding_window default False, H13 `<=` -> `<`, H14 min of
#   the new tokens, H15 last member's prefix, H16 a long group split into singletons: existing
#   (test_hf_engine, sharing-limit test). H55 no sharing limit: existing (sliding-window model test).
#   H17 shortest suffix first, H18 shared = first row's prefix, H21 searchsorted right, H22 mask `<=`,
#   H23 wrong seeds, H26 uniforms of the wrong rows, H27 log q for log p0, H28 entropy of q, H30 extra
#   temperatures of rows already gone, H33 finished rows kept (`>=`), H36 RoPE positions + 1, H38
#   results in batch order, H56 finished rows not dropped from the cache: existing (test_hf_engine,
#   batched-call test). H20 kept positions off by one: existing (chain tests). H29 extra temperatures
#   of the first rows: existing (extra-temperatures test). H31 every EOS moves the end, H34/H35 the
#   call does not end early: existing (test_engine_stop_at_eos). H37 logq_extra not cut at EOS:
#   existing (test_engine_stop_at_eos). H39 searchsorted left, H41 a lone row scanned alone, H58 no
#   max subtracted: existing (lone-row scan test). H42 no nan_to_num: existing (masked-token test).
#   H54 float32 reported invariant, H60 no warm-up, H61 a GPU index equal to the count accepted:
#   existing (test_hf_engine).
#   New: H5, H6 (local-attention test), H7, H8, H9, H11 (long-context RoPE test), H10, H12
#   (tightest-limit test), H19 (empty-prefix test), H24, H25 (own-temperature test), H32 (stop-at-EOS
#   row test), H43 (one-token-prefix rescore; also the float32 rescore test), H44 (float32 rescore),
#   H45, H46, H47 (rescore refusals), H48, H49 (dtype and device test), H50, H51 (float32 statistics
#   test), H52, H53 (padded model folder test).
#   H40 (no clamp of the sampled index): equivalent: for u in [0, 1) and a finite total c > 0, u * c
#       rounds below c, so searchsorted(right=True) always finds an index < V; the clamp guards NaN only.
#   H57 (result tokens a view of the batch array, no copy): equivalent: nothing writes the batch
#       array after the results are built (only memory: the view keeps the whole array alive).
#   H59 (stop_at_eos rows stopping even when the engine has no EOS ids): equivalent: `in` an empty
#       array is False, so no row ever stops.
#   H62 (close without its already-closed guard): equivalent: a second close stores another Closed
#       (and empties an already empty CUDA cache).
#   Not tried as a mutant: uniforms drawn in float32 would move a token only within ~1e-8 of a CDF step.
