"""Tests that kill the mutants a hand mutation review of the vLLM engine (engines/vllm.py, with
engines/chat_text.py and engines/token_sampling.py) found surviving the existing tests.

None of them starts vLLM: the engine's settings, its environment, its error lines, the
``SamplingParams`` it builds for each request and what it makes of vLLM's outputs are checked
with vLLM's ``LLM`` (and its logits recorder) faked, on an engine built through its real
constructor or made bare with ``__new__``. They check what the module docstrings, the error
lines and conf/engine/vllm.yaml state: ``ignore_eos`` always on and each request's own seed,
the defaults of the config file, the KV-cache and context limits, the statistics of a stopped
request cut to its tokens, and the cache figures of :meth:`VLLMEngine.metrics`.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

if importlib.util.find_spec("vllm") is None:
    pytest.skip("vLLM is not installed (scripts/install.sh installs the CPU build)", allow_module_level=True)

from presto.config import ConfigError
from presto.engines import vllm as engine_module
from presto.engines.base import CallStats, SuffixRequest
from presto.engines.chat_text import ChatText, eos_ids
from presto.engines.errors import EngineUnavailableError
from presto.engines.vllm import VLLMEngine
from presto.models import ModelNotFoundError

ROOT = Path(__file__).resolve().parents[1]
COUNTERS = ("vllm:prefix_cache_queries", "vllm:prefix_cache_hits")


# --- helpers -----------------------------------------------------------------------------------


def bare_engine(**attributes):
    """A VLLMEngine made without a model: the methods under test read only these attributes."""
    engine = VLLMEngine.__new__(VLLMEngine)
    defaults = {
        "stats": CallStats(),
        "exact_logprobs": False,
        "_eos": frozenset({2}),
        "vocab_size": 100,
        "max_model_len": 256,
        "block_size": 32,
        "kv_cache_blocks": 8,
        "kv_cache_memory_bytes": 2**20,
        "gpu_memory_utilization": 0.9,
        "model_dir": Path("/models/m"),
        "platform": "cpu",
        "_prefix": "presto-test",
        "_serial": 0,
        "_peak_kv_usage": 0.0,
        "_final_metrics": None,
        "_counters_start": dict.fromkeys(COUNTERS, 0.0),
    }
    for name, value in {**defaults, **attributes}.items():
        setattr(engine, name, value)
    return engine


class FakeRecorder:
    """The logits recorder's side of a call: one row per generated token, keyed by the request's key."""

    def __init__(self) -> None:
        self.records: dict[str, object] = {}
        self.peak_usage = 0.0

    def record(self, key: str, temperatures: tuple[float, ...], rows: int, lse1: float = 3.0) -> None:
        from presto.engines.vllm_recorder import RowRecord

        record = self.records.setdefault(key, RowRecord(temperatures))
        for _ in range(rows):
            record.lse1.append(lse1)
            record.lse_t.append([lse1 + 0.5 + 1e-9 * i for i in range(len(temperatures))])
            record.entropy.append(1.5)

    def pop(self, key: str):
        return self.records.pop(key, None)


class FakeLLM:
    """vLLM's ``LLM.generate``: every request gets ``max_tokens`` copies of token 5 at log p0 = -1."""

    def __init__(self, recorder: FakeRecorder, peaks=(), fail: bool = False) -> None:
        self.recorder, self.peaks, self.fail = recorder, list(peaks), fail
        self.params: list = []
        self.aborted: list = []
        self.llm_engine = SimpleNamespace(
            output_processor=SimpleNamespace(request_states={}),
            abort_request=lambda ids, internal: self.aborted.append((list(ids), internal)),
        )

    def generate(self, prompts, params, use_tqdm=False):
        from presto.engines.vllm_recorder import KEY, TEMPERATURES

        self.params.append(params)
        outputs = []
        for prompt, p in zip(prompts, params, strict=True):
            self.recorder.record(p.extra_args[KEY], p.extra_args[TEMPERATURES], p.max_tokens)
            self.llm_engine.output_processor.request_states[p.extra_args[KEY]] = prompt
            tokens = [5] * p.max_tokens
            logprobs = [{5: SimpleNamespace(logprob=-1.0)} for _ in tokens]
            outputs.append(SimpleNamespace(outputs=[SimpleNamespace(token_ids=tokens, logprobs=logprobs)]))
        if self.peaks:
            self.recorder.peak_usage = max(self.recorder.peak_usage, self.peaks.pop(0))
        if self.fail:
            raise KeyboardInterrupt
        self.llm_engine.output_processor.request_states.clear()
        return outputs

    def get_metrics(self):
        return []


