"""transformers engine: every request of a call decoded together as one batch (CPU or a GPU).

KV-cache reuse: the requests of a call are grouped into chains of prefixes (in a PreSTO
round they are all prefixes of the root sequence). A group runs ONE forward pass over its
longest prefix S; request r with prefix S[:m] then takes its first-token logits from
position m-1 of that pass and decodes on a copy of the cache whose positions >= m are
masked out, with RoPE position ids m, m+1, ... — mathematically the cache of S[:m] alone.
Rows leave the batch as they finish (longest suffix first), so a call costs about the
tokens it generates, not rows x longest.

A ``stop_at_eos`` row that has sampled an EOS is done: its results end at that EOS, and
the call's decode loop ends as soon as every row still in the batch is done. Until then a
done row stays in the batch (its further tokens are computed and dropped), so every other
row sees exactly the batch of the full-length call: results are bit-identical to the
full-length run up to the EOS in any dtype (dropping it would change the float32 rounding
of its neighbours, which is why the row is not dropped).

Sampling is per row, from the request's own generator (batch-invariant); statistics are
computed in float64 from the same logits row (log p0 raw, log q tempered, entropy).

``device`` is a torch device (``cpu``, ``cuda``, ``cuda:1``): the model, its cache and every
per-step tensor live there, and only the sampled tokens and statistics come back to the host.
The generators that draw each row's uniform stay on the host, so a request's tokens are the
same function of (prefix, temperature, seed) on every device, up to the device's rounding.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from presto.engines.base import Closed, Engine, SuffixRequest, SuffixResult, check_threads
from presto.engines.chat_text import ChatText, eos_ids
from presto.engines.threads import default_threads, set_torch_threads
from presto.engines.token_sampling import request_generator

_DTYPES = ("float32", "float64", "bfloat16")


def group_prefix_chains(requests: Sequence[SuffixRequest]) -> list[list[int]]:
    """Indices grouped so that, within a group, every prefix is a prefix of the group's first."""
    order = sorted(range(len(requests)), key=lambda i: -len(requests[i].prefix))
    groups: list[list[int]] = []
    for i in order:
        prefix = requests[i].prefix
        for group in groups:
            head = requests[group[0]].prefix
            if head[: len(prefix)] == prefix:
                group.append(i)
                break
        else:
            groups.append([i])
    return groups


def prefix_sharing_limit(config) -> int | None:
    """How long a group's decode (longest prefix + new tokens) may be and still share one cache.

    A row with prefix S[:m] decodes on the cache of the group's longest prefix S with slots
    >= m masked: exact for full attention with RoPE, since positions come from position ids.
    Not for attention that counts slots or looks at the batch's positions as a whole:
    a sliding window (Mistral, Gemma-2/3) or an attention chunk spends its span on the masked
    slots (and the cache evicts past it), and long-context RoPE (longrope, dynamic NTK)
    switches its frequencies on the largest position in the batch. Up to the returned length
    none of that applies (the window holds everything, the short factors hold); None: no limit.
    """
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    limits = []
    window = getattr(text, "sliding_window", None)
    layer_types = set(getattr(text, "layer_types", None) or ())
    if window and getattr(text, "use_sliding_window", True) is not False:
        limits.append(int(window))
    elif layer_types - {"full_attention"}:  # other local attention than a plain window: be safe
        limits.append(0)
    if getattr(text, "attention_chunk_size", None):
        limits.append(0)  # chunks are cut at fixed positions; no group holds its shape
    rope = getattr(text, "rope_parameters", None) or getattr(text, "rope_scaling", None) or {}
    ropes = [rope] if "rope_type" in rope or "type" in rope else [r for r in rope.values() if isinstance(r, dict)]
    for params in ropes:
        if params.get("rope_type", params.get("type")) in ("longrope", "dynamic"):
            original = params.get("original_max_position_embeddings") or getattr(
                text, "original_max_position_embeddings", None
            )
            limits.append(int(original or getattr(text, "max_position_embeddings", 0) or 0))
    return min(limits) if limits else None


def decode_groups(requests: Sequence[SuffixRequest], limit: int | None) -> list[list[int]]:
    """:func:`group_prefix_chains`, with a group longer than ``limit`` split into requests of one
    same prefix: those decode in lockstep without masked slots, as each would alone."""
    groups = group_prefix_chains(requests)
    if limit is None:
        return groups
    out: list[list[int]] = []
    for group in groups:
        if len(requests[group[0]].prefix) + max(requests[i].num_new_tokens for i in group) <= limit:
            out.append(group)
            continue
        same: dict[tuple[int, ...], list[int]] = {}
        for i in group:
            same.setdefault(tuple(requests[i].prefix), []).append(i)
        out.extend(same.values())
    return out


