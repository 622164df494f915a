"""What the vLLM engine does differently on a GPU, checked without one where it can be.

vLLM's CUDA build differs from the CPU build the other tests run on in ways that decide
whether the engine starts and whether its statistics line up with its tokens: Model
Runner V2 (the GPU default, which refuses V1-interface logits processors), chunked
prefill (allowed on a GPU, where vLLM samples and discards a token after every partial
prefill), async scheduling, KV-cache sizing by ``gpu_memory_utilization``, and CUDA
reductions in the logits recorder. The last test needs a GPU (``-m gpu``) and is skipped
elsewhere; the others run here.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

if importlib.util.find_spec("vllm") is None:
    pytest.skip("vLLM is not installed (scripts/install.sh installs the CPU build)", allow_module_level=True)

from presto.config import ConfigError
from presto.engines.base import SuffixRequest

ROOT = Path(__file__).resolve().parents[1]


def test_the_engine_pins_vllms_v1_model_runner_which_a_gpu_would_not_pick(monkeypatch):
    import vllm.config.vllm as vllm_config
    from vllm import envs
    from vllm.config import VllmConfig

    import presto.engines.vllm  # noqa: F401  (sets the environment on import)

    assert os.environ["VLLM_USE_V2_MODEL_RUNNER"] == "0"
    assert envs.VLLM_USE_V2_MODEL_RUNNER is False
    # What vLLM decides on a GPU machine: Triton is there and nothing else rules V2 out.
    monkeypatch.setattr(vllm_config, "HAS_TRITON", True)
    gpu_like = SimpleNamespace(
        attention_config=SimpleNamespace(hisparse_config=None),
        watermark_config=None,
        _get_v2_model_runner_unsupported_features=lambda: [],
    )
    assert VllmConfig.use_v2_model_runner.fget(gpu_like) is False


def test_the_v2_runner_refuses_the_recorder_and_the_v1_runner_takes_it():
    """Why the pin: Model Runner V2 rejects a V1-interface processor when the engine starts."""
    from vllm import SamplingParams
    from vllm.v1.sample.logits_processor import validate_logits_processors_parameters
    from vllm.v1.worker.gpu.sample.logits_processor.loader import build_custom_logits_processors_params_validator

    from presto.engines.vllm_recorder import KEY, LogZRecorder

    with pytest.raises(ValueError, match="LogZRecorder is not a subclass"):
        build_custom_logits_processors_params_validator([LogZRecorder])
    validate_logits_processors_parameters([LogZRecorder], SamplingParams(seed=1, extra_args={KEY: "k"}))


def test_a_users_v2_runner_setting_is_overridden_with_a_warning():
    code = (
        "import os, warnings\n"
        "warnings.simplefilter('always')\n"
        "with warnings.catch_warnings(record=True) as caught:\n"
        "    import presto.engines.vllm\n"
        "print(os.environ['VLLM_USE_V2_MODEL_RUNNER'])\n"
        "print(any('VLLM_USE_V2_MODEL_RUNNER' in str(w.message) for w in caught))\n"
    )
    env = {**os.environ, "VLLM_USE_V2_MODEL_RUNNER": "1", "PYTHONPATH": str(ROOT / "src")}
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.split() == ["0", "True"]


def test_chunked_prefill_and_several_gpus_are_refused_before_vllm_starts(tmp_path):
    """Checked first, on any platform: no model is looked at and no vLLM engine is built."""
    from presto.engines.vllm import VLLMEngine

    with pytest.raises(ConfigError, match=r"engine\.enable_chunked_prefill=true is not supported"):
        VLLMEngine(tmp_path / "missing", enable_chunked_prefill=True)
    with pytest.raises(ConfigError, match=r"engine\.tensor_parallel_size=2 is not supported"):
        VLLMEngine(tmp_path / "missing", tensor_parallel_size=2)
    with pytest.raises(ConfigError, match=r"engine\.max_num_batched_tokens=512 must be >= engine\.max_model_len"):
        VLLMEngine(tmp_path / "missing", max_num_batched_tokens=512, max_model_len=1024)


def bare_engine(**attributes):
    from presto.engines.vllm import VLLMEngine

    engine = VLLMEngine.__new__(VLLMEngine)  # the methods under test read only these
    defaults = {
        "exact_logprobs": False,
        "_eos": {2},
        "max_model_len": 4096,
        "block_size": 32,
        "kv_cache_blocks": 10,
        "kv_cache_memory_bytes": None,
        "gpu_memory_utilization": 0.85,
        "model_dir": Path("/models/m"),
    }
    for name, value in {**defaults, **attributes}.items():
        setattr(engine, name, value)
    return engine


def completion(tokens):
    logprobs = [{t: SimpleNamespace(logprob=-1.0)} for t in tokens]
    return SimpleNamespace(token_ids=list(tokens), logprobs=logprobs)


def record(rows, temperatures=(0.5,)):
    from presto.engines.vllm_recorder import RowRecord

    return RowRecord(temperatures, [3.0] * rows, [[4.0] * len(temperatures)] * rows, [1.0] * rows)


def test_the_recorder_may_see_one_extra_row_of_a_stopped_request_and_no_more():
    """Async scheduling (a GPU's default) can decode a stopped request once more; anything else is an error."""
    engine = bare_engine()
    stop = SuffixRequest((1,), 8, 0.5, 0, stop_at_eos=True)
    tokens = [5, 7, 2]  # stopped at EOS 2
    assert len(engine._result(stop, completion(tokens), record(3)).tokens) == 3
    assert len(engine._result(stop, completion(tokens), record(4)).tokens) == 3
    with pytest.raises(RuntimeError, match="recorder saw 5 rows for 3 returned tokens"):
        engine._result(stop, completion(tokens), record(5))
    full = SuffixRequest((1,), 3, 0.5, 0)
    with pytest.raises(RuntimeError, match="recorder saw 4 rows"):
        engine._result(full, completion([5, 7, 9]), record(4))


def test_a_cache_sized_by_gpu_memory_utilization_is_grown_through_it():
    engine = bare_engine()
    vllm_text = (
        "To serve at least one request with the model's max seq len (4096), (0.5 GiB KV cache is needed, which is "
        "larger than the available KV cache memory (0.1 GiB). Based on the available memory, the estimated maximum "
        "model length is 800. Try increasing `gpu_memory_utilization` or decreasing `max_model_len`"
    )
    message = str(engine._startup_error(ValueError(vllm_text)))
    assert "engine.gpu_memory_utilization=0.85" in message and "about 800 tokens" in message
    assert "kv_cache_memory_bytes=None" not in message
    with pytest.raises(ConfigError, match=r"raise engine\.gpu_memory_utilization=0\.85") as info:
        engine.check_fits(1000, "a request")
    assert "None" not in str(info.value)
    fixed = bare_engine(kv_cache_memory_bytes=2**30)
    assert "raise engine.kv_cache_memory_bytes=1073741824" in str(fixed._startup_error(ValueError(vllm_text)))
    busy = engine._startup_error(
        ValueError(
            "Free memory on device cuda:0 (20.1/139.8 GiB) on startup is less than desired GPU memory utilization "
            "(0.85, 118.8 GiB). Decrease GPU memory utilization or reduce GPU memory used by other processes."
        )
    )
    assert isinstance(busy, ConfigError) and "lower engine.gpu_memory_utilization" in str(busy)


def test_padded_chunks_start_every_row_on_an_aligned_boundary(monkeypatch):
    """A vocabulary that is not a multiple of 4 would leave odd rows of a float64 chunk misaligned on a GPU."""
    from presto.engines import vllm_recorder

    vocab = 50257  # GPT-2's
    logits = torch.randn(5, vocab, generator=torch.Generator().manual_seed(0)) * 4
    widths = []
    original = vllm_recorder.statistics_table

    def spy(block, temperatures):
        widths.append(block.shape[-1])
        return original(block, temperatures)

    monkeypatch.setattr(vllm_recorder, "statistics_table", spy)
    temperatures = (0.25, 0.3, 1000.0)  # a high one: the -inf padding must add exact zeros there too
    padded = vllm_recorder.chunked_statistics(logits, [0, 3, 4], temperatures, 4, pad=True)
    assert widths and all(w % vllm_recorder.PAD_COLUMNS == 0 for w in widths)
    widths.clear()
    plain = vllm_recorder.chunked_statistics(logits, [0, 3, 4], temperatures, 4, pad=False)
    assert widths == [vocab]  # the CPU path is unchanged
    for got, want in zip(padded, plain, strict=True):
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=0, atol=1e-12)


