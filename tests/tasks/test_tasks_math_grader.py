"""Math answer extraction and equivalence (math-verify), and AIME's integer rule."""

from __future__ import annotations

import logging
import threading

import pytest

from presto.tasks import math_grader
from presto.tasks.base import cut_at_stop
from presto.tasks.math_grader import (
    extract_boxed,
    extract_boxed_all,
    extract_math_answer,
    grade_integer,
    grade_math,
    math_equal,
    parse_integer,
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("so $\\boxed{5}$.", "5"),
        ("\\boxed{\\frac{1}{2}}", "\\frac{1}{2}"),
        ("nested \\boxed{\\sqrt{\\frac{a}{b}}} end", "\\sqrt{\\frac{a}{b}}"),
        ("first \\boxed{1} then \\boxed{2}", "2"),
        ("\\fbox{7}", "7"),
        ("\\boxed 42 is it", "42"),
        ("braces \\boxed{\\{1, 2\\}}", "\\{1, 2\\}"),
        ("unclosed \\boxed{3", None),
        ("no box here", None),
        ("\\boxed{5}. Put your final answer within \\boxed{}.", "5"),  # an echoed empty box is no answer
    ],
)
def test_extract_boxed(text: str, expected: str | None) -> None:
    assert extract_boxed(text) == expected


def test_extract_boxed_all_keeps_order() -> None:
    assert extract_boxed_all("\\fbox{a} \\boxed{b} \\fbox{c}") == ["a", "b", "c"]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Thus the final answer is 12.", "12"),
        ("The answer is $\\frac{3}{4}$.", "\\frac{3}{4}"),
        ("Answer: -7", "-7"),
        ("The answer is 3 but boxed \\boxed{4}", "4"),
        # math after the phrase is the whole answer, not the sentence's last number
        ("The final answer is $\\frac{3}{4}$. I hope it is correct.", "\\frac{3}{4}"),
        ("Final Answer: The final answer is $\\frac{1}{2}$. I hope it is correct.", "\\frac{1}{2}"),
        ("**Answer:** $\\frac{1}{2}$", "\\frac{1}{2}"),
        ("Answer: \\(x^2\\)", "x^2"),
        # markdown bold around the phrase or the value
        ("The answer is **5**.", "5"),
        ("**Final Answer:** 17", "17"),
        ("**Answer: 12**", "12"),
        ("The final answer is: **B**", "B"),
        # the value ends with its sentence, a parenthetical or an explaining clause
        ("Answer: 17 (since 2+15).", "17"),
        ("The answer is 5, which is prime.", "5"),
        ("The answer is 42 because 6*7=42.", "42"),
        ("The answer is 2.5. Done.", "2.5"),
        ("Answer:\n17", "17"),
        ("The answer is x = $5$.", "5"),
        ("The answer is (1, 2).", "(1, 2)"),
        ("The answer is 4. Wait, the answer is", "4"),  # the last statement with a value
        # an adverb between the phrase and the value is not part of the value
        ("My answer is therefore 12.", "12"),
        ("The answer is thus $\\frac{1}{2}$.", "\\frac{1}{2}"),
        ("The answer is simply **7**.", "7"),
        ("Answer: therefore, 12", "12"),
    ],
)
def test_extract_math_answer_statements(text: str, expected: str | None) -> None:
    assert extract_math_answer(text) == expected


def test_many_unclosed_boxes_match_their_braces_in_one_pass(monkeypatch) -> None:
    """Scanning to the end from each of n unclosed boxes took O(n^2): 140K characters, 2 minutes."""
    passes = []
    one_pass = math_grader._closing_braces
    monkeypatch.setattr(math_grader, "_closing_braces", lambda text: passes.append(len(text)) or one_pass(text))
    assert extract_boxed_all("\\boxed{" * 7000 + "\\boxed{5}") == ["5"]
    assert passes == [7001 * len("\\boxed{") + 2]  # the text's braces are matched once, for all 7001 boxes


