"""A vLLM V1 logits processor that changes nothing and records what MH needs from each row.

vLLM returns the log-probability of a sampled token under one distribution only (raw
logits, ``logprobs=0``). MH also needs log q_τ of that token, log q at extra temperatures
(MultiTryMH) and the entropy of p0. All of them follow from the raw logit row ``z`` of
the step that sampled the token, through two numbers per temperature:

    log q_t(token) = (log p0(token) + LSE(z)) / t − LSE(z / t)

so this processor records, per request and per sampled position, ``LSE(z)``,
``LSE(z / t)`` for the request's temperatures and ``H(softmax(z))``, and returns the
logits untouched. ``is_argmax_invariant() == False`` is what makes vLLM call it before
penalties and temperature scaling, i.e. on the raw logits (vllm/v1/sample/sampler.py).

Results leave through the instance, in this process: the engine runs vLLM in-process
(``VLLM_ENABLE_V1_MULTIPROCESSING=0``) and finds the instance vLLM built for it in
:data:`LogZRecorder.instances`. Requests name themselves with ``extra_args[KEY]``; rows
without a key (someone else's requests) are left alone.

Each step's numbers stay on the logits' device until a record is handed over
(:meth:`LogZRecorder.pop`), and then travel to the host for all steps at once: a host read
in every step's ``apply`` would make the CPU wait for the step's forward pass on a GPU,
before it could queue the sampler's kernels.

The processor also samples the KV-cache usage at every step, through a probe the engine
installs. vLLM's ``kv_cache_usage_perc`` gauge reads 0 once ``generate`` has returned
(finished requests free their blocks), so the peak of a call must be taken during the
call, and each step's ``apply`` runs after the scheduler allocated that step's blocks.
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch
from vllm.v1.sample.logits_processor import BatchUpdate, LogitsProcessor, MoveDirectionality

KEY = "presto_key"
"""``SamplingParams.extra_args`` key: a string unique to the request within the engine."""
TEMPERATURES = "presto_temperatures"
"""``SamplingParams.extra_args`` key: the temperatures t to record LSE(z / t) at."""


@dataclass
class RowRecord:
    """What was recorded for one request, one entry per sampled position."""

    temperatures: tuple[float, ...]
    lse1: list[float] = field(default_factory=list)
    lse_t: list[list[float]] = field(default_factory=list)
    entropy: list[float] = field(default_factory=list)


class LogZRecorder(LogitsProcessor):
    """Leaves logits unchanged; records LSE at temperature 1 and at t, and the entropy, per row."""

    instances: ClassVar[weakref.WeakSet[LogZRecorder]] = weakref.WeakSet()
    """Every live instance, so an engine can find the one vLLM built for it."""

    def __init__(self, vllm_config: Any, device: torch.device, is_pin_memory: bool) -> None:
        self.rows: dict[int, tuple[str, tuple[float, ...]]] = {}  # batch row -> (key, temperatures)
        self.records: dict[str, RowRecord] = {}
        # Per step and temperature group: the requests' keys in row order and their statistics
        # table, still on the logits' device (moved to the host by _flush).
        self.pending: list[tuple[list[str], torch.Tensor]] = []
        # The current batch's temperature groups (temperatures, rows, keys, device index of the
        # rows or None), rebuilt only when vLLM changes the batch: the index reaches the device
        # once per change, not once per step (see row_index).
        self._groups: list[tuple[tuple[float, ...], list[int], list[str], torch.Tensor | None]] | None = None
        self.usage_probe: Callable[[], float] | None = None
        self.peak_usage = 0.0
        # On the CPU, small chunks keep the float64 temporaries in cache (see chunked_statistics).
        # On an accelerator each chunk costs a dozen kernel launches and a host sync per decode
        # step, so rows go in fewer, wider chunks padded to one shape: a GPU reduction may order
        # its sums by the tensor's shape, and one shape keeps a row's bits independent of its batch.
        on_cpu = torch.device(device).type == "cpu"
        self.chunk_rows = CHUNK_ROWS if on_cpu else ACCELERATOR_CHUNK_ROWS
        self.pad_chunks = not on_cpu
        LogZRecorder.instances.add(self)

    @classmethod
    def validate_params(cls, params: Any) -> None:
        extra = params.extra_args or {}
        if KEY in extra and not isinstance(extra[KEY], str):
            raise ValueError(f"extra_args[{KEY!r}] must be a str")
        temperatures = extra.get(TEMPERATURES, ())
        if not isinstance(temperatures, (list, tuple)):
            raise ValueError(f"extra_args[{TEMPERATURES!r}] must be a list of temperatures > 0")
        # 1/t must be finite too: the recorder raises z to the power round(1/t) (t = inf or a
        # subnormal t would overflow it, or silently unmask the -inf logits).
        if any(not (0 < float(t) < math.inf and math.isfinite(1.0 / float(t))) for t in temperatures):
            raise ValueError(f"extra_args[{TEMPERATURES!r}] must hold finite temperatures > 0")

    def is_argmax_invariant(self) -> bool:
        return False  # run before temperature scaling: this processor must see raw logits

    def update_state(self, batch_update: BatchUpdate | None) -> None:
        """Track which persistent-batch row holds which request (removed, added, moved, in that order)."""
        if batch_update is None:
            return
        self._groups = None
        for index in batch_update.removed:
            self.rows.pop(index, None)
        for index, params, _prompt_ids, _output_ids in batch_update.added:
            extra = params.extra_args or {}
            key = extra.get(KEY)
            if key is None:
                self.rows.pop(index, None)
                continue
            temperatures = tuple(float(t) for t in extra.get(TEMPERATURES, ()))
            self.rows[index] = (key, temperatures)
            # setdefault: a preempted request is added again later; it keeps its history.
            self.records.setdefault(key, RowRecord(temperatures))
        for a, b, direction in batch_update.moved:
            row_a, row_b = self.rows.pop(a, None), self.rows.pop(b, None)
            if row_a is not None:
                self.rows[b] = row_a
            if direction == MoveDirectionality.SWAP and row_b is not None:
                self.rows[a] = row_b

    def apply(self, logits: torch.Tensor) -> torch.Tensor:
        if self.usage_probe is not None:
            self.peak_usage = max(self.peak_usage, float(self.usage_probe()))
        if not self.rows:
            return logits
        if max(self.rows) >= logits.shape[0]:
            raise RuntimeError(
                f"presto logits recorder lost track of rows: {sorted(self.rows)} for {logits.shape[0]} logits rows"
            )
        if self._groups is None:
            groups: dict[tuple[float, ...], list[int]] = {}
            for row in sorted(self.rows):
                groups.setdefault(self.rows[row][1], []).append(row)
            self._groups = [
                (temperatures, rows, [self.rows[row][0] for row in rows], row_index(rows, logits.device))
                for temperatures, rows in groups.items()
            ]
        for temperatures, rows, keys, index in self._groups:
            table = chunked_table(logits, rows, temperatures, self.chunk_rows, self.pad_chunks, index)
            self.pending.append((keys, table))
        return logits

    def pop(self, key: str) -> RowRecord | None:
        """Hand over (and forget) the record of request ``key``, with every step recorded so far."""
        self._flush()
        return self.records.pop(key, None)

    def _flush(self) -> None:
        """Append the pending steps' statistics to their records, with one device-to-host copy."""
        if not self.pending:
            return
        values = torch.cat([table.flatten() for _, table in self.pending]).tolist()
        offset = 0
        for keys, table in self.pending:
            width = table.shape[1]
            for key in keys:
                row = values[offset : offset + width]
                offset += width
                record = self.records.get(key)
                if record is None:  # a step after its record was handed over: nobody's any more
                    continue
                record.lse1.append(row[0])
                record.entropy.append(row[1])
                record.lse_t.append(row[2:])
        self.pending.clear()