def served_engine(**attributes):
    recorder = FakeRecorder()
    engine = bare_engine(_recorder=recorder, **attributes)
    engine._llm = FakeLLM(recorder)
    return engine


def completion(tokens):
    return SimpleNamespace(token_ids=list(tokens), logprobs=[{int(t): SimpleNamespace(logprob=-1.0)} for t in tokens])


def row_record(rows, temperatures=(0.5,)):
    from presto.engines.vllm_recorder import RowRecord

    return RowRecord(
        temperatures,
        [3.0 + i for i in range(rows)],
        [[4.0 + i] * len(temperatures) for i in range(rows)],
        [1.0 + i for i in range(rows)],
    )


@pytest.fixture
def fake_vllm(tmp_path, monkeypatch):
    """VLLMEngine's real constructor on a faked platform with a faked ``LLM``; returns (build, seen)."""
    import vllm.platforms

    import presto.engines.vllm_recorder  # noqa: F401  (vLLM's own modules import with the real platform first)
    from presto.engines import vllm_batch_invariance

    (tmp_path / "config.json").write_text("{}")
    (tmp_path / "model.safetensors").write_bytes(b"")
    seen: dict = {"platform": "cpu", "threads": [], "model_config": SimpleNamespace(is_moe=False, dtype=None)}
    fake_platform = SimpleNamespace(
        is_cpu=lambda: seen["platform"] == "cpu", is_cuda=lambda: seen["platform"] == "cuda"
    )
    monkeypatch.setattr(vllm.platforms, "current_platform", fake_platform)
    monkeypatch.setattr(engine_module, "_set_threads", lambda threads: seen["threads"].append(threads) or 1)
    monkeypatch.setattr(vllm_batch_invariance, "configure", lambda enabled, platform: None)
    monkeypatch.setattr(vllm_batch_invariance, "claim", lambda engine, enabled, platform: None)
    monkeypatch.setenv("TRITON_F32_DEFAULT", "unset")  # recorded, so the engine's own setting is undone after
    monkeypatch.delenv("TRITON_F32_DEFAULT")

    def build_llm(self, llm_kwargs):
        seen["llm_kwargs"] = dict(llm_kwargs)
        return SimpleNamespace(llm_engine=SimpleNamespace(model_config=seen["model_config"]))

    def attach(self, created):
        self.kv_cache_blocks, self._final_metrics = 10, None

    def warm_up(self):
        self._peak_kv_usage = 0.6  # the warm-up call filled part of the cache

    monkeypatch.setattr(VLLMEngine, "_build_llm", build_llm)
    monkeypatch.setattr(VLLMEngine, "_attach", attach)
    monkeypatch.setattr(VLLMEngine, "_load_tokenizer", lambda self: None)
    monkeypatch.setattr(VLLMEngine, "_warm_up", warm_up)
    monkeypatch.setattr(VLLMEngine, "_read_counters", lambda self: dict.fromkeys(COUNTERS, 0.0))
    built = []

    def build(**options):
        engine = VLLMEngine(tmp_path, **options)
        built.append(engine)
        return engine

    yield build, seen
    for engine in built:
        engine._llm = None  # nothing to shut down


def pydantic_error(message: str) -> Exception:
    """A ValueError raised inside a pydantic validator, as vLLM's ModelConfig raises it."""
    import pydantic

    class ModelConfig(pydantic.BaseModel):
        max_model_len: int

        @pydantic.model_validator(mode="after")
        def check(self):
            raise ValueError(message)

    try:
        ModelConfig(max_model_len=1)
    except pydantic.ValidationError as err:
        return err
    raise AssertionError("the validator did not raise")


# --- import-time environment and threads ---------------------------------------------------------