@pytest.mark.parametrize(
    "text",
    [
        "Let me guess: suppose the answer is 204, then m+n would have to be even, so let me che",
        "If the answer is 12, the area would be",
        "We check whether the answer is 7 by",
        "Maybe the answer is 3? Then",
        "Assuming the final answer is 5, we",
        "Let's say the answer is 9, and see",
    ],
)
def test_a_supposed_answer_is_none(text: str) -> None:
    assert extract_math_answer(text) is None


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Let me double-check. The answer is 204.", "204"),  # the marker is in another sentence
        ("If we add everything up, the answer is 204.", "204"),  # the marker is further back
        ("Suppose the answer is 5, then x < 0. So the answer is 7.", "7"),
    ],
)
def test_a_stated_answer_after_a_supposition(text: str, expected: str) -> None:
    assert extract_math_answer(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "we get 3 apples, then 1,250 more",  # no stated answer: no last-number fallback
        "x equals 2.5 in the end",
        "Let me compute. $x = 2^{3}$ so we need more steps and",  # a truncated chain
        "so \\boxed{\\frac{1}{2}",  # an unclosed box is a truncated answer
        "The answer is $\\frac{1}{2",
        "nothing numeric",
        "I will put the answer in \\boxed{}.",
    ],
)
def test_an_unstated_answer_is_none(text: str) -> None:
    assert extract_math_answer(text) is None
    assert grade_math(text, "2").correct is False


@pytest.mark.parametrize(
    ("reference", "predicted"),
    [
        ("\\frac{1}{2}", "0.5"),
        ("\\frac{1}{2}", "\\dfrac{1}{2}"),
        ("\\dfrac{1}{2}", "\\frac12"),
        ("-\\frac{7}{8}", "-0.875"),
        ("10", "10\\text{ cm}"),
        ("10\\text{ inches}", "10"),
        ("90^\\circ", "90"),
        ("1,000", "1000"),
        ("\\frac{\\sqrt{2}}{2}", "\\sqrt{2}/2"),
        ("(3, \\frac{\\pi}{2})", "\\left( 3, \\frac{\\pi}{2} \\right)"),
        ("x^2+1", "1+x^2"),
        ("\\text{Evelyn}", "Evelyn"),
        ("$\\dfrac{79}{173}$", "\\frac{79}{173}"),
        # a number and its unit inside one \\text{} (math-verify alone reads the string "5cm")
        ("5", "\\text{5 cm}"),
        ("18", "\\text{18 inches}"),
        ("1250", "\\textbf{1,250 dollars}"),
        ("\\frac{5}{2}", "\\text{2.5 hours}"),
        ("10\\text{ cm}", "\\mbox{10 cm}"),
        ("\\text{5 cm}", "5"),
    ],
)
def test_equivalent_answers(reference: str, predicted: str) -> None:
    assert math_equal(reference, predicted) is True


@pytest.mark.parametrize(
    ("reference", "predicted"),
    [
        ("\\frac{3}{4}", "0.76"),
        ("\\frac{14}{3}", "4.6667"),
        ("2", "3"),
        ("x^2+1", "x^2-1"),
        ("\\sqrt{2}", "2"),
        ("(1, 2)", "(2, 1)"),
        ("6", "\\text{5 apples}"),
        # a phrase that qualifies the number, or a second number, is not a unit
        ("5", "\\text{5 or more}"),
        ("5", "\\text{5 or 6}"),
        ("5", "\\text{5 to 6 cm}"),
    ],
)
def test_non_equivalent_answers(reference: str, predicted: str) -> None:
    assert math_equal(reference, predicted) is False


def test_grade_math_text_around_the_box_and_several_boxes() -> None:
    completion = "Step 1: try \\boxed{2}. That fails. Step 2: ... so the answer is $\\boxed{\\dfrac{3}{2}}$. Done!"
    grade = grade_math(completion, "1.5")
    assert grade.correct is True and grade.extracted == "\\dfrac{3}{2}"
    assert grade_math("I am not sure.", "1.5").correct is False
    assert grade_math("\\boxed{}", "1.5").correct is False


def test_grade_math_after_eos_is_ignored() -> None:
    completion = cut_at_stop("\\boxed{5}<|im_end|>garbage \\boxed{6}")
    assert grade_math(completion, "5").correct is True
    assert grade_math(cut_at_stop("\\boxed{6}</s>\\boxed{5}"), "5").correct is False


def test_unparseable_reference_is_compared_as_text(caplog: pytest.LogCaptureFixture) -> None:
    """Every prediction gets a verdict: grading only those that match the text would bias accuracy up."""
    with caplog.at_level(logging.WARNING, logger="presto.tasks.math_grader"):
        assert grade_math("\\boxed{5}", "\\unknowncommand{").correct is False
        assert grade_math("\\boxed{6}", "\\unknowncommand{").correct is False
        assert grade_math("\\boxed{\\unknowncommand{}", "\\unknowncommand{").correct is False  # unclosed box
    assert grade_math("\\boxed{17}", "\\ldots").correct is False
    assert grade_math("\\boxed{\\ldots}", "\\ldots").correct is True
    warnings = [r for r in caplog.records if "\\\\unknowncommand{" in r.getMessage()]
    assert len(warnings) == 1, "a reference compared as text only is reported, once"


