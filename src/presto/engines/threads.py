"""CPU thread counts of the torch-based engines (hf, vLLM on the CPU): what ``engine.threads=null``
means, and setting a count that holds for every engine of the process.

Imported by :mod:`presto.engines.vllm` before it exports its own ``OMP_NUM_THREADS``, so
``STARTUP_OMP`` is what the user started the process with.
"""

from __future__ import annotations

import os

STARTUP_OMP = os.environ.get("OMP_NUM_THREADS")
"""OMP_NUM_THREADS as the process started (None when unset)."""


def usable_cores() -> int:
    """CPU cores this process may run on (affinity mask, not the host's count)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def omp_threads(value: str | None) -> int | None:
    """The thread count OMP_NUM_THREADS asks for, as libgomp reads it: unset or empty is None
    (``export OMP_NUM_THREADS=$SLURM_CPUS_PER_TASK`` without that variable), a list ("2,1",
    one count per nesting level) gives its first level; anything else is one ConfigError line."""
    if value is None or not value.strip():
        return None
    from presto.config import ConfigError

    first = value.split(",", 1)[0].strip()
    if not first.isdigit() or int(first) < 1:
        raise ConfigError(f"OMP_NUM_THREADS={value!r} is not a thread count (a positive integer, or a list like 2,1)")
    return int(first)


def default_threads() -> int:
    """``engine.threads=null``: the OMP_NUM_THREADS the process started with, else the usable cores."""
    return omp_threads(STARTUP_OMP) or usable_cores()


def set_torch_threads(threads: int) -> None:
    """Set torch's intra-op thread count, also after vLLM's CPU worker disabled ``torch.set_num_threads``.

    The worker replaces ``torch.set_num_threads`` with a no-op when its engine starts in this
    process, so a later engine of the process (a benchmark's second engine, an hf engine after a
    vLLM one) would silently keep the first one's count; torch's own function stays in ``torch._C``.
    """
    import torch

    getattr(torch._C, "set_num_threads", torch.set_num_threads)(int(threads))
