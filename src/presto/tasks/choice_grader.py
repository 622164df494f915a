"""Multiple-choice grading: find the letter the model chose, robustly but conservatively.

Models rarely obey "Answer: X" to the letter, so several forms are accepted, in order of
how explicit they are; the loosest one (a lone capital letter) skips the article "A" in
"A good start ...", which would otherwise be read as a choice.
"""

from __future__ import annotations

import re

from presto.tasks.base import Grade


def _patterns(letters: str) -> list[re.Pattern[str]]:
    cls = f"(?-i:[{letters}])"
    return [
        # "Answer: C", "final answer is (C)", "**Answer:** C", "answer: $\boxed{C}$"
        re.compile(
            rf"answer\s*(?:is|:|=)?\s*[:\-]?\s*(?:\*\*|__)?\s*[:\-]?\s*(?:\$?\\boxed\{{\s*(?:\\text\{{)?)?"
            rf"[\(\[]?\s*({cls})\s*[\)\]]?(?![A-Za-z])",
            re.IGNORECASE,
        ),
        re.compile(rf"\\boxed\{{\s*(?:\\text(?:bf)?\{{)?\s*\(?({cls})\)?\s*\}}"),
        re.compile(rf"(?:option|choice)\s+\(?({cls})\)?(?![A-Za-z])", re.IGNORECASE),
        re.compile(rf"\(({cls})\)"),
        re.compile(rf"(?<![A-Za-z0-9'])({cls})(?![A-Za-z0-9'])(?!\s+[a-z])"),
    ]


def extract_choice(text: str, letters: str = "ABCD") -> str | None:
    """The chosen letter: the last match of the most explicit form that occurs at all."""
    for pattern in _patterns(letters):
        matches = pattern.findall(text)
        if matches:
            letter = matches[-1].upper()
            if letter in letters:
                return letter
    return None


def grade_choice(completion: str, reference: str, letters: str = "ABCD") -> Grade:
    """Grade a multiple-choice completion against the correct letter."""
    extracted = extract_choice(completion, letters)
    if extracted is None:
        return Grade(False, None, "no choice letter found")
    return Grade(extracted == reference, extracted, "" if extracted == reference else f"expected {reference}")