class HFEngine(ChatText, Engine):
    name = "hf"

    def __init__(
        self, model_dir: str | Path, dtype: str = "float32", threads: int | None = None, device: str = "cpu"
    ) -> None:
        super().__init__()
        check_dtype(dtype)
        check_threads(threads)
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer
        from transformers.utils import logging as hf_logging

        from presto.models import ModelNotFoundError, check_model_folder

        self.device = _torch_device(torch, device)
        hf_logging.disable_progress_bar()
        # Always set: a count an earlier engine of the process set (a sweep's previous job) would
        # otherwise stay under threads=null.
        set_torch_threads(threads or default_threads())
        self._torch = torch
        self.dtype = getattr(torch, dtype)
        check_model_folder(model_dir)
        try:
            self.tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
            model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=self.dtype)
        except (OSError, ValueError) as err:  # no tokenizer files, a damaged config.json or weights
            line = next((part.strip() for part in str(err).splitlines() if part.strip()), type(err).__name__)
            raise ModelNotFoundError(
                f"model.path={str(model_dir)!r} is not a model transformers can load: {line[:300]}"
            ) from None
        self.model = model.to(self.device)
        self.model.eval()
        # transformers renamed `past_key_values` to `cache` in 5.2x; accept both.
        forward_params = inspect.signature(self.model.forward).parameters
        self._cache_kwarg = "cache" if "cache" in forward_params else "past_key_values"
        self.model_dir = Path(model_dir)
        self._eos = eos_ids(self.tokenizer, getattr(self.model.generation_config, "eos_token_id", None))
        self._sharing_limit = prefix_sharing_limit(self.model.config)
        # The ids the embedding holds (the tokenizer may have fewer); Engine.generate checks prefixes.
        self.vocab_size = int(self.model.get_input_embeddings().num_embeddings)
        self._warm_up()

    def _warm_up(self) -> None:
        """A small uncounted call shaped like a real one (a shared-prefix pair, one with extra
        temperatures), so the first model call of a run is not charged the one-time setup
        (oneDNN primitives, allocator pools; on a GPU, kernel selection) that would raise the
        first chain's call time and pull its run's speedups toward 1.
        """
        prefix = tuple(range(1, min(5, self.vocab_size)))
        self._generate([SuffixRequest(prefix[:2], 2, 0.5, 0, (1.0,)), SuffixRequest(prefix, 2, 1.0, 1)])

    def close(self) -> None:
        """Drop the model, so its weights (on a GPU, its memory) go now rather than whenever the
        last reference to this engine does (a multirun's next job may need the room)."""
        if isinstance(self.model, Closed):
            return
        self.model = Closed("hf")
        if self.device.type == "cuda":
            self._torch.cuda.empty_cache()

    def batch_variance(self) -> str | None:
        if self.dtype == self._torch.float64:
            return None
        return (
            f"engine=hf in {str(self.dtype).removeprefix('torch.')} is not batch-invariant (a row's rounding "
            "depends on the other prefixes of its call, ~1e-5 in log p0), so a PreSTO chain can leave the "
            "sequential one at an MH decision that close to its threshold; in engine.dtype=float64 that "
            "margin is ~1e-14, which no decision meets in practice"
        )

    # --- model side --------------------------------------------------------------------

    def _forward(self, input_ids, cache, attention_mask=None, position_ids=None, logits_to_keep=1):
        out = self.model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            use_cache=True,
            logits_to_keep=logits_to_keep,
            **{self._cache_kwarg: cache},
        )
        return out.logits

    def max_sequence_tokens(self) -> int | None:
        # Past its trained positions a model's logits are out of distribution, not an error.
        return getattr(self.model.config, "max_position_embeddings", None)

    def score(self, prefix, tokens):
        torch = self._torch
        if not len(prefix) or not len(tokens):
            raise ValueError("score needs a non-empty prefix and at least one token")
        self.check_fits(len(prefix) + len(tokens), "rescoring (prefix + tokens)")
        ids = list(prefix) + [int(t) for t in tokens]
        self.check_token_ids(ids, "rescoring (prefix + tokens)")
        device = self.device
        with torch.inference_mode():
            # Only the rows that predict `tokens`: all positions' full-vocabulary logits would be GBs.
            inputs = torch.tensor([ids], device=device)
            logits = self.model(input_ids=inputs, logits_to_keep=len(tokens) + 1).logits[0, :-1]
            logp = torch.log_softmax(logits.double(), dim=-1)
            entropy = _entropy(logp)
            picked = logp.gather(1, torch.tensor(tokens, dtype=torch.long, device=device)[:, None])[:, 0]
        return picked.cpu().numpy(), entropy.cpu().numpy()

    def _generate(self, requests: list[SuffixRequest]) -> list[SuffixResult]:
        results: list[SuffixResult | None] = [None] * len(requests)
        with self._torch.inference_mode():
            for group in decode_groups(requests, self._sharing_limit):
                for index, result in zip(group, self._generate_group([requests[i] for i in group]), strict=True):
                    results[index] = result
        return results  # type: ignore[return-value]

    def _generate_group(self, group: list[SuffixRequest]) -> list[SuffixResult]:
        """Decode requests whose prefixes are all prefixes of ``group[0].prefix``."""
        torch = self._torch
        from transformers import DynamicCache

        # Longest suffix first, so finished rows are always a tail of the batch.
        order = sorted(range(len(group)), key=lambda i: -group[i].num_new_tokens)
        rows = [group[i] for i in order]
        device = self.device
        shared = max((r.prefix for r in rows), key=len)
        if min(len(r.prefix) for r in rows) < 1:
            raise ValueError("the hf engine needs a non-empty prefix (prompt) for every request")
        lengths = torch.tensor([len(r.prefix) for r in rows], device=device)
        width = len(shared)
        cache = DynamicCache(config=self.model.config)
        first_logits = self._forward(
            torch.tensor([shared], device=device), cache, logits_to_keep=torch.unique(lengths - 1)
        )[0]
        # Map each row to its row in the kept logits (torch.unique sorts the positions).
        kept = torch.unique(lengths - 1)
        logits = first_logits[torch.searchsorted(kept, lengths - 1)]

        batch = len(rows)
        cache.batch_repeat_interleave(batch)
        # Positions >= m of row r belong to S, not to the row's own prefix: mask them.
        mask = (torch.arange(width, device=device)[None, :] < lengths[:, None]).long()
        generators = [request_generator(r.seed) for r in rows]
        temperatures = torch.tensor([r.temperature for r in rows], dtype=torch.float64, device=device)
        steps = max(r.num_new_tokens for r in rows)
        tokens = np.zeros((batch, steps), dtype=np.int64)
        logp0_out = np.zeros((batch, steps))
        logq_out = np.zeros((batch, steps))
        entropy_out = np.zeros((batch, steps))
        extra = [r.extra_temperatures for r in rows]
        extra_out = [np.zeros((r.num_new_tokens, len(r.extra_temperatures))) for r in rows]
        # A row's length: its num_new_tokens, or up to its first EOS once a stop_at_eos row samples one.
        length = [r.num_new_tokens for r in rows]
        eos = np.asarray(sorted(self._eos), dtype=np.int64)
        stopping = [r.stop_at_eos and eos.size > 0 for r in rows]
        active = batch
        for step in range(steps):
            uniforms = torch.tensor([g.random() for g in generators[:active]], dtype=torch.float64, device=device)
            logits64 = logits.double()
            logp0 = torch.log_softmax(logits64, dim=-1)
            logq = torch.log_softmax(logits64 / temperatures[:active, None], dim=-1)
            picked = _inverse_cdf_sample(torch, logq, uniforms)
            # One transfer of this step's numbers to the host (a sync on a GPU).
            step_out = torch.stack(
                [
                    picked.double(),
                    logp0.gather(1, picked[:, None])[:, 0],
                    logq.gather(1, picked[:, None])[:, 0],
                    _entropy(logp0),
                ]
            ).cpu()
            tokens[:active, step] = step_out[0].numpy().astype(np.int64)
            logp0_out[:active, step] = step_out[1].numpy()
            logq_out[:active, step] = step_out[2].numpy()
            entropy_out[:active, step] = step_out[3].numpy()
            for temps, members in _rows_by_temperatures(extra[:active]).items():
                # One log-softmax per temperature over the rows that record it, and one transfer:
                # a per-row loop costs a launch and a host sync per row and temperature on a GPU.
                # On the CPU a row's log-softmax has the same bits alone and in a batch.
                index = torch.tensor(members, device=device)
                chosen = picked[index][:, None]
                scaled = logits64[index]
                values = torch.stack([torch.log_softmax(scaled / t, dim=-1).gather(1, chosen)[:, 0] for t in temps], 1)
                for row, value in zip(members, values.cpu().numpy(), strict=True):
                    extra_out[row][step] = value
            for row in range(active):
                if stopping[row] and length[row] > step + 1 and tokens[row, step] in eos:
                    length[row] = step + 1
            still = sum(1 for r in rows[:active] if r.num_new_tokens > step + 1)
            if not any(length[row] > step + 1 for row in range(still)):
                break
            if still < active:
                cache.batch_select_indices(torch.arange(still, device=device))
                mask = mask[:still]
                active = still
            mask = torch.cat([mask, torch.ones(active, 1, dtype=mask.dtype, device=device)], dim=1)
            positions = (lengths[:active] + step)[:, None]
            next_ids = torch.from_numpy(tokens[:active, step : step + 1]).to(device)
            logits = self._forward(next_ids, cache, attention_mask=mask, position_ids=positions)[:, -1]

        out: list[SuffixResult | None] = [None] * batch
        for row, original in enumerate(order):
            n = length[row]
            out[original] = SuffixResult(
                tokens[row, :n].copy(),
                logp0_out[row, :n].copy(),
                logq_out[row, :n].copy(),
                entropy_out[row, :n].copy(),
                extra_out[row] if n == rows[row].num_new_tokens else extra_out[row][:n].copy(),
            )
        return out  # type: ignore[return-value]