def test_import_runs_the_core_in_process_and_keeps_the_users_thread_count():
    """The module docstring: the engine core in this process, OMP_NUM_THREADS set "unless the user did"."""
    code = (
        "import os, warnings\n"
        "warnings.simplefilter('always')\n"
        "with warnings.catch_warnings(record=True) as caught:\n"
        "    import presto.engines.vllm\n"
        "print(os.environ['VLLM_ENABLE_V1_MULTIPROCESSING'], os.environ['OMP_NUM_THREADS'])\n"
        "print(any('VLLM_ENABLE_V1_MULTIPROCESSING' in str(w.message) for w in caught))\n"
    )
    env = {**os.environ, "VLLM_ENABLE_V1_MULTIPROCESSING": "1", "OMP_NUM_THREADS": "3"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), env.get("PYTHONPATH", "")])
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.split() == ["0", "3", "True"]


@pytest.fixture
def fake_torch_threads(monkeypatch):
    """torch's thread calls recorded (torch reports 3 threads), the module's thread state restored after."""
    import torch

    monkeypatch.setattr(engine_module, "_THREAD_WARNING_SHOWN", False)
    monkeypatch.setenv("OMP_NUM_THREADS", os.environ.get("OMP_NUM_THREADS", "1"))  # restored after
    calls: list[int] = []
    monkeypatch.setattr(torch, "get_num_threads", lambda: calls[-1] if calls else 3)
    monkeypatch.setattr(torch._C, "set_num_threads", calls.append)
    # What vLLM's CPU worker leaves behind once an engine started: a no-op in torch's namespace.
    monkeypatch.setattr(torch, "set_num_threads", lambda threads: None)
    return calls


def test_engine_threads_are_exported_and_set_in_torch_when_the_user_set_none(monkeypatch, fake_torch_threads):
    import warnings

    monkeypatch.setattr(engine_module, "_USER_OMP", None)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # torch imported first (by the predictor, a script) is no reason to warn
        assert engine_module._set_threads(1) == 1
    assert os.environ["OMP_NUM_THREADS"] == "1"
    assert fake_torch_threads == [1]  # set through torch._C: torch.set_num_threads was a no-op
    assert engine_module._set_threads(None) == engine_module.usable_cores()  # null: the usable cores
    assert os.environ["OMP_NUM_THREADS"] == str(engine_module.usable_cores())


def test_a_users_omp_num_threads_wins_over_engine_threads_with_one_warning(monkeypatch, fake_torch_threads):
    monkeypatch.setattr(engine_module, "_USER_OMP", "2,1")
    with pytest.warns(UserWarning, match=r"OMP_NUM_THREADS=2,1 is set; it wins over engine\.threads=4"):
        assert engine_module._set_threads(4) == 2
    assert fake_torch_threads == [2]
    monkeypatch.setattr(engine_module, "_THREAD_WARNING_SHOWN", False)
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert engine_module._set_threads(2) == 2  # the same count: nothing to say about engine.threads
    assert not [w for w in caught if "wins over" in str(w.message)]


def test_a_thread_count_torch_does_not_take_is_one_warning(monkeypatch):
    import torch

    monkeypatch.setattr(engine_module, "_THREAD_WARNING_SHOWN", False)
    monkeypatch.setattr(engine_module, "_USER_OMP", "2")
    monkeypatch.setattr(torch, "get_num_threads", lambda: 3)
    monkeypatch.setattr(torch._C, "set_num_threads", lambda threads: None)
    with pytest.warns(UserWarning, match="torch runs 3 threads and could not be set to 2"):
        assert engine_module._set_threads(None) == 2


def test_torch_is_left_alone_when_it_already_runs_the_wanted_threads(monkeypatch, fake_torch_threads):
    monkeypatch.setattr(engine_module, "_USER_OMP", "3")
    assert engine_module._set_threads(None) == 3
    assert fake_torch_threads == []


# --- settings -------------------------------------------------------------------------------------


def test_the_defaults_are_those_of_the_engine_config_file():
    yaml = pytest.importorskip("yaml")
    config = yaml.safe_load((ROOT / "conf" / "engine" / "vllm.yaml").read_text())
    assert config.pop("name") == "vllm"
    assert config == engine_module._DEFAULTS


