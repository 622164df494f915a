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


DEMOS = {
    "failing assert": "\n\n# Example usage\nassert {ep}(None) == 12345\n",
    "input()": "\n\nargs = input('Enter: ')\nprint({ep}(args))\n",
    "cut mid-line": "\n\n# Test the function\nprint({ep}([1, 2",
    "unittest.main()": "\n\nimport unittest\n\nclass T(unittest.TestCase):\n    pass\n\nunittest.main()\n",
}


@pytest.mark.parametrize("demo", sorted(DEMOS))
def test_example_usage_in_the_solution_block_does_not_decide(humaneval: tuple[Task, list[Problem]], demo: str) -> None:
    """A chat answer's demo after the function (wrong asserts, input(), a cut line) is not graded."""
    task, problems = humaneval
    sample = problems[:12]
    pairs = []
    for p in sample:
        tail = DEMOS[demo].format(ep=p.reference["entry_point"])
        pairs.append((p, as_chat_answer(p, p.reference["canonical_solution"].rstrip() + tail)))
        wrong = as_chat_answer(p, "    return None" + tail)  # a wrong function stays wrong
        pairs.append((p, wrong))
    grades = grade_all(task, pairs)
    assert [g.correct for g in grades] == [True, False] * len(sample), [g.detail for g in grades]
