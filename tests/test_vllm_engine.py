"""The vLLM engine on the CPU, for real: statistics, exactness, batch invariance, caching, bad input.

One ``LLM`` serves the whole module (building one costs seconds). The reference is the
transformers engine in float64 on the float64 twin of the same tiny model (same seed),
so the tolerances measure vLLM's float32 arithmetic and the recorder, nothing else.
Skipped only when vLLM is not installed; CI installs the CPU build, so these run there.
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import sys

import numpy as np
import pytest

if importlib.util.find_spec("vllm") is None:
    pytest.skip("vLLM is not installed (scripts/install.sh installs the CPU build)", allow_module_level=True)

from presto.config import ConfigError
from presto.engines.base import SuffixRequest
from presto.engines.errors import EngineUnavailableError
from presto.models import ModelNotFoundError, make_tiny_model
from presto.prefetch.presto import PrefetchStepper
from presto.prefetch.traversal import BreadthFirst
from presto.samplers.chain import BlockSchedule, SequentialStepper, run_chain
from presto.samplers.powermh import PowerMH
from presto.samplers.randomness import ChainKey
from tests.conftest import run_cli

pytestmark = pytest.mark.slow

TOLERANCE = 1e-4
# Extra engine settings for another machine, e.g. on a GPU (scripts/gpu_check.sh):
# PRESTO_VLLM_TEST_OPTIONS='{"device": "cuda", "batch_invariant": true}'
SMALL_ENGINE = {
    "kv_cache_memory_bytes": 64 * 2**20,
    "max_model_len": 1024,
    **json.loads(os.environ.get("PRESTO_VLLM_TEST_OPTIONS", "{}")),
}


def on_cpu() -> bool:
    from vllm.platforms import current_platform

    return current_platform.is_cpu()


@pytest.fixture(scope="module")
def model_dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("tiny")
    f32 = make_tiny_model(root / "f32", dtype="float32", seed=1)
    return f32, make_tiny_model(root / "f64", dtype="float64", seed=1)


@pytest.fixture(scope="module")
def engine(model_dirs):
    from presto.engines.vllm import VLLMEngine

    engine = VLLMEngine(model_dirs[0], **SMALL_ENGINE)
    yield engine
    engine.close()


@pytest.fixture(scope="module")
def reference(model_dirs):
    from presto.engines.hf import HFEngine

    return HFEngine(model_dirs[1], dtype="float64")


@pytest.fixture(scope="module")
def prompt(engine, reference):
    messages = [{"role": "user", "content": "Write a function that adds two numbers."}]
    ids = engine.encode_prompt(messages)
    assert ids == reference.encode_prompt(messages)
    return ids


def reference_statistics(reference, request: SuffixRequest, tokens: np.ndarray) -> dict[str, np.ndarray]:
    """log p0, log q_τ, log q at extra temperatures and entropy of p0 from a float64 forward."""
    import torch

    ids = list(request.prefix) + tokens.tolist()
    with torch.no_grad():
        logits = reference.model(input_ids=torch.tensor([ids])).logits[0].double()
    rows = logits[len(request.prefix) - 1 : len(ids) - 1]
    picked = torch.arange(len(tokens)), torch.tensor(tokens)
    logp0 = torch.log_softmax(rows, -1)
    return {
        "logp0": logp0[picked].numpy(),
        "logq": torch.log_softmax(rows / request.temperature, -1)[picked].numpy(),
        "logq_extra": np.stack(
            [torch.log_softmax(rows / t, -1)[picked].numpy() for t in request.extra_temperatures], axis=1
        ),
        "entropy": (-(logp0.exp() * logp0).sum(-1)).numpy(),
    }


def mixed_requests(prompt: list[int]) -> list[SuffixRequest]:
    """Prefixes of one sequence (as in a PreSTO round), different lengths, temperatures and seeds."""
    sequence = (*prompt, *range(1000, 1040))
    cuts = [(len(prompt) + 3, 12, 0.25), (len(sequence), 4, 0.5), (len(prompt) + 20, 9, 1.0), (len(prompt), 15, 0.7)]
    return [SuffixRequest(sequence[:m], n, tau, 77 + m, (0.25, 0.5, 1.0)) for m, n, tau in cuts]


def assert_close_to_reference(reference, request, result):
    expected = reference_statistics(reference, request, result.tokens)
    for name, want in expected.items():
        got = getattr(result, name)
        assert got.dtype == np.float64 and got.shape == want.shape, name
        np.testing.assert_allclose(got, want, rtol=0, atol=TOLERANCE, err_msg=name)


def test_statistics_match_float64_transformers(engine, reference, prompt):
    requests = mixed_requests(prompt)
    results = engine.generate(requests)
    for request, result in zip(requests, results, strict=True):
        assert result.tokens.dtype == np.int64 and len(result.tokens) == request.num_new_tokens
        assert_close_to_reference(reference, request, result)
        if request.temperature == 1.0:
            np.testing.assert_array_equal(result.logq, result.logp0)
        # Rescoring under p0 from prompt logprobs: same log p0; entropy needs the exact path.
        logp0, entropy = engine.score(request.prefix, result.tokens)
        np.testing.assert_allclose(logp0, result.logp0, rtol=0, atol=TOLERANCE)
        assert np.isnan(entropy).all()


def test_exact_oracle_agrees_with_recorder_and_reference(engine, reference, prompt):
    requests = mixed_requests(prompt)[:2]
    fast = engine.generate(requests)
    engine.exact_logprobs = True
    try:
        exact = engine.generate(requests)
        logp0, entropy = engine.score(requests[0].prefix, fast[0].tokens)
    finally:
        engine.exact_logprobs = False
    for request, a, b in zip(requests, fast, exact, strict=True):
        np.testing.assert_array_equal(a.tokens, b.tokens)
        for name in ("logp0", "logq", "logq_extra", "entropy"):
            np.testing.assert_allclose(getattr(a, name), getattr(b, name), rtol=0, atol=TOLERANCE, err_msg=name)
        assert_close_to_reference(reference, request, b)
    expected = reference_statistics(reference, requests[0], fast[0].tokens)
    np.testing.assert_allclose(logp0, expected["logp0"], rtol=0, atol=TOLERANCE)
    np.testing.assert_allclose(entropy, expected["entropy"], rtol=0, atol=TOLERANCE)


def test_tokens_depend_on_seed_not_on_batch(engine, prompt):
    requests = mixed_requests(prompt)
    together = engine.generate(requests)
    for request, result in zip(requests, together, strict=True):
        (alone,) = engine.generate([request])
        np.testing.assert_array_equal(alone.tokens, result.tokens)
        if engine.batch_invariant:  # the CPU default, and gpu_check.sh's setting: the same bits
            for name in ("logp0", "logq", "logq_extra", "entropy"):
                np.testing.assert_array_equal(getattr(alone, name), getattr(result, name), err_msg=name)
        else:
            np.testing.assert_allclose(alone.logq, result.logq, rtol=0, atol=1e-5)
    shuffled = engine.generate(requests[::-1])[::-1]
    for a, b in zip(together, shuffled, strict=True):
        np.testing.assert_array_equal(a.tokens, b.tokens)
    base = SuffixRequest(tuple(prompt), 10, 1.0, 5)
    first, second = engine.generate([base, SuffixRequest(tuple(prompt), 10, 1.0, 6)])
    assert not np.array_equal(first.tokens, second.tokens)


def stopping(request: SuffixRequest) -> SuffixRequest:
    return SuffixRequest(
        request.prefix, request.num_new_tokens, request.temperature, request.seed, request.extra_temperatures, True
    )


def test_a_request_that_stops_at_eos_returns_the_full_answer_up_to_its_eos(engine, reference, prompt, monkeypatch):
    requests = mixed_requests(prompt)
    full = engine.generate(requests)
    # One more EOS id per answer (a token it holds at position 2), so every answer stops early;
    # the engine passes its EOS ids to vLLM as stop_token_ids.
    eos = engine.eos_token_ids | {int(f.tokens[2]) for f in full}
    monkeypatch.setattr(engine, "_eos", eos)
    lengths = [int(np.flatnonzero(np.isin(f.tokens, sorted(eos)))[0]) + 1 for f in full]
    assert max(lengths) <= 3
    before = engine.stats.generated_tokens
    stopped = engine.generate([stopping(r) for r in requests])
    assert engine.stats.generated_tokens - before == sum(lengths) < sum(r.num_new_tokens for r in requests)
    for request, f, s, length in zip(requests, full, stopped, lengths, strict=True):
        assert len(s.tokens) == length and int(s.tokens[-1]) in eos  # the EOS itself is the last token
        assert s.logq_extra.shape == (length, len(request.extra_temperatures))
        np.testing.assert_array_equal(s.tokens, f.tokens[:length])
        for name in ("logp0", "logq", "logq_extra", "entropy"):
            if engine.batch_invariant:  # the recorder's rows line up with the tokens, bit for bit
                # (on a GPU its async scheduling records a stopped request once more: not kept)
                np.testing.assert_array_equal(getattr(s, name), getattr(f, name)[:length], err_msg=name)
            else:
                np.testing.assert_allclose(getattr(s, name), getattr(f, name)[:length], atol=1e-5, err_msg=name)
        assert_close_to_reference(reference, request, s)
    # Requests without stop_at_eos (the MH samplers') still run past EOS, in the same call.
    again = engine.generate([requests[0], stopping(requests[1])])
    np.testing.assert_array_equal(again[0].tokens, full[0].tokens)
    assert len(again[1].tokens) == lengths[1]
    # The exact oracle's per-token logprobs line up too.
    engine.exact_logprobs = True
    try:
        (exact,) = engine.generate([stopping(requests[0])])
    finally:
        engine.exact_logprobs = False
    np.testing.assert_array_equal(exact.tokens, stopped[0].tokens)
    np.testing.assert_allclose(exact.logq, stopped[0].logq, rtol=0, atol=TOLERANCE)


def test_presto_chains_equal_sequential_chains_and_hit_the_prefix_cache(engine, prompt):
    kernel = PowerMH(alpha=4.0, tau=0.25)
    schedule = BlockSchedule(12, 6, 6)
    presto_cached = presto_missed = 0.0
    for seed in range(2):
        key = ChainKey(seed, 0, 0)
        reference, reference_trace = run_chain(kernel, engine, SequentialStepper(), prompt, key, schedule)
        for n_pf in (3, 20):
            before = engine.metrics()
            state, trace = run_chain(kernel, engine, PrefetchStepper(BreadthFirst(), n_pf), prompt, key, schedule)
            after = engine.metrics()
            presto_cached += after["prefix_cached_tokens"] - before["prefix_cached_tokens"]
            presto_missed += after["prefix_missed_tokens"] - before["prefix_missed_tokens"]
            np.testing.assert_array_equal(state.tokens, reference.tokens)
            assert trace.accepts == reference_trace.accepts
            assert trace.log_accepts == reference_trace.log_accepts  # the same path, bit for bit
    assert presto_cached / (presto_cached + presto_missed) > 0.5
    metrics = engine.metrics()
    assert 0.5 < metrics["prefix_cache_hit_rate"] <= 1.0
    assert 0.0 < metrics["peak_kv_usage"] <= 1.0
    assert metrics["prefix_cached_tokens_per_call"] > 0


@pytest.mark.parametrize(
    ("sampler", "traversal"),
    [("entropycut", "bfs"), ("multitry", "bfs"), ("powermh", "predictive"), ("entropycut", "predictive"),
     ("multitry", "predictive")],
)  # fmt: skip
def test_every_sampler_and_traversal_gives_the_sequential_chain(engine, prompt, sampler, traversal):
    from presto.prefetch.predictive import PredictiveTraversal
    from presto.samplers.entropycut import EntropyCut
    from presto.samplers.multitry import MultiTryMH

    kernel = {"powermh": PowerMH, "entropycut": EntropyCut, "multitry": MultiTryMH}[sampler](alpha=4.0, tau=0.25)
    schedule = BlockSchedule(12, 6, 6)
    key = ChainKey(0, 0, 0)
    reference, reference_trace = run_chain(kernel, engine, SequentialStepper(), prompt, key, schedule)
    for n_pf in (3, 20):
        rule = BreadthFirst() if traversal == "bfs" else PredictiveTraversal.from_options({}, sampler)
        state, trace = run_chain(kernel, engine, PrefetchStepper(rule, n_pf), prompt, key, schedule)
        np.testing.assert_array_equal(state.tokens, reference.tokens)
        assert trace.accepts == reference_trace.accepts
        assert trace.log_accepts == reference_trace.log_accepts  # the same path, bit for bit


def test_reset_prefix_cache_makes_the_next_call_start_cold(engine, prompt):
    request = SuffixRequest(tuple(prompt), 4, 1.0, 11)

    def cached_tokens_of_one_call() -> float:
        before = engine.metrics()["prefix_cached_tokens"]
        engine.generate([request])
        return engine.metrics()["prefix_cached_tokens"] - before

    cached_tokens_of_one_call()
    assert cached_tokens_of_one_call() > 0  # the prompt's blocks are cached after a call
    assert engine.reset_prefix_cache()
    assert cached_tokens_of_one_call() == 0


def test_too_long_request_is_one_clear_line(engine, prompt):
    with pytest.raises(ConfigError, match=rf"engine\.max_model_len={SMALL_ENGINE['max_model_len']}"):
        engine.generate([SuffixRequest(tuple(prompt) * 30, 64, 1.0, 0)])
    with pytest.raises(ValueError, match="non-empty prefix"):
        engine.generate([SuffixRequest((), 4, 1.0, 0)])
    calls = engine.stats.calls
    bad = engine.vocab_size
    with pytest.raises(ValueError, match=rf"token id {bad}, outside the vocabulary \[0, {bad}\)"):
        engine.generate([SuffixRequest(tuple(prompt), 4, 1.0, 0), SuffixRequest((*prompt, bad), 4, 1.0, 0)])
    assert engine.stats.calls == calls  # refused before either request reached vLLM
    assert len(engine.generate([SuffixRequest(tuple(prompt), 2, 1.0, 0)])[0].tokens) == 2  # and it still serves
    with pytest.raises(ValueError, match=r"rescoring \(prefix \+ tokens\) holds token id -1"):
        engine.score(tuple(prompt), [3, -1])


def test_a_temperature_vllm_would_raise_to_001_is_refused(engine, prompt):
    # SamplingParams turns 0.005 into 0.01 with only a log line; log q would then describe 0.005.
    calls = engine.stats.calls
    with pytest.raises(ConfigError, match=r"samples at temperatures >= 0\.01, got 0\.005"):
        engine.generate([SuffixRequest(tuple(prompt), 4, 0.005, 0)])
    with pytest.raises(ConfigError, match=r"got 0\.001"):
        engine.generate([SuffixRequest(tuple(prompt), 4, 0.5, 0, (0.001,))])
    assert engine.stats.calls == calls
    assert engine.max_sequence_tokens() == SMALL_ENGINE["max_model_len"]


def test_kv_cache_too_small_for_max_model_len_is_one_clear_line(model_dirs, engine):
    from presto.engines.vllm import VLLMEngine

    with pytest.raises(ConfigError) as info:
        VLLMEngine(model_dirs[0], **{**SMALL_ENGINE, "kv_cache_memory_bytes": 256 * 2**10, "max_model_len": 4096})
    message = str(info.value)
    assert "\n" not in message
    assert "engine.kv_cache_memory_bytes=262144" in message and "engine.max_model_len=4096" in message


def test_bad_model_folder_is_one_clear_line(tmp_path, engine):
    from presto.engines.vllm import VLLMEngine

    (tmp_path / "config.json").write_text(json.dumps({"hello": "world"}))
    with pytest.raises(ModelNotFoundError, match=r"model\.path"):
        VLLMEngine(tmp_path)
    with pytest.raises(ModelNotFoundError, match=r"model\.path"):
        VLLMEngine(tmp_path / "missing")


def test_settings_are_checked_before_vllm_starts(model_dirs, engine):
    from presto.engines.vllm import VLLMEngine

    with pytest.raises(ConfigError, match=r"engine\.nonsense"):
        VLLMEngine(model_dirs[0], nonsense=1)
    with pytest.raises(ConfigError, match=r"engine\.dtype"):
        VLLMEngine(model_dirs[0], dtype="float64")
    with pytest.raises(ConfigError, match=r"engine\.batch_invariant must be true, false or auto"):
        VLLMEngine(model_dirs[0], batch_invariant="yes")
    with pytest.raises(ConfigError, match=r"engine\.max_num_batched_tokens"):
        VLLMEngine(model_dirs[0], max_num_batched_tokens=512, max_model_len=1024)
    other = "cuda" if on_cpu() else "cpu"
    with pytest.raises(EngineUnavailableError, match=rf"engine\.device={other}"):
        VLLMEngine(model_dirs[0], device=other)
    with pytest.raises(ConfigError, match="enable_chunked_prefill"):  # any platform (tests/test_gpu_paths.py)
        VLLMEngine(model_dirs[0], enable_chunked_prefill=True)
    with pytest.raises(ConfigError, match=r"engine\.enforce_eager must be true or false, got 'no'"):
        VLLMEngine(model_dirs[0], enforce_eager="no")  # bool("no") would be true
    with pytest.raises(ConfigError, match=r"engine\.gpu_memory_utilization must be a number in \(0, 1\]"):
        VLLMEngine(model_dirs[0], gpu_memory_utilization="abc")
    if on_cpu():  # vLLM's CPU attention refused it only after loading the model, as "No common block size"
        with pytest.raises(ConfigError, match=r"engine\.block_size must be a multiple of 32 on the CPU .*, got 16"):
            VLLMEngine(model_dirs[0], block_size=16)


@pytest.mark.parametrize(
    ("kv_bytes", "message"),
    [
        (1, r"engine\.kv_cache_memory_bytes=1 is too small for any KV-cache block of 32 tokens .*; raise it"),
        (2**50, r"engine\.kv_cache_memory_bytes=1125899906842624 is more than the memory free for it \([\d.]+ of"),
    ],
)
def test_a_kv_cache_size_vllm_refuses_on_the_cpu_names_the_setting(model_dirs, engine, kv_bytes, message):
    """Was: 'raise engine.gpu_memory_utilization or set engine.kv_cache_memory_bytes' (it was set), and
    vLLM's own '--kv-cache-memory-bytes' flag for a size above the free memory."""
    if not on_cpu():
        pytest.skip("the CPU backend's KV-cache sizing")
    from presto.engines.vllm import VLLMEngine

    with pytest.raises(ConfigError, match=message) as info:
        VLLMEngine(model_dirs[0], **{**SMALL_ENGINE, "kv_cache_memory_bytes": kv_bytes})
    assert "\n" not in str(info.value) and "--kv-cache" not in str(info.value)


