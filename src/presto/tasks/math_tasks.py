"""Math datasets: MATH500, AIME 2024/2025 (integer answers), and generated math (offline)."""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from presto.tasks.base import (
    Grade,
    Problem,
    TaskDataError,
    chat_template_kwargs_from,
    cut_at_stop,
    stop_strings_from,
)
from presto.tasks.data import load_rows, num_prompts_from, require
from presto.tasks.math_grader import extract_math_answer, grade_integer, grade_math, parse_integer
from presto.tasks.prompts import math_prompt


class _MathTask:
    """Config plumbing shared by the math tasks; subclasses say how rows map to problems."""

    name = "math"
    integer_answers = False

    def __init__(self, cfg: Mapping[str, Any]) -> None:
        self.cfg = dict(cfg)
        self.stop_strings = stop_strings_from(self.cfg)

    @property
    def chat_template_kwargs(self) -> dict[str, Any]:
        return chat_template_kwargs_from(self.cfg)

    def _problems(self, items: Sequence[tuple[str, str, Any]]) -> list[Problem]:
        problems = []
        for i, (problem_id, text, answer) in enumerate(items):
            messages, raw = math_prompt(text)
            problems.append(Problem(i, problem_id, messages, raw, answer))
        return problems

    def grade(self, problem: Problem, completion: str) -> Grade:
        text = cut_at_stop(completion, self.stop_strings)
        if self.integer_answers:
            return grade_integer(text, problem.reference)
        return grade_math(text, str(problem.reference))


class Math500Task(_MathTask):
    """MATH-500 (HuggingFaceH4/MATH-500): problem/solution/answer/subject/level/unique_id."""

    name = "math500"

    def load(self) -> list[Problem]:
        rows, source = load_rows(self.cfg, task=self.name, required=("problem", "answer"), default_split="test")
        items = []
        for i, row in enumerate(rows):
            problem = require(row, "problem", str, task=self.name, source=source, i=i)
            answer = require(row, "answer", (str, int, float), task=self.name, source=source, i=i)
            items.append((str(row.get("unique_id") or f"math500/{i}"), problem, str(answer)))
        return self._problems(items)


class _AIMETask(_MathTask):
    integer_answers = True
    id_key = "id"
    problem_key = "problem"
    answer_key = "answer"

    def load(self) -> list[Problem]:
        rows, source = load_rows(
            self.cfg, task=self.name, required=(self.problem_key, self.answer_key), default_split="train"
        )
        items = []
        for i, row in enumerate(rows):
            problem = require(row, self.problem_key, str, task=self.name, source=source, i=i)
            answer = parse_integer(str(row[self.answer_key]))
            if answer is None:
                raise TaskDataError(
                    f"{self.name}: {source} row {i}: field {self.answer_key!r} should be an integer, "
                    f"got {row[self.answer_key]!r:.40}"
                )
            problem_id = row.get(self.id_key)
            items.append((f"{self.name}/{problem_id if problem_id is not None else i}", problem, answer))
        return self._problems(items)


class AIME24Task(_AIMETask):
    """AIME 2024 (Maxwell-Jia/AIME_2024): ID/Problem/Solution/Answer."""

    name = "aime24"
    id_key, problem_key, answer_key = "ID", "Problem", "Answer"


class AIME25Task(_AIMETask):
    """AIME 2025 (MathArena/aime_2025): problem_idx/problem/answer."""

    name = "aime25"
    id_key, problem_key, answer_key = "problem_idx", "problem", "answer"


DEFAULT_GENERATORS: tuple[str, ...] = (
    "basic_arithmetic",
    "chain_sum",
    "products",
    "gcd",
    "lcm",
    "simple_equations",
    "fraction_simplification",
    "gsm_symbolic",
)


@dataclass(frozen=True)
class GeneratedReference:
    """A reasoning-gym answer and where it was generated, so that its generator can score it.

    ``str()`` is the answer, so code that treats references as strings keeps working.
    """

    answer: str
    generator: str
    seed: int  # the generator's seed (generator_seed + its position in the list)
    size: int  # the size of the generated dataset; with the seed it fixes every entry
    index: int  # the entry within that dataset

    def __str__(self) -> str:
        return self.answer