@pytest.mark.gpu
@pytest.mark.parametrize("vocab", [49152, 50257])
def test_recorder_statistics_on_a_gpu_are_the_same_bits_in_any_batch(vocab):
    """The recorder's CUDA reductions: a row's bits must not depend on its batch or its place in it."""
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    from presto.engines.vllm_recorder import ACCELERATOR_CHUNK_ROWS, LogZRecorder, chunked_statistics, row_statistics

    recorder = LogZRecorder(None, torch.device("cuda"), False)
    assert (recorder.chunk_rows, recorder.pad_chunks) == (ACCELERATOR_CHUNK_ROWS, True)
    temperatures = (0.25, 0.5, 1.0, 0.3)
    cpu = torch.randn(45, vocab, generator=torch.Generator().manual_seed(1)) * 4
    cpu[2, :100] = float("-inf")
    logits = cpu.cuda()
    rows = list(range(len(logits)))
    together = chunked_statistics(logits, rows, temperatures, ACCELERATOR_CHUNK_ROWS, True)
    for subset in ([7], [2], [0, 7], [7, 9, 40], rows[5:], rows[1::2]):
        part = chunked_statistics(logits, subset, temperatures, ACCELERATOR_CHUNK_ROWS, True)
        for got, whole in zip(part, together, strict=True):
            assert got == [whole[i] for i in subset], subset
    reference = row_statistics(cpu, temperatures)
    for got, want in zip(together, reference, strict=True):
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=0, atol=1e-10)