@pytest.mark.parametrize(
    ("option", "message"),
    [
        ({"device": "gpu"}, r"engine\.device must be one of auto, cpu, cuda, got 'gpu'"),
        ({"block_size": 0}, r"engine\.block_size must be an integer >= 1, got 0"),
        ({"max_num_seqs": 0}, r"engine\.max_num_seqs must be an integer >= 1"),
        ({"enable_prefix_caching": "no"}, r"engine\.enable_prefix_caching must be true or false, got 'no'"),
        ({"exact_logprobs": "no"}, r"engine\.exact_logprobs must be true or false"),
        ({"gpu_memory_utilization": 0}, r"engine\.gpu_memory_utilization must be a number in \(0, 1\]"),
        ({"threads": 0}, r"engine\.threads must be an integer >= 1 or null"),
        ({"seed": 1}, r"engine\.seed is not a vllm engine setting"),
    ],
)
def test_a_bad_setting_is_one_config_error_before_any_model_is_looked_at(tmp_path, option, message):
    with pytest.raises(ConfigError, match=message):
        VLLMEngine(tmp_path / "missing", **option)


def test_the_limits_of_the_documented_ranges_are_accepted():
    defaults = engine_module._DEFAULTS
    VLLMEngine._check_options({**defaults, "gpu_memory_utilization": 1})  # (0, 1]
    VLLMEngine._check_options({**defaults, "gpu_memory_utilization": 1.0})
    VLLMEngine._check_options({**defaults, "max_num_batched_tokens": 4096, "max_model_len": 4096})  # >= it
    VLLMEngine._check_options({**defaults, "block_size": 1, "max_num_seqs": 1, "kv_cache_memory_bytes": 1})


def test_a_folder_without_config_json_is_not_a_model(tmp_path):
    with pytest.raises(ModelNotFoundError, match=r"is not a model folder \(no config\.json\)"):
        VLLMEngine(tmp_path)
    (tmp_path / "model.safetensors").write_bytes(b"")
    with pytest.raises(ModelNotFoundError, match=r"no config\.json"):
        VLLMEngine(tmp_path)


def test_a_folder_without_weights_is_refused_before_vllm_starts(fake_vllm, tmp_path):
    """The check once tested any() of glob generators, which are truthy even when empty, so a
    folder without weights reached vLLM and failed there, seconds later, in vLLM's words."""
    build, seen = fake_vllm
    (tmp_path / "model.safetensors").unlink()  # config.json alone
    with pytest.raises(ModelNotFoundError, match=r"holds no weights \(\*\.safetensors or \*\.bin\)"):
        build()
    assert "llm_kwargs" not in seen  # refused before vLLM was asked to build anything


def test_kv_cache_auto_is_a_fixed_size_only_on_the_cpu():
    assert engine_module.kv_cache_bytes("auto", "cpu") == engine_module.CPU_KV_CACHE_BYTES
    assert engine_module.kv_cache_bytes("auto", "other") is None  # another accelerator sizes its own cache


def test_amx_is_what_torch_probes_not_whether_it_can_probe(monkeypatch):
    import torch

    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: False, raising=False)
    assert engine_module.cpu_has_amx() is False
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: True)
    assert engine_module.cpu_has_amx() is True
    monkeypatch.delattr(torch.cpu, "_is_amx_tile_supported")
    assert engine_module.cpu_has_amx() is False


# --- the constructor, with vLLM's LLM faked ---------------------------------------------------------


def test_what_llm_is_built_with_follows_the_settings(fake_vllm):
    build, seen = fake_vllm
    engine = build(max_model_len=1024, threads=2, exact_logprobs=True)
    kwargs = seen["llm_kwargs"]
    assert kwargs["max_num_batched_tokens"] == 1024  # null = max_model_len: every prefill fits one step
    assert kwargs["max_model_len"] == 1024 and kwargs["dtype"] == "float32" and kwargs["block_size"] == 32
    assert kwargs["disable_log_stats"] is False and kwargs["max_logprobs"] == -1
    assert seen["threads"] == [2] and engine.threads == 1  # engine.threads reaches _set_threads
    assert engine.exact_logprobs is True
    assert build(max_model_len=1024, max_num_batched_tokens=2048).exact_logprobs is False
    assert seen["llm_kwargs"]["max_num_batched_tokens"] == 2048