SECOND_ENGINE = """
import json, sys, warnings
import torch  # first, as the predictor or a script imports it
from presto.engines.hf import HFEngine
from presto.engines.vllm import VLLMEngine

model, options = sys.argv[1], json.loads(sys.argv[2])
seen = []
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    first = VLLMEngine(model, threads=1, batch_invariant=True, **options)
    seen.append(torch.get_num_threads())
    first.close()
    second = VLLMEngine(model, threads=2, batch_invariant=False, **options)
    seen.append(torch.get_num_threads())
    second.close()
    HFEngine(model, threads=1)
    seen.append(torch.get_num_threads())
print(json.dumps({"threads": seen, "warnings": [str(w.message) for w in caught if "presto" in w.filename]}))
"""


def test_a_second_engine_in_one_process_runs_its_own_threads_without_false_warnings(model_dirs, tmp_path):
    """vLLM's CPU worker makes torch.set_num_threads a no-op once its engine starts: a second engine
    (vLLM or transformers) kept the first one's count. The closed first engine counted as open for the
    batch-invariance warning, and torch imported first drew a warning though the count was then set."""
    if not on_cpu():
        pytest.skip("the CPU worker's thread handling")
    import subprocess

    from tests.conftest import PROJECT_ROOT

    env = {**os.environ, "PYTHONPATH": str(PROJECT_ROOT / "src")}
    env.pop("OMP_NUM_THREADS", None)
    done = subprocess.run(
        [sys.executable, "-c", SECOND_ENGINE, str(model_dirs[0]), json.dumps(SMALL_ENGINE)],
        capture_output=True,
        text=True,
        timeout=400,
        env=env,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["threads"] == [1, 2, 1]
    assert result["warnings"] == []


def test_missing_vllm_is_engine_unavailable(model_dirs, monkeypatch):
    from presto.engines import build_engine

    monkeypatch.setitem(sys.modules, "vllm", None)  # `import vllm` now raises ImportError
    with pytest.raises(EngineUnavailableError, match=r"scripts/install\.sh"):
        build_engine({"name": "vllm"}, {"path": str(model_dirs[0])})


def test_cli_run_reports_cache_metrics(model_dirs, tmp_path):
    """End to end: `engine=vllm` through Hydra, PreSTO-BFS, metrics in summary.json."""
    run_dir = tmp_path / "run"
    result = run_cli(
        "engine=vllm",
        f"model.path={model_dirs[0]}",
        *(f"engine.{key}={json.dumps(value)}" for key, value in SMALL_ENGINE.items()),
        "dataset=humaneval",
        "dataset.num_prompts=1",
        "sampler.max_new_tokens=8",
        "sampler.block_size=8",
        "sampler.steps=6",
        "traversal=bfs",
        "budget.n_pf=5",
        "run.progress=false",
        f"hydra.run.dir={run_dir}",
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["prefix_cache_hit_rate"] > 0.5
    assert 0 < summary["peak_kv_usage"] <= 1
    assert summary["transitions_per_call"] > 1


def test_a_call_interrupted_midway_leaves_the_engine_usable(engine, prompt, monkeypatch):
    """Ctrl-C inside a call (a notebook user, say) must not leave its requests in vLLM: the
    next call would get their outputs first, misaligned with its own requests."""
    requests = [SuffixRequest(tuple(prompt), 12, 1.0, seed) for seed in (1, 2, 3)]
    expected = engine.generate(requests)
    recorder = engine._recorder
    steps = {"n": 0}
    original = type(recorder).apply

    def interrupted(self, logits):
        steps["n"] += 1
        if steps["n"] == 4:
            raise KeyboardInterrupt
        return original(self, logits)

    monkeypatch.setattr(type(recorder), "apply", interrupted)
    with pytest.raises(KeyboardInterrupt):
        engine.generate(requests)
    monkeypatch.setattr(type(recorder), "apply", original)

    def hung(signum, frame):
        raise TimeoutError("the call after an interrupted one hangs")

    previous = signal.signal(signal.SIGALRM, hung)  # before the fix it waited forever
    signal.alarm(120)
    try:
        again = engine.generate(requests)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    for a, b in zip(expected, again, strict=True):
        np.testing.assert_array_equal(a.tokens, b.tokens)
        np.testing.assert_array_equal(a.logq, b.logq)
    assert recorder.records == {} and not engine._llm.llm_engine.has_unfinished_requests()


# Keep this test last in the file: it closes the module's engine (closing again at teardown is fine).
def test_a_closed_engine_is_one_clear_error(engine, prompt, capsys):
    """After close(), a call failed with "'NoneType' object has no attribute 'generate'" and a
    warning that the interrupted call's requests could not be dropped; the hf engine says it is closed."""
    engine.close()
    engine.close()  # twice is fine
    with pytest.raises(RuntimeError, match="this vllm engine is closed"):
        engine.generate([SuffixRequest(tuple(prompt), 4, 1.0, 0)])
    assert "could not drop" not in capsys.readouterr().err
    assert engine.metrics() == engine._final_metrics  # the figures read at close stay readable
    if on_cpu():  # a closed engine is not one a new engine's batch-invariance setting would change
        import warnings

        from presto.engines import vllm_batch_invariance

        class Later:  # stands in for the next engine (claim only keys it)
            pass

        with warnings.catch_warnings():
            warnings.simplefilter("error")
            vllm_batch_invariance.claim(Later(), not engine.batch_invariant, "cpu")