@pytest.mark.parametrize("reference", ["\\frac ab", "\\frac{a}b", "\\dfrac a b"])
def test_loose_frac_references_are_parsed(reference: str) -> None:
    assert math_equal(reference, "\\frac{a}{b}") is True
    assert math_equal(reference, "a/b") is True
    assert math_equal(reference, "\\frac{b}{a}") is False


def test_math_verify_works_off_the_main_thread() -> None:
    results: list[bool | None] = []
    thread = threading.Thread(target=lambda: results.append(math_equal("\\frac{1}{2}", "0.5")))
    thread.start()
    thread.join()
    assert results == [True]


@pytest.mark.parametrize(
    ("text", "value"),
    [("033", 33), ("1,000", 1000), ("70^\\circ", 70), ("12.0", 12), ("$204$", 204), ("\\text{}5", 5),
     ("3.5", None), ("\\frac{1}{2}", None), ("", None),
     # wrappers keep their content; the right-hand side of an equation is the answer
     ("\\text{33}", 33), ("\\textbf{33}", 33), ("\\mathrm{33}", 33), ("\\mathbf{33}", 33), ("n = 33", 33),
     ("m+n=33", 33), ("\\$33", 33), ("33 \\text{ ways}", 33), ("33^{\\circ}", 33), ("1{,}000", 1000),
     ("32,\\!348", 32348), ("-33", -33), ("+33", 33),
     # separate numbers are never glued together
     ("3, 3", None), ("3,3", None), ("1 \\text{ and } 33", None), ("1\\,000", None), ("1,0000", None),
     ("\\text{(A) } 33", None), ("33x", None), ("2^5+1", None)],
)  # fmt: skip
def test_parse_integer(text: str, value: int | None) -> None:
    assert parse_integer(text) == value


def test_a_runaway_integer_is_no_answer() -> None:
    """int() raises ValueError past 4300 digits; no answer has 100."""
    assert parse_integer("9" * 100) == int("9" * 100)
    assert parse_integer("9" * 101) is None
    assert grade_integer("\\boxed{" + "1" * 4301 + "}", 33).correct is False
    assert grade_integer("The answer is " + "7" * 5000 + ".", 33).correct is False


def test_grade_integer() -> None:
    assert grade_integer("so \\boxed{033}", 33).correct is True
    assert grade_integer("so \\boxed{33.5}", 33).correct is False
    assert grade_integer("so \\boxed{34}", 33).correct is False
    assert grade_integer("no idea", 33).correct is False
    assert grade_integer("\\boxed{1}", "not a number").correct is None


@pytest.mark.parametrize(
    "completion",
    ["\\boxed{\\text{33}}", "\\boxed{\\textbf{33}}", "\\boxed{n = 33}", "\\boxed{m+n=33}", "\\boxed{\\$33}",
     "**Final Answer:** 33", "The answer is **33**.", "Answer: 33 (from 3 + 30).", "\\boxed{\\text{33 ways}}",
     "The answer is therefore 33."],
)  # fmt: skip
def test_grade_integer_accepts_how_models_write_33(completion: str) -> None:
    assert grade_integer(completion, 33).correct is True


@pytest.mark.parametrize(
    ("completion", "reference"),
    [("\\boxed{3, 3}", 33), ("\\boxed{1 \\text{ and } 33}", 133), ("so m+n = 33", 33), ("... we get 33", 33)],
)
def test_grade_integer_never_guesses(completion: str, reference: int) -> None:
    assert grade_integer(completion, reference).correct is False


@pytest.mark.parametrize(
    ("text", "reference", "correct"),
    [
        ("The answer is $５$.", "5", True),  # full-width digit
        ("The answer is ５.", "5", True),
        ("\\boxed{１２}", "12", True),
        ("Answer：12", "12", True),  # full-width colon
        ("The answer is $\\frac{１}{２}$.", "\\frac{1}{2}", True),
        ("The answer is $x²$.", "x2", False),  # a superscript is not a full-width form: x² is not x2
    ],
)
def test_full_width_forms_are_read_as_ascii(text, reference, correct):
    assert grade_math(text, reference).correct is correct


def test_a_full_width_integer_answer_is_graded_as_its_digits():
    assert grade_integer("Answer：０３３", 33).correct is True


