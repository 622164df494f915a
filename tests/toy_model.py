"""Closed-form toy-model references shared by the EntropyCut and MultiTryMH tests.

ToyModel computes, from the toy table alone (not from kernel code), the per-position
statistics of any sequence; CachedToyEngine is the toy engine with its logits rows cached
so that enumerating whole kernels stays fast; FixedInputs pins one decision's random inputs.
"""

from __future__ import annotations

import itertools
import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from presto.engines.base import SuffixResult
from presto.engines.token_sampling import log_softmax, request_generator
from presto.engines.toy import ToyEngine
from presto.samplers.state import ChainState

ALPHA, TAU = 2.0, 0.5  # the law tests' target exponent and proposal temperature (defaults below)


class CachedToyEngine(ToyEngine):
    """ToyEngine that computes each logits row's statistics once per temperature.

    Same sampling rule (CDF inversion of the tempered row with the request's uniforms), so
    it returns the same tokens and the same values as ToyEngine (checked below); it only
    makes the many-chain law tests affordable on two cores.
    """

    def __init__(self, table: str | Path) -> None:
        super().__init__(table)
        self._rows: dict = {}

    def _row(self, previous, temperature, extra):
        key = (previous, temperature, extra)
        row = self._rows.get(key)
        if row is None:
            logits = self.next_logits(previous)
            logp0 = log_softmax(logits)
            logq = logp0 if temperature == 1.0 else log_softmax(logits / temperature)
            cdf = np.cumsum(np.exp(logq - logq.max()))
            p0 = np.exp(logp0)
            entropy = -float(np.sum(p0 * np.where(p0 > 0, logp0, 0.0)))
            columns = [log_softmax(logits / t) for t in extra]
            table = np.stack(columns, axis=1) if columns else np.zeros((logits.shape[0], 0))
            row = self._rows[key] = (logp0, logq, cdf, entropy, table)
        return row

    def _generate(self, requests):
        results = []
        for request in requests:
            n, extra = request.num_new_tokens, request.extra_temperatures
            tokens = np.zeros(n, dtype=np.int64)
            logp0, logq, entropy = np.zeros(n), np.zeros(n), np.zeros(n)
            logq_extra = np.zeros((n, len(extra)))
            rng = request_generator(request.seed)
            previous = request.prefix[-1] if request.prefix else None
            for i in range(n):
                row_p0, row_q, cdf, row_entropy, row_extra = self._row(previous, request.temperature, extra)
                token = min(int(np.searchsorted(cdf, rng.random() * cdf[-1], side="right")), cdf.shape[0] - 1)
                tokens[i], logp0[i], logq[i], entropy[i] = token, row_p0[token], row_q[token], row_entropy
                logq_extra[i] = row_extra[token]
                previous = token
            results.append(SuffixResult(tokens, logp0, logq, entropy, logq_extra))
        return results


@dataclass(frozen=True)
class FixedInputs:
    """Decision inputs with chosen uniforms (duck-types DecisionInputs for pure kernel calls)."""

    cut_uniform: float = 0.5
    suffix_seed: int = 0
    accept_uniform: float = 0.5
    selection_uniform: float = 0.5

    def auxiliary(self, purpose: int):
        return _FixedStream(self.selection_uniform)


@dataclass(frozen=True)
class _FixedStream:
    value: float

    def random(self) -> float:
        return self.value


class ToyModel:
    """Closed-form per-token quantities of a toy table: log p0, log q_t, entropy."""

    def __init__(self, engine: ToyEngine) -> None:
        self.engine = engine
        self.vocab = engine.vocab_size
        self._rows: dict[tuple[int | None, float], np.ndarray] = {}

    def row(self, previous: int | None, temperature: float = 1.0) -> np.ndarray:
        key = (previous, temperature)
        if key not in self._rows:
            self._rows[key] = log_softmax(self.engine.next_logits(previous) / temperature)
        return self._rows[key]

    def entropy(self, previous: int | None) -> float:
        logp = self.row(previous)
        return -float(np.sum(np.exp(logp) * logp))

    def per_token(self, seq, start: int, temperature: float = 1.0) -> np.ndarray:
        """log prob of seq[start:] given seq[:start], token by token."""
        return np.array(
            [self.row(seq[t - 1] if t else None, temperature)[seq[t]] for t in range(start, len(seq))], dtype=float
        )

    def entropies(self, seq) -> np.ndarray:
        return np.array([self.entropy(seq[t - 1] if t else None) for t in range(len(seq))])

    def state(self, seq, extra: tuple[float, ...] = (), tau: float = TAU) -> ChainState:
        return ChainState(
            np.array(seq, dtype=np.int64),
            self.per_token(seq, 0),
            self.per_token(seq, 0, tau),
            self.entropies(seq),
            np.stack([self.per_token(seq, 0, t) for t in extra], axis=1) if extra else np.zeros((len(seq), 0)),
        )

    def suffix(self, seq, start: int, extra: tuple[float, ...] = (), tau: float = TAU) -> SuffixResult:
        full = self.state(seq, extra, tau)
        return SuffixResult(
            full.tokens[start:], full.logp0[start:], full.logq[start:], full.entropy[start:], full.logq_extra[start:]
        )

    def target(self, length: int, alpha: float = ALPHA) -> tuple[list[tuple[int, ...]], np.ndarray]:
        states = list(itertools.product(range(self.vocab), repeat=length))
        log_w = np.array([alpha * self.per_token(s, 0).sum() for s in states])
        w = np.exp(log_w - log_w.max())
        return states, w / w.sum()

    def extension_law(self, length: int, tau: float = TAU) -> np.ndarray:
        states = list(itertools.product(range(self.vocab), repeat=length))
        return np.array([math.exp(self.per_token(s, 0, tau).sum()) for s in states])


def cli_chains(run_dir) -> list[tuple]:
    records = [json.loads(line) for line in (run_dir / "chains.jsonl").read_text().splitlines()]
    return [(r["prompt_id"], r["chain"], r["tokens"], r["accepts"]) for r in records]