def test_dtype_auto_is_read_back_as_the_models_own(fake_vllm):
    import torch

    build, seen = fake_vllm
    seen["model_config"] = SimpleNamespace(is_moe=False, dtype=torch.bfloat16)
    engine = build(dtype="auto")
    assert seen["llm_kwargs"]["dtype"] == "auto" and engine.dtype == "bfloat16"


def test_an_engine_on_the_other_platform_says_which_build_is_installed(fake_vllm, monkeypatch):
    """Refused before the batch-invariance switches are exported: a refused engine leaves the
    process's environment as it found it."""
    from presto.engines import vllm_batch_invariance

    build, seen = fake_vllm
    configured = []
    monkeypatch.setattr(vllm_batch_invariance, "configure", lambda enabled, platform: configured.append(platform))
    with pytest.raises(EngineUnavailableError, match=r"engine\.device=cuda but the installed vLLM is the CPU build"):
        build(device="cuda")
    assert configured == []
    assert build(device="cpu").platform == "cpu"
    seen["platform"] = "cuda"
    with pytest.raises(EngineUnavailableError, match=r"engine\.device=cpu .* use engine\.device=auto"):
        build(device="cpu")


def test_the_warm_up_call_is_not_in_the_engines_figures(fake_vllm):
    """metrics(): "figures over this engine's life (after its warm-up)"."""
    build, _ = fake_vllm
    engine = build()
    metrics = engine.metrics()
    assert metrics["peak_kv_usage"] == 0.0
    assert metrics["kv_cache_tokens"] == 10 * 32
    assert "prefix_cache_hit_rate" not in metrics  # nothing looked up yet: no rate, not a division by zero


def test_the_engine_uses_the_recorder_built_for_it_and_the_cache_less_its_null_block():
    engine = bare_engine()
    block_pool = SimpleNamespace(num_gpu_blocks=11)
    manager = SimpleNamespace(block_pool=block_pool, usage=0.25)
    core = SimpleNamespace(scheduler=SimpleNamespace(kv_cache_manager=manager))
    engine._llm = SimpleNamespace(llm_engine=SimpleNamespace(engine_core=SimpleNamespace(engine_core=core)))
    with pytest.raises(EngineUnavailableError, match=r"did not start in this process \(0 instances\)"):
        engine._attach([])
    with pytest.raises(EngineUnavailableError, match=r"\(2 instances\)"):
        engine._attach([object(), object()])
    recorder = SimpleNamespace(usage_probe=None)
    engine._attach([recorder])
    assert engine._recorder is recorder and recorder.usage_probe() == 0.25
    assert engine.kv_cache_blocks == 10  # vLLM's block 0 is the null block, never free


# --- vLLM's startup errors, as one line ----------------------------------------------------------------


def test_a_max_model_len_above_the_models_is_a_config_error_with_vllms_reason():
    engine = bare_engine(max_model_len=9999)
    err = pydantic_error(
        "User-specified max_model_len (9999) is greater than the derived max_model_len (max_position_embeddings=2048 "
        "or model_max_length=None in model's config.json). To allow overriding this maximum, set the env var "
        "VLLM_ALLOW_LONG_MAX_MODEL_LEN=1."
    )
    assert "1 validation error for ModelConfig" in str(err)
    message = str(engine._startup_error(err))
    assert isinstance(engine._startup_error(err), ConfigError)
    assert message == (
        "engine.max_model_len=9999 is too large for this model: User-specified max_model_len (9999) is greater than "
        "the derived max_model_len (max_position_embeddings=2048 or model_max_length=None in model's config.json)"
    )


