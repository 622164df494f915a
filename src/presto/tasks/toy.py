"""The toy dataset: ``num_prompts`` empty prompts for the toy Markov engine, never graded."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from presto.tasks.base import Grade, Problem, stop_strings_from
from presto.tasks.data import num_prompts_from


class ToyTask:
    """Empty prompts: the toy engine's first token comes from its BOS logits alone.

    Grades are ``Grade(None, None)``: there is no right answer, and saying so (rather
    than "wrong") keeps toy runs from reporting a meaningless accuracy of zero.
    """

    name = "toy"

    def __init__(self, cfg: Mapping[str, Any]) -> None:
        self.cfg = dict(cfg)
        self.num_prompts = num_prompts_from(self.cfg) or 20
        self.stop_strings = stop_strings_from(self.cfg)

    @property
    def chat_template_kwargs(self) -> dict[str, Any]:
        return {}

    def load(self) -> list[Problem]:
        return [Problem(i, f"toy/{i}", [], "", None) for i in range(self.num_prompts)]

    def grade(self, problem: Problem, completion: str) -> Grade:
        return Grade(None, None, "toy dataset: nothing to grade")
