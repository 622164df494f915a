"""The engine contract: one batched model call turns suffix requests into scored suffixes.

Every sampler and every traversal talks to a language model only through
:meth:`Engine.generate`. One call of it is one "model call": it is counted and timed
here, once, for every engine, so the speed figures of all engines mean the same thing.

A request asks for ``num_new_tokens`` tokens after ``prefix`` (prompt ids followed by the
kept generated ids), sampled at ``temperature`` with the request's own ``seed``. Engines
must make the sampled tokens a function of (prefix, temperature, seed) alone, never of
the batch the request shares, because that is what lets a prefetched proposal equal the
one the sequential chain would have drawn.

Generation runs to the full ``num_new_tokens`` (the MH samplers' fixed horizon: EOS does
not stop it) unless the request sets ``stop_at_eos``: then it stops right after the first
token in the engine's :attr:`Engine.eos_token_ids`, and the result holds the tokens up to
and including that EOS, with the same tokens and statistics as the first positions of
the same request without stopping. The test-time baselines ask for it (they drop
everything after EOS anyway); the MH samplers never do.

For each sampled token the result carries, all computed from one set of logits:

- ``logp0``: log-probability under the base model (raw logits, temperature 1),
- ``logq``: log-probability under the proposal (logits / temperature): the law sampled,
- ``entropy``: entropy of the base next-token distribution p0 at that position,
- ``logq_extra``: log-probability at each of ``extra_temperatures`` (MultiTryMH needs
  the proposal density of a candidate under temperatures it was not drawn with).
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from presto.config import ConfigError


def check_threads(threads: object) -> None:
    """``engine.threads`` of the hf and vLLM engines: an integer >= 1, or null (the engine's default).

    0 would silently mean torch's default (the engines test ``if threads``), -1 fails inside torch,
    and ``true`` is an int to Python. Checked by the engines and, before anything loads, by
    :func:`presto.config.validate_engine`.
    """
    if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int) or threads < 1):
        raise ConfigError(f"engine.threads must be an integer >= 1 or null, got {threads!r}")


@dataclass(frozen=True)
class SuffixRequest:
    """Generate ``num_new_tokens`` tokens after ``prefix`` at ``temperature`` with ``seed``.

    ``stop_at_eos``: stop after the first EOS (:attr:`Engine.eos_token_ids`), which is
    returned as the last token; fewer than ``num_new_tokens`` tokens may then come back.
    An engine without EOS ids generates the full length. Off by default (fixed horizon).
    """

    prefix: tuple[int, ...]
    num_new_tokens: int
    temperature: float
    seed: int
    extra_temperatures: tuple[float, ...] = ()
    stop_at_eos: bool = False

    def __post_init__(self) -> None:
        # Tuples, so that a call can de-duplicate requests by hashing them (a list is unhashable).
        object.__setattr__(self, "prefix", tuple(self.prefix))
        object.__setattr__(self, "extra_temperatures", tuple(self.extra_temperatures))
        for name in ("num_new_tokens", "seed"):
            # A float passes the range checks below and fails later, mid-call, inside numpy.
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | np.integer):
                raise ValueError(f"{name} must be an int, got {value!r}")
        if self.num_new_tokens < 1:
            raise ValueError(f"num_new_tokens must be >= 1, got {self.num_new_tokens}")
        if not self.temperature > 0:
            raise ValueError(f"temperature must be > 0, got {self.temperature}")
        if any(not t > 0 for t in self.extra_temperatures):
            raise ValueError(f"extra_temperatures must all be > 0, got {self.extra_temperatures}")
        if not 0 <= self.seed < 2**63:
            raise ValueError(f"seed must be in [0, 2**63), got {self.seed}")
        if not isinstance(self.stop_at_eos, bool):
            raise ValueError(f"stop_at_eos must be a bool, got {self.stop_at_eos!r}")


@dataclass(frozen=True)
class SuffixResult:
    """Sampled tokens of one request and their per-token statistics (float64 arrays).

    n is the request's ``num_new_tokens``, or fewer when it stopped at an EOS (its last token).
    """

    tokens: np.ndarray  # int64, shape (n,)
    logp0: np.ndarray  # float64, shape (n,)
    logq: np.ndarray  # float64, shape (n,)
    entropy: np.ndarray  # float64, shape (n,)
    logq_extra: np.ndarray  # float64, shape (n, len(extra_temperatures))


class Closed:
    """Stands in for a closed engine's model: any use is one clear error, not a None attribute error."""

    def __init__(self, engine: str) -> None:
        self.engine = engine

    def _closed(self, *args, **kwargs):
        raise RuntimeError(f"this {self.engine} engine is closed (Engine.close); build a new one")

    __call__ = _closed

    def __getattr__(self, name: str):
        self._closed()


@dataclass
class CallStats:
    """What the engine spent: model calls, wall time inside them, and requests served.

    ``generated_tokens`` counts the tokens the distinct requests of each call produced
    (fewer than they asked for when they stopped at EOS).
    """

    calls: int = 0
    call_time_s: float = 0.0
    requests: int = 0
    unique_requests: int = 0
    generated_tokens: int = 0
    extra: dict[str, float] = field(default_factory=dict)

    def snapshot(self) -> CallStats:
        return CallStats(
            self.calls,
            self.call_time_s,
            self.requests,
            self.unique_requests,
            self.generated_tokens,
            dict(self.extra),
        )


class Engine(ABC):
    """Base class: counting, timing and de-duplication around an engine's batched call.

    Identical requests (same prefix, length, temperature, seed) have identical answers by
    the contract above, so a call computes each distinct request once. Keyed random inputs
    make such duplicates common in a prefetch tree: every feasible node at one depth asks
    for the same proposal.
    """

    name: str = "engine"
    # The lowest sampling temperature the engine samples at exactly (vLLM raises lower ones).
    min_temperature: float = 0.0
    # Token ids a prefix may hold are [0, vocab_size); None: the engine checks them itself.
    vocab_size: int | None = None
    # Positions a score() call takes beyond prefix + tokens (vLLM generates one token to score).
    score_extra_tokens: int = 0

    def __init__(self) -> None:
        self.stats = CallStats()

    def generate(self, requests: Sequence[SuffixRequest]) -> list[SuffixResult]:
        """One model call: all requests generated together. Returns results in order."""
        if not requests:
            return []
        unique: dict[SuffixRequest, int] = {}
        for request in requests:
            unique.setdefault(request, len(unique))
        distinct = list(unique)
        for request in distinct:  # refused before any work, whichever engine serves them
            self.check_temperatures((request.temperature, *request.extra_temperatures))
            self.check_fits(len(request.prefix) + request.num_new_tokens, "a request (prefix + new tokens)")
            self.check_token_ids(request.prefix, "a request's prefix")
        start = time.perf_counter()
        results = self._generate(distinct)
        elapsed = time.perf_counter() - start
        if len(results) != len(distinct):
            raise RuntimeError(f"{self.name} engine returned {len(results)} results for {len(distinct)} requests")
        for request, result in zip(distinct, results, strict=True):
            self._check_length(request, result)
        self.stats.calls += 1
        self.stats.call_time_s += elapsed
        self.stats.requests += len(requests)
        self.stats.unique_requests += len(distinct)
        self.stats.generated_tokens += sum(int(r.tokens.shape[0]) for r in results)
        return [results[unique[request]] for request in requests]

    def _check_length(self, request: SuffixRequest, result: SuffixResult) -> None:
        """A result has the full length, or (``stop_at_eos``) stops at its first EOS and nowhere else."""
        n, length = request.num_new_tokens, int(result.tokens.shape[0])
        if length == n and not request.stop_at_eos:
            return
        eos = self.eos_token_ids
        hits = np.flatnonzero(np.isin(result.tokens, list(eos))) if eos and request.stop_at_eos else np.zeros(0)
        expected = int(hits[0]) + 1 if hits.size else n
        if length != expected:
            raise RuntimeError(
                f"{self.name} engine returned {length} tokens for a request of {n}"
                + (f" that stops at EOS (expected {expected})" if request.stop_at_eos else "")
            )

    @abstractmethod
    def _generate(self, requests: list[SuffixRequest]) -> list[SuffixResult]:
        """Generate distinct requests in one batched pass (subclasses implement this)."""

    def check_temperatures(self, temperatures: Sequence[float]) -> None:
        """Refuse a temperature this engine would not sample at: its log q would describe another law."""
        low = [t for t in temperatures if t < self.min_temperature]
        if low:
            raise ConfigError(
                f"engine={self.name} samples at temperatures >= {self.min_temperature}, got {min(low)} "
                "(sampler.tau, or 1/sampler.alpha when tau is null, and sampler.temperatures)"
            )

    def check_token_ids(self, token_ids: Sequence[int], what: str) -> None:
        """Refuse ids outside [0, :attr:`vocab_size`): a negative one would index the model's rows
        from the end (a silently wrong answer), a large one fail deep inside the model."""
        if self.vocab_size is None or not len(token_ids):
            return
        low, high = min(token_ids), max(token_ids)
        if low < 0 or high >= self.vocab_size:
            bad = low if low < 0 else high
            raise ValueError(
                f"{what} holds token id {bad}, outside the vocabulary [0, {self.vocab_size}) of engine={self.name}"
            )

    def max_sequence_tokens(self) -> int | None:
        """The longest prompt + answer the engine serves (None: no limit)."""
        return None

    def check_fits(self, num_tokens: int, what: str) -> None:
        """Refuse, with one line, a sequence the engine cannot serve (before any work is spent)."""
        limit = self.max_sequence_tokens()
        if limit is not None and num_tokens > limit:
            raise ConfigError(f"{what} needs {num_tokens} tokens but engine={self.name} serves at most {limit}")

    def model_fingerprint(self) -> str | None:
        """A digest of the model folder this engine serves (a chain record's ``model_sha``, so a
        resume refuses replaced weights); None for an engine without one (toy). Computed once."""
        folder = getattr(self, "model_dir", None)
        if folder is None:
            return None
        if getattr(self, "_model_sha", None) is None:
            from presto.models.assets import model_folder_fingerprint

            self._model_sha = model_folder_fingerprint(folder)
        return self._model_sha

    def batch_variance(self) -> str | None:
        """None when a request's results do not depend on its batch beyond float64 rounding,
        else why they do and what fixes it.

        Batch invariance is what makes a PreSTO chain equal the sequential chain token for
        token: the same request is generated alone in one and beside others in the other.
        An engine whose rounding depends on the batch can flip an MH decision whose
        uniform falls within that rounding of its acceptance probability: about 1e-5 in
        float32, so it happens in long runs; about 1e-14 in float64 (the hf engine), which
        no run of any length will meet, so float64 counts as invariant here.
        """
        return None

    # --- text side: engines that serve a real model override these -------------------

    def encode_prompt(self, messages: list[dict[str, str]], raw_prompt: str = "", **template_kwargs: Any) -> list[int]:
        """Token ids of a prompt: chat messages through the model's template, else raw text.

        ``template_kwargs`` go to the chat template (e.g. ``enable_thinking``); an engine
        without a template ignores them.
        """
        return []

    def decode(self, token_ids: Sequence[int]) -> str:
        return " ".join(str(t) for t in token_ids)

    @property
    def eos_token_ids(self) -> frozenset[int]:
        """Ids that end a text for graders; generation stops at them only for ``stop_at_eos`` requests."""
        return frozenset()

    def score(self, prefix: Sequence[int], tokens: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
        """Rescore ``tokens`` after ``prefix`` under p0: (log p0 per token, entropy per position)."""
        raise NotImplementedError(f"the {self.name} engine cannot rescore sequences")

    @property
    def rescore_limits(self) -> str | None:
        """Why :meth:`score` returns NaN entropies here and how to get them; None when it does not."""
        return None

    def metrics(self) -> dict[str, float]:
        """Engine-specific counters for summary.json (cache hit rate, KV usage, ...)."""
        return {}

    def reset_prefix_cache(self) -> bool:
        """Forget every cached prefix, so that the next call starts cold; False when this
        engine keeps nothing between calls (or could not reset)."""
        return False

    def close(self) -> None:  # noqa: B027 - engines without resources need no cleanup
        """Release model memory; safe to call twice."""