def test_no_memory_for_the_cache_on_the_cpu_is_a_config_error():
    err = ValueError(
        "No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when initializing the "
        "engine (this flag also controls CPU memory reservation on the CPU backend, despite its name)."
    )
    error = bare_engine(kv_cache_memory_bytes=None)._startup_error(err)  # sized by gpu_memory_utilization
    assert isinstance(error, ConfigError)
    assert str(error).startswith("no memory left for the KV cache (No available memory for the cache blocks.")
    error = bare_engine()._startup_error(err)  # sized by engine.kv_cache_memory_bytes: that is what to raise
    assert isinstance(error, ConfigError)
    assert str(error).startswith("engine.kv_cache_memory_bytes=1048576 is too small for any KV-cache block")


def test_an_unreadable_model_file_is_a_model_error_and_anything_else_engine_unavailable():
    engine = bare_engine()
    unreadable = engine._startup_error(PermissionError(13, "Permission denied", "/models/m/shard-1"))
    assert isinstance(unreadable, ModelNotFoundError) and "model.path='/models/m'" in str(unreadable)
    other = engine._startup_error(RuntimeError("Engine core initialization failed.\nSee the root cause above."))
    assert isinstance(other, EngineUnavailableError) and not isinstance(other, ConfigError)
    assert str(other) == "vLLM could not start: Engine core initialization failed."
    assert str(engine._startup_error(RuntimeError(""))) == "vLLM could not start: RuntimeError"


# --- the tokenizer side ------------------------------------------------------------------------------


