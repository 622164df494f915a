"""The text side shared by engines that serve a Hugging Face tokenizer (hf, vllm)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def eos_ids(tokenizer: Any, generation_eos: int | Sequence[int] | None) -> frozenset[int]:
    """The tokenizer's EOS plus the generation config's (an id or a list of ids)."""
    eos = {tokenizer.eos_token_id} if tokenizer.eos_token_id is not None else set()
    if isinstance(generation_eos, int):
        eos.add(generation_eos)
    elif generation_eos:
        eos.update(generation_eos)
    return frozenset(eos)


def generation_eos(model_dir: str) -> int | list[int] | None:
    """The EOS id(s) of a model folder's generation config, as transformers reads them.

    Without generation_config.json transformers derives the generation config from
    config.json (``GenerationConfig.from_model_config``); an engine that skipped that step
    would miss EOS ids declared only there and cut graded text elsewhere than the hf engine.
    """
    from transformers import AutoConfig, GenerationConfig

    try:
        return GenerationConfig.from_pretrained(model_dir).eos_token_id
    except OSError:
        return GenerationConfig.from_model_config(AutoConfig.from_pretrained(model_dir)).eos_token_id


class ChatText:
    """Prompt encoding through the chat template, decoding, and EOS ids from ``self.tokenizer``.

    Engines that mix this in set ``self.tokenizer`` and ``self._eos`` (see :func:`eos_ids`).
    """

    tokenizer: Any
    _eos: frozenset[int]

    def encode_prompt(self, messages: list[dict[str, str]], raw_prompt: str = "", **template_kwargs: Any) -> list[int]:
        """The chat template when there are messages and the model has one, else the raw text."""
        if messages and self.tokenizer.chat_template:
            ids = self.tokenizer.apply_chat_template(
                messages, add_generation_prompt=True, tokenize=True, **template_kwargs
            )
            if isinstance(ids, dict) or hasattr(ids, "input_ids"):  # transformers 5 may return a BatchEncoding
                ids = ids["input_ids"]
            return [int(t) for t in ids]
        text = raw_prompt or "\n".join(m["content"] for m in messages)
        ids = self.tokenizer(text, add_special_tokens=True)["input_ids"]
        if not ids and self.tokenizer.bos_token_id is not None:
            ids = [self.tokenizer.bos_token_id]
        return [int(t) for t in ids]

    def decode(self, token_ids: Sequence[int]) -> str:
        return self.tokenizer.decode([int(t) for t in token_ids], skip_special_tokens=False)

    @property
    def eos_token_ids(self) -> frozenset[int]:
        return self._eos
