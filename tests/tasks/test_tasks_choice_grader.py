"""Multiple-choice letter extraction."""

from __future__ import annotations

import pytest

from presto.tasks.choice_grader import extract_choice, grade_choice
from presto.tasks.prompts import choice_prompt


@pytest.mark.parametrize(
    ("text", "letter"),
    [
        ("Reasoning...\nAnswer: C", "C"),
        ("The answer is (B).", "B"),
        ("the answer is a bit subtle, but Answer: D", "D"),
        ("**Answer:** A", "A"),
        ("Final answer: $\\boxed{C}$", "C"),
        ("\\boxed{\\text{B}}", "B"),
        ("I rule out (A) and (B); (D) remains.", "D"),
        ("A good start: the correct option is C", "C"),
        ("After all that, D", "D"),
        ("Answer: C\nWait, actually Answer: B", "B"),
        ("I cannot decide.", None),
        ("Answer: E", None),
    ],
)
def test_extract_choice(text: str, letter: str | None) -> None:
    assert extract_choice(text) == letter


def test_more_letters_for_more_choices() -> None:
    assert extract_choice("Answer: F", "ABCDEF") == "F"


def test_grade_choice() -> None:
    assert grade_choice("... Answer: B", "B").correct is True
    assert grade_choice("... Answer: C", "B").correct is False
    graded = grade_choice("no letter", "B")
    assert graded.correct is False and graded.extracted is None


def test_choice_prompt_lists_letters_and_asks_for_the_format() -> None:
    messages, raw = choice_prompt("Which?", ["x", "y", "z", "w"])
    content = messages[-1]["content"]
    assert "(A) x\n(B) y\n(C) z\n(D) w" in content
    assert '"Answer: X"' in content and "A, B, C or D" in content
    assert raw.endswith("Solution:")