def _inverse_cdf_sample(torch, logq, uniforms):
    """Each row's token by inverse CDF: the first index whose cumulative weight exceeds ``u`` x total.

    The weights are exp(log q - max), unnormalized; ``uniforms`` holds one u in [0, 1) per row.
    """
    weights = torch.exp(logq - logq.max(dim=-1, keepdim=True).values)
    # On CUDA a one-row cumsum takes another scan kernel (a device-wide scan) than a batch's
    # row-wise one, which may round its CDF otherwise: a sequential chain's lone row and the
    # same row in a PreSTO call could then pick different tokens near a boundary. Scanned
    # beside a copy of itself, a lone row gets the batch's kernel (as the vLLM recorder reduces
    # one, vllm_recorder.statistics_table). The CPU scans every row alike: the same bits either way.
    rows = weights if len(weights) > 1 else weights.expand(2, -1)
    cdf = torch.cumsum(rows, dim=-1)[: len(weights)]
    picked = torch.searchsorted(cdf, (uniforms * cdf[:, -1])[:, None], right=True)[:, 0]
    return picked.clamp(max=cdf.shape[-1] - 1)


def _entropy(logp):
    """H of each row of log-probabilities; a -inf logit (a masked token) adds 0, not 0 * -inf = NaN."""
    return -(logp.exp() * logp).nan_to_num(nan=0.0).sum(-1)


