"""Review of the math and choice graders: answers graded wrong (or right) by accident."""

from __future__ import annotations

import pytest

from presto.tasks.choice_grader import extract_choice
from presto.tasks.math_grader import extract_math_answer, grade_integer, grade_math, parse_integer


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # an escaped dollar inside the math does not close it
        ("The answer is $\\$18.90$.", "\\$18.90"),
        ("So the total is $\\$5$ in all. Answer: $\\$5$", "\\$5"),
        ("The answer is x = $\\$7$.", "\\$7"),
    ],
)
def test_an_escaped_dollar_does_not_end_the_math(text: str, expected: str) -> None:
    assert extract_math_answer(text) == expected


def test_a_dollar_amount_in_math_is_graded_by_value() -> None:
    assert grade_math("The answer is $\\$18.90$.", "\\$18.90").correct is True


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("The final answer is:\n\n$$\\frac{1}{2}$$", "\\frac{1}{2}"),
        ("**Final Answer:**\n\n\\[ 17 \\]", "17"),
        ("Answer:\n\n17", "17"),
    ],
)
def test_an_answer_after_a_blank_line(text: str, expected: str) -> None:
    assert extract_math_answer(text) == expected


@pytest.mark.parametrize(
    "answer",
    ["x = 3 \\text{ or } x = 33", "x = 3 or x = 33", "n=3 \\text{ or } n=33", "x = 3 \\text{ and/or } x = 33"],
)
def test_an_integer_hedge_between_equations_is_no_integer(answer: str) -> None:
    """A hedge is never credited: "3 or 33" is not an integer, and neither is "x = 3 or x = 33"."""
    assert parse_integer(answer) is None
    assert grade_integer(f"\\boxed{{{answer}}}", 33).correct is False


@pytest.mark.parametrize(
    ("answer", "value"),
    [("m+n = 12+21 = 33", 33), ("m = 1, n = 32, m+n = 33", 33), ("x = 33 \\text{ or more}", 33)],
)
def test_a_chain_of_equations_still_gives_its_right_hand_side(answer: str, value: int) -> None:
    assert parse_integer(answer) == value


@pytest.mark.parametrize(
    "text",
    [
        "Answer: B, C",
        "Answer: B,C",
        "Answer: B/C",
        "Answer: B & C",
        "Answer: A, B and D",
        "The answer is (B), (C)",
        "answer: a, b",
        "Answer: \\boxed{B, C}",
        "Answer: B and/or C",
        "The answer is (A), (B) or (D).",
    ],
)
def test_two_letters_are_a_hedge(text: str) -> None:
    """Listing two letters is no answer, as "B or C" is: either would credit the right one by chance."""
    assert extract_choice(text) is None


@pytest.mark.parametrize(
    ("text", "letter"),
    [
        ("The answer is B, I think.", "B"),  # "I" is a word there
        ("The answer is B, a classic result.", "B"),
        ("The answer is B, C is wrong because", "B"),  # a new clause about another option
        ("The answer is (B), A is wrong.", "B"),
        ("The answer is D, B and C are wrong.", "D"),
        ("The answer is (D); (B) and (C) are wrong.", "D"),
        ("The answer is B, because", "B"),
        ("Answer: B.", "B"),
    ],
)
def test_a_letter_then_a_comma_is_still_a_choice(text: str, letter: str) -> None:
    assert extract_choice(text) == letter


@pytest.mark.parametrize(
    "text",
    [
        "The answer is $5$ or $6$.",
        "The answer is either $5$ or $6$.",
        "The answer is $5$, or $6$ if n is odd.",
        "The answer is **$5$** or $6$.",
        "Answer: \\(5\\) or \\(6\\)",
    ],
)
def test_two_math_answers_offered_are_a_hedge_not_the_first_or_last(text):
    # Before: the first (or, after "either", the last) math was the answer, so a hedge was credited.
    assert not grade_math(text, "5").correct and not grade_math(text, "6").correct
    assert not grade_integer(text, 5).correct and not grade_integer(text, 6).correct


@pytest.mark.parametrize(
    "text", ["The answer is $5$ or more.", "The answer is **$5$**.", "x = $3$, so the answer is $5$."]
)
def test_one_math_answer_is_still_read(text):
    assert grade_math(text, "5").correct and grade_integer(text, 5).correct


def test_a_list_answer_is_read_to_its_last_item():
    # Before: the clause cut-off stopped at ", and", so "5, 6, and 7" was read as "5, 6".
    text = "The answer is 5, 6, and 7."
    assert extract_math_answer(text) == "5, 6, and 7"
    assert not grade_math(text, "5, 6").correct
    assert extract_math_answer("The answer is 17, and that is final.") == "17"


@pytest.mark.parametrize(
    "text", ["I'd say the answer is 12.", "I would say the answer is 12.", "So I say the answer is 12."]
)
def test_a_stated_opinion_is_an_answer(text):
    # Before: "say" marked the phrase a supposition, so the answer went ungraded (wrong).
    assert extract_math_answer(text) == "12" and grade_integer(text, 12).correct


@pytest.mark.parametrize("text", ["Say the answer is 12, then x = 3.", "Let's say the answer is 12; then"])
def test_a_supposition_with_say_is_still_none(text):
    assert extract_math_answer(text) is None
