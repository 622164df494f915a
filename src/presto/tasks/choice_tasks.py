"""Multiple-choice datasets: GPQA Diamond (choices shuffled by seed) and MMLU."""

from __future__ import annotations

import random
from collections.abc import Mapping
from typing import Any

from presto.tasks.base import (
    DEFAULT_STOP_STRINGS,
    Grade,
    Problem,
    TaskDataError,
    chat_template_kwargs_from,
    cut_at_stop,
)
from presto.tasks.choice_grader import grade_choice
from presto.tasks.data import load_rows, require
from presto.tasks.prompts import LETTERS, choice_prompt


class _ChoiceTask:
    name = "choice"

    def __init__(self, cfg: Mapping[str, Any]) -> None:
        self.cfg = dict(cfg)
        self.stop_strings = tuple(self.cfg.get("stop_strings") or DEFAULT_STOP_STRINGS)

    @property
    def chat_template_kwargs(self) -> dict[str, Any]:
        return chat_template_kwargs_from(self.cfg)

    def grade(self, problem: Problem, completion: str) -> Grade:
        letters = LETTERS[: problem.reference["num_choices"]]
        return grade_choice(cut_at_stop(completion, self.stop_strings), problem.reference["answer"], letters)


def shuffled_order(seed: int, index: int, n: int = 4) -> list[int]:
    """A permutation of range(n) that depends only on (seed, problem index).

    GPQA lists the correct answer first; shuffling removes that tell, and keying the
    shuffle by the run seed and the problem index keeps every run reproducible.
    """
    order = list(range(n))
    random.Random(f"presto-gpqa:{seed}:{index}").shuffle(order)
    return order


class GPQATask(_ChoiceTask):
    """GPQA Diamond (Idavidrein/gpqa, gpqa_diamond): Question, Correct Answer, Incorrect Answer 1-3."""

    name = "gpqa_diamond"
    fields = ("Question", "Correct Answer", "Incorrect Answer 1", "Incorrect Answer 2", "Incorrect Answer 3")

    def load(self) -> list[Problem]:
        rows, source = load_rows(self.cfg, task=self.name, required=self.fields, default_split="train")
        seed = int(self.cfg.get("seed") or 0)
        problems = []
        for i, row in enumerate(rows):
            texts = [
                str(require(row, key, (str, int, float), task=self.name, source=source, i=i)).strip()
                for key in self.fields
            ]
            question, options = texts[0], texts[1:]  # options[0] is the correct one
            order = shuffled_order(seed, i)
            choices = [options[j] for j in order]
            answer = LETTERS[order.index(0)]
            messages, raw = choice_prompt(question, choices)
            problem_id = str(row.get("Record ID") or f"gpqa_diamond/{i}")
            problems.append(Problem(i, problem_id, messages, raw, {"answer": answer, "num_choices": 4}))
        return problems


def answer_index(raw: Any, num_choices: int) -> int | None:
    """The index of the correct choice: ``2``, ``"2"`` (a parquet/CSV export may store the
    index as text) or the letter ``"C"`` (some hub variants), else None."""
    if isinstance(raw, str):
        text = raw.strip()
        if text.isdigit():
            raw = int(text)
        elif len(text) == 1 and text.upper() in LETTERS[:num_choices]:
            return LETTERS.index(text.upper())
    if isinstance(raw, int) and not isinstance(raw, bool) and 0 <= raw < num_choices:
        return raw
    return None


class MMLUTask(_ChoiceTask):
    """MMLU (cais/mmlu, config "all"): question, subject, choices, answer (index 0-3)."""

    name = "mmlu"

    def load(self) -> list[Problem]:
        rows, source = load_rows(self.cfg, task=self.name, required=("question", "choices", "answer"))
        problems = []
        for i, row in enumerate(rows):
            question = require(row, "question", str, task=self.name, source=source, i=i)
            choices = require(row, "choices", list, task=self.name, source=source, i=i)
            if not 2 <= len(choices) <= len(LETTERS):
                raise TaskDataError(f"{self.name}: {source} row {i}: field 'choices' should have 2-10 entries")
            index = answer_index(row["answer"], len(choices))
            if index is None:
                raise TaskDataError(
                    f"{self.name}: {source} row {i}: field 'answer' should be an index 0-{len(choices) - 1} "
                    f"or a letter {LETTERS[0]}-{LETTERS[len(choices) - 1]}, got {row['answer']!r}"
                )
            messages, raw = choice_prompt(question, [str(c) for c in choices])
            subject = row.get("subject") or "mmlu"
            reference = {"answer": LETTERS[index], "num_choices": len(choices)}
            problems.append(Problem(i, f"{subject}/{i}", messages, raw, reference))
        return problems