@pytest.mark.gpu
def test_the_recorder_never_waits_for_the_gpu_within_a_step():
    """A host sync in ``apply`` stalls every decode step; CUDA's sync debug mode turns one into an error."""
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    from presto.engines.vllm_recorder import KEY, TEMPERATURES, LogZRecorder, row_statistics

    recorder = LogZRecorder(None, torch.device("cuda"), False)
    # Two temperature groups interleaved in the batch, as MultiTryMH's: not consecutive rows.
    params = [
        SimpleNamespace(extra_args={KEY: f"r{i}", TEMPERATURES: (0.25, 0.5, 1.0) if i % 2 else (0.25, 0.5)})
        for i in range(40)
    ]
    recorder.update_state(
        SimpleNamespace(removed=[], moved=[], added=[(i, p, None, None) for i, p in enumerate(params)])
    )
    cpu = torch.randn(40, 49152, generator=torch.Generator().manual_seed(2)) * 4
    logits = cpu.cuda()
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for _ in range(3):
            recorder.apply(logits)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    for key, row, temperatures in (("r7", 7, (0.25, 0.5, 1.0)), ("r8", 8, (0.25, 0.5))):
        record = recorder.pop(key)
        lse1, _, lse_t = row_statistics(cpu[row : row + 1], temperatures)
        assert len(record.lse1) == 3
        np.testing.assert_allclose(record.lse1, lse1 * 3, rtol=0, atol=1e-10)
        np.testing.assert_allclose(record.lse_t, lse_t * 3, rtol=0, atol=1e-10)


def test_kv_cache_auto_is_2_gib_on_the_cpu_and_left_to_gpu_memory_utilization_on_a_gpu():
    from presto.engines.vllm import _DEFAULTS, CPU_KV_CACHE_BYTES, VLLMEngine, kv_cache_bytes

    assert _DEFAULTS["kv_cache_memory_bytes"] == "auto" and CPU_KV_CACHE_BYTES == 2 * 2**30
    assert kv_cache_bytes("auto", "cpu") == 2 * 2**30
    assert kv_cache_bytes("auto", "cuda") is None
    assert kv_cache_bytes(None, "cpu") is None and kv_cache_bytes(None, "cuda") is None  # a user's null is kept
    assert kv_cache_bytes(2**30, "cuda") == 2**30 and kv_cache_bytes(2**30, "cpu") == 2**30
    VLLMEngine._check_options({**_DEFAULTS, "kv_cache_memory_bytes": "auto"})
    with pytest.raises(ConfigError, match=r"engine\.kv_cache_memory_bytes must be an integer >= 1, auto or null"):
        VLLMEngine._check_options({**_DEFAULTS, "kv_cache_memory_bytes": "big"})


