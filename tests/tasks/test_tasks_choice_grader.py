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
        ("A good start: the correct option is C", "C"),
        ("Answer: C\nWait, actually Answer: B", "B"),
        ("I cannot decide.", None),
        ("Answer: E", None),
        # any case where the letter cannot be a word
        ("answer: b", "B"),
        ("ANSWER: D", "D"),
        ("(b)", "B"),
        ("Reasoning...\n\n**(C)**", "C"),
        ("Reasoning...\nD.", "D"),
        ("The answer is a", "A"),
        # explicit statements in other words
        ("The answer is clearly (C)", "C"),
        ("The answer should be C", "C"),
        ("Option B is correct.", "B"),
        ("So the correct one is C.", "C"),
        ("Answer: A is correct", "A"),
        ("Answer: \\(B\\)", "B"),
        ("The final answer is: **B**", "B"),
        # a boxed letter in a font command, or labelling its option's text
        ("\\boxed{(B) 42 kg}", "B"),
        ("\\boxed{B: 42}", "B"),
        ("\\boxed{\\text{B. 42}}", "B"),
        ("\\boxed{\\mathrm{B}}", "B"),
        ("\\boxed{\\mathbf{B}}", "B"),
        ("\\boxed{B.}", "B"),
        # the letter quoted or braced
        ("Answer: `B`", "B"),
        ('Answer: "B"', "B"),
        ("Answer: 'B'", "B"),
        ("Answer: {B}", "B"),
    ],
)
def test_extract_choice(text: str, letter: str | None) -> None:
    assert extract_choice(text) == letter


@pytest.mark.parametrize(
    "text",
    [
        "Option A claims that the rate doubles, but",  # a truncated chain names options
        "First, a C=O bond forms, then",
        "I rule out (A) and (B); (D) remains.",  # no explicit statement of the choice
        "After all that, D",
        "Between A and D, I pick D",
        "So the answer is: A good choice here would be",  # the article "A"
        "The answer is a prime number, so",
        "The answer isn't A; it's",
        # a hedge between letters, a variable in math
        "The answer is B or C",
        "The answer is (B) or (C)",
        "Answer: a or b",
        "Answer: C and D",
        "so the answer is c/2, the speed",
        "The answer is c = 3 \\times 10^8",
        "\\boxed{a + b}",
    ],
)
def test_no_explicit_choice_is_no_answer(text: str) -> None:
    assert extract_choice(text) is None
    assert grade_choice(text, "A").correct is False


def test_long_whitespace_does_not_backtrack() -> None:
    assert extract_choice("answer: " + " " * 5000 + "zzz", "ABCDEFGHIJ") is None


def test_more_letters_for_more_choices() -> None:
    assert extract_choice("Answer: F", "ABCDEF") == "F"


@pytest.mark.parametrize(
    ("text", "letter"),
    [
        ("Answer: C\n\nI", "C"),  # "I" starts a sentence the fixed answer length cut off
        ("Answer: C\n\nA", "C"),
        ("The answer is (C).\n\na", "C"),
        ("I", "I"),  # nothing else names a choice: the bare letter does
        ("Let me think.\n\nA", "A"),
        ("Answer: C\n\n(I)", "I"),  # bracketed or formatted, it is a choice
        ("Answer: C\n\n**I**", "I"),
        ("Answer: C\n\nB", "B"),  # not an English word: the last line decides, as before
    ],
)
def test_a_trailing_english_word_letter_yields_to_a_stated_choice(text: str, letter: str) -> None:
    assert extract_choice(text, "ABCDEFGHIJ") == letter


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


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Answer: Ｂ", "B"),  # full-width letter
        ("Answer：B", "B"),  # full-width colon
        ("The answer is （C）.", "C"),  # full-width brackets
        ("**Answer:** \\boxed{Ｄ}", "D"),
        ("Answer: Ｂ or Ｃ", None),  # still a hedge
        ("Ａ ｇｏｏｄ ｓｔａｒｔ", None),  # still a word, not a choice
    ],
)
def test_full_width_forms_are_read_as_their_ascii_letters(text, expected):
    assert extract_choice(text) == expected


@pytest.mark.parametrize(
    ("text", "letter"),
    [
        # a supposition after a firm answer does not override it
        ("Answer: B\n\nHmm, maybe the answer is C. Let me check the units", "B"),
        ("Answer: B\n\nLet me double-check: if the answer is C, then the mass would be 3 kg, which is wrong.", "B"),
        ("The correct option is (D).\nAssuming the correct option is A, the rate would double.", "D"),
        # a supposition alone is no answer
        ("Suppose the answer is A. Then", None),
        ("So maybe the answer is A, but let me verify this by computing", None),
        ("If the answer is (C), the charge is", None),
        # firm statements, also after a supposition in another sentence
        ("Suppose the answer is A. Then x < 0, a contradiction. So the answer is (B).", "B"),
        ("Let me double-check. The answer is (B).", "B"),
        ("I'd say the answer is C.", "C"),
        ("If we add everything up, the answer is C.", "C"),
        ("Maybe not. Answer: \\boxed{D}", "D"),
    ],
)
def test_a_supposed_answer_is_not_the_choice(text: str, letter: str | None) -> None:
    """As in the math grader: "suppose the answer is A" mid-reasoning is a guess under test."""
    assert extract_choice(text) == letter


@pytest.mark.parametrize(
    ("text", "letter"),
    [
        ("Let me double-check: the answer is C.", "C"),
        ("If so, the answer is B.", "B"),
        ("So, to check: the answer is (B)", "B"),
        ("Having double-checked, the answer is D.", "D"),
        ("Let me check if the answer is C", None),
    ],
)
def test_a_firm_answer_after_a_check_is_the_choice(text, letter):
    """The shared supposition check read 'check' and 'if' before a colon or in 'if so' as a supposition."""
    assert extract_choice(text) == letter
