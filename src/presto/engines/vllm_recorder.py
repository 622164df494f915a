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

The processor also samples the KV-cache usage at every step, through a probe the engine
installs. vLLM's ``kv_cache_usage_perc`` gauge reads 0 once ``generate`` has returned
(finished requests free their blocks), so the peak of a call must be taken during the
call, and each step's ``apply`` runs after the scheduler allocated that step's blocks.
"""

from __future__ import annotations

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
        self.usage_probe: Callable[[], float] | None = None
        self.peak_usage = 0.0
        LogZRecorder.instances.add(self)

    @classmethod
    def validate_params(cls, params: Any) -> None:
        extra = params.extra_args or {}
        if KEY in extra and not isinstance(extra[KEY], str):
            raise ValueError(f"extra_args[{KEY!r}] must be a str")
        if any(not float(t) > 0 for t in extra.get(TEMPERATURES, ())):
            raise ValueError(f"extra_args[{TEMPERATURES!r}] must hold temperatures > 0")

    def is_argmax_invariant(self) -> bool:
        return False  # run before temperature scaling: this processor must see raw logits

    def update_state(self, batch_update: BatchUpdate | None) -> None:
        """Track which persistent-batch row holds which request (removed, added, moved, in that order)."""
        if batch_update is None:
            return
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
        order = sorted(self.rows)
        if order[-1] >= logits.shape[0]:
            raise RuntimeError(f"presto logits recorder lost track of rows: {order} for {logits.shape[0]} logits rows")
        # float64: the statistics are differences of large numbers (LSE ~ 10-30). One exp pass
        # gives LSE(z) and H(p0) = log s - sum(e * y) / s with y = z - max z, e = exp(y), s = sum e;
        # one more per temperature. (-inf logits are clamped so that 0 * y stays 0.)
        z = logits[order].to(torch.float64)
        top = z.max(dim=-1, keepdim=True).values
        y = (z - top).clamp_(min=-1e4)
        e = torch.exp(y)
        s = e.sum(-1)
        log_s = torch.log(s)
        lse1 = top[:, 0] + log_s
        entropy = log_s - (e * y).sum(-1) / s
        groups: dict[tuple[float, ...], list[int]] = {}
        for j, row in enumerate(order):
            groups.setdefault(self.rows[row][1], []).append(j)
        lse_t: list[list[float]] = [[] for _ in order]
        for temperatures, members in groups.items():
            if not temperatures:
                continue
            index = torch.tensor(members)
            whole = len(members) == len(order)
            y_group, top_group, lse_group = (y, top[:, 0], lse1) if whole else (y[index], top[index, 0], lse1[index])
            columns = [
                lse_group if t == 1.0 else top_group / t + torch.log(torch.exp(y_group / t).sum(-1))
                for t in temperatures
            ]
            for j, value in zip(members, torch.stack(columns, dim=-1).tolist(), strict=True):
                lse_t[j] = value
        for j, (lse, ent, row) in enumerate(zip(lse1.tolist(), entropy.tolist(), order, strict=True)):
            record = self.records[self.rows[row][0]]
            record.lse1.append(lse)
            record.lse_t.append(lse_t[j])
            record.entropy.append(ent)
        return logits

    def pop(self, key: str) -> RowRecord | None:
        """Hand over (and forget) the record of request ``key``."""
        return self.records.pop(key, None)