@functools.lru_cache(maxsize=64)
def _generated_dataset(generator: str, size: int, seed: int) -> Any:
    """The reasoning-gym dataset a reference came from (rebuilt identically from its seed)."""
    import reasoning_gym

    return reasoning_gym.create_dataset(generator, size=size, seed=seed)


_ANSWER_FORMAT = re.compile(r"\s*Give (?:only )?(?:the|a) [\w ]{1,40}? as your final answer\.", re.IGNORECASE)


def without_answer_format(question: str) -> str:
    """A generated question without its own answer-format order ("Give only the result as your
    final answer."), which contradicts the prompt's: the grader reads the answer from \\boxed{}."""
    return _ANSWER_FORMAT.sub("", question).strip()


# generators whose scorer checks the form of the answer, not just its value:
# fraction_simplification wants lowest terms, which a value comparison would not enforce
FORM_SCORED_GENERATORS = frozenset({"fraction_simplification"})


def grade_generated(completion: str, reference: GeneratedReference) -> Grade:
    """Grade a generated problem by value with math-verify, or by its generator's scorer
    where the form of the answer matters (:data:`FORM_SCORED_GENERATORS`).

    The other generators' scorers are naive about how models write numbers: gsm_symbolic's
    reads the first number (``28,080`` as 28, the left-hand side of a boxed equation),
    products' and chain_sum's reject ``793{,}546{,}072`` and ``x = 793546072``. math-verify
    reads these by value and takes an equation's right-hand side. The form scorer sees the
    extracted answer and must give full marks (1.0).
    """
    if reference.generator not in FORM_SCORED_GENERATORS:
        return grade_math(completion, reference.answer)
    dataset = _generated_dataset(reference.generator, reference.size, reference.seed)
    extracted = extract_math_answer(completion)
    if extracted is None:
        return Grade(False, None, "no answer found")
    try:
        score = dataset.score_answer(extracted, dataset[reference.index])
    except Exception:  # a scorer that chokes on a malformed answer gives it no credit
        score = 0.0
    if score == 1.0:
        return Grade(True, extracted, f"{reference.generator} scorer")
    return Grade(False, extracted, f"{reference.generator} scorer gave {score} (expected {reference.answer})")


class GenMathTask(_MathTask):
    """Generated math from ``reasoning-gym``: offline, exact answers, reproducible by seed.

    Problem ``i`` comes from generator ``i % len(generators)``, so any prefix of the set
    mixes all generators. ``generator_seed`` (not the run seed) fixes the problems, so
    runs with different sampling seeds grade the same questions. Answers are compared by
    value, or by the generator's scorer where their form matters (:func:`grade_generated`).
    """

    name = "gen_math"

    def load(self) -> list[Problem]:
        try:
            import reasoning_gym  # noqa: F401  (only to fail here with a clear message)
        except ImportError as exc:
            raise TaskDataError(f"{self.name}: needs the reasoning-gym package (pip install reasoning-gym)") from exc
        generators = list(self.cfg.get("generators") or DEFAULT_GENERATORS)
        twice = next((gen for k, gen in enumerate(generators) if gen in generators[:k]), None)
        if twice is not None:  # its problems would repeat, under the same problem ids
            raise TaskDataError(f"{self.name}: generator {twice!r} is listed twice in dataset.generators")
        n = num_prompts_from(self.cfg) or 100
        seed = int(self.cfg.get("generator_seed", 0) or 0)
        per_generator = -(-n // len(generators))
        datasets: dict[str, Any] = {}
        for g, gen in enumerate(generators):
            try:
                datasets[gen] = _generated_dataset(gen, per_generator, seed + g)
            except Exception as exc:
                raise TaskDataError(f"{self.name}: reasoning-gym generator {gen!r} failed: {exc}") from exc
        items = []
        for i in range(n):
            gen = generators[i % len(generators)]
            k = i // len(generators)
            entry = datasets[gen][k]
            gen_seed = seed + generators.index(gen)
            reference = GeneratedReference(str(entry["answer"]), gen, gen_seed, per_generator, k)
            items.append((f"{gen}/{gen_seed}/{k}", without_answer_format(str(entry["question"])), reference))
        return self._problems(items)

    def grade(self, problem: Problem, completion: str) -> Grade:
        return grade_generated(cut_at_stop(completion, self.stop_strings), problem.reference)