def test_float32_pins_tritons_dots_to_ieee_and_a_users_choice_wins():
    """Triton's float32 tl.dot defaults to TF32 on NVIDIA GPUs (vLLM's Triton attention and batch-invariant matmuls)."""
    from presto.engines.vllm import pin_float32_dots

    environ: dict[str, str] = {}
    pin_float32_dots("bfloat16", environ)
    assert environ == {}  # only float32 operands have a TF32 shortcut to refuse
    pin_float32_dots("float32", environ)
    assert environ == {"TRITON_F32_DEFAULT": "ieee"}
    users = {"TRITON_F32_DEFAULT": "tf32"}
    pin_float32_dots("float32", users)
    assert users == {"TRITON_F32_DEFAULT": "tf32"}


def test_mixture_of_experts_models_are_reported_not_batch_invariant():
    """vLLM's batch-invariant kernels leave the fused-MoE experts out (vllm-project/vllm#57016)."""
    from vllm.config import ModelConfig

    from presto.engines.vllm import VLLMEngine, is_mixture_of_experts

    assert isinstance(getattr(ModelConfig, "is_moe", None), property)  # what is_mixture_of_experts reads
    assert is_mixture_of_experts(SimpleNamespace(is_moe=True))
    assert not is_mixture_of_experts(SimpleNamespace(is_moe=False))
    assert not is_mixture_of_experts(object())
    for platform in ("cpu", "cuda"):
        engine = VLLMEngine.__new__(VLLMEngine)
        engine.platform, engine.batch_invariant = platform, True
        assert engine.batch_variance() is None
        engine.is_moe = True
        note = engine.batch_variance()
        assert note is not None and "mixture-of-experts" in note and "even with engine.batch_invariant=true" in note
        engine.batch_invariant = False
        assert "is exact" not in engine.batch_variance()  # invariance would not make it exact either


@pytest.mark.parametrize(("platform", "dtype"), [("cpu", "float32"), ("cuda", "float32"), ("cuda", "bfloat16")])
def test_the_engine_resolves_its_gpu_settings_before_vllm_starts(tmp_path, monkeypatch, platform, dtype):
    """The constructor on a faked platform, with a fake LLM: what vLLM would be built with, and what is read back."""
    import vllm.platforms

    import presto.engines.vllm_recorder  # noqa: F401  (vLLM's own modules import with the real platform first)
    from presto.engines import vllm as engine_module
    from presto.engines import vllm_batch_invariance

    (tmp_path / "config.json").write_text("{}")
    (tmp_path / "model.safetensors").write_bytes(b"")
    fake_platform = SimpleNamespace(is_cpu=lambda: platform == "cpu", is_cuda=lambda: platform == "cuda")
    monkeypatch.setattr(vllm.platforms, "current_platform", fake_platform)
    monkeypatch.setattr(engine_module, "_set_threads", lambda threads: 1)
    monkeypatch.setattr(vllm_batch_invariance, "configure", lambda enabled, platform: None)
    monkeypatch.setattr(vllm_batch_invariance, "claim", lambda engine, enabled, platform: None)
    monkeypatch.setenv("TRITON_F32_DEFAULT", "unset")  # recorded, so the engine's own setting is undone after
    monkeypatch.delenv("TRITON_F32_DEFAULT")
    built = {}

    def build(self, llm_kwargs):
        built.update(llm_kwargs, triton=os.environ.get("TRITON_F32_DEFAULT"))
        return SimpleNamespace(llm_engine=SimpleNamespace(model_config=SimpleNamespace(is_moe=True)))

    cls = engine_module.VLLMEngine
    monkeypatch.setattr(cls, "_build_llm", build)
    for name in ("_attach", "_load_tokenizer", "_warm_up"):
        monkeypatch.setattr(cls, name, lambda self, *args: None)
    monkeypatch.setattr(cls, "_read_counters", lambda self: {})
    engine = cls(tmp_path, dtype=dtype)
    if platform == "cpu":
        assert built["kv_cache_memory_bytes"] == 2 * 2**30 and engine.kv_cache_memory_bytes == 2 * 2**30
    else:
        assert "kv_cache_memory_bytes" not in built and engine.kv_cache_memory_bytes is None
        assert "engine.gpu_memory_utilization" in engine._kv_cache_advice()
    assert built["triton"] == ("ieee" if dtype == "float32" else None)
    assert engine.is_moe and "mixture-of-experts" in engine.batch_variance()
    explicit = cls(tmp_path, dtype=dtype, kv_cache_memory_bytes=2**29)
    assert built["kv_cache_memory_bytes"] == 2**29 and explicit.kv_cache_memory_bytes == 2**29
    engine._llm = explicit._llm = None  # nothing to shut down
