"""HumanEval end to end: every canonical solution passes; mismatched solutions fail."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from presto.tasks import Grade, Problem, Task, build_task

WORKERS = 4  # sandbox runs mostly wait on process start-up; 4 keeps 2 cores busy


@pytest.fixture(scope="module")
def humaneval() -> tuple[Task, list[Problem]]:
    task = build_task({"name": "humaneval", "num_prompts": None, "allow_code_execution": True, "timeout_s": 5})
    problems = task.load()
    assert len(problems) == 164
    return task, problems


def as_chat_answer(problem: Problem, body: str) -> str:
    """A completion as a chat model writes it: prose, then the whole function in a fence."""
    return f"Here is the function:\n```python\n{problem.reference['prompt']}{body}\n```\nIt works."


def grade_all(task: Task, pairs: list[tuple[Problem, str]]) -> list[Grade]:
    with ThreadPoolExecutor(WORKERS) as pool:
        return list(pool.map(lambda pair: task.grade(*pair), pairs))


def test_all_canonical_solutions_pass(humaneval: tuple[Task, list[Problem]]) -> None:
    task, problems = humaneval
    start = time.monotonic()
    grades = grade_all(task, [(p, as_chat_answer(p, p.reference["canonical_solution"])) for p in problems])
    failed = [(p.problem_id, g.detail) for p, g in zip(problems, grades, strict=True) if g.correct is not True]
    assert not failed, failed
    assert time.monotonic() - start < 120


def test_bare_canonical_bodies_pass_as_completions(humaneval: tuple[Task, list[Problem]]) -> None:
    task, problems = humaneval
    sample = problems[:10]
    grades = grade_all(task, [(p, p.reference["canonical_solution"]) for p in sample])
    assert all(g.correct is True for g in grades), [g.detail for g in grades]


def test_shuffled_pairing_fails(humaneval: tuple[Task, list[Problem]]) -> None:
    _, problems = humaneval
    fast = build_task({"name": "humaneval", "allow_code_execution": True, "timeout_s": 3})
    shifted = problems[1:] + problems[:1]
    pairs = [(p, as_chat_answer(q, q.reference["canonical_solution"])) for p, q in zip(problems, shifted, strict=True)]
    grades = grade_all(fast, pairs)
    passed = [p.problem_id for (p, _), g in zip(pairs, grades, strict=True) if g.correct]
    assert len(passed) <= 2, passed
    assert all(g.correct is not None for g in grades)