def _rows_by_temperatures(extra: Sequence[tuple[float, ...]]) -> dict[tuple[float, ...], list[int]]:
    """Batch rows grouped by the extra temperatures they record (rows recording none are left out)."""
    groups: dict[tuple[float, ...], list[int]] = {}
    for row, temps in enumerate(extra):
        if temps:
            groups.setdefault(tuple(temps), []).append(row)
    return groups


def check_dtype(dtype: object) -> None:
    """``engine.dtype`` of the hf engine: one of :data:`_DTYPES`, else one line (a ConfigError),
    checked by the engine and, before anything loads, by :func:`presto.config.validate`."""
    from presto.config import ConfigError

    if dtype not in _DTYPES:
        raise ConfigError(f"engine.dtype must be one of {', '.join(_DTYPES)}, got {dtype!r}")


def check_device(device: object) -> None:
    """The spelling of ``engine.device`` (cpu, cuda, cuda:N), checked before the task loads by
    :func:`presto.config.validate`: a sweep over devices would otherwise fail only at its point.
    Whether that GPU is there is the engine's check when it is built (:func:`_torch_device`): a
    sweep's launcher (a Slurm login node) may have none where its jobs will."""
    import torch

    from presto.config import ConfigError

    try:
        kind = torch.device(str(device)).type
    except (RuntimeError, ValueError):
        raise ConfigError(f"engine.device={device} is not a torch device (cpu, cuda, cuda:N)") from None
    if kind not in ("cpu", "cuda"):
        raise ConfigError(f"engine.device={device}: the hf engine runs on cpu or cuda")


def _torch_device(torch, device: str):
    """``engine.device`` as a torch device; a GPU that is not there is one clear line."""
    from presto.config import ConfigError

    try:
        resolved = torch.device(str(device))
    except (RuntimeError, ValueError):
        raise ConfigError(f"engine.device={device} is not a torch device (cpu, cuda, cuda:N)") from None
    if resolved.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError(f"engine.device={device} but torch sees no CUDA GPU (torch {torch.__version__})")
    if resolved.type == "cuda" and resolved.index is not None and resolved.index >= torch.cuda.device_count():
        # torch.device accepts any index; the first tensor moved there would fail with "invalid device ordinal".
        count = torch.cuda.device_count()
        raise ConfigError(
            f"engine.device={device} but torch sees {count} CUDA GPU{'s' if count != 1 else ''} "
            f"(cuda:0 to cuda:{count - 1}; CUDA_VISIBLE_DEVICES renumbers them)"
        )
    if resolved.type not in ("cpu", "cuda"):
        raise ConfigError(f"engine.device={device}: the hf engine runs on cpu or cuda")
    return resolved