def write_tokenizer(folder: Path) -> Path:
    """A four-word tokenizer with <s> and </s>, saved as transformers saves one (no network, milliseconds)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    words = Tokenizer(models.WordLevel({"<unk>": 0, "<s>": 1, "</s>": 2, "hello": 3, "world": 4}, unk_token="<unk>"))
    words.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=words, bos_token="<s>", eos_token="</s>", unk_token="<unk>")
    tokenizer.save_pretrained(str(folder))
    return folder


def test_eos_ids_and_vocabulary_come_from_the_model_folder(tmp_path):
    folder = write_tokenizer(tmp_path)
    (folder / "config.json").write_text(json.dumps({"model_type": "llama", "eos_token_id": 2}))
    (folder / "generation_config.json").write_text(json.dumps({"eos_token_id": [2, 4]}))
    engine = bare_engine(model_dir=folder)
    engine._llm = SimpleNamespace(llm_engine=SimpleNamespace(model_config=SimpleNamespace(get_vocab_size=lambda: 64)))
    engine._load_tokenizer()
    assert engine.eos_token_ids == frozenset({2, 4})  # the generation config's EOS too, as transformers stops
    assert engine.vocab_size == 64  # the logits' width, not the tokenizer's five words


def test_eos_ids_join_the_tokenizers_and_the_generation_configs():
    tokenizer = SimpleNamespace(eos_token_id=2)
    assert eos_ids(tokenizer, 7) == {2, 7}
    assert eos_ids(tokenizer, [7, 9]) == {2, 7, 9}
    assert eos_ids(SimpleNamespace(eos_token_id=None), [9, 7]) == {7, 9}
    assert eos_ids(tokenizer, None) == {2}


def test_prompts_without_a_chat_template_are_the_raw_text_with_bos(tmp_path):
    from transformers import AutoTokenizer

    text = ChatText()
    text.tokenizer = AutoTokenizer.from_pretrained(str(write_tokenizer(tmp_path)))
    assert text.tokenizer.chat_template is None
    messages = [{"role": "user", "content": "hello"}, {"role": "user", "content": "world"}]
    assert text.encode_prompt(messages) == text.tokenizer("hello\nworld")["input_ids"] == [3, 4]
    assert text.encode_prompt(messages, raw_prompt="world") == [4]  # the raw prompt wins when given
    assert text.encode_prompt([], raw_prompt="") == [1]  # nothing to encode: the BOS alone, never empty
    assert text.decode([1, 3, 2]) == "<s> hello </s>"  # special tokens kept: graders cut at the EOS text


# --- a call: the requests' SamplingParams and the results -------------------------------------------------


def test_every_request_ignores_vllms_eos_and_samples_with_its_own_seed():
    engine = served_engine(_eos=frozenset({2, 7, 100, 250}))  # 100 and 250 lie outside the logits' width
    requests = [
        SuffixRequest((1, 3), 3, 0.5, 11, (0.25, 1.0)),
        SuffixRequest((1, 3, 4), 2, 1.0, 2**63 - 1, (), True),
        SuffixRequest((1,), 4, 0.7, 0),
    ]
    results = engine.generate(requests)
    (params,) = engine._llm.params
    from presto.engines.vllm_recorder import KEY, TEMPERATURES

    for request, p, result in zip(requests, params, results, strict=True):
        assert p.ignore_eos is True  # vLLM's own EOS never ends a request
        assert p.seed == request.seed
        assert p.max_tokens == request.num_new_tokens == len(result.tokens)
        assert p.temperature == request.temperature
        assert p.extra_args[TEMPERATURES] == (request.temperature, *request.extra_temperatures)
        assert result.logq_extra.shape == (request.num_new_tokens, len(request.extra_temperatures))
    assert params[0].stop_token_ids in (None, []) and params[2].stop_token_ids in (None, [])
    assert params[1].stop_token_ids == [2, 7]  # the EOS ids within [0, vocab_size)
    assert len({p.extra_args[KEY] for p in params}) == 3
    engine.generate(requests[:1])
    assert engine._llm.params[1][0].extra_args[KEY] not in {p.extra_args[KEY] for p in params}


def test_requests_with_the_same_seed_in_one_call_keep_their_own_statistics():
    engine = served_engine()
    requests = [SuffixRequest((1, 3), 3, 0.5, 4), SuffixRequest((1, 3, 3), 3, 0.5, 4)]
    for result in engine.generate(requests):
        assert len(result.tokens) == 3
        np.testing.assert_allclose(result.logq, (-1.0 + 3.0) / 0.5 - 3.5, rtol=0, atol=1e-12)


def test_log_q_at_temperature_one_is_log_p0_exactly():
    engine = served_engine()
    (result,) = engine.generate([SuffixRequest((1, 3), 3, 1.0, 4, (0.5, 1.0))])
    np.testing.assert_array_equal(result.logq, result.logp0)
    np.testing.assert_array_equal(result.logq_extra[:, 1], result.logp0)
    np.testing.assert_allclose(result.logq_extra[:, 0], (-1.0 + 3.0) / 0.5 - (3.5 + 1e-9), rtol=0, atol=1e-12)


def test_peak_kv_usage_is_the_largest_of_all_calls():
    engine = served_engine()
    engine._llm.peaks = [0.5, 0.2]
    request = SuffixRequest((1, 3), 2, 0.5, 4)
    engine.generate([request])
    engine.generate([SuffixRequest((1, 3), 2, 0.5, 5)])
    assert engine._peak_kv_usage == 0.5
    assert engine.metrics()["peak_kv_usage"] == 0.5


def test_an_interrupted_call_drops_its_requests_and_its_records():
    engine = served_engine()
    engine._llm.fail = True
    with pytest.raises(KeyboardInterrupt):
        engine.generate([SuffixRequest((1, 3), 2, 0.5, 4), SuffixRequest((1, 4), 2, 0.5, 4)])
    assert engine._recorder.records == {}
    ((aborted, internal),) = engine._llm.aborted
    assert len(aborted) == 2 and internal is True


def test_a_stopped_request_must_end_at_an_eos():
    engine = bare_engine()
    stop = SuffixRequest((1,), 8, 0.5, 0, stop_at_eos=True)
    with pytest.raises(RuntimeError, match="vLLM returned 3 tokens for a request of 8"):
        engine._result(stop, completion([5, 7, 9]), row_record(3))
    with pytest.raises(RuntimeError, match="vLLM returned 0 tokens for a request of 8"):
        engine._result(stop, completion([]), row_record(0))


def test_a_stopped_requests_statistics_are_cut_to_its_tokens():
    """The one extra row async scheduling may record after an EOS is dropped from every statistic."""
    engine = bare_engine()
    stop = SuffixRequest((1,), 8, 0.5, 0, (0.25,), stop_at_eos=True)
    result = engine._result(stop, completion([5, 7, 2]), row_record(4, (0.5, 0.25)))
    for name in ("logp0", "logq", "entropy"):
        assert getattr(result, name).shape == (3,), name
    assert result.logq_extra.shape == (3, 1)
    np.testing.assert_array_equal(result.entropy, [1.0, 2.0, 3.0])
    np.testing.assert_allclose(result.logq, [(-1.0 + 3.0 + i) / 0.5 - (4.0 + i) for i in range(3)], rtol=0, atol=0)


# --- limits: context, KV cache, rescoring ------------------------------------------------------------


def test_a_sequence_fits_up_to_max_model_len_and_the_cache_blocks_it_needs():
    engine = bare_engine(max_model_len=64, block_size=32, kv_cache_blocks=2)
    engine.check_fits(64, "a request")
    with pytest.raises(ConfigError, match=r"a request needs 65 tokens but engine\.max_model_len=64"):
        engine.check_fits(65, "a request")
    small = bare_engine(max_model_len=64, block_size=32, kv_cache_blocks=1, kv_cache_memory_bytes=2**20)
    small.check_fits(32, "a request")
    with pytest.raises(ConfigError, match=r"needs 2 KV-cache blocks of 32 tokens but the cache holds 1; raise "):
        small.check_fits(33, "a request")


def test_a_rescore_needs_a_prefix_and_room_for_the_position_vllm_generates():
    engine = served_engine(max_model_len=64, kv_cache_blocks=8)
    with pytest.raises(ValueError, match="non-empty prefix"):
        engine.score((), [3])
    # vLLM refuses a prompt of exactly max_model_len for generation (it adds at least one token).
    with pytest.raises(ConfigError, match=r"rescoring \(prefix \+ tokens\) needs 65 tokens"):
        engine.score(tuple(range(1, 61)), [3, 4, 5, 6])
    assert engine._llm.params == []


def test_seeds_are_the_63_bit_range_vllm_takes():
    assert engine_module.vllm_seed(0) == 0 and engine_module.vllm_seed(2**63 - 1) == 2**63 - 1
    for bad in (-1, 2**63):
        with pytest.raises(ValueError, match=r"seed must be in \[0, 2\*\*63\)"):
            engine_module.vllm_seed(bad)


def test_the_exact_oracle_ignores_tokens_of_probability_zero():
    """Full-vocabulary logprobs may hold -inf (a masked logit): 0 * log 0 counts as 0 in the entropy."""
    half = math.log(0.5)
    position = {
        0: SimpleNamespace(logprob=half),
        1: SimpleNamespace(logprob=-math.inf),
        2: SimpleNamespace(logprob=half),
    }
    logq, entropy = engine_module._exact_statistics([position], np.array([2]), (1.0, 0.5))
    np.testing.assert_allclose(entropy, [math.log(2.0)], rtol=1e-15)
    np.testing.assert_allclose(logq, [[half, half]], rtol=1e-15)


# --- metrics ------------------------------------------------------------------------------------------


def metric(name, value, model="/models/m", **labels):
    return SimpleNamespace(name=name, value=value, labels={"model_name": model, **labels})


def test_cache_counters_are_summed_over_this_models_series_only():
    engine = bare_engine()
    engine._llm = SimpleNamespace(
        get_metrics=lambda: [
            metric("vllm:prefix_cache_queries", 100.0, engine="0"),
            metric("vllm:prefix_cache_queries", 60.0, engine="1"),
            metric("vllm:prefix_cache_hits", 90.0, engine="0"),
            metric("vllm:prefix_cache_hits", 30.0, engine="1"),
            metric("vllm:prefix_cache_hits", 1000.0, model="/models/other"),
            metric("vllm:prefix_cache_queries", None),
            metric("vllm:num_requests_running", 5.0),
        ]
    )
    assert engine._read_counters() == {"vllm:prefix_cache_queries": 160.0, "vllm:prefix_cache_hits": 120.0}
    engine.stats.calls = 4
    metrics = engine.metrics()
    assert metrics["prefix_cached_tokens"] == 120.0 and metrics["prefix_missed_tokens"] == 40.0
    assert metrics["prefix_cached_tokens_per_call"] == 30.0 and metrics["prefix_missed_tokens_per_call"] == 10.0
    assert metrics["prefix_cache_hit_rate"] == 0.75