CHUNK_ROWS = 8
"""Logits rows processed together by :func:`row_statistics` on the CPU (a cache-sized block)."""
ACCELERATOR_CHUNK_ROWS = 32
"""Rows per (padded) chunk on an accelerator: few launches per step, and float64 temporaries
of a few hundred MB at most for a 150k vocabulary (vLLM's memory profile does not see them)."""
PAD_COLUMNS = 64
"""A padded chunk's width is a multiple of this: every row of its float64 temporaries then
starts on a 512-byte boundary. A CUDA reduction reduces a row's unaligned head apart from its
vectorized body, so with a vocabulary that is not a multiple of 4 (50257, say) a row's sums
would otherwise be rounded differently at odd and even positions of its chunk."""


def chunked_statistics(
    logits: torch.Tensor,
    rows: list[int],
    temperatures: tuple[float, ...],
    chunk_rows: int = CHUNK_ROWS,
    pad: bool = False,
) -> tuple[list, list, list]:
    """:func:`chunked_table` as (lse1, entropy, lse_t) lists on the host."""
    return _split_table(chunked_table(logits, rows, temperatures, chunk_rows, pad).tolist())


def chunked_table(
    logits: torch.Tensor,
    rows: list[int],
    temperatures: tuple[float, ...],
    chunk_rows: int = CHUNK_ROWS,
    pad: bool = False,
    index: torch.Tensor | None = None,
) -> torch.Tensor:
    """:func:`statistics_table` of the given rows of ``logits``, ``chunk_rows`` rows at a time.

    A few rows at a time on the CPU: the float64 temporaries of 8 full-vocabulary rows stay
    in cache, while a 140-row pass spent most of its time allocating and faulting in fresh
    pages (6x slower per row). ``pad``: a short last chunk is filled up with copies of its
    first row, so that every chunk has the same shape (what an accelerator needs for a
    row's numbers not to depend on how many rows share its step); the copies are dropped.
    Its width is also padded to a multiple of :data:`PAD_COLUMNS` with ``-inf`` logits,
    which add exact zeros to every sum (see :func:`row_statistics`). The table stays on the
    logits' device. ``index``: ``rows`` already on that device (:func:`row_index`), for rows
    that are not consecutive.
    """
    parts = []
    for start in range(0, len(rows), chunk_rows):
        chunk = rows[start : start + chunk_rows]
        block = _take_rows(logits, chunk, None if index is None else index[start : start + len(chunk)])
        if pad and len(chunk) < chunk_rows:
            block = torch.cat([block, block[:1].expand(chunk_rows - len(chunk), -1)])
        if pad and block.shape[-1] % PAD_COLUMNS:
            extra = PAD_COLUMNS - block.shape[-1] % PAD_COLUMNS
            block = torch.nn.functional.pad(block, (0, extra), value=float("-inf"))
        parts.append(statistics_table(block, temperatures)[: len(chunk)])
    if not parts:
        return torch.empty((0, 2 + len(temperatures)), dtype=torch.float64, device=logits.device)
    return torch.cat(parts)


