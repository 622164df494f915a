"""Multiple-choice datasets: GPQA Diamond (choices shuffled by seed), MMLU and MMLU-Pro."""

from __future__ import annotations

import random
from collections.abc import Mapping
from typing import Any

from presto.tasks.base import (
    Grade,
    Problem,
    TaskDataError,
    chat_template_kwargs_from,
    cut_at_stop,
    stop_strings_from,
)
from presto.tasks.choice_grader import grade_choice
from presto.tasks.data import load_rows, require
from presto.tasks.prompts import LETTERS, choice_prompt


class _ChoiceTask:
    name = "choice"

    def __init__(self, cfg: Mapping[str, Any]) -> None:
        self.cfg = dict(cfg)
        self.stop_strings = stop_strings_from(self.cfg)

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
    index as text), ``2.0`` (pandas stores an integer column with a missing value as floats)
    or the letter ``"C"`` (some hub variants), else None."""
    if isinstance(raw, float) and raw.is_integer():
        raw = int(raw)
    if isinstance(raw, str):
        text = raw.strip()
        if text.isdigit():
            raw = int(text)
        elif len(text) == 1 and text.upper() in LETTERS[:num_choices]:
            return LETTERS.index(text.upper())
    if isinstance(raw, int) and not isinstance(raw, bool) and 0 <= raw < num_choices:
        return raw
    return None


def checked_answer(row: Mapping[str, Any], key: str, num_choices: int, where: str) -> int:
    """:func:`answer_index` of ``row[key]``, or a TaskDataError naming the field (``where``: task, file, row)."""
    index = answer_index(row[key], num_choices)
    if index is None:
        last = num_choices - 1
        raise TaskDataError(
            f"{where}: field {key!r} should be an index 0-{last} or a letter {LETTERS[0]}-{LETTERS[last]}, "
            f"got {row[key]!r}"
        )
    return index


def check_choice_count(count: int, key: str, where: str) -> None:
    """2 to 10 choices: one per letter of :data:`LETTERS`."""
    if not 2 <= count <= len(LETTERS):
        raise TaskDataError(f"{where}: field {key!r} should have 2-{len(LETTERS)} entries, has {count}")


class MMLUTask(_ChoiceTask):
    """MMLU (cais/mmlu, config "all"): question, subject, choices, answer (index 0-3)."""

    name = "mmlu"

    def load(self) -> list[Problem]:
        rows, source = load_rows(self.cfg, task=self.name, required=("question", "choices", "answer"))
        problems = []
        for i, row in enumerate(rows):
            question = require(row, "question", str, task=self.name, source=source, i=i)
            choices = require(row, "choices", list, task=self.name, source=source, i=i)
            where = f"{self.name}: {source} row {i}"
            check_choice_count(len(choices), "choices", where)
            index = checked_answer(row, "answer", len(choices), where)
            messages, raw = choice_prompt(question, [str(c) for c in choices])
            subject = row.get("subject") or "mmlu"
            reference = {"answer": LETTERS[index], "num_choices": len(choices)}
            problems.append(Problem(i, f"{subject}/{i}", messages, raw, reference))
        return problems


class MMLUProTask(_ChoiceTask):
    """MMLU-Pro (TIGER-Lab/MMLU-Pro, split test): question_id, question, options (up to 10),
    answer (a letter A-J), answer_index, category, src.

    ``answer`` and ``answer_index`` (when present) must name the same option. An option that
    is exactly "N/A" is dropped unless it is the answer, and the answer letter is taken from
    the index after dropping: early releases padded every question to 10 options with "N/A",
    which the official evaluation (TIGER-Lab's ``preprocess``) removes before prompting, so
    the model sees the same options there and here, and no padding option takes a letter.
    Problem ids are ``mmlu_pro/<question_id>`` (``<category>/<row>`` for a row without one).
    """

    name = "mmlu_pro"
    placeholder = "N/A"

    def load(self) -> list[Problem]:
        rows, source = load_rows(self.cfg, task=self.name, required=("question", "options", "answer"))
        problems: list[Problem] = []
        seen: dict[str, int] = {}
        for i, row in enumerate(rows):
            question = require(row, "question", str, task=self.name, source=source, i=i)
            options = [str(o) for o in require(row, "options", list, task=self.name, source=source, i=i)]
            index = self._answer(row, len(options), source, i)
            kept = [j for j, option in enumerate(options) if j == index or option != self.placeholder]
            if not 2 <= len(kept) <= len(LETTERS):
                raise TaskDataError(
                    f"{self.name}: {source} row {i}: field 'options' should have 2-10 entries "
                    f"other than {self.placeholder!r}, has {len(kept)}"
                )
            messages, raw = choice_prompt(question, [options[j] for j in kept])
            question_id = row.get("question_id")
            if question_id is None:
                problem_id = f"{row.get('category') or self.name}/{i}"
            else:
                problem_id = f"{self.name}/{question_id}"
            if problem_id in seen:
                raise TaskDataError(
                    f"{self.name}: {source} row {i}: problem id {problem_id!r} already used by row {seen[problem_id]}"
                )
            seen[problem_id] = i
            reference = {"answer": LETTERS[kept.index(index)], "num_choices": len(kept)}
            problems.append(Problem(i, problem_id, messages, raw, reference))
        return problems

    def _answer(self, row: Mapping[str, Any], num_options: int, source: str, i: int) -> int:
        """The answer's index among the options as listed; ``answer`` and ``answer_index`` must agree."""
        where = f"{self.name}: {source} row {i}"
        check_choice_count(num_options, "options", where)
        index = checked_answer(row, "answer", num_options, where)
        if row.get("answer_index") is not None:
            other = checked_answer(row, "answer_index", num_options, where)
            if other != index:
                raise TaskDataError(
                    f"{where}: field 'answer' is {row['answer']!r} (option {LETTERS[index]}) but 'answer_index' "
                    f"is {row['answer_index']!r} (option {LETTERS[other]})"
                )
        return index