@pytest.mark.parametrize(
    ("text", "reference", "extracted"),
    [
        # a dollar sign before an amount, with no closing "$" in its sentence: currency, not math
        ("At first I got that the answer is 40, but I forgot the tax. Adding it, the final answer is $44.", "44", "44"),
        ("The answer is $28,080.", "28080", "28,080"),
        ("The answer is $12.50 per hour.\nDone", "12.5", "12.50 per hour"),
        ("Answer: $ 7", "7", "7"),
        ("The final answer is $44. The price was $x$ before.", "44", "44"),
        # math that closes is still math, an escaped dollar still an amount
        ("The answer is $44$.", "44", "44"),
        ("The answer is $5 \\cdot 3$.", "15", "5 \\cdot 3"),
        ("The answer is \\$12.", "12", "\\$12"),
    ],
)
def test_a_currency_dollar_is_not_unclosed_math(text: str, reference: str, extracted: str) -> None:
    grade = grade_math(text, reference)
    assert grade.extracted == extracted
    assert grade.correct is True


@pytest.mark.parametrize(
    "text",
    [
        "The answer is $\\frac{1}{",  # math cut at the end of the text stays truncated
        "The answer is $\\sqrt{2",
        "The answer is $x + 1",
    ],
)
def test_truncated_math_after_a_dollar_is_still_no_answer(text: str) -> None:
    assert extract_math_answer(text) is None


@pytest.mark.parametrize(
    ("text", "reference", "correct"),
    [
        ("The answer is 44 pebbles.", "44", True),
        ("The answer is 44 apples.", "44", True),
        ("\\boxed{44 pebbles}", "44", True),
        ("The answer is 12 people.", "12", True),
        ("The answer is 12 dollars.", "12", True),
        ("\\boxed{1,250 square feet}", "1250", True),
        ("\\boxed{2.5 hours}", "\\frac{5}{2}", True),
        ("The answer is 12 people.", "13", False),
        # symbolic answers and qualifying phrases are not units
        ("\\boxed{2x}", "2", False),
        ("\\boxed{2 x}", "2", False),
        ("\\boxed{12 pi}", "12", False),
        ("\\boxed{2 sin x}", "2", False),
        ("\\boxed{44 percent}", "0.44", True),  # math-verify reads "percent" as %
        ("\\boxed{5 or 6 people}", "5", False),
        ("\\boxed{x + 1}", "x+1", True),
        ("\\boxed{n = 3}", "3", True),
        ("\\boxed{\\pi}", "\\pi", True),
        ("\\boxed{i}", "i", True),
        ("\\boxed{[2, 5)}", "[2, 5)", True),
        ("\\boxed{\\{1, 2\\}}", "\\{1, 2\\}", True),
        ("\\boxed{\\text{Evelyn}}", "\\text{Evelyn}", True),
    ],
)
def test_a_plain_word_unit_after_a_number(text: str, reference: str, correct: bool) -> None:
    """math-verify reads "12 people" as a product of symbols; the unit words are not the answer."""
    assert grade_math(text, reference).correct is correct


@pytest.mark.parametrize(
    ("text", "reference", "extracted"),
    [
        ("So the answer is 44!", "44", "44"),
        ("The answer is 44! Great.", "44", "44"),
        # in math or a box, "!" is a factorial
        ("The answer is $5!$", "120", "5!"),
        ("The answer is $5!$.", "120", "5!"),
        ("\\boxed{5!}", "120", "5!"),
    ],
)
def test_an_exclamation_mark_ends_a_plain_answer(text: str, reference: str, extracted: str) -> None:
    grade = grade_math(text, reference)
    assert grade.extracted == extracted
    assert grade.correct is True


def test_an_exclamation_mark_after_an_integer_answer() -> None:
    assert grade_integer("The answer is 42!", 42).correct is True
    assert grade_integer("The answer is 42!", 43).correct is False


@pytest.mark.parametrize(
    ("text", "gold", "correct"),
    [
        ("The answer is 4! = 24.", "24", True),  # a factorial the answer goes on from
        ("So the answer is 10! / (2! 8!) = 45.", "45", True),
        ("The answer is 4! = 24.", "4", False),
        ("The answer is 44! Great.", "44", True),
        ("The answer is 3 million.", "3", False),  # scale words are no units
        ("The answer is 5 dozen.", "5", False),
        ("The answer is 10 factorial.", "10", False),
        ("The answer is 12 cm.", "12", True),
    ],
)
def test_a_factorial_or_a_scale_word_after_the_number_is_part_of_the_answer(text, gold, correct):
    """Second review of the '!' and unit fixes: '4! = 24' was cut at '4', '3 million' read as 3."""
    assert grade_math(text, gold).correct is correct