def _consecutive(rows: list[int]) -> bool:
    return rows == list(range(rows[0], rows[0] + len(rows)))


def row_index(rows: list[int], device: torch.device) -> torch.Tensor | None:
    """``rows`` as an index on ``device``, or None when they are consecutive (a slice needs none).

    Indexing a CUDA tensor with a Python list copies the index from pageable host memory,
    which waits for the stream: a host sync per chunk and step. MultiTryMH's temperature
    groups interleave in the batch, so their rows are not consecutive; their index is copied
    once, from pinned memory and without waiting, when the batch changes.
    """
    if _consecutive(rows):
        return None
    index = torch.tensor(rows, dtype=torch.long)
    if torch.device(device).type == "cuda":
        return index.pin_memory().to(device, non_blocking=True)
    return index.to(device)


def _take_rows(logits: torch.Tensor, rows: list[int], index: torch.Tensor | None = None) -> torch.Tensor:
    """``logits[rows]``: a slice (a view) when the rows are consecutive, as vLLM's condensed batch
    keeps a single group; else gathered by ``index`` (the rows on the logits' device) if given."""
    if _consecutive(rows):
        return logits[rows[0] : rows[0] + len(rows)]
    if index is not None:
        return logits.index_select(0, index)
    return logits[rows]


MAX_POWER = 16
"""Largest k for which LSE(z * k) reuses exp(y) ** k instead of a new exp pass."""


def row_statistics(logits: torch.Tensor, temperatures: tuple[float, ...]) -> tuple[list, list, list]:
    """LSE(z), H(softmax(z)) and [LSE(z / t) for t in temperatures] of each logits row z, as lists."""
    return _split_table(statistics_table(logits, temperatures).tolist())


def _split_table(table: list[list[float]]) -> tuple[list, list, list]:
    """Rows of :func:`statistics_table` as (lse1, entropy, lse_t) lists."""
    return [row[0] for row in table], [row[1] for row in table], [row[2:] for row in table]


def statistics_table(logits: torch.Tensor, temperatures: tuple[float, ...]) -> torch.Tensor:
    """One float64 row per logits row z: LSE(z), H(softmax(z)), then LSE(z / t) per temperature.

    float64: the statistics are differences of large numbers (LSE ~ 10-30). One exp pass
    gives LSE(z) and H(p0) = log s - sum(e * y) / s with y = z - max z, e = exp(y),
    s = sum e. A temperature t = 1/k with k a small integer (the samplers' 0.25 and 0.5)
    needs no other exp: exp(y / t) = e**k, by repeated squaring (a few ulp from exp(k y),
    and exp of a full-vocabulary float64 row is the costly step here); any other t takes
    one more exp pass. (-inf logits, padding included, are clamped to -1e300 so that 0 * y
    stays 0 and exp(y / t) is 0 at any temperature; -1e4 would leave exp(-1e4 / t) > 0 for t > ~14.)
    """
    if len(logits) == 1:
        # Alone, a row's sums are split across threads by torch (output of one element), so
        # their last bits would differ from the same row's in a chunk (one thread per row).
        # Reduced beside a copy of itself, it gets the chunk's arithmetic: batch-invariant.
        return statistics_table(logits.expand(2, -1), temperatures)[:1]
    z = logits.to(torch.float64, copy=True)  # worked on in place below; the caller's logits stay as they are
    top = z.max(dim=-1, keepdim=True).values
    y = z.sub_(top).clamp_(min=-1e300)
    e = torch.exp(y)
    s = e.sum(-1)
    log_s = torch.log(s)
    lse1 = top[:, 0] + log_s
    entropy = log_s - (e * y).sum(-1) / s
    powers = {1: e}  # e**k for the k computed so far

    def power(k: int) -> torch.Tensor:
        if k not in powers:
            half = power(k // 2)
            powers[k] = half * half if k % 2 == 0 else half * half * e
        return powers[k]

    by_temperature = {1.0: lse1}
    for t in temperatures:
        if t in by_temperature:
            continue
        k = round(1.0 / t)
        exp_scaled = power(k) if 2 <= k <= MAX_POWER and abs(k * t - 1.0) < 1e-12 else torch.exp(y / t)
        by_temperature[t] = top[:, 0] / t + torch.log(exp_scaled.sum(-1))
    return torch.stack([lse1, entropy, *(by_temperature[t] for t in temperatures)], dim=-1)
