"""An exact first-order Markov language model from a JSON table, for tests.

The table is ``{"bos_logits": [V floats], "logits": [[V floats] x V]}``: the first
generated token has logits ``bos_logits`` and a token after token ``a`` has logits
``logits[a]``. There is no EOS (a subclass may name EOS ids through ``eos_token_ids``;
requests with ``stop_at_eos`` then stop after the first one). Prompts are empty, so a
prefix is generated ids only.
Because every probability is known in closed form, the law of any chain on this engine
can be computed by enumeration, which is what the law tests do.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from presto.engines.base import Engine, SuffixRequest, SuffixResult
from presto.engines.token_sampling import TokenStats, log_softmax, request_generator


class ToyTableError(ValueError):
    """The toy table file is missing or malformed."""


def load_toy_table(path: str | Path) -> tuple[np.ndarray, np.ndarray]:
    """Read and validate a toy table: returns (bos_logits [V], logits [V, V]) in float64."""
    path = Path(path)
    if not path.is_file():
        raise ToyTableError(f"engine.table: no such file {path}")
    try:
        data = json.loads(path.read_text())
        bos = np.asarray(data["bos_logits"], dtype=np.float64)
        logits = np.asarray(data["logits"], dtype=np.float64)
    except (json.JSONDecodeError, KeyError, TypeError, ValueError) as err:
        raise ToyTableError(
            f'engine.table: {path} is not a toy table {{"bos_logits": [V floats], "logits": [[V floats] x V]}} ({err})'
        ) from None
    vocab = bos.shape[0] if bos.ndim == 1 else 0
    if vocab < 1 or logits.shape != (vocab, vocab):
        raise ToyTableError(
            f"engine.table: {path} needs bos_logits of length V >= 1 and logits of shape VxV, "
            f"got {bos.shape} and {logits.shape}"
        )
    if not (np.all(np.isfinite(bos)) and np.all(np.isfinite(logits))):
        raise ToyTableError(f"engine.table: {path} holds non-finite logits")
    return bos, logits


def write_random_toy_table(path: str | Path, vocab: int, seed: int = 0, scale: float = 1.5) -> Path:
    """Write a toy table with standard normal logits times ``scale`` (seeded): larger scales
    make sharper next-token laws. The file a toy run names with ``engine.table``."""
    if vocab < 1:
        raise ToyTableError(f"a toy table needs a vocabulary of at least 1 token, got {vocab}")
    if not (np.isfinite(scale) and scale >= 0):
        raise ToyTableError(f"the logit scale must be a finite number >= 0, got {scale}")
    rng = np.random.default_rng(seed)
    table = {
        "bos_logits": (scale * rng.normal(size=vocab)).tolist(),
        "logits": (scale * rng.normal(size=(vocab, vocab))).tolist(),
    }
    path = Path(path)
    path.write_text(json.dumps(table))
    return path


class ToyEngine(Engine):
    name = "toy"

    def __init__(self, table: str | Path) -> None:
        super().__init__()
        self.bos_logits, self.logits = load_toy_table(table)
        self.vocab_size = self.bos_logits.shape[0]

    def next_logits(self, previous: int | None) -> np.ndarray:
        return self.bos_logits if previous is None else self.logits[previous]

    def _generate(self, requests: list[SuffixRequest]) -> list[SuffixResult]:
        results = []
        eos = self.eos_token_ids
        for request in requests:
            stats = TokenStats(request.num_new_tokens, len(request.extra_temperatures))
            rng = request_generator(request.seed)
            previous = request.prefix[-1] if request.prefix else None
            length = request.num_new_tokens
            for position in range(request.num_new_tokens):
                previous = stats.draw(
                    position,
                    self.next_logits(previous),
                    request.temperature,
                    request.extra_temperatures,
                    rng.random(),
                )
                if request.stop_at_eos and previous in eos:
                    length = position + 1
                    break
            results.append(
                SuffixResult(
                    stats.tokens[:length],
                    stats.logp0[:length],
                    stats.logq[:length],
                    stats.entropy[:length],
                    stats.logq_extra[:length],
                )
            )
        return results

    def score(self, prefix, tokens):
        self.check_token_ids([*prefix, *tokens], "rescoring (prefix + tokens)")
        previous = prefix[-1] if len(prefix) else None
        logp0 = np.zeros(len(tokens))
        entropy = np.zeros(len(tokens))
        for i, token in enumerate(tokens):
            row = log_softmax(self.next_logits(previous))
            logp0[i] = row[token]
            entropy[i] = -float(np.sum(np.exp(row) * row))
            previous = int(token)
        return logp0, entropy
